#!/usr/bin/env python3
"""Wan's text encoder stage (UMT5-XXL, transformers' UMT5EncoderModel) on the GPU: ditrun's bundle
against transformers in bf16 on the same random-weight model, one prompt of --text-len tokens
(--valid of them real, the rest padding as WanPipeline pads).

    python3 bench/umt5_encode.py --ditc D --ditrun R --work W --out O [--layers 24] [--text-len 512]
    python3 bench/umt5_encode.py --write-folder DIR [--layers N]   (zero weights, no torch: for a kernel cache)

Prints and writes O/umt5_encode.json and .md: the encode's median time (ditrun bench; transformers
over --iters calls after a warm-up), the peak device memory of each (ditrun's load line, torch's
max_memory_allocated), and the cosine and relative L2 of ours against transformers' output over the
prompt's rows. --layers N keeps N of the 24 blocks at the published widths (the embedding table,
a quarter of the model, is always whole)."""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ceilings import run_info  # noqa: E402
from pipeline_bench import write_json, write_zero_safetensors  # noqa: E402

# Wan2.1's text_encoder/config.json (google/umt5-xxl's encoder).
CONFIG = {"architectures": ["UMT5EncoderModel"], "model_type": "umt5", "vocab_size": 256384, "d_model": 4096, "d_kv": 64,
          "d_ff": 10240, "num_layers": 24, "num_heads": 64, "relative_attention_num_buckets": 32,
          "relative_attention_max_distance": 128, "dropout_rate": 0.1, "layer_norm_epsilon": 1e-6,
          "initializer_factor": 1.0, "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new", "is_gated_act": True,
          "is_encoder_decoder": True, "tie_word_embeddings": False, "use_cache": True, "pad_token_id": 0,
          "eos_token_id": 1, "decoder_start_token_id": 0}


SMOKE = {"vocab_size": 512, "d_model": 64, "d_kv": 16, "d_ff": 128, "num_heads": 4}  # --smoke: a CPU check of this script


def config(layers, smoke=False):
    return dict(CONFIG, num_layers=layers, **(SMOKE if smoke else {}))


def weight_shapes(cfg):
    d, inner, ff = cfg["d_model"], cfg["num_heads"] * cfg["d_kv"], cfg["d_ff"]
    s = {"shared.weight": [cfg["vocab_size"], d], "encoder.final_layer_norm.weight": [d]}
    for i in range(cfg["num_layers"]):
        b = f"encoder.block.{i}.layer."
        for p in "qkv":
            s[f"{b}0.SelfAttention.{p}.weight"] = [inner, d]
        s[f"{b}0.SelfAttention.o.weight"] = [d, inner]
        s[f"{b}0.SelfAttention.relative_attention_bias.weight"] = [cfg["relative_attention_num_buckets"], cfg["num_heads"]]
        s[f"{b}0.layer_norm.weight"] = s[f"{b}1.layer_norm.weight"] = [d]
        s[f"{b}1.DenseReluDense.wi_0.weight"] = s[f"{b}1.DenseReluDense.wi_1.weight"] = [ff, d]
        s[f"{b}1.DenseReluDense.wo.weight"] = [d, ff]
    return s


def write_folder(path, layers):
    """The encoder folder with zero bf16 weights (kernels depend on shapes only)."""
    os.makedirs(path, exist_ok=True)
    cfg = config(layers)
    write_json(os.path.join(path, "config.json"), cfg)
    return write_zero_safetensors(os.path.join(path, "model.safetensors"), weight_shapes(cfg))


def ditrun_side(a, bundle, inputs, out):
    """ditrun forward (its output) and ditrun bench (median ms); the load line's memory."""
    fw = subprocess.run([a.ditrun, "forward", bundle, "--inputs", inputs, "--out", out], capture_output=True, text=True)
    if fw.returncode:
        raise RuntimeError("ditrun forward: " + fw.stderr.strip()[-600:])
    b = subprocess.run([a.ditrun, "bench", bundle, "--inputs", inputs, "--steps", str(a.iters)], capture_output=True, text=True)
    if b.returncode:
        raise RuntimeError("ditrun bench: " + b.stderr.strip()[-600:])
    ms = [float(x.split()[1]) for x in b.stdout.splitlines() if x.startswith("forward_ms_median")]
    mem = re.search(r"^ditrun: memory: ([0-9.]+) MiB allocated", fw.stderr, re.M)
    return {"ms": ms[0] if ms else None, "allocated_mib": float(mem.group(1)) if mem else None}


def run(a):
    import torch  # device only
    from safetensors.torch import load_file, save_file  # device only
    from transformers import UMT5Config, UMT5EncoderModel  # device only

    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device("cpu" if a.smoke else "cuda")
    torch.manual_seed(0)
    cfg = config(a.layers, a.smoke)
    t0 = time.perf_counter()
    with torch.device(dev):
        model = UMT5EncoderModel(UMT5Config(**{k: v for k, v in cfg.items() if k != "architectures"})).to(torch.bfloat16).eval()
    folder = os.path.join(a.work, "text_encoder")
    model.save_pretrained(folder, safe_serialization=True)
    made_s = time.perf_counter() - t0
    target = [] if a.smoke else ["--target", "sm_90"]
    c = subprocess.run([a.ditc, "compile", folder, "--text-len", str(a.text_len), "--dtype", "bf16", *target,
                        "-o", os.path.join(a.work, "b")], capture_output=True, text=True)
    if c.returncode:
        raise RuntimeError("ditc compile: " + c.stderr.strip()[-600:])
    bundle = c.stdout.strip().splitlines()[-1].split()[2]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, cfg["vocab_size"], (1, a.text_len), generator=g)
    mask = (torch.arange(a.text_len) < a.valid).to(torch.int64)[None]
    ids = ids * mask
    inputs = os.path.join(a.work, "inputs.safetensors")
    save_file({"input_ids": ids, "attention_mask": mask}, inputs)
    out = os.path.join(a.work, "out.safetensors")
    ours = ditrun_side(a, bundle, inputs, out)
    ours_h = load_file(out)["last_hidden_state"].float()[0, :a.valid]
    # transformers, bf16 eager, the same weights and inputs.
    with torch.no_grad():
        call = lambda: model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state  # noqa: E731
        ref = call()
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        sync()
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(a.iters):
            t = time.perf_counter()
            call()
            sync()
            times.append((time.perf_counter() - t) * 1000)
    ref_h = ref.float()[0, :a.valid].cpu()
    cos = float(torch.nn.functional.cosine_similarity(ours_h.flatten(), ref_h.flatten(), dim=0))
    rel = float((ours_h - ref_h).norm() / ref_h.norm())
    times.sort()
    res = {"run": run_info(), "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu (--smoke)", "layers": a.layers, "published_layers": CONFIG["num_layers"],
           "text_len": a.text_len, "valid_tokens": a.valid, "model_made_s": made_s,
           "ditrun": ours, "transformers": {"version": __import__("transformers").__version__, "ms": times[len(times) // 2],
                                            "peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None},
           "parity": {"cosine": cos, "rel_l2": rel}}
    res["speedup"] = res["transformers"]["ms"] / ours["ms"] if ours["ms"] else None
    with open(os.path.join(a.out, "umt5_encode.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    md = (f"UMT5-XXL encoder ({a.layers} of 24 blocks at the published widths), {a.text_len} tokens ({a.valid} real), bf16, "
          f"{res['device']}: ditrun {ours['ms']:.2f} ms, transformers {res['transformers']['version']} "
          f"{res['transformers']['ms']:.2f} ms ({res['speedup']:.2f}x); cosine {cos:.6f}, relative L2 {rel:.3e} over the prompt's rows\n")
    with open(os.path.join(a.out, "umt5_encode.md"), "w") as fh:
        fh.write(md)
    print(md, end="")
    return 0 if cos >= 0.99 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ditc")
    ap.add_argument("--ditrun")
    ap.add_argument("--work")
    ap.add_argument("--out")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--valid", type=int, default=300)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="tiny widths on the CPU (a check of the script itself)")
    ap.add_argument("--write-folder", help="write the encoder folder with zero weights and exit")
    a = ap.parse_args()
    if a.write_folder:
        write_folder(a.write_folder, a.layers)
        return 0
    missing = [f for f in ("ditc", "ditrun", "work", "out") if not getattr(a, f)]
    if missing:
        ap.error("needs " + ", ".join("--" + m for m in missing))
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
