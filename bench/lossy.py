#!/usr/bin/env python3
"""The lossy modes on one GPU: Wan2.1-1.3B (the model folder tests/gpu/run.sh makes) at 480x832 or
720x1280, 81 frames, compiled exact (bf16), with FP8 GEMMs (--quant fp8), with sliding tile attention
(--sparse-attn sta:T,H,W), with Radial Attention's mask (radial), with FP8 and STA together, with FP8
attention (fp8attn: --attn-quant fp8), with FP8 GEMMs and attention (fp8all) and with those and STA
(fp8all+sta), with int8 Q K^T and bf16 P V (int8attn: --attn-quant int8, SageAttention's first split;
int8all, int8all+sta, int8all+radial with FP8 GEMMs) and with int8 Q K^T and e4m3 P V (int8fp8attn:
--attn-quant int8fp8, its second; int8fp8all, int8fp8all+sta); then the peers doing the same on
diffusers, in the same call.

Per mode: `ditc compile` (the kernel cache as DITC_CACHE_DIR holds it), the forward's median
(`ditrun bench`) and its attention share, the forward output's cosine and relative L2 against the
exact bundle's from the same inputs, then a 50-step generate with CFG 5 (shift 3) from the same
noise: the loop's seconds and the final latents' cosine and PSNR against the exact run's (PSNR over
the exact latents' range). Speedups are over the exact bf16 bundle.

STA's window: the STA paper's (Zhang et al., 2025) for HunyuanVideo at 720p, 3x3x3 tiles of 6x8x8
tokens, 18 frames x 24 rows x 24 columns of patched tokens around each tile. HunyuanVideo's 720p
grid, 30x48x80 tokens, is the same kind of grid as Wan's (21x30x52 at 480p, 21x45x80 at 720p):
the window keeps most of the frames and about a quarter to half of each frame's extent, the locality
the paper measured. --sta picks another.

The peers, each against diffusers eager on the same inputs (cosine and relative L2 against its
output; the eager row against ditrun's exact output): torch.compile; `sageattention` 1.0.6 (PyPI's
Triton kernels) on diffusers' attention: diffusers' "sage" backend asks for sageattention >= 2.1.1
(attention_dispatch._REQUIRED_SAGE_VERSION), so when set_attention_backend refuses, 1.0.6's sageattn
replaces the Wan processor's dispatch_attention_fn for unmasked attention; torchao's FP8 (float8
dynamic activations and weights, per row) under torch.compile. A peer that cannot run has a row
saying why; every peer row names its version. The weights are those of the model folder (random
unless it holds trained ones): quality figures say how far a mode moves the output on such a model.

Results: OUT/lossy_<res>.json rewritten after every row, OUT/lossy_<res>.md, OUT/lossy_<res>.png
(speedup against 1 - cosine; matplotlib, device only). --budget S skips what is left after S seconds
(a row says so). --dry-run runs the metrics and the table without torch and, given --ditc, --ditrun,
--model and --inputs, compiles the tiny Wan bundle in each mode and runs the ditrun half on the CPU.

usage: bench/lossy.py --res 480p|720p --model DIR --ditc BIN --ditrun BIN --work DIR --out DIR
           [--modes exact,fp8,...] [--sta T,H,W] [--sparse-dense-layers L] [--steps 50] [--budget 540]
           [--no-peer | --peers compile,sage,torchao] [--no-generate] [--keep]
       bench/lossy.py --dry-run --out DIR [--ditc BIN --ditrun BIN --model DIR --inputs I.safetensors]
"""
import argparse
import array
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pipeline_bench as pb  # noqa: E402
import ceilings  # noqa: E402
from ceilings import run_info  # noqa: E402
from step_cache import parse_log, quality, read_f32  # noqa: E402

STA_PAPER = "18,24,24"
RES = {"480p": (480, 832), "720p": (720, 1280)}
WAN = {"frames": 81, "text_len": 512, "steps": 50, "guidance": 5.0, "shift": 3.0}
PEERS = ("compile", "sage", "torchao")
MODE_NAMES = ("exact", "fp8", "sta", "radial", "fp8+sta", "fp8attn", "fp8all", "fp8all+sta", "int8attn", "int8all", "int8all+sta",
              "int8all+radial", "int8fp8attn", "int8fp8all", "int8fp8all+sta")
# A mode's first part: its --attn-quant (the part before "attn" or "all"), and FP8 GEMMs for "all".
ATTN_QUANT = {"fp8attn": "fp8", "fp8all": "fp8", "int8attn": "int8", "int8all": "int8", "int8fp8attn": "int8fp8", "int8fp8all": "int8fp8"}
NOTE = ("ditrun rows against the exact bundle; peers against diffusers eager; diffusers eager against ditrun exact. "
        "speedup: over ditrun's exact bf16 forward, the peers' too (speedup_over_eager in the JSON: over diffusers eager). "
        "Weights as the model folder holds them.")
FAMILY_NOTE = ("ditrun rows against the exact bundle of the same pipeline folder on the same inputs; speedup: over that bundle's "
               "forward. Forward only (no peers, no generate): the family's forward benchmark with --lossy. Weights as the folder "
               "holds them (random at the published config).")


def mode_flags(mode, sta, dense_layers):
    """ditc's flags for one of MODE_NAMES: fp8 the GEMMs, fp8attn (int8attn) the attention, fp8all
    (int8all) both; +sta, +radial (or radial alone) the sparse pattern."""
    f = []
    parts = mode.split("+")
    first = parts[0]
    if first == "fp8" or first.endswith("all"):
        f += ["--quant", "fp8"]
    if first in ATTN_QUANT:
        f += ["--attn-quant", ATTN_QUANT[first]]
    if "sta" in parts:
        f += ["--sparse-attn", "sta:" + sta]
    if "radial" in parts:
        f += ["--sparse-attn", "radial"]
    if dense_layers and ("sta" in parts or "radial" in parts):
        f += ["--sparse-dense-layers", str(dense_layers)]
    return f


def parse_bench(text):
    """(median ms, split ms dict, ms by op kind dict) from `ditrun bench`'s stdout."""
    r = ceilings.parse_bench(text)
    return r.get("ditrun_ms"), r.get("split_ms", {}), r.get("by_op_ms", {})


def table(part):
    f = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
    L = [f"### {part['title']}", "", "| contender | mode | version | forward ms | attention ms | speedup | attention speedup | "
         "fwd cosine | fwd rel L2 | generate s | final cosine | final PSNR dB |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in part["rows"]:
        why = r.get("failed") or r.get("skipped")
        if why:
            L.append(f"| {r['contender']} | {r['mode']} | {r.get('version') or '-'} | {'failed' if r.get('failed') else 'skipped'}: "
                     f"{why[:140]} | | | | | | | | |")
            continue
        q, g = r.get("forward") or {}, r.get("generate") or {}
        gq = g.get("quality") or {}
        L.append(f"| {r['contender']} | {r['mode']} | {r.get('version') or '-'} | {f(r.get('forward_ms'), '{:.1f}')} | "
                 f"{f(r.get('attention_ms'), '{:.1f}')} | {f(r.get('speedup'), '{:.2f}x')} | {f(r.get('attention_speedup'), '{:.2f}x')} | "
                 f"{f(q.get('cosine'), '{:.6f}')} | {f(q.get('rel_l2'), '{:.3e}')} | {f(g.get('loop_s'), '{:.2f}')} | "
                 f"{f(gq.get('cosine'), '{:.6f}')} | {f(gq.get('psnr_db'), '{:.2f}')} |")
    return L + ["", NOTE, ""]


def write_results(res, out, name):
    pb.save(res, out, name + ".json")
    lines = table(res["part"])
    with open(os.path.join(out, name + ".md.tmp"), "w") as fh:
        fh.write("\n".join(lines))
    os.replace(os.path.join(out, name + ".md.tmp"), os.path.join(out, name + ".md"))
    return lines


class Budget:
    """Seconds left of --budget since the call began; spent() is true once they are gone."""
    def __init__(self, seconds):
        self.seconds, self.t0 = seconds, time.perf_counter()

    def spent(self):
        return bool(self.seconds) and time.perf_counter() - self.t0 > self.seconds

    def row(self, contender, mode):
        return {"contender": contender, "mode": mode, "skipped": f"not run: the call's {self.seconds:.0f} s budget was spent"}


def ditrun_forwards(a, shape, inputs, res, out, name, budget):
    """Each mode compiled, its forward written and timed, and measured against the exact one:
    {mode: bundle} of those compiled. Rows appended to res["part"]["rows"]."""
    rows, bundles, exact = res["part"]["rows"], {}, None
    for mode in a.modes:
        if budget.spent():
            rows.append(budget.row("ditrun", mode))
            continue
        row = {"contender": "ditrun", "mode": mode, "flags": mode_flags(mode, a.sta, a.sparse_dense_layers)}
        rows.append(row)
        bundle, row["compile_s"], refused = pb.ditc_compile(a.ditc, a.model, shape + row["flags"] + ["-o", os.path.join(a.work, "b")])
        if not bundle:
            row["failed"] = f"ditc compile: {refused}"
            write_results(res, out, name)
            continue
        fout = os.path.join(a.work, f"fwd_{mode.replace('+', '_')}.safetensors")
        fw = subprocess.run([a.ditrun, "forward", bundle, "--inputs", inputs, "--out", fout], capture_output=True, text=True)
        bench = subprocess.run([a.ditrun, "bench", bundle, "--inputs", inputs, "--steps", str(a.iters), "--warmup", "1"],
                               capture_output=True, text=True)
        if fw.returncode or bench.returncode:
            row["failed"] = (fw.stderr.strip() or bench.stderr.strip())[-400:] or "ditrun failed"
            write_results(res, out, name)
            continue
        bundles[mode] = bundle
        row["forward_ms"], split, row["by_op_ms"] = parse_bench(bench.stdout)
        row["attention_ms"], row["split_ms"] = split.get("attention"), split
        sample = read_f32(fout, "sample")
        if exact is None and mode == "exact":
            exact = (sample, row["forward_ms"], row["attention_ms"])
        if exact:
            row["forward"] = quality(exact[0], sample)
            row["speedup"] = exact[1] / row["forward_ms"] if row["forward_ms"] else None
            row["attention_speedup"] = exact[2] / row["attention_ms"] if exact[2] and row["attention_ms"] else None
        print(f"ditrun {mode}: {row['forward_ms']} ms (attention {row['attention_ms']}), "
              f"cosine {(row.get('forward') or {}).get('cosine')}", flush=True)
        write_results(res, out, name)
    return bundles


def family_modes(ditc, ditrun, folder, shape, inputs, work, out, name, title, device, modes, iters=5, sta=STA_PAPER):
    """Another family's lossy modes, forward only (the MMDiT forward benchmarks' --lossy MODES): each
    mode of `modes` compiled from the pipeline folder at `shape` (ditc's flags), its forward timed
    and measured against the exact bundle's on `inputs`, into OUT/<name>.json and .md as bench/lossy.py
    writes Wan's. A mode the compiler refuses (FP8 attention takes head dim 128) has a row saying
    why. Returns the results."""
    modes = ["exact"] + [m for m in modes if m and m != "exact"]
    bad = [m for m in modes if m not in MODE_NAMES]
    if bad:
        raise ValueError(f"--lossy: expected modes of {', '.join(MODE_NAMES)}, found {bad[0]}")
    os.makedirs(work, exist_ok=True)
    a = argparse.Namespace(ditc=ditc, ditrun=ditrun, model=folder, modes=modes, sta=sta, sparse_dense_layers=0, work=work, iters=iters)
    res = {"run": run_info(), "note": FAMILY_NOTE, "device": device, "part": {"title": title, "rows": []}}
    if any("sta" in m.split("+") for m in modes):
        res["sta"], res["sta_source"] = sta, "STA paper: 3x3x3 tiles of 6x8x8"
    ditrun_forwards(a, shape, inputs, res, out, name, Budget(None))
    res["complete"] = True
    for line in write_results(res, out, name):
        print(line)
    return res


def ditrun_generates(a, bundles, gen_args, res, out, name, budget):
    """Each compiled mode's generate from the same noise, the exact one first: loop seconds and the
    final latents against the exact run's, on the mode's row."""
    rows, exact = res["part"]["rows"], None
    for mode, bundle in bundles.items():
        row = next(r for r in rows if r["contender"] == "ditrun" and r["mode"] == mode)
        if budget.spent():
            row["generate"] = {"skipped": f"not run: the call's {budget.seconds:.0f} s budget was spent"}
            continue
        path = os.path.join(a.work, f"gen_{mode.replace('+', '_')}.safetensors")
        t0 = time.perf_counter()
        r = subprocess.run([a.ditrun, "generate", bundle] + gen_args + ["--out", path], capture_output=True, text=True)
        g = row["generate"] = {"process_s": time.perf_counter() - t0}
        if r.returncode:
            g["failed"] = r.stderr.strip()[-400:]
        else:
            g["loop_s"] = parse_log(r.stderr)[0]
            lat = read_f32(path)
            if exact is None and mode == "exact":
                exact = lat
            if exact:
                g["quality"] = quality(exact, lat)
            print(f"ditrun {mode} generate: loop {g['loop_s']} s, final cosine {(g.get('quality') or {}).get('cosine')}", flush=True)
        write_results(res, out, name)


def plot(res, out, name):
    """OUT/NAME.png: speedup against 1 - forward cosine (and 1 - final cosine for ditrun's modes);
    none without matplotlib."""
    try:
        import matplotlib  # device only
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # device only
    except ImportError:
        return []
    rows = [r for r in res["part"]["rows"] if r.get("speedup") and r.get("forward")]
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    pts = [("forward, ditrun", "o", [(r, r["forward"]["cosine"]) for r in rows if r["contender"] == "ditrun"]),
           ("final latents, ditrun", "D", [(r, r["generate"]["quality"]["cosine"]) for r in rows
                                            if r["contender"] == "ditrun" and (r.get("generate") or {}).get("quality")]),
           ("forward, peers", "s", [(r, r["forward"]["cosine"]) for r in rows if r["contender"] != "ditrun"])]
    for label, mark, pp in pts:
        if not pp:
            continue
        xs = [max(1 - c, 1e-7) for _, c in pp]
        ax.scatter(xs, [r["speedup"] for r, _ in pp], marker=mark, label=label)
        for x, (r, _) in zip(xs, pp):
            ax.annotate(r["mode"] if r["contender"] == "ditrun" else r["contender"], (x, r["speedup"]), fontsize=6,
                        xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("1 - cosine against the exact output")
    ax.set_ylabel("speedup over ditrun's exact bf16 forward")
    ax.set_title(res["part"]["title"], fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = os.path.join(out, name + ".png")
    fig.tight_layout()
    fig.savefig(path + ".tmp", dpi=120, format="png")  # whole or not at all: a call cut short keeps no empty file
    plt.close(fig)
    os.replace(path + ".tmp", path)
    return [path]


def dry_run(a):
    os.makedirs(a.out, exist_ok=True)
    assert mode_flags("fp8+sta", "1,8,8", 2) == ["--quant", "fp8", "--sparse-attn", "sta:1,8,8", "--sparse-dense-layers", "2"]
    assert mode_flags("exact", STA_PAPER, 2) == [] and mode_flags("radial", STA_PAPER, 0) == ["--sparse-attn", "radial"]
    assert mode_flags("fp8attn", STA_PAPER, 0) == ["--attn-quant", "fp8"]
    assert mode_flags("fp8all+sta", "1,8,8", 0) == ["--quant", "fp8", "--attn-quant", "fp8", "--sparse-attn", "sta:1,8,8"]
    assert mode_flags("int8attn", STA_PAPER, 0) == ["--attn-quant", "int8"]
    assert mode_flags("int8fp8all+sta", "1,8,8", 0) == ["--quant", "fp8", "--attn-quant", "int8fp8", "--sparse-attn", "sta:1,8,8"]
    assert mode_flags("int8all+radial", STA_PAPER, 3) == ["--quant", "fp8", "--attn-quant", "int8", "--sparse-attn", "radial",
                                                           "--sparse-dense-layers", "3"]
    ms, split, by_op = parse_bench("forward_ms_median 412.5\nsplit_ms gemm 200.0 attention 150.5 other 40.0 (step-synchronized)\n"
                                   "by_op_ms linear=200.000 attention_fp8=140.250 attn_quant=10.250\n")
    assert ms == 412.5 and split == {"gemm": 200.0, "attention": 150.5, "other": 40.0}, (ms, split)
    assert by_op == {"linear": 200.0, "attention_fp8": 140.25, "attn_quant": 10.25}, by_op
    b = Budget(1e-9)
    time.sleep(0.01)
    assert b.spent() and not Budget(None).spent() and "budget" in b.row("ditrun", "radial")["skipped"]
    ref = array.array("f", [1.0, -2.0, 3.0, 0.5])
    q = quality(ref, array.array("f", [1.0, -2.0, 3.0, 1.0]))
    name = "lossy_dry"
    res = {"dry_run": True, "run": run_info(), "note": NOTE, "part": {"title": "Wan2.1-1.3B, 480x832, 81 frames (made-up times)", "rows": [
        {"contender": "ditrun", "mode": "exact", "forward_ms": 400.0, "attention_ms": 200.0, "speedup": 1.0, "attention_speedup": 1.0,
         "forward": quality(ref, ref), "generate": {"loop_s": 40.0, "quality": quality(ref, ref)}},
        {"contender": "ditrun", "mode": "fp8+sta", "forward_ms": 250.0, "attention_ms": 100.0, "speedup": 1.6, "attention_speedup": 2.0,
         "forward": q, "generate": {"loop_s": 25.0, "quality": q}},
        {"contender": "sageattention", "mode": "attention", "version": "absent", "failed": "sageattention is not installed"},
        Budget(1).row("ditrun", "radial")]}}
    for line in write_results(res, a.out, name):
        print(line)
    lines = []
    if a.ditc and a.ditrun and a.model and a.inputs:
        # The tiny model (head dim 128, which FP8 attention takes) at 17 frames, 128x128: 5 x 8 x 8
        # patched tokens, three tiles of 128, so that a one-frame window is sparse.
        a.modes, a.work, a.iters = list(MODE_NAMES), a.out, 2
        shape = ["--frames", "17", "--height", "128", "--width", "128", "--text-len", "7", "--dtype", "bf16"]
        exact = pb.ditc_compile(a.ditc, a.model, shape + ["-o", os.path.join(a.out, "b")])[0]
        inputs = os.path.join(a.out, "fwd_inputs.safetensors")
        fi = os.path.join(os.path.dirname(a.ditrun), "forward_inputs")
        subprocess.run([fi, exact, inputs, "--seed", "3", "--set", "timestep=500"], check=True, capture_output=True)
        res["tiny"] = True
        res["part"] = {"title": "tiny Wan, 17x128x128, sta:" + a.sta + " (CPU)", "rows": []}
        budget = Budget(None)
        bundles = ditrun_forwards(a, shape, inputs, res, a.out, name, budget)
        gen = ["--prompt-embeds", a.inputs, "--negative-embeds", a.inputs, "--seed", "7", "--steps", str(a.steps), "--guidance",
               str(WAN["guidance"]), "--shift", str(WAN["shift"])]
        ditrun_generates(a, bundles, gen, res, a.out, name, budget)
        lines = write_results(res, a.out, name)
        # Another family through family_modes: the tiny FLUX.1-dev pipeline (head dim 16: the FP8
        # attention modes are refused, and say so), its inputs made for its exact bundle.
        flux = os.path.join(HERE, "..", "tests", "data", "flux_dev_tiny")
        fshape = ["--height", "64", "--width", "64", "--text-len", "8", "--dtype", "bf16"]
        fexact = pb.ditc_compile(a.ditc, flux, fshape + ["-o", os.path.join(a.out, "fb")])[0]
        finputs = os.path.join(a.out, "flux_inputs.safetensors")
        subprocess.run([fi, fexact, finputs, "--seed", "3", "--set", "timestep=0.5", "--set", "guidance=3.5"], check=True,
                       capture_output=True)
        family_modes(a.ditc, a.ditrun, flux, fshape, finputs, os.path.join(a.out, "flux"), a.out, "lossy_flux_dry",
                     "tiny FLUX.1-dev, 64x64 (CPU)", "CPU", ["fp8", "fp8attn"], iters=2)
    for line in lines:
        print(line)
    return 0


# --- on the device ---

def timed_ms(torch, fn, iters):
    from wan_forward import timed
    return 1e3 * timed(torch, fn, iters, warmup=1)


def version_of(pkg):
    from importlib import metadata
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def peer_rows(torch, a, inputs, res, out, name, budget):
    """diffusers eager, torch.compile, sageattention and torchao's FP8 on the same inputs."""
    import diffusers  # device only
    from diffusers import WanTransformer3DModel  # device only
    from safetensors.torch import load_file  # device only
    from wan_forward import parity

    rows = res["part"]["rows"]
    ours = next((r for r in rows if r["contender"] == "ditrun" and r["mode"] == "exact" and r.get("forward_ms")), None)
    dev, bf16 = torch.device("cuda"), torch.bfloat16
    model = WanTransformer3DModel.from_pretrained(a.model, torch_dtype=bf16).to(dev).eval()
    t = load_file(inputs)
    kw = dict(hidden_states=t["hidden_states"].to(dev, bf16), timestep=t["timestep"].to(dev),
              encoder_hidden_states=t["encoder_hidden_states"].to(dev, bf16))

    def add(row, fn, ref):
        """Times fn (a forward), measures its output against ref, appends the row."""
        try:
            with torch.no_grad():
                y = fn().float()
                row["forward_ms"] = timed_ms(torch, fn, a.iters)
            row["forward"] = parity(torch, y, ref)
            if ours:
                row["speedup"] = ours["forward_ms"] / row["forward_ms"]
            if eager_ms[0]:
                row["speedup_over_eager"] = eager_ms[0] / row["forward_ms"]
            print(f"{row['contender']} {row['mode']}: {row['forward_ms']:.1f} ms, cosine {row['forward']['cosine']:.6f}", flush=True)
        except Exception as e:  # a peer that cannot run says why in its row
            row["failed"] = f"{type(e).__name__}: {e}"[:400]
        rows.append(row)
        write_results(res, out, name)
        return y if "failed" not in row else None

    eager_ms = [None]
    fwd = lambda m: (lambda: m(**kw, return_dict=False)[0])  # noqa: E731
    ours_out = read_f32(os.path.join(a.work, "fwd_exact.safetensors"), "sample") if ours else None
    ref_ours = torch.tensor(ours_out, dtype=torch.float32).reshape(kw["hidden_states"].shape) if ours else None
    tv = f"torch {torch.__version__}, diffusers {diffusers.__version__}"
    ref = add({"contender": "diffusers eager", "mode": "exact", "version": tv}, fwd(model),
              ref_ours if ref_ours is not None else torch.zeros(kw["hidden_states"].shape))
    if ref is None:
        return
    eager_ms[0] = rows[-1]["forward_ms"]
    if "compile" not in a.peers:
        pass
    elif budget.spent():
        rows.append(budget.row("torch.compile", "exact"))
    else:
        add({"contender": "torch.compile", "mode": "exact", "version": tv}, fwd(torch.compile(model)), ref)
        torch._dynamo.reset()
    # sageattention 1.0.6: diffusers' own backend when it accepts the version, else 1.0.6's sageattn
    # in place of the Wan processor's dispatch for the unmasked attentions.
    row = {"contender": "sageattention", "mode": "attention", "version": version_of("sageattention") or "absent"}
    if "sage" not in a.peers:
        pass
    elif budget.spent():
        rows.append(budget.row("sageattention", "attention"))
    elif row["version"] == "absent":
        row["failed"] = "sageattention is not installed (pip install sageattention==1.0.6)"
        rows.append(row)
    else:
        from sageattention import sageattn  # device only
        import diffusers.models.transformers.transformer_wan as tw  # device only
        orig = tw.dispatch_attention_fn
        try:
            model.set_attention_backend("sage")
            row["route"] = "set_attention_backend('sage')"
        except Exception as e:
            row["route"] = f"sageattn in the Wan processor's dispatch; set_attention_backend('sage') refused: {e}"[:300]

            def sage_dispatch(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw2):
                if attn_mask is not None:
                    return orig(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw2)
                return sageattn(query, key, value, tensor_layout="NHD", is_causal=is_causal, sm_scale=scale)
            tw.dispatch_attention_fn = sage_dispatch
        try:
            add(row, fwd(model), ref)
        finally:
            tw.dispatch_attention_fn = orig
            if row["route"].startswith("set_attention_backend"):
                model.set_attention_backend("native")
    # torchao FP8 last: it quantizes the model in place.
    row = {"contender": "torchao", "mode": "fp8", "version": version_of("torchao") or "absent"}
    if "torchao" not in a.peers:
        pass
    elif budget.spent():
        rows.append(budget.row("torchao", "fp8"))
    elif row["version"] == "absent":
        row["failed"] = "torchao is not installed (pip install torchao)"
        rows.append(row)
    else:
        try:
            from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_  # device only
            # The bf16 linears of the blocks (Wan keeps some modules in fp32, which PerRow refuses),
            # as --quant fp8 takes the blocks' linears.
            def blocks_bf16(mod, fqn):
                return isinstance(mod, torch.nn.Linear) and fqn.startswith("blocks.") and mod.weight.dtype == torch.bfloat16
            quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()), filter_fn=blocks_bf16)
            row["route"] = "quantize_(Float8DynamicActivationFloat8WeightConfig(PerRow)) on the blocks' bf16 linears, torch.compile"
            add(row, fwd(torch.compile(model)), ref)
        except Exception as e:
            row["failed"] = f"{type(e).__name__}: {e}"[:400]
            rows.append(row)
        torch._dynamo.reset()
    write_results(res, out, name)
    del model
    torch.cuda.empty_cache()


def run(a):
    import torch  # device only
    from safetensors.torch import save_file  # device only

    if a.res not in RES:
        sys.exit(f"--res {a.res}: expected one of {', '.join(RES)}")
    budget = Budget(a.budget)
    height, width = RES[a.res]
    name = f"lossy_{a.res}"
    p = WAN
    res = {"run": run_info(), "note": NOTE, "device": torch.cuda.get_device_name(0), "sta": a.sta, "sta_source": "STA paper: 3x3x3 tiles of 6x8x8",
           "part": {"title": f"Wan2.1-1.3B, {height}x{width}, {p['frames']} frames; generate {a.steps} steps, CFG {p['guidance']}",
                    "rows": [], **p, "height": height, "width": width}}
    shape = ["--frames", str(p["frames"]), "--height", str(height), "--width", str(width), "--text-len", str(p["text_len"]),
             "--dtype", "bf16", "--target", "sm_90"]
    import json  # the model's config: the input shapes
    cfg_path = os.path.join(a.model, "config.json")  # a transformer folder, or a pipeline's
    cfg = json.load(open(cfg_path if os.path.exists(cfg_path) else os.path.join(a.model, "transformer", "config.json")))
    f, h, w = (p["frames"] - 1) // 4 + 1, height // 8, width // 8
    g = torch.Generator().manual_seed(0)
    inputs = os.path.join(a.work, "fwd_inputs.safetensors")
    save_file({"hidden_states": torch.randn(1, cfg["in_channels"], f, h, w, generator=g), "timestep": torch.tensor([500]),
               "encoder_hidden_states": torch.randn(1, p["text_len"], cfg["text_dim"], generator=g)}, inputs)
    gin = os.path.join(a.work, "gen_inputs.safetensors")
    save_file({"prompt_embeds": torch.randn(1, p["text_len"], cfg["text_dim"], generator=g),
               "negative_prompt_embeds": torch.randn(1, p["text_len"], cfg["text_dim"], generator=g),
               "init_latents": torch.randn(1, cfg["in_channels"], f, h, w, generator=g)}, gin)
    bundles = ditrun_forwards(a, shape, inputs, res, a.out, name, budget)
    if not a.no_peer:
        peer_rows(torch, a, inputs, res, a.out, name, budget)
    if not a.no_generate:
        gen = ["--prompt-embeds", gin, "--negative-embeds", gin, "--init-latents", gin, "--steps", str(a.steps), "--guidance",
               str(p["guidance"]), "--shift", str(p["shift"])]
        ditrun_generates(a, bundles, gen, res, a.out, name, budget)
    res["complete"] = True
    res["plots"] = [os.path.basename(x) for x in plot(res, a.out, name)]
    for line in write_results(res, a.out, name):
        print(line)
    return 1 if any(r.get("failed") for r in res["part"]["rows"] if r["contender"] == "ditrun") else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pb.add_contender_flags(ap)
    ap.add_argument("--res", default="480p", help="480p or 720p")
    ap.add_argument("--model", help="the Wan2.1-1.3B folder (--dry-run: the tiny one)")
    ap.add_argument("--modes", default=",".join(MODE_NAMES), help="comma-separated of " + ", ".join(MODE_NAMES))
    ap.add_argument("--sta", default=STA_PAPER, help="sta's window T,H,W in patched tokens (default the STA paper's)")
    ap.add_argument("--sparse-dense-layers", type=int, default=0, help="the first L blocks dense in the sparse modes")
    ap.add_argument("--steps", type=int, default=WAN["steps"], help="generate's steps")
    ap.add_argument("--iters", type=int, default=5, help="timed forwards (median)")
    ap.add_argument("--budget", type=float, help="seconds for the call; what is left after them is skipped")
    ap.add_argument("--inputs", help="--dry-run: the tiny model's generate inputs (prompt_embeds, negative_prompt_embeds)")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated of " + ", ".join(PEERS) + " (diffusers eager always runs: "
                    "the others are measured against it)")
    pb.add_switches(ap, "--no-peer", "--no-generate", "--keep", "--dry-run")
    a = ap.parse_args()
    a.peers = [p for p in a.peers.split(",") if p]
    if any(p not in PEERS for p in a.peers):
        ap.error(f"--peers: expected {', '.join(PEERS)}, found {[p for p in a.peers if p not in PEERS][0]}")
    a.modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in a.modes if m not in MODE_NAMES]
    if bad:
        ap.error(f"--modes: expected {', '.join(MODE_NAMES)}, found {bad[0]}")
    if a.modes and a.modes[0] != "exact":
        a.modes = ["exact"] + [m for m in a.modes if m != "exact"]  # every measure is against it
    return pb.dispatch(ap, a, dry_run, run, ("ditc", "ditrun", "model", "work", "out"))


if __name__ == "__main__":
    sys.exit(main())
