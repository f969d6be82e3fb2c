"""What the pipeline benches (flux_forward, hunyuan_forward, qwen_forward, wan22_forward,
wan22_generate) share: the zero-weight folder writer, `ditc compile`, the results' ratios, table
and file, the contests of a forward and a generate against diffusers, and main's course.

Standard library only at import: the functions that need torch take it as an argument.
"""
import json
import math
import os
import struct
import subprocess
import time

import ceilings

COSINE_MIN = 0.999
PEAK_NOTE = ("peak GiB: diffusers' from torch's allocator (tensors only; its whole process by nvidia-smi in the JSON's "
             "eager_process_peak_gib), ditrun's from nvidia-smi (whole process)")


# --- shapes and the zero-weight folder (no torch) ---

# Wan2.1-T2V-1.3B's transformer (WanTransformer3DModel), as published.
WAN21_1_3B = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
                  text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
                  qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)

def param_count(shapes, prefix=""):
    return sum(math.prod(v) for k, v in shapes.items() if k.startswith(prefix))


def with_layers(config, layers):
    """A copy of config with `layers` blocks: a count, or (double-stream, single-stream) counts."""
    cfg = dict(config)
    if layers:
        cfg.update(zip(("num_layers", "num_single_layers"), (layers,) if isinstance(layers, int) else layers))
    return cfg


def linear(s, name, o, i):
    """A Linear(i -> o) with bias in the shapes dict `s`."""
    s[name + ".weight"], s[name + ".bias"] = [o, i], [o]


def dual_single_blocks(s, cfg, d, hd, m):
    """The double-stream (image and text, joint attention) and single-stream blocks that FLUX.1 and
    HunyuanVideo share: cfg["num_layers"] and cfg["num_single_layers"] of them, width d, head width
    hd, MLP width m."""
    for i in range(cfg["num_layers"]):
        b = f"transformer_blocks.{i}."
        linear(s, b + "norm1.linear", 6 * d, d)
        linear(s, b + "norm1_context.linear", 6 * d, d)
        for p in ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"):
            linear(s, b + "attn." + p, d, d)
        for n in ("norm_q", "norm_k", "norm_added_q", "norm_added_k"):
            s[b + f"attn.{n}.weight"] = [hd]
        for f in ("ff", "ff_context"):
            linear(s, b + f + ".net.0.proj", m, d)
            linear(s, b + f + ".net.2", d, m)
    for i in range(cfg["num_single_layers"]):
        b = f"single_transformer_blocks.{i}."
        linear(s, b + "norm.linear", 3 * d, d)
        linear(s, b + "proj_mlp", m, d)
        linear(s, b + "proj_out", d, d + m)
        for p in ("to_q", "to_k", "to_v"):
            linear(s, b + "attn." + p, d, d)
        s[b + "attn.norm_q.weight"] = s[b + "attn.norm_k.weight"] = [hd]


def write_zero_safetensors(path, shapes):
    """A bf16 safetensors file of zeros, written sparse: the header, then a hole (two experts'
    equal files share one weights blob in the bundle). Returns the weights' bytes."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(shapes):
        n = 2 * math.prod(shapes[name])
        header[name] = {"dtype": "BF16", "shape": shapes[name], "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h)
        fh.truncate(8 + len(h) + off)
    return off


def write_json(path, obj):
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=2)


def write_pipeline_folder(path, index, scheduler, model_class, cfg, shapes):
    """A pipeline folder of model_index.json, the scheduler config and the transformer with zero
    bf16 weights written sparse, standard library only: what ditc compiles to fill a kernel cache
    (kernels do not depend on weight values). Returns the weights' bytes."""
    for sub in ("scheduler", "transformer"):
        os.makedirs(os.path.join(path, sub), exist_ok=True)
    write_json(os.path.join(path, "model_index.json"), index)
    write_json(os.path.join(path, "scheduler", "scheduler_config.json"),
               {"_class_name": "FlowMatchEulerDiscreteScheduler", **scheduler})
    write_json(os.path.join(path, "transformer", "config.json"), {"_class_name": model_class, **cfg})
    return write_zero_safetensors(os.path.join(path, "transformer", "diffusion_pytorch_model.safetensors"), shapes)


def read_header_shapes(path):
    """{name: shape} of a safetensors file's header."""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def golden_mismatches(folder, shapes_of):
    """Tensors whose shape `shapes_of(config)` gets wrong, or which it adds or misses, against the
    transformer that diffusers itself saved in a tiny golden folder (tests/data): how a dry run
    ties the shapes written here to the pinned diffusers without torch."""
    d = os.path.join(folder, "transformer")
    cfg = {k: v for k, v in json.load(open(os.path.join(d, "config.json"))).items() if not k.startswith("_")}
    want, got = read_header_shapes(os.path.join(d, "diffusion_pytorch_model.safetensors")), shapes_of(cfg)
    return sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))


def ditc_compile(ditc, folder, args):
    """`ditc compile folder args... -q`: (bundle path or None, seconds, the compiler's last output
    when it refused)."""
    t0 = time.perf_counter()
    r = subprocess.run([ditc, "compile", folder] + list(args) + ["-q"], capture_output=True, text=True)
    dt = time.perf_counter() - t0
    last = r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else []
    if r.returncode or not last or not last[0].startswith("bundle "):
        return None, dt, (r.stderr.strip() or r.stdout.strip())[-600:]
    return last[0].split()[2], dt, None


# --- results ---

def summary(e):
    """The ratios and the parity verdict of one forward's results."""
    if e.get("ditrun_ms"):
        e["eager_vs_ditrun"] = e["eager_ms"] / e["ditrun_ms"]
        if e.get("compiled_ms"):
            e["compiled_vs_ditrun"] = e["compiled_ms"] / e["ditrun_ms"]
    if e.get("parity"):
        e["parity_ok"] = e["parity"]["cosine"] >= COSINE_MIN
    return e


def contender_rows(entries, first, key, label=None):
    """The forward table: `first` heads the first column, e[key] (or label(e) when measured) fills it."""
    L = [f"| {first} | ditrun ms | eager ms | compiled ms | eager / ditrun | compiled / ditrun | ditrun peak GiB | "
         "eager peak GiB | cosine | rel L2 |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in entries:
        if e.get("failed"):
            L.append(f"| {e[key]} | failed: {e['failed'][:120]} | | | | | | | | |")
            continue
        f = lambda k, fmt="{:.1f}": fmt.format(e[k]) if e.get(k) is not None else "-"  # noqa: E731
        name = label(e) if label else e[key]
        L.append(f"| {name} | {f('ditrun_ms')} | {f('eager_ms')} | {f('compiled_ms')} | {f('eager_vs_ditrun', '{:.2f}x')} | "
                 f"{f('compiled_vs_ditrun', '{:.2f}x')} | {f('ditrun_peak_gib', '{:.2f}')} | {f('eager_peak_gib', '{:.2f}')} | "
                 f"{e['parity']['cosine']:.6f} | {e['parity']['rel_l2']:.3e} |")
    return L


def forward_rows(res):
    """The forward table of a results dict (dry or measured), a row a batch size."""
    return contender_rows(res["forwards"], "batch", "batch")


def generate_line(g, what):
    if g.get("failed"):
        return f"generate ({what}): ditrun failed: {g['failed'][:200]}"
    return (f"generate ({what}): cosine {g['parity']['cosine']:.6f}, relative L2 {g['parity']['rel_l2']:.3e} against the "
            f"pipeline; pipeline {g['pipeline_s']:.2f} s, ditrun generate {g['ditrun_s']:.2f} s (process, load included)")


def save(res, out, name):
    """OUT/name, replaced whole, so a run cut short leaves the last complete results."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    with open(path + ".tmp", "w") as fh:
        json.dump(res, fh, indent=1)
    os.replace(path + ".tmp", path)
    return path


# --- the contests (torch on the device) ---

def redraw_small(torch, model, seed):
    """Random weights of a trained model's scale in place of diffusers' initialisation (which
    zero-initializes some projections): normal draws, std 0.02 for matrices and 0.01 for vectors,
    from a CPU generator seeded `seed` (the same weights on any device)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.02 if p.dim() > 1 else 0.01))


def run_fields(torch, a):
    """What every measured results dict records of the run itself."""
    from wan_forward import PEAK_METHOD
    return {"run": ceilings.run_info(), "device": torch.cuda.get_device_name(0), "peak_method": PEAK_METHOD,
            "iters": a.iters}


def make_pipeline(torch, model_class, cfg, pipeline_class, folder, **parts):
    """A transformer at `cfg` with diffusers' default initialisation (seed 0), cast to bf16 on the
    GPU, in a pipeline of `parts` (the scheduler; None for what it leaves out) saved to folder:
    (model, pipeline)."""
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = model_class(**cfg)
    model = model.to(torch.bfloat16).eval()
    pipe = pipeline_class(transformer=model, **parts)
    pipe.set_progress_bar_config(disable=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    return model, pipe


def forward_contest(torch, a, model, make_kwargs, bundle, inputs, out, e, label=""):
    """diffusers eager (and compiled) on make_kwargs() against `ditrun` on the bundle with `inputs`,
    the model off the device while ditrun runs: fills e, returns 1 when ditrun failed or missed the
    parity, else 0."""
    from safetensors.torch import load_file  # device only
    from wan_forward import VARIANTS, diffusers_contenders, ditrun_contender, parity

    kw = make_kwargs()
    ref, r = diffusers_contenders(torch, model, kw, a.iters, use_compile=not a.no_compile, warmup=1)
    e.update(r)
    del kw
    torch._dynamo.reset()
    model.to("cpu")
    torch.cuda.empty_cache()
    r, failed = ditrun_contender(a.ditrun, bundle, inputs, out, a.iters, graph=False, warmup=1,
                                 heuristic=os.environ.get("DIT_BENCH_GEMM_HEURISTIC") == "1")
    if not failed and os.environ.get("DIT_BENCH_KERNEL_SPLIT", "1") != "0":
        ks = ceilings.ours_kernel_split(torch, bundle, inputs)
        if ks:
            r["ditrun_kernels"] = ks
            print("\n".join(ceilings.split_lines("ditrun", ks)), flush=True)
    model.to(torch.device("cuda"))
    e.update(r)
    if failed:
        e["failed"] = failed
        return 1
    e["parity"] = parity(torch, load_file(out)["sample"], ref)
    for name, _, _, what in VARIANTS:
        if e.get(f"ditrun_{name}_out"):  # the same bundle under a runtime setting
            e[f"{name}_parity"] = parity(torch, load_file(e.pop(f"ditrun_{name}_out"))["sample"], ref)
            c, ms = e.get("compiled_ms"), e.get(f"ditrun_{name}_ms")
            again = f", {e['ditrun_again_ms']:.1f} again after the variants" if e.get("ditrun_again_ms") else ""
            print(f"{label}{what}: {ms or 0:.1f} ms against {e['ditrun_ms']:.1f} by default{again}"
                  + (f" (torch.compile {c:.1f}: {c / ms:.3f}x)" if c and ms else "")
                  + f"; cosine {e[f'{name}_parity']['cosine']:.6f} to diffusers eager", flush=True)
    if e.get("ditrun_heuristic_gemm_ms"):  # DIT_BENCH_GEMM_HEURISTIC=1: cuBLASLt's first choices, untimed
        print(f"{label}GEMMs as cuBLASLt's heuristic ranks them first: {e['ditrun_heuristic_gemm_ms']:.1f} ms (GEMMs "
              f"{e.get('ditrun_heuristic_gemm_split_ms', 0):.1f} ms step-synchronized) against {e['ditrun_ms']:.1f} timed at load",
              flush=True)
    summary(e)
    print(f"{label}parity vs diffusers eager: cosine {e['parity']['cosine']:.6f}, relative L2 {e['parity']['rel_l2']:.3e}",
          flush=True)
    for sg in e.get("step_groups", [])[:14]:
        print(f"  {sg['count']:4d} steps {sg['ms']:9.3f} ms  {sg['what']}")
    if e.get("in_flight_step_groups") and e.get("compiled_by_shape"):  # DIT_BENCH_SHAPES=1
        print("\n".join(ceilings.by_shape_lines(e["in_flight_step_groups"], e["compiled_by_shape"])), flush=True)
        att = sum(g["ms"] for g in e["in_flight_step_groups"] if g["what"].startswith("attention"))
        their = sum(r["ms"] for r in e["compiled_by_shape"] if "attention" in r["op"])
        print(f"attention: ours in flight {att:.1f} ms, torch.compile's {their:.1f} ms; in-flight split {e.get('in_flight_split_ms')}",
              flush=True)
    return 0 if e["parity_ok"] else 1


def generate_contest(torch, a, model, args, gout, want, gres):
    """`ditrun generate args... --out gout` (the model off the device) against the pipeline's
    latents `want`: fills gres, returns 1 when ditrun failed or missed the parity, else 0."""
    from safetensors.torch import load_file  # device only
    from wan_forward import parity

    model.to("cpu")
    torch.cuda.empty_cache()
    t0 = time.perf_counter()
    r = subprocess.run([a.ditrun, "generate"] + list(args) + ["--out", gout], capture_output=True, text=True)
    gres["ditrun_s"] = time.perf_counter() - t0
    if r.returncode:
        gres["failed"] = r.stderr.strip()[-600:]
        return 1
    gres["parity"] = parity(torch, load_file(gout)["latents"], want)
    gres["parity_ok"] = gres["parity"]["cosine"] >= COSINE_MIN
    return 0 if gres["parity_ok"] else 1


def lossy_modes(torch, a, model, folder, shape, inputs, name, title):
    """--lossy MODES: bench/lossy.py's modes of this pipeline folder at `shape` (ditc's shape flags,
    sm_90 bf16) on the forward's inputs, against its exact bundle (OUT/<name>.json), the diffusers
    model off the device meanwhile."""
    import lossy
    model.to("cpu")
    torch.cuda.empty_cache()
    lossy.family_modes(a.ditc, a.ditrun, folder, list(shape) + ["--dtype", "bf16", "--target", "sm_90"], inputs,
                       os.path.join(a.work, "lossy"), a.out, name, title, torch.cuda.get_device_name(0), a.lossy.split(","), a.iters)


def measure_ceilings(torch, res, entries, plan, heads, named=False):
    """The ceilings of bench/ceilings.py on plan, and each measured entry against them (printed,
    under its name when `named`)."""
    res["ceilings"] = ceilings.measure(torch, plan, heads, iters=5)
    for e in entries:
        if e.get("split_ms"):
            e["vs_ceiling"] = ceilings.versus(e["split_ms"], plan, heads, res["ceilings"])
            if named:
                print(f"-- {e['name']}")
            for line in ceilings.lines(e["split_ms"], res["ceilings"], e["vs_ceiling"]):
                print(line)


def finish(res, save_res, lines, fails, note=PEAK_NOTE):
    """Marks the results complete, saves them (save_res(res)), prints the summary: the exit status."""
    res["complete"] = True
    save_res(res)
    print()
    for line in lines(res):
        print(line)
    if note:
        print(note)
    return 1 if fails else 0


# --- main ---

def add_contender_flags(ap, work_help=None, out_help=None):
    """--ditc, --ditrun, --work and --out."""
    ap.add_argument("--ditc")
    ap.add_argument("--ditrun")
    ap.add_argument("--work", help=work_help)
    ap.add_argument("--out", help=out_help)


def add_lossy_flag(ap):
    ap.add_argument("--lossy", metavar="MODES", help="also bench/lossy.py's modes (comma-separated, e.g. fp8,fp8attn,fp8all) "
                    "against the exact bundle, forward only: lossy_<family>.json")


def add_switches(ap, *names):
    for name in names:
        ap.add_argument(name, action="store_true")


def dispatch(ap, a, dry_run, run, required, scratch=None, write_folder=None, check=None):
    """main's course: --dry-run (needs --out); --write-folder (write_folder() says what it wrote);
    else every flag of `required`, check(), then run(a) with a.work made and scratch(a) (default
    a.work) removed at the end unless --keep. The exit status."""
    if a.dry_run:
        if not a.out:
            ap.error("--out is required")
        return dry_run(a)
    if write_folder and a.write_folder:
        print(write_folder())
        return 0
    for k in required:
        if getattr(a, k) is None:
            ap.error(f"--{k} is required")
    if check:
        check()
    os.makedirs(a.work, exist_ok=True)
    import gpumem  # noqa: E402 (the device's use before this process touches it: diffusers' whole-process peak)
    gpumem.mark_start()
    try:
        return run(a)
    finally:
        if not a.keep:
            subprocess.run(["rm", "-rf", scratch(a) if scratch else a.work])
