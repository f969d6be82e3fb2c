#!/usr/bin/env python3
"""One Wan transformer forward, every contender in one run: ditrun, diffusers eager and
diffusers under torch.compile, on the same config, shape, weights and inputs.

Prints the median of device-synchronized runs after warm-up, the ratios, each contender's peak
device memory, ditrun's time split, and parity of ditrun's output against diffusers' (cosine,
relative L2). Needs torch with CUDA and the pinned diffusers source on PYTHONPATH.

usage: bench/wan_forward.py --model DIR --bundle BUNDLE --ditrun BIN --out RESULTS_DIR
           --frames 81 --height 480 --width 832 [--text-len 512] [--iters 5] [--no-compile]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file, save_file

from gpumem import MemPoll, used_mib


# Ceilings measured on the H200 (shared baselines): bf16 GEMMs through cuBLAS, attention through
# torch SDPA's cuDNN backend at this shape (1x12x32760x128).
CEILING_TFLOPS = {"gemm": 740.0, "attention": 632.0}


def plan_flops(plan):
    """FLOPs per forward by op class, from the plan's shapes: 2MNK per product, 4*B*Sq*Lk*C per
    attention (QK^T and PV)."""
    fl = {"gemm": 0.0, "attention": 0.0}
    for st in plan["steps"]:
        v = [plan["values"][i]["shape"] for i in st["in"]]
        if st["op"] == "linear":
            m = 1
            for d in v[0][:-1]:
                m *= d
            fl["gemm"] += 2.0 * m * v[1][0] * v[0][-1]
        elif st["op"] == "attention":
            fl["attention"] += 4.0 * v[0][0] * v[0][1] * v[1][1] * v[0][2]
    return fl


def timed(fn, iters, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--ditrun", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--frames", type=int, required=True)
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    from diffusers import WanTransformer3DModel

    dev = torch.device("cuda")
    model = WanTransformer3DModel.from_pretrained(a.model, torch_dtype=torch.bfloat16).to(dev).eval()
    cfg = model.config
    f, h, w = (a.frames - 1) // 4 + 1, a.height // 8, a.width // 8
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, cfg.in_channels, f, h, w, generator=g)
    t = torch.tensor([500], dtype=torch.int64)
    e = torch.randn(1, a.text_len, cfg.text_dim, generator=g)
    inputs = os.path.join(a.out, "inputs.safetensors")
    save_file({"hidden_states": x, "timestep": t, "encoder_hidden_states": e}, inputs)
    xd, td, ed = x.to(dev, torch.bfloat16), t.to(dev), e.to(dev, torch.bfloat16)
    results = {"shape": [1, cfg.in_channels, f, h, w], "text_len": a.text_len}

    with torch.no_grad():
        def eager():
            return model(hidden_states=xd, timestep=td, encoder_hidden_states=ed, return_dict=False)[0]
        torch.cuda.reset_peak_memory_stats()
        ref = eager().float()
        results["eager_ms"] = 1e3 * timed(eager, a.iters)
        results["eager_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        save_file({"sample": ref.cpu().contiguous()}, os.path.join(a.out, "diffusers_output.safetensors"))
        print(f"diffusers eager: {results['eager_ms']:.1f} ms, peak {results['eager_peak_gib']:.2f} GiB", flush=True)
        if not a.no_compile:
            cmodel = torch.compile(model)
            t0 = time.perf_counter()
            cmodel(hidden_states=xd, timestep=td, encoder_hidden_states=ed, return_dict=False)
            torch.cuda.synchronize()
            results["compile_s"] = time.perf_counter() - t0
            torch.cuda.reset_peak_memory_stats()
            results["compiled_ms"] = 1e3 * timed(
                lambda: cmodel(hidden_states=xd, timestep=td, encoder_hidden_states=ed, return_dict=False), a.iters)
            results["compiled_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            print(f"torch.compile: {results['compiled_ms']:.1f} ms (compile {results['compile_s']:.0f} s)", flush=True)
    del model, xd, ed
    torch.cuda.empty_cache()
    base = used_mib(0)

    poll = MemPoll(gpu=0, every_s=0.05)
    poll.start()
    out = os.path.join(a.out, "ditrun_output.safetensors")
    t0 = time.perf_counter()
    fw = subprocess.run([a.ditrun, "forward", a.bundle, "--inputs", inputs, "--out", out], capture_output=True, text=True)
    results["ditrun_first_forward_s"] = time.perf_counter() - t0
    bench = subprocess.run([a.ditrun, "bench", a.bundle, "--inputs", inputs, "--steps", str(a.iters)],
                           capture_output=True, text=True)
    graph = subprocess.run([a.ditrun, "bench", a.bundle, "--inputs", inputs, "--steps", str(a.iters), "--cuda-graph"],
                           capture_output=True, text=True)
    poll.stop = True
    poll.join()
    for line in graph.stdout.splitlines():
        if line.startswith("forward_ms_median"):
            results["ditrun_graph_ms"] = float(line.split()[1])
    if graph.returncode:
        print("ditrun --cuda-graph failed:", graph.stderr.strip()[-400:], flush=True)
    print(fw.stderr.strip(), bench.stderr.strip(), sep="\n", flush=True)
    if fw.returncode or bench.returncode:
        print(fw.stdout, bench.stdout)
        sys.exit("ditrun failed")
    for line in bench.stdout.splitlines():
        k, *v = line.split()
        if k == "forward_ms_median":
            results["ditrun_ms"] = float(v[0])
        elif k == "split_ms":
            pairs = v[:v.index("(step-synchronized")] if "(step-synchronized" in v else v
            results["split_ms"] = {pairs[i]: float(pairs[i + 1]) for i in range(0, len(pairs) - 1, 2)}
        elif k == "by_op_ms":
            results["by_op_ms"] = {kv.split("=")[0]: float(kv.split("=")[1]) for kv in v}
    results["ditrun_peak_gib"] = (poll.peak - base) / 1024
    ours = load_file(out)["sample"].float()
    ref = ref.cpu()
    cos = torch.nn.functional.cosine_similarity(ours.flatten(), ref.flatten(), dim=0).item()
    rel_l2 = ((ours - ref).norm() / ref.norm()).item()
    results["parity"] = {"cosine": cos, "rel_l2": rel_l2}

    # Our GEMMs against cuBLAS through torch on the same shapes, same call: every linear of the
    # plan that the bundle runs through cuBLASLt (the others are tiny generated kernels).
    man = json.load(open(os.path.join(a.bundle, "manifest.json")))
    plan_hash = [b["hash"] for b in man["blobs"] if b["role"] == "plan"][0]
    plan = json.load(open(os.path.join(a.bundle, "blobs", plan_hash)))
    shapes = {}
    for st in plan["steps"]:
        if st["op"] != "linear" or "kernel" in st:
            continue
        x, w = plan["values"][st["in"][0]], plan["values"][st["in"][1]]
        k = x["shape"][-1]
        m = 1
        for d in x["shape"][:-1]:
            m *= d
        key = (m, w["shape"][0], k, len(st["in"]) == 3, st.get("ints", {}).get("act", 0))
        shapes[key] = shapes.get(key, 0) + 1
    ref_ms = 0.0
    with torch.no_grad():
        for (m, n, k, bias, act), count in sorted(shapes.items()):
            xx = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            ww = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k**0.5
            bb = torch.randn(n, device=dev, dtype=torch.bfloat16) if bias else None
            fn = (lambda: torch.nn.functional.gelu(torch.nn.functional.linear(xx, ww, bb), approximate="tanh")) if act else \
                 (lambda: torch.nn.functional.linear(xx, ww, bb))
            t = timed(fn, 10)
            ref_ms += 1e3 * t * count
            print(f"cuBLAS (torch) {m}x{n}x{k}{' +bias' if bias else ''}{' +gelu' if act else ''}: {1e3 * t:.3f} ms x {count}", flush=True)
    results["cublas_gemm_ms"] = ref_ms
    results["ditrun_gemm_ms"] = results.get("split_ms", {}).get("gemm")

    print("\n| contender | forward ms | vs ditrun | peak GiB |\n| --- | --- | --- | --- |")
    print(f"| ditrun | {results['ditrun_ms']:.1f} | 1.00 | {results['ditrun_peak_gib']:.2f} |")
    if "ditrun_graph_ms" in results:
        print(f"| ditrun, CUDA graph | {results['ditrun_graph_ms']:.1f} | {results['ditrun_graph_ms'] / results['ditrun_ms']:.2f}x | |")
    print(f"| diffusers eager | {results['eager_ms']:.1f} | {results['eager_ms'] / results['ditrun_ms']:.2f}x | "
          f"{results['eager_peak_gib']:.2f} |")
    if "compiled_ms" in results:
        print(f"| torch.compile | {results['compiled_ms']:.1f} | {results['compiled_ms'] / results['ditrun_ms']:.2f}x | "
              f"{results['compiled_peak_gib']:.2f} |")
    print(f"\nditrun split (step-synchronized): {results.get('split_ms')}")
    print(f"ditrun by op (step-synchronized): {results.get('by_op_ms')}")
    if results.get("ditrun_gemm_ms"):
        print(f"GEMMs: ditrun {results['ditrun_gemm_ms']:.1f} ms vs cuBLAS through torch {ref_ms:.1f} ms on the same shapes "
              f"(ratio {results['ditrun_gemm_ms'] / ref_ms:.3f})")
    fl = plan_flops(plan)
    split = results.get("split_ms") or {}
    for cls in ("gemm", "attention"):
        if split.get(cls):
            tf = fl[cls] / (split[cls] * 1e-3) / 1e12
            results[f"{cls}_tflops"] = tf
            print(f"{cls}: {fl[cls] / 1e12:.1f} TFLOP in {split[cls]:.1f} ms = {tf:.0f} TFLOP/s, "
                  f"{100 * tf / CEILING_TFLOPS[cls]:.0f}% of the measured ceiling ({CEILING_TFLOPS[cls]:.0f})")
    if split:
        total = sum(split.values())
        print(f"other (neither GEMM nor attention): {split.get('other', 0):.1f} ms = {100 * split.get('other', 0) / total:.1f}% "
              f"of the step-synchronized forward")
    print(f"parity vs diffusers: cosine {cos:.6f}, relative L2 {rel_l2:.3e}")
    with open(os.path.join(a.out, "forward_results.json"), "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
