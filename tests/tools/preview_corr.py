#!/usr/bin/env python3
"""How well a --preview stands for the decode: the correlation between a preview PNG's first
latent frame and the decoded frames of the same latents (safetensors tensor `frames`
[1, 3, F, H, W] in [-1, 1], frame 0) averaged over each latent pixel's UP x UP block, over the
three colours. Exits non-zero below MIN.

usage: preview_corr.py PREVIEW.png FRAMES.safetensors UP MIN
"""
import json
import struct
import sys
import zlib


def png_rows(path):
    """An 8-bit RGB PNG's rows (bytearrays of width * 3), its five filters undone."""
    data, p, w, h, idat = open(path, "rb").read(), 8, 0, 0, b""
    while p < len(data):
        n = struct.unpack(">I", data[p:p + 4])[0]
        kind, body = data[p + 4:p + 8], data[p + 8:p + 8 + n]
        p += 12 + n
        if kind == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
    raw, stride, rows, prev, i = zlib.decompress(idat), w * 3, [], bytearray(w * 3), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a, b, c = (line[x - 3] if x >= 3 else 0), prev[x], (prev[x - 3] if x >= 3 else 0)
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return rows


def tensor(path, name):
    f = open(path, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    v = json.loads(f.read(n))[name]
    body = f.read()
    a, b = v["data_offsets"]
    return v["shape"], struct.unpack("<%df" % ((b - a) // 4), body[a:b])


def main():
    rows = png_rows(sys.argv[1])
    (_, _, F, H, W), fr = tensor(sys.argv[2], "frames")
    up, floor = int(sys.argv[3]), float(sys.argv[4])
    xs, ys = [], []
    for k in range(3):
        for ly in range(H // up):
            for lx in range(W // up):
                block = [fr[(k * F * H + ly * up + dy) * W + lx * up + dx] for dy in range(up) for dx in range(up)]
                ys.append(sum(block) / len(block))
                xs.append(rows[ly * up][lx * up * 3 + k] / 255 * 2 - 1)
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(xs, ys))
    r = cov / (sum((a - mx) ** 2 for a in xs) * sum((b - my) ** 2 for b in ys)) ** 0.5
    print("preview against the decoded frame: correlation %.3f over %d values" % (r, n))
    return 0 if r >= floor else "the preview's correlation %.3f is below %g" % (r, floor)


if __name__ == "__main__":
    sys.exit(main())
