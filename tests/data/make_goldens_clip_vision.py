#!/usr/bin/env python3
"""Reference data for the CLIP image encoder of Wan2.1's image-to-video pipelines (transformers'
CLIPVisionModel, the pipeline's image_encoder/), produced by transformers itself (float32, CPU), with
a tiny model.

Run from the repository root, wherever torch, numpy, safetensors and transformers are available:

    PYTHONPATH=<site> python3 tests/data/make_goldens_clip_vision.py

It rewrites tests/data/clip_vision_tiny/ (deleted first, so a rerun leaves nothing stale):

  image_encoder/                        save_pretrained of a tiny CLIPVisionModel (config.json,
                                        model.safetensors): hidden 32, 4 heads, intermediate 64, 3 layers,
                                        image 28, patch 7 (16 patches and the class token), gelu as
                                        Wan2.1-I2V's ViT-H/14; parameters redrawn at a trained model's
                                        scale (seeded);
  forward_inputs.safetensors            pixel_values [2, 3, 28, 28] f32: random pixels in [0, 1]
                                        normalized with CLIP's mean and std, as CLIPImageProcessor
                                        leaves them;
  forward_output.safetensors            hidden_states_penultimate [2, 17, 32] f32:
                                        CLIPVisionModel(pixel_values, output_hidden_states=True)
                                        .hidden_states[-2], what WanImageToVideoPipeline.encode_image
                                        returns;
  forward_output_quick_gelu.safetensors the same with the config's hidden_act "quick_gelu";
  meta.json                             versions, shapes, the checkpoint's keys.

The script checks that hidden_states[0] is the pre_layrnorm output, that the penultimate state is
the first num_hidden_layers - 1 layers run by hand (not the last, not post_layernorm: the last layer
must change the result, or a backend that runs it would pass), that the activation matters, and that
the reloaded folder reproduces the outputs bit for bit.
"""

import math
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

import transformers
from transformers import CLIPVisionConfig, CLIPVisionModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens_umt5 as umt5  # noqa: E402  the meta writer and the change measure
from make_goldens_umt5 import rel_change  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "clip_vision_tiny"
MAX_FOLDER_BYTES = 300_000
MIN_CHANGE = 0.02
SEED = 7717
BATCH = 2
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

TINY = dict(
    hidden_size=32,
    intermediate_size=64,
    projection_dim=16,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_channels=3,
    image_size=28,
    patch_size=7,
    hidden_act="gelu",
    layer_norm_eps=1e-5,
)


def redraw_parameters(model, gen):
    """A trained CLIP's scale instead of the initialisation: class embedding of std 0.5, position
    embedding 0.2, the patch convolution and linears 1/sqrt(fan_in) with small biases, norm weights
    around 1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("class_embedding"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith("position_embedding.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            elif "norm" in name:  # layer_norm1/2, pre_layrnorm, post_layernorm
                base = 1.0 if name.endswith(".weight") else 0.0
                p.copy_(base + torch.randn(p.shape, generator=gen) * 0.2)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))
            else:
                raise RuntimeError(f"no initialisation rule for parameter {name} {tuple(p.shape)}")


def penultimate(model, pixels):
    with torch.no_grad():
        o = model(pixel_values=pixels, output_hidden_states=True)
    return o.hidden_states, o.last_hidden_state


def main():
    out_dir = os.path.join(HERE, NAME)
    shutil.rmtree(out_dir, ignore_errors=True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = CLIPVisionModel(CLIPVisionConfig(**TINY)).eval()
    redraw_parameters(model, gen)
    model_dir = os.path.join(out_dir, "image_encoder")
    model.save_pretrained(model_dir, safe_serialization=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        print("config.json:", f.read())

    S = TINY["image_size"]
    mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
    pixels = ((torch.rand((BATCH, 3, S, S), generator=gen) - mean) / std).contiguous()
    states, last = penultimate(model, pixels)
    out = states[-2]
    L = TINY["num_hidden_layers"]
    T = 1 + (S // TINY["patch_size"]) ** 2
    assert len(states) == L + 1 and out.shape == (BATCH, T, TINY["hidden_size"]), (len(states), out.shape)
    save_file({"pixel_values": pixels}, os.path.join(out_dir, "forward_inputs.safetensors"))
    save_file({"hidden_states_penultimate": out.contiguous()}, os.path.join(out_dir, "forward_output.safetensors"))

    # By hand: embeddings, pre_layrnorm (hidden_states[0]), then the first L - 1 layers.
    with torch.no_grad():
        x = model.pre_layrnorm(model.embeddings(pixels))
        assert torch.equal(x, states[0]), "hidden_states[0] is not the pre_layrnorm output"
        for layer in model.encoder.layers[:L - 1]:
            r = x
            x = layer.layer_norm1(x)
            attn = layer.self_attn
            B, N, D = x.shape
            H = attn.num_heads
            q, k, v = (p(x).view(B, N, H, D // H).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            x = r + attn.out_proj(a.transpose(1, 2).reshape(B, N, D))
            x = x + layer.mlp(layer.layer_norm2(x))
    c = rel_change(x, out)
    print(f"by hand vs hidden_states[-2]: {c:.2e}")
    assert c < 1e-6
    c = rel_change(last, out)
    print(f"the last layer changes the output by {c:.4f}")
    assert c > MIN_CHANGE
    with torch.no_grad():
        c = rel_change(model.post_layernorm(out), out)
    print(f"post_layernorm changes the output by {c:.4f}")
    assert c > MIN_CHANGE

    reloaded = CLIPVisionModel.from_pretrained(model_dir).eval()
    assert torch.equal(penultimate(reloaded, pixels)[0][-2], out), "reloaded model differs"

    # quick_gelu, the text encoder's activation and CLIPVisionConfig's default.
    model.config.hidden_act = "quick_gelu"
    for layer in model.encoder.layers:
        layer.mlp.activation_fn = transformers.activations.ACT2FN["quick_gelu"]
    quick = penultimate(model, pixels)[0][-2]
    c = rel_change(quick, out)
    print(f"gelu -> quick_gelu changes the output by {c:.4f}")
    assert c > 1e-3
    save_file({"hidden_states_penultimate": quick.contiguous()}, os.path.join(out_dir, "forward_output_quick_gelu.safetensors"))

    from safetensors import safe_open
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    print("checkpoint keys:", keys)
    try:  # the pinned diffusers, whose WanImageToVideoPipeline.encode_image takes hidden_states[-2]
        import diffusers
        diffusers_version = diffusers.__version__
    except ImportError:
        diffusers_version = None
    meta = dict(
        torch=torch.__version__, transformers=transformers.__version__, diffusers=diffusers_version, numpy=np.__version__,
        seed=SEED, batch=BATCH, image_size=S, patch_size=TINY["patch_size"], tokens=T, hidden=TINY["hidden_size"],
        layers=L, checkpoint_keys=keys, attn_implementation=model.config._attn_implementation,
    )
    umt5.write_meta(out_dir, NAME, meta, MAX_FOLDER_BYTES)


if __name__ == "__main__":
    sys.exit(main())
