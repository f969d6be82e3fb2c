#!/usr/bin/env python3
"""Makes the tokenizer test folders and the golden ids the Hugging Face tokenizers give.

  tok_t5_tiny/    spiece.model: a SentencePiece unigram model (byte fallback, as UMT5's) trained on
                  tok_train.txt, with the config files T5's tokenizer reads
  tok_clip_tiny/  vocab.json + merges.txt in CLIP's format: the 256 byte symbols, the same with
                  "</w>", 300 merges learned here from tok_train.txt, then <|startoftext|> and
                  <|endoftext|>
  tok_goldens.json  for every prompt of tok_prompts.json: input_ids and attention_mask from
                  AutoTokenizer on each folder with padding="max_length", truncation=True and the
                  max_length the pipelines use (T5: 512 and a short 16 for truncation; CLIP: 77)

Not a test dependency (CI reads the committed outputs). Made with transformers 5.24.0, tokenizers
0.23.3, sentencepiece 0.2.3, protobuf (pip into a scratch folder):
  python3 -m pip install --target /tmp/tokpy sentencepiece transformers tokenizers protobuf
  PYTHONPATH=/tmp/tokpy python3 tests/data/make_tokenizer_goldens.py
"""
import collections
import json
import os

import sentencepiece as spm
import transformers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
T5_DIR = os.path.join(HERE, "tok_t5_tiny")
CLIP_DIR = os.path.join(HERE, "tok_clip_tiny")
N_MERGES = 300


def write_json(path, obj, indent=1):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(obj, f, ensure_ascii=False, indent=indent)
    f.write("\n")


def make_t5():
  os.makedirs(T5_DIR, exist_ok=True)
  spm.SentencePieceTrainer.train(
      input=os.path.join(HERE, "tok_train.txt"), model_prefix=os.path.join(T5_DIR, "spiece"), model_type="unigram",
      vocab_size=480, byte_fallback=True, character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
      pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>", num_threads=1, minloglevel=2)
  os.remove(os.path.join(T5_DIR, "spiece.vocab"))
  write_json(os.path.join(T5_DIR, "tokenizer_config.json"),
             {"tokenizer_class": "T5Tokenizer", "model_max_length": 512, "extra_ids": 0,
              "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>", "additional_special_tokens": []})
  write_json(os.path.join(T5_DIR, "special_tokens_map.json"),
             {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"})


def bytes_to_unicode():
  # CLIP's (and GPT-2's) reversible map from bytes to printable characters.
  bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
  cs = bs[:]
  n = 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return dict(zip(bs, map(chr, cs)))


def make_clip():
  os.makedirs(CLIP_DIR, exist_ok=True)
  byte_chars = list(bytes_to_unicode().values())
  # Words as CLIP's pre-tokenizer cuts them, counted; merges learned greedily by pair frequency.
  pre = transformers.CLIPTokenizer(vocab={"<|startoftext|>": 0, "<|endoftext|>": 1}, merges=[]).backend_tokenizer
  text = open(os.path.join(HERE, "tok_train.txt"), encoding="utf-8").read()
  words = collections.Counter()
  for line in text.splitlines():
    norm = pre.normalizer.normalize_str(line)
    for piece, _ in pre.pre_tokenizer.pre_tokenize_str(norm):
      syms = list(piece)
      syms[-1] += "</w>"
      words[tuple(syms)] += 1
  merges = []
  for _ in range(N_MERGES):
    pairs = collections.Counter()
    for w, c in words.items():
      for a, b in zip(w, w[1:]):
        pairs[(a, b)] += c
    if not pairs:
      break
    best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
    merges.append(best)
    merged = collections.Counter()
    for w, c in words.items():
      out, i = [], 0
      while i < len(w):
        if i + 1 < len(w) and (w[i], w[i + 1]) == best:
          out.append(w[i] + w[i + 1])
          i += 2
        else:
          out.append(w[i])
          i += 1
      merged[tuple(out)] += c
    words = merged
  vocab = {}
  for s in byte_chars + [c + "</w>" for c in byte_chars] + [a + b for a, b in merges]:
    vocab.setdefault(s, len(vocab))
  vocab["<|startoftext|>"] = len(vocab)
  vocab["<|endoftext|>"] = len(vocab)
  write_json(os.path.join(CLIP_DIR, "vocab.json"), vocab)
  with open(os.path.join(CLIP_DIR, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
  write_json(os.path.join(CLIP_DIR, "tokenizer_config.json"),
             {"tokenizer_class": "CLIPTokenizer", "model_max_length": 77, "bos_token": "<|startoftext|>",
              "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
              "do_lower_case": True})
  write_json(os.path.join(CLIP_DIR, "special_tokens_map.json"),
             {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
              "pad_token": "<|endoftext|>"})


def encode_all(tok, prompts, max_length):
  out = []
  for p in prompts:
    e = tok(p, padding="max_length", truncation=True, max_length=max_length)
    out.append({"input_ids": e["input_ids"], "attention_mask": e["attention_mask"]})
  return out


def main():
  make_t5()
  make_clip()
  prompts = json.load(open(os.path.join(HERE, "tok_prompts.json"), encoding="utf-8"))
  t5 = AutoTokenizer.from_pretrained(T5_DIR)
  clip = AutoTokenizer.from_pretrained(CLIP_DIR)
  goldens = {
      "made_with": {"transformers": transformers.__version__, "t5_class": type(t5).__name__,
                    "clip_class": type(clip).__name__},
      "cases": [
          {"dir": "tok_t5_tiny", "max_length": 512, "results": encode_all(t5, prompts, 512)},
          {"dir": "tok_t5_tiny", "max_length": 16, "results": encode_all(t5, prompts, 16)},
          {"dir": "tok_clip_tiny", "max_length": 77, "results": encode_all(clip, prompts, 77)},
      ],
  }
  # Compact: one result per line (the T5 rows are mostly padding).
  with open(os.path.join(HERE, "tok_goldens.json"), "w", encoding="utf-8") as f:
    json.dump(goldens, f, separators=(",", ":"))
    f.write("\n")
  # The library's own encoding, for the record: where it and the HF tokenizer differ.
  sp = spm.SentencePieceProcessor(model_file=os.path.join(T5_DIR, "spiece.model"))
  for i, p in enumerate(prompts):
    ref = (sp.encode(p) + [1])[:512]
    hf = [t for t, m in zip(goldens["cases"][0]["results"][i]["input_ids"],
                            goldens["cases"][0]["results"][i]["attention_mask"]) if m]
    if ref != hf:
      print(f"prompt {i}: sentencepiece {ref[:24]} hf {hf[:24]}")


if __name__ == "__main__":
  main()
