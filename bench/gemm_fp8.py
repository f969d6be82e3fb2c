#!/usr/bin/env python3
"""cuBLASLt's fp8 matmul at Wan2.1-1.3B's linear shapes (480p, 81 frames: 32760 token rows), through
torch._scaled_mm, against the bf16 matmul: per-tensor scales and per-row/per-column (outer-vector)
scales, each with and without fast accumulation. It tells which of cuBLASLt's fp8 forms are faster
than bf16 here, the choice ditrun's linear_fp8 (outer-vector scales) depends on.

usage: bench/gemm_fp8.py [--out DIR] [--iters N]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ceilings import run_info, timed_ms  # noqa: E402

# (M, K, N): attention q/k/v/o, FFN up, FFN down.
SHAPES = [(32760, 1536, 1536), (32760, 1536, 8960), (32760, 8960, 1536)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    import torch  # device only

    f8 = torch.float8_e4m3fn
    rows = []
    for M, K, N in SHAPES:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        flop = 2.0 * M * N * K
        r = {"M": M, "K": K, "N": N, "bf16_ms": timed_ms(torch, lambda: x @ w.t(), a.iters)}
        x8, w8 = x.to(f8), w.to(f8)
        one = torch.ones((), device="cuda")
        sx, sw = torch.ones(M, 1, device="cuda"), torch.ones(1, N, device="cuda")
        for name, sa, sb in (("tensor", one, one), ("rowwise", sx, sw)):
            for fast in (False, True):
                key = f"{name}{'_fast' if fast else ''}_ms"
                try:
                    r[key] = timed_ms(torch, lambda: torch._scaled_mm(x8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                                                   use_fast_accum=fast), a.iters)
                except Exception as e:  # a form this torch/cuBLASLt does not take
                    r[key] = None
                    r[key.replace("_ms", "_error")] = f"{type(e).__name__}: {str(e)[:160]}"
        line = f"{M}x{K}x{N}: bf16 {r['bf16_ms']:.3f} ms ({flop / r['bf16_ms'] / 1e9:.0f} TFLOP/s)"
        for k in ("tensor_ms", "tensor_fast_ms", "rowwise_ms", "rowwise_fast_ms"):
            v = r.get(k)
            line += f", {k[:-3]} " + (f"{v:.3f} ms ({r['bf16_ms'] / v:.2f}x)" if v else "failed")
        print(line, flush=True)
        rows.append(r)
        del x, w, x8, w8
    res = {"run": run_info(), "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "gemm_fp8.json"), "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
