#!/usr/bin/env python3
"""Reference flow-match schedules, Euler steps and true-CFG combinations, produced by the pinned
diffusers itself (float32, CPU), for tests/unit/test_flow_schedule.c.

Run from the repository root, wherever torch, numpy and the pinned diffusers (0.40.0.dev0,
commit 58eb52c0803e) are available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_flow_schedule_golden.py

It rewrites tests/data/flow_schedule_golden.json:
  cases   one per scheduler config and step count: FlowMatchEulerDiscreteScheduler(**config)
          given the sigmas (and mu) the pipeline passes to set_timesteps, exactly as
          FluxPipeline / QwenImagePipeline ("flux": np.linspace(1, 1/n, n), mu from the
          pipeline's calculate_shift on image_seq_len) and HunyuanVideoPipeline ("hunyuan":
          np.linspace(1, 0, n + 1)[:-1]) do, or none ("default": set_timesteps(n), as Wan's
          Euler). Each holds the scheduler's sigmas (terminal appended) and timesteps, and a run
          of `steps` scheduler.step calls on an 8-element float32 sample: the model output fed
          at each step (seeded) and the sample after it.
  cfg     true classifier-free guidance on fixed [2, 3, 5] tensors: FluxPipeline's (and
          HunyuanVideo's) neg + s * (pos - neg), and QwenImagePipeline's with the norm rescale
          over the last dimension, for two scales.

The FLUX.1-dev and FLUX.1-schnell configs are the published scheduler/scheduler_config.json
values; Qwen-Image's (max_image_seq_len 8192, max_shift 0.9, shift_terminal 0.02) are those of
Qwen/Qwen-Image's scheduler_config.json (diffusers' Qwen-Image docs show the same config with
the Lightning LoRA's changes); HunyuanVideo's is shift 7.0 as the pipeline's tests build it.
Everything is seeded, so a rerun reproduces the file.
"""

import json
import os
import sys

import numpy as np
import torch

import diffusers
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.flux.pipeline_flux import calculate_shift as flux_calculate_shift
from diffusers.pipelines.flux.pipeline_flux import retrieve_timesteps
from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift as qwen_calculate_shift

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The published configs, shared with the pipelines' golden scripts.
from make_goldens import FLUX_DEV_SCHEDULER, FLUX_SCHNELL_SCHEDULER, QWEN_IMAGE_SCHEDULER  # noqa: E402

FLUX_DEV, FLUX_SCHNELL, QWEN_IMAGE = FLUX_DEV_SCHEDULER, FLUX_SCHNELL_SCHEDULER, QWEN_IMAGE_SCHEDULER
HUNYUAN_VIDEO = dict(shift=7.0)

# (name, config, sigmas kind, image_seq_len or None, steps list, calculate_shift)
CASES = [
    ("flux_dev", FLUX_DEV, "flux", 4096, (4, 28, 50), flux_calculate_shift),
    ("flux_dev", FLUX_DEV, "flux", 16, (4, 28, 50), flux_calculate_shift),
    ("flux_schnell", FLUX_SCHNELL, "flux", 4096, (4,), flux_calculate_shift),
    ("qwen_image", QWEN_IMAGE, "flux", 4096, (4, 50), qwen_calculate_shift),
    ("qwen_image", QWEN_IMAGE, "flux", 16, (4, 50), qwen_calculate_shift),
    ("hunyuan_video", HUNYUAN_VIDEO, "hunyuan", None, (4, 50), None),
    # Beyond the published configs, so every branch of set_timesteps is compared: linear time
    # shift, a terminal stretch on the float64 default sigmas, and inverted sigmas.
    ("linear_terminal", dict(FLUX_DEV, time_shift_type="linear", shift_terminal=0.1), "flux", 1024, (10,),
     flux_calculate_shift),
    ("default_dynamic", dict(QWEN_IMAGE, shift_terminal=0.05), "default", 2048, (8,), qwen_calculate_shift),
    ("default_static", dict(shift=5.0, shift_terminal=0.03), "default", None, (6,), None),
    ("inverted", dict(shift=5.0, invert_sigmas=True), "hunyuan", None, (6,), None),
]

N_SAMPLE = 8


def initial_sigmas(kind, n):
    """What the pipeline passes as `sigmas` (None: the scheduler spaces its own)."""
    if kind == "flux":
        return np.linspace(1.0, 1 / n, n)
    if kind == "hunyuan":
        return np.linspace(1.0, 0.0, n + 1)[:-1]
    return None


def schedule_case(name, config, kind, image_seq_len, steps, calc, gen):
    sched = FlowMatchEulerDiscreteScheduler(**config)
    mu = None
    if calc is not None:
        c = sched.config
        mu = calc(
            image_seq_len,
            c.get("base_image_seq_len", 256),
            c.get("max_image_seq_len", 4096),
            c.get("base_shift", 0.5),
            c.get("max_shift", 1.15),
        )
    sigmas = initial_sigmas(kind, steps)
    kwargs = {"mu": mu} if mu is not None else {}
    if sigmas is not None:
        timesteps, _ = retrieve_timesteps(sched, steps, "cpu", sigmas=sigmas, **kwargs)
    else:
        timesteps, _ = retrieve_timesteps(sched, steps, "cpu", **kwargs)
    assert timesteps.dtype == torch.float32 and sched.sigmas.dtype == torch.float32
    sched.set_begin_index(0)
    x = torch.randn(N_SAMPLE, generator=gen, dtype=torch.float32)
    init = [float(v) for v in x]
    model_out, latents = [], []
    for t in timesteps:
        mo = torch.randn(N_SAMPLE, generator=gen, dtype=torch.float32)
        x = sched.step(mo, t, x, return_dict=False)[0]
        assert x.dtype == torch.float32
        model_out.append([float(v) for v in mo])
        latents.append([float(v) for v in x])
    return {
        "name": name,
        "config": dict(sched.config),
        "sigmas_kind": kind,
        "image_seq_len": image_seq_len,
        "mu": mu,
        "steps": steps,
        "sigmas": [float(v) for v in sched.sigmas],
        "timesteps": [float(v) for v in timesteps],
        "init": init,
        "model_out": model_out,
        "latents": latents,
    }


def cfg_cases(gen):
    pos = torch.randn(2, 3, 5, generator=gen, dtype=torch.float32)
    neg = torch.randn(2, 3, 5, generator=gen, dtype=torch.float32)
    out = []
    for scale in (2.0, 4.5):
        # FluxPipeline and HunyuanVideoPipeline.
        plain = neg + scale * (pos - neg)
        # QwenImagePipeline.
        comb = neg + scale * (pos - neg)
        cond_norm = torch.norm(pos, dim=-1, keepdim=True)
        noise_norm = torch.norm(comb, dim=-1, keepdim=True)
        normed = comb * (cond_norm / noise_norm)
        out.append({
            "scale": scale,
            "plain": [float(v) for v in plain.reshape(-1)],
            "norm": [float(v) for v in normed.reshape(-1)],
        })
    return {
        "shape": list(pos.shape),
        "pos": [float(v) for v in pos.reshape(-1)],
        "neg": [float(v) for v in neg.reshape(-1)],
        "cases": out,
    }


def main():
    gen = torch.Generator().manual_seed(20240607)
    cases = []
    for name, config, kind, seq, steps_list, calc in CASES:
        for steps in steps_list:
            cases.append(schedule_case(name, config, kind, seq, steps, calc, gen))
    doc = {
        "generator": "tests/data/make_flow_schedule_golden.py",
        "diffusers_version": diffusers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "cases": cases,
        "cfg": cfg_cases(gen),
    }
    path = os.path.join(HERE, "flow_schedule_golden.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} schedule cases")


if __name__ == "__main__":
    main()
