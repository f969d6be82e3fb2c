#!/usr/bin/env python3
"""Reference data for the T5 v1.1 text encoder of FLUX.1's pipelines (text_encoder_2: transformers'
T5EncoderModel, as google/t5-v1_1-xxl), produced by transformers itself (float32, CPU), with a tiny
model.

Run from the repository root, wherever torch, numpy, safetensors and transformers are available:

    PYTHONPATH=<site> python3 tests/data/make_goldens_t5.py

It rewrites tests/data/t5_tiny/ (deleted first, so a rerun leaves nothing stale):

  text_encoder_2/                   save_pretrained of a tiny T5EncoderModel (config.json,
                                    model.safetensors), as a FLUX.1 pipeline's text_encoder_2/
                                    folder: vocab 96, d_model 32, 4 heads of d_kv 8, d_ff 48, 3
                                    layers, 32 buckets, max distance 128 (T5-XXL's), gated-gelu
                                    (gelu_new), tie_word_embeddings false as T5 v1.1's config;
                                    only layer 0 has a relative_attention_bias table, whose bias
                                    every layer adds; parameters redrawn at a trained model's scale
                                    (seeded);
  forward_inputs.safetensors        batch 2, L = 16: input_ids [2,16] i64 (ids then EOS 1 then pad
                                    0, right-padded as the tokenizer pads) and attention_mask
                                    [2,16] i64 with valid lengths 12 and 5;
  forward_output.safetensors        last_hidden_state [2,16,32] f32 (T5EncoderModel(input_ids,
                                    attention_mask));
  forward_inputs_l512.safetensors,  batch 1, L = 512 (FLUX.1-dev's max_sequence_length) with 400
  forward_output_l512.safetensors   valid tokens: every relative-position bucket of 32 / 128 in use;
  meta.json                         versions, shapes, lengths.

The mask, layer 0's bias table and its sharing with the later layers must each change the output
(checked), and the model reloaded from the folder reproduces its output bit for bit.
"""

import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

import transformers
from transformers import T5Config, T5EncoderModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens_umt5 as umt5  # noqa: E402  the same weight draw, token ids and run
from make_goldens_umt5 import redraw_parameters, rel_change, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "t5_tiny"
MAX_FOLDER_BYTES = 600_000
MIN_CHANGE = 0.02

TINY = dict(
    vocab_size=96,
    d_model=32,
    d_kv=8,
    d_ff=48,
    num_layers=3,
    num_heads=4,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    feed_forward_proj="gated-gelu",
    layer_norm_epsilon=1e-6,
    dropout_rate=0.1,
    tie_word_embeddings=False,
)
SEED = 5102
TEXT_LEN = 16
LENGTHS = [12, 5]
LONG_LEN, LONG_VALID = 512, 400


def tokens(gen, batch, length, valid):
    return umt5.tokens(gen, batch, length, valid, TINY["vocab_size"])


def main():
    out_dir = os.path.join(HERE, NAME)
    shutil.rmtree(out_dir, ignore_errors=True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = T5EncoderModel(T5Config(**TINY)).eval()
    redraw_parameters(model, gen)
    blocks = model.encoder.block
    assert blocks[0].layer[0].SelfAttention.has_relative_attention_bias
    assert not any(blk.layer[0].SelfAttention.has_relative_attention_bias for blk in blocks[1:])
    model_dir = os.path.join(out_dir, "text_encoder_2")
    model.save_pretrained(model_dir, safe_serialization=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        print("config.json:", f.read())

    ids, mask = tokens(gen, 2, TEXT_LEN, LENGTHS)
    out = run(model, ids, mask)
    save_file({"input_ids": ids, "attention_mask": mask}, os.path.join(out_dir, "forward_inputs.safetensors"))
    save_file({"last_hidden_state": out.contiguous()}, os.path.join(out_dir, "forward_output.safetensors"))
    # The mask, the bias table and its reuse by the later layers must matter, or a backend that
    # drops any of them would pass.
    c = rel_change(run(model, ids, torch.ones_like(mask)), out)
    print(f"mask changes the output by {c:.4f}")
    assert c > MIN_CHANGE
    table = blocks[0].layer[0].SelfAttention.relative_attention_bias.weight
    with torch.no_grad():
        saved = table.clone()
        table.zero_()
        c = rel_change(run(model, ids, mask), out)
        table.copy_(saved)
    print(f"position bias changes the output by {c:.4f}")
    assert c > MIN_CHANGE
    attn = blocks[0].layer[0].SelfAttention
    bias = attn.compute_bias(TEXT_LEN, TEXT_LEN)
    x = model.encoder.embed_tokens(ids)
    with torch.no_grad():  # layer 0 with the bias, the later layers without it
        ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        h = blocks[0](x, attention_mask=ext, position_bias=bias + ext)[0]
        zero = torch.zeros_like(bias) + ext
        for blk in blocks[1:]:
            h = blk(h, attention_mask=ext, position_bias=zero)[0]
        first_only = model.encoder.final_layer_norm(h)
        h = blocks[0](x, attention_mask=ext, position_bias=bias + ext)[0]
        for blk in blocks[1:]:
            h = blk(h, attention_mask=ext, position_bias=bias + ext)[0]
        shared = model.encoder.final_layer_norm(h)
    assert rel_change(shared, out) < 1e-5, "the layers' shared bias does not reproduce the model"
    c = rel_change(first_only, out)
    print(f"sharing layer 0's bias with the later layers changes the output by {c:.4f}")
    assert c > MIN_CHANGE

    lids, lmask = tokens(gen, 1, LONG_LEN, [LONG_VALID])
    lout = run(model, lids, lmask)
    save_file({"input_ids": lids, "attention_mask": lmask}, os.path.join(out_dir, "forward_inputs_l512.safetensors"))
    save_file({"last_hidden_state": lout.contiguous()}, os.path.join(out_dir, "forward_output_l512.safetensors"))

    reloaded = T5EncoderModel.from_pretrained(model_dir).eval()
    assert torch.equal(run(reloaded, ids, mask), out), "reloaded model differs"
    from safetensors import safe_open
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    print("checkpoint keys:", keys)

    try:
        import diffusers
        diffusers_version = diffusers.__version__
    except ImportError:
        diffusers_version = None
    meta = dict(
        torch=torch.__version__, transformers=transformers.__version__, diffusers=diffusers_version, numpy=np.__version__,
        seed=SEED,
        text_len=TEXT_LEN, batch=2, lengths=LENGTHS, long_len=LONG_LEN, long_valid=LONG_VALID,
        d_model=TINY["d_model"], checkpoint_keys=keys, attn_implementation=model.config._attn_implementation,
    )
    umt5.write_meta(out_dir, NAME, meta, MAX_FOLDER_BYTES)


if __name__ == "__main__":
    sys.exit(main())
