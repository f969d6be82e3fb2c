#!/usr/bin/env python3
"""Wan2.2 transformer forwards at the published sizes, every contender in one run: ditrun,
diffusers eager and diffusers under torch.compile, same weights and inputs.

Per variant it makes random weights at the published config with diffusers itself
(WanTransformer3DModel(**config), its default initialisation, cast to bf16 on the GPU; with
--layers N only N blocks at the real widths: every kernel of the full model, a fraction of its
weights), saves them as a diffusers pipeline folder (WanPipeline.save_pretrained: both experts
and boundary_ratio for A14B, expand_timesteps for TI2V), compiles that folder with `ditc
compile`, and runs the forward benchmark of bench/wan_forward.py on each expert: median time,
peak device memory, parity against diffusers eager (cosine >= 0.999, relative L2), ratios,
the ceilings measured in the same run. Results go to OUT/wan22_forward_<variant>.json, rewritten
after each expert so a run cut short keeps what it measured.

Variants (configs from diffusers' scripts/convert_wan_to_diffusers.py at the pinned commit
58eb52c0803e, entries "Wan2.2-T2V-A14B" and "Wan2.2-TI2V-5B"; rope_max_seq_len,
pos_embed_seq_len and image_dim are WanTransformer3DModel's defaults, which that script keeps):
  a14b     each expert of Wan2.2-T2V-A14B, 1280x720, 81 frames, text 512; transformer at
           timestep 900 and transformer_2 at 500 (each inside its side of the 875 boundary)
  ti2v-5b  Wan2.2-TI2V-5B, 1280x704, 121 frames, text 512, all 30 layers; the timestep is
           [1, tokens] with the first latent frame's tokens at 0, as image-to-video runs it

usage: bench/wan22_forward.py --variant a14b|ti2v-5b --ditc BIN --ditrun BIN --work DIR --out DIR
           [--layers N] [--expert transformer|transformer_2|both] [--iters 3] [--no-compile] [--keep]
       bench/wan22_forward.py --dry-run --out DIR
       bench/wan22_forward.py --write-folder DIR --variant V [--layers N] [--shrink]
           (a pipeline folder in the standard library alone, zero weights: the shapes ditc
           compiles, for filling a kernel cache; --shrink keeps the structure at tiny widths)
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pipeline_bench as pb  # noqa: E402
from pipeline_bench import COSINE_MIN, param_count, write_zero_safetensors  # noqa: E402

CONFIG_SOURCE = ("diffusers scripts/convert_wan_to_diffusers.py at 58eb52c0803e (Wan2.2-T2V-A14B, "
                 "Wan2.2-TI2V-5B); rope_max_seq_len, pos_embed_seq_len, image_dim: WanTransformer3DModel defaults")
_COMMON = {"added_kv_proj_dim": None, "attention_head_dim": 128, "cross_attn_norm": True, "eps": 1e-06,
           "freq_dim": 256, "patch_size": [1, 2, 2], "qk_norm": "rms_norm_across_heads", "text_dim": 4096,
           "image_dim": None, "pos_embed_seq_len": None, "rope_max_seq_len": 1024}
# Each expert of Wan2.2-T2V-A14B; the two differ only in their weights.
A14B_CONFIG = {**_COMMON, "ffn_dim": 13824, "in_channels": 16, "num_attention_heads": 40, "num_layers": 40,
               "out_channels": 16}
TI2V_CONFIG = {**_COMMON, "ffn_dim": 14336, "in_channels": 48, "num_attention_heads": 24, "num_layers": 30,
               "out_channels": 48}

VARIANTS = {
    "a14b": {"config": A14B_CONFIG, "experts": ("transformer", "transformer_2"), "boundary_ratio": 0.875,
             "expand_timesteps": False, "shift": 3.0, "vae": (4, 8), "frames": 81, "height": 720, "width": 1280,
             "text_len": 512, "timestep": {"transformer": 900, "transformer_2": 500}},
    "ti2v-5b": {"config": TI2V_CONFIG, "experts": ("transformer",), "boundary_ratio": None, "expand_timesteps": True,
                "shift": 5.0, "vae": (4, 16), "frames": 121, "height": 704, "width": 1280, "text_len": 512,
                "timestep": {"transformer": 500}},
}
TRAIN_TIMESTEPS = 1000

# The time model that picks the default --layers: per-block forward times at these shapes
# from the committed Wan2.1-14B 720p run (bench/results/offload/wan14b_720p.json: 10.73 s over
# 40 blocks for ditrun) with margins for diffusers, scaled by FLOPs for other widths, plus
# fixed costs (imports, torch.compile, process starts) and the weights' disk traffic.
REF_BLOCK_S = 0.27
EAGER_SLOWER, COMPILED_SLOWER = 1.4, 1.2
FIXED_S = 40.0
PER_EXPERT_FIXED_S = 120.0  # torch.compile of a few blocks, two ditrun loads, ceilings
DISK_GBS = 1.0
CALL_BUDGET_S = 360.0  # of the 600 s a device call may take: the rest is margin (run.sh's own steps too)


def latent_shape(v):
    """[C, F, H, W] of the latents at the variant's pixel size (VAE factors temporal, spatial)."""
    vt, vs = v["vae"]
    return [v["config"]["in_channels"], (v["frames"] - 1) // vt + 1, v["height"] // vs, v["width"] // vs]


def tokens(v):
    _, f, h, w = latent_shape(v)
    p = v["config"]["patch_size"]
    return (f // p[0]) * (h // p[1]) * (w // p[2])


def token_timestep(f, h, w, t, first_frame_zero=True):
    """The [tokens] timestep row as WanImageToVideoPipeline builds it with expand_timesteps:
    the first-frame mask sampled at the patch grid, times t (frame-major, then rows)."""
    per_frame = (h // 2) * (w // 2)
    return [0.0 if (first_frame_zero and i < per_frame) else float(t) for i in range(f * per_frame)]


def model_config(v, layers=None):
    cfg = dict(v["config"])
    if layers:
        cfg["num_layers"] = layers
    return cfg


def block_params(cfg):
    """Parameters of one transformer block (self- and cross-attention with biases, FFN, norms)."""
    d, ffn = cfg["num_attention_heads"] * cfg["attention_head_dim"], cfg["ffn_dim"]
    return 8 * (d * d + d) + 4 * d + (d * ffn + ffn) + (ffn * d + d) + 2 * d + 6 * d


def block_tflop(v):
    """FLOPs of one block's forward: projections, FFN, self-attention over every token and
    cross-attention over the text."""
    cfg, n, L = v["config"], tokens(v), v["text_len"]
    d, ffn = cfg["num_attention_heads"] * cfg["attention_head_dim"], cfg["ffn_dim"]
    lin = 2 * n * (4 * d * d + 2 * d * d + 2 * d * ffn) + 2 * L * 2 * d * d
    att = 4 * n * n * d + 4 * n * L * d
    return (lin + att) / 1e12


def estimate_s(v, layers, iters=3, warmup=1, use_compile=True):
    """Seconds of one call of this script for `layers` blocks (the time model above)."""
    block = REF_BLOCK_S * block_tflop(v) / block_tflop(VARIANTS["a14b"])
    fwd = 1 + warmup + iters
    per_layer = block * (fwd * EAGER_SLOWER + (fwd * COMPILED_SLOWER if use_compile else 0) + (fwd + 1))
    gb = 2 * block_params(v["config"]) / 1e9
    per_layer += 2 * gb / DISK_GBS  # saved by diffusers, read and written by ditc
    return FIXED_S + len(v["experts"]) * (PER_EXPERT_FIXED_S + layers * per_layer)


def default_layers(v):
    """The most blocks (at most the published count) whose estimated call fits CALL_BUDGET_S."""
    full = v["config"]["num_layers"]
    n = 1
    while n < full and estimate_s(v, n + 1) <= CALL_BUDGET_S:
        n += 1
    return n


def pipeline_index(v):
    """model_index.json of the pipeline folder, as WanPipeline.save_pretrained writes it with
    no text encoder, tokenizer or VAE."""
    two = len(v["experts"]) == 2
    return {"_class_name": "WanPipeline", "_diffusers_version": "0.40.0.dev0", "boundary_ratio": v["boundary_ratio"],
            "expand_timesteps": v["expand_timesteps"], "scheduler": ["diffusers", "UniPCMultistepScheduler"],
            "text_encoder": [None, None], "tokenizer": [None, None],
            "transformer": ["diffusers", "WanTransformer3DModel"],
            "transformer_2": ["diffusers", "WanTransformer3DModel"] if two else [None, None], "vae": [None, None]}


def scheduler_config(v):
    """UniPC as diffusers' Wan conversion publishes it (the rest are the class's defaults)."""
    return {"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction", "use_flow_sigmas": True,
            "num_train_timesteps": TRAIN_TIMESTEPS, "flow_shift": v["shift"], "solver_order": 2, "solver_type": "bh2",
            "predict_x0": True, "lower_order_final": True, "final_sigmas_type": "zero", "timestep_spacing": "linspace"}


def weight_shapes(cfg):
    """Every tensor of a WanTransformer3DModel state dict (text-to-video: no image embedder)."""
    d = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    ffn, pt, ph, pw = cfg["ffn_dim"], *cfg["patch_size"]
    out = cfg["out_channels"] * pt * ph * pw
    s = {"patch_embedding.weight": [d, cfg["in_channels"], pt, ph, pw], "patch_embedding.bias": [d],
         "condition_embedder.time_embedder.linear_1.weight": [d, cfg["freq_dim"]],
         "condition_embedder.time_embedder.linear_1.bias": [d],
         "condition_embedder.time_embedder.linear_2.weight": [d, d], "condition_embedder.time_embedder.linear_2.bias": [d],
         "condition_embedder.time_proj.weight": [6 * d, d], "condition_embedder.time_proj.bias": [6 * d],
         "condition_embedder.text_embedder.linear_1.weight": [d, cfg["text_dim"]],
         "condition_embedder.text_embedder.linear_1.bias": [d],
         "condition_embedder.text_embedder.linear_2.weight": [d, d], "condition_embedder.text_embedder.linear_2.bias": [d],
         "proj_out.weight": [out, d], "proj_out.bias": [out], "scale_shift_table": [1, 2, d]}
    for i in range(cfg["num_layers"]):
        b = f"blocks.{i}."
        for a in ("attn1", "attn2"):
            for p in ("to_q", "to_k", "to_v", "to_out.0"):
                s[f"{b}{a}.{p}.weight"], s[f"{b}{a}.{p}.bias"] = [d, d], [d]
            s[f"{b}{a}.norm_q.weight"] = s[f"{b}{a}.norm_k.weight"] = [d]
        s[b + "ffn.net.0.proj.weight"], s[b + "ffn.net.0.proj.bias"] = [ffn, d], [ffn]
        s[b + "ffn.net.2.weight"], s[b + "ffn.net.2.bias"] = [d, ffn], [d]
        s[b + "norm2.weight"], s[b + "norm2.bias"] = [d], [d]
        s[b + "scale_shift_table"] = [1, 6, d]
    return s


SHRINK = {"num_attention_heads": 2, "attention_head_dim": 16, "ffn_dim": 64, "text_dim": 24, "freq_dim": 32,
          "rope_max_seq_len": 64}


def write_folder(path, v, layers=1, shrink=False):
    """The variant's pipeline folder with zero weights, standard library only: what ditc
    compiles to fill a kernel cache for these shapes (kernels do not depend on weight values).
    shrink keeps the structure at tiny widths (a CI check of the folder's layout)."""
    cfg = model_config(v, layers)
    if shrink:
        cfg.update(SHRINK)
    os.makedirs(os.path.join(path, "scheduler"), exist_ok=True)
    pb.write_json(os.path.join(path, "model_index.json"), pipeline_index(v))
    pb.write_json(os.path.join(path, "scheduler", "scheduler_config.json"), scheduler_config(v))
    total = 0
    for e in v["experts"]:
        os.makedirs(os.path.join(path, e), exist_ok=True)
        pb.write_json(os.path.join(path, e, "config.json"),
                      {"_class_name": "WanTransformer3DModel", "_diffusers_version": "0.40.0.dev0", **cfg})
        total += write_zero_safetensors(os.path.join(path, e, "diffusion_pytorch_model.safetensors"), weight_shapes(cfg))
    return total


def compile_bundle(ditc, folder, v, out_dir, extra=(), batch=1):
    """`ditc compile` of a pipeline folder at the variant's shape: (bundle path or None, seconds,
    the compiler's last stderr lines when it refused)."""
    return pb.ditc_compile(ditc, folder, ["--frames", str(v["frames"]), "--height", str(v["height"]), "--width",
                                          str(v["width"]), "--batch", str(batch), "--text-len", str(v["text_len"]),
                                          "--dtype", "bf16", "--target", "sm_90", "-o", out_dir] + list(extra))


def make_pipeline(torch, v, layers, folder, seed=0):
    """The variant's experts at their published config (layers blocks) with diffusers' default
    initialisation, cast to bf16 on the GPU (a different seed per expert), saved as a WanPipeline
    folder. Returns the models, moved to the CPU."""
    from diffusers import UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel  # device only

    cfg = model_config(v, layers)
    cfg = {k: x for k, x in cfg.items() if k not in ("_class_name",)}
    models = []
    for i, _ in enumerate(v["experts"]):
        torch.manual_seed(seed + i)
        with torch.device("cuda"):
            m = WanTransformer3DModel(**cfg)
        models.append(m.to(torch.bfloat16).eval())
    sched = UniPCMultistepScheduler(**{k: x for k, x in scheduler_config(v).items() if not k.startswith("_")})
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=sched, transformer=models[0],
                       transformer_2=models[1] if len(models) > 1 else None, boundary_ratio=v["boundary_ratio"],
                       expand_timesteps=v["expand_timesteps"])
    pipe.save_pretrained(folder, safe_serialization=True)
    del pipe
    models = [m.to("cpu") for m in models]
    torch.cuda.empty_cache()
    return models


def lines(res):
    """The printed summary of a results dict (dry or measured)."""
    L = [f"{res['variant']}: {res['layers']} of {res['published_layers']} blocks at the published widths, "
         f"{res['width']}x{res['height']}, {res['frames']} frames, latent {res['latent']}, {res['tokens']} tokens, text "
         f"{res['text_len']}"]
    return L + pb.contender_rows(res["experts"], "expert", "name", lambda e: f"{e['name']} (t={e['timestep']})")


def new_results(v, name, layers):
    return {"variant": name, "config_source": CONFIG_SOURCE, "config": v["config"], "layers": layers,
            "published_layers": v["config"]["num_layers"], "frames": v["frames"], "height": v["height"],
            "width": v["width"], "text_len": v["text_len"], "latent": latent_shape(v), "tokens": tokens(v),
            "cosine_min": COSINE_MIN, "experts": []}


def save(res, out):
    return pb.save(res, out, f"wan22_forward_{res['variant']}.json")


def dry_run(a):
    """Shapes, token timesteps, the default layer counts, the folder writer and the summary,
    with made-up times (nothing it writes is a measurement)."""
    a14, ti = VARIANTS["a14b"], VARIANTS["ti2v-5b"]
    assert latent_shape(a14) == [16, 21, 90, 160] and tokens(a14) == 21 * 45 * 80
    assert latent_shape(ti) == [48, 31, 44, 80] and tokens(ti) == 31 * 22 * 40
    row = token_timestep(31, 44, 80, 500)
    assert len(row) == tokens(ti) and set(row[:880]) == {0.0} and set(row[880:]) == {500.0}
    assert A14B_CONFIG["num_attention_heads"] * A14B_CONFIG["attention_head_dim"] == 5120
    assert TI2V_CONFIG["num_attention_heads"] * TI2V_CONFIG["attention_head_dim"] == 3072
    # 14B per expert and 5B: the published sizes, from the parameter count alone.
    for v, lo, hi in ((a14, 13.5e9, 14.5e9), (ti, 4.8e9, 5.2e9)):
        shapes = weight_shapes(v["config"])
        n = param_count(shapes)
        assert lo < n < hi, n
        assert param_count(shapes, "blocks.") == v["config"]["num_layers"] * block_params(v["config"])
    layers = {k: default_layers(v) for k, v in VARIANTS.items()}
    assert layers["ti2v-5b"] == 30, layers  # 5B fits whole
    assert 2 <= layers["a14b"] < 40 and estimate_s(a14, layers["a14b"]) <= CALL_BUDGET_S, layers
    for k, v in VARIANTS.items():
        print(f"{k}: default --layers {layers[k]}, estimated call {estimate_s(v, layers[k]):.0f} s "
              f"(budget {CALL_BUDGET_S:.0f} s), {block_tflop(v):.1f} TFLOP per block, {tokens(v)} tokens")
    os.makedirs(a.out, exist_ok=True)
    for k, v in VARIANTS.items():
        folder = os.path.join(a.out, "folder_" + k)
        write_folder(folder, v, layers=2, shrink=True)
        idx = json.load(open(os.path.join(folder, "model_index.json")))
        assert idx["expand_timesteps"] == v["expand_timesteps"] and os.path.isdir(os.path.join(folder, "transformer"))
        res = new_results(v, k, layers[k])
        for i, e in enumerate(v["experts"]):
            res["experts"].append(pb.summary({
                "name": e, "timestep": v["timestep"][e], "eager_ms": 1300.0 + i, "compiled_ms": 1100.0 + i,
                "ditrun_ms": 1000.0 + i, "eager_peak_gib": 20.0, "compiled_peak_gib": 18.0, "ditrun_peak_gib": 15.0,
                "parity": {"cosine": 0.99995, "rel_l2": 0.01}, "compile_s": 60.0}))
        res["dry_run"] = True
        res["complete"] = True
        res["ditc_compile_s"] = 1.0
        for line in lines(res):
            print(line)
        assert res["experts"][0]["eager_vs_ditrun"] == 1.3 and res["experts"][0]["parity_ok"]
        save(res, a.out)


def run_variant(a, name):
    import torch  # device only
    from safetensors.torch import load_file, save_file  # device only
    from wan_forward import diffusers_contenders, ditrun_contender, load_plan, parity

    v = VARIANTS[name]
    layers = a.layers or default_layers(v)
    res = new_results(v, name, layers)
    res.update({**pb.run_fields(torch, a), "estimated_call_s": estimate_s(v, layers, a.iters, 1, not a.no_compile)})
    print(lines(res)[0], flush=True)
    work = os.path.join(a.work, name)
    folder = os.path.join(work, "pipeline")
    t0 = time.perf_counter()
    models = make_pipeline(torch, v, layers, folder)
    res["make_s"] = time.perf_counter() - t0
    bundle, res["ditc_compile_s"], refused = compile_bundle(a.ditc, folder, v, os.path.join(work, "bundles"))
    print(f"diffusers model and save: {res['make_s']:.0f} s; ditc compile: {res['ditc_compile_s']:.0f} s", flush=True)
    if not bundle:
        res["compile_failed"] = refused
        save(res, a.out)
        print("ditc compile failed:", refused)
        return 1
    res["bundle"] = os.path.basename(bundle)
    save(res, a.out)
    c, f, h, w = latent_shape(v)
    dev = torch.device("cuda")
    fails = 0
    wanted = v["experts"] if a.expert == "both" else [a.expert]
    for i, ename in enumerate(v["experts"]):
        if ename not in wanted:
            continue
        g = torch.Generator().manual_seed(100 + i)
        x = torch.randn(1, c, f, h, w, generator=g)
        enc = torch.randn(1, v["text_len"], v["config"]["text_dim"], generator=g)
        t = v["timestep"][ename]
        ts = torch.tensor([token_timestep(f, h, w, t)], dtype=torch.float32) if v["expand_timesteps"] else \
            torch.tensor([t], dtype=torch.int64)
        inputs = os.path.join(work, f"inputs_{ename}.safetensors")
        save_file({"hidden_states": x, "timestep": ts, "encoder_hidden_states": enc}, inputs)
        model = models[i].to(dev)
        kw = dict(hidden_states=x.to(dev, torch.bfloat16), timestep=ts.to(dev), encoder_hidden_states=enc.to(dev, torch.bfloat16))
        e = {"name": ename, "timestep": t}
        ref, r = diffusers_contenders(torch, model, kw, a.iters, use_compile=not a.no_compile, warmup=1)
        e.update(r)
        models[i] = None
        del model, kw
        torch._dynamo.reset()
        torch.cuda.empty_cache()
        out = os.path.join(work, f"ditrun_{ename}.safetensors")
        extra = ["--expert", ename] if len(v["experts"]) > 1 else []
        r, failed = ditrun_contender(a.ditrun, bundle, inputs, out, a.iters, extra=extra, graph=True, heuristic=True,
                                     warmup=1)
        e.update(r)
        if failed:
            e["failed"] = failed
            fails += 1
        else:
            e["parity"] = parity(torch, load_file(out)["sample"], ref)
            pb.summary(e)
            fails += not e["parity_ok"]
            print(f"{ename}: parity vs diffusers eager: cosine {e['parity']['cosine']:.6f}, relative L2 "
                  f"{e['parity']['rel_l2']:.3e}", flush=True)
            for g in e.get("step_groups", [])[:16]:
                print(f"  {g['count']:4d} steps {g['ms']:9.3f} ms  {g['what']}")
            if e.get("ditrun_heuristic_gemm_ms"):
                print(f"  with cuBLASLt's first heuristic GEMM algorithms: {e['ditrun_heuristic_gemm_ms']:.1f} ms "
                      f"(GEMMs {e.get('ditrun_heuristic_gemm_split_ms', 0):.1f} ms)")
        del ref
        res["experts"].append(e)
        save(res, a.out)
    # The ceilings once, on the first expert's plan (the experts' shapes are the same).
    if not a.no_ceilings and any(e.get("split_ms") for e in res["experts"]):
        plan = load_plan(bundle, v["experts"][0] if len(v["experts"]) > 1 else None)
        pb.measure_ceilings(torch, res, res["experts"], plan, v["config"]["num_attention_heads"], named=True)
    return pb.finish(res, lambda r: save(r, a.out), lines, fails)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS))
    pb.add_contender_flags(ap, "where the models and bundles go (removed at the end unless --keep)", "results directory")
    ap.add_argument("--layers", type=int, help="blocks per expert (default: as many as fit one call; see estimate_s)")
    ap.add_argument("--expert", default="both", choices=("both", "transformer", "transformer_2"))
    ap.add_argument("--iters", type=int, default=3)
    pb.add_switches(ap, "--no-compile", "--no-ceilings", "--keep")
    ap.add_argument("--dry-run", action="store_true", help="check the arithmetic without torch or a GPU")
    ap.add_argument("--write-folder", metavar="DIR")
    ap.add_argument("--shrink", action="store_true")
    a = ap.parse_args()

    def write():
        if not a.variant:
            ap.error("--variant is required")
        n = write_folder(a.write_folder, VARIANTS[a.variant], a.layers or 1, a.shrink)
        return f"wrote {a.write_folder}: {n} bytes of zero weights per expert set"

    def check():
        if a.expert == "transformer_2" and len(VARIANTS[a.variant]["experts"]) < 2:
            ap.error(f"--expert transformer_2: {a.variant} has one transformer")

    return pb.dispatch(ap, a, dry_run, lambda a: run_variant(a, a.variant), ("variant", "ditc", "ditrun", "work", "out"),
                       scratch=lambda a: os.path.join(a.work, a.variant), write_folder=write, check=check)


if __name__ == "__main__":
    sys.exit(main())
