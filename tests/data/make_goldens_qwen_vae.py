#!/usr/bin/env python3
"""Reference data for Qwen-Image's VAE decoder stage, produced by the pinned diffusers itself (float32,
CPU), with a tiny AutoencoderKLQwenImage of the real structure (z_dim 16, dim_mult of four levels,
temperal_downsample [False, True, True], the mid block's attention, residual blocks with and without
shortcut convolutions, Qwen-Image's latents_mean and latents_std: the class defaults).

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers are
available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_qwen_vae.py

It rewrites tests/data/qwen_vae_tiny/ (deleted first, so a rerun leaves nothing stale):

  vae/                              config.json of the AutoencoderKLQwenImage and the tensors its
                                    decode reads (decoder.*, post_quant_conv.*; the encoder's are left
                                    out to keep the folder small: the decoder stage does not read them);
  forward_inputs.safetensors        latents [2, 6, 64]: packed latents of two 32x48 images in the
                                    transformer's output space, as QwenImagePipeline holds them;
  forward_output.safetensors        sample [2, 3, 32, 48]: QwenImagePipeline's decode of them,
                                    _unpack_latents to [B, 16, 1, h, w], latents / (1 / latents_std) +
                                    latents_mean, then vae.decode(...)[0][:, :, 0] (clamped to [-1, 1]
                                    by the decode);
  forward_inputs_64x32.safetensors, forward_output_64x32.safetensors   one 64x32 image (height and
                                    width differ: the packing's rows and columns);
  meta.json                         shapes, the config, versions and the share of clamped values.

After writing, a fresh AutoencoderKLQwenImage loads the folder and reproduces the outputs bit for bit.
Everything is seeded, so a rerun on the same torch build reproduces the files.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import AutoencoderKLQwenImage

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import fresh_dir, write_meta  # noqa: E402
import make_goldens_wan_vae as wan_vae  # noqa: E402  the parameter draw

NAME = "qwen_vae_tiny"
MAX_FOLDER_BYTES = 400_000
SEED = 2508

TINY = dict(base_dim=4, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=2, temperal_downsample=[False, True, True],
            input_channels=3)
CASES = (("", 2, 32, 48), ("_64x32", 1, 64, 32))  # suffix, batch, height, width (pixels)
VAE_SCALE_FACTOR = 8  # QwenImagePipeline's 2 ** len(temperal_downsample)


def unpack_latents(latents, height, width, vae_scale_factor):
    """QwenImagePipeline._unpack_latents (importing the pipeline needs its web client): packed tokens
    [B, (h/2)(w/2), 4C], each row (c, dy, dx) of a 2x2 latent patch, to latents [B, C, 1, h, w]."""
    b, _, ch = latents.shape
    h, w = 2 * (height // (vae_scale_factor * 2)), 2 * (width // (vae_scale_factor * 2))
    return latents.view(b, h // 2, w // 2, ch // 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, ch // 4, 1, h, w)


def pipeline_decode(vae, latents, height, width):
    """What QwenImagePipeline does after sampling: unpack, de-normalize, decode, keep frame 0."""
    z = vae.config.z_dim
    x = unpack_latents(latents, height, width, VAE_SCALE_FACTOR).to(vae.dtype)
    mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(x.dtype)
    std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(x.dtype)
    with torch.no_grad():
        return vae.decode(x / std + mean, return_dict=False)[0][:, :, 0]


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    vae = AutoencoderKLQwenImage(**TINY).eval()
    wan_vae.redraw_parameters(vae, gen)
    assert 2 ** len(vae.temperal_downsample) == VAE_SCALE_FACTOR

    out_dir = fresh_dir(NAME)
    os.makedirs(os.path.join(out_dir, "vae"))
    vae.save_config(os.path.join(out_dir, "vae"))
    decode = {k: v.contiguous() for k, v in vae.state_dict().items() if k.startswith(("decoder.", "post_quant_conv."))}
    save_file(decode, os.path.join(out_dir, "vae", "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})

    cases = {}
    for suffix, batch, h, w in CASES:
        tokens = (h // 16) * (w // 16)
        latents = torch.randn((batch, tokens, 4 * TINY["z_dim"]), generator=gen)
        sample = pipeline_decode(vae, latents, h, w)
        assert sample.shape == (batch, 3, h, w), sample.shape
        save_file({"latents": latents.contiguous()}, os.path.join(out_dir, f"forward_inputs{suffix}.safetensors"))
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output{suffix}.safetensors"))
        cases[suffix] = (latents, sample)

    # The files reproduce from the saved folder alone (the encoder, absent there, is not used).
    again = AutoencoderKLQwenImage.from_config(AutoencoderKLQwenImage.load_config(os.path.join(out_dir, "vae"))).eval()
    missing, unexpected = again.load_state_dict(load_file(os.path.join(out_dir, "vae", "diffusion_pytorch_model.safetensors")),
                                                strict=False)
    assert not unexpected and all(k.startswith(("encoder.", "quant_conv.")) for k in missing), (missing, unexpected)
    for suffix, batch, h, w in CASES:
        latents, sample = cases[suffix]
        assert torch.equal(pipeline_decode(again, latents, h, w), sample), f"reload changed the decode{suffix}"

    sample = cases[""][1]
    clamped = float((sample.abs() >= 1.0).float().mean())
    # Most values inside (-1, 1) so the decode is compared, some clamped so the clamp is.
    assert 0.0 < clamped < 0.3, f"{clamped:.3f} of the output is clamped"
    meta = dict(
        cases=[dict(suffix=s, batch=b, height=h, width=w, tokens=(h // 16) * (w // 16)) for s, b, h, w in CASES],
        config=TINY,
        clamped_share=round(clamped, 4),
        seed=SEED,
        versions=dict(torch=torch.__version__, numpy=np.__version__, diffusers=diffusers.__version__),
    )
    size = write_meta(out_dir, meta, MAX_FOLDER_BYTES)
    print(f"{NAME}: {size} bytes, clamped share {clamped:.4f}, range [{float(sample.min()):.3f}, {float(sample.max()):.3f}]")


if __name__ == "__main__":
    sys.exit(main())
