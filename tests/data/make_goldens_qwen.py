#!/usr/bin/env python3
"""Reference data for Qwen-Image, produced by the pinned diffusers itself (float32, CPU), with a
tiny model.

Run from the repository root, wherever torch, numpy, safetensors, transformers and the pinned
diffusers (0.40.0.dev0, commit 58eb52c0803e) are available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_qwen.py

It rewrites tests/data/qwen_tiny/ (deleted first, so a rerun leaves nothing stale):

  model_index.json, transformer/, scheduler/   save_pretrained of a QwenImagePipeline (vae, text
                                   encoder and tokenizer null): a tiny QwenImageTransformer2DModel
                                   (patch 2, in_channels 16 = 4 latent channels x 2x2 packing,
                                   out_channels 4, 2 blocks, 2 heads of 12, joint_attention_dim 32,
                                   axes_dims_rope (4, 4, 4)) and Qwen/Qwen-Image's published
                                   scheduler config (dynamic shifting over 256..8192 image tokens,
                                   base/max shift 0.5/0.9, shift_terminal 0.02);
  forward_inputs.safetensors       batch 2 at 48x80 px (6x10 latents packed to a 3x5 token grid:
                                   odd sizes, so the rotary centring's rounding matters):
                                   hidden_states [2,15,16], encoder_hidden_states [2,8,32] (padded
                                   positions hold random values, not zeros: the model must ignore
                                   them), encoder_hidden_states_mask [2,8] i64 with valid prefixes
                                   of 5 and 8 (all valid) tokens, timestep [2] f32 (t / 1000 as
                                   the pipeline passes it);
  forward_output.safetensors       sample [2,15,16] with those masks;
  forward_output_nomask.safetensors  the same inputs without a mask (every text token valid);
  forward_inputs_b1.safetensors, forward_output_b1.safetensors   batch 1, 6 valid tokens of 8;
  generate_inputs.safetensors      prompt_embeds [1,8,32], prompt_embeds_mask [1,8] i64 (6 valid),
                                   negative_prompt_embeds, negative_prompt_embeds_mask (4 valid),
                                   latents [1,15,16] (packed initial noise);
  generate_output.safetensors      QwenImagePipeline.__call__(prompt_embeds, prompt_embeds_mask,
                                   latents, 48x80, 4 steps, output_type "latent"): latents,
                                   timesteps, sigmas;
  generate_cfg_output.safetensors  the same with true CFG (the negatives, true_cfg_scale 4.0, the
                                   pipeline's default, with its norm rescale);
  generate_nomask_output.safetensors, generate_nomask_cfg_output.safetensors   both without masks;
  meta.json                        height, width, text_len, batch, steps, true_cfg, image_seq_len,
                                   mu, the timesteps the pipeline ran (recorded by a step
                                   callback), forward timesteps and valid lengths.

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
from diffusers import FlowMatchEulerDiscreteScheduler, QwenImagePipeline, QwenImageTransformer2DModel
from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The Wan goldens' parameter draws and folder size, shared so every set follows one rule.
from make_goldens import (QWEN_IMAGE_SCHEDULER, folder_size, fresh_dir, redraw_parameters,  # noqa: E402
                          rel_change, run_recording, save_run)

NAME = "qwen_tiny"
MAX_FOLDER_BYTES = 500_000
MIN_CHANGE = 0.02  # an input the model must not ignore moves the output at least this much
# Four steps from the same noise: two padded text tokens (and four negative ones) move the result
# 1.25% here, well above what rounding could (about 1e-6).
MIN_MASK_GENERATE_CHANGE = 0.005
SEED = 4101

TINY = dict(
    patch_size=2,
    in_channels=16,
    out_channels=4,
    num_layers=2,
    attention_head_dim=12,
    num_attention_heads=2,
    joint_attention_dim=32,
    axes_dims_rope=(4, 4, 4),
)

# Qwen/Qwen-Image's scheduler/scheduler_config.json values.
SCHEDULER = QWEN_IMAGE_SCHEDULER

HEIGHT, WIDTH = 48, 80
VAE_SCALE = 8  # QwenImagePipeline's factor without a VAE
TEXT_LEN = 8
STEPS = 4
TRUE_CFG = 4.0  # QwenImagePipeline's default true_cfg_scale
FORWARD_T = [812.5, 347.25]  # scheduler timesteps; the transformer receives t / 1000
FORWARD_VALID = {2: [5, 8], 1: [6]}  # valid text prefix per batch item
GENERATE_VALID, NEGATIVE_VALID = 6, 4


def latent_grid():
    """Packed token grid (h, w), as QwenImagePipeline's img_shapes."""
    return HEIGHT // VAE_SCALE // 2, WIDTH // VAE_SCALE // 2


def prefix_mask(batch_valid):
    """An i64 [B, TEXT_LEN] mask of valid prefixes, as the pipeline's encode_prompt pads them."""
    m = torch.zeros((len(batch_valid), TEXT_LEN), dtype=torch.int64)
    for b, n in enumerate(batch_valid):
        m[b, :n] = 1
    return m


def forward_inputs(gen, batch):
    gh, gw = latent_grid()
    return {
        "hidden_states": torch.randn((batch, gh * gw, TINY["in_channels"]), generator=gen),
        "encoder_hidden_states": torch.randn((batch, TEXT_LEN, TINY["joint_attention_dim"]), generator=gen),
        "encoder_hidden_states_mask": prefix_mask(FORWARD_VALID[batch]),
        "timestep": torch.tensor(FORWARD_T[:batch], dtype=torch.float32) / 1000,
    }


def run_forward(model, fwd):
    batch = fwd["hidden_states"].shape[0]
    with torch.no_grad():
        return model(**fwd, img_shapes=[[(1, *latent_grid())]] * batch, return_dict=False)[0]


def probe(model, fwd, sample, what, same=False, **changed):
    """The output must move when `changed` replaces some inputs (or, with same, must not), or a
    backend that drops (or wrongly uses) them would pass."""
    out = run_forward(model, {**fwd, **changed})
    rel = rel_change(out, sample)
    print(f"{NAME}: {what} changes the output by {rel:.4g}")
    if same:
        assert rel < 1e-6, f"{NAME}: {what} changes the output by {rel:.4g}"
    else:
        assert rel > MIN_CHANGE, f"{NAME}: {what} changes the output by only {rel:.4f}"


def run_pipeline(pipe, **call):
    """QwenImagePipeline.__call__ with a step callback that records the timesteps it ran."""
    return run_recording(pipe, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS, **call)


def write_forwards(model, out_dir, gen):
    outputs = {}
    for suffix, batch in (("", 2), ("_b1", 1)):
        fwd = forward_inputs(gen, batch)
        sample = run_forward(model, fwd)
        assert sample.shape == fwd["hidden_states"].shape and torch.isfinite(sample).all()
        if batch == 2:
            other = torch.Generator().manual_seed(SEED + 2)
            ehs = fwd["encoder_hidden_states"]
            probe(model, fwd, sample, "other text", encoder_hidden_states=torch.randn(ehs.shape, generator=other))
            padded = ehs.clone()
            padded[0, FORWARD_VALID[2][0]:] = torch.randn(padded[0, FORWARD_VALID[2][0]:].shape, generator=other)
            probe(model, fwd, sample, "other values at padded text positions", same=True, encoder_hidden_states=padded)
            probe(model, fwd, sample, "timestep - 0.3", timestep=fwd["timestep"] - 0.3)
            nomask = run_forward(model, {**fwd, "encoder_hidden_states_mask": None})
            rel = rel_change(nomask[0], sample[0])
            print(f"{NAME}: dropping the mask changes item 0 by {rel:.4f}")
            assert rel > MIN_CHANGE, f"{NAME}: the mask changes item 0 by only {rel:.4f}"
            assert torch.equal(nomask[1], sample[1]) or rel_change(nomask[1], sample[1]) < 1e-6, "all-valid item changed"
            save_file({"sample": nomask.contiguous()}, os.path.join(out_dir, "forward_output_nomask.safetensors"))
            # The two batch items differ in every input: they must differ in the output.
            assert rel_change(sample[0], sample[1]) > MIN_CHANGE
        save_file({k: v.contiguous() for k, v in fwd.items()}, os.path.join(out_dir, f"forward_inputs{suffix}.safetensors"))
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output{suffix}.safetensors"))
        outputs[suffix] = (fwd, sample)
    return outputs


def main(argv):
    if argv:
        sys.exit("usage: make_goldens_qwen.py")
    torch.use_deterministic_algorithms(True)
    out_dir = fresh_dir(NAME)
    torch.manual_seed(SEED)
    model = QwenImageTransformer2DModel(**TINY).eval()
    assert model.dtype == torch.float32
    redraw_parameters(model, torch.Generator().manual_seed(SEED))
    pipe = QwenImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
        vae=None,
        text_encoder=None,
        tokenizer=None,
        transformer=model,
    )
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor == VAE_SCALE
    pipe.save_pretrained(out_dir, safe_serialization=True)

    gen = torch.Generator().manual_seed(SEED + 1)
    outputs = write_forwards(model, out_dir, gen)

    gh, gw = latent_grid()
    image_seq_len = gh * gw
    gen_in = {
        "prompt_embeds": torch.randn((1, TEXT_LEN, TINY["joint_attention_dim"]), generator=gen),
        "prompt_embeds_mask": prefix_mask([GENERATE_VALID]),
        "negative_prompt_embeds": torch.randn((1, TEXT_LEN, TINY["joint_attention_dim"]), generator=gen),
        "negative_prompt_embeds_mask": prefix_mask([NEGATIVE_VALID]),
        "latents": torch.randn((1, image_seq_len, TINY["in_channels"]), generator=gen),
    }
    save_file(gen_in, os.path.join(out_dir, "generate_inputs.safetensors"))
    runs = {}
    for masked in (True, False):
        plain = dict(prompt_embeds=gen_in["prompt_embeds"])
        neg = dict(negative_prompt_embeds=gen_in["negative_prompt_embeds"])
        if masked:
            plain["prompt_embeds_mask"] = gen_in["prompt_embeds_mask"]
            neg["negative_prompt_embeds_mask"] = gen_in["negative_prompt_embeds_mask"]
        tag = "" if masked else "_nomask"
        latents, seen = run_pipeline(pipe, latents=gen_in["latents"].clone(), **plain)
        assert seen == [float(t) for t in pipe.scheduler.timesteps], f"callback saw {seen}"
        save_run(os.path.join(out_dir, f"generate{tag}_output.safetensors"), latents, pipe)
        cfg_latents, cfg_seen = run_pipeline(pipe, latents=gen_in["latents"].clone(), true_cfg_scale=TRUE_CFG, **plain, **neg)
        assert cfg_seen == seen
        rel = rel_change(cfg_latents, latents)
        print(f"{NAME}: true CFG{tag} moves the result by {rel:.4f}")
        assert rel > MIN_CHANGE, f"{NAME}: true CFG changes the latents by only {rel:.4f}"
        save_run(os.path.join(out_dir, f"generate{tag}_cfg_output.safetensors"), cfg_latents, pipe)
        runs[masked] = (latents, cfg_latents, seen)
    for i in (0, 1):
        rel = rel_change(runs[True][i], runs[False][i])
        print(f"{NAME}: masks move generate {('plain', 'cfg')[i]} by {rel:.4f}")
        assert rel > MIN_MASK_GENERATE_CHANGE, f"{NAME}: the masks change generate by only {rel:.4f}"

    c = pipe.scheduler.config
    mu = calculate_shift(image_seq_len, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                         c.get("base_shift", 0.5), c.get("max_shift", 1.15))
    seen = runs[True][2]
    print(f"{NAME}: timesteps {seen}, mu {mu}")
    meta = {
        "pipeline": "QwenImagePipeline",
        "generator": "tests/data/make_goldens_qwen.py",
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
        "true_cfg": TRUE_CFG,
        "mu": mu,
        "timesteps": seen,
        "sigmas": [float(s) for s in pipe.scheduler.sigmas],
        "forward_timesteps": FORWARD_T,
        "forward_valid": FORWARD_VALID,
        "generate_valid": GENERATE_VALID,
        "negative_valid": NEGATIVE_VALID,
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")

    # The saved folder reproduces the forwards bit for bit.
    reloaded = QwenImageTransformer2DModel.from_pretrained(os.path.join(out_dir, "transformer")).eval()
    for suffix, (fwd, sample) in outputs.items():
        assert torch.equal(run_forward(reloaded, fwd), sample), f"{NAME}: reloaded transformer differs ({suffix or 'batch 2'})"

    size = folder_size(out_dir)
    print(f"wrote {out_dir}: {size} bytes")
    assert size < MAX_FOLDER_BYTES, f"{out_dir} is {size} bytes, over {MAX_FOLDER_BYTES}"


if __name__ == "__main__":
    main(sys.argv[1:])
