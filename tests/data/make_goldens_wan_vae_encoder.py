#!/usr/bin/env python3
"""Reference data for the Wan VAE encoder stage (ditc compile VAE --vae-part encoder), produced by
the pinned diffusers itself (float32, CPU): what WanImageToVideoPipeline.prepare_latents does with
its conditioning video, retrieve_latents(vae.encode(video), sample_mode="argmax") (the posterior's
mean; diffusers encodes frame 0 alone, then 4 frames at a time with the causal cache), then
(latents - latents_mean) * (1 / latents_std).

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers are
available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_wan_vae_encoder.py

It rewrites two folders (each deleted first):

  tests/data/wan_vae_enc_tiny/     the Wan2.1 VAE of tests/data/wan_vae_tiny/vae (its encoder: widths
                                   4 * [1, 1, 2, 2, 2], read there, not copied; meta.json records
                                   its sha256);
  tests/data/wan22_vae_enc_tiny/   vae/: a complete tiny Wan2.2 VAE (is_residual, patch_size 2, z_dim
                                   48) whose encoder is 4 * [1, 1, 1, 2, 2] wide (the decoder
                                   golden's encoder, base_dim 1, has RMS norms over one channel);

each with encoder_inputs.safetensors (video [1, 3, 9, 32, 48] uniform in [-1, 1]; 32 x 32 for
Wan2.2, whose folder holds the weights too) and
encoder_output.safetensors (latents [1, z_dim, 3, h, w]), the same with suffix _f1 for one frame
(an image, as Wan2.2's TI2V encodes it), and meta.json. The VAE is reloaded from its folder and
the outputs reproduced bit for bit. Everything is seeded.
"""

import hashlib
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import AutoencoderKLWan

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import fresh_dir, write_meta  # noqa: E402
from make_goldens_wan_vae import redraw_parameters  # noqa: E402
from make_goldens_wan22_vae import TINY as WAN22_TINY  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_FOLDER_BYTES = 600_000
FRAMES, HEIGHT = 9, 32


def pipeline_encode(vae, video):
    """WanImageToVideoPipeline.prepare_latents' conditioning latents."""
    z = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(video.dtype)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(video.dtype)
    with torch.no_grad():
        # retrieve_latents(..., sample_mode="argmax") (pipeline_wan_i2v.py, whose module needs the hub's
        # client libraries to import): the posterior's mode.
        latents = vae.encode(video).latent_dist.mode()
    return (latents - mean) * inv_std


def sha256(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def make(name, vae_dir, vae, seed, spatial, width, note):
    out_dir = fresh_dir(name)
    if vae_dir is None:
        vae_dir = os.path.join(out_dir, "vae")
        vae.save_pretrained(vae_dir)
    gen = torch.Generator().manual_seed(seed)
    cases = {}
    for suffix, frames in (("", FRAMES), ("_f1", 1)):
        video = torch.rand((1, 3, frames, HEIGHT, width), generator=gen) * 2 - 1
        latents = pipeline_encode(vae, video)
        want = (1, vae.config.z_dim, (frames - 1) // 4 + 1, HEIGHT // spatial, width // spatial)
        assert latents.shape == want, (latents.shape, want)
        save_file({"video": video.contiguous()}, os.path.join(out_dir, f"encoder_inputs{suffix}.safetensors"))
        save_file({"latents": latents.contiguous()}, os.path.join(out_dir, f"encoder_output{suffix}.safetensors"))
        cases[suffix] = (video, latents)
    again = AutoencoderKLWan.from_pretrained(vae_dir).eval()
    for suffix, (video, latents) in cases.items():
        assert torch.equal(pipeline_encode(again, video), latents), f"reload changed the encode{suffix}"
    lat = cases[""][1]
    meta = dict(
        frames=FRAMES,
        height=HEIGHT,
        width=width,
        batch=1,
        vae=os.path.relpath(vae_dir, os.path.dirname(os.path.dirname(HERE))),
        vae_weights_sha256=sha256(os.path.join(vae_dir, "diffusion_pytorch_model.safetensors")),
        latent=list(lat.shape[1:]),
        latents_abs_max=round(float(lat.abs().max()), 4),
        note=note,
        seed=seed,
        versions=dict(torch=torch.__version__, numpy=np.__version__, diffusers=diffusers.__version__),
    )
    size = write_meta(out_dir, meta, MAX_FOLDER_BYTES)
    print(f"{name}: {size} bytes, latents |max| {meta['latents_abs_max']}")


def main():
    torch.manual_seed(2103)
    wan21_dir = os.path.join(HERE, "wan_vae_tiny", "vae")
    wan21 = AutoencoderKLWan.from_pretrained(wan21_dir).eval()
    make("wan_vae_enc_tiny", wan21_dir, wan21, 2103, 8, 48, "the encoder of tests/data/wan_vae_tiny/vae")

    tiny = dict(WAN22_TINY, base_dim=4)
    wan22 = AutoencoderKLWan(**tiny).eval()
    redraw_parameters(wan22, torch.Generator().manual_seed(2204))
    make("wan22_vae_enc_tiny", None, wan22, 2204, 16, 32, "a Wan2.2 VAE whose encoder is 4 channels wide at least")


if __name__ == "__main__":
    sys.exit(main())
