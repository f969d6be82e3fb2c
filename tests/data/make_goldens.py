#!/usr/bin/env python3
"""Reference data for the tests, produced by the pinned diffusers itself (float32, CPU).

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers
(0.40.0.dev0, commit 58eb52c0803e) are available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens.py

It rewrites
  tests/data/sampler_golden.json   UniPC / Euler schedules and a synthetic 8-element run;
  tests/data/wan_tiny_a/, wan_tiny_b/
    model/                         save_pretrained of a tiny WanTransformer3DModel (fp32);
    forward_inputs.safetensors     hidden_states [B,C,F,H,W] f32, timestep [B] i64,
                                   encoder_hidden_states [B,L,text_dim] f32;
    forward_output.safetensors     sample = model(...).sample;
    generate_inputs.safetensors    prompt_embeds, negative_prompt_embeds [B,L,text_dim],
                                   init_latents [B,C,F,H,W];
    generate_unipc.safetensors     latents after `steps` UniPC steps with CFG (WanPipeline's
                                   loop without text encoder and VAE), plus the scheduler's
                                   timesteps and sigmas;
    generate_euler.safetensors     the same with FlowMatchEulerDiscreteScheduler;
    meta.json                      pixel frames/height/width, batch, text_len, steps,
                                   guidance, shift, forward timesteps.

Everything is seeded, so a rerun on the same torch build reproduces the files.
"""

import json
import math
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler, WanTransformer3DModel
from diffusers.models.normalization import RMSNorm as DiffusersRMSNorm

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_TIMESTEPS = 1000

# ---------------------------------------------------------------------------------------------
# Schedulers


def make_unipc(shift):
    """The Wan2.1 scheduler configuration."""
    return UniPCMultistepScheduler(
        num_train_timesteps=TRAIN_TIMESTEPS,
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
        flow_shift=shift,
        solver_order=2,
        solver_type="bh2",
        predict_x0=True,
        lower_order_final=True,
        final_sigmas_type="zero",
        timestep_spacing="linspace",
        disable_corrector=[],
        thresholding=False,
    )


def make_euler(shift):
    return FlowMatchEulerDiscreteScheduler(shift=shift)


SCHEDULERS = {"unipc": make_unipc, "euler": make_euler}

# The synthetic run of sampler_golden.json. tests/unit/test_sampler.c computes the same
# function: model_out[j] = (float)(0.5 * (double)sample[j] + 0.1 * c), with
# c = (((j * 37 + i * 11) % 17) - 8) / 8.0 exactly, i the step index.
SYNTH_INIT = np.array([0.8, -1.3, 0.25, 1.7, -0.6, -2.1, 0.05, 1.1], dtype=np.float32)
SYNTH_MODEL_OUT = (
    "model_out[j] = (float)(0.5 * (double)sample[j] + 0.1 * c), "
    "c = (((j * 37 + i * 11) % 17) - 8) / 8.0, i = step index"
)


def synth_model_out(sample, i):
    out = np.empty_like(sample)
    for j in range(sample.shape[0]):
        c = (((j * 37 + i * 11) % 17) - 8) / 8.0
        out[j] = np.float32(0.5 * float(sample[j]) + 0.1 * c)
    return out


def sampler_case(kind, steps, shift):
    sched = SCHEDULERS[kind](shift)
    sched.set_timesteps(steps)
    sched.set_begin_index(0)
    # UniPC's update contracts over a (batch, history, channel...) layout: keep a batch of 1.
    x = torch.from_numpy(SYNTH_INIT.copy()).reshape(1, -1)
    latents = []
    for i, t in enumerate(sched.timesteps):
        mo = torch.from_numpy(synth_model_out(x.reshape(-1).numpy(), i)).reshape(1, -1)
        x = sched.step(mo, t, x, return_dict=False)[0]
        assert x.dtype == torch.float32
        latents.append([float(v) for v in x.reshape(-1).numpy()])
    ts = sched.timesteps
    return {
        "sampler": kind,
        "steps": steps,
        "shift": shift,
        "timesteps_dtype": str(ts.dtype).replace("torch.", ""),
        "timesteps": [int(v) if not ts.is_floating_point() else float(v) for v in ts.tolist()],
        "sigmas": [float(v) for v in sched.sigmas.numpy()],
        "latents": latents,
    }


def write_sampler_golden():
    cases = []
    for kind in ("unipc", "euler"):
        for steps, shift in ((4, 3.0), (10, 5.0), (50, 3.0)):
            cases.append(sampler_case(kind, steps, shift))
    doc = {
        "generator": "tests/data/make_goldens.py",
        "diffusers_version": diffusers.__version__,
        "torch_version": torch.__version__,
        "model_out": SYNTH_MODEL_OUT,
        "init": [float(v) for v in SYNTH_INIT],
        "cases": cases,
    }
    path = os.path.join(HERE, "sampler_golden.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases")


# ---------------------------------------------------------------------------------------------
# Tiny transformers

CONFIGS = {
    "wan_tiny_a": dict(
        model=dict(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=4,
            out_channels=4,
            text_dim=24,
            freq_dim=32,
            ffn_dim=64,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=1e-6,
            rope_max_seq_len=64,
        ),
        batch=1,
        text_len=7,
        latent=(3, 4, 6),
        timestep=[757],
        seed=1234,
    ),
    "wan_tiny_b": dict(
        model=dict(
            patch_size=(1, 2, 2),
            num_attention_heads=4,
            attention_head_dim=12,
            in_channels=6,
            out_channels=6,
            text_dim=20,
            freq_dim=16,
            ffn_dim=80,
            num_layers=3,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=1e-6,
            rope_max_seq_len=64,
        ),
        batch=2,
        text_len=5,
        latent=(2, 6, 4),
        # Different per batch item, so per-sample time conditioning is exercised.
        timestep=[757, 312],
        seed=5678,
    ),
}

STEPS = 4
GUIDANCE = 5.0
SHIFT = 3.0
MIN_BLOCK_CHANGE = 0.05


def redraw_parameters(model, gen):
    """Replaces the default initialisation (small or zero in places, which would hide bugs)
    with draws that make every part of the network matter."""
    # diffusers' own RMSNorm (Qwen-Image's q/k and text norms) is drawn as torch's.
    norm_types = (torch.nn.LayerNorm, torch.nn.RMSNorm, DiffusersRMSNorm)
    with torch.no_grad():
        for mod_name, mod in model.named_modules():
            for p_name, p in mod.named_parameters(recurse=False):
                full = f"{mod_name}.{p_name}" if mod_name else p_name
                if p_name == "scale_shift_table":
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
                elif isinstance(mod, norm_types) and p_name == "weight":
                    p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.2)
                elif isinstance(mod, norm_types) and p_name == "bias":
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
                elif p.ndim >= 2:
                    fan_in = math.prod(p.shape[1:])
                    p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
                elif p_name == "bias":
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
                else:
                    raise RuntimeError(f"no initialisation rule for parameter {full} {tuple(p.shape)}")


def block_changes(model, run):
    """Runs `run()` and returns, per transformer block and call, ||out - in|| / ||in|| of the
    residual stream."""
    changes = {i: [] for i in range(len(model.blocks))}
    handles = []
    for i, blk in enumerate(model.blocks):

        def hook(mod, args, out, i=i):
            h_in = args[0]
            changes[i].append(float((out - h_in).norm() / h_in.norm()))

        handles.append(blk.register_forward_hook(hook))
    try:
        result = run()
    finally:
        for h in handles:
            h.remove()
    return result, changes


def generate(model, kind, prompt_embeds, negative_prompt_embeds, init_latents):
    """WanPipeline's denoising loop with classifier-free guidance."""
    sched = SCHEDULERS[kind](SHIFT)
    sched.set_timesteps(STEPS)
    sched.set_begin_index(0)
    latents = init_latents.clone()
    dtype = model.dtype
    for t in sched.timesteps:
        latent_model_input = latents.to(dtype)
        timestep = t.expand(latents.shape[0])
        noise_pred = model(
            hidden_states=latent_model_input,
            timestep=timestep,
            encoder_hidden_states=prompt_embeds,
            return_dict=False,
        )[0]
        noise_uncond = model(
            hidden_states=latent_model_input,
            timestep=timestep,
            encoder_hidden_states=negative_prompt_embeds,
            return_dict=False,
        )[0]
        noise_pred = noise_uncond + GUIDANCE * (noise_pred - noise_uncond)
        latents = sched.step(noise_pred, t, latents, return_dict=False)[0]
    return {
        "latents": latents.contiguous(),
        "timesteps": sched.timesteps.contiguous(),
        "sigmas": sched.sigmas.contiguous(),
    }


def folder_size(path):
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


# ---------------------------------------------------------------------------------------------
# What every golden script (make_goldens_*.py) shares

# The published scheduler/scheduler_config.json values of FLUX.1-dev, FLUX.1-schnell and
# Qwen/Qwen-Image.
FLUX_DEV_SCHEDULER = dict(
    base_image_seq_len=256,
    base_shift=0.5,
    max_image_seq_len=4096,
    max_shift=1.15,
    num_train_timesteps=1000,
    shift=3.0,
    use_dynamic_shifting=True,
)
FLUX_SCHNELL_SCHEDULER = dict(FLUX_DEV_SCHEDULER, shift=1.0, use_dynamic_shifting=False)
QWEN_IMAGE_SCHEDULER = dict(
    base_image_seq_len=256,
    base_shift=0.5,
    invert_sigmas=False,
    max_image_seq_len=8192,
    max_shift=0.9,
    num_train_timesteps=1000,
    shift=1.0,
    shift_terminal=0.02,
    stochastic_sampling=False,
    time_shift_type="exponential",
    use_beta_sigmas=False,
    use_dynamic_shifting=True,
    use_exponential_sigmas=False,
    use_karras_sigmas=False,
)


def fresh_dir(name):
    """tests/data/name, emptied (a rerun leaves nothing stale)."""
    path = os.path.join(HERE, name)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    return path


def rel_change(a, b):
    return float((a - b).norm() / b.norm())


def dump_meta(out_dir, meta):
    with open(os.path.join(out_dir, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")


def write_meta(out_dir, meta, max_bytes):
    """meta.json beside the goldens, then the folder's size against its budget; returns the size."""
    dump_meta(out_dir, meta)
    size = folder_size(out_dir)
    assert size <= max_bytes, f"{out_dir}: {size} bytes > {max_bytes}"
    return size


def finish_pipeline_folder(out, name, meta, max_bytes):
    """A pipeline golden's meta.json, every file of the folder made readable to all (mode 0644), then
    the folder's size against its budget."""
    dump_meta(out, meta)
    for root, _, files in os.walk(out):
        for file in files:
            os.chmod(os.path.join(root, file), 0o644)
    size = folder_size(out)
    print(f"{name}: {size} bytes")
    assert size <= max_bytes, f"{name} is {size} bytes, over {max_bytes}"


def run_recording(pipe, **call):
    """pipe(**call) to latents with a step callback that records the timesteps it ran: (latents, timesteps)."""
    seen = []

    def on_step(p, i, t, kwargs):
        seen.append(float(t))
        return {}

    with torch.no_grad():
        latents = pipe(output_type="latent", return_dict=False, callback_on_step_end=on_step, **call)[0]
    assert latents.dtype == torch.float32 and torch.isfinite(latents).all()
    return latents, seen


def save_run(path, latents, pipe):
    """A generate's latents with the timesteps and sigmas its scheduler ran."""
    save_file({"latents": latents.contiguous(), "timesteps": pipe.scheduler.timesteps.clone().contiguous(),
               "sigmas": pipe.scheduler.sigmas.clone().contiguous()}, path)


def write_tiny(name, spec):
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])

    model = WanTransformer3DModel(**spec["model"]).eval()
    assert model.dtype == torch.float32
    redraw_parameters(model, gen)
    model.save_pretrained(os.path.join(out_dir, "model"), safe_serialization=True)

    cfg = spec["model"]
    B, L = spec["batch"], spec["text_len"]
    F, H, W = spec["latent"]
    C = cfg["in_channels"]
    hidden_states = torch.randn((B, C, F, H, W), generator=gen)
    encoder_hidden_states = torch.randn((B, L, cfg["text_dim"]), generator=gen)
    timestep = torch.tensor(spec["timestep"], dtype=torch.int64)
    assert timestep.shape == (B,)

    with torch.no_grad():
        sample, changes = block_changes(
            model,
            lambda: model(
                hidden_states=hidden_states, timestep=timestep, encoder_hidden_states=encoder_hidden_states
            ).sample,
        )
    for i, c in changes.items():
        print(f"{name}: block {i} residual change {c[0]:.4f}")
        assert c[0] > MIN_BLOCK_CHANGE, f"{name}: block {i} changes the residual stream by only {c[0]:.4f}"
    assert sample.shape == (B, cfg["out_channels"], F, H, W)
    assert torch.isfinite(sample).all()
    # The text and the timestep must matter too, or a backend that drops them would pass.
    # A separate generator keeps the recorded draws independent of these probes.
    probe_gen = torch.Generator().manual_seed(spec["seed"] + 1)
    other_text = torch.randn(encoder_hidden_states.shape, generator=probe_gen)
    with torch.no_grad():
        for what, out in (
            ("other text", model(hidden_states, timestep, other_text).sample),
            ("timestep - 300", model(hidden_states, timestep - 300, encoder_hidden_states).sample),
            ("timestep + 1", model(hidden_states, timestep + 1, encoder_hidden_states).sample),
        ):
            rel = float((out - sample).norm() / sample.norm())
            print(f"{name}: output change with {what}: {rel:.4f}")
            assert rel > MIN_BLOCK_CHANGE, f"{name}: {what} changes the output by only {rel:.4f}"

    save_file(
        {
            "hidden_states": hidden_states.contiguous(),
            "timestep": timestep.contiguous(),
            "encoder_hidden_states": encoder_hidden_states.contiguous(),
        },
        os.path.join(out_dir, "forward_inputs.safetensors"),
    )
    save_file({"sample": sample.contiguous()}, os.path.join(out_dir, "forward_output.safetensors"))

    prompt_embeds = torch.randn((B, L, cfg["text_dim"]), generator=gen)
    negative_prompt_embeds = torch.randn((B, L, cfg["text_dim"]), generator=gen)
    init_latents = torch.randn((B, C, F, H, W), generator=gen)
    save_file(
        {
            "prompt_embeds": prompt_embeds,
            "negative_prompt_embeds": negative_prompt_embeds,
            "init_latents": init_latents,
        },
        os.path.join(out_dir, "generate_inputs.safetensors"),
    )
    for kind in ("unipc", "euler"):
        with torch.no_grad():
            res = generate(model, kind, prompt_embeds, negative_prompt_embeds, init_latents)
        lat = res["latents"]
        assert lat.dtype == torch.float32 and torch.isfinite(lat).all()
        rel = float((lat - init_latents).norm() / init_latents.norm())
        print(f"{name}: {kind} timesteps {res['timesteps'].tolist()} (dtype {res['timesteps'].dtype}), "
              f"latents change {rel:.4f}")
        save_file(res, os.path.join(out_dir, f"generate_{kind}.safetensors"))

    meta = {
        "frames": (F - 1) * 4 + 1,
        "height": H * 8,
        "width": W * 8,
        "batch": B,
        "text_len": L,
        "steps": STEPS,
        "guidance": GUIDANCE,
        "shift": SHIFT,
        "timestep": spec["timestep"],
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    size = folder_size(out_dir)
    print(f"wrote {out_dir}: {size} bytes")
    assert size < 1_000_000, f"{out_dir} is {size} bytes"


def main():
    torch.set_grad_enabled(False)
    print(f"diffusers {diffusers.__version__} from {os.path.dirname(diffusers.__file__)}, torch {torch.__version__}")
    write_sampler_golden()
    for name, spec in CONFIGS.items():
        write_tiny(name, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
