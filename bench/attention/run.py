#!/usr/bin/env python3
"""Attention benchmark: the sm_90a kernel (and the portable one) through build-attn/attn_bench,
against torch SDPA with the cuDNN and flash backends, on the same shapes.

    python3 bench/attention/run.py RESULTS.json [--iters N] [--no-torch] [--no-variants] [--fp8] [--sustained N]
    python3 bench/attention/run.py --compile-only        # fill build-attn/cubin (no GPU needed)

--fp8 adds the kernel's fp8 forms (head dims 64 and 128: e4m3 Q, K and V^T with block scales; then int8 Q, K) on the same
inputs, and SageAttention (`sageattn`: INT8 Q K^T, fp16 P V) as the peer doing the same thing,
where it is installed. TFLOP/s = 4*B*H*SQ*LK*HD / time. Prints a table and writes RESULTS.json (a directory gets
attention.json inside it)."""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from ceilings import timed_ms  # noqa: E402

# (B, H, SQ, LK, HD)
SHAPES = [
    (1, 12, 32760, 32760, 128),
    (2, 12, 32760, 32760, 128),
    (1, 40, 75600, 75600, 128),
    (1, 24, 4608, 4608, 128),
    (1, 12, 32760, 32760, 64),
    (2, 12, 32760, 32760, 64),
    (1, 40, 75600, 75600, 64),
    (1, 24, 4608, 4608, 64),
    (1, 12, 32760, 512, 128),  # cross-attention: 512 text keys
]
# Tile configuration per shape where it differs from the kernel's default (NCW,BN,ST,PERSIST).
CFG = {(1, 12, 32760, 512, 128): "2,128,2,1"}
# Tile variants of the sm_90a kernel (NCW consumer warpgroups, BN keys per tile, ST stages,
# PERSIST, and SCHED 0: the consumer warpgroups issue as they are ready, not in turns), timed on
# some shapes to pick the defaults; with --fp8 the 8-bit forms too (ST stages for them as well).
VARIANTS = [
    "1x12x32760x512x128:2,128,2,0",
    "1x24x4608x4608x128:2,128,2,1",
    "1x12x32760x32760x128:2,128,2,1",
    "1x12x32760x32760x128:2,176,2,0",
    "1x24x4608x4608x64:3,128,4,1",
    "1x12x32760x32760x64:3,128,2,0",
    "1x12x32760x32760x128:2,128,2,0,0",
    "1x12x32760x32760x128:2,128,3,0,1",
    "1x12x32760x32760x128:2,128,3,0,0",
]


def shape_str(s):
    return "x".join(str(x) for x in s)


def run_bench(bench, cache, specs, extra, timeout):
    """Runs attn_bench on specs; returns its JSON rows (those it printed before a failure)."""
    cmd = [bench, "--repo", ROOT, "--cache", cache] + extra + specs
    print("$ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = "timeout"
    if err:
        sys.stderr.write(err[-4000:])
    rows = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
            print(line, flush=True)
    if rc != 0:
        print(f"attn_bench exited with {rc}", flush=True)
    return rows


def time_sdpa(backend_name, B, H, SQ, LK, D, iters):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend_name]
    q = torch.randn(B, H, SQ, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, H, LK, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, H, LK, D, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel(backend):
            return timed_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v), iters)
    except Exception as e:  # backend not available for this shape
        print(f"sdpa {backend_name} {B}x{H}x{SQ}x{LK}x{D}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None
    finally:
        del q, k, v
        torch.cuda.empty_cache()


def time_sage(B, H, SQ, LK, D, iters):
    """SageAttention's sageattn on bf16 inputs in (B, H, S, D): median ms, with its version; None where it does not import."""
    try:
        import torch
        import sageattention  # device only
        from importlib.metadata import version
    except Exception as e:
        print(f"sageattention: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None, None
    q = torch.randn(B, H, SQ, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, H, LK, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, H, LK, D, device="cuda", dtype=torch.bfloat16)
    try:
        return timed_ms(torch, lambda: sageattention.sageattn(q, k, v, tensor_layout="HND", is_causal=False), iters), version("sageattention")
    except Exception as e:
        print(f"sageattn {B}x{H}x{SQ}x{LK}x{D}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None, None
    finally:
        del q, k, v
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="?", default=None)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-attn", "attn_bench"))
    ap.add_argument("--cache", default=os.path.join(ROOT, "build-attn", "cubin"))
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-variants", action="store_true")
    ap.add_argument("--no-old", action="store_true")
    ap.add_argument("--fp8", action="store_true", help="also the fp8 form, and sageattn as its peer")
    ap.add_argument("--sustained", type=int, default=0, help="also time N launches back to back (the clock under sustained load)")
    ap.add_argument("--shapes", default=None, help="comma-separated BxHxSQxLKxHD[:cfg] list replacing the default shapes")
    ap.add_argument("--variants", default=None, help="semicolon-separated BxHxSQxLKxHD:NCW,BN,ST list replacing the default variants")
    a = ap.parse_args()

    specs = re.split(r",(?=\d+x)", a.shapes) if a.shapes else [shape_str(s) + (":" + CFG[s] if s in CFG else "") for s in SHAPES]
    variants = [] if a.no_variants else (a.variants.split(";") if a.variants else VARIANTS)
    if a.compile_only:
        subprocess.run([a.bench, "--repo", ROOT, "--cache", a.cache, "--compile-only"] + (["--fp8"] if a.fp8 else []) + specs, check=True)
        if variants:
            subprocess.run([a.bench, "--repo", ROOT, "--cache", a.cache, "--compile-only", "--no-old"] + (["--fp8"] if a.fp8 else []) + variants,
                           check=True)
        return

    sus = ["--sustained", str(a.sustained)] if a.sustained else []
    extra = ["--iters", str(a.iters)] + (["--no-old"] if a.no_old else []) + (["--fp8"] if a.fp8 else []) + sus
    # Small shapes first, in their own process with a short limit, so a hang costs little.
    small = [sp for sp in specs if int(sp.split(":")[0].split("x")[2]) * int(sp.split(":")[0].split("x")[3]) <= 32760 * 512]
    small += [sp for sp in specs if sp not in small and int(sp.split(":")[0].split("x")[2]) <= 4608]
    big = [sp for sp in specs if sp not in small]
    rows = run_bench(a.bench, a.cache, small, extra, 40)
    if len(rows) == len(small):
        rows += run_bench(a.bench, a.cache, big, extra, 150)
        vrows = run_bench(a.bench, a.cache, variants, ["--iters", str(a.iters), "--no-old"] + (["--fp8"] if a.fp8 else []) + sus, 60) if variants else []
    else:
        print("small shapes failed: skipping the large ones", flush=True)
        vrows = []
    order = {sp.split(":")[0]: i for i, sp in enumerate(specs)}
    rows.sort(key=lambda r: order.get(f"{r['B']}x{r['H']}x{r['SQ']}x{r['LK']}x{r['HD']}", 99))

    if not a.no_torch:
        for r in rows:
            B, H, SQ, LK, D = r["B"], r["H"], r["SQ"], r["LK"], r["HD"]
            flop = 4.0 * B * H * SQ * LK * D
            for be in ("cudnn", "flash"):
                ms = time_sdpa(be, B, H, SQ, LK, D, a.iters)
                r[be + "_ms"] = ms
                r[be + "_tflops"] = round(flop / (ms * 1e-3) / 1e12, 1) if ms else None
            if "fp8_ms" in r:
                ms, ver = time_sage(B, H, SQ, LK, D, a.iters)
                r["sage_ms"], r["sage_version"] = ms, ver
                r["sage_tflops"] = round(flop / (ms * 1e-3) / 1e12, 1) if ms else None

    hdr = f"{'shape BxHxSQxLKxHD':<24}{'ours':>8}{'cuDNN':>8}{'flash':>8}{'old':>8}{'/cuDNN':>8}{'/flash':>8}  {'err_out':>9} {'err_lse':>9}  ok  cfg"
    print("\nTFLOP/s (4*B*H*SQ*LK*HD / time), median of", a.iters)
    print(hdr)
    def f(x):
        return f"{x:8.1f}" if isinstance(x, (int, float)) else f"{'-':>8}"
    def ratio(x, y):
        return f"{x / y:8.3f}" if x and y else f"{'-':>8}"
    for r in rows + vrows:
        shp = f"{r['B']}x{r['H']}x{r['SQ']}x{r['LK']}x{r['HD']}"
        c = r["cfg"]
        print(f"{shp:<24}{f(r['tflops'])}{f(r.get('cudnn_tflops'))}{f(r.get('flash_tflops'))}{f(r.get('old_tflops'))}"
              f"{ratio(r['tflops'], r.get('cudnn_tflops'))}{ratio(r['tflops'], r.get('flash_tflops'))}"
              f"  {r['err_out']:9.2e} {r['err_lse']:9.2e}  {'ok' if r['ok'] else 'BAD'}  "
              f"{c['ncw']},{c['bn']},{c['st']},{c['persist']},{c.get('sched', 1)},{c.get('split', 0)} regs={r['regs']} lmem={r['local_bytes']} smem={c['smem']}"
              + (f" sustained={r['sustained_tflops']:.1f}" if "sustained_tflops" in r else ""))
    for form, what in (("fp8", "e4m3 Q, K, P, V"), ("int8fp8", "int8 Q, K, e4m3 P, V: --attn-quant int8fp8"),
                       ("int8", "int8 Q, K, bf16 P, V: --attn-quant int8")):
        frows = [r for r in rows if form + "_ms" in r]
        if not frows:
            continue
        print(f"\n{form} form ({what}; same inputs, quantized as attn_quant / attn_quant_vt), against the bf16 kernel and sageattn")
        print(f"{'shape BxHxSQxLKxHD':<24}{form:>8}{'bf16':>8}{'sage':>8}{'/bf16':>8}{'/sage':>8}  {'cosine':>9} {'err_out':>9}  ok")
        for r in frows:
            shp = f"{r['B']}x{r['H']}x{r['SQ']}x{r['LK']}x{r['HD']}"
            t = r[form + "_tflops"]
            print(f"{shp:<24}{f(t)}{f(r['tflops'])}{f(r.get('sage_tflops'))}{ratio(t, r['tflops'])}"
                  f"{ratio(t, r.get('sage_tflops'))}  {r[form + '_cosine']:9.6f} {r[form + '_err_out']:9.2e}  {'ok' if r[form + '_ok'] else 'BAD'}")
    if a.results:
        path = a.results
        if os.path.isdir(path):
            path = os.path.join(path, "attention.json")
        with open(path, "w") as fh:
            json.dump({"shapes": rows, "variants": vrows}, fh, indent=1)
        print("wrote", path)
    bad = [r for r in rows + vrows if not r["ok"] or not all(r.get(f + "_ok", True) for f in ("fp8", "int8fp8", "int8"))]
    sys.exit(1 if bad or not rows else 0)


if __name__ == "__main__":
    main()
