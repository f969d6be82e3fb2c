#!/usr/bin/env python3
"""Reference data for the CLIP text encoder of FLUX.1's pipelines (transformers' CLIPTextModel,
the pipeline's text_encoder/), produced by transformers itself (float32, CPU), with a tiny model.

Run from the repository root, wherever torch, numpy, safetensors and transformers are available:

    PYTHONPATH=<site> python3 tests/data/make_goldens_clip.py

It rewrites tests/data/clip_tiny/ (deleted first, so a rerun leaves nothing stale):

  text_encoder/                  save_pretrained of a tiny CLIPTextModel (config.json,
                                 model.safetensors): vocab 814 (tests/data/tok_clip_tiny's), hidden 32,
                                 4 heads, intermediate 64, 2 layers, 77 positions, quick_gelu,
                                 eos_token_id 2 as openai/clip-vit-large-patch14's config (the pooled
                                 row is then the first position of the largest id); parameters
                                 redrawn at a trained model's scale (seeded);
  forward_inputs.safetensors     input_ids [2, 77] i64: two prompts tokenized by CLIPTokenizer from
                                 tests/data/tok_clip_tiny as FluxPipeline._get_clip_prompt_embeds does
                                 (padding "max_length" 77 with <|endoftext|>, truncation);
  forward_output.safetensors     last_hidden_state [2, 77, 32] and pooler_output [2, 32] f32
                                 (CLIPTextModel(input_ids), no attention mask, as the pipeline calls it);
  meta.json                      versions, shapes, the EOS positions.

The script checks that the causal mask and quick_gelu matter (a backend without them would fail) and
that the reloaded folder reproduces the outputs bit for bit.
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
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens_umt5 as umt5  # noqa: E402  the meta writer and the change measure
from make_goldens_umt5 import rel_change  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "clip_tiny"
TOKENIZER = os.path.join(HERE, "tok_clip_tiny")
MAX_FOLDER_BYTES = 600_000
MIN_CHANGE = 0.02
SEED = 7707
TEXT_LEN = 77
PROMPTS = [
    "A red fox running through the morning fog, cinematic lighting",
    "a cat",
]

TINY = dict(
    vocab_size=814,
    hidden_size=32,
    intermediate_size=64,
    projection_dim=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=TEXT_LEN,
    hidden_act="quick_gelu",
    layer_norm_eps=1e-5,
    bos_token_id=0,
    eos_token_id=2,
    pad_token_id=1,
)


def redraw_parameters(model, gen):
    """A trained CLIP's scale instead of the initialisation: embeddings of std 0.5 (token) and
    0.2 (position), linears 1/sqrt(fan_in) with small biases, norm weights around 1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("token_embedding.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith("position_embedding.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            elif "layer_norm" in name and name.endswith(".weight"):
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.2)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError(f"no initialisation rule for parameter {name} {tuple(p.shape)}")


def run(model, ids):
    with torch.no_grad():
        o = model(input_ids=ids, output_hidden_states=False)
    return o.last_hidden_state, o.pooler_output


def main():
    out_dir = os.path.join(HERE, NAME)
    shutil.rmtree(out_dir, ignore_errors=True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = CLIPTextModel(CLIPTextConfig(**TINY)).eval()
    redraw_parameters(model, gen)
    model_dir = os.path.join(out_dir, "text_encoder")
    model.save_pretrained(model_dir, safe_serialization=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        print("config.json:", f.read())

    tok = CLIPTokenizer.from_pretrained(TOKENIZER)
    ids = tok(PROMPTS, padding="max_length", max_length=TEXT_LEN, truncation=True, return_overflowing_tokens=False,
              return_length=False, return_tensors="pt").input_ids
    assert ids.shape == (2, TEXT_LEN) and int(ids.max()) == TINY["vocab_size"] - 1
    hidden, pooled = run(model, ids)
    eos = ids.argmax(dim=-1).tolist()
    save_file({"input_ids": ids.contiguous()}, os.path.join(out_dir, "forward_inputs.safetensors"))
    save_file({"last_hidden_state": hidden.contiguous(), "pooler_output": pooled.contiguous()},
              os.path.join(out_dir, "forward_output.safetensors"))

    # The causal mask and quick_gelu must matter, or a backend without them would pass.
    tm = getattr(model, "text_model", model)  # transformers 5's CLIPTextModel is the text transformer itself
    with torch.no_grad():
        x = tm.embeddings(input_ids=ids)
        for layer in tm.encoder.layers:
            r = x
            x = layer.layer_norm1(x)
            attn = layer.self_attn
            B, L, D = x.shape
            H = attn.num_heads
            q, k, v = (p(x).view(B, L, H, D // H).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False)
            x = r + attn.out_proj(a.transpose(1, 2).reshape(B, L, D))
            x = x + layer.mlp(layer.layer_norm2(x))
        bidir = tm.final_layer_norm(x)
    c = rel_change(bidir[torch.arange(2), eos], pooled)
    print(f"causal mask changes the pooled output by {c:.4f}")
    assert c > MIN_CHANGE
    model.config.hidden_act = "gelu"
    for layer in tm.encoder.layers:
        layer.mlp.activation_fn = transformers.activations.ACT2FN["gelu"]
    c = rel_change(run(model, ids)[1], pooled)
    print(f"quick_gelu -> gelu changes the pooled output by {c:.4f}")
    assert c > 1e-3

    reloaded = CLIPTextModel.from_pretrained(model_dir).eval()
    h2, p2 = run(reloaded, ids)
    assert torch.equal(h2, hidden) and torch.equal(p2, pooled), "reloaded model differs"
    from safetensors import safe_open
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    print("checkpoint keys:", keys)

    try:  # the pinned diffusers, whose FluxPipeline uses pooler_output
        import diffusers
        diffusers_version = diffusers.__version__
    except ImportError:
        diffusers_version = None
    meta = dict(
        torch=torch.__version__, transformers=transformers.__version__, diffusers=diffusers_version, numpy=np.__version__,
        seed=SEED, prompts=PROMPTS, text_len=TEXT_LEN, batch=2, hidden=TINY["hidden_size"], eos_positions=eos,
        checkpoint_keys=keys, attn_implementation=model.config._attn_implementation,
    )
    umt5.write_meta(out_dir, NAME, meta, MAX_FOLDER_BYTES)


if __name__ == "__main__":
    sys.exit(main())
