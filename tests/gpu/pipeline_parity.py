#!/usr/bin/env python3
"""The ditrun Python package in diffusers pipelines, on a GPU: WanPipeline and FluxPipeline with
the compiled transformer (ditrun.diffusers.CompiledTransformer) produce the latents of the
diffusers transformer, and the compiled steps add no device-to-host copies.

For each family, a transformer of the published config (Wan2.1-T2V-1.3B, FLUX.1-dev) with
--layers blocks (0: all) and random weights is saved, compiled with ditrun.compile for one
small shape on this GPU, and the pipeline runs from fixed prompt embeddings and noise
(output_type "latent", CFG for Wan, embedded guidance for FLUX) with the stock transformer and
with the compiled one swapped in: cosine of the final latents >= 0.999. torch.profiler counts
device-to-host copies (CUPTI sees the library's driver calls too): the compiled run may not
have more per step than the stock run.

--bench: Wan2.1-1.3B whole (30 blocks) at 480x832, 81 frames, 50 steps with CFG, end to end
against stock and stock + torch.compile (each timed run after a 2-step call of the same shapes;
the latents' cosine against stock from the timed runs; the timings printed and written to --json).

    python3 tests/gpu/pipeline_parity.py [--family wan,flux] [--layers 2] [--steps 4] [--dtype bf16]
           [--target sm_90] [--bench] [--json out.json]
Needs torch, the pinned diffusers, and the ditrun wheel installed (or python/ on PYTHONPATH with
DITRUN_LIBRARY=build/lib/libditrun.so).
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch  # device only
from diffusers import (FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel,  # device only
                       UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel)

import ditrun  # device only
from ditrun.diffusers import CompiledTransformer  # device only

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from pipeline_bench import WAN21_1_3B as WAN_1_3B, redraw_small  # noqa: E402

FLUX_DEV = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                axes_dims_rope=(16, 56, 56))
# The published schedulers: Wan2.1's UniPC with flow shift 3, FLUX.1-dev's dynamic shifting.
WAN_SCHED = dict(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000, flow_shift=3.0)
FLUX_SCHED = dict(base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096, max_shift=1.15, num_train_timesteps=1000,
                  shift=3.0, use_dynamic_shifting=True)
DEV = torch.device("cuda", 0)


def redraw(model, seed):
    redraw_small(torch, model, seed)


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float(torch.dot(a, b) / (a.norm() * b.norm()))


def d2h_copies(fn):
    """(result, device-to-host copies seen by CUPTI while fn ran)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    n = sum(1 for e in prof.events() if "DtoH" in e.name or "Device -> Pageable" in e.name or "Device -> Pinned" in e.name)
    return out, n


def wan_case(a, work):
    cfg = dict(WAN_1_3B, num_layers=a.layers or WAN_1_3B["num_layers"])
    frames, height, width, text_len = (81, 480, 832, 512) if a.bench else (17, 256, 256, 32)
    torch.manual_seed(0)
    model = WanTransformer3DModel(**cfg).eval()
    redraw(model, 1)
    model.save_pretrained(os.path.join(work, "wan"))
    bundle = ditrun.compile(os.path.join(work, "wan"), os.path.join(work, "bundles"), target=a.target, dtype=a.dtype,
                            frames=frames, height=height, width=width, batch=1, text_len=text_len, device="cuda:0")
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=UniPCMultistepScheduler(**WAN_SCHED),
                       transformer=model.to(DEV, dtype))
    pipe.set_progress_bar_config(disable=True)
    gen = torch.Generator().manual_seed(2)
    lat = (1, 16, (frames - 1) // 4 + 1, height // 8, width // 8)
    call = dict(prompt_embeds=torch.randn(1, text_len, 4096, generator=gen).to(DEV, dtype),
                negative_prompt_embeds=torch.randn(1, text_len, 4096, generator=gen).to(DEV, dtype),
                latents=torch.randn(lat, generator=gen).to(DEV), height=height, width=width, num_frames=frames,
                num_inference_steps=a.steps, guidance_scale=5.0, output_type="latent", return_dict=False)
    return "wan", pipe, model, bundle, call


def flux_case(a, work):
    cfg = dict(FLUX_DEV)
    if a.layers:
        cfg.update(num_layers=a.layers, num_single_layers=a.layers)
    height = width = 256
    text_len = 32
    torch.manual_seed(0)
    model = FluxTransformer2DModel(**cfg).eval()
    redraw(model, 3)
    model.save_pretrained(os.path.join(work, "flux"))
    bundle = ditrun.compile(os.path.join(work, "flux"), os.path.join(work, "bundles"), target=a.target, dtype=a.dtype,
                            height=height, width=width, batch=1, text_len=text_len, device="cuda:0")
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**FLUX_SCHED), vae=None, text_encoder=None, tokenizer=None,
                        text_encoder_2=None, tokenizer_2=None, transformer=model.to(DEV, dtype))
    pipe.set_progress_bar_config(disable=True)
    gen = torch.Generator().manual_seed(4)
    tokens = (height // 16) * (width // 16)
    call = dict(prompt_embeds=torch.randn(1, text_len, 4096, generator=gen).to(DEV, dtype),
                pooled_prompt_embeds=torch.randn(1, 768, generator=gen).to(DEV, dtype),
                latents=torch.randn(1, tokens, 64, generator=gen).to(DEV, dtype), height=height, width=width,
                num_inference_steps=a.steps, guidance_scale=3.5, output_type="latent", return_dict=False)
    return "flux", pipe, model, bundle, call


def timed(fn, warm):
    """Seconds of one call of fn, after warm() (a short call of the same shapes: compiles, captures, tunes)."""
    warm()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="wan,flux")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.bench:
        a.family, a.layers, a.steps = "wan", 0, 50
    from ceilings import run_info  # noqa: E402
    results, failed = {"run": run_info(), "device": torch.cuda.get_device_name(0)}, []
    with tempfile.TemporaryDirectory() as work, torch.no_grad():
        for fam in a.family.split(","):
            name, pipe, model, bundle, call = {"wan": wan_case, "flux": flux_case}[fam](a, work)
            run = lambda steps=a.steps: pipe(**{k: (v.clone() if torch.is_tensor(v) else v)  # noqa: E731
                                               for k, v in dict(call, num_inference_steps=steps).items()})[0]
            warm = lambda: run(2)  # noqa: E731
            r = {"steps": a.steps}
            if a.bench:
                # The 50-step runs are the timed ones (each after a 2-step call of the same shapes);
                # the device-to-host count is the parity mode's (the same steps, fewer of them).
                r["seconds_stock"], stock = timed(run, warm)
                pipe.transformer = CompiledTransformer(bundle, like=model)
                r["seconds_compiled"], compiled = timed(run, warm)
                pipe.transformer = torch.compile(model)
                r["seconds_torch_compile"], _ = timed(run, warm)
                print("%s 50 steps with CFG: ditrun %.2f s, diffusers %.2f s, diffusers + torch.compile %.2f s"
                      % (name, r["seconds_compiled"], r["seconds_stock"], r["seconds_torch_compile"]))
                if r["seconds_compiled"] >= min(r["seconds_stock"], r["seconds_torch_compile"]):
                    failed.append("%s: not faster end to end" % name)
                pipe.transformer = CompiledTransformer(bundle, like=model)
            else:
                stock, r["d2h_stock"] = d2h_copies(run)
                pipe.transformer = CompiledTransformer(bundle, like=model)
                compiled, r["d2h_compiled"] = d2h_copies(run)
                print("%s: device-to-host copies: stock %d, compiled %d" % (name, r["d2h_stock"], r["d2h_compiled"]))
                if r["d2h_compiled"] > r["d2h_stock"]:
                    failed.append("%s: the compiled run made %d device-to-host copies, stock %d"
                                  % (name, r["d2h_compiled"], r["d2h_stock"]))
            assert pipe.transformer.config == model.config and pipe._execution_device == DEV
            r["cosine"] = cos = cosine(stock, compiled)
            print("%s: latents cosine %.6f (>= 0.999)" % (name, cos))
            if cos < 0.999:
                failed.append("%s: cosine %.6f < 0.999" % (name, cos))
            # A pipeline call of another shape is refused naming the compiled one.
            try:
                pipe(**dict(call, latents=None, height=call["height"] * 2))
                failed.append("%s: a call at twice the height ran" % name)
            except ditrun.Error as e:
                print("%s: other shape refused: %s" % (name, e))
            results[name] = r
            bundle.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    for f in failed:
        print("FAIL:", f)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
