#!/usr/bin/env python3
"""Reference data for FLUX.1 (dev: guidance-distilled; schnell: not), produced by the pinned
diffusers itself (float32, CPU), with tiny models.

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers
(0.40.0.dev0, commit 58eb52c0803e) are available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_flux.py

It rewrites these folders (each deleted first, so a rerun leaves nothing stale):

  tests/data/flux_dev_tiny/          save_pretrained of a FluxPipeline: model_index.json (vae,
                                     text encoders, tokenizers and image encoder null),
                                     transformer/ (a tiny FluxTransformer2DModel, guidance_embeds
                                     true: patch 1, in_channels 16 = 4 latent channels x 2x2
                                     packing, 1 double-stream and 2 single-stream blocks, 2 heads of
                                     16, joint_attention_dim 32, pooled_projection_dim 24,
                                     axes_dims_rope (4, 6, 6)), scheduler/ (FLUX.1-dev's published
                                     config: dynamic shifting, base/max shift 0.5/1.15 over
                                     256..4096 image tokens, shift 3.0);
    forward_inputs.safetensors       batch 2: hidden_states [2,16,16] (64x64 px: 8x8 latents packed
                                     to 4x4 tokens), encoder_hidden_states [2,8,32],
                                     pooled_projections [2,24], timestep [2] f32 (t / 1000 as the
                                     pipeline passes it, two values), guidance [2] f32 (the raw
                                     scales), img_ids [16,3] and txt_ids [8,3] f32 as the pipeline
                                     prepares them;
    forward_output.safetensors       sample [2,16,16];
    forward_inputs_b1.safetensors, forward_output_b1.safetensors   the same for batch 1;
    generate_inputs.safetensors      prompt_embeds [1,8,32], pooled_prompt_embeds [1,24],
                                     negative_prompt_embeds, negative_pooled_prompt_embeds,
                                     latents [1,16,16] (packed initial noise);
    generate_output.safetensors      FluxPipeline.__call__(prompt_embeds, pooled_prompt_embeds,
                                     latents, 64x64, 4 steps, guidance_scale 3.5,
                                     output_type "latent"): latents, timesteps, sigmas;
    generate_cfg_output.safetensors  the same with true CFG (the negatives, true_cfg_scale 2.0);
    meta.json                        height, width, text_len, batch, steps, guidance,
                                     guidance_embeds, true_cfg, image_seq_len, mu, the timesteps
                                     the pipeline ran (recorded by a step callback), forward
                                     timesteps and guidance.

  tests/data/flux_schnell_tiny/      the same with guidance_embeds false (no `guidance` input;
                                     guidance_scale is passed but the pipeline ignores it) and
                                     FLUX.1-schnell's published scheduler config (shift 1.0, no
                                     dynamic shifting).

`--only NAME[,NAME]` rewrites only those folders (flux_dev_tiny, flux_schnell_tiny).

After writing, each transformer is reloaded from its folder and its forward outputs are
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
from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
from diffusers.pipelines.flux.pipeline_flux import calculate_shift

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The Wan goldens' parameter draws and folder size, shared so every set follows one rule.
from make_goldens import (FLUX_DEV_SCHEDULER, FLUX_SCHNELL_SCHEDULER, folder_size, fresh_dir,  # noqa: E402
                          redraw_parameters, rel_change, run_recording)

MAX_FOLDER_BYTES = 500_000
MIN_CHANGE = 0.02  # an input the model must not ignore moves the output at least this much

TINY = dict(
    patch_size=1,
    in_channels=16,
    num_layers=1,
    num_single_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=32,
    pooled_projection_dim=24,
    axes_dims_rope=(4, 6, 6),
)

# The published scheduler/scheduler_config.json values.
DEV_SCHEDULER, SCHNELL_SCHEDULER = FLUX_DEV_SCHEDULER, FLUX_SCHNELL_SCHEDULER

HEIGHT = WIDTH = 64
VAE_SCALE = 8  # FluxPipeline's factor without a VAE
TEXT_LEN = 8
STEPS = 4
GUIDANCE = 3.5
TRUE_CFG = 2.0
FORWARD_T = [812.5, 347.25]  # scheduler timesteps; the transformer receives t / 1000
FORWARD_GUIDANCE = [3.5, 5.0]

VARIANTS = {
    "flux_dev_tiny": dict(guidance_embeds=True, scheduler=DEV_SCHEDULER, seed=3101),
    "flux_schnell_tiny": dict(guidance_embeds=False, scheduler=SCHNELL_SCHEDULER, seed=3201),
}


def latent_grid():
    """Packed token grid (h, w) of a HEIGHT x WIDTH image, as FluxPipeline.prepare_latents."""
    h = 2 * (HEIGHT // (VAE_SCALE * 2))
    w = 2 * (WIDTH // (VAE_SCALE * 2))
    return h // 2, w // 2


def forward_inputs(spec, gen, batch):
    gh, gw = latent_grid()
    fwd = {
        "hidden_states": torch.randn((batch, gh * gw, TINY["in_channels"]), generator=gen),
        "encoder_hidden_states": torch.randn((batch, TEXT_LEN, TINY["joint_attention_dim"]), generator=gen),
        "pooled_projections": torch.randn((batch, TINY["pooled_projection_dim"]), generator=gen),
        "timestep": torch.tensor(FORWARD_T[:batch], dtype=torch.float32) / 1000,
        "img_ids": FluxPipeline._prepare_latent_image_ids(batch, gh, gw, "cpu", torch.float32),
        "txt_ids": torch.zeros(TEXT_LEN, 3, dtype=torch.float32),
    }
    if spec["guidance_embeds"]:
        fwd["guidance"] = torch.tensor(FORWARD_GUIDANCE[:batch], dtype=torch.float32)
    return fwd


def run_forward(model, fwd):
    with torch.no_grad():
        return model(**fwd, return_dict=False)[0]


def probe(name, model, fwd, sample, what, **changed):
    """The output must move when `changed` replaces some inputs, or a backend that drops them
    would pass."""
    out = run_forward(model, {**fwd, **changed})
    rel = rel_change(out, sample)
    print(f"{name}: {what} changes the output by {rel:.4f}")
    assert rel > MIN_CHANGE, f"{name}: {what} changes the output by only {rel:.4f}"


def run_pipeline(pipe, **call):
    """FluxPipeline.__call__ with a step callback that records the timesteps it ran."""
    return run_recording(pipe, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS, guidance_scale=GUIDANCE, **call)


def write_variant(name):
    spec = VARIANTS[name]
    out_dir = fresh_dir(name)
    torch.manual_seed(spec["seed"])
    model = FluxTransformer2DModel(**TINY, guidance_embeds=spec["guidance_embeds"]).eval()
    assert model.dtype == torch.float32
    redraw_parameters(model, torch.Generator().manual_seed(spec["seed"]))
    sched = FlowMatchEulerDiscreteScheduler(**spec["scheduler"])
    pipe = FluxPipeline(
        scheduler=sched,
        vae=None,
        text_encoder=None,
        tokenizer=None,
        text_encoder_2=None,
        tokenizer_2=None,
        transformer=model,
    )
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor == VAE_SCALE
    pipe.save_pretrained(out_dir, safe_serialization=True)

    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    outputs = {}
    for suffix, batch in (("", 2), ("_b1", 1)):
        fwd = forward_inputs(spec, gen, batch)
        sample = run_forward(model, fwd)
        assert sample.shape == fwd["hidden_states"].shape and torch.isfinite(sample).all()
        if batch == 2:
            other = torch.Generator().manual_seed(spec["seed"] + 2)
            probe(name, model, fwd, sample, "other text",
                  encoder_hidden_states=torch.randn(fwd["encoder_hidden_states"].shape, generator=other))
            probe(name, model, fwd, sample, "other pooled projections",
                  pooled_projections=torch.randn(fwd["pooled_projections"].shape, generator=other))
            probe(name, model, fwd, sample, "timestep - 0.3", timestep=fwd["timestep"] - 0.3)
            probe(name, model, fwd, sample, "image ids shifted by 1", img_ids=fwd["img_ids"] + 1)
            if spec["guidance_embeds"]:
                probe(name, model, fwd, sample, "guidance + 2", guidance=fwd["guidance"] + 2)
            # The two batch items differ in every input: they must differ in the output.
            assert rel_change(sample[0], sample[1]) > MIN_CHANGE
        save_file({k: v.contiguous() for k, v in fwd.items()},
                  os.path.join(out_dir, f"forward_inputs{suffix}.safetensors"))
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output{suffix}.safetensors"))
        outputs[suffix] = (fwd, sample)

    gh, gw = latent_grid()
    image_seq_len = gh * gw
    gen_in = {
        "prompt_embeds": torch.randn((1, TEXT_LEN, TINY["joint_attention_dim"]), generator=gen),
        "pooled_prompt_embeds": torch.randn((1, TINY["pooled_projection_dim"]), generator=gen),
        "negative_prompt_embeds": torch.randn((1, TEXT_LEN, TINY["joint_attention_dim"]), generator=gen),
        "negative_pooled_prompt_embeds": torch.randn((1, TINY["pooled_projection_dim"]), generator=gen),
        "latents": torch.randn((1, image_seq_len, TINY["in_channels"]), generator=gen),
    }
    save_file(gen_in, os.path.join(out_dir, "generate_inputs.safetensors"))
    plain_call = dict(
        prompt_embeds=gen_in["prompt_embeds"],
        pooled_prompt_embeds=gen_in["pooled_prompt_embeds"],
    )
    latents, seen = run_pipeline(pipe, latents=gen_in["latents"].clone(), **plain_call)
    timesteps = pipe.scheduler.timesteps.clone()
    sigmas = pipe.scheduler.sigmas.clone()
    assert seen == [float(t) for t in timesteps], f"callback saw {seen}, scheduler has {timesteps.tolist()}"
    save_file({"latents": latents.contiguous(), "timesteps": timesteps.contiguous(), "sigmas": sigmas.contiguous()},
              os.path.join(out_dir, "generate_output.safetensors"))

    cfg_latents, cfg_seen = run_pipeline(
        pipe,
        latents=gen_in["latents"].clone(),
        negative_prompt_embeds=gen_in["negative_prompt_embeds"],
        negative_pooled_prompt_embeds=gen_in["negative_pooled_prompt_embeds"],
        true_cfg_scale=TRUE_CFG,
        **plain_call,
    )
    assert cfg_seen == seen
    rel = rel_change(cfg_latents, latents)
    print(f"{name}: true CFG moves the result by {rel:.4f}")
    assert rel > MIN_CHANGE, f"{name}: true CFG changes the latents by only {rel:.4f}"
    save_file({"latents": cfg_latents.contiguous(), "timesteps": timesteps.contiguous(), "sigmas": sigmas.contiguous()},
              os.path.join(out_dir, "generate_cfg_output.safetensors"))

    c = pipe.scheduler.config
    mu = calculate_shift(image_seq_len, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                         c.get("base_shift", 0.5), c.get("max_shift", 1.15))
    print(f"{name}: timesteps {seen}, mu {mu}, latents change {rel_change(latents, gen_in['latents']):.4f}")
    meta = {
        "pipeline": "FluxPipeline",
        "generator": "tests/data/make_goldens_flux.py",
        "diffusers_version": diffusers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "height": HEIGHT,
        "width": WIDTH,
        "text_len": TEXT_LEN,
        "batch": 2,
        "generate_batch": 1,
        "image_seq_len": image_seq_len,
        "steps": STEPS,
        "guidance": GUIDANCE,
        "guidance_embeds": spec["guidance_embeds"],
        "true_cfg": TRUE_CFG,
        "mu": mu,
        "use_dynamic_shifting": bool(c["use_dynamic_shifting"]),
        "timesteps": seen,
        "sigmas": [float(s) for s in sigmas],
        "forward_timesteps": FORWARD_T,
        "forward_guidance": FORWARD_GUIDANCE if spec["guidance_embeds"] else None,
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")

    # The saved folder reproduces the forwards bit for bit.
    reloaded = FluxTransformer2DModel.from_pretrained(os.path.join(out_dir, "transformer")).eval()
    for suffix, (fwd, sample) in outputs.items():
        same = torch.equal(run_forward(reloaded, fwd), sample)
        assert same, f"{name}: reloaded transformer differs ({suffix or 'batch 2'})"

    size = folder_size(out_dir)
    print(f"wrote {out_dir}: {size} bytes")
    assert size < MAX_FOLDER_BYTES, f"{out_dir} is {size} bytes, over {MAX_FOLDER_BYTES}"


def main(argv):
    names = list(VARIANTS)
    if len(argv) == 2 and argv[0] == "--only":
        names = argv[1].split(",")
        unknown = [n for n in names if n not in VARIANTS]
        if unknown:
            sys.exit(f"--only: unknown folder(s) {unknown}; expected some of {list(VARIANTS)}")
    elif argv:
        sys.exit("usage: make_goldens_flux.py [--only NAME[,NAME]]")
    torch.use_deterministic_algorithms(True)
    for name in names:
        write_variant(name)


if __name__ == "__main__":
    main(sys.argv[1:])
