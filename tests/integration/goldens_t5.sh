#!/usr/bin/env bash
# The T5 v1.1 text encoder of FLUX.1's pipelines (transformers' T5EncoderModel, a pipeline's
# text_encoder_2/ folder) against transformers' fp32 CPU outputs (tests/data/make_goldens_t5.py),
# max relative error <= 1e-4: batch 2 at 16 tokens with right padding of two lengths, and batch 1
# at FLUX.1-dev's 512 tokens (every relative-position bucket). Only layer 0 holds a position-bias
# table, which every layer adds: a T5 config over UMT5's per-layer tables is refused by name, as
# are config fields the encoder does not run and a UMT5 model_type under T5EncoderModel. A T5
# v1.1 config as the hub saved it (no dense_act_fn, no is_gated_act: transformers derives them
# from feed_forward_proj) compiles to the same bundle. bf16 runs near fp32; the sm_90 compile.
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/t5_tiny
te=$d/text_encoder_2
read -r L B LL < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['text_len'], m['batch'], m['long_len'])")
one=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$one" >/dev/null
"$BIN/ditrun" info "$one" >"$T/info"
grep -q "^model      T5EncoderModel (t5, family t5)$" "$T/info" || { cat "$T/info"; echo "not a T5EncoderModel bundle of family t5"; exit 1; }
grep -q "^input      input_ids  *i32\[$B,$L\]$" "$T/info" || { cat "$T/info"; echo "input_ids is not i32 [$B,$L]"; exit 1; }
"$BIN/ditrun" forward "$one" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/f.safetensors" "$d/forward_output.safetensors" last_hidden_state 1e-4
long=$("$BIN/ditc" compile "$te" --text-len "$LL" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$long" --inputs "$d/forward_inputs_l512.safetensors" --out "$T/l.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/l.safetensors" "$d/forward_output_l512.safetensors" last_hidden_state 1e-4

bad=$T/bad
# T5 v1.1's hub config: dense_act_fn and is_gated_act absent, derived from feed_forward_proj.
edit_config "$te" "$bad" -dense_act_fn -is_gated_act
same=$("$BIN/ditc" compile "$bad" --text-len "$L" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
[ "$same" = "$one" ] || { echo "the config without dense_act_fn/is_gated_act made $same, not $one"; exit 1; }

# Refusals by name: T5Config's default feed-forward (relu), UMT5's model_type, a decoder.
edit_config "$te" "$bad" -feed_forward_proj -dense_act_fn -is_gated_act
expect_fail "field 'feed_forward_proj' = \"relu\": only \"gated-gelu\" is supported" "$BIN/ditc" compile "$bad" --text-len 16 -o "$T/b"
edit_config "$te" "$bad" 'model_type="umt5"'
expect_fail "field 'model_type' = \"umt5\": only \"t5\" is supported (T5EncoderModel's configuration)" "$BIN/ditc" compile "$bad" \
  --text-len 16 -o "$T/b"
edit_config "$te" "$bad" 'is_decoder=true'
expect_fail "field 'is_decoder' = true: only the encoder (bidirectional attention) is supported" "$BIN/ditc" compile "$bad" --text-len 16 -o "$T/b"
expect_fail "--width 64: T5EncoderModel is a text encoder: its shape is --batch and --text-len alone" "$BIN/ditc" compile "$te" \
  --text-len 16 --width 64 -o "$T/b"
expect_fail "--variant umt5: T5EncoderModel has one variant (t5)" "$BIN/ditc" compile "$te" --text-len 16 --variant umt5 -o "$T/b"
# UMT5's checkpoint (a table in every layer) under a T5 config: layer 1's table is not T5's.
edit_config tests/data/umt5_tiny/text_encoder "$bad" 'architectures=["T5EncoderModel"]' 'model_type="t5"'
expect_fail "unexpected tensor 'encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight'" "$BIN/ditc" compile "$bad" \
  --text-len 16 -o "$T/b"
# The table moved off layer 0: the one T5 reads is missing.
rm -rf "$bad" && mkdir "$bad" && cp "$te/config.json" "$bad/"
restage "$te/model.safetensors" "$bad/model.safetensors" \
  encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight=encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight
expect_fail "checkpoint has no tensor 'encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight'" "$BIN/ditc" compile "$bad" \
  --text-len 16 -o "$T/b"

# bf16 as transformers runs it (wo fp32) stays near the fp32 output; the folder compiles for sm_90.
b16=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" --dtype bf16 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$b16" --inputs "$d/forward_inputs.safetensors" --out "$T/h.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/h.safetensors" "$d/forward_output.safetensors" last_hidden_state 6e-2
g90=$("$BIN/ditc" compile "$te" --text-len "$LL" --batch 2 --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_t5: ok"
