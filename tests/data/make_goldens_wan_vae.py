#!/usr/bin/env python3
"""Reference data for the Wan2.1 VAE decoder stage, produced by the pinned diffusers itself
(float32, CPU), with a tiny AutoencoderKLWan of the real structure (z_dim 16, dim_mult of four
levels, temperal_downsample [False, True, True]: two up blocks that double frames, one that does
not, the mid block's attention, residual blocks with and without shortcut convolutions).

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers are
available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_wan_vae.py

It rewrites tests/data/wan_vae_tiny/ (deleted first, so a rerun leaves nothing stale):

  vae/                              save_pretrained of the AutoencoderKLWan (encoder included, as
                                    a pipeline's vae/ folder holds it; the decode stage ignores it);
  forward_inputs.safetensors        latents [1, 16, 3, 4, 6]: 3 latent frames of 4x6 in the
                                    transformer's output space (what WanPipeline de-normalizes);
  forward_output.safetensors        sample [1, 3, 9, 32, 48]: WanPipeline's decode of them,
                                    latents / (1 / latents_std) + latents_mean, then
                                    vae.decode(...).sample (frame by frame with the causal cache,
                                    clamped to [-1, 1]);
  forward_inputs_f1.safetensors, forward_output_f1.safetensors   one latent frame -> one frame;
  meta.json                         shapes, versions and the share of clamped output values.

After writing, the VAE is reloaded from its folder and the outputs are reproduced bit for bit.
Everything is seeded, so a rerun on the same torch build reproduces the files.
"""

import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import AutoencoderKLWan

from make_goldens import fresh_dir, write_meta

NAME = "wan_vae_tiny"
MAX_FOLDER_BYTES = 600_000
SEED = 2101

TINY = dict(base_dim=4, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=2, temperal_downsample=[False, True, True])
LATENT = (3, 4, 6)  # latent frames, height, width: 9 frames of 32x48 pixels


def redraw_parameters(model, gen, is_gain=lambda name: name.endswith(".gamma")):
    """Draws at a trained model's scale instead of the defaults (gains of ones, zero biases would
    hide mistakes): gains (the parameters is_gain names: here the norms' gammas) 1 +- 0.2, weights
    of unit gain over their fan-in, biases 0.1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_gain(name):
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.2)
            elif p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(math.prod(p.shape[1:])))
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            else:
                raise RuntimeError(f"no initialisation rule for parameter {name} {tuple(p.shape)}")


def pipeline_decode(vae, latents):
    """What WanPipeline does after sampling: de-normalize, decode, take the sample."""
    z = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(latents.dtype)
    std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(latents.dtype)
    with torch.no_grad():
        return vae.decode(latents / std + mean, return_dict=False)[0]


def make_decoder_goldens(name, tiny, latent, seed, spatial, meta_config, versions):
    """tests/data/<name>/ for AutoencoderKLWan(**tiny) drawn from seed: the decodes of `latent`
    (frames, height, width) and of one latent frame, `spatial` pixels per latent pixel."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    vae = AutoencoderKLWan(**tiny).eval()
    redraw_parameters(vae, gen)
    out_dir = fresh_dir(name)
    vae.save_pretrained(os.path.join(out_dir, "vae"))

    f, h, w = latent
    cases = {}
    for suffix, frames in (("", f), ("_f1", 1)):
        latents = torch.randn((1, tiny["z_dim"], frames, h, w), generator=gen)
        sample = pipeline_decode(vae, latents)
        assert sample.shape == (1, 3, 1 + 4 * (frames - 1), spatial * h, spatial * w), sample.shape
        save_file({"latents": latents.contiguous()}, os.path.join(out_dir, f"forward_inputs{suffix}.safetensors"))
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output{suffix}.safetensors"))
        cases[suffix] = (latents, sample)

    # The files reproduce from the saved folder alone.
    again = AutoencoderKLWan.from_pretrained(os.path.join(out_dir, "vae")).eval()
    for suffix, (latents, sample) in cases.items():
        assert torch.equal(pipeline_decode(again, latents), sample), f"reload changed the decode{suffix}"

    sample = cases[""][1]
    clamped = float((sample.abs() >= 1.0).float().mean())
    # Most values inside (-1, 1) so the decode is compared, some clamped so the clamp is.
    assert 0.0 < clamped < 0.3, f"{clamped:.3f} of the output is clamped"
    meta = dict(
        frames=1 + 4 * (f - 1),
        height=spatial * h,
        width=spatial * w,
        batch=1,
        latent=[tiny["z_dim"], f, h, w],
        config=meta_config,
        clamped_share=round(clamped, 4),
        seed=seed,
        versions=versions,
    )
    size = write_meta(out_dir, meta, MAX_FOLDER_BYTES)
    print(f"{name}: {size} bytes, clamped share {clamped:.4f}")


def main():
    versions = dict(torch=torch.__version__, numpy=np.__version__, diffusers=diffusers.__version__)
    make_decoder_goldens(NAME, TINY, LATENT, SEED, 8, TINY, versions)


if __name__ == "__main__":
    sys.exit(main())
