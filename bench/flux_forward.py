#!/usr/bin/env python3
"""FLUX.1-dev at 1024x1024 on one GPU, every contender in one run: ditrun, diffusers eager and
diffusers under torch.compile, same weights and inputs; then a 4-step generate against the
diffusers pipeline's own loop.

It makes random weights at the published FLUX.1-dev config with diffusers itself
(FluxTransformer2DModel(**config), its default initialisation, cast to bf16 on the GPU; with
--layers D,S only D double- and S single-stream blocks at the real widths), saves a FluxPipeline
folder (transformer and FLUX.1-dev's scheduler config), compiles it with `ditc compile` for each
batch size (one store, so the shapes share one weights blob), and per batch size measures the
forward: median time, peak device memory, parity against diffusers eager (cosine >= 0.999,
relative L2), ratios. Then FluxPipeline.__call__ (4 steps, guidance 3.5, output_type="latent",
bf16) against `ditrun generate` from the same prompt embeddings and initial latents. Results go to
OUT/flux_forward.json, rewritten after each measurement so a run cut short keeps what it measured.

usage: bench/flux_forward.py --ditc BIN --ditrun BIN --work DIR --out DIR [--batches 1,4]
           [--layers D,S] [--iters 5] [--no-compile] [--no-generate] [--keep]
       bench/flux_forward.py --dry-run --out DIR
       bench/flux_forward.py --write-folder DIR [--layers D,S]
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
import pipeline_bench as pb  # noqa: E402
from pipeline_bench import COSINE_MIN, linear, save, summary  # noqa: E402

# black-forest-labs/FLUX.1-dev transformer/config.json and scheduler/scheduler_config.json (the
# class defaults of FluxTransformer2DModel at the pinned diffusers but for guidance_embeds).
CONFIG = {"patch_size": 1, "in_channels": 64, "out_channels": None, "num_layers": 19, "num_single_layers": 38,
          "attention_head_dim": 128, "num_attention_heads": 24, "joint_attention_dim": 4096,
          "pooled_projection_dim": 768, "guidance_embeds": True, "axes_dims_rope": [16, 56, 56]}
SCHEDULER = {"base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
             "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True}
HEIGHT = WIDTH = 1024
TEXT_LEN = 512
VAE = 8
GEN_STEPS, GEN_GUIDANCE, FWD_T, FWD_GUIDANCE = 4, 3.5, 0.75, 3.5


def tokens():
    return (HEIGHT // VAE // 2) * (WIDTH // VAE // 2)


def model_config(layers=None):
    return pb.with_layers(CONFIG, layers)


def weight_shapes(cfg):
    """Every tensor of a FluxTransformer2DModel state dict."""
    d = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    hd, m = cfg["attention_head_dim"], 4 * d
    s = {}
    linear(s, "x_embedder", d, cfg["in_channels"])
    linear(s, "context_embedder", d, cfg["joint_attention_dim"])
    for e in ("timestep_embedder", "guidance_embedder") if cfg["guidance_embeds"] else ("timestep_embedder",):
        linear(s, f"time_text_embed.{e}.linear_1", d, 256)
        linear(s, f"time_text_embed.{e}.linear_2", d, d)
    linear(s, "time_text_embed.text_embedder.linear_1", d, cfg["pooled_projection_dim"])
    linear(s, "time_text_embed.text_embedder.linear_2", d, d)
    pb.dual_single_blocks(s, cfg, d, hd, m)
    linear(s, "norm_out.linear", 2 * d, d)
    linear(s, "proj_out", cfg["patch_size"] ** 2 * (cfg["out_channels"] or cfg["in_channels"]), d)
    return s


def pipeline_index():
    """model_index.json as FluxPipeline.save_pretrained writes it with only the transformer and scheduler."""
    none = [None, None]
    return {"_class_name": "FluxPipeline", "_diffusers_version": "0.40.0.dev0", "feature_extractor": none,
            "image_encoder": none, "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"], "text_encoder": none,
            "text_encoder_2": none, "tokenizer": none, "tokenizer_2": none,
            "transformer": ["diffusers", "FluxTransformer2DModel"], "vae": none}


def write_folder(path, layers=(1, 1)):
    """The pipeline folder with zero bf16 weights written sparse, standard library only: what ditc
    compiles to fill a kernel cache for these shapes (kernels do not depend on weight values)."""
    cfg = model_config(layers)
    return pb.write_pipeline_folder(path, pipeline_index(), SCHEDULER, "FluxTransformer2DModel", cfg, weight_shapes(cfg))


def compile_bundle(ditc, folder, store, batch):
    """`ditc compile` at 1024x1024 for one batch size: (bundle path or None, seconds, refusal)."""
    return pb.ditc_compile(ditc, folder, ["--height", str(HEIGHT), "--width", str(WIDTH), "--batch", str(batch),
                                          "--text-len", str(TEXT_LEN), "--dtype", "bf16", "--target", "sm_90",
                                          "--store", store])


def lines(res):
    L = [f"FLUX.1-dev: {res['layers'][0]} of 19 double and {res['layers'][1]} of 38 single blocks at the published widths, "
         f"{WIDTH}x{HEIGHT}, {tokens()} image + {TEXT_LEN} text tokens"] + pb.forward_rows(res)
    g = res.get("generate")
    if g and g.get("parity"):
        L.append(f"generate ({GEN_STEPS} steps, guidance {GEN_GUIDANCE}, batch 1): cosine {g['parity']['cosine']:.6f}, "
                 f"relative L2 {g['parity']['rel_l2']:.3e} against FluxPipeline; pipeline {g['pipeline_s']:.2f} s, "
                 f"ditrun generate {g['ditrun_s']:.2f} s (process, load included)")
    return L


def save_res(res, out):
    save(res, out, "flux_forward.json")


def dry_run(a):
    cfg = model_config()
    n = pb.param_count(weight_shapes(cfg))
    assert 11.8e9 < n < 12.0e9, n  # FLUX.1-dev's 11.9B parameters, from the shapes alone
    assert tokens() == 4096
    os.makedirs(a.out, exist_ok=True)
    folder = os.path.join(a.out, "folder")
    write_folder(folder, (1, 1))
    assert json.load(open(os.path.join(folder, "model_index.json")))["_class_name"] == "FluxPipeline"
    res = {"layers": [1, 1], "forwards": [summary({"batch": 1, "ditrun_ms": 100.0, "eager_ms": 170.0, "compiled_ms": 130.0,
                                                    "ditrun_peak_gib": 25.0, "eager_peak_gib": 26.0,
                                                    "parity": {"cosine": 0.9999, "rel_l2": 0.01}})], "dry_run": True}
    for line in lines(res):
        print(line)
    assert abs(res["forwards"][0]["compiled_vs_ditrun"] - 1.3) < 1e-9
    print(f"FLUX.1-dev: {n / 1e9:.2f}B parameters")
    return 0


def run(a):
    import torch  # device only
    from safetensors.torch import save_file  # device only
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel  # device only
    from wan_forward import load_plan

    layers = tuple(int(x) for x in a.layers.split(",")) if a.layers else (19, 38)
    res = {"config": CONFIG, "scheduler": SCHEDULER, "layers": list(layers), "height": HEIGHT, "width": WIDTH,
           "text_len": TEXT_LEN, "tokens": tokens(), "cosine_min": COSINE_MIN, "forwards": [], **pb.run_fields(torch, a)}
    print(lines(res)[0], flush=True)
    folder, store = os.path.join(a.work, "pipeline"), os.path.join(a.work, "store")
    t0 = time.perf_counter()
    model, pipe = pb.make_pipeline(torch, FluxTransformer2DModel, model_config(layers), FluxPipeline, folder,
                                   scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=None, text_encoder=None,
                                   tokenizer=None, text_encoder_2=None, tokenizer_2=None)
    res["make_s"] = time.perf_counter() - t0
    bundles = {}
    for b in [int(x) for x in a.batches.split(",")] + ([1] if not a.no_generate else []):
        if b in bundles:
            continue
        bundles[b], dt, refused = compile_bundle(a.ditc, folder, store, b)
        res.setdefault("ditc_compile_s", {})[str(b)] = dt
        if not bundles[b]:
            res["compile_failed"] = refused
            save_res(res, a.out)
            print("ditc compile failed:", refused)
            return 1
    print(f"diffusers model and save: {res['make_s']:.0f} s; ditc compile: {res['ditc_compile_s']}", flush=True)
    dev, fails = torch.device("cuda"), 0
    T, C = tokens(), CONFIG["in_channels"]
    # Position ids as FluxPipeline prepares them: text at 0, image (0, row, column).
    gh = gw = HEIGHT // VAE // 2
    img_ids = torch.zeros(gh, gw, 3)
    img_ids[..., 1] += torch.arange(gh)[:, None]
    img_ids[..., 2] += torch.arange(gw)[None, :]
    img_ids = img_ids.reshape(T, 3)
    txt_ids = torch.zeros(TEXT_LEN, 3)
    for b in [int(x) for x in a.batches.split(",")]:
        g = torch.Generator().manual_seed(100 + b)
        x = torch.randn(b, T, C, generator=g)
        enc = torch.randn(b, TEXT_LEN, CONFIG["joint_attention_dim"], generator=g)
        pooled = torch.randn(b, CONFIG["pooled_projection_dim"], generator=g)
        ts = torch.full((b,), FWD_T)
        gd = torch.full((b,), FWD_GUIDANCE)
        inputs = os.path.join(a.work, f"inputs_b{b}.safetensors")
        save_file({"hidden_states": x, "encoder_hidden_states": enc, "pooled_projections": pooled, "timestep": ts,
                   "guidance": gd, "img_ids": img_ids, "txt_ids": txt_ids}, inputs)
        e = {"batch": b}

        def kwargs():
            return dict(hidden_states=x.to(dev, torch.bfloat16), encoder_hidden_states=enc.to(dev, torch.bfloat16),
                        pooled_projections=pooled.to(dev, torch.bfloat16), timestep=ts.to(dev, torch.bfloat16),
                        guidance=gd.to(dev), img_ids=img_ids.to(dev), txt_ids=txt_ids.to(dev))

        fails += pb.forward_contest(torch, a, model, kwargs, bundles[b], inputs,
                                    os.path.join(a.work, f"ditrun_b{b}.safetensors"), e, label=f"batch {b}: ")
        res["forwards"].append(e)
        save_res(res, a.out)
    if not a.no_generate:
        g = torch.Generator().manual_seed(7)
        gi = {"prompt_embeds": torch.randn(1, TEXT_LEN, CONFIG["joint_attention_dim"], generator=g),
              "pooled_prompt_embeds": torch.randn(1, CONFIG["pooled_projection_dim"], generator=g),
              "init_latents": torch.randn(1, T, C, generator=g)}
        gpath = os.path.join(a.work, "generate_inputs.safetensors")
        save_file(gi, gpath)
        t0 = time.perf_counter()
        with torch.no_grad():
            want = pipe(prompt_embeds=gi["prompt_embeds"].to(dev, torch.bfloat16),
                        pooled_prompt_embeds=gi["pooled_prompt_embeds"].to(dev, torch.bfloat16),
                        latents=gi["init_latents"].to(dev, torch.bfloat16), height=HEIGHT, width=WIDTH,
                        num_inference_steps=GEN_STEPS, guidance_scale=GEN_GUIDANCE, output_type="latent",
                        return_dict=False)[0]
        torch.cuda.synchronize()
        gres = {"pipeline_s": time.perf_counter() - t0}
        fails += pb.generate_contest(torch, a, model, [bundles[1], "--prompt-embeds", gpath, "--init-latents", gpath,
                                                       "--steps", str(GEN_STEPS), "--guidance", str(GEN_GUIDANCE)],
                                     os.path.join(a.work, "generate_out.safetensors"), want.float(), gres)
        res["generate"] = gres
        save_res(res, a.out)
    if not a.no_ceilings and res["forwards"] and res["forwards"][0].get("split_ms"):
        plan = load_plan(bundles[int(a.batches.split(",")[0])])
        pb.measure_ceilings(torch, res, res["forwards"][:1], plan, CONFIG["num_attention_heads"])
    if a.lossy:
        b0 = int(a.batches.split(",")[0])
        pb.lossy_modes(torch, a, model, folder, ["--height", str(HEIGHT), "--width", str(WIDTH), "--batch", str(b0), "--text-len",
                                                 str(TEXT_LEN)], os.path.join(a.work, f"inputs_b{b0}.safetensors"), "lossy_flux",
                       f"FLUX.1-dev, {layers[0]} of 19 double and {layers[1]} of 38 single blocks, {WIDTH}x{HEIGHT}, batch {b0}")
    return pb.finish(res, lambda r: save_res(r, a.out), lines, fails)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pb.add_contender_flags(ap)
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--layers", help="D,S: double and single blocks (default: the published 19,38)")
    ap.add_argument("--iters", type=int, default=5)
    pb.add_lossy_flag(ap)
    pb.add_switches(ap, "--no-compile", "--no-generate", "--no-ceilings", "--keep", "--dry-run")
    ap.add_argument("--write-folder", metavar="DIR")
    a = ap.parse_args()

    def write():
        layers = tuple(int(x) for x in a.layers.split(",")) if a.layers else (1, 1)
        return f"wrote {a.write_folder}: {write_folder(a.write_folder, layers)} bytes of zero weights"

    return pb.dispatch(ap, a, dry_run, run, ("ditc", "ditrun", "work", "out"), write_folder=write)


if __name__ == "__main__":
    sys.exit(main())
