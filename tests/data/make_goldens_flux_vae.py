#!/usr/bin/env python3
"""Reference data for FLUX.1's VAE decoder stage, produced by the pinned diffusers itself (float32,
CPU), with a tiny AutoencoderKL of FLUX.1's structure (latent_channels 16, four levels: three 2x
upsamplings, layers_per_block 2, GroupNorm with several channels per group, the mid block's
attention, FLUX.1's scaling and shift factors, no quant convolutions; widths small enough for the
folder to stay small, one level narrower so an up block has a shortcut convolution).

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers are
available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_flux_vae.py

It rewrites tests/data/flux_vae_tiny/ (deleted first, so a rerun leaves nothing stale):

  vae/                              config.json of the AutoencoderKL and its decoder's tensors (the
                                    encoder's are left out to keep the folder small: the decoder
                                    stage does not read them);
  forward_inputs.safetensors        latents [2, 16, 64]: packed latents of two 64x64 images in the
                                    transformer's output space, as FluxPipeline holds them;
  forward_output.safetensors        sample [2, 3, 64, 64]: FluxPipeline's decode of them,
                                    _unpack_latents, latents / scaling_factor + shift_factor, then
                                    vae.decode(...).sample (not clamped: the pipeline's image
                                    processor does that);
  forward_inputs_128x96.safetensors, forward_output_128x96.safetensors   one 128x96 image (height
                                    and width differ: the packing's rows and columns);
  meta.json                         shapes, the config, versions.

The decoder's parameters are redrawn at a trained model's scale, then conv_out scaled so the sample
lies mostly inside [-1, 1] as a trained decoder's does (PSNR's peak-to-peak of 2 then means what it
says). After writing, a fresh AutoencoderKL loads the folder and reproduces the outputs bit for bit.
Everything is seeded, so a rerun on the same torch build reproduces the files.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
from diffusers import AutoencoderKL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import fresh_dir, write_meta  # noqa: E402
import make_goldens_wan_vae as wan_vae  # noqa: E402  the parameter draw

NAME = "flux_vae_tiny"
MAX_FOLDER_BYTES = 600_000
SEED = 1159

TINY = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 4,
    up_block_types=["UpDecoderBlock2D"] * 4,
    block_out_channels=[8, 8, 16, 16],
    layers_per_block=2,
    act_fn="silu",
    latent_channels=16,
    norm_num_groups=4,
    sample_size=64,
    scaling_factor=0.3611,
    shift_factor=0.1159,
    use_quant_conv=False,
    use_post_quant_conv=False,
    mid_block_add_attention=True,
)
CASES = (("", 2, 64, 64), ("_128x96", 1, 128, 96))  # suffix, batch, height, width (pixels)


def redraw_parameters(model, gen):
    """make_goldens_wan_vae.py's draw at a trained model's scale, the norm weights as the gains."""
    wan_vae.redraw_parameters(model, gen,
                              is_gain=lambda name: "norm" in name.split(".")[-2] and name.endswith(".weight"))


def unpack_latents(latents, height, width, vae_scale_factor):
    """FluxPipeline._unpack_latents (importing the pipeline needs its web client): packed tokens
    [B, (h/2)(w/2), 4C], each row (c, dy, dx) of a 2x2 latent patch, to latents [B, C, h, w]."""
    b, _, ch = latents.shape
    h, w = 2 * (height // (vae_scale_factor * 2)), 2 * (width // (vae_scale_factor * 2))
    return latents.view(b, h // 2, w // 2, ch // 4, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, ch // 4, h, w)


def pipeline_decode(vae, latents, height, width):
    """What FluxPipeline does after sampling: unpack, de-normalize, decode, take the sample."""
    scale = 2 ** (len(vae.config.block_out_channels) - 1)
    z = unpack_latents(latents, height, width, scale)
    z = (z / vae.config.scaling_factor) + vae.config.shift_factor
    with torch.no_grad():
        return vae.decode(z, return_dict=False)[0]


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    vae = AutoencoderKL(**TINY).eval()
    redraw_parameters(vae, gen)
    cases = {}
    for suffix, batch, h, w in CASES:
        tokens = (h // 16) * (w // 16)
        cases[suffix] = torch.randn((batch, tokens, 4 * TINY["latent_channels"]), generator=gen)
    # conv_out scaled so that 99% of the first case's sample lies inside [-1, 1].
    probe = pipeline_decode(vae, cases[""], 64, 64)
    gain = 1.0 / float(probe.abs().flatten().quantile(0.99))
    with torch.no_grad():
        vae.decoder.conv_out.weight.mul_(gain)
        vae.decoder.conv_out.bias.mul_(gain)

    out_dir = fresh_dir(NAME)
    os.makedirs(os.path.join(out_dir, "vae"))
    vae.save_config(os.path.join(out_dir, "vae"))
    decoder = {k: v.contiguous() for k, v in vae.state_dict().items() if k.startswith("decoder.")}
    save_file(decoder, os.path.join(out_dir, "vae", "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})

    outputs = {}
    for suffix, batch, h, w in CASES:
        latents = cases[suffix]
        sample = pipeline_decode(vae, latents, h, w)
        assert sample.shape == (batch, 3, h, w), sample.shape
        save_file({"latents": latents.contiguous()}, os.path.join(out_dir, f"forward_inputs{suffix}.safetensors"))
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output{suffix}.safetensors"))
        outputs[suffix] = sample

    # The files reproduce from the saved folder alone (the encoder, absent there, is not used).
    again = AutoencoderKL.from_config(AutoencoderKL.load_config(os.path.join(out_dir, "vae"))).eval()
    from safetensors.torch import load_file
    missing, unexpected = again.load_state_dict(load_file(os.path.join(out_dir, "vae", "diffusion_pytorch_model.safetensors")),
                                                strict=False)
    assert not unexpected and all(k.startswith(("encoder.", "quant_conv.")) for k in missing), (missing, unexpected)
    for suffix, batch, h, w in CASES:
        assert torch.equal(pipeline_decode(again, cases[suffix], h, w), outputs[suffix]), f"reload changed the decode{suffix}"

    sample = outputs[""]
    outside = float((sample.abs() > 1.0).float().mean())
    meta = dict(
        cases=[dict(suffix=s, batch=b, height=h, width=w, tokens=(h // 16) * (w // 16)) for s, b, h, w in CASES],
        config={k: v for k, v in TINY.items()},
        conv_out_gain=gain,
        outside_unit_share=round(outside, 4),
        seed=SEED,
        versions=dict(torch=torch.__version__, numpy=np.__version__, diffusers=diffusers.__version__),
    )
    size = write_meta(out_dir, meta, MAX_FOLDER_BYTES)
    print(f"{NAME}: {size} bytes, {outside:.4f} of the sample outside [-1, 1], range [{float(sample.min()):.3f}, {float(sample.max()):.3f}]")


if __name__ == "__main__":
    sys.exit(main())
