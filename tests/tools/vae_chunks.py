"""Decodes latents through a VAE decoder's chunk bundles with `ditrun forward`, one forward per chunk,
as `ditrun generate` does: latent frame 0 through FIRST, then chunks of the later frames through REST,
each forward's cache.NAME.next outputs fed to the next forward's cache.NAME inputs (zeros before the
first). Writes the concatenated frames as tensor `sample` (f32, batch 1). With IN and OUT_NAME, the
same for a VAE encoder's chunk bundles: video frame 0 through FIRST, then chunks of REST's frames,
input tensor IN (`video`), output OUT_NAME (`latents`).

usage: vae_chunks.py DITRUN FIRST REST LATENTS.safetensors OUT.safetensors WORKDIR [IN OUT_NAME]"""
import json
import os
import struct
import subprocess
import sys


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        body = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (path, k, v["dtype"])
        a, b = v["data_offsets"]
        out[k] = (v["shape"], list(struct.unpack("<%df" % ((b - a) // 4), body[a:b])))
    return out


def save(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k, (shape, data) in tensors.items():
        b = struct.pack("<%df" % len(data), *data)
        hdr[k] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    j = json.dumps(hdr).encode()
    j += b" " * (-len(j) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(j)) + j + b"".join(blobs))


def inputs_of(ditrun, bundle):
    """name -> shape of the bundle's inputs, from `ditrun info`."""
    info = subprocess.run([ditrun, "info", bundle], check=True, capture_output=True, text=True).stdout
    out = {}
    for line in info.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "input":
            out[f[1]] = [int(x) for x in f[2][f[2].index("[") + 1:-1].split(",")]
    return out


def frames(shape, data, t0, n):
    """Frames [t0, t0 + n) (axis 2) of a [1, C, F, H, W] tensor."""
    _, c, f, h, w = shape
    hw = h * w
    out = []
    for ch in range(c):
        base = (ch * f + t0) * hw
        out += data[base:base + n * hw]
    return [1, c, n, h, w], out


def main():
    ditrun, first, rest, latents, out_path, work = sys.argv[1:7]
    in_name, out_name = sys.argv[7:9] if len(sys.argv) > 8 else ("latents", "sample")
    shape, lat = load(latents)[in_name]
    assert shape[0] == 1, shape
    ins = {b: inputs_of(ditrun, b) for b in (first, rest)}
    n = ins[rest][in_name][2]
    caches = {}
    chunks = [(first, 0, 1)] + [(rest, t, n) for t in range(1, shape[2], n)]
    pieces = []
    for i, (bundle, t0, count) in enumerate(chunks):
        feed = {in_name: frames(shape, lat, t0, count)}
        for name, s in ins[bundle].items():
            if name.startswith("cache."):
                size = 1
                for d in s:
                    size *= d
                feed[name] = caches.get(name, (s, [0.0] * size))
        fin, fout = os.path.join(work, "in%d.safetensors" % i), os.path.join(work, "out%d.safetensors" % i)
        save(fin, feed)
        subprocess.run([ditrun, "forward", bundle, "--inputs", fin, "--out", fout], check=True, capture_output=True)
        got = load(fout)
        for k, v in got.items():
            if k.startswith("cache.") and k.endswith(".next"):
                caches[k[:-len(".next")]] = v
        pieces.append(got[out_name])
    c, h, w = pieces[0][0][1], pieces[0][0][3], pieces[0][0][4]
    total = sum(p[0][2] for p in pieces)
    data = []
    for ch in range(c):
        for s, d in pieces:
            plane = s[2] * h * w
            data += d[ch * plane:(ch + 1) * plane]
    save(out_path, {out_name: ([1, c, total, h, w], data)})
    print("%d forwards (frame 0, then chunks of %d): %d frames" % (len(chunks), n, total))


main()
