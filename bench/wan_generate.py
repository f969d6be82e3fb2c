#!/usr/bin/env python3
"""A whole denoising loop, end to end, in one run: `ditrun generate` against the same loop in
diffusers (WanTransformer3DModel + UniPCMultistepScheduler as WanPipeline configures them for
Wan2.1, classifier-free guidance), same weights, embeddings and initial latents. Prints both
times, the ratio and the final latents' cosine and relative L2.

usage: bench/wan_generate.py --model DIR --bundle BUNDLE --ditrun BIN --out RESULTS_DIR
           --frames 81 --height 480 --width 832 [--text-len 512] [--steps 50] [--guidance 5] [--shift 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceilings import run_info  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for k in ("--model", "--bundle", "--ditrun", "--out"):
        ap.add_argument(k, required=True)
    for k in ("--frames", "--height", "--width"):
        ap.add_argument(k, type=int, required=True)
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--guidance", type=float, default=5.0)
    ap.add_argument("--shift", type=float, default=3.0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    from diffusers import UniPCMultistepScheduler, WanTransformer3DModel

    dev = torch.device("cuda")
    model = WanTransformer3DModel.from_pretrained(a.model, torch_dtype=torch.bfloat16).to(dev).eval()
    cfg = model.config
    f, h, w = (a.frames - 1) // 4 + 1, a.height // 8, a.width // 8
    g = torch.Generator().manual_seed(0)
    latents = torch.randn(1, cfg.in_channels, f, h, w, generator=g)
    prompt = torch.randn(1, a.text_len, cfg.text_dim, generator=g)
    negative = torch.randn(1, a.text_len, cfg.text_dim, generator=g)
    inputs = os.path.join(a.out, "generate_inputs.safetensors")
    save_file({"prompt_embeds": prompt, "negative_prompt_embeds": negative, "init_latents": latents}, inputs)

    sched = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=a.shift,
                                    num_train_timesteps=1000, solver_order=2, solver_type="bh2", predict_x0=True,
                                    lower_order_final=True, final_sigmas_type="zero", timestep_spacing="linspace")
    sched.set_timesteps(a.steps, device=dev)
    x = latents.to(dev)
    pe, ne = prompt.to(dev, torch.bfloat16), negative.to(dev, torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        for t in sched.timesteps:
            xin = x.to(torch.bfloat16)
            tt = t.expand(1)
            cond = model(hidden_states=xin, timestep=tt, encoder_hidden_states=pe, return_dict=False)[0]
            unc = model(hidden_states=xin, timestep=tt, encoder_hidden_states=ne, return_dict=False)[0]
            pred = unc + a.guidance * (cond - unc)
            x = sched.step(pred, t, x, return_dict=False)[0]
    torch.cuda.synchronize()
    ref_s = time.perf_counter() - t0
    ref = x.float().cpu()
    del model
    torch.cuda.empty_cache()

    out = os.path.join(a.out, "ditrun_latents.safetensors")
    t0 = time.perf_counter()
    r = subprocess.run([a.ditrun, "generate", a.bundle, "--prompt-embeds", inputs, "--negative-embeds", inputs,
                        "--init-latents", inputs, "--steps", str(a.steps), "--guidance", str(a.guidance), "--shift",
                        str(a.shift), "--out", out], capture_output=True, text=True)
    ours_s = time.perf_counter() - t0
    if r.returncode:
        print(r.stdout, r.stderr)
        sys.exit("ditrun generate failed")
    loop_s = None
    for line in r.stderr.splitlines():
        if "generate" in line and "steps in" in line:
            loop_s = float(line.split("steps in")[1].strip().rstrip("s"))
    ours = load_file(out)["latents"].float()
    cos = torch.nn.functional.cosine_similarity(ours.flatten(), ref.flatten(), dim=0).item()
    rel = ((ours - ref).norm() / ref.norm()).item()
    res = {"run": run_info(), "device": torch.cuda.get_device_name(0), "steps": a.steps, "diffusers_loop_s": ref_s, "ditrun_loop_s": loop_s, "ditrun_process_s": ours_s,
           "cosine": cos, "rel_l2": rel}
    print(f"\n{a.steps}-step generate with CFG: diffusers loop {ref_s:.2f} s, ditrun loop {loop_s:.2f} s "
          f"(process {ours_s:.2f} s with load), ratio {ref_s / loop_s:.2f}x; final latents cosine {cos:.6f}, "
          f"relative L2 {rel:.3e}")
    with open(os.path.join(a.out, "generate_results.json"), "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
