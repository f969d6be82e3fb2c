#!/usr/bin/env python3
"""PSNR in dB of a float tensor of OURS against REF (safetensors, f32), peak-to-peak 2 (a decoder's
[-1, 1]); exit 1 below MIN. Standard library only.

    python3 tests/tools/psnr.py OURS REF TENSOR MIN"""
import json
import math
import struct
import sys


def load(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        body = f.read()
    v = h[name]
    a, b = v["data_offsets"]
    assert v["dtype"] == "F32", (path, name, v["dtype"])
    return v["shape"], struct.unpack("<%df" % ((b - a) // 4), body[a:b])


def main():
    ours, ref, name, least = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    (sa, a), (sb, b) = load(ours, name), load(ref, name)
    assert sa == sb, (sa, sb)
    mse = sum((x - y) ** 2 for x, y in zip(a, b)) / len(b)
    db = math.inf if mse == 0 else 10 * math.log10(4.0 / mse)
    print("%s psnr %.1f dB" % (name, db))
    return 0 if db >= least else 1


if __name__ == "__main__":
    sys.exit(main())
