#!/usr/bin/env python3
"""HunyuanVideo at 1280x720, 129 frames on one GPU, every contender in one run: ditrun, diffusers
eager and diffusers under torch.compile, same weights and inputs; then a 4-step generate against
the diffusers pipeline's own loop.

It makes random weights at the published HunyuanVideo config with diffusers itself
(HunyuanVideoTransformer3DModel(**config), its default initialisation, cast to bf16 on the GPU;
with --layers D,S only D double- and S single-stream blocks at the real widths, by default as many
as the time model below fits in one call, in the published 1:2 proportion), saves a
HunyuanVideoPipeline folder (transformer and the published scheduler config: flow-match Euler,
shift 7), compiles it with `ditc compile` (one store, so the shapes share one weights blob) and
measures the batch-1 forward at latent 16x33x90x160 (118800 image tokens) with 256 text tokens
of which the first 180 are valid (the padded mask as the pipeline passes it): median time, peak
device memory, parity against diffusers eager (cosine >= 0.999, relative L2), ratios, the
ceilings of bench/ceilings.py. Then HunyuanVideoPipeline.__call__ (4 steps, embedded guidance
6.0, output_type="latent", bf16) against `ditrun generate` from the same prompt embeddings, mask,
pooled embedding and initial latents. Four steps of 129 frames for two contenders do not fit one
call beside the forwards, so the generate runs at --gen-frames 33 (latent 16x9x90x160, 32400
tokens) with the same model and its own bundle; --no-generate skips it. Results go to
OUT/hunyuan_forward.json, rewritten after each measurement so a run cut short keeps what it
measured.

usage: bench/hunyuan_forward.py --ditc BIN --ditrun BIN --work DIR --out DIR [--layers D,S]
           [--gen-frames 33] [--iters 3] [--no-compile] [--no-generate] [--no-ceilings] [--keep]
       bench/hunyuan_forward.py --dry-run --out DIR
       bench/hunyuan_forward.py --write-folder DIR [--layers D,S]
           (a pipeline folder in the standard library alone, zero weights: the shapes ditc
           compiles, for filling a kernel cache; compile it at --frames 129 and at 33)
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
from pipeline_bench import (COSINE_MIN, forward_rows, generate_line, linear, param_count,  # noqa: E402
                            read_header_shapes, save, summary)

# hunyuanvideo-community/HunyuanVideo transformer/config.json: the class defaults of
# HunyuanVideoTransformer3DModel at the pinned diffusers (58eb52c0803e), and its scheduler config.
CONFIG = {"in_channels": 16, "out_channels": 16, "num_attention_heads": 24, "attention_head_dim": 128, "num_layers": 20,
          "num_single_layers": 40, "num_refiner_layers": 2, "mlp_ratio": 4.0, "patch_size": 2, "patch_size_t": 1,
          "qk_norm": "rms_norm", "guidance_embeds": True, "text_embed_dim": 4096, "pooled_projection_dim": 768,
          "rope_theta": 256.0, "rope_axes_dim": [16, 56, 56], "image_condition_type": None}
SCHEDULER = {"num_train_timesteps": 1000, "shift": 7.0}
HEIGHT, WIDTH, FRAMES, GEN_FRAMES = 720, 1280, 129, 33
VAE_SPATIAL, VAE_TEMPORAL = 8, 4  # HunyuanVideoPipeline's factors
TEXT_LEN = 256  # HunyuanVideoPipeline's max_sequence_length
TEXT_VALID, GEN_VALID = 180, 150  # valid prefixes of the forward's and the generate's prompt
REFINER_RATIO = 4  # the token refiner's feed-forward width over the model's
GEN_STEPS, GUIDANCE, FWD_T = 4, 6.0, 875.0  # the pipeline's guidance_scale, embedded as guidance * 1000

# The time model that picks the default --layers. ditrun's block time from its FLOPs at the
# throughput of the committed Wan2.2-A14B run (bench/results/wan22_forward_a14b.json: 6 blocks of
# 163 TFLOP in 1.58 s, 620 TFLOP/s; 600 here); diffusers at half that, eager and compiled alike
# (the padded text mask keeps torch SDPA off its flash kernel, and torch.compile leaves attention to
# SDPA); torch.compile's own time as measured there (21 s for 6 blocks, 100 s for 30); the weights
# saved, read and written by ditc (twice: two shapes), loaded by three ditrun processes and moved
# off the device and back around each ditrun run.
DITRUN_TFLOPS = 600.0
EAGER_SLOWER = COMPILED_SLOWER = 2.0
FIXED_S = 60.0  # imports, the model made on the device, ditc's and ditrun's fixed costs, the pipeline's setup
COMPILE_S, COMPILE_PER_BLOCK_S = 30.0, 3.5
CEILINGS_S = 30.0
DISK_GBS, LOAD_GBS, MOVE_GBS = 1.0, 1.3, 4.0
CALL_BUDGET_S = 360.0  # of the 520 s the call has (tests/gpu/run.sh's timeout): the rest is the model's margin


def latent_shape(frames):
    """[C, F, H, W] of the latents at 1280x720 and `frames` frames."""
    return [CONFIG["in_channels"], (frames - 1) // VAE_TEMPORAL + 1, HEIGHT // VAE_SPATIAL, WIDTH // VAE_SPATIAL]


def tokens(frames):
    _, f, h, w = latent_shape(frames)
    p, pt = CONFIG["patch_size"], CONFIG["patch_size_t"]
    return (f // pt) * (h // p) * (w // p)


def model_config(layers=None):
    return pb.with_layers(CONFIG, layers)


def weight_shapes(cfg):
    """Every tensor of a HunyuanVideoTransformer3DModel state dict (text to video)."""
    d, hd = cfg["num_attention_heads"] * cfg["attention_head_dim"], cfg["attention_head_dim"]
    m = int(d * cfg["mlp_ratio"])
    s = {}

    def lin(name, o, i):
        linear(s, name, o, i)

    def embedder(prefix):  # TimestepEmbedding(256 -> d)
        lin(prefix + ".linear_1", d, 256)
        lin(prefix + ".linear_2", d, d)

    s["x_embedder.proj.weight"] = [d, cfg["in_channels"], cfg["patch_size_t"], cfg["patch_size"], cfg["patch_size"]]
    s["x_embedder.proj.bias"] = [d]
    embedder("context_embedder.time_text_embed.timestep_embedder")
    lin("context_embedder.time_text_embed.text_embedder.linear_1", d, cfg["text_embed_dim"])
    lin("context_embedder.time_text_embed.text_embedder.linear_2", d, d)
    lin("context_embedder.proj_in", d, cfg["text_embed_dim"])
    for i in range(cfg["num_refiner_layers"]):
        b = f"context_embedder.token_refiner.refiner_blocks.{i}."
        for n in ("norm1", "norm2"):
            s[b + n + ".weight"], s[b + n + ".bias"] = [d], [d]
        for p in ("to_q", "to_k", "to_v", "to_out.0"):
            lin(b + "attn." + p, d, d)
        lin(b + "ff.net.0.proj", REFINER_RATIO * d, d)
        lin(b + "ff.net.2", d, REFINER_RATIO * d)
        lin(b + "norm_out.linear", 2 * d, d)
    embedder("time_text_embed.timestep_embedder")
    lin("time_text_embed.text_embedder.linear_1", d, cfg["pooled_projection_dim"])
    lin("time_text_embed.text_embedder.linear_2", d, d)
    if cfg["guidance_embeds"]:
        embedder("time_text_embed.guidance_embedder")
    pb.dual_single_blocks(s, cfg, d, hd, m)
    lin("norm_out.linear", 2 * d, d)
    lin("proj_out", cfg["patch_size_t"] * cfg["patch_size"] ** 2 * (cfg["out_channels"] or cfg["in_channels"]), d)
    return s


def block_params():
    """Parameters of one double- and one single-stream block at the published widths."""
    s = weight_shapes(model_config((1, 1)))
    return param_count(s, "transformer_blocks.0."), param_count(s, "single_transformer_blocks.0.")


def block_tflop(frames):
    """FLOPs of one block's forward over the joined image and text tokens. A double- and a
    single-stream block cost the same: per token 12 D^2 multiply-adds in their linears (double:
    q, k, v, out and a 4x MLP; single: q, k, v, the 4x MLP up and the (D + 4D) -> D output), and
    one attention over every token."""
    d, n = CONFIG["num_attention_heads"] * CONFIG["attention_head_dim"], tokens(frames) + TEXT_LEN
    return (2 * n * 12 * d * d + ceilings.attention_flops(1, 1, n, n, d)) / 1e12


def estimate_s(layers, iters=3, warmup=1, use_compile=True, generate=True, with_ceilings=True, gen_frames=GEN_FRAMES):
    """Seconds of one call of this script for `layers` = (double, single) blocks (the time model above)."""
    n = sum(layers)
    fwd = 1 + warmup + iters  # the reference output, the warm-up, the timed runs
    block = block_tflop(FRAMES) / DITRUN_TFLOPS
    per_block = block * fwd * (EAGER_SLOWER + (COMPILED_SLOWER if use_compile else 0) + 1)
    if generate:
        per_block += block_tflop(gen_frames) / DITRUN_TFLOPS * GEN_STEPS * (EAGER_SLOWER + 1)
    dp, sp = block_params()
    gb = 2 * (layers[0] * dp + layers[1] * sp) / 1e9
    io = gb * ((2 + 2 * generate) / DISK_GBS + (2 + generate) / LOAD_GBS + (2 + 2 * generate) / MOVE_GBS)
    return (FIXED_S + (COMPILE_S + COMPILE_PER_BLOCK_S * n if use_compile else 0) + (CEILINGS_S if with_ceilings else 0) +
            n * per_block + io)


def default_layers():
    """The most blocks in the published 1:2 proportion whose estimated call fits CALL_BUDGET_S."""
    k = 1
    while k < CONFIG["num_layers"] and estimate_s((k + 1, 2 * k + 2)) <= CALL_BUDGET_S:
        k += 1
    return k, 2 * k


def parse_layers(text):
    d, s = (int(x) for x in text.split(","))
    if not (0 <= d <= CONFIG["num_layers"] and 0 <= s <= CONFIG["num_single_layers"] and d + s >= 1):
        raise ValueError(f"--layers {text}: expected D,S with 0 <= D <= {CONFIG['num_layers']}, "
                         f"0 <= S <= {CONFIG['num_single_layers']} and at least one block")
    return d, s


def pipeline_index():
    """model_index.json as HunyuanVideoPipeline.save_pretrained writes it with only the transformer and scheduler."""
    none = [None, None]
    return {"_class_name": "HunyuanVideoPipeline", "_diffusers_version": "0.40.0.dev0",
            "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"], "text_encoder": none, "text_encoder_2": none,
            "tokenizer": none, "tokenizer_2": none, "transformer": ["diffusers", "HunyuanVideoTransformer3DModel"],
            "vae": none}


def write_folder(path, layers=(1, 1)):
    cfg = model_config(layers)
    return pb.write_pipeline_folder(path, pipeline_index(), SCHEDULER, "HunyuanVideoTransformer3DModel", cfg, weight_shapes(cfg))


def shape_flags(frames):
    return ["--frames", str(frames), "--height", str(HEIGHT), "--width", str(WIDTH), "--batch", "1", "--text-len",
            str(TEXT_LEN)]


def compile_bundle(ditc, folder, store, shape):
    """`ditc compile` of a pipeline folder at `shape` (ditc's shape flags) into `store`: (bundle
    path or None, seconds, the compiler's last output when it refused)."""
    return pb.ditc_compile(ditc, folder, list(shape) + ["--dtype", "bf16", "--target", "sm_90", "--store", store])


def lines(res):
    L = [f"HunyuanVideo: {res['layers'][0]} of 20 double and {res['layers'][1]} of 40 single blocks at the published widths, "
         f"{WIDTH}x{HEIGHT}, {FRAMES} frames, latent {latent_shape(FRAMES)}, {tokens(FRAMES)} image + {TEXT_LEN} text tokens "
         f"({TEXT_VALID} valid)"] + forward_rows(res)
    g = res.get("generate")
    if g:
        L.append(generate_line(g, f"{GEN_STEPS} steps, guidance {GUIDANCE}, {g['frames']} frames, batch 1"))
    return L


def save_res(res, out):
    save(res, out, "hunyuan_forward.json")


def dry_run(a):
    """Shapes, parameter count, the default layers, the folder writer and the summary, with made-up
    times (nothing it writes is a measurement)."""
    bad = pb.golden_mismatches(os.path.join(HERE, "..", "tests", "data", "hunyuan_video_tiny"), weight_shapes)
    assert not bad, f"weight_shapes differs from diffusers' tiny HunyuanVideo at {bad[:5]}"
    shapes = weight_shapes(model_config())
    n = param_count(shapes)
    assert 12.7e9 < n < 13.0e9, n  # HunyuanVideo's 13B (12.8B) parameters, from the shapes alone
    dp, sp = block_params()
    assert n == 20 * dp + 40 * sp + param_count(shapes) - param_count(shapes, "transformer_blocks.") - \
        param_count(shapes, "single_transformer_blocks.")
    assert latent_shape(FRAMES) == [16, 33, 90, 160] and tokens(FRAMES) == 118800, tokens(FRAMES)
    assert latent_shape(GEN_FRAMES) == [16, 9, 90, 160] and tokens(GEN_FRAMES) == 32400
    layers = default_layers()
    est = estimate_s(layers)
    assert 1 <= layers[0] < 20 and est <= CALL_BUDGET_S < estimate_s((layers[0] + 1, layers[1] + 2)), (layers, est)
    print(f"default --layers {layers[0]},{layers[1]}: estimated call {est:.0f} s (budget {CALL_BUDGET_S:.0f} s), "
          f"{block_tflop(FRAMES):.0f} TFLOP per block at {FRAMES} frames, {block_tflop(GEN_FRAMES):.1f} at {GEN_FRAMES}; "
          f"the published 20,40 would take about {estimate_s((20, 40)):.0f} s")
    os.makedirs(a.out, exist_ok=True)
    folder = os.path.join(a.out, "folder")
    write_folder(folder, (1, 2))
    assert json.load(open(os.path.join(folder, "model_index.json")))["_class_name"] == "HunyuanVideoPipeline"
    written = read_header_shapes(os.path.join(folder, "transformer", "diffusion_pytorch_model.safetensors"))
    assert written == weight_shapes(model_config((1, 2))) and "single_transformer_blocks.1.proj_out.weight" in written
    res = {"layers": list(layers), "forwards": [summary({"batch": 1, "ditrun_ms": 4000.0, "eager_ms": 8000.0,
                                                         "compiled_ms": 7000.0, "ditrun_peak_gib": 30.0,
                                                         "eager_peak_gib": 32.0,
                                                         "parity": {"cosine": 0.9999, "rel_l2": 0.01}})],
           "generate": {"frames": GEN_FRAMES, "pipeline_s": 9.0, "ditrun_s": 8.0, "parity": {"cosine": 0.9999, "rel_l2": 0.01}},
           "dry_run": True}
    for line in lines(res):
        print(line)
    assert res["forwards"][0]["eager_vs_ditrun"] == 2.0 and res["forwards"][0]["parity_ok"]
    save_res(res, a.out)
    print(f"HunyuanVideo: {n / 1e9:.2f}B parameters")
    return 0


def run(a):
    import torch  # device only
    from safetensors.torch import save_file  # device only
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline, HunyuanVideoTransformer3DModel  # device only
    from wan_forward import load_plan

    layers = parse_layers(a.layers) if a.layers else default_layers()
    generate = not a.no_generate
    res = {"config": CONFIG, "scheduler": SCHEDULER, "layers": list(layers), "height": HEIGHT, "width": WIDTH,
           "frames": FRAMES, "latent": latent_shape(FRAMES), "text_len": TEXT_LEN, "text_valid": TEXT_VALID,
           "tokens": tokens(FRAMES), "cosine_min": COSINE_MIN, "forwards": [], **pb.run_fields(torch, a),
           "estimated_call_s": estimate_s(layers, a.iters, 1, not a.no_compile, generate, not a.no_ceilings, a.gen_frames)}
    print(lines(res)[0], flush=True)
    folder, store = os.path.join(a.work, "pipeline"), os.path.join(a.work, "store")
    t0 = time.perf_counter()
    model, pipe = pb.make_pipeline(torch, HunyuanVideoTransformer3DModel, model_config(layers), HunyuanVideoPipeline, folder,
                                   text_encoder=None, tokenizer=None, vae=None,
                                   scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), text_encoder_2=None,
                                   tokenizer_2=None)
    res["make_s"] = time.perf_counter() - t0
    bundles = {}
    for what, frames in [("forward", FRAMES)] + ([("generate", a.gen_frames)] if generate else []):
        bundles[what], dt, refused = compile_bundle(a.ditc, folder, store, shape_flags(frames))
        res.setdefault("ditc_compile_s", {})[what] = dt
        if not bundles[what]:
            res["compile_failed"] = f"{what} ({frames} frames): {refused}"
            save_res(res, a.out)
            print("ditc compile failed:", res["compile_failed"])
            return 1
    print(f"diffusers model and save: {res['make_s']:.0f} s; ditc compile: {res['ditc_compile_s']}", flush=True)
    dev, bf16, fails = torch.device("cuda"), torch.bfloat16, 0

    def prefix_mask(valid):  # [1, TEXT_LEN] f32: the valid prefix, then padding, as the tokenizer pads
        return (torch.arange(TEXT_LEN) < valid).float()[None]

    g = torch.Generator().manual_seed(101)
    x = torch.randn(1, *latent_shape(FRAMES), generator=g)
    enc = torch.randn(1, TEXT_LEN, CONFIG["text_embed_dim"], generator=g)
    pooled = torch.randn(1, CONFIG["pooled_projection_dim"], generator=g)
    mask, ts, gd = prefix_mask(TEXT_VALID), torch.tensor([FWD_T]), torch.tensor([GUIDANCE * 1000])
    inputs = os.path.join(a.work, "inputs.safetensors")
    save_file({"hidden_states": x, "timestep": ts, "encoder_hidden_states": enc, "encoder_attention_mask": mask,
               "pooled_projections": pooled, "guidance": gd}, inputs)
    e = {"batch": 1}

    def kwargs():  # as HunyuanVideoPipeline passes them: t in the latents' fp32, the rest (guidance x 1000 too) in bf16
        return dict(hidden_states=x.to(dev, bf16), timestep=ts.to(dev), encoder_hidden_states=enc.to(dev, bf16),
                    encoder_attention_mask=mask.to(dev, bf16), pooled_projections=pooled.to(dev, bf16),
                    guidance=gd.to(dev, bf16))

    fails += pb.forward_contest(torch, a, model, kwargs, bundles["forward"], inputs,
                                os.path.join(a.work, "ditrun_out.safetensors"), e)
    res["forwards"].append(e)
    save_res(res, a.out)
    if generate:
        g = torch.Generator().manual_seed(7)
        gi = {"prompt_embeds": torch.randn(1, TEXT_LEN, CONFIG["text_embed_dim"], generator=g),
              "prompt_attention_mask": prefix_mask(GEN_VALID),
              "pooled_prompt_embeds": torch.randn(1, CONFIG["pooled_projection_dim"], generator=g),
              "init_latents": torch.randn(1, *latent_shape(a.gen_frames), generator=g)}
        gpath = os.path.join(a.work, "generate_inputs.safetensors")
        save_file(gi, gpath)
        t0 = time.perf_counter()
        with torch.no_grad():
            want = pipe(prompt_embeds=gi["prompt_embeds"].to(dev, bf16), prompt_attention_mask=gi["prompt_attention_mask"].to(dev),
                        pooled_prompt_embeds=gi["pooled_prompt_embeds"].to(dev, bf16), latents=gi["init_latents"].to(dev),
                        height=HEIGHT, width=WIDTH, num_frames=a.gen_frames, num_inference_steps=GEN_STEPS,
                        guidance_scale=GUIDANCE, output_type="latent", return_dict=False)[0]
        torch.cuda.synchronize()
        gres = {"frames": a.gen_frames, "tokens": tokens(a.gen_frames), "valid": GEN_VALID, "steps": GEN_STEPS,
                "guidance": GUIDANCE, "pipeline_s": time.perf_counter() - t0}
        want = want.float().cpu()
        fails += pb.generate_contest(torch, a, model, [bundles["generate"], "--prompt-embeds", gpath, "--init-latents", gpath,
                                                       "--steps", str(GEN_STEPS), "--guidance", str(GUIDANCE)],
                                     os.path.join(a.work, "generate_out.safetensors"), want, gres)
        res["generate"] = gres
        save_res(res, a.out)
        print(lines(res)[-1], flush=True)
    if not a.no_ceilings and e.get("split_ms"):
        pb.measure_ceilings(torch, res, [e], load_plan(bundles["forward"]), CONFIG["num_attention_heads"])
    if a.lossy:
        pb.lossy_modes(torch, a, model, folder, shape_flags(FRAMES), inputs, "lossy_hunyuan",
                       f"HunyuanVideo, {layers[0]} of 20 double and {layers[1]} of 40 single blocks, {WIDTH}x{HEIGHT}, {FRAMES} frames")
    return pb.finish(res, lambda r: save_res(r, a.out), lines, fails)


# --write-random's check shape: one frame of 64x64, 16 text tokens of which 10 valid (a key bound).
CHECK_SHAPE = {"frames": 1, "height": 64, "width": 64, "text_len": 16, "text_valid": 10}


def write_random(path, layers):
    """A pipeline folder with random weights (diffusers' initialisation, seed 0) at the published
    widths and `layers`, and path/inputs.safetensors at CHECK_SHAPE with a padded text mask: what
    the GPU script's op-by-op check of attention over a key bound compiles and runs (device only)."""
    import torch  # device only
    from safetensors.torch import save_file  # device only
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline, HunyuanVideoTransformer3DModel  # device only

    pb.make_pipeline(torch, HunyuanVideoTransformer3DModel, model_config(layers), HunyuanVideoPipeline, path, text_encoder=None,
                     tokenizer=None, vae=None, scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), text_encoder_2=None,
                     tokenizer_2=None)
    c = CHECK_SHAPE
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, CONFIG["in_channels"], (c["frames"] - 1) // VAE_TEMPORAL + 1, c["height"] // VAE_SPATIAL, c["width"] // VAE_SPATIAL,
                    generator=g)
    save_file({"hidden_states": x, "timestep": torch.tensor([FWD_T]),
               "encoder_hidden_states": torch.randn(1, c["text_len"], CONFIG["text_embed_dim"], generator=g),
               "encoder_attention_mask": (torch.arange(c["text_len"]) < c["text_valid"]).float()[None],
               "pooled_projections": torch.randn(1, CONFIG["pooled_projection_dim"], generator=g),
               "guidance": torch.tensor([GUIDANCE * 1000])}, os.path.join(path, "inputs.safetensors"))
    return f"wrote {path}: random weights, {layers[0]}+{layers[1]} blocks, and inputs.safetensors at {c}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pb.add_contender_flags(ap, "where the model and bundles go (removed at the end unless --keep)", "results directory")
    ap.add_argument("--layers", help="D,S: double and single blocks (default: as many as fit one call; see estimate_s)")
    ap.add_argument("--gen-frames", type=int, default=GEN_FRAMES, help="frames of the generate (4k + 1)")
    ap.add_argument("--iters", type=int, default=3)
    pb.add_lossy_flag(ap)
    pb.add_switches(ap, "--no-compile", "--no-generate", "--no-ceilings", "--keep")
    ap.add_argument("--dry-run", action="store_true", help="check the arithmetic and the folder writer without torch or a GPU")
    ap.add_argument("--write-folder", metavar="DIR")
    ap.add_argument("--write-random", metavar="DIR", help="a random-weight folder and inputs at CHECK_SHAPE (torch, device only)")
    a = ap.parse_args()
    try:
        layers = parse_layers(a.layers) if a.layers else None
    except ValueError as err:
        ap.error(str(err))
    if a.gen_frames < 1 or (a.gen_frames - 1) % VAE_TEMPORAL:
        ap.error(f"--gen-frames {a.gen_frames}: expected {VAE_TEMPORAL}k + 1 frames")
    if a.write_random:
        print(write_random(a.write_random, layers or (1, 1)))
        return 0
    return pb.dispatch(ap, a, dry_run, run, ("ditc", "ditrun", "work", "out"), write_folder=lambda: (
        f"wrote {a.write_folder}: {write_folder(a.write_folder, layers or (1, 1))} bytes of zero weights"))


if __name__ == "__main__":
    sys.exit(main())
