#!/usr/bin/env python3
"""Reference data for Wan2.2 (two-expert A14B, TI2V-5B) and image-to-video (Wan2.1-I2V,
Wan2.2-I2V-A14B), produced by the pinned diffusers itself (float32, CPU), with tiny models.

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers
(0.40.0.dev0, commit 58eb52c0803e) are available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_wan22.py

It rewrites these folders (each deleted first, so a rerun leaves nothing stale):

  tests/data/wan22_a14b_tiny/        save_pretrained of a WanPipeline: model_index.json
                                     (boundary_ratio 0.875, expand_timesteps false; text_encoder,
                                     tokenizer, vae null), transformer/ and transformer_2/ (two
                                     tiny WanTransformer3DModel, different weights, 16 channels),
                                     scheduler/ (UniPC, flow sigmas, flow_shift 3.0: the settings
                                     diffusers' Wan conversion publishes for Wan2.2-T2V-A14B);
    forward_inputs.safetensors       hidden_states [B,16,F,H,W] f32, timestep [B] i64,
                                     encoder_hidden_states [B,L,text_dim] f32;
    forward_output_transformer.safetensors, forward_output_transformer_2.safetensors
                                     sample of each expert on those same inputs;
    generate_inputs.safetensors      prompt_embeds, negative_prompt_embeds, init_latents;
    generate_unipc.safetensors       latents after `steps` steps of WanPipeline.__call__ itself
                                     (prompt_embeds given, output_type "latent", CFG with
                                     guidance_scale on `transformer` while t >= boundary_ratio *
                                     num_train_timesteps and guidance_scale_2 on `transformer_2`
                                     after), latents_per_step [steps,B,C,F,H,W], timesteps i64,
                                     sigmas f32, expert i64 per step (0 = transformer,
                                     1 = transformer_2, read from hooks on the two models);
    meta.json                        as in wan_tiny_a plus boundary_ratio, boundary_timestep,
                                     guidance_2, steps per expert.

  tests/data/wan22_ti2v_tiny/        save_pretrained of a WanPipeline with expand_timesteps true
                                     and one transformer with in = out = 48 channels; vae/ holds
                                     only the config.json of a tiny AutoencoderKLWan shaped as
                                     Wan2.2-TI2V publishes it (z_dim 48, patch 2, 16x spatial, 4x
                                     temporal, residual blocks, the published latents_mean/std);
                                     its weights are left out (they are random and only serve to
                                     encode the conditioning image below), so from_pretrained needs
                                     a `vae=` argument;
    forward_inputs.safetensors       hidden_states [B,48,F,H,W], timestep [B,tokens] f32 built as
                                     the pipelines build it (item 0: first-frame tokens 0, the
                                     rest t, as in image-to-video; item 1: t everywhere),
                                     encoder_hidden_states;
    forward_output.safetensors       sample;
    generate_inputs.safetensors      prompt_embeds, negative_prompt_embeds, init_latents;
    generate_t2v_unipc.safetensors   WanPipeline.__call__ (expand_timesteps path: per-token
                                     timestep, all t) latents, latents_per_step, timesteps, sigmas;
    generate_i2v_inputs.safetensors  image_latents [B,48,1,h,w]: the normalized VAE encoding of a
                                     seeded image, as WanImageToVideoPipeline computed and used it
                                     (recorded from its prepare_latents);
    generate_i2v_unipc.safetensors   WanImageToVideoPipeline.__call__ (expand_timesteps: the first
                                     latent frame held to image_latents, its tokens at timestep 0)
                                     latents (first frame replaced as the pipeline does before
                                     decoding), latents_per_step (the scheduler's latents, before
                                     that replacement), timesteps, sigmas;
    meta.json.

  tests/data/wan21_i2v_tiny/
    model/                           save_pretrained of a tiny Wan2.1-I2V WanTransformer3DModel:
                                     in_channels 36 (16 noise + 4 mask + 16 condition), out 16,
                                     image_dim set, added_kv_proj_dim = inner dim;
    forward_inputs.safetensors       hidden_states [B,36,F,H,W], timestep [B] i64,
                                     encoder_hidden_states [B,512,text_dim] (the attention
                                     processor takes all but the last 512 context tokens as image
                                     tokens, so the text is exactly 512 tokens),
                                     encoder_hidden_states_image [B,n_img,image_dim];
    forward_output.safetensors       sample;
    generate_inputs.safetensors      prompt_embeds, negative_prompt_embeds [1,512,text_dim],
                                     init_latents [1,16,F,h,w], image_embeds [1,n_img,image_dim]
                                     (what the pipeline's encode_image returns, in place of CLIP),
                                     image_latents [1,16,F,h,w]: the pipeline's latent_condition
                                     (the normalized encoding, by a tiny Wan2.1-shaped VAE, of a
                                     seeded image followed by zero frames), recorded from its
                                     prepare_latents;
    generate_unipc.safetensors       WanImageToVideoPipeline.__call__ (CFG; each step's input is
                                     latents ++ the 4-channel first-frame mask ++ image_latents)
                                     latents, latents_per_step, timesteps, sigmas;
    meta.json.

  tests/data/wan22_i2v_a14b_tiny/    save_pretrained of a WanImageToVideoPipeline: two experts
                                     with in_channels 36, no image encoder, boundary_ratio 0.9 (as
                                     published for Wan2.2-I2V-A14B), vae/text_encoder/tokenizer null,
                                     UniPC flow_shift 3.0;
    forward_inputs.safetensors       hidden_states [B,36,F,H,W], timestep [B] i64,
                                     encoder_hidden_states;
    forward_output_transformer.safetensors, forward_output_transformer_2.safetensors;
    generate_inputs.safetensors      prompt_embeds, negative_prompt_embeds, init_latents,
                                     image_latents (as for Wan2.1-I2V; no image_embeds);
    generate_unipc.safetensors       WanImageToVideoPipeline.__call__ across the boundary
                                     (guidance / guidance_2), latents, latents_per_step,
                                     timesteps, sigmas, expert per step;
    meta.json.

`--only NAME[,NAME]` rewrites only those folders (wan22_a14b_tiny, wan22_ti2v_tiny,
wan21_i2v_tiny, wan22_i2v_a14b_tiny).

After writing, every folder is reloaded with from_pretrained and its forward outputs (and the
A14B and TI2V generates) are reproduced bit for bit. Everything is seeded, so a rerun on the same
torch build reproduces the files.
"""

import json
import math
import os
import sys

# Everything is local; never wait on a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import (
    AutoencoderKLWan,
    UniPCMultistepScheduler,
    WanImageToVideoPipeline,
    WanPipeline,
    WanTransformer3DModel,
)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The Wan2.1 goldens' parameter draws and sanity checks, shared so both sets follow one rule.
from make_goldens import (MIN_BLOCK_CHANGE, TRAIN_TIMESTEPS, block_changes, folder_size, fresh_dir,  # noqa: E402
                          redraw_parameters, rel_change)

MAX_FOLDER_BYTES = 600_000
TEXT_CONTEXT = 512  # WanAttnProcessor's hard-coded text length when image K/V projections exist
CROSS_ATTN_SHARPEN = 1.8

# Published settings, as diffusers' scripts/convert_wan_to_diffusers.py writes them.
A14B_BOUNDARY = 0.875
I2V_A14B_BOUNDARY = 0.9
A14B_SHIFT = 3.0
TI2V_SHIFT = 5.0

# The Wan2.2 VAE's per-channel latent statistics as published for Wan2.2-TI2V-5B.
VAE22_LATENTS_MEAN = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891,
    0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723,
    -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
]
VAE22_LATENTS_STD = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
    0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
    0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
]

# Tiny VAE of the Wan2.1 shape (z_dim 16, 8x spatial, 4x temporal, the class's default latent
# statistics, which are Wan2.1's): Wan2.1-I2V and Wan2.2-I2V-A14B encode their image with it.
TINY_VAE21 = dict(
    base_dim=8,
    z_dim=16,
    dim_mult=[1, 2, 4, 4],
    num_res_blocks=1,
    attn_scales=[],
    temperal_downsample=[False, True, True],
    dropout=0.0,
)
# Tiny VAE of the published Wan2.2 shape: patch 2 then three 2x downsamples = 16x spatial,
# two temporal downsamples = 4x temporal, residual down/up blocks, 48 latent channels.
TINY_VAE22 = dict(
    TINY_VAE21,
    decoder_base_dim=8,
    z_dim=48,
    latents_mean=VAE22_LATENTS_MEAN,
    latents_std=VAE22_LATENTS_STD,
    is_residual=True,
    in_channels=12,
    out_channels=12,
    patch_size=2,
    scale_factor_temporal=4,
    scale_factor_spatial=16,
)
I2V_SHIFT = 3.0  # Wan2.1-I2V at 480p, as diffusers' examples set it


def tiny_model(**over):
    cfg = dict(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=16,
        out_channels=16,
        text_dim=24,
        freq_dim=32,
        ffn_dim=64,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        eps=1e-6,
        rope_max_seq_len=64,
    )
    cfg.update(over)
    return cfg


A14B = dict(
    model=tiny_model(),
    seeds=(2201, 2202),
    batch=2,
    text_len=7,
    latent=(3, 4, 6),
    # Different per batch item, so per-sample time conditioning is exercised.
    timestep=[757, 312],
    gen_batch=1,
    # Six steps at shift 3 give timesteps 999 937 | 857 750 600 376: two on each side of 875 at
    # least, so both experts and both guidance scales are exercised.
    steps=6,
    guidance=4.0,
    guidance_2=3.0,
    seed=2203,
)

TI2V = dict(
    model=tiny_model(in_channels=48, out_channels=48),
    model_seed=2211,
    vae_seed=2212,
    batch=2,
    text_len=7,
    latent=(3, 4, 6),
    timestep=[757, 312],
    # Item 0 as image-to-video builds it (first latent frame's tokens at 0), item 1 as
    # text-to-video (every token at t).
    first_frame_zero=[True, False],
    steps=4,
    guidance=5.0,
    seed=2213,
)

WAN21_I2V = dict(
    model=tiny_model(in_channels=36, out_channels=16, text_dim=16, image_dim=20, added_kv_proj_dim=32),
    model_seed=2221,
    batch=2,
    n_img=5,
    latent=(3, 4, 6),
    timestep=[757, 312],
    seed=2222,
    vae_seed=2223,
    steps=4,
    guidance=5.0,
)

I2V_A14B = dict(
    model=tiny_model(in_channels=36, out_channels=16),
    seeds=(2231, 2232),
    batch=2,
    text_len=7,
    latent=(3, 4, 6),
    timestep=[957, 612],
    seed=2233,
    vae_seed=2234,
    steps=6,
    guidance=4.0,
    guidance_2=3.0,
)


# ---------------------------------------------------------------------------------------------
# Helpers


def published_unipc(shift):
    """The scheduler as diffusers' Wan conversion writes it (the rest are UniPC defaults:
    order 2, bh2, predict_x0, lower_order_final, final sigma zero, linspace)."""
    return UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=TRAIN_TIMESTEPS, flow_shift=shift
    )


def make_transformer(cfg, seed):
    torch.manual_seed(seed)
    model = WanTransformer3DModel(**cfg).eval()
    assert model.dtype == torch.float32
    redraw_parameters(model, torch.Generator().manual_seed(seed))
    return model


def make_vae(seed, cfg=TINY_VAE22):
    torch.manual_seed(seed)
    vae = AutoencoderKLWan(**cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    # Default initialisation makes the encoding nearly constant over space; these draws keep
    # the image visible in its latents.
    with torch.no_grad():
        for name, p in vae.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "gamma":
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.2)
            elif p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(math.prod(p.shape[1:])))
            elif leaf == "bias":
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            else:
                raise RuntimeError(f"no initialisation rule for VAE parameter {name} {tuple(p.shape)}")
    return vae


def check_forward(name, model, kwargs):
    """Runs the forward, checks every block changes the residual stream, and returns sample."""
    sample, changes = block_changes(model, lambda: model(**kwargs).sample)
    for i, c in changes.items():
        print(f"{name}: block {i} residual change {c[0]:.4f}")
        assert c[0] > MIN_BLOCK_CHANGE, f"{name}: block {i} changes the residual stream by only {c[0]:.4f}"
    assert torch.isfinite(sample).all(), f"{name}: non-finite output"
    return sample


def probe(name, model, kwargs, sample, what, **changed):
    """The output must move when `changed` replaces some inputs, or a backend that drops them
    would pass."""
    out = model(**{**kwargs, **changed}).sample
    rel = rel_change(out, sample)
    print(f"{name}: output change with {what}: {rel:.4f}")
    assert rel > MIN_BLOCK_CHANGE, f"{name}: {what} changes the output by only {rel:.4f}"


def run_pipeline(pipe, experts, steps, **kwargs):
    """pipe(...) with output_type "latent"; returns its latents, the latents after each step and
    which expert each step ran (from forward hooks, so it is what the pipeline did)."""
    calls = []
    handles = [
        m.register_forward_pre_hook(lambda mod, args, i=i: calls.append(i)) for i, m in enumerate(experts)
    ]
    per_step = []

    def on_step(p, i, t, cb):
        per_step.append(cb["latents"].clone())
        return {}

    try:
        latents = pipe(
            num_inference_steps=steps,
            output_type="latent",
            return_dict=False,
            callback_on_step_end=on_step,
            **kwargs,
        )[0]
    finally:
        for h in handles:
            h.remove()
    # Classifier-free guidance: two calls of the same expert per step.
    assert len(calls) == 2 * steps, f"{len(calls)} transformer calls for {steps} steps"
    assert calls[0::2] == calls[1::2], f"cond and uncond ran on different experts: {calls}"
    assert len(per_step) == steps
    assert latents.dtype == torch.float32 and torch.isfinite(latents).all()
    return latents.contiguous(), torch.stack(per_step).contiguous(), calls[0::2]


def write_meta(out_dir, meta):
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def finish(out_dir):
    size = folder_size(out_dir)
    print(f"wrote {out_dir}: {size} bytes")
    assert size < MAX_FOLDER_BYTES, f"{out_dir} is {size} bytes"


def null_components(out_dir):
    """from_pretrained refuses a pipeline whose required components are null in
    model_index.json unless they are passed; pass them as None."""
    with open(os.path.join(out_dir, "model_index.json")) as f:
        index = json.load(f)
    return {k: None for k, v in index.items() if isinstance(v, list) and v[0] is None}, index


def assert_same(what, got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (
        f"{what}: {got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    )
    assert torch.equal(got, want), f"{what}: differs after reload, max |diff| {float((got - want).abs().max())}"
    print(f"reload: {what} identical")


def reproduce(what, model, fwd, want):
    """The reloaded model's forward must equal the recorded output bit for bit."""
    got = model(**fwd).sample
    if not torch.equal(got, want):
        # Loaded weights may sit at other memory alignments than freshly allocated ones, and
        # CPU GEMM kernels may then sum in another order; fresh copies put them back.
        print(f"reload: {what} differs by {float((got - want).abs().max())} with the loaded tensors; "
              "again with the parameters copied into fresh allocations")
        with torch.no_grad():
            for p in model.parameters():
                p.data = p.data.clone()
        got = model(**fwd).sample
    assert_same(what, got, want)


def latent_shape(spec, channels, batch):
    F, H, W = spec["latent"]
    return (batch, channels, F, H, W)


# ---------------------------------------------------------------------------------------------
# 1. Wan2.2-T2V-A14B: two experts switched at the boundary


def write_a14b():
    spec = A14B
    name = "wan22_a14b_tiny"
    out_dir = fresh_dir(name)
    cfg = spec["model"]
    experts = [make_transformer(cfg, s) for s in spec["seeds"]]
    sched = published_unipc(A14B_SHIFT)
    pipe = WanPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=None,
        scheduler=sched,
        transformer=experts[0],
        transformer_2=experts[1],
        boundary_ratio=A14B_BOUNDARY,
        expand_timesteps=False,
    )
    pipe.set_progress_bar_config(disable=True)
    pipe.save_pretrained(out_dir, safe_serialization=True)

    gen = torch.Generator().manual_seed(spec["seed"])
    B, L = spec["batch"], spec["text_len"]
    C = cfg["in_channels"]
    fwd = {
        "hidden_states": torch.randn(latent_shape(spec, C, B), generator=gen),
        "timestep": torch.tensor(spec["timestep"], dtype=torch.int64),
        "encoder_hidden_states": torch.randn((B, L, cfg["text_dim"]), generator=gen),
    }
    samples = []
    probe_gen = torch.Generator().manual_seed(spec["seed"] + 1)
    other_text = torch.randn(fwd["encoder_hidden_states"].shape, generator=probe_gen)
    for slot, model in zip(("transformer", "transformer_2"), experts):
        sample = check_forward(f"{name}/{slot}", model, fwd)
        assert sample.shape == latent_shape(spec, cfg["out_channels"], B)
        probe(f"{name}/{slot}", model, fwd, sample, "other text", encoder_hidden_states=other_text)
        probe(f"{name}/{slot}", model, fwd, sample, "timestep - 300", timestep=fwd["timestep"] - 300)
        probe(f"{name}/{slot}", model, fwd, sample, "timestep + 1", timestep=fwd["timestep"] + 1)
        samples.append(sample)
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output_{slot}.safetensors"))
    rel = rel_change(samples[1], samples[0])
    print(f"{name}: experts differ by {rel:.4f}")
    assert rel > MIN_BLOCK_CHANGE, "the two experts give nearly the same output"
    save_file(fwd, os.path.join(out_dir, "forward_inputs.safetensors"))

    GB = spec["gen_batch"]
    gen_in = {
        "prompt_embeds": torch.randn((GB, L, cfg["text_dim"]), generator=gen),
        "negative_prompt_embeds": torch.randn((GB, L, cfg["text_dim"]), generator=gen),
        "init_latents": torch.randn(latent_shape(spec, C, GB), generator=gen),
    }
    save_file(gen_in, os.path.join(out_dir, "generate_inputs.safetensors"))
    F, H, W = spec["latent"]
    call = dict(
        prompt_embeds=gen_in["prompt_embeds"],
        negative_prompt_embeds=gen_in["negative_prompt_embeds"],
        latents=gen_in["init_latents"].clone(),
        height=H * 8,
        width=W * 8,
        num_frames=(F - 1) * 4 + 1,
        guidance_scale=spec["guidance"],
        guidance_scale_2=spec["guidance_2"],
    )
    latents, per_step, used = run_pipeline(pipe, experts, spec["steps"], **call)
    timesteps = pipe.scheduler.timesteps.clone()
    boundary_t = A14B_BOUNDARY * pipe.scheduler.config.num_train_timesteps
    want = [0 if float(t) >= boundary_t else 1 for t in timesteps]
    assert used == want, f"experts {used}, expected {want} from timesteps {timesteps.tolist()}"
    assert 0 < used.count(0) < spec["steps"], f"the boundary {boundary_t} does not fall inside {timesteps.tolist()}"

    # The same loop written out: guards the description above (and the C sampler it specifies)
    # against a misreading of which expert and which scale apply at each step.
    ref_sched = UniPCMultistepScheduler.from_config(pipe.scheduler.config)
    ref_sched.set_timesteps(spec["steps"])
    ref_sched.set_begin_index(0)
    x = gen_in["init_latents"].clone()
    for t in ref_sched.timesteps:
        model, g = (experts[0], spec["guidance"]) if t >= boundary_t else (experts[1], spec["guidance_2"])
        ts = t.expand(GB)
        c = model(hidden_states=x, timestep=ts, encoder_hidden_states=gen_in["prompt_embeds"]).sample
        u = model(hidden_states=x, timestep=ts, encoder_hidden_states=gen_in["negative_prompt_embeds"]).sample
        x = ref_sched.step(u + g * (c - u), t, x, return_dict=False)[0]
    assert torch.equal(x, latents), f"written-out loop differs from WanPipeline: {float((x - latents).abs().max())}"
    print(f"{name}: written-out two-expert loop matches WanPipeline bit for bit")

    print(f"{name}: timesteps {timesteps.tolist()}, experts {used}, "
          f"latents change {rel_change(latents, gen_in['init_latents']):.4f}")
    save_file(
        {
            "latents": latents,
            "latents_per_step": per_step,
            "timesteps": timesteps.contiguous(),
            "sigmas": pipe.scheduler.sigmas.clone().contiguous(),
            "expert": torch.tensor(used, dtype=torch.int64),
        },
        os.path.join(out_dir, "generate_unipc.safetensors"),
    )
    write_meta(
        out_dir,
        {
            "pipeline": "WanPipeline",
            "frames": (F - 1) * 4 + 1,
            "height": H * 8,
            "width": W * 8,
            "batch": B,
            "text_len": L,
            "timestep": spec["timestep"],
            "generate_batch": GB,
            "steps": spec["steps"],
            "guidance": spec["guidance"],
            "guidance_2": spec["guidance_2"],
            "shift": A14B_SHIFT,
            "boundary_ratio": A14B_BOUNDARY,
            "boundary_timestep": boundary_t,
            "steps_transformer": used.count(0),
            "steps_transformer_2": used.count(1),
            "expert": used,
        },
    )
    finish(out_dir)
    return out_dir


def reload_a14b(out_dir):
    nulls, index = null_components(out_dir)
    assert index["_class_name"] == "WanPipeline"
    assert index["boundary_ratio"] == A14B_BOUNDARY and index["expand_timesteps"] is False
    assert index["transformer"] == ["diffusers", "WanTransformer3DModel"]
    assert index["transformer_2"] == ["diffusers", "WanTransformer3DModel"]
    assert set(nulls) == {"text_encoder", "tokenizer", "vae"}, nulls
    pipe = WanPipeline.from_pretrained(out_dir, **nulls)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.config.boundary_ratio == A14B_BOUNDARY
    assert pipe.scheduler.config.flow_shift == A14B_SHIFT and pipe.scheduler.config.use_flow_sigmas
    fwd = load_file(os.path.join(out_dir, "forward_inputs.safetensors"))
    for slot in ("transformer", "transformer_2"):
        model = getattr(pipe, slot)
        assert model.dtype == torch.float32
        want = load_file(os.path.join(out_dir, f"forward_output_{slot}.safetensors"))["sample"]
        reproduce(f"{os.path.basename(out_dir)} {slot} forward", model, fwd, want)
    gen_in = load_file(os.path.join(out_dir, "generate_inputs.safetensors"))
    want = load_file(os.path.join(out_dir, "generate_unipc.safetensors"))
    with open(os.path.join(out_dir, "meta.json")) as f:
        meta = json.load(f)
    latents, _, used = run_pipeline(
        pipe,
        [pipe.transformer, pipe.transformer_2],
        meta["steps"],
        prompt_embeds=gen_in["prompt_embeds"],
        negative_prompt_embeds=gen_in["negative_prompt_embeds"],
        latents=gen_in["init_latents"].clone(),
        height=meta["height"],
        width=meta["width"],
        num_frames=meta["frames"],
        guidance_scale=meta["guidance"],
        guidance_scale_2=meta["guidance_2"],
    )
    assert used == meta["expert"]
    assert_same(f"{os.path.basename(out_dir)} generate", latents, want["latents"])


# ---------------------------------------------------------------------------------------------
# 2. Wan2.2-TI2V-5B: 48 channels, per-token timesteps, text- and image-to-video


def ti2v_token_timestep(F, H, W, t, first_frame_zero):
    """The [tokens] timestep row exactly as WanPipeline / WanImageToVideoPipeline build it."""
    mask = torch.ones(1, 1, F, H, W, dtype=torch.float32)
    if first_frame_zero:
        mask[:, :, 0] = 0
    return (mask[0][0][:, ::2, ::2] * torch.tensor(t, dtype=torch.int64)).flatten()


def seeded_image(width, height, seed):
    """A smooth image with some texture: a plain noise image would make the VAE's view of it
    arbitrary, a flat one would hide spatial mistakes."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.empty((height, width, 3), dtype=np.float64)
    for c in range(3):
        fx, fy, ph = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 2 * np.pi)
        img[..., c] = 127.5 + 90.0 * np.sin(2 * np.pi * (fx * xx / width + fy * yy / height) + ph)
    img += rng.normal(0.0, 12.0, img.shape)
    return Image.fromarray(np.clip(np.round(img), 0, 255).astype(np.uint8))


def write_ti2v():
    spec = TI2V
    name = "wan22_ti2v_tiny"
    out_dir = fresh_dir(name)
    cfg = spec["model"]
    model = make_transformer(cfg, spec["model_seed"])
    vae = make_vae(spec["vae_seed"])
    sched = published_unipc(TI2V_SHIFT)
    pipe = WanPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=vae,
        scheduler=sched,
        transformer=model,
        transformer_2=None,
        boundary_ratio=None,
        expand_timesteps=True,
    )
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor_spatial == 16 and pipe.vae_scale_factor_temporal == 4
    pipe.save_pretrained(out_dir, safe_serialization=True)
    # The VAE's weights are random and only encode the image below; its config is what the
    # folder describes.
    for f in os.listdir(os.path.join(out_dir, "vae")):
        if f != "config.json":
            os.remove(os.path.join(out_dir, "vae", f))

    gen = torch.Generator().manual_seed(spec["seed"])
    B, L = spec["batch"], spec["text_len"]
    C = cfg["in_channels"]
    F, H, W = spec["latent"]
    timestep = torch.stack(
        [ti2v_token_timestep(F, H, W, t, z) for t, z in zip(spec["timestep"], spec["first_frame_zero"])]
    )
    tokens = F * (H // 2) * (W // 2)
    assert timestep.shape == (B, tokens) and timestep.dtype == torch.float32
    fwd = {
        "hidden_states": torch.randn(latent_shape(spec, C, B), generator=gen),
        "timestep": timestep.contiguous(),
        "encoder_hidden_states": torch.randn((B, L, cfg["text_dim"]), generator=gen),
    }
    sample = check_forward(name, model, fwd)
    assert sample.shape == latent_shape(spec, cfg["out_channels"], B)
    probe_gen = torch.Generator().manual_seed(spec["seed"] + 1)
    probe(name, model, fwd, sample, "other text",
          encoder_hidden_states=torch.randn(fwd["encoder_hidden_states"].shape, generator=probe_gen))
    probe(name, model, fwd, sample, "timestep - 300", timestep=fwd["timestep"] - 300)
    # Per-token conditioning must act per token: giving item 0's first frame t as well must
    # change that item's first-frame output.
    flat = timestep.clone()
    flat[0] = float(spec["timestep"][0])
    out = model(**{**fwd, "timestep": flat}).sample
    rel = rel_change(out[0, :, 0], sample[0, :, 0])
    print(f"{name}: item 0 first-frame output change with its tokens at t instead of 0: {rel:.4f}")
    assert rel > MIN_BLOCK_CHANGE
    save_file(fwd, os.path.join(out_dir, "forward_inputs.safetensors"))
    save_file({"sample": sample.contiguous()}, os.path.join(out_dir, "forward_output.safetensors"))

    gen_in = {
        "prompt_embeds": torch.randn((1, L, cfg["text_dim"]), generator=gen),
        "negative_prompt_embeds": torch.randn((1, L, cfg["text_dim"]), generator=gen),
        "init_latents": torch.randn(latent_shape(spec, C, 1), generator=gen),
    }
    save_file(gen_in, os.path.join(out_dir, "generate_inputs.safetensors"))
    height, width, frames = H * 16, W * 16, (F - 1) * 4 + 1
    common = dict(
        prompt_embeds=gen_in["prompt_embeds"],
        negative_prompt_embeds=gen_in["negative_prompt_embeds"],
        height=height,
        width=width,
        num_frames=frames,
        guidance_scale=spec["guidance"],
    )

    # Text-to-video through WanPipeline's expand_timesteps path.
    latents, per_step, _ = run_pipeline(pipe, [model], spec["steps"], latents=gen_in["init_latents"].clone(), **common)
    t2v = {
        "latents": latents,
        "latents_per_step": per_step,
        "timesteps": pipe.scheduler.timesteps.clone().contiguous(),
        "sigmas": pipe.scheduler.sigmas.clone().contiguous(),
    }
    print(f"{name}: t2v timesteps {t2v['timesteps'].tolist()}, latents change "
          f"{rel_change(latents, gen_in['init_latents']):.4f}")
    save_file(t2v, os.path.join(out_dir, "generate_t2v_unipc.safetensors"))

    # Image-to-video: the same components in WanImageToVideoPipeline, as one loads the TI2V
    # folder into it; the condition it computed is recorded from its prepare_latents.
    i2v_pipe = WanImageToVideoPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=vae,
        scheduler=published_unipc(TI2V_SHIFT),
        transformer=model,
        expand_timesteps=True,
    )
    i2v_pipe.set_progress_bar_config(disable=True)
    image = seeded_image(width, height, spec["seed"])
    image_latents, i2v = run_i2v(i2v_pipe, model, spec["steps"], image, gen_in, common)
    assert image_latents.shape == (1, cfg["in_channels"], 1, H, W), tuple(image_latents.shape)
    spread = float(image_latents.std(dim=(3, 4)).mean())
    print(f"{name}: image_latents mean |x| {float(image_latents.abs().mean()):.4f}, spatial spread {spread:.4f}")
    assert spread > 0.02, "the image latents hardly vary over space"
    assert torch.equal(i2v["latents"][:, :, :1], image_latents), "first latent frame is not the condition"
    rel = rel_change(i2v["latents"][:, :, 1:], t2v["latents"][:, :, 1:])
    print(f"{name}: i2v latents (frames 1..) differ from t2v by {rel:.4f}; timesteps {i2v['timesteps'].tolist()}")
    assert rel > 0.01, "the image condition hardly changes the generated frames"
    save_file({"image_latents": image_latents}, os.path.join(out_dir, "generate_i2v_inputs.safetensors"))
    save_file(i2v, os.path.join(out_dir, "generate_i2v_unipc.safetensors"))

    write_meta(
        out_dir,
        {
            "pipeline": "WanPipeline",
            "i2v_pipeline": "WanImageToVideoPipeline",
            "frames": frames,
            "height": height,
            "width": width,
            "batch": B,
            "text_len": L,
            "timestep": spec["timestep"],
            "timestep_first_frame_zero": spec["first_frame_zero"],
            "tokens": tokens,
            "generate_batch": 1,
            "steps": spec["steps"],
            "guidance": spec["guidance"],
            "shift": TI2V_SHIFT,
            "expand_timesteps": True,
            "vae_weights": "omitted: vae/ holds only config.json; image_latents stand for its encoding",
        },
    )
    finish(out_dir)
    return out_dir, vae, image


def run_recording_prepare(pipe, experts, steps, image, gen_in, common):
    """run_pipeline on an image-to-video pipeline, with what its prepare_latents returned."""
    recorded = {}
    prepare = pipe.prepare_latents

    def recording_prepare(*args, **kwargs):
        out = prepare(*args, **kwargs)
        recorded["out"] = out
        return out

    pipe.prepare_latents = recording_prepare
    try:
        run = run_pipeline(pipe, experts, steps, image=image, latents=gen_in["init_latents"].clone(), **common)
    finally:
        del pipe.prepare_latents
    return run, recorded["out"]


def run_i2v(pipe, model, steps, image, gen_in, common):
    (latents, per_step, _), (_, condition, first_frame_mask) = run_recording_prepare(
        pipe, [model], steps, image, gen_in, common)
    assert torch.equal(first_frame_mask[0, 0, 0], torch.zeros_like(first_frame_mask[0, 0, 0]))
    assert torch.equal(first_frame_mask[0, 0, 1:], torch.ones_like(first_frame_mask[0, 0, 1:]))
    return condition.contiguous(), {
        "latents": latents,
        "latents_per_step": per_step,
        "timesteps": pipe.scheduler.timesteps.clone().contiguous(),
        "sigmas": pipe.scheduler.sigmas.clone().contiguous(),
    }


def run_i2v_concat(pipe, experts, steps, image, gen_in, common):
    """WanImageToVideoPipeline without expand_timesteps: records the condition (mask ++ image
    latents) its prepare_latents built, checks the mask is the first-frame mask, and returns the
    image latents and the run."""
    (latents, per_step, used), (_, condition) = run_recording_prepare(pipe, experts, steps, image, gen_in, common)
    mask, image_latents = condition[:, :4], condition[:, 4:]
    assert torch.equal(mask[:, :, 0], torch.ones_like(mask[:, :, 0])), "mask: first latent frame not all ones"
    assert torch.equal(mask[:, :, 1:], torch.zeros_like(mask[:, :, 1:])), "mask: later latent frames not zero"
    spread = float(image_latents[:, :, 0].std(dim=(2, 3)).mean())
    assert spread > 0.02, f"the image latents hardly vary over space ({spread:.4f})"
    return image_latents.contiguous(), {
        "latents": latents,
        "latents_per_step": per_step,
        "timesteps": pipe.scheduler.timesteps.clone().contiguous(),
        "sigmas": pipe.scheduler.sigmas.clone().contiguous(),
    }, used


def i2v_generate_inputs(gen, spec, cfg, text_len):
    return {
        "prompt_embeds": torch.randn((1, text_len, cfg["text_dim"]), generator=gen),
        "negative_prompt_embeds": torch.randn((1, text_len, cfg["text_dim"]), generator=gen),
        "init_latents": torch.randn(latent_shape(spec, cfg["out_channels"], 1), generator=gen),
    }


def i2v_common(spec, gen_in):
    F, H, W = spec["latent"]
    return dict(
        prompt_embeds=gen_in["prompt_embeds"],
        negative_prompt_embeds=gen_in["negative_prompt_embeds"],
        height=H * 8,
        width=W * 8,
        num_frames=(F - 1) * 4 + 1,
        guidance_scale=spec["guidance"],
    )


def reload_ti2v(out_dir, vae, image):
    nulls, index = null_components(out_dir)
    assert index["_class_name"] == "WanPipeline" and index["expand_timesteps"] is True
    assert index["boundary_ratio"] is None
    assert index["vae"] == ["diffusers", "AutoencoderKLWan"]
    assert sorted(os.listdir(os.path.join(out_dir, "vae"))) == ["config.json"]
    assert set(nulls) <= {"text_encoder", "tokenizer", "transformer_2"}, nulls
    vae_cfg = AutoencoderKLWan.load_config(os.path.join(out_dir, "vae"))
    for k in ("z_dim", "scale_factor_spatial", "scale_factor_temporal", "patch_size", "is_residual"):
        assert vae_cfg[k] == TINY_VAE22[k], (k, vae_cfg[k])
    assert vae_cfg["latents_mean"] == VAE22_LATENTS_MEAN and vae_cfg["latents_std"] == VAE22_LATENTS_STD
    # The config alone builds the VAE object the pipeline needs (its weights are not in the folder).
    from_cfg = AutoencoderKLWan.from_config(vae_cfg)
    pipe = WanPipeline.from_pretrained(out_dir, vae=from_cfg, **nulls)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.config.expand_timesteps and pipe.transformer.config.in_channels == 48
    assert pipe.scheduler.config.flow_shift == TI2V_SHIFT
    fwd = load_file(os.path.join(out_dir, "forward_inputs.safetensors"))
    want_sample = load_file(os.path.join(out_dir, "forward_output.safetensors"))["sample"]
    base = os.path.basename(out_dir)
    reproduce(f"{base} forward", pipe.transformer, fwd, want_sample)
    gen_in = load_file(os.path.join(out_dir, "generate_inputs.safetensors"))
    with open(os.path.join(out_dir, "meta.json")) as f:
        meta = json.load(f)
    common = dict(
        prompt_embeds=gen_in["prompt_embeds"],
        negative_prompt_embeds=gen_in["negative_prompt_embeds"],
        height=meta["height"],
        width=meta["width"],
        num_frames=meta["frames"],
        guidance_scale=meta["guidance"],
    )
    latents, _, _ = run_pipeline(
        pipe, [pipe.transformer], meta["steps"], latents=gen_in["init_latents"].clone(), **common
    )
    assert_same(f"{base} t2v generate", latents,
                load_file(os.path.join(out_dir, "generate_t2v_unipc.safetensors"))["latents"])
    # The folder loaded into the image-to-video pipeline, with the VAE that made image_latents.
    i2v_pipe = WanImageToVideoPipeline.from_pretrained(out_dir, vae=vae, **nulls)
    i2v_pipe.set_progress_bar_config(disable=True)
    reproduce(f"{base} forward (image-to-video pipeline)", i2v_pipe.transformer, fwd, want_sample)
    image_latents, i2v = run_i2v(i2v_pipe, i2v_pipe.transformer, meta["steps"], image, gen_in, common)
    assert_same(f"{base} image_latents", image_latents,
                load_file(os.path.join(out_dir, "generate_i2v_inputs.safetensors"))["image_latents"])
    assert_same(f"{base} i2v generate", i2v["latents"],
                load_file(os.path.join(out_dir, "generate_i2v_unipc.safetensors"))["latents"])


# ---------------------------------------------------------------------------------------------
# 3. Wan2.1-I2V: a transformer with image K/V projections and an image embedder


def write_wan21_i2v():
    spec = WAN21_I2V
    name = "wan21_i2v_tiny"
    out_dir = fresh_dir(name)
    cfg = spec["model"]
    # The image embedder maps image_dim to the inner dim, which the added K/V projections read.
    assert cfg["added_kv_proj_dim"] == cfg["num_attention_heads"] * cfg["attention_head_dim"]
    model = make_transformer(cfg, spec["model_seed"])
    # Near-uniform cross-attention over 512 random text tokens averages them away (other text
    # moved the output by 4% only); larger query/key norm gains sharpen it so that individual
    # text tokens, and a backend that mixes up the text and image parts, show in the output.
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn2.norm_q.weight.mul_(CROSS_ATTN_SHARPEN)
            blk.attn2.norm_k.weight.mul_(CROSS_ATTN_SHARPEN)
    model.save_pretrained(os.path.join(out_dir, "model"), safe_serialization=True)

    gen = torch.Generator().manual_seed(spec["seed"])
    B = spec["batch"]
    fwd = {
        "hidden_states": torch.randn(latent_shape(spec, cfg["in_channels"], B), generator=gen),
        "timestep": torch.tensor(spec["timestep"], dtype=torch.int64),
        "encoder_hidden_states": torch.randn((B, TEXT_CONTEXT, cfg["text_dim"]), generator=gen),
        "encoder_hidden_states_image": torch.randn((B, spec["n_img"], cfg["image_dim"]), generator=gen),
    }
    sample = check_forward(name, model, fwd)
    assert sample.shape == latent_shape(spec, cfg["out_channels"], B)
    pg = torch.Generator().manual_seed(spec["seed"] + 1)
    probe(name, model, fwd, sample, "other text",
          encoder_hidden_states=torch.randn(fwd["encoder_hidden_states"].shape, generator=pg))
    probe(name, model, fwd, sample, "other image embeddings",
          encoder_hidden_states_image=torch.randn(fwd["encoder_hidden_states_image"].shape, generator=pg))
    cond = fwd["hidden_states"].clone()
    cond[:, 16:] = torch.randn(cond[:, 16:].shape, generator=pg)
    probe(name, model, fwd, sample, "other mask/condition channels", hidden_states=cond)
    probe(name, model, fwd, sample, "timestep - 300", timestep=fwd["timestep"] - 300)
    save_file(fwd, os.path.join(out_dir, "forward_inputs.safetensors"))
    save_file({"sample": sample.contiguous()}, os.path.join(out_dir, "forward_output.safetensors"))
    F, H, W = spec["latent"]

    # Image-to-video through WanImageToVideoPipeline.__call__: image_embeds given (the CLIP
    # encoder's output stands in as random hidden states), the image encoded by a tiny VAE.
    vae = make_vae(spec["vae_seed"], TINY_VAE21)
    pipe = WanImageToVideoPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=vae,
        scheduler=published_unipc(I2V_SHIFT),
        image_processor=None,
        image_encoder=None,
        transformer=model,
    )
    pipe.set_progress_bar_config(disable=True)
    gen_in = i2v_generate_inputs(gen, spec, cfg, TEXT_CONTEXT)
    gen_in["image_embeds"] = torch.randn((1, spec["n_img"], cfg["image_dim"]), generator=gen)
    common = i2v_common(spec, gen_in)
    image = seeded_image(common["width"], common["height"], spec["seed"])
    # The pipeline refuses image_embeds beside an image (which prepare_latents needs), so the
    # CLIP encoder's place is taken by one returning these hidden states.
    pipe.encode_image = lambda image, device=None: gen_in["image_embeds"]
    image_latents, run, _ = run_i2v_concat(pipe, [model], spec["steps"], image, gen_in, common)
    gen_in["image_latents"] = image_latents
    assert image_latents.shape == latent_shape(spec, 16, 1)
    print(f"{name}: i2v timesteps {run['timesteps'].tolist()}, latents change "
          f"{rel_change(run['latents'], gen_in['init_latents']):.4f}")
    save_file(gen_in, os.path.join(out_dir, "generate_inputs.safetensors"))
    save_file(run, os.path.join(out_dir, "generate_unipc.safetensors"))
    write_meta(
        out_dir,
        {
            "frames": (F - 1) * 4 + 1,
            "height": H * 8,
            "width": W * 8,
            "batch": B,
            "text_len": TEXT_CONTEXT,
            "image_tokens": spec["n_img"],
            "timestep": spec["timestep"],
            "channels": "in 36 = 16 noisy latents + 4 mask + 16 condition (random here), out 16",
            "i2v_pipeline": "WanImageToVideoPipeline",
            "generate_batch": 1,
            "steps": spec["steps"],
            "guidance": spec["guidance"],
            "shift": I2V_SHIFT,
        },
    )
    finish(out_dir)
    return out_dir, vae, image


def reload_wan21_i2v(out_dir, vae, image):
    model = WanTransformer3DModel.from_pretrained(os.path.join(out_dir, "model")).eval()
    assert model.dtype == torch.float32
    assert model.config.image_dim == WAN21_I2V["model"]["image_dim"] and model.config.in_channels == 36
    fwd = load_file(os.path.join(out_dir, "forward_inputs.safetensors"))
    want = load_file(os.path.join(out_dir, "forward_output.safetensors"))["sample"]
    base = os.path.basename(out_dir)
    reproduce(f"{base} forward", model, fwd, want)
    pipe = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=published_unipc(I2V_SHIFT),
                                   image_processor=None, image_encoder=None, transformer=model)
    pipe.set_progress_bar_config(disable=True)
    gen_in = load_file(os.path.join(out_dir, "generate_inputs.safetensors"))
    common = i2v_common(WAN21_I2V, gen_in)
    pipe.encode_image = lambda image, device=None: gen_in["image_embeds"]
    image_latents, run, _ = run_i2v_concat(pipe, [model], WAN21_I2V["steps"], image, gen_in, common)
    assert_same(f"{base} image_latents", image_latents, gen_in["image_latents"])
    assert_same(f"{base} i2v generate", run["latents"],
                load_file(os.path.join(out_dir, "generate_unipc.safetensors"))["latents"])


# ---------------------------------------------------------------------------------------------
# 4. Wan2.2-I2V-A14B: two 36-channel experts, no image encoder


def write_i2v_a14b():
    spec = I2V_A14B
    name = "wan22_i2v_a14b_tiny"
    out_dir = fresh_dir(name)
    cfg = spec["model"]
    experts = [make_transformer(cfg, s) for s in spec["seeds"]]
    pipe = WanImageToVideoPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=None,
        scheduler=published_unipc(A14B_SHIFT),
        image_processor=None,
        image_encoder=None,
        transformer=experts[0],
        transformer_2=experts[1],
        boundary_ratio=I2V_A14B_BOUNDARY,
    )
    pipe.save_pretrained(out_dir, safe_serialization=True)

    gen = torch.Generator().manual_seed(spec["seed"])
    B, L = spec["batch"], spec["text_len"]
    fwd = {
        "hidden_states": torch.randn(latent_shape(spec, cfg["in_channels"], B), generator=gen),
        "timestep": torch.tensor(spec["timestep"], dtype=torch.int64),
        "encoder_hidden_states": torch.randn((B, L, cfg["text_dim"]), generator=gen),
    }
    pg = torch.Generator().manual_seed(spec["seed"] + 1)
    cond = fwd["hidden_states"].clone()
    cond[:, 16:] = torch.randn(cond[:, 16:].shape, generator=pg)
    samples = []
    for slot, model in zip(("transformer", "transformer_2"), experts):
        sample = check_forward(f"{name}/{slot}", model, fwd)
        assert sample.shape == latent_shape(spec, cfg["out_channels"], B)
        probe(f"{name}/{slot}", model, fwd, sample, "other mask/condition channels", hidden_states=cond)
        probe(f"{name}/{slot}", model, fwd, sample, "timestep - 300", timestep=fwd["timestep"] - 300)
        samples.append(sample)
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output_{slot}.safetensors"))
    rel = rel_change(samples[1], samples[0])
    print(f"{name}: experts differ by {rel:.4f}")
    assert rel > MIN_BLOCK_CHANGE
    save_file(fwd, os.path.join(out_dir, "forward_inputs.safetensors"))
    F, H, W = spec["latent"]

    # Image-to-video across the boundary, the image encoded by a tiny Wan2.1-shaped VAE (the
    # folder's vae stays null: image_latents stand for its encoding).
    vae = make_vae(spec["vae_seed"], TINY_VAE21)
    gen_pipe = WanImageToVideoPipeline(
        tokenizer=None, text_encoder=None, vae=vae, scheduler=published_unipc(A14B_SHIFT), image_processor=None,
        image_encoder=None, transformer=experts[0], transformer_2=experts[1], boundary_ratio=I2V_A14B_BOUNDARY,
    )
    gen_pipe.set_progress_bar_config(disable=True)
    gen_in = i2v_generate_inputs(gen, spec, cfg, L)
    common = {**i2v_common(spec, gen_in), "guidance_scale_2": spec["guidance_2"]}
    image = seeded_image(common["width"], common["height"], spec["seed"])
    image_latents, run, used = run_i2v_concat(gen_pipe, experts, spec["steps"], image, gen_in, common)
    gen_in["image_latents"] = image_latents
    boundary_t = I2V_A14B_BOUNDARY * TRAIN_TIMESTEPS
    want = [0 if float(t) >= boundary_t else 1 for t in run["timesteps"]]
    assert used == want, f"experts {used}, expected {want}"
    assert 0 < used.count(0) < spec["steps"], f"the boundary {boundary_t} does not fall inside {run['timesteps'].tolist()}"
    run["expert"] = torch.tensor(used, dtype=torch.int64)
    print(f"{name}: i2v timesteps {run['timesteps'].tolist()}, experts {used}")
    save_file(gen_in, os.path.join(out_dir, "generate_inputs.safetensors"))
    save_file(run, os.path.join(out_dir, "generate_unipc.safetensors"))
    write_meta(
        out_dir,
        {
            "generate_batch": 1,
            "steps": spec["steps"],
            "guidance": spec["guidance"],
            "guidance_2": spec["guidance_2"],
            "expert": used,
            "pipeline": "WanImageToVideoPipeline",
            "frames": (F - 1) * 4 + 1,
            "height": H * 8,
            "width": W * 8,
            "batch": B,
            "text_len": L,
            "timestep": spec["timestep"],
            "shift": A14B_SHIFT,
            "boundary_ratio": I2V_A14B_BOUNDARY,
            "boundary_timestep": I2V_A14B_BOUNDARY * TRAIN_TIMESTEPS,
            "channels": "in 36 = 16 noisy latents + 4 mask + 16 condition (random here), out 16",
        },
    )
    finish(out_dir)
    return out_dir, vae, image


def reload_i2v_a14b(out_dir, vae, image):
    nulls, index = null_components(out_dir)
    assert index["_class_name"] == "WanImageToVideoPipeline"
    assert index["boundary_ratio"] == I2V_A14B_BOUNDARY
    assert index["transformer_2"] == ["diffusers", "WanTransformer3DModel"]
    assert "image_encoder" not in index or index["image_encoder"][0] is None
    pipe = WanImageToVideoPipeline.from_pretrained(out_dir, **nulls)
    assert pipe.image_encoder is None and pipe.config.boundary_ratio == I2V_A14B_BOUNDARY
    fwd = load_file(os.path.join(out_dir, "forward_inputs.safetensors"))
    for slot in ("transformer", "transformer_2"):
        model = getattr(pipe, slot)
        assert model.config.in_channels == 36 and model.config.image_dim is None
        want = load_file(os.path.join(out_dir, f"forward_output_{slot}.safetensors"))["sample"]
        reproduce(f"{os.path.basename(out_dir)} {slot} forward", model, fwd, want)
    pipe = WanImageToVideoPipeline.from_pretrained(out_dir, **{**nulls, "vae": vae})
    pipe.set_progress_bar_config(disable=True)
    gen_in = load_file(os.path.join(out_dir, "generate_inputs.safetensors"))
    with open(os.path.join(out_dir, "meta.json")) as f:
        meta = json.load(f)
    common = {**i2v_common(I2V_A14B, gen_in), "guidance_scale_2": meta["guidance_2"]}
    image_latents, run, used = run_i2v_concat(pipe, [pipe.transformer, pipe.transformer_2], meta["steps"], image,
                                              gen_in, common)
    assert used == meta["expert"]
    base = os.path.basename(out_dir)
    assert_same(f"{base} image_latents", image_latents, gen_in["image_latents"])
    assert_same(f"{base} i2v generate", run["latents"],
                load_file(os.path.join(out_dir, "generate_unipc.safetensors"))["latents"])


FOLDERS = ("wan22_a14b_tiny", "wan22_ti2v_tiny", "wan21_i2v_tiny", "wan22_i2v_a14b_tiny")


def main():
    torch.set_grad_enabled(False)
    print(f"diffusers {diffusers.__version__} from {os.path.dirname(diffusers.__file__)}, torch {torch.__version__}")
    only = set(FOLDERS)
    if len(sys.argv) == 3 and sys.argv[1] == "--only":
        only = set(sys.argv[2].split(","))
        assert only <= set(FOLDERS), f"--only: unknown {sorted(only - set(FOLDERS))}; known {FOLDERS}"
    elif len(sys.argv) != 1:
        sys.exit(f"usage: {sys.argv[0]} [--only NAME[,NAME]]  (names: {', '.join(FOLDERS)})")
    if "wan22_a14b_tiny" in only:
        reload_a14b(write_a14b())
    if "wan22_ti2v_tiny" in only:
        reload_ti2v(*write_ti2v())
    if "wan21_i2v_tiny" in only:
        reload_wan21_i2v(*write_wan21_i2v())
    if "wan22_i2v_a14b_tiny" in only:
        reload_i2v_a14b(*write_i2v_a14b())
    print(f"{', '.join(sorted(only))}: written, reloaded, goldens reproduced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
