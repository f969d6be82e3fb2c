"""The ceilings a benchmark compares itself with, measured in its own process and run: bf16 GEMM
through torch.matmul (a large square and every GEMM shape of the plan), device-to-device copy
bandwidth, and attention through torch SDPA's cuDNN backend at the plan's attention shapes.

The arithmetic (FLOPs and bytes from a plan, ratios, the printed lines) is plain Python so that
a dry run checks it without torch or a GPU; only measure() needs torch with CUDA.
"""

import datetime
import os
import subprocess
import sys

DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4}
SQUARE = 8192


def gemm_flops(m, n, k):
    return 2.0 * m * n * k


def attention_flops(b, heads, sq, sk, d):
    """QK^T and PV: two products of 2*Sq*Sk*d FLOPs per head."""
    return 4.0 * b * heads * sq * sk * d


def _rows(shape):
    m = 1
    for d in shape[:-1]:
        m *= d
    return m


def plan_gemms(plan):
    """{(m, n, k): count} over the plan's linear steps (x [.., k], w [n, k])."""
    out = {}
    for st in plan["steps"]:
        if st["op"] == "linear":
            x, w = plan["values"][st["in"][0]]["shape"], plan["values"][st["in"][1]]["shape"]
            key = (_rows(x), w[0], x[-1])
            out[key] = out.get(key, 0) + 1
    return out


def plan_attentions(plan, heads):
    """{(b, heads, sq, sk, d): count} over the plan's attention steps (q [B, Sq, C], k [B, Sk, C])."""
    out = {}
    for st in plan["steps"]:
        if st["op"] == "attention":
            q, k = plan["values"][st["in"][0]]["shape"], plan["values"][st["in"][1]]["shape"]
            key = (q[0], heads, q[1], k[1], q[2] // heads)
            out[key] = out.get(key, 0) + 1
    return out


def plan_other_bytes(plan):
    """Bytes read and written by the steps that are neither GEMMs nor attention (norms, RoPE,
    modulation, residuals: bandwidth-bound ops, judged against the copy bandwidth)."""
    total = 0
    for st in plan["steps"]:
        if st["op"] in ("linear", "attention"):
            continue
        for i in list(st["in"]) + list(st["out"]):
            v = plan["values"][i]
            n = DTYPE_BYTES.get(v["dtype"], 4)
            for d in v["shape"]:
                n *= d
            total += n
    return total


def timed_ms(torch, fn, iters, warmup=3):
    """Median milliseconds of fn over iters CUDA-event-timed calls, after warmup calls."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end))
    ts.sort()
    return ts[len(ts) // 2]


def measure(torch, plan, heads, iters=10, copy_bytes=1 << 30):
    """Every ceiling on the current CUDA device, in this process."""
    dev, bf = torch.device("cuda"), torch.bfloat16
    c = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "iters": iters}
    with torch.no_grad():
        a = torch.randn(SQUARE, SQUARE, device=dev, dtype=bf)
        b = torch.randn(SQUARE, SQUARE, device=dev, dtype=bf)
        ms = timed_ms(torch, lambda: torch.matmul(a, b), iters)
        c["gemm_square"] = {"m": SQUARE, "n": SQUARE, "k": SQUARE, "ms": ms,
                            "tflops": gemm_flops(SQUARE, SQUARE, SQUARE) / (ms * 1e-3) / 1e12}
        del a, b
        shapes, total_ms, total_fl = [], 0.0, 0.0
        for (m, n, k), count in sorted(plan_gemms(plan).items()):
            x = torch.randn(m, k, device=dev, dtype=bf)
            w = torch.randn(k, n, device=dev, dtype=bf)
            ms = timed_ms(torch, lambda: torch.matmul(x, w), iters)
            fl = gemm_flops(m, n, k)
            shapes.append({"m": m, "n": n, "k": k, "count": count, "ms": ms, "tflops": fl / (ms * 1e-3) / 1e12})
            total_ms += ms * count
            total_fl += fl * count
        c["gemm_model_shapes"] = {"shapes": shapes, "ms": total_ms,
                                  "tflops": total_fl / (total_ms * 1e-3) / 1e12 if total_ms else None}
        src = torch.empty(copy_bytes, device=dev, dtype=torch.uint8)
        dst = torch.empty_like(src)
        ms = timed_ms(torch, lambda: dst.copy_(src), iters)
        c["copy_d2d"] = {"bytes": copy_bytes, "ms": ms, "gbs": 2 * copy_bytes / (ms * 1e-3) / 1e9,
                         "counts": "bytes read plus bytes written"}
        del src, dst
        from torch.nn.attention import SDPBackend, sdpa_kernel  # device only
        shapes, total_ms, total_fl = [], 0.0, 0.0
        for (bb, h, sq, sk, d), count in sorted(plan_attentions(plan, heads).items()):
            q = torch.randn(bb, h, sq, d, device=dev, dtype=bf)
            k = torch.randn(bb, h, sk, d, device=dev, dtype=bf)
            v = torch.randn(bb, h, sk, d, device=dev, dtype=bf)
            backend = "cudnn"
            try:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    ms = timed_ms(torch, lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), iters)
            except RuntimeError:
                # cuDNN has no kernel for some shapes (a head 4096 wide: HunyuanVideo's masked mean):
                # torch's own choice there.
                backend = "default"
                ms = timed_ms(torch, lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), iters)
            fl = attention_flops(bb, h, sq, sk, d)
            shapes.append({"b": bb, "heads": h, "sq": sq, "sk": sk, "d": d, "count": count, "ms": ms,
                           "tflops": fl / (ms * 1e-3) / 1e12, "backend": backend})
            total_ms += ms * count
            total_fl += fl * count
        c["attention_cudnn"] = {"shapes": shapes, "ms": total_ms,
                                "tflops": total_fl / (total_ms * 1e-3) / 1e12 if total_ms else None}
    return c


def kernel_class(name):
    """A CUDA kernel's class by its name: "gemm" (cuBLAS, cuBLASLt, CUTLASS), "attention" (flash,
    cuDNN and memory-efficient attention) or "other" (Triton's fused kernels, copies, the rest)."""
    n = name.lower()
    # Inductor names its fused kernels after every op they touch ("triton_poi_fused_..._
    # scaled_dot_product_cudnn_attention_..." is a layout copy): only its templates are GEMMs.
    if n.startswith("triton_") and not n.startswith("triton_tem_"):
        return "other"
    if any(w in n for w in ("flash", "fmha", "attention", "attn", "sdpa")):
        return "attention"
    if any(w in n for w in ("gemm", "nvjet", "xmma", "cutlass", "matmul", "sm90_", "sm80_", "triton_tem_")):
        return "gemm"
    return "other"


def kernel_split(torch, fn, top=6):
    """Device milliseconds of one call of fn by kernel class (torch.profiler), and its `top` most
    expensive kernels: where a torch contender spends its forward, in the same conditions as ours
    (after warm-up, back to back), to set beside our own split."""
    from torch.profiler import ProfilerActivity, profile  # device only
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    split, kernels = {"gemm": 0.0, "attention": 0.0, "other": 0.0}, {}
    for ev in prof.events():
        if getattr(ev, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        ms = ev.device_time_total / 1e3 if hasattr(ev, "device_time_total") else ev.cuda_time_total / 1e3
        split[kernel_class(ev.name)] += ms
        k = kernels.setdefault(ev.name, [0, 0.0])
        k[0] += 1
        k[1] += ms
    worst = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:top]
    return {"split_ms": split, "top": [{"name": n[:160], "count": c, "ms": ms} for n, (c, ms) in worst]}


def ours_kernel_split(torch, bundle, inputs, top=8):
    """ditrun's forward of `bundle` on `inputs` (a safetensors file) in this process, through the
    Python package over libditrun ($DITRUN_LIBRARY), under torch.profiler: the cuBLASLt kernels
    our GEMMs run, by name, to set beside a torch contender's. Our own kernels are all named
    dit_kernel (NVRTC), so only the GEMMs' class is told apart by name here. None, with the
    reason printed, where the package does not load."""
    try:
        try:
            import ditrun  # device only
        except ImportError:  # no wheel installed: the package from this tree
            sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
            import ditrun  # device only
    except (ImportError, OSError) as e:
        print(f"ditrun kernels: not profiled ({type(e).__name__}: {e})", flush=True)
        return None
    from safetensors.torch import load_file  # device only
    tensors = load_file(inputs, device="cuda")
    try:
        with ditrun.Bundle(bundle, device="cuda") as b:
            names = {spec.name for spec in b.inputs}
            kw = {k: v for k, v in tensors.items() if k in names}
            b.forward(**kw)
            torch.cuda.synchronize()
            ks = kernel_split(torch, lambda: b.forward(**kw), top)
    except (OSError, ditrun.Error) as e:  # no libditrun, or the library refused
        print(f"ditrun kernels: not profiled ({type(e).__name__}: {e})", flush=True)
        return None
    s = ks["split_ms"]
    s["other"] += s.pop("attention")  # nothing of ours is named as attention
    return ks


def split_lines(who, ks):
    """The printed kernel split of a torch contender, or of ours (no "attention" class: our own
    kernels, attention among them, are all named dit_kernel)."""
    s = ks["split_ms"]
    if "attention" in s:
        L = [f"{who} kernels: GEMMs {s['gemm']:.1f} ms, attention {s['attention']:.1f} ms, other {s['other']:.1f} ms"]
    else:
        L = [f"{who} kernels: GEMMs {s['gemm']:.1f} ms, its own kernels (attention among them) {s['other']:.1f} ms"]
    L += [f"  {k['count']:4d} x {k['ms'] / k['count']:8.3f} ms  {k['name'][:110]}" for k in ks["top"]]
    return L


def parse_bench(stdout):
    """`ditrun bench [-v]`'s lines: ditrun_ms (the median), split_ms and by_op_ms, and -v's
    step_groups ({count, ms, what})."""
    res = {}
    for line in stdout.splitlines():
        k, *v = line.split() or [""]
        if k == "forward_ms_median":
            res["ditrun_ms"] = float(v[0])
        elif k == "split_ms":
            cut = [i for i, x in enumerate(v) if x.startswith("(")]
            pairs = v[:cut[0]] if cut else v
            res["split_ms"] = {pairs[i]: float(pairs[i + 1]) for i in range(0, len(pairs) - 1, 2)}
        elif k == "by_op_ms":
            res["by_op_ms"] = {kv.split("=")[0]: float(kv.split("=")[1]) for kv in v}
        elif k == "steps" and len(v) >= 4 and v[2] == "ms":  # bench -v: steps grouped by op and shapes
            res.setdefault("step_groups", []).append({"count": int(v[0]), "ms": float(v[1]), "what": " ".join(v[3:])})
    return res


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def op_shapes(torch, fn):
    """Device milliseconds of one call of fn by aten op and input shapes (torch.profiler with
    record_shapes): the GEMMs and the attention of a torch contender's forward, shape by shape,
    in the same conditions as the whole forward (back to back, after warm-up)."""
    from torch.profiler import ProfilerActivity, profile  # device only
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages(group_by_input_shape=True):
        # The backend's attention op (aten::_scaled_dot_product_cudnn_attention and the like), not
        # aten::scaled_dot_product_attention around it, whose time would count twice, nor
        # inductor's fused kernels, some named after the attention op they were fused beside.
        if ev.key not in GEMM_OPS and not (ev.key.startswith("aten::_") and "attention" in ev.key):
            continue
        us = ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
        if us > 0:
            rows.append({"op": ev.key, "shapes": [list(x) for x in ev.input_shapes], "count": ev.count, "ms": us / 1e3})
    return sorted(rows, key=lambda r: -r["ms"])


def torch_gemm_mkn(row):
    """(M, K, N) of a profiled aten mm/addmm (x [M, K] times w [K, N]; addmm's bias first), else None."""
    sh = [x for x in row["shapes"] if x]
    if row["op"] not in ("aten::mm", "aten::addmm") or len(sh) < 2:
        return None
    x, w = sh[-2], sh[-1]
    return (x[0], x[1], w[1]) if len(x) == 2 and len(w) == 2 and x[1] == w[0] else None


def ours_gemm_mkn(what):
    """(M, K, N) of one of `ditrun bench -v`'s step groups, "linear bf16[B,T,K] bf16[N,K]", else None."""
    parts = what.split()
    if parts[0] != "linear" or len(parts) < 3:
        return None
    x = [int(v) for v in parts[1][parts[1].index("[") + 1:-1].split(",")]
    w = [int(v) for v in parts[2][parts[2].index("[") + 1:-1].split(",")]
    m = 1
    for v in x[:-1]:
        m *= v
    return (m, x[-1], w[0])


def by_shape_lines(ours_groups, torch_rows):
    """Ours (steps timed in flight) against a torch contender's (profiled), GEMM by GEMM shape:
    the count and milliseconds of each, and which is faster where both run the shape."""
    mine, theirs = {}, {}
    for g in ours_groups:
        k = ours_gemm_mkn(g["what"])
        if k:
            c = mine.setdefault(k, [0, 0.0])
            c[0] += g["count"]
            c[1] += g["ms"]
    for r in torch_rows:
        k = torch_gemm_mkn(r)
        if k:
            c = theirs.setdefault(k, [0, 0.0])
            c[0] += r["count"]
            c[1] += r["ms"]
    keys = sorted(set(mine) | set(theirs), key=lambda k: -max(mine.get(k, [0, 0])[1], theirs.get(k, [0, 0])[1]))
    L = ["GEMMs by shape (M x K -> N): ours in flight (count, ms) | torch (count, ms) | ours per call / theirs"]
    for k in keys:
        a, b = mine.get(k), theirs.get(k)
        ratio = f"{(a[1] / a[0]) / (b[1] / b[0]):.3f}" if a and b and a[0] and b[0] else "-"
        L.append(f"  {k[0]:6d} x {k[1]:5d} -> {k[2]:5d}  " + (f"{a[0]:4d} {a[1]:9.3f}" if a else f"{'-':>14}") + " | "
                 + (f"{b[0]:4d} {b[1]:9.3f}" if b else f"{'-':>14}") + f" | {ratio}")
    L.append(f"  total: ours {sum(v[1] for v in mine.values()):.1f} ms, torch {sum(v[1] for v in theirs.values()):.1f} ms")
    return L


def versus(split_ms, plan, heads, c):
    """Ours against the ceilings: for GEMMs and attention the ceiling's time at the plan's shapes
    over ours (1.0 = as fast as the ceiling), for the other ops their achieved bandwidth over the
    copy bandwidth."""
    out = {}
    if split_ms.get("gemm") and c.get("gemm_model_shapes", {}).get("ms"):
        out["gemm"] = c["gemm_model_shapes"]["ms"] / split_ms["gemm"]
        fl = sum(gemm_flops(*k) * n for k, n in plan_gemms(plan).items())
        out["gemm_tflops"] = fl / (split_ms["gemm"] * 1e-3) / 1e12
        out["gemm_vs_square"] = out["gemm_tflops"] / c["gemm_square"]["tflops"]
    if split_ms.get("attention") and c.get("attention_cudnn", {}).get("ms"):
        out["attention"] = c["attention_cudnn"]["ms"] / split_ms["attention"]
        fl = sum(attention_flops(*k) * n for k, n in plan_attentions(plan, heads).items())
        out["attention_tflops"] = fl / (split_ms["attention"] * 1e-3) / 1e12
    if split_ms.get("other") and c.get("copy_d2d", {}).get("gbs"):
        gbs = plan_other_bytes(plan) / (split_ms["other"] * 1e-3) / 1e9
        out["other_gbs"] = gbs
        out["other_bandwidth"] = gbs / c["copy_d2d"]["gbs"]
    return out


def lines(split_ms, c, vs):
    """The printed comparison, every ceiling from this run."""
    L = []
    if "gemm" in vs:
        g, s = c["gemm_model_shapes"], c["gemm_square"]
        L.append(f"GEMMs: ours {split_ms['gemm']:.1f} ms, torch.matmul at the same shapes {g['ms']:.1f} ms: "
                 f"{100 * vs['gemm']:.0f}% of the bf16 GEMM ceiling measured in this run "
                 f"({vs['gemm_tflops']:.0f} TFLOP/s; {s['m']}^3 square {s['tflops']:.0f} TFLOP/s, "
                 f"model shapes {g['tflops']:.0f} TFLOP/s)")
    if "attention" in vs:
        a = c["attention_cudnn"]
        L.append(f"attention: ours {split_ms['attention']:.1f} ms, torch SDPA cuDNN at the same shapes {a['ms']:.1f} ms: "
                 f"{100 * vs['attention']:.0f}% of the attention ceiling measured in this run "
                 f"({vs['attention_tflops']:.0f} against {a['tflops']:.0f} TFLOP/s)")
    if "other_bandwidth" in vs:
        L.append(f"other ops: {split_ms['other']:.1f} ms at {vs['other_gbs']:.0f} GB/s, {100 * vs['other_bandwidth']:.0f}% "
                 f"of the device copy bandwidth measured in this run ({c['copy_d2d']['gbs']:.0f} GB/s, read + write)")
    return L


def run_info():
    """When and from which commit a benchmark ran, saved in its JSON so the report can name the run."""
    info = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": None}
    # A copy of the tree run elsewhere may carry a stale .git: the caller names the commit the
    # binaries were built from.
    if os.environ.get("DIT_COMMIT"):
        info["commit"] = os.environ["DIT_COMMIT"]
        return info
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or None
    except OSError:
        pass
    return info


def self_test():
    """The pure-python parts a GPU run relies on, checked without one: kernel classes by name and
    the printed split."""
    want = {"nvjet_tst_256x128_64x4_2x1_v_bz_coopB_TNT": "gemm",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64": "gemm",
            "cutlass3x_sm90_tensorop_gemm": "gemm", "triton_tem_fused_addmm_0": "gemm",
            "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>": "attention",
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop": "attention",
            "triton_poi_fused_add_mul_native_layer_norm_0": "other", "void at::native::elementwise_kernel<128, 4>": "other",
            "triton_red_fused__fused_rms_norm__scaled_dot_product_cudnn_attention__to_copy_add": "other"}
    for name, cls in want.items():
        assert kernel_class(name) == cls, (name, kernel_class(name), cls)
    L = split_lines("x", {"split_ms": {"gemm": 1.0, "attention": 2.0, "other": 3.5}, "top": [{"name": "k", "count": 2, "ms": 4.0}]})
    assert L[0] == "x kernels: GEMMs 1.0 ms, attention 2.0 ms, other 3.5 ms" and "2.000 ms" in L[1], L
    L = split_lines("ditrun", {"split_ms": {"gemm": 1.0, "other": 5.5}, "top": []})
    assert L == ["ditrun kernels: GEMMs 1.0 ms, its own kernels (attention among them) 5.5 ms"], L
    r = parse_bench("forward_ms_median 12.5\nsplit_ms gemm 2.0 attention 1.5 other 4.0 collectives 0.000 (in-flight total 7.500)\n"
                    "by_op_ms linear=2.000 attention=1.500\nsteps    38     81.331 ms  linear bf16[4,4608,3072] bf16[12288,3072]\n")
    assert r["ditrun_ms"] == 12.5 and r["split_ms"] == {"gemm": 2.0, "attention": 1.5, "other": 4.0, "collectives": 0.0}, r
    assert r["by_op_ms"] == {"linear": 2.0, "attention": 1.5} and r["step_groups"][0]["what"].endswith("bf16[12288,3072]"), r
    assert ours_gemm_mkn("linear bf16[4,4608,3072] bf16[12288,3072]") == (18432, 3072, 12288)
    assert ours_gemm_mkn("attention bf16[4,4608,3072] bf16[4,4608,3072]") is None
    assert torch_gemm_mkn({"op": "aten::addmm", "shapes": [[12288], [18432, 3072], [3072, 12288], [], []]}) == (18432, 3072, 12288)
    assert torch_gemm_mkn({"op": "aten::mm", "shapes": [[512, 3072], [3072, 64]]}) == (512, 3072, 64)
    assert torch_gemm_mkn({"op": "aten::_scaled_dot_product_cudnn_attention", "shapes": [[1, 2, 3, 4]]}) is None
    L = by_shape_lines([{"count": 2, "ms": 4.0, "what": "linear bf16[1,512,3072] bf16[64,3072]"}],
                       [{"op": "aten::mm", "shapes": [[512, 3072], [3072, 64]], "count": 2, "ms": 5.0},
                        {"op": "aten::mm", "shapes": [[8, 16], [16, 32]], "count": 1, "ms": 0.5}])
    assert L[1].split()[-1] == "0.800" and L[2].split()[-1] == "-" and L[-1] == "  total: ours 4.0 ms, torch 5.5 ms", L


if __name__ == "__main__":
    if sys.argv[1:] != ["--self-test"]:
        sys.exit("usage: ceilings.py --self-test (the module is imported by the benchmarks)")
    self_test()
    print("ceilings: self-test passed")
