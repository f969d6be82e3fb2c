#!/usr/bin/env python3
"""Makes the byte-level BPE tokenizer test folders and the golden ids Hugging Face gives for them.

  tok_qwen2_tiny/       Qwen-Image's tokenizer layout: vocab.json + merges.txt, tokenizer_config.json
                        (tokenizer_class Qwen2Tokenizer, the added tokens <|endoftext|>, <|im_start|>,
                        ... in added_tokens_decoder), added_tokens.json, special_tokens_map.json
  tok_qwen2_json_tiny/  the same model as one tokenizer.json (merges as pairs), with the same
                        tokenizer_config.json
  tok_llama3_tiny/      HunyuanVideo's (Llama 3's) layout: tokenizer.json alone (ignore_merges, merges
                        as "a b" strings, the <|begin_of_text|> template post-processor, reserved
                        special tokens) with tokenizer_class PreTrainedTokenizerFast, pad token <pad>
  tok_goldens_bpe.json  for every prompt of tok_prompts.json and tok_prompts_bpe.json (the Qwen-Image and
                        HunyuanVideo templates, added tokens, the patterns' corners): input_ids and
                        attention_mask from AutoTokenizer on each folder with padding="max_length",
                        truncation=True, and once with padding_side and truncation_side "left"

The models are trained here on tok_train.txt with the `tokenizers` library, with Qwen2's and Llama 3's
normalizer and pre-tokenizer (the patterns below are the ones in transformers' Qwen2Tokenizer and in
Llama 3's tokenizer.json). Not a test dependency (CI reads the committed outputs). Made with
transformers 5.24.0 and tokenizers 0.23.3:
  PYTHONPATH=/path/to/site-packages python3 tests/data/make_tokenizer_goldens_bpe.py
"""
import json
import os
import sys

import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_tokenizer_goldens import encode_all, write_json  # noqa: E402
QWEN_DIR = os.path.join(HERE, "tok_qwen2_tiny")
QWEN_JSON_DIR = os.path.join(HERE, "tok_qwen2_json_tiny")
LLAMA_DIR = os.path.join(HERE, "tok_llama3_tiny")
VOCAB_SIZE = 700

QWEN_PATTERN = transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX
LLAMA_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2.5-VL's added tokens, in id order after the vocabulary: the first 14 special.
QWEN_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
              "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
              "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
              "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
QWEN_N_SPECIAL = 14
# Llama 3's first special tokens (the real model has 256), then LLaVA's <image> and <pad>.
LLAMA_ADDED = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
               "<|reserved_special_token_1|>", "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
               "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>",
               "<image>", "<pad>"]


def train(pattern, nfc):
  tok = Tokenizer(models.BPE())
  if nfc:
    tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train([os.path.join(HERE, "tok_train.txt")], trainer)
  return tok


def added_entry(content, special):
  return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
          "special": special}


def make_qwen2():
  tok = train(QWEN_PATTERN, nfc=True)
  model = json.loads(tok.to_str())["model"]
  vocab, merges = model["vocab"], model["merges"]
  os.makedirs(QWEN_DIR, exist_ok=True)
  write_json(os.path.join(QWEN_DIR, "vocab.json"), vocab, indent=None)
  with open(os.path.join(QWEN_DIR, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
  first = len(vocab)
  added = {str(first + i): added_entry(c, i < QWEN_N_SPECIAL) for i, c in enumerate(QWEN_ADDED)}
  config = {"add_prefix_space": False, "added_tokens_decoder": added,
            "additional_special_tokens": QWEN_ADDED[1:QWEN_N_SPECIAL], "bos_token": None,
            "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
            "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
  write_json(os.path.join(QWEN_DIR, "tokenizer_config.json"), config)
  write_json(os.path.join(QWEN_DIR, "added_tokens.json"), {c: first + i for i, c in enumerate(QWEN_ADDED)})
  write_json(os.path.join(QWEN_DIR, "special_tokens_map.json"),
             {"additional_special_tokens": QWEN_ADDED[1:QWEN_N_SPECIAL], "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>"})
  # The same model as tokenizer.json: Qwen2Tokenizer takes the vocabulary and merges from it.
  os.makedirs(QWEN_JSON_DIR, exist_ok=True)
  hf = AutoTokenizer.from_pretrained(QWEN_DIR)
  hf.backend_tokenizer.save(os.path.join(QWEN_JSON_DIR, "tokenizer.json"))
  write_json(os.path.join(QWEN_JSON_DIR, "tokenizer_config.json"), config)


def make_llama3():
  tok = train(LLAMA_PATTERN, nfc=False)
  tj = json.loads(tok.to_str())
  first = len(tj["model"]["vocab"])
  tj["model"]["ignore_merges"] = True
  tj["model"]["merges"] = [f"{a} {b}" for a, b in tj["model"]["merges"]]  # the older form Llama 3 ships
  tj["added_tokens"] = [dict(id=first + i, **added_entry(c, True)) for i, c in enumerate(LLAMA_ADDED)]
  tj["post_processor"] = {
      "type": "Sequence",
      "processors": [
          {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
          {"type": "TemplateProcessing",
           "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
           "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [first],
                                                    "tokens": ["<|begin_of_text|>"]}}}]}
  os.makedirs(LLAMA_DIR, exist_ok=True)
  write_json(os.path.join(LLAMA_DIR, "tokenizer.json"), tj, indent=None)
  write_json(os.path.join(LLAMA_DIR, "tokenizer_config.json"),
             {"added_tokens_decoder": {str(first + i): added_entry(c, True) for i, c in enumerate(LLAMA_ADDED)},
              "bos_token": "<|begin_of_text|>", "clean_up_tokenization_spaces": True, "eos_token": "<|eot_id|>",
              "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 1000000000000000019884624838656,
              "pad_token": "<pad>", "padding_side": "right", "tokenizer_class": "PreTrainedTokenizerFast"})
  write_json(os.path.join(LLAMA_DIR, "special_tokens_map.json"),
             {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<pad>"})


def main():
  make_qwen2()
  make_llama3()
  prompt_files = ["tok_prompts.json", "tok_prompts_bpe.json"]
  prompts = [p for name in prompt_files for p in json.load(open(os.path.join(HERE, name), encoding="utf-8"))]
  qwen = AutoTokenizer.from_pretrained(QWEN_DIR)
  qwen_json = AutoTokenizer.from_pretrained(QWEN_JSON_DIR)
  llama = AutoTokenizer.from_pretrained(LLAMA_DIR)
  cases = []
  for d, tok in (("tok_qwen2_tiny", qwen), ("tok_qwen2_json_tiny", qwen_json), ("tok_llama3_tiny", llama)):
    for max_length in (192, 20):
      cases.append({"dir": d, "max_length": max_length, "results": encode_all(tok, prompts, max_length)})
  assert cases[0]["results"] == cases[2]["results"], "the two Qwen2 folders disagree"
  # The same with the pad and the cut on the left, as tokenizer_config.json can ask.
  sides = {"padding_side": "left", "truncation_side": "left"}
  left = AutoTokenizer.from_pretrained(LLAMA_DIR, **sides)
  cases.append({"dir": "tok_llama3_tiny", "config": sides, "max_length": 20, "results": encode_all(left, prompts, 20)})
  goldens = {"made_with": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                           "classes": [type(t).__name__ for t in (qwen, qwen_json, llama)]},
             "prompts": prompt_files, "cases": cases}
  # Compact: the rows are mostly padding.
  with open(os.path.join(HERE, "tok_goldens_bpe.json"), "w", encoding="utf-8") as f:
    json.dump(goldens, f, separators=(",", ":"))
    f.write("\n")


if __name__ == "__main__":
  main()
