#!/usr/bin/env python3
"""Reference data for the Wan2.2 VAE decoder stage, produced by the pinned diffusers itself
(float32, CPU), with a tiny AutoencoderKLWan of the Wan2.2 structure: is_residual (residual up
blocks whose DupUp3D shortcut duplicates channels, pixels and frames), patch_size 2 (the decoder's
12 output channels unpatchified to 3 at twice the resolution: 16 pixels per latent pixel), z_dim 48
with the Wan2.2 latents_mean/latents_std, dim_mult of four levels [1, 1, 2, 2] (as the real [1, 2,
4, 4]: up blocks 0 and 1 keep their width and double frames, block 2 halves its width without
doubling frames, so its shortcut takes two input channels per output channel, block 3 does not
upsample), decoder_base_dim apart from base_dim (the encoder, which the stage does not read, kept
smaller).

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers are
available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_wan22_vae.py

It rewrites tests/data/wan22_vae_tiny/ (deleted first, so a rerun leaves nothing stale):

  vae/                              save_pretrained of the AutoencoderKLWan (encoder included);
  forward_inputs.safetensors        latents [1, 48, 3, 2, 3]: 3 latent frames of 2x3 in the
                                    transformer's output space;
  forward_output.safetensors        sample [1, 3, 9, 32, 48]: WanPipeline's decode of them
                                    (de-normalized, vae.decode frame by frame, unpatchified, clamped);
  forward_inputs_f1.safetensors, forward_output_f1.safetensors   one latent frame -> one frame;
  meta.json                         shapes, versions and the share of clamped output values.

The parameters are drawn as tests/data/make_goldens_wan_vae.py draws them; the decode is WanPipeline's
as there. After writing, the VAE is reloaded from its folder and the outputs are reproduced bit for bit.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import transformers

import diffusers

from make_goldens_wan_vae import make_decoder_goldens

NAME = "wan22_vae_tiny"
SEED = 2202

# Wan-AI/Wan2.2-TI2V-5B-Diffusers' latent statistics (48 channels).
LATENTS_MEAN = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891, 0.157, -0.0098, 0.0375,
    -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502, -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899,
    -0.2799, -0.123, -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.052, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573,
    -0.0548, -0.1681, -0.0667,
]
LATENTS_STD = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.499, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659, 0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.06, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
]
# The decoder's widths: 4 * [2, 2, 2, 1, 1] (the real one: 256 * [4, 4, 4, 2, 1]). At least 4 channels
# everywhere: a channel RMS norm over 2 channels amplifies fp32 rounding (torch's own fp32 decode
# then differs from its fp64 one by 6e-5 of the peak).
TINY = dict(base_dim=1, decoder_base_dim=4, z_dim=48, dim_mult=[1, 1, 2, 2], num_res_blocks=2, temperal_downsample=[False, True, True],
            is_residual=True, patch_size=2, in_channels=12, out_channels=12, scale_factor_spatial=16, scale_factor_temporal=4,
            latents_mean=LATENTS_MEAN, latents_std=LATENTS_STD)
LATENT = (3, 2, 3)  # latent frames, height, width: 9 frames of 32x48 pixels


def main():
    versions = dict(torch=torch.__version__, numpy=np.__version__, transformers=transformers.__version__,
                    diffusers=diffusers.__version__)
    make_decoder_goldens(NAME, TINY, LATENT, SEED, 16, {k: v for k, v in TINY.items() if not k.startswith("latents_")},
                         versions)


if __name__ == "__main__":
    sys.exit(main())
