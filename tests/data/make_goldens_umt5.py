#!/usr/bin/env python3
"""Reference data for the UMT5 text encoder of Wan's pipelines (transformers' UMT5EncoderModel),
produced by transformers itself (float32, CPU), with a tiny model.

Run from the repository root, wherever torch, numpy, safetensors and transformers are available:

    PYTHONPATH=<site> python3 tests/data/make_goldens_umt5.py

It rewrites tests/data/umt5_tiny/ (deleted first, so a rerun leaves nothing stale):

  text_encoder/                     save_pretrained of a tiny UMT5EncoderModel (config.json,
                                    model.safetensors), as a pipeline's text_encoder/ folder: vocab 96, d_model
                                    32, 4 heads of d_kv 8, d_ff 48, 2 layers, 32 buckets, max
                                    distance 128 (Wan's UMT5-XXL buckets), gated-gelu; parameters
                                    redrawn at a trained model's scale (seeded);
  forward_inputs.safetensors        batch 2, L = 16: input_ids [2,16] i64 (ids then EOS 1 then pad
                                    0, right-padded as the tokenizer pads) and attention_mask
                                    [2,16] i64 with valid lengths 13 and 7;
  forward_output.safetensors        last_hidden_state [2,16,32] f32 (UMT5EncoderModel(input_ids,
                                    attention_mask)), and wan_prompt_embeds: the same with the rows
                                    past each prompt's length zeroed, as
                                    WanPipeline._get_t5_prompt_embeds does;
  forward_inputs_l512.safetensors,  batch 1, L = 512 (Wan's text length) with 300 valid tokens:
  forward_output_l512.safetensors   every relative-position bucket of 32 / 128 in use;
  meta.json                         versions, shapes, lengths, and buckets: transformers' bucket of
                                    each relative position -511..511 at 32 buckets, max distance
                                    128 (the table the C unit test checks).

After writing, the model is reloaded from the folder and its output reproduced bit for bit.
"""

import json
import math
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

import transformers
from transformers import UMT5Config, UMT5EncoderModel

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "umt5_tiny"
MAX_FOLDER_BYTES = 600_000
MIN_CHANGE = 0.02

TINY = dict(
    vocab_size=96,
    d_model=32,
    d_kv=8,
    d_ff=48,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    feed_forward_proj="gated-gelu",
    layer_norm_epsilon=1e-6,
    dropout_rate=0.1,
)
SEED = 5101
TEXT_LEN = 16
LENGTHS = [13, 7]
LONG_LEN, LONG_VALID = 512, 300


def redraw_parameters(model, gen):
    """Draws at a trained T5's scale instead of the default initialisation: embeddings and the
    position-bias tables of unit scale, linears 1/sqrt(fan_in), norm weights around 1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.2)
            elif name in ("shared.weight", "encoder.embed_tokens.weight") or "relative_attention_bias" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError(f"no initialisation rule for parameter {name} {tuple(p.shape)}")


def tokens(gen, batch, length, valid, vocab=TINY["vocab_size"]):
    """Right-padded ids as the tokenizer makes them: ids >= 2, EOS (1) last, pad (0) after."""
    ids = torch.zeros((batch, length), dtype=torch.long)
    mask = torch.zeros((batch, length), dtype=torch.long)
    for b, n in enumerate(valid):
        ids[b, : n - 1] = torch.randint(2, vocab, (n - 1,), generator=gen)
        ids[b, n - 1] = 1
        mask[b, :n] = 1
    return ids, mask


def run(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


def wan_zeroed(out, mask):
    """WanPipeline._get_t5_prompt_embeds: each prompt's rows past its length replaced by zeros."""
    seq_lens = mask.gt(0).sum(dim=1).long()
    rows = [u[:v] for u, v in zip(out, seq_lens)]
    return torch.stack([torch.cat([u, u.new_zeros(out.shape[1] - u.size(0), u.size(1))]) for u in rows], dim=0)


def rel_change(a, b):
    return float((a - b).norm() / b.norm())


def write_meta(out_dir, name, meta, max_bytes):
    """meta.json beside the goldens, then the folder's size against its budget."""
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(out_dir) for n in names)
    print(f"{name}: {size} bytes")
    assert size <= max_bytes


def main():
    out_dir = os.path.join(HERE, NAME)
    shutil.rmtree(out_dir, ignore_errors=True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = UMT5EncoderModel(UMT5Config(**TINY)).eval()
    redraw_parameters(model, gen)
    model_dir = os.path.join(out_dir, "text_encoder")
    model.save_pretrained(model_dir, safe_serialization=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        print("config.json:", f.read())

    ids, mask = tokens(gen, 2, TEXT_LEN, LENGTHS)
    out = run(model, ids, mask)
    save_file({"input_ids": ids, "attention_mask": mask}, os.path.join(out_dir, "forward_inputs.safetensors"))
    save_file({"last_hidden_state": out.contiguous(), "wan_prompt_embeds": wan_zeroed(out, mask).contiguous()},
              os.path.join(out_dir, "forward_output.safetensors"))
    # The mask and the position bias must matter, or a backend that drops them would pass.
    c = rel_change(run(model, ids, torch.ones_like(mask)), out)
    print(f"mask changes the output by {c:.4f}")
    assert c > MIN_CHANGE
    with torch.no_grad():
        saved = [blk.layer[0].SelfAttention.relative_attention_bias.weight.clone() for blk in model.encoder.block]
        for blk in model.encoder.block:
            blk.layer[0].SelfAttention.relative_attention_bias.weight.zero_()
        c = rel_change(run(model, ids, mask), out)
        for blk, w in zip(model.encoder.block, saved):
            blk.layer[0].SelfAttention.relative_attention_bias.weight.copy_(w)
    print(f"position bias changes the output by {c:.4f}")
    assert c > MIN_CHANGE

    lids, lmask = tokens(gen, 1, LONG_LEN, [LONG_VALID])
    lout = run(model, lids, lmask)
    save_file({"input_ids": lids, "attention_mask": lmask}, os.path.join(out_dir, "forward_inputs_l512.safetensors"))
    save_file({"last_hidden_state": lout.contiguous()}, os.path.join(out_dir, "forward_output_l512.safetensors"))

    attn = model.encoder.block[0].layer[0].SelfAttention
    rel = torch.arange(-(LONG_LEN - 1), LONG_LEN, dtype=torch.long)
    buckets = attn._relative_position_bucket(rel).tolist()

    reloaded = UMT5EncoderModel.from_pretrained(model_dir).eval()
    assert torch.equal(run(reloaded, ids, mask), out), "reloaded model differs"
    from safetensors import safe_open
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    print("checkpoint keys:", keys)

    try:  # the pinned diffusers, whose WanPipeline wan_prompt_embeds follows
        import diffusers
        diffusers_version = diffusers.__version__
    except ImportError:
        diffusers_version = None
    meta = dict(
        torch=torch.__version__, transformers=transformers.__version__, diffusers=diffusers_version, numpy=np.__version__,
        seed=SEED,
        text_len=TEXT_LEN, batch=2, lengths=LENGTHS, long_len=LONG_LEN, long_valid=LONG_VALID,
        d_model=TINY["d_model"], checkpoint_keys=keys, attn_implementation=model.config._attn_implementation,
        buckets_rel_from=-(LONG_LEN - 1), buckets=buckets,
    )
    write_meta(out_dir, NAME, meta, MAX_FOLDER_BYTES)


if __name__ == "__main__":
    sys.exit(main())
