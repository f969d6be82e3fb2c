#!/usr/bin/env python3
"""Reference data for HunyuanVideo's VAE decoder stage, produced by the pinned diffusers itself
(float32, CPU), with a tiny AutoencoderKLHunyuanVideo of HunyuanVideo's structure (four levels:
up block 0 doubling the pixels alone, blocks 1 and 2 the frames and the pixels, block 3 none;
spatial_compression_ratio 8, temporal_compression_ratio 4; layers_per_block 1, GroupNorm with
several channels per group, the mid block's frame-causal attention; widths small enough for the
folder to stay small, one level wider so an up block has a shortcut convolution).

Run from the repository root, wherever torch, numpy, safetensors and the pinned diffusers are
available:

    PYTHONPATH=<diffusers>/src python3 tests/data/make_goldens_hunyuan_vae.py

It rewrites tests/data/hunyuan_vae_tiny/ (deleted first, so a rerun leaves nothing stale):

  vae/                              config.json and the decoder's tensors with post_quant_conv (the
                                    encoder's are left out to keep the folder small: the decoder
                                    stage does not read them);
  forward_inputs.safetensors        latents [1, 4, 3, 4, 6]: a 9-frame 32x48 video's latents in the
                                    transformer's output space, as HunyuanVideoPipeline holds them;
  forward_output.safetensors        sample [1, 3, 9, 32, 48]: the pipeline's decode of them,
                                    latents / scaling_factor, then vae.decode(...).sample without
                                    tiling or framewise decoding (not clamped: the video processor
                                    does that);
  forward_inputs_f1.safetensors, forward_output_f1.safetensors   one latent frame (an image);
  forward_inputs_f25.safetensors, forward_output_f25.safetensors   a 25-frame 16x16 video (seven
                                    latent frames) decoded as the pipeline does by default:
                                    framewise (use_framewise_decoding on, more than
                                    tile_sample_min_num_frames / 4 = 4 latent frames), windows of
                                    five latent frames at 0 and 3 (and one frame at 6, whose one
                                    decoded frame is dropped), blended over four frames;
  meta.json                         shapes, the config, versions.

The decoder's parameters are redrawn at a trained model's scale (make_goldens_wan_vae.py's draw),
then conv_out scaled so the sample lies mostly inside [-1, 1] as a trained decoder's does. After
writing, a fresh AutoencoderKLHunyuanVideo loads the folder and reproduces the outputs bit for bit.
Everything is seeded, so a rerun on the same torch build reproduces the files.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import diffusers
from diffusers import AutoencoderKLHunyuanVideo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import fresh_dir, write_meta  # noqa: E402
import make_goldens_wan_vae as wan_vae  # noqa: E402  the parameter draw

NAME = "hunyuan_vae_tiny"
MAX_FOLDER_BYTES = 600_000
SEED = 4769

TINY = dict(
    in_channels=3,
    out_channels=3,
    latent_channels=4,
    down_block_types=["HunyuanVideoDownBlock3D"] * 4,
    up_block_types=["HunyuanVideoUpBlock3D"] * 4,
    block_out_channels=[8, 8, 8, 12],
    layers_per_block=1,
    act_fn="silu",
    norm_num_groups=4,
    scaling_factor=0.476986,
    spatial_compression_ratio=8,
    temporal_compression_ratio=4,
    mid_block_add_attention=True,
)
CASES = (("", 9, 32, 48), ("_f1", 1, 32, 48), ("_f25", 25, 16, 16))  # suffix, frames, height, width (pixels)
FRAMEWISE = ("_f25",)  # the cases decoded with diffusers' default framewise decoding


def make_vae(seed, config=TINY):
    """A tiny VAE of config drawn from seed, decoding whole (no tiling, no framewise decoding)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    vae = AutoencoderKLHunyuanVideo(**config).eval()
    wan_vae.redraw_parameters(vae, gen, is_gain=lambda name: "norm" in name.split(".")[-2] and name.endswith(".weight"))
    vae.use_tiling = False
    vae.use_framewise_decoding = False
    return vae, gen


def pipeline_decode(vae, latents, framewise=False):
    """What HunyuanVideoPipeline does after sampling: latents / scaling_factor, decode, the sample;
    framewise: with the VAE's default framewise decoding (only the window loop differs)."""
    vae.use_framewise_decoding = framewise
    try:
        with torch.no_grad():
            return vae.decode(latents / vae.config.scaling_factor, return_dict=False)[0]
    finally:
        vae.use_framewise_decoding = False


def scale_conv_out(vae, latents):
    """conv_out scaled so that 99% of the decode of latents lies inside [-1, 1]; the gain."""
    probe = pipeline_decode(vae, latents)
    gain = 1.0 / float(probe.abs().flatten().quantile(0.99))
    with torch.no_grad():
        vae.decoder.conv_out.conv.weight.mul_(gain)
        vae.decoder.conv_out.conv.bias.mul_(gain)
    return gain


def save_decoder(vae, folder):
    """config.json and the decoder's tensors (with post_quant_conv) in folder."""
    os.makedirs(folder, exist_ok=True)
    vae.save_config(folder)
    tensors = {k: v.contiguous() for k, v in vae.state_dict().items() if k.startswith(("decoder.", "post_quant_conv."))}
    save_file(tensors, os.path.join(folder, "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})


def load_decoder(folder):
    again = AutoencoderKLHunyuanVideo.from_config(AutoencoderKLHunyuanVideo.load_config(folder)).eval()
    missing, unexpected = again.load_state_dict(load_file(os.path.join(folder, "diffusion_pytorch_model.safetensors")), strict=False)
    assert not unexpected and all(k.startswith(("encoder.", "quant_conv.")) for k in missing), (missing, unexpected)
    again.use_tiling = False
    again.use_framewise_decoding = False
    return again


def main():
    vae, gen = make_vae(SEED)
    z, s = TINY["latent_channels"], TINY["spatial_compression_ratio"]
    cases = {suffix: torch.randn((1, z, (f - 1) // 4 + 1, h // s, w // s), generator=gen) for suffix, f, h, w in CASES}
    gain = scale_conv_out(vae, cases[""])

    out_dir = fresh_dir(NAME)
    save_decoder(vae, os.path.join(out_dir, "vae"))
    outputs = {}
    for suffix, f, h, w in CASES:
        sample = pipeline_decode(vae, cases[suffix], suffix in FRAMEWISE)
        if suffix in FRAMEWISE:  # the windows do change the decode (GroupNorm's statistics span a window's frames)
            assert not torch.allclose(sample, pipeline_decode(vae, cases[suffix]), atol=1e-3), "framewise decode equals the whole one"
        assert sample.shape == (1, 3, f, h, w), sample.shape
        save_file({"latents": cases[suffix].contiguous()}, os.path.join(out_dir, f"forward_inputs{suffix}.safetensors"))
        save_file({"sample": sample.contiguous()}, os.path.join(out_dir, f"forward_output{suffix}.safetensors"))
        outputs[suffix] = sample

    again = load_decoder(os.path.join(out_dir, "vae"))
    for suffix, *_ in CASES:
        assert torch.equal(pipeline_decode(again, cases[suffix], suffix in FRAMEWISE), outputs[suffix]), f"reload changed the decode{suffix}"

    sample = outputs[""]
    outside = float((sample.abs() > 1.0).float().mean())
    meta = dict(
        cases=[dict(suffix=x, frames=f, height=h, width=w, latents=list(cases[x].shape), framewise=x in FRAMEWISE) for x, f, h, w in CASES],
        config=TINY,
        conv_out_gain=gain,
        outside_unit_share=round(outside, 4),
        seed=SEED,
        versions=dict(torch=torch.__version__, numpy=np.__version__, diffusers=diffusers.__version__),
    )
    size = write_meta(out_dir, meta, MAX_FOLDER_BYTES)
    print(f"{NAME}: {size} bytes, {outside:.4f} of the sample outside [-1, 1], range [{float(sample.min()):.3f}, {float(sample.max()):.3f}]")


if __name__ == "__main__":
    main()
