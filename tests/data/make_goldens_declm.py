#!/usr/bin/env python3
"""Reference data for the decoder-only language models that encode prompts: Qwen-Image's
(transformers' Qwen2_5_VLForConditionalGeneration, the pipeline's text_encoder/) and HunyuanVideo's
(transformers' LlamaModel), produced by transformers itself (float32, CPU), with tiny models.

Run from the repository root, wherever torch, numpy, safetensors and transformers are available:

    PYTHONPATH=<site> python3 tests/data/make_goldens_declm.py

It rewrites tests/data/qwen25vl_text_tiny/ and tests/data/llama_text_tiny/ (each deleted first):

  text_encoder/                  save_pretrained of the tiny model (config.json, model.safetensors):
                                 vocab 100, hidden 48, 4 heads of 12 and 2 key/value heads (grouped-
                                 query attention), intermediate 64; Qwen2.5-VL: 3 layers, q/k/v biases,
                                 mrope_section [2, 2, 2], rope_theta 1e6, and a one-block vision tower
                                 (saved, never run: the pipeline passes no pixels); Llama: 4 layers, no
                                 biases, rope_theta 5e5; parameters redrawn at a trained model's scale
                                 (seeded);
  forward_inputs.safetensors     input_ids [2, 12] and attention_mask [2, 12] i64: item 0 all valid,
                                 item 1 valid for 7 tokens then right-padded (pad id 0, mask 0), as the
                                 pipelines' tokenizers pad;
  forward_output.safetensors     hidden_states_selected [2, 12, 48] f32: the hidden state each pipeline
                                 takes from model(input_ids, attention_mask, output_hidden_states=True):
                                 QwenImagePipeline hidden_states[-1], HunyuanVideoPipeline
                                 hidden_states[-3] (num_hidden_layers_to_skip 2); every row, padded
                                 ones included (transformers' positions are 0..L-1 for every row and a
                                 padded query attends the valid keys, so they are defined);
  meta.json                      versions, shapes, the valid lengths.

The script checks what the compiler relies on: hidden_states has num_hidden_layers + 1 entries, [0]
the embeddings, [-1] the final norm of the last layer (last_hidden_state); [-3] the output of the
first num_hidden_layers - 2 layers, not normed; a forward written here with plain 1-D rotary
embeddings (rotate-half), repeated key/value heads and the causal and padding masks reproduces
transformers' (so Qwen2.5-VL's multimodal rotary embedding is the 1-D one for text); the causal mask,
the padding mask and the key/value head sharing each change the output (a backend without them would
fail); the reloaded folder reproduces the outputs bit for bit.
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
from transformers import LlamaConfig, LlamaModel, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens_umt5 as umt5  # noqa: E402  the meta writer and the change measure
from make_goldens_umt5 import rel_change  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_FOLDER_BYTES = 400_000
MIN_CHANGE = 0.02
SEED = 2517
TEXT_LEN = 12
VALID = [12, 7]

TEXT = dict(vocab_size=100, hidden_size=48, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=256)
QWEN_TEXT = dict(TEXT, num_hidden_layers=3, rope_parameters=dict(rope_type="default", type="mrope", mrope_section=[2, 2, 2],
                                                                 rope_theta=1e6))
QWEN_VISION = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=48, fullatt_block_indexes=[0])
LLAMA = dict(TEXT, num_hidden_layers=4, rope_parameters=dict(rope_type="default", rope_theta=5e5), attention_bias=False,
             mlp_bias=False)


def redraw_parameters(model, gen):
    """A trained language model's scale instead of the initialisation: token embeddings of std 0.5,
    linears 1/sqrt(fan_in), biases of std 0.1 (Qwen2's q/k/v biases are large in trained models: 0.5
    for k), norm weights around 1; the vision tower's parameters small (never run)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif "norm" in name and name.endswith(".weight"):
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.2)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if "k_proj" in name else 0.1))
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError(f"no initialisation rule for parameter {name} {tuple(p.shape)}")


def inputs(gen, vocab):
    ids = torch.randint(1, vocab, (len(VALID), TEXT_LEN), generator=gen)
    mask = torch.zeros(len(VALID), TEXT_LEN, dtype=torch.long)
    for b, n in enumerate(VALID):
        mask[b, :n] = 1
        ids[b, n:] = 0
    return ids, mask


def hidden_states(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states


def language_model(model):
    return model.model.language_model if hasattr(model, "model") else model


def by_hand(lm, ids, mask, layers, final_norm, causal=True, padding=True, share_kv=True):
    """The forward the compiler builds: 1-D rotary embeddings of positions 0..L-1 (rotate-half,
    inv_freq = theta^(-2j/Dh)), key/value head g serving query heads g*rep .. g*rep + rep - 1, the
    causal mask and the keys past each item's valid prefix masked."""
    cfg = lm.config
    B, L = ids.shape
    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
    Dh = cfg.hidden_size // H
    theta = cfg.rope_parameters["rope_theta"]
    inv = 1.0 / (theta ** (torch.arange(0, Dh, 2, dtype=torch.float) / Dh))
    f = torch.arange(L, dtype=torch.float)[:, None] * inv[None]
    cos, sin = torch.cat([f.cos(), f.cos()], -1), torch.cat([f.sin(), f.sin()], -1)

    def rot(x):
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    allowed = torch.ones(B, L, L, dtype=torch.bool)
    if causal:
        allowed &= torch.tril(torch.ones(L, L, dtype=torch.bool))
    if padding:
        allowed &= mask.bool()[:, None, :]
    with torch.no_grad():
        x = lm.embed_tokens(ids)
        for layer in lm.layers[:layers]:
            a = layer.self_attn
            y = layer.input_layernorm(x)
            q = a.q_proj(y).view(B, L, H, Dh).transpose(1, 2)
            k = a.k_proj(y).view(B, L, KV, Dh).transpose(1, 2)
            v = a.v_proj(y).view(B, L, KV, Dh).transpose(1, 2)
            q, k = rot(q), rot(k)
            if share_kv:
                k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            else:  # each query head its own (wrong) key/value head: heads taken cyclically
                k, v = k.repeat(1, H // KV, 1, 1), v.repeat(1, H // KV, 1, 1)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
            s = s.masked_fill(~allowed[:, None], float("-inf"))
            o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H * Dh)
            x = x + a.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return lm.norm(x) if final_norm else x


def make(name, model, select, layers, final_norm, gen, extra_meta):
    out_dir = os.path.join(HERE, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    model.eval()
    redraw_parameters(model, gen)
    model_dir = os.path.join(out_dir, "text_encoder")
    model.save_pretrained(model_dir, safe_serialization=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        print(f"{name} config.json:", f.read())

    lm = language_model(model)
    n = lm.config.num_hidden_layers
    ids, mask = inputs(gen, lm.config.vocab_size)
    hs = hidden_states(model, ids, mask)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    last = out.last_hidden_state if hasattr(out, "last_hidden_state") else None
    assert len(hs) == n + 1, f"{len(hs)} hidden states for {n} layers"
    assert torch.equal(hs[0], lm.embed_tokens(ids).detach()), "hidden_states[0] is not the embeddings"
    if last is not None:
        assert torch.equal(hs[-1], last), "hidden_states[-1] is not last_hidden_state"
    selected = hs[select].contiguous()

    # The compiler's forward reproduces it: 1-D rotary embeddings, shared key/value heads, masks.
    mine = by_hand(lm, ids, mask, layers, final_norm)
    err = float((mine - selected).abs().max() / selected.abs().max())
    print(f"{name}: the forward by hand (1-D rotary, repeated kv heads, causal + padding) is within {err:.2e}")
    assert err < 1e-5
    assert final_norm == (select == -1)
    # What a backend must not leave out.
    for what, kw in (("the causal mask", dict(causal=False)), ("the padding mask", dict(padding=False)),
                     ("the key/value head sharing", dict(share_kv=False))):
        c = rel_change(by_hand(lm, ids, mask, layers, final_norm, **kw), selected)
        print(f"{name}: leaving out {what} changes the output by {c:.4f}")
        assert c > MIN_CHANGE, what
    c = rel_change(hs[-1] if select != -1 else hs[-3], selected)
    print(f"{name}: another hidden state differs by {c:.4f}")
    assert c > MIN_CHANGE

    save_file({"input_ids": ids.contiguous(), "attention_mask": mask.contiguous()},
              os.path.join(out_dir, "forward_inputs.safetensors"))
    save_file({"hidden_states_selected": selected}, os.path.join(out_dir, "forward_output.safetensors"))

    reloaded = type(model).from_pretrained(model_dir).eval()
    assert torch.equal(hidden_states(reloaded, ids, mask)[select], selected), "reloaded model differs"
    from safetensors import safe_open
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    print(f"{name} checkpoint keys:", keys)

    try:  # the pinned diffusers, whose pipelines pick these hidden states
        import diffusers
        diffusers_version = diffusers.__version__
    except ImportError:
        diffusers_version = None
    meta = dict(
        torch=torch.__version__, transformers=transformers.__version__, diffusers=diffusers_version, numpy=np.__version__,
        seed=SEED, text_len=TEXT_LEN, batch=len(VALID), valid=VALID, hidden=lm.config.hidden_size, hidden_state_index=select,
        layers_run=layers, final_norm=final_norm, checkpoint_keys=keys, attn_implementation=model.config._attn_implementation,
        **extra_meta)
    umt5.write_meta(out_dir, name, meta, MAX_FOLDER_BYTES)


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    qwen = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=QWEN_TEXT, vision_config=QWEN_VISION))
    make("qwen25vl_text_tiny", qwen, -1, QWEN_TEXT["num_hidden_layers"], True, gen,
         dict(pipeline="QwenImagePipeline._get_qwen_prompt_embeds: hidden_states[-1]"))
    llama = LlamaModel(LlamaConfig(**LLAMA))
    make("llama_text_tiny", llama, -3, LLAMA["num_hidden_layers"] - 2, False, gen,
         dict(pipeline="HunyuanVideoPipeline._get_llama_prompt_embeds: hidden_states[-(2 + 1)]"))


if __name__ == "__main__":
    sys.exit(main())
