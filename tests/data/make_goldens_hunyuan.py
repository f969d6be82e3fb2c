#!/usr/bin/env python3
"""Reference data for HunyuanVideo (text to video), produced by the pinned diffusers itself
(float32, CPU), with a tiny model.

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers
(0.40.0.dev0, commit 58eb52c0803e) are available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_hunyuan.py

It rewrites (deleting it first, so a rerun leaves nothing stale):

  tests/data/hunyuan_video_tiny/     save_pretrained of a HunyuanVideoPipeline: model_index.json
                                     (vae, text encoders and tokenizers null), transformer/ (a
                                     tiny HunyuanVideoTransformer3DModel with the guidance
                                     embedding: in/out 4 channels, 2 heads of 8, 1 double-stream,
                                     2 single-stream and 2 refiner blocks, patch 2, patch_size_t
                                     1, text_embed_dim 24, pooled_projection_dim 20,
                                     rope_axes_dim (2, 2, 4)), scheduler/ (the published config:
                                     FlowMatchEulerDiscreteScheduler, shift 7.0);
    forward_inputs.safetensors       batch 2: hidden_states [2,4,2,6,4] (5 frames of 48x32 px),
                                     timestep [2] f32 (scheduler timesteps, as the pipeline
                                     passes them), encoder_hidden_states [2,8,24],
                                     encoder_attention_mask [2,8] f32 (valid prefixes 5 and 8),
                                     pooled_projections [2,20], guidance [2] f32 (x1000, as the
                                     pipeline passes it);
    forward_output.safetensors       sample [2,4,2,6,4];
    forward_inputs_b1.safetensors, forward_output_b1.safetensors     batch 1, valid prefix 3;
    forward_inputs_full.safetensors, forward_output_full.safetensors batch 2, every token valid;
    generate_inputs.safetensors      prompt_embeds [1,8,24], prompt_attention_mask [1,8] (6
                                     valid), pooled_prompt_embeds [1,20], the negative_ ones (4
                                     valid), latents [1,4,2,6,4] (initial noise);
    generate_output.safetensors      HunyuanVideoPipeline.__call__(the prompt's tensors, latents,
                                     48x32 px, 5 frames, 4 steps, guidance_scale 6.0,
                                     output_type "latent"): latents, timesteps, sigmas;
    generate_cfg_output.safetensors  the same with true CFG (the negatives, true_cfg_scale 2.0);
    generate_full_output.safetensors the first with every prompt token valid;
    meta.json                        shapes, steps, guidance, true_cfg, valid lengths, the
                                     timesteps the pipeline ran (recorded by a step callback).

After writing, the transformer is reloaded from its folder and its forward outputs are
reproduced bit for bit. Everything is seeded, so a rerun on the same torch build reproduces the
files.
"""

import json
import os
import sys

# Everything is local; never wait on a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline, HunyuanVideoTransformer3DModel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The Wan goldens' parameter draws and folder size, shared so every set follows one rule.
from make_goldens import folder_size, fresh_dir, redraw_parameters, rel_change, run_recording, save_run  # noqa: E402

MAX_FOLDER_BYTES = 500_000
MIN_CHANGE = 0.02  # an input the model must not ignore moves the output at least this much
NAME = "hunyuan_video_tiny"
SEED = 4101
PROBLEMS = []  # checks that failed: reported after every file is written, then a non-zero exit

TINY = dict(
    in_channels=4,
    out_channels=4,
    num_attention_heads=2,
    attention_head_dim=8,
    num_layers=1,
    num_single_layers=2,
    num_refiner_layers=2,
    mlp_ratio=4.0,
    patch_size=2,
    patch_size_t=1,
    qk_norm="rms_norm",
    guidance_embeds=True,
    text_embed_dim=24,
    pooled_projection_dim=20,
    rope_theta=256.0,
    rope_axes_dim=(2, 2, 4),
)
# The published scheduler/scheduler_config.json values.
SCHEDULER = dict(num_train_timesteps=1000, shift=7.0)

HEIGHT, WIDTH, FRAMES = 48, 32, 5
VAE_SPATIAL, VAE_TEMPORAL = 8, 4  # HunyuanVideoPipeline's factors without a VAE
TEXT_LEN = 8
STEPS = 4
GUIDANCE = 6.0
TRUE_CFG = 2.0
FORWARD_T = [937.5, 412.25]  # scheduler timesteps, passed as they are
FORWARD_GUIDANCE = [6000.0, 3500.0]  # guidance_scale * 1000, as the pipeline passes it
FORWARD_VALID = [5, 8]
FORWARD_B1_VALID = [3]
GENERATE_VALID, NEGATIVE_VALID = 6, 4


def latent_shape(batch):
    return (batch, TINY["in_channels"], (FRAMES - 1) // VAE_TEMPORAL + 1, HEIGHT // VAE_SPATIAL, WIDTH // VAE_SPATIAL)


def prefix_mask(valid):
    """[B, TEXT_LEN] float: 1 for each item's first valid[b] tokens, then 0, as the tokenizer pads."""
    return (torch.arange(TEXT_LEN)[None, :] < torch.tensor(valid)[:, None]).float()


def forward_inputs(gen, valid):
    batch = len(valid)
    return {
        "hidden_states": torch.randn(latent_shape(batch), generator=gen),
        "timestep": torch.tensor(FORWARD_T[:batch], dtype=torch.float32),
        "encoder_hidden_states": torch.randn((batch, TEXT_LEN, TINY["text_embed_dim"]), generator=gen),
        "encoder_attention_mask": prefix_mask(valid),
        "pooled_projections": torch.randn((batch, TINY["pooled_projection_dim"]), generator=gen),
        "guidance": torch.tensor(FORWARD_GUIDANCE[:batch], dtype=torch.float32),
    }


def run_forward(model, fwd):
    with torch.no_grad():
        return model(**fwd, return_dict=False)[0]


def probe(model, fwd, sample, what, **changed):
    """The output must move when `changed` replaces some inputs, or a backend that drops them
    would pass."""
    out = run_forward(model, {**fwd, **changed})
    rel = rel_change(out, sample)
    print(f"{NAME}: {what} changes the output by {rel:.4f}")
    if rel <= MIN_CHANGE:
        PROBLEMS.append(f"{what} changes the output by only {rel:.4f}")


def check_padding_ignored(model, fwd, sample, gen):
    """The padded text tokens (mask 0) must not change the output at all."""
    pad = 1 - fwd["encoder_attention_mask"][..., None]
    other = fwd["encoder_hidden_states"] + pad * torch.randn(fwd["encoder_hidden_states"].shape, generator=gen) * 3
    out = run_forward(model, {**fwd, "encoder_hidden_states": other})
    diff = float((out - sample).abs().max())
    print(f"{NAME}: padded text changes the output by at most {diff:.3g}")
    if diff >= 1e-5:
        PROBLEMS.append(f"padded text tokens change the output by {diff}")


def run_pipeline(pipe, **call):
    """HunyuanVideoPipeline.__call__ with a step callback that records the timesteps it ran."""
    return run_recording(pipe, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                         guidance_scale=GUIDANCE, **call)


def main(argv):
    if argv:
        sys.exit("usage: make_goldens_hunyuan.py")
    torch.use_deterministic_algorithms(True)
    out_dir = fresh_dir(NAME)
    torch.manual_seed(SEED)
    model = HunyuanVideoTransformer3DModel(**TINY).eval()
    assert model.dtype == torch.float32
    redraw_parameters(model, torch.Generator().manual_seed(SEED))
    pipe = HunyuanVideoPipeline(
        text_encoder=None,
        tokenizer=None,
        transformer=model,
        vae=None,
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
        text_encoder_2=None,
        tokenizer_2=None,
    )
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor_spatial == VAE_SPATIAL and pipe.vae_scale_factor_temporal == VAE_TEMPORAL
    pipe.save_pretrained(out_dir, safe_serialization=True)

    gen = torch.Generator().manual_seed(SEED + 1)
    other = torch.Generator().manual_seed(SEED + 2)
    outputs = {}
    for suffix, valid in (("", FORWARD_VALID), ("_b1", FORWARD_B1_VALID), ("_full", [TEXT_LEN, TEXT_LEN])):
        fwd = forward_inputs(gen, valid)
        sample = run_forward(model, fwd)
        assert sample.shape == fwd["hidden_states"].shape and torch.isfinite(sample).all()
        if suffix == "":
            probe(model, fwd, sample, "other text",
                  encoder_hidden_states=torch.randn(fwd["encoder_hidden_states"].shape, generator=other))
            probe(model, fwd, sample, "other pooled projections",
                  pooled_projections=torch.randn(fwd["pooled_projections"].shape, generator=other))
            probe(model, fwd, sample, "timestep - 300", timestep=fwd["timestep"] - 300)
            probe(model, fwd, sample, "guidance + 2000", guidance=fwd["guidance"] + 2000)
            probe(model, fwd, sample, "a shorter text mask", encoder_attention_mask=prefix_mask([3, 6]))
            check_padding_ignored(model, fwd, sample, other)
            # The two batch items differ in every input: they must differ in the output.
            if rel_change(sample[0], sample[1]) <= MIN_CHANGE:
                PROBLEMS.append("the two batch items' outputs hardly differ")
        save_file({k: v.contiguous() for k, v in fwd.items()}, os.path.join(out_dir, f"forward_inputs{suffix}.safetensors"))
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output{suffix}.safetensors"))
        outputs[suffix] = (fwd, sample)

    text_shape = (1, TEXT_LEN, TINY["text_embed_dim"])
    gen_in = {
        "prompt_embeds": torch.randn(text_shape, generator=gen),
        "prompt_attention_mask": prefix_mask([GENERATE_VALID]),
        "pooled_prompt_embeds": torch.randn((1, TINY["pooled_projection_dim"]), generator=gen),
        "negative_prompt_embeds": torch.randn(text_shape, generator=gen),
        "negative_prompt_attention_mask": prefix_mask([NEGATIVE_VALID]),
        "negative_pooled_prompt_embeds": torch.randn((1, TINY["pooled_projection_dim"]), generator=gen),
        "latents": torch.randn(latent_shape(1), generator=gen),
    }
    save_file(gen_in, os.path.join(out_dir, "generate_inputs.safetensors"))
    plain_call = dict(
        prompt_embeds=gen_in["prompt_embeds"],
        prompt_attention_mask=gen_in["prompt_attention_mask"],
        pooled_prompt_embeds=gen_in["pooled_prompt_embeds"],
    )
    latents, seen = run_pipeline(pipe, latents=gen_in["latents"].clone(), **plain_call)
    timesteps = pipe.scheduler.timesteps.clone()
    assert seen == [float(t) for t in timesteps], f"callback saw {seen}, scheduler has {timesteps.tolist()}"
    save_run(os.path.join(out_dir, "generate_output.safetensors"), latents, pipe)

    cfg_latents, cfg_seen = run_pipeline(
        pipe,
        latents=gen_in["latents"].clone(),
        negative_prompt_embeds=gen_in["negative_prompt_embeds"],
        negative_prompt_attention_mask=gen_in["negative_prompt_attention_mask"],
        negative_pooled_prompt_embeds=gen_in["negative_pooled_prompt_embeds"],
        true_cfg_scale=TRUE_CFG,
        **plain_call,
    )
    assert cfg_seen == seen
    rel = rel_change(cfg_latents, latents)
    print(f"{NAME}: true CFG moves the result by {rel:.4f}")
    if rel <= MIN_CHANGE:
        PROBLEMS.append(f"true CFG changes the latents by only {rel:.4f}")
    save_run(os.path.join(out_dir, "generate_cfg_output.safetensors"), cfg_latents, pipe)

    full_latents, _ = run_pipeline(pipe, latents=gen_in["latents"].clone(),
                                   **{**plain_call, "prompt_attention_mask": prefix_mask([TEXT_LEN])})
    rel = rel_change(full_latents, latents)
    print(f"{NAME}: the prompt's padding mask moves the result by {rel:.4f}")
    if rel <= 1e-3:
        PROBLEMS.append(f"the prompt's padding mask changes the latents by only {rel:.4f}")
    save_run(os.path.join(out_dir, "generate_full_output.safetensors"), full_latents, pipe)

    print(f"{NAME}: timesteps {seen}, latents change {rel_change(latents, gen_in['latents']):.4f}")
    meta = {
        "pipeline": "HunyuanVideoPipeline",
        "generator": "tests/data/make_goldens_hunyuan.py",
        "diffusers_version": diffusers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "height": HEIGHT,
        "width": WIDTH,
        "frames": FRAMES,
        "text_len": TEXT_LEN,
        "batch": 2,
        "generate_batch": 1,
        "steps": STEPS,
        "guidance": GUIDANCE,
        "true_cfg": TRUE_CFG,
        "timesteps": seen,
        "sigmas": [float(s) for s in pipe.scheduler.sigmas],
        "forward_timesteps": FORWARD_T,
        "forward_guidance": FORWARD_GUIDANCE,
        "forward_valid": FORWARD_VALID,
        "forward_b1_valid": FORWARD_B1_VALID,
        "generate_valid": GENERATE_VALID,
        "negative_valid": NEGATIVE_VALID,
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")

    # The saved folder reproduces the forwards bit for bit.
    reloaded = HunyuanVideoTransformer3DModel.from_pretrained(os.path.join(out_dir, "transformer")).eval()
    for suffix, (fwd, sample) in outputs.items():
        assert torch.equal(run_forward(reloaded, fwd), sample), f"{NAME}: reloaded transformer differs ({suffix or 'batch 2'})"

    size = folder_size(out_dir)
    print(f"wrote {out_dir}: {size} bytes")
    if size >= MAX_FOLDER_BYTES:
        PROBLEMS.append(f"{out_dir} is {size} bytes, over {MAX_FOLDER_BYTES}")
    if PROBLEMS:
        sys.exit(f"{NAME}: " + "; ".join(PROBLEMS))


if __name__ == "__main__":
    main(sys.argv[1:])
