#!/usr/bin/env python3
"""Qwen-Image at 1328x1328 on one GPU, every contender in one run: ditrun, diffusers eager and
diffusers under torch.compile, same weights and inputs; then a 4-step generate with true CFG
against the diffusers pipeline's own loop.

It makes random weights at the published Qwen-Image config with diffusers itself
(QwenImageTransformer2DModel(**config), its default initialisation, cast to bf16 on the GPU; with
--layers N only N of the 60 blocks at the real widths, by default as many as fit one call and the
disk, see estimate_s), saves a QwenImagePipeline folder (transformer and Qwen/Qwen-Image's
scheduler config: dynamic shifting over 256..8192 image tokens, base/max shift 0.5/0.9,
shift_terminal 0.02), compiles it with `ditc compile` into a store and measures the batch-1
forward on packed latents [1, 6889, 64] (an 83x83 token grid) with 512 text tokens of which the
first 300 are valid (encoder_hidden_states_mask as the pipeline passes it): median time, peak
device memory, parity against diffusers eager (cosine >= 0.999, relative L2), ratios, the
ceilings of bench/ceilings.py. Then QwenImagePipeline.__call__ (4 steps, true CFG 4.0 with its
norm rescale, padded prompt and negative prompt masks, output_type="latent", bf16) against
`ditrun generate` from the same embeddings, masks and initial latents (rounded to bf16 as the
pipeline holds them) on the same bundle. Results go to OUT/qwen_forward.json, rewritten after
each measurement so a run cut short keeps what it measured.

usage: bench/qwen_forward.py --ditc BIN --ditrun BIN --work DIR --out DIR [--layers N] [--iters 3]
           [--no-compile] [--no-generate] [--no-ceilings] [--keep]
       bench/qwen_forward.py --dry-run --out DIR
       bench/qwen_forward.py --write-folder DIR [--layers N]
           (a pipeline folder in the standard library alone, zero weights: the shapes ditc
           compiles, for filling a kernel cache)
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ceilings  # noqa: E402
import pipeline_bench as pb  # noqa: E402
from hunyuan_forward import (CALL_BUDGET_S, CEILINGS_S, COMPILE_PER_BLOCK_S, COMPILE_S, COMPILED_SLOWER,  # noqa: E402
                             DISK_GBS, DITRUN_TFLOPS, EAGER_SLOWER, FIXED_S, LOAD_GBS, MOVE_GBS, compile_bundle)
from pipeline_bench import (COSINE_MIN, forward_rows, generate_line, golden_mismatches, linear,  # noqa: E402
                            param_count, read_header_shapes, save, summary, write_pipeline_folder)

# Qwen/Qwen-Image transformer/config.json: the class defaults of QwenImageTransformer2DModel at the
# pinned diffusers (58eb52c0803e); its scheduler/scheduler_config.json.
CONFIG = {"patch_size": 2, "in_channels": 64, "out_channels": 16, "num_layers": 60, "attention_head_dim": 128,
          "num_attention_heads": 24, "joint_attention_dim": 3584, "guidance_embeds": False, "axes_dims_rope": [16, 56, 56]}
SCHEDULER = {"base_image_seq_len": 256, "base_shift": 0.5, "invert_sigmas": False, "max_image_seq_len": 8192,
             "max_shift": 0.9, "num_train_timesteps": 1000, "shift": 1.0, "shift_terminal": 0.02,
             "stochastic_sampling": False, "time_shift_type": "exponential", "use_beta_sigmas": False,
             "use_dynamic_shifting": True, "use_exponential_sigmas": False, "use_karras_sigmas": False}
HEIGHT = WIDTH = 1328
VAE = 8  # QwenImagePipeline's factor; a packed token covers 2x2 latent pixels
TEXT_LEN = 512  # QwenImagePipeline's max_sequence_length
TEXT_VALID, GEN_VALID, NEG_VALID = 300, 260, 12  # valid prefixes: the forward's, the prompt's and the negative prompt's
MLP_RATIO = 4
GEN_STEPS, TRUE_CFG, FWD_T = 4, 4.0, 750.0  # QwenImagePipeline's true_cfg_scale; the model receives t / 1000
# The folder and the store's weights blob both hold every weight: at most this much of the
# device host's 64 GiB disk (the full 60 blocks would need 82 GB).
DISK_BUDGET_GB = 40.0


def grid():
    """The packed token grid (rows, columns), as QwenImagePipeline's img_shapes."""
    return HEIGHT // VAE // 2, WIDTH // VAE // 2


def tokens():
    gh, gw = grid()
    return gh * gw


def model_config(layers=None):
    return pb.with_layers(CONFIG, layers)


def weight_shapes(cfg):
    """Every tensor of a QwenImageTransformer2DModel state dict."""
    d, hd = cfg["num_attention_heads"] * cfg["attention_head_dim"], cfg["attention_head_dim"]
    m, j = MLP_RATIO * d, cfg["joint_attention_dim"]
    s = {}

    def lin(name, o, i):
        linear(s, name, o, i)

    lin("img_in", d, cfg["in_channels"])
    lin("txt_in", d, j)
    s["txt_norm.weight"] = [j]
    lin("time_text_embed.timestep_embedder.linear_1", d, 256)
    lin("time_text_embed.timestep_embedder.linear_2", d, d)
    for i in range(cfg["num_layers"]):
        b = f"transformer_blocks.{i}."
        for st in ("img", "txt"):
            lin(b + st + "_mod.1", 6 * d, d)
            lin(b + st + "_mlp.net.0.proj", m, d)
            lin(b + st + "_mlp.net.2", d, m)
        for p in ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"):
            lin(b + "attn." + p, d, d)
        for n in ("norm_q", "norm_k", "norm_added_q", "norm_added_k"):
            s[b + f"attn.{n}.weight"] = [hd]
    lin("norm_out.linear", 2 * d, d)
    lin("proj_out", cfg["patch_size"] ** 2 * (cfg["out_channels"] or cfg["in_channels"]), d)
    return s


def block_params():
    return param_count(weight_shapes(model_config(1)), "transformer_blocks.0.")


def block_tflop():
    """FLOPs of one block's forward: both streams' linears (per token 12 D^2 multiply-adds: q, k,
    v, out and the 4x MLP; the modulation rows are per item) and the joint attention."""
    d, n = CONFIG["num_attention_heads"] * CONFIG["attention_head_dim"], tokens() + TEXT_LEN
    return (2 * n * 12 * d * d + ceilings.attention_flops(1, 1, n, n, d)) / 1e12


def weights_gb(layers):
    return 2 * layers * block_params() / 1e9


def estimate_s(layers, iters=3, warmup=1, use_compile=True, generate=True, with_ceilings=True):
    """Seconds of one call of this script for `layers` blocks (hunyuan_forward.py's time model:
    at this size the weights' traffic and torch.compile dominate, not the forwards)."""
    fwd = 1 + warmup + iters
    block = block_tflop() / DITRUN_TFLOPS
    per_block = block * fwd * (EAGER_SLOWER + (COMPILED_SLOWER if use_compile else 0) + 1)
    if generate:  # two forwards a step (true CFG) on each side
        per_block += block * 2 * GEN_STEPS * (EAGER_SLOWER + 1)
    gb = weights_gb(layers)
    io = gb * (3 / DISK_GBS + (2 + generate) / LOAD_GBS + (2 + 2 * generate) / MOVE_GBS)
    return (FIXED_S + (COMPILE_S + COMPILE_PER_BLOCK_S * layers if use_compile else 0) +
            (CEILINGS_S if with_ceilings else 0) + layers * per_block + io)


def fits(layers):
    return estimate_s(layers) <= CALL_BUDGET_S and 2 * weights_gb(layers) <= DISK_BUDGET_GB


def default_layers():
    """The most blocks (at most the published 60) whose call fits CALL_BUDGET_S and whose weights fit the disk."""
    n = 1
    while n < CONFIG["num_layers"] and fits(n + 1):
        n += 1
    return n


def pipeline_index():
    """model_index.json as QwenImagePipeline.save_pretrained writes it with only the transformer and scheduler."""
    none = [None, None]
    return {"_class_name": "QwenImagePipeline", "_diffusers_version": "0.40.0.dev0",
            "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"], "text_encoder": none, "tokenizer": none,
            "transformer": ["diffusers", "QwenImageTransformer2DModel"], "vae": none}


def write_folder(path, layers=1):
    cfg = model_config(layers)
    return write_pipeline_folder(path, pipeline_index(), SCHEDULER, "QwenImageTransformer2DModel", cfg, weight_shapes(cfg))


def shape_flags():
    return ["--height", str(HEIGHT), "--width", str(WIDTH), "--batch", "1", "--text-len", str(TEXT_LEN)]


def lines(res):
    L = [f"Qwen-Image: {res['layers']} of 60 blocks at the published widths, {WIDTH}x{HEIGHT}, {tokens()} image + "
         f"{TEXT_LEN} text tokens ({TEXT_VALID} valid)"] + forward_rows(res)
    if res.get("generate"):
        L.append(generate_line(res["generate"], f"{GEN_STEPS} steps, true CFG {TRUE_CFG} with the norm rescale, batch 1"))
    return L


def save_res(res, out):
    save(res, out, "qwen_forward.json")


def dry_run(a):
    """Shapes, parameter count, the default layers, the folder writer and the summary, with made-up
    times (nothing it writes is a measurement)."""
    golden = os.path.join(HERE, "..", "tests", "data", "qwen_tiny")
    if os.path.isdir(golden):
        bad = golden_mismatches(golden, weight_shapes)
        assert not bad, f"weight_shapes differs from diffusers' tiny Qwen-Image at {bad[:5]}"
    else:
        print(f"note: {os.path.normpath(golden)} is missing: the shapes are not checked against diffusers' tiny model")
    shapes = weight_shapes(model_config())
    n = param_count(shapes)
    assert 20.2e9 < n < 20.6e9, n  # Qwen-Image's 20B (20.4B) parameters, from the shapes alone
    assert n == 60 * block_params() + param_count(shapes) - param_count(shapes, "transformer_blocks.")
    assert grid() == (83, 83) and tokens() == 6889
    layers = default_layers()
    assert 1 <= layers < 60 and fits(layers) and not fits(layers + 1), layers
    print(f"default --layers {layers}: estimated call {estimate_s(layers):.0f} s (budget {CALL_BUDGET_S:.0f} s), "
          f"{2 * weights_gb(layers):.1f} GB on disk (budget {DISK_BUDGET_GB:.0f}), {block_tflop():.2f} TFLOP per block; "
          f"the published 60 would take about {estimate_s(60):.0f} s and {2 * weights_gb(60):.0f} GB")
    os.makedirs(a.out, exist_ok=True)
    folder = os.path.join(a.out, "folder")
    write_folder(folder, 2)
    assert json.load(open(os.path.join(folder, "model_index.json")))["_class_name"] == "QwenImagePipeline"
    sched = json.load(open(os.path.join(folder, "scheduler", "scheduler_config.json")))
    assert sched["shift_terminal"] == 0.02 and sched["use_dynamic_shifting"] and sched["max_image_seq_len"] == 8192
    written = read_header_shapes(os.path.join(folder, "transformer", "diffusion_pytorch_model.safetensors"))
    assert written == weight_shapes(model_config(2)) and "transformer_blocks.1.txt_mlp.net.2.weight" in written
    res = {"layers": layers, "forwards": [summary({"batch": 1, "ditrun_ms": 100.0, "eager_ms": 150.0, "compiled_ms": 120.0,
                                                   "ditrun_peak_gib": 30.0, "eager_peak_gib": 32.0,
                                                   "parity": {"cosine": 0.9999, "rel_l2": 0.01}})],
           "generate": {"pipeline_s": 3.0, "ditrun_s": 9.0, "parity": {"cosine": 0.9999, "rel_l2": 0.01}}, "dry_run": True}
    for line in lines(res):
        print(line)
    assert abs(res["forwards"][0]["compiled_vs_ditrun"] - 1.2) < 1e-9 and res["forwards"][0]["parity_ok"]
    save_res(res, a.out)
    print(f"Qwen-Image: {n / 1e9:.2f}B parameters")
    return 0


def run(a):
    import torch  # device only
    from safetensors.torch import save_file  # device only
    from diffusers import FlowMatchEulerDiscreteScheduler, QwenImagePipeline, QwenImageTransformer2DModel  # device only
    from wan_forward import load_plan

    layers = a.layers or default_layers()
    generate = not a.no_generate
    res = {"config": CONFIG, "scheduler": SCHEDULER, "layers": layers, "height": HEIGHT, "width": WIDTH,
           "text_len": TEXT_LEN, "text_valid": TEXT_VALID, "tokens": tokens(), "cosine_min": COSINE_MIN, "forwards": [],
           **pb.run_fields(torch, a), "estimated_call_s": estimate_s(layers, a.iters, 1, not a.no_compile, generate, not a.no_ceilings)}
    print(lines(res)[0], flush=True)
    folder, store = os.path.join(a.work, "pipeline"), os.path.join(a.work, "store")
    t0 = time.perf_counter()
    model, pipe = pb.make_pipeline(torch, QwenImageTransformer2DModel, model_config(layers), QwenImagePipeline, folder,
                                   scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=None, text_encoder=None,
                                   tokenizer=None)
    res["make_s"] = time.perf_counter() - t0
    bundle, res["ditc_compile_s"], refused = compile_bundle(a.ditc, folder, store, shape_flags())
    if not bundle:
        res["compile_failed"] = refused
        save_res(res, a.out)
        print("ditc compile failed:", refused)
        return 1
    print(f"diffusers model and save: {res['make_s']:.0f} s; ditc compile: {res['ditc_compile_s']:.0f} s", flush=True)
    dev, bf16, fails = torch.device("cuda"), torch.bfloat16, 0

    def prefix_mask(valid):  # [1, TEXT_LEN] i64: the valid prefix, then padding, as encode_prompt pads
        return (torch.arange(TEXT_LEN) < valid).to(torch.int64)[None]

    g = torch.Generator().manual_seed(101)
    x = torch.randn(1, tokens(), CONFIG["in_channels"], generator=g)
    enc = torch.randn(1, TEXT_LEN, CONFIG["joint_attention_dim"], generator=g)
    mask, ts = prefix_mask(TEXT_VALID), torch.tensor([FWD_T / 1000])
    inputs = os.path.join(a.work, "inputs.safetensors")
    save_file({"hidden_states": x, "encoder_hidden_states": enc, "encoder_hidden_states_mask": mask, "timestep": ts}, inputs)
    e = {"batch": 1}

    def kwargs():
        return dict(hidden_states=x.to(dev, bf16), encoder_hidden_states=enc.to(dev, bf16),
                    encoder_hidden_states_mask=mask.to(dev), timestep=ts.to(dev), img_shapes=[[(1, *grid())]])

    fails += pb.forward_contest(torch, a, model, kwargs, bundle, inputs, os.path.join(a.work, "ditrun_out.safetensors"), e)
    res["forwards"].append(e)
    save_res(res, a.out)
    if generate:
        g = torch.Generator().manual_seed(7)
        text = (1, TEXT_LEN, CONFIG["joint_attention_dim"])
        gi = {"prompt_embeds": torch.randn(text, generator=g), "prompt_embeds_mask": prefix_mask(GEN_VALID),
              "negative_prompt_embeds": torch.randn(text, generator=g), "negative_prompt_embeds_mask": prefix_mask(NEG_VALID),
              # The pipeline holds its latents in the prompt embeddings' dtype: both sides start from the bf16 values.
              "init_latents": torch.randn(1, tokens(), CONFIG["in_channels"], generator=g).to(bf16).float()}
        gpath = os.path.join(a.work, "generate_inputs.safetensors")
        save_file(gi, gpath)
        t0 = time.perf_counter()
        with torch.no_grad():
            want = pipe(prompt_embeds=gi["prompt_embeds"].to(dev, bf16), prompt_embeds_mask=gi["prompt_embeds_mask"].to(dev),
                        negative_prompt_embeds=gi["negative_prompt_embeds"].to(dev, bf16),
                        negative_prompt_embeds_mask=gi["negative_prompt_embeds_mask"].to(dev), true_cfg_scale=TRUE_CFG,
                        latents=gi["init_latents"].to(dev, bf16), height=HEIGHT, width=WIDTH, num_inference_steps=GEN_STEPS,
                        output_type="latent", return_dict=False)[0]
        torch.cuda.synchronize()
        gres = {"steps": GEN_STEPS, "true_cfg": TRUE_CFG, "valid": GEN_VALID, "negative_valid": NEG_VALID,
                "pipeline_s": time.perf_counter() - t0}
        want = want.float().cpu()
        fails += pb.generate_contest(torch, a, model, [bundle, "--prompt-embeds", gpath, "--negative-embeds", gpath,
                                                       "--true-cfg", str(TRUE_CFG), "--init-latents", gpath, "--steps",
                                                       str(GEN_STEPS)], os.path.join(a.work, "generate_out.safetensors"),
                                     want, gres)
        res["generate"] = gres
        save_res(res, a.out)
        print(lines(res)[-1], flush=True)
    if not a.no_ceilings and e.get("split_ms"):
        pb.measure_ceilings(torch, res, [e], load_plan(bundle), CONFIG["num_attention_heads"])
    if a.lossy:
        pb.lossy_modes(torch, a, model, folder, shape_flags(), inputs, "lossy_qwen",
                       f"Qwen-Image, {layers} of 60 blocks, {WIDTH}x{HEIGHT}")
    return pb.finish(res, lambda r: save_res(r, a.out), lines, fails)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pb.add_contender_flags(ap, "where the model and bundle go (removed at the end unless --keep)", "results directory")
    ap.add_argument("--layers", type=int, help="blocks (default: as many as fit one call and the disk; see estimate_s)")
    ap.add_argument("--iters", type=int, default=3)
    pb.add_lossy_flag(ap)
    pb.add_switches(ap, "--no-compile", "--no-generate", "--no-ceilings", "--keep")
    ap.add_argument("--dry-run", action="store_true", help="check the arithmetic and the folder writer without torch or a GPU")
    ap.add_argument("--write-folder", metavar="DIR")
    a = ap.parse_args()
    if a.layers is not None and not 1 <= a.layers <= CONFIG["num_layers"]:
        ap.error(f"--layers {a.layers}: expected 1 to {CONFIG['num_layers']} blocks")
    return pb.dispatch(ap, a, dry_run, run, ("ditc", "ditrun", "work", "out"), write_folder=lambda: (
        f"wrote {a.write_folder}: {write_folder(a.write_folder, a.layers or 1)} bytes of zero weights"))


if __name__ == "__main__":
    sys.exit(main())
