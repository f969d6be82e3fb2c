#!/usr/bin/env python3
"""Decoded frames of OURS (tensor frames [B, C, F, H, W], the decoder's [-1, 1], as `ditrun generate
--out-frames` writes them) through a video processor's postprocess (x / 2 + 0.5 clamped to [0, 1])
against REF's tensor TENSOR (a pipeline's output_type "pt" video [B, F, C, H, W] in [0, 1]): prints
the max absolute error and the PSNR (peak 1); exit 1 when the error is above MAX_ERR or the PSNR
below MIN_DB. Standard library only.

    python3 tests/tools/video_frames.py OURS REF TENSOR MAX_ERR MIN_DB"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from psnr import load  # noqa: E402


def main():
    ours_path, ref_path, name, max_err, min_db = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
    (b, c, f, h, w), ours = load(ours_path, "frames")
    shape, ref = load(ref_path, name)
    if shape != [b, f, c, h, w]:
        print(f"shapes differ: ours [{b}, {c}, {f}, {h}, {w}] (B, C, F, H, W), the reference {shape} (B, F, C, H, W)")
        return 1
    worst, sq = 0.0, 0.0
    for bi in range(b):
        for ci in range(c):
            for fi in range(f):
                for p in range(h * w):
                    x = ours[(((bi * c + ci) * f + fi) * h * w) + p]
                    y = ref[(((bi * f + fi) * c + ci) * h * w) + p]
                    d = abs(min(max(x * 0.5 + 0.5, 0.0), 1.0) - y)
                    worst = max(worst, d)
                    sq += d * d
    mse = sq / len(ref)
    db = math.inf if mse == 0 else 10 * math.log10(1.0 / mse)
    ok = worst <= max_err and db >= min_db
    print(f"{ours_path}: video max_abs_err={worst:.3e} psnr={db:.1f} dB limits {max_err:g}, {min_db:g} dB {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
