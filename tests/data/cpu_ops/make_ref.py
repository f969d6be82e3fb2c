#!/usr/bin/env python3
"""Writes ref.bin: small fp32 inputs and torch/diffusers outputs that test_cpu_ops checks the
CPU kernels against. Run from anywhere:

    python3 make_ref.py --diffusers /path/to/diffusers/src

Record format (little-endian): u32 name_len, name, u32 rank, i64 dims[rank], f32 data.
"""
import argparse
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--diffusers", default="/work/ref/src", help="diffusers source tree (its src/)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref.bin"))
    args = ap.parse_args()
    sys.path.insert(0, args.diffusers)
    from diffusers.models.embeddings import get_timestep_embedding
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    torch.manual_seed(1234)
    recs = []

    def put(name, t):
        recs.append((name, t.detach().to(torch.float32).contiguous()))

    def rand(*shape, lo=-1.0, hi=1.0):
        v = torch.rand(*shape, dtype=torch.float32) * (hi - lo) + lo
        return torch.where(v.abs() < 1e-3, torch.full_like(v, 1e-3), v)

    # Norms and activations on [B, T, D] with a non-zero mean.
    x = rand(2, 5, 48, lo=-2.0, hi=3.0)
    w = rand(48, lo=-2.0, hi=2.0)
    b = rand(48)
    put("ln.x", x)
    put("ln.w", w)
    put("ln.b", b)
    put("ln.y", F.layer_norm(x, (48,), w, b, 1e-6))
    put("ln.y_noaffine", F.layer_norm(x, (48,), None, None, 1e-6))
    rms = torch.nn.RMSNorm(48, eps=1e-6)
    with torch.no_grad():
        rms.weight.copy_(w)
    put("rms.y", rms(x))
    put("gelu.y", F.gelu(x, approximate="tanh"))
    put("silu.y", F.silu(x))
    mod = rand(2, 6, 48)
    put("adaln.mod", mod)
    # shift = row 0, scale = row 1, broadcast over tokens, as Wan's blocks do it.
    put("adaln.y", F.layer_norm(x, (48,), None, None, 1e-6) * (1 + mod[:, 1:2]) + mod[:, 0:1])

    # Timestep embedding: Wan's settings, then an odd dim with shift and scale.
    t = torch.tensor([999, 500, 1, 0, 17], dtype=torch.int64)
    put("temb.t", t.float())
    put("temb.y", get_timestep_embedding(t, 256, flip_sin_to_cos=True, downscale_freq_shift=0))
    put("temb.y2", get_timestep_embedding(t, 33, flip_sin_to_cos=False, downscale_freq_shift=1, scale=2))

    # RoPE: Wan's tables for head dim 24 on a 2x3x4 patch grid, 2 heads.
    rope = WanRotaryPosEmbed(attention_head_dim=24, patch_size=(1, 2, 2), max_seq_len=1024)
    cos, sin = rope(torch.zeros(1, 1, 2, 6, 8))  # [1, 24, 1, 24] each, interleaved pairs
    xr = rand(1, 24, 2 * 24)
    xh = xr.view(1, 24, 2, 12, 2)
    c = cos.view(1, 24, 1, 12, 2)[..., 0]
    s = sin.view(1, 24, 1, 12, 2)[..., 1]
    even = xh[..., 0] * c - xh[..., 1] * s
    odd = xh[..., 0] * s + xh[..., 1] * c
    put("rope.x", xr)
    put("rope.y", torch.stack([even, odd], dim=-1).reshape(1, 24, 48))

    # Attention: S and L cross the kernel's block sizes; 2 heads of 8.
    B, S, L, H, Dh = 1, 50, 140, 2, 8
    q, k, v = rand(B, S, H * Dh, lo=-2, hi=2), rand(B, L, H * Dh, lo=-2, hi=2), rand(B, L, H * Dh)
    qh, kh, vh = (z.view(B, -1, H, Dh).transpose(1, 2) for z in (q, k, v))
    o = F.scaled_dot_product_attention(qh, kh, vh)
    lse = torch.logsumexp((qh.double() @ kh.double().transpose(-1, -2)) / math.sqrt(Dh), dim=-1)
    put("attn.q", q)
    put("attn.k", k)
    put("attn.v", v)
    put("attn.o", o.transpose(1, 2).reshape(B, S, H * Dh))
    put("attn.lse", lse)

    # Patch embedding as Wan does it: Conv3d with kernel = stride = patch, tokens (f, h, w).
    conv = torch.nn.Conv3d(4, 8, kernel_size=(1, 2, 2), stride=(1, 2, 2))
    xp = rand(1, 4, 2, 6, 4)
    put("patch.x", xp)
    put("patch.w", conv.weight)
    put("patch.b", conv.bias)
    put("patch.y", conv(xp).flatten(2).transpose(1, 2))

    # Unpatchify: [B, f*h*w, pt*ph*pw*C] -> [B, C, f*pt, h*ph, w*pw], Wan's reshape/permute.
    yu = rand(1, 12, 16)
    f_, h_, w_, pt, ph, pw, C = 2, 3, 2, 1, 2, 2, 4
    out = yu.reshape(1, f_, h_, w_, pt, ph, pw, C).permute(0, 7, 1, 4, 2, 5, 3, 6)
    put("unpatch.y", yu)
    put("unpatch.out", out.flatten(6, 7).flatten(4, 5).flatten(2, 3))

    with open(args.out, "wb") as fh:
        for name, t in recs:
            nb = name.encode()
            fh.write(struct.pack("<I", len(nb)) + nb + struct.pack("<I", t.dim()))
            fh.write(struct.pack("<%dq" % t.dim(), *t.shape))
            fh.write(t.numpy().astype("<f4").tobytes())
    print("wrote %s: %d tensors" % (args.out, len(recs)))


if __name__ == "__main__":
    main()
