#!/usr/bin/env python3
"""One Wan transformer forward, every contender in one run: ditrun, diffusers eager and
diffusers under torch.compile, on the same config, shape, weights and inputs.

Prints the median of device-synchronized runs after warm-up, the ratios, each contender's peak
device memory, ditrun's time split, and parity of ditrun's output against diffusers' (cosine,
relative L2). In the same process it measures the ceilings it judges ditrun by (bench/ceilings.py:
bf16 GEMM at a large square and at the plan's shapes, device copy bandwidth, torch SDPA's cuDNN
attention at the plan's shapes) and prints and saves ditrun's ratio to each. Needs torch with
CUDA and the pinned diffusers source on PYTHONPATH; --dry-run checks the arithmetic on a
synthetic plan with made-up times, without torch or a GPU (nothing it writes is a measurement).

usage: bench/wan_forward.py --model DIR --bundle BUNDLE --ditrun BIN --out RESULTS_DIR
           --frames 81 --height 480 --width 832 [--text-len 512] [--iters 5] [--no-compile]
       bench/wan_forward.py --dry-run --out DIR
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ceilings  # noqa: E402


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


def synthetic_plan(tokens=1024, text=64, dim=256, ffn=1024, heads=4, blocks=2):
    """A Wan-like plan (bf16 values) for the dry run: per block self- and cross-attention, FFN
    and a few row-wise ops."""
    values, steps = [], []

    def val(shape, dtype="bf16"):
        values.append({"dtype": dtype, "shape": shape})
        return len(values) - 1

    x, ctx = val([1, tokens, dim]), val([1, text, dim])
    for _ in range(blocks):
        n = val([1, tokens, dim])
        steps.append({"op": "layernorm", "in": [x], "out": [n]})
        q, k, v = (val([1, tokens, dim]) for _ in range(3))
        for o in (q, k, v):
            steps.append({"op": "linear", "in": [n, val([dim, dim]), val([dim])], "out": [o]})
        a = val([1, tokens, dim])
        steps.append({"op": "attention", "in": [q, k, v], "out": [a]})
        kc, vc = val([1, text, dim]), val([1, text, dim])
        for o in (kc, vc):
            steps.append({"op": "linear", "in": [ctx, val([dim, dim])], "out": [o]})
        a2 = val([1, tokens, dim])
        steps.append({"op": "attention", "in": [a, kc, vc], "out": [a2]})
        h = val([1, tokens, ffn])
        steps.append({"op": "linear", "in": [a2, val([ffn, dim])], "out": [h]})
        y = val([1, tokens, dim])
        steps.append({"op": "linear", "in": [h, val([dim, ffn])], "out": [y]})
        x2 = val([1, tokens, dim])
        steps.append({"op": "gated_add", "in": [x, y], "out": [x2]})
        x = x2
    return {"values": values, "steps": steps}, heads


def dry_run(a):
    """The ceiling arithmetic end to end on a synthetic plan, made-up ceilings and times."""
    plan, heads = synthetic_plan()
    c = {"device": "dry run (no measurement)", "gemm_square": {"m": 8192, "n": 8192, "k": 8192, "ms": 1.5,
                                                               "tflops": ceilings.gemm_flops(8192, 8192, 8192) / 1.5e-3 / 1e12}}
    gl = ceilings.plan_gemms(plan)
    c["gemm_model_shapes"] = {"shapes": [{"m": m, "n": n, "k": k, "count": cnt, "ms": 0.01} for (m, n, k), cnt in gl.items()],
                              "ms": sum(0.01 * cnt for cnt in gl.values()), "tflops": 1.0}
    al = ceilings.plan_attentions(plan, heads)
    assert sorted(k[3] for k in al) == [64, 1024], al
    c["attention_cudnn"] = {"shapes": [], "ms": sum(0.02 * cnt for cnt in al.values()), "tflops": 1.0}
    c["copy_d2d"] = {"bytes": 1 << 30, "ms": 0.5, "gbs": 2 * (1 << 30) / 0.5e-3 / 1e9}
    split = {"gemm": 0.2, "attention": 0.1, "other": 0.05}
    fl = plan_flops(plan)
    assert abs(fl["gemm"] - sum(ceilings.gemm_flops(*k) * n for k, n in gl.items())) < 1
    assert abs(fl["attention"] - sum(ceilings.attention_flops(*k) * n for k, n in al.items())) < 1
    vs = ceilings.versus(split, plan, heads, c)
    res = {"dry_run": True, "split_ms": split, "ceilings": c, "vs_ceiling": vs}
    for line in ceilings.lines(split, c, vs):
        print(line)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "forward_results.json"), "w") as fh:
        json.dump(res, fh, indent=1)


def timed(torch, fn, iters, warmup=2):
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


def diffusers_contenders(torch, model, kwargs, iters, use_compile=True, warmup=2):
    """Diffusers eager (its output, fp32, is the parity reference) and, unless use_compile is
    false, the same model under torch.compile: median ms, compile seconds, peak GiB."""
    from gpumem import MemPoll, process_start_mib

    res = {}
    start = process_start_mib()
    with torch.no_grad():
        def eager():
            return model(**kwargs, return_dict=False)[0]
        # The whole process as nvidia-smi sees it, as ditrun's peak is taken, where the bench noted
        # the device's use before this process touched it (gpumem.mark_start): the allocator's cache
        # emptied first, so what it holds is what this forward takes, not what making the model left.
        # The poll runs through the first forward only: nvidia-smi's queries slow a forward that the
        # host paces, so the timed ones run without it.
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        poll = MemPoll(gpu=0, every_s=0.02) if start is not None else None
        if poll:
            poll.start()
        ref = eager().float()
        torch.cuda.synchronize()
        if poll:
            poll.stop = True
            poll.join()
            res["eager_process_peak_gib"] = (poll.peak - start) / 1024
        res["eager_ms"] = 1e3 * timed(torch, eager, iters, warmup)
        res["eager_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        proc = f", {res['eager_process_peak_gib']:.2f} GiB whole process" if poll else ""
        print(f"diffusers eager: {res['eager_ms']:.1f} ms, peak {res['eager_peak_gib']:.2f} GiB (torch's allocator{proc})", flush=True)
        if use_compile:
            cmodel = torch.compile(model)
            t0 = time.perf_counter()
            cmodel(**kwargs, return_dict=False)
            torch.cuda.synchronize()
            res["compile_s"] = time.perf_counter() - t0
            torch.cuda.reset_peak_memory_stats()
            res["compiled_ms"] = 1e3 * timed(torch, lambda: cmodel(**kwargs, return_dict=False), iters, warmup)
            res["compiled_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            print(f"torch.compile: {res['compiled_ms']:.1f} ms (compile {res['compile_s']:.0f} s)", flush=True)
            if os.environ.get("DIT_BENCH_CLOCKS") == "1":  # the clock its sustained forwards hold, after the timed ones
                from gpumem import ClockPoll, clock_line
                with ClockPoll() as cp:
                    for _ in range(max(10, int(3000 / res["compiled_ms"]))):
                        cmodel(**kwargs, return_dict=False)
                    torch.cuda.synchronize()
                res["compiled_clocks"] = cp.summary()
                print(clock_line("torch.compile, sustained", res["compiled_clocks"]), flush=True)
            if os.environ.get("DIT_BENCH_SHAPES") == "1":  # its GEMMs and attention shape by shape, profiled
                res["compiled_by_shape"] = ceilings.op_shapes(torch, lambda: cmodel(**kwargs, return_dict=False))
            if os.environ.get("DIT_BENCH_KERNEL_SPLIT", "1") != "0":
                ks = ceilings.kernel_split(torch, lambda: cmodel(**kwargs, return_dict=False))
                res["compiled_kernels"] = ks
                print("\n".join(ceilings.split_lines("torch.compile", ks)), flush=True)
    return ref, res


# ditrun_contender's variants: (name, the switch that asks for it, the runtime setting it runs under, what it is).
VARIANTS = (("groups", "DIT_BENCH_LINEAR_GROUPS", {"DIT_CUDA_LINEAR_GROUPS": "batched"}, "linear groups batched"),
            ("tune_random", "DIT_BENCH_GEMM_TUNE_DATA", {"DIT_CUDA_GEMM_TUNE_DATA": "random"},
             "GEMMs timed at load on random activations"),
            ("tune_sustained", "DIT_BENCH_GEMM_TUNE_DATA", {"DIT_CUDA_GEMM_TUNE_DATA": "random", "DIT_CUDA_GEMM_TUNE_MS": "50"},
             "GEMMs timed at load on random activations after 50 ms of warm launches each"))


def ditrun_contender(ditrun, bundle, inputs, out, iters, extra=(), graph=True, heuristic=True, warmup=None):
    """ditrun in its own processes: one forward writing `out`, `bench` (median and split; a CUDA
    graph where ditrun takes one by default), and optionally the same step by step
    (--no-cuda-graph) and with cuBLASLt's first heuristic GEMMs; peak
    device memory by nvidia-smi over the baseline taken here. Returns (results, failure text or
    None)."""
    from gpumem import MemPoll, used_mib

    extra = list(extra)
    wu = ["--warmup", str(warmup)] if warmup is not None else []
    res = {}
    base = used_mib(0)
    poll = MemPoll(gpu=0, every_s=0.05)
    poll.start()
    t0 = time.perf_counter()
    fw = subprocess.run([ditrun, "forward", bundle, "--inputs", inputs, "--out", out] + extra, capture_output=True, text=True)
    res["ditrun_first_forward_s"] = time.perf_counter() - t0
    bench_cmd = [ditrun, "bench", bundle, "--inputs", inputs, "--steps", str(iters)] + wu + extra
    bench = subprocess.run(bench_cmd + ["-v"], capture_output=True, text=True)
    gr = subprocess.run(bench_cmd + ["--no-cuda-graph"], capture_output=True, text=True) if graph else None
    # The GEMM algorithms as cuBLASLt's heuristic ranks them first, against the ones timed at load.
    heur = subprocess.run(bench_cmd, capture_output=True, text=True,
                          env=dict(os.environ, DIT_CUDA_GEMM="heuristic")) if heuristic else None
    # And with 32 of the heuristic's candidates timed at load rather than 8 (DIT_BENCH_GEMM_WIDE=1).
    wide = subprocess.run(bench_cmd, capture_output=True, text=True, env=dict(os.environ, DIT_CUDA_GEMM_CANDIDATES="32")) \
        if os.environ.get("DIT_BENCH_GEMM_WIDE") == "1" else None
    # Variants of the same bundle under a runtime setting, each with its own forward (for the caller's parity)
    # and bench: each linear group (an attention's q, k, v) as one strided-batched GEMM (DIT_BENCH_LINEAR_GROUPS=1);
    # the GEMM candidates timed at load on random activations, from a cool start and after 50 ms of warm launches
    # each (both with DIT_BENCH_GEMM_TUNE_DATA=1).
    variants = {}
    for name, switch, setting, _ in VARIANTS:
        if os.environ.get(switch) != "1":
            continue
        venv = dict(os.environ, **setting)
        vout = out.replace(".safetensors", "") + f"_{name}.safetensors"
        vfw = subprocess.run([ditrun, "forward", bundle, "--inputs", inputs, "--out", vout] + extra, capture_output=True, text=True, env=venv)
        vb = subprocess.run(bench_cmd, capture_output=True, text=True, env=venv)
        if vfw.returncode or vb.returncode:
            print(f"ditrun with {setting} failed:", (vfw if vfw.returncode else vb).stderr.strip()[-400:], flush=True)
        else:
            variants[name] = vb
            res[f"ditrun_{name}_out"] = vout
    poll.stop = True
    poll.join()
    if gr is not None:
        for line in gr.stdout.splitlines():
            if line.startswith("forward_ms_median"):
                res["ditrun_steps_ms"] = float(line.split()[1])
        if gr.returncode:
            print("ditrun --no-cuda-graph failed:", gr.stderr.strip()[-400:], flush=True)
    print(fw.stderr.strip(), bench.stderr.strip(), sep="\n", flush=True)
    if fw.returncode or bench.returncode:
        print(fw.stdout, bench.stdout)
        return res, (fw.stderr.strip() or bench.stderr.strip())[-600:] or "ditrun failed"
    res.update(ceilings.parse_bench(bench.stdout))
    if os.environ.get("DIT_BENCH_SHAPES") == "1":  # the split with the steps back to back, each timed by events around it
        fl = subprocess.run(bench_cmd[:bench_cmd.index("--steps")] + ["--steps", "1", "--warmup", "2", "--split-in-flight", "-v"] + extra,
                            capture_output=True, text=True)
        if fl.returncode:
            print("ditrun bench --split-in-flight failed:", fl.stderr.strip()[-400:], flush=True)
        else:
            r = ceilings.parse_bench(fl.stdout)
            res["in_flight_split_ms"], res["in_flight_step_groups"] = r.get("split_ms"), r.get("step_groups", [])
    for line in (wide.stdout if wide is not None else "").splitlines():
        if line.startswith("forward_ms_median"):
            res["ditrun_wide_gemm_ms"] = float(line.split()[1])
        elif line.startswith("split_ms") and "gemm" in line.split():
            v = line.split()
            res["ditrun_wide_gemm_split_ms"] = float(v[v.index("gemm") + 1])
    if wide is not None:
        print(f"with 32 cuBLASLt candidates timed: {res.get('ditrun_wide_gemm_ms', 0):.1f} ms "
              f"(GEMMs {res.get('ditrun_wide_gemm_split_ms', 0):.1f} ms)", flush=True)
    for name, vb in variants.items():
        res[f"ditrun_{name}_ms"] = ceilings.parse_bench(vb.stdout).get("ditrun_ms")
    if variants:  # the default once more after them: a variant's gain must exceed the drift between the two
        again = subprocess.run(bench_cmd, capture_output=True, text=True)
        res["ditrun_again_ms"] = ceilings.parse_bench(again.stdout).get("ditrun_ms") if not again.returncode else None
    if os.environ.get("DIT_BENCH_CLOCKS") == "1" and res.get("ditrun_ms"):  # the clock ditrun's sustained forwards hold
        from gpumem import ClockPoll, clock_line
        with ClockPoll() as cp:
            subprocess.run([ditrun, "bench", bundle, "--inputs", inputs, "--steps", str(max(10, int(3000 / res["ditrun_ms"])))] + wu + extra,
                           capture_output=True, text=True)
        res["ditrun_clocks"] = cp.summary()
        print(clock_line("ditrun, sustained", res["ditrun_clocks"]), flush=True)
    for line in (heur.stdout if heur is not None else "").splitlines():
        if line.startswith("forward_ms_median"):
            res["ditrun_heuristic_gemm_ms"] = float(line.split()[1])
        elif line.startswith("split_ms"):
            v = line.split()
            if "gemm" in v:
                res["ditrun_heuristic_gemm_split_ms"] = float(v[v.index("gemm") + 1])
    # What the runtime allocated itself against the bundle's prediction (ditrun's load line).
    for line in fw.stderr.splitlines():
        if line.startswith("ditrun: memory:"):
            w = line.split()
            res["runtime_allocated_mib"], res["runtime_predicted_mib"] = float(w[2]), float(w[5])
            res["runtime_within_prediction"] = "within the prediction" in line
    res["ditrun_peak_gib"] = (poll.peak - base) / 1024
    return res, None


def parity(torch, ours, ref):
    """Cosine and relative L2 of two outputs, both as fp64 on the CPU (fp32 sums over millions
    of elements put the cosine above 1)."""
    ours, ref = ours.double().cpu(), ref.double().cpu()
    cos = torch.nn.functional.cosine_similarity(ours.flatten(), ref.flatten(), dim=0).item()
    return {"cosine": cos, "rel_l2": ((ours - ref).norm() / ref.norm()).item()}


def load_plan(bundle, expert=None):
    """The plan of rank 0 of the bundle (of `expert` in a two-expert bundle)."""
    man = json.load(open(os.path.join(bundle, "manifest.json")))
    if man.get("experts"):
        e = [x for x in man["experts"]["list"] if x["name"] == (expert or "transformer")][0]
        plan_hash = e["ranks"][0]["plan"]
    else:
        plan_hash = [b["hash"] for b in man["blobs"] if b["role"] == "plan"][0]
    return json.load(open(os.path.join(bundle, "blobs", plan_hash)))


def contender_rows(results):
    """The comparison table, every contender against ditrun."""
    ours = results["ditrun_ms"]
    L = ["| contender | forward ms | vs ditrun | peak GiB |", "| --- | --- | --- | --- |",
         f"| ditrun | {ours:.1f} | 1.00 | {results['ditrun_peak_gib']:.2f} |"]
    if "ditrun_heuristic_gemm_ms" in results:
        L.append(f"| ditrun, first heuristic GEMMs | {results['ditrun_heuristic_gemm_ms']:.1f} | "
                 f"{results['ditrun_heuristic_gemm_ms'] / ours:.2f}x | |")
    if "ditrun_steps_ms" in results:
        L.append(f"| ditrun, step by step (--no-cuda-graph) | {results['ditrun_steps_ms']:.1f} | {results['ditrun_steps_ms'] / ours:.2f}x | |")
    L.append(f"| diffusers eager | {results['eager_ms']:.1f} | {results['eager_ms'] / ours:.2f}x | "
             f"{results['eager_peak_gib']:.2f} |")
    if "compiled_ms" in results:
        L.append(f"| torch.compile | {results['compiled_ms']:.1f} | {results['compiled_ms'] / ours:.2f}x | "
                 f"{results['compiled_peak_gib']:.2f} |")
    return L


PEAK_METHOD = {"diffusers": "torch.cuda.max_memory_allocated (tensors only)",
               "ditrun": "nvidia-smi used MiB over the baseline (whole process, context included)"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--bundle")
    ap.add_argument("--ditrun")
    ap.add_argument("--out", required=True)
    ap.add_argument("--frames", type=int)
    ap.add_argument("--height", type=int)
    ap.add_argument("--width", type=int)
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="check the arithmetic without torch or a GPU")
    a = ap.parse_args()
    if a.dry_run:
        return dry_run(a)
    for k in ("model", "bundle", "ditrun", "frames", "height", "width"):
        if getattr(a, k) is None:
            ap.error(f"--{k} is required")
    os.makedirs(a.out, exist_ok=True)
    import torch  # device only
    from diffusers import WanTransformer3DModel  # device only
    from safetensors.torch import load_file, save_file  # device only

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
    kw = dict(hidden_states=x.to(dev, torch.bfloat16), timestep=t.to(dev), encoder_hidden_states=e.to(dev, torch.bfloat16))
    results = {"shape": [1, cfg.in_channels, f, h, w], "text_len": a.text_len, "run": ceilings.run_info(),
               "device": torch.cuda.get_device_name(0), "peak_method": PEAK_METHOD}

    ref, res = diffusers_contenders(torch, model, kw, a.iters, use_compile=not a.no_compile)
    results.update(res)
    save_file({"sample": ref.cpu().contiguous()}, os.path.join(a.out, "diffusers_output.safetensors"))
    del model, kw
    torch.cuda.empty_cache()

    out = os.path.join(a.out, "ditrun_output.safetensors")
    res, failed = ditrun_contender(a.ditrun, a.bundle, inputs, out, a.iters)
    results.update(res)
    if failed:
        sys.exit("ditrun failed")
    results["parity"] = parity(torch, load_file(out)["sample"], ref)
    cos, rel_l2 = results["parity"]["cosine"], results["parity"]["rel_l2"]

    # Our GEMMs against cuBLAS through torch on the same shapes, same call: every linear of the
    # plan that the bundle runs through cuBLASLt (the others are tiny generated kernels).
    plan = load_plan(a.bundle)
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
            t = timed(torch, fn, 10)
            ref_ms += 1e3 * t * count
            print(f"cuBLAS (torch) {m}x{n}x{k}{' +bias' if bias else ''}{' +gelu' if act else ''}: {1e3 * t:.3f} ms x {count}", flush=True)
    results["cublas_gemm_ms"] = ref_ms
    results["ditrun_gemm_ms"] = results.get("split_ms", {}).get("gemm")

    print("\npeak GiB: diffusers' from torch's allocator (tensors only), ditrun's from nvidia-smi (whole process): "
          "not the same measure")
    print()
    for line in contender_rows(results):
        print(line)
    print(f"\nditrun split (step-synchronized): {results.get('split_ms')}")
    print(f"ditrun by op (step-synchronized): {results.get('by_op_ms')}")
    if results.get("ditrun_gemm_ms"):
        print(f"GEMMs: ditrun {results['ditrun_gemm_ms']:.1f} ms vs cuBLAS through torch {ref_ms:.1f} ms on the same shapes "
              f"(ratio {results['ditrun_gemm_ms'] / ref_ms:.3f})")
    # The ceilings, measured here, now, on this device: never constants from another run.
    heads = cfg.num_attention_heads
    split = results.get("split_ms") or {}
    results["ceilings"] = ceilings.measure(torch, plan, heads)
    results["vs_ceiling"] = ceilings.versus(split, plan, heads, results["ceilings"])
    for line in ceilings.lines(split, results["ceilings"], results["vs_ceiling"]):
        print(line)
    if split:
        total = sum(split.values())
        print(f"other (neither GEMM nor attention): {split.get('other', 0):.1f} ms = {100 * split.get('other', 0) / total:.1f}% "
              f"of the step-synchronized forward")
    print(f"parity vs diffusers: cosine {cos:.6f}, relative L2 {rel_l2:.3e}")
    with open(os.path.join(a.out, "forward_results.json"), "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
