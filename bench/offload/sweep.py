#!/usr/bin/env python3
"""The offload experiments of the ChunkFlow seed on one GPU, every point in one run.

For each frame count (or, with --batches, each batch size: FLUX.1's sweep): the same checkpoint
(any family: the inputs follow the bundle's manifest) compiled with --offload none, layerwise and
chunked (nothing resident), each timed with `ditrun bench` (median forward) and its peak
device memory (the first GPU's: rank 0's) polled from nvidia-smi; the planner's predictions (step time, peak memory,
per-block T_comp and T_pref) printed beside the measurements. Then, at the smallest frame
count, resident fractions 0/20/40/60/100%, and at a middle one, chunk sizes 4/16/64/256 MiB.
The crossover (the smallest frame count at which chunked runs within 3% of no offload) is
reported measured and predicted. With --calibrate, `ditrun calibrate` runs first (the middle
and the smallest frame count: rate, per-step cost, and the collectives of a multi-rank
topology) and its profile feeds every compile; otherwise --profile (a preset or file) does.

Writes RESULTS_DIR/offload.json, markdown tables on stdout, and PNG plots when matplotlib is
present. Needs a CUDA GPU, numpy and safetensors; no torch.

usage: bench/offload/sweep.py --ditc BIN --ditrun BIN --model DIR --out RESULTS_DIR
           [--frames 1,5,9,17,33,81 | --batches 1,2,4,8,12,16 [--fixed-frames F]]
           [--height 480] [--width 832] [--text-len 512]
           [--calibrate | --profile h200-sxm] [--iters 5] [--warmup 2] [--devices 1] [--target sm_90|cpu]
           [--extra COMPILE_FLAGS] [--run-flags DITRUN_FLAGS, e.g. "--offload-pace host"]
           [--modes none,layerwise,chunked] [--no-residency] [--no-chunks] [--chunk-frames F]
           [--clean] [--store DIR]

--modes picks the contenders (the first is the one the others are compared with), --clean
removes each bundle once measured (a 14B bundle holds 28 GiB of weights), --store compiles
through a store (bundles in STORE/bundles, so their blobs are linked into it, not copied),
and every bundle of the sweep links the one weights blob instead of writing it again. offload.json is rewritten after every point, so a run cut short keeps what
it measured; bench/offload/plot.py draws it (here when matplotlib is present, or anywhere later).
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ceilings import run_info  # noqa: E402
from gpumem import MemPoll, used_mib  # noqa: E402


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p


def bundle_inputs(bundle, path, seed):
    """Inputs for every input the bundle's manifest lists, at its shapes: normal noise for the
    latents and embeddings, the timestep at the middle of the schedule (500, or 0.5 where the
    model takes t/1000), guidance 3.5, masks all valid."""
    m = json.load(open(os.path.join(bundle, "manifest.json")))
    g = np.random.default_rng(seed)
    gen = m.get("generate", {})
    div = gen.get("timestep", {}).get("divisor", 1)
    out = {}
    for io in m["io"]["inputs"]:
        name, shape = io["name"], tuple(io["shape"])
        if name == "timestep":
            out[name] = np.full(shape, 500.0 / div, dtype=np.float32)
        elif name == "guidance":
            out[name] = np.full(shape, 3.5 * gen.get("guidance", {}).get("scale", 1), dtype=np.float32)
        elif "mask" in name:
            out[name] = np.ones(shape, dtype=np.float32 if io["dtype"].startswith("f") else np.int64)
        else:
            out[name] = g.standard_normal(shape, dtype=np.float32)
    save_file(out, path)
    return path


class Sweep:
    """One point per value of the swept axis: frames (batch 1) or batch (--fixed-frames or none)."""

    def __init__(self, a):
        self.a = a
        self.axis = "batch" if a.batches else "frames"
        self.inputs = {}

    def inputs_for(self, v, bundle):
        if v not in self.inputs:
            self.inputs[v] = bundle_inputs(bundle, os.path.join(self.a.out, f"inputs_{self.axis}{v}.safetensors"), v)
        return self.inputs[v]

    def compile(self, v, extra):
        shape = ["--frames", str(v)] if self.axis == "frames" else ["--batch", str(v)] + (
            ["--frames", str(self.a.fixed_frames)] if self.a.fixed_frames else [])
        cmd = [self.a.ditc, "compile", self.a.model] + shape + ["--height", str(self.a.height), "--width", str(self.a.width),
               "--text-len", str(self.a.text_len), "--dtype", "bf16", "--target", self.a.target,
               "-q"] + (["--store", self.a.store] if self.a.store else ["-o", os.path.join(self.a.out, "bundles")]) + extra
        return run(cmd).stdout.strip().splitlines()[-1].split()[2]

    def point(self, frames, extra):
        """Compile, measure and (with --clean) remove one bundle."""
        b = self.compile(frames, extra)
        r = self.measure(b, frames)
        if self.a.clean:
            subprocess.run(["rm", "-rf", b])
        return r

    def measure(self, bundle, frames):
        # Rank 0's GPU (the first): the planner's peaks are per rank.
        base = used_mib(0)
        poll = MemPoll(0)
        poll.start()
        p = run([self.a.ditrun, "bench", bundle, "--inputs", self.inputs_for(frames, bundle), "--steps", str(self.a.iters),
                 "--warmup", str(self.a.warmup), "--no-split", "--devices", str(self.a.devices)] + self.a.run_flags.split())
        poll.stop = True
        poll.join()
        ms = float(re.search(r"forward_ms_median ([0-9.]+)", p.stdout).group(1))
        st = re.search(r"prefetch_stall_ms ([0-9.]+) engine_host_ms ([0-9.]+)", p.stdout)
        m = json.load(open(os.path.join(bundle, "manifest.json")))
        return {"ms": ms, "peak_mib": poll.peak - base, "summary": m.get("summary", {}), "log": p.stderr.strip()[-600:],
                "stall_ms": float(st.group(1)) if st else 0.0, "engine_host_ms": float(st.group(2)) if st else 0.0}


def predicted(r):
    of = r["summary"].get("offload")
    if not of:
        return None
    # The summary's digest (the per-block schedule is in each rank's plan blob).
    return {"ms": of["predicted_step_ms"], "peak_mib": of["predicted_peak_bytes"] / 2**20,
            "t_comp_ms": of["t_comp_ms"], "t_pref_ms": of["t_pref_ms"],
            "f_star_gflop": of["f_star_per_block"] / 1e9, "f_block_gflop": r["summary"]["flops_per_block"] / 1e9}


def model_blocks(model):
    """The transformer's block counts as its config.json gives them (a pipeline folder's transformer/
    or the transformer folder itself): the sweeps run models cut to fewer blocks at the published widths."""
    for path in (os.path.join(model, "transformer", "config.json"), os.path.join(model, "config.json")):
        if os.path.exists(path):
            cfg = json.load(open(path))
            return {k: cfg[k] for k in ("num_layers", "num_single_layers") if k in cfg}
    return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ditc", required=True)
    ap.add_argument("--ditrun", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--frames", help="frame counts to sweep (default 1,5,9,17,33,81 unless --batches)")
    ap.add_argument("--batches", help="batch sizes to sweep instead (image models: FLUX.1 at 1024x1024)")
    ap.add_argument("--fixed-frames", type=int, help="with --batches: the frames of every point (video models)")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--target", default="sm_90", help="cpu: a dry run of the whole sweep on the CPU backend")
    ap.add_argument("--profile", default="h200-sxm")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--extra", default="", help="compile flags for every bundle, e.g. '--cp 2 --cp-mode ulysses'")
    ap.add_argument("--modes", default="none,layerwise,chunked")
    ap.add_argument("--no-residency", action="store_true", help="skip the resident-fraction sweep")
    ap.add_argument("--no-chunks", action="store_true", help="skip the chunk-size sweep")
    ap.add_argument("--chunk-frames", type=int, help="frame count of the chunk-size sweep (default: the middle one)")
    ap.add_argument("--clean", action="store_true", help="remove each bundle once measured")
    ap.add_argument("--store", help="compile through this store (the bundles share one weights blob)")
    ap.add_argument("--run-flags", default="", help="ditrun flags for every run, e.g. '--offload-pace host --overlap-collectives'")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.frames and a.batches:
        ap.error("--frames and --batches: sweep one axis")
    s = Sweep(a)
    frames = [int(f) for f in (a.batches or a.frames or "1,5,9,17,33,81").split(",")]
    extra = a.extra.split()
    modes = a.modes.split(",")
    res = {"axis": s.axis, s.axis if s.axis == "frames" else "batches": frames, "shape": [a.height, a.width], "extra": a.extra, "run_flags": a.run_flags, "modes": modes, "points": [],
           "run": run_info(), "blocks": model_blocks(a.model)}
    profile = a.profile
    if a.calibrate:
        # The middle shape rates the forward; the smallest separates the per-step cost (and,
        # with collectives, their latency) from the rates.
        fm, f0 = frames[len(frames) // 2], frames[0]
        b = s.compile(fm, extra)
        profile = os.path.join(a.out, "profile.json")
        cmd = [a.ditrun, "calibrate", b, "--inputs", s.inputs_for(fm, b), "--profile-out", profile, "--devices", str(a.devices)]
        b0 = s.compile(f0, extra) if f0 != fm else None
        if b0:
            cmd += ["--second", b0, "--second-inputs", s.inputs_for(f0, b0)]
        p = run(cmd + a.run_flags.split())
        if a.clean:
            subprocess.run(["rm", "-rf", b] + ([b0] if b0 else []))
        print(p.stdout.strip(), flush=True)
        res["calibration"] = json.load(open(profile))
        pin = re.search(r"([0-9.]+) MiB of weights page-locked in ([0-9.]+)s", p.stderr)
        if pin:
            res["pin"] = {"mib": float(pin.group(1)), "s": float(pin.group(2)), "how": os.environ.get("DIT_CUDA_PIN", "copy")}
    elif os.path.exists(profile):
        # The report checks predictions against the profile that made them: keep it with them.
        res["calibration"] = json.load(open(profile))
    else:
        res["profile_preset"] = profile
    prof = ["--profile", profile]
    out_json = os.path.join(a.out, "offload.json")

    def save():
        json.dump(res, open(out_json + ".tmp", "w"), indent=1)
        os.replace(out_json + ".tmp", out_json)

    print(f"\n| {s.axis} | mode | step ms | predicted | vs {modes[0]} | stall ms | peak MiB | predicted | F_block GFLOP | F* GFLOP |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for f in frames:
        none = None
        for mode in modes:
            flags = extra + ([] if mode == "none" else ["--offload", mode, "--residency", "0"] + prof)
            r = s.point(f, flags)
            pr = predicted(r)
            if none is None:
                none = r
            pt = {s.axis: f, "mode": mode, "ms": r["ms"], "peak_mib": r["peak_mib"], "predicted": pr, "stall_ms": r["stall_ms"],
                  "engine_host_ms": r["engine_host_ms"]}
            res["points"].append(pt)
            save()
            print(f"| {f} | {mode} | {r['ms']:.1f} | {pr['ms'] if pr else float('nan'):.1f} | {r['ms'] / none['ms']:.3f} | {r['stall_ms']:.1f} | "
                  f"{r['peak_mib']:.0f} | {pr['peak_mib'] if pr else float('nan'):.0f} | "
                  f"{pr['f_block_gflop'] if pr else float('nan'):.0f} | {pr['f_star_gflop'] if pr else float('nan'):.0f} |", flush=True)

    def point(f, mode):
        return next(p for p in res["points"] if p[s.axis] == f and p["mode"] == mode)

    def crossover_measured():
        if "none" not in modes or "chunked" not in modes:
            return None
        return next((f for f in frames if point(f, "chunked")["ms"] <= 1.03 * point(f, "none")["ms"]), None)

    def crossover_predicted():
        if "chunked" not in modes:
            return None
        return next((f for f in frames if point(f, "chunked")["predicted"]["f_block_gflop"] >=
                     point(f, "chunked")["predicted"]["f_star_gflop"]), None)

    res["crossover_measured"], res["crossover_predicted"] = crossover_measured(), crossover_predicted()
    unit = "frames" if s.axis == "frames" else "(batch)"
    print(f"\ncrossover (chunked within 3% of none): measured at {res['crossover_measured']} {unit}, "
          f"predicted (F_block >= F*) at {res['crossover_predicted']} {unit}")

    f0 = frames[0]
    res["residency"], res["chunks"] = [], []
    res["residency_frames"], res["chunk_frames"] = f0, a.chunk_frames or frames[len(frames) // 2]
    if not a.no_residency:
        print(f"\nresident fraction at {s.axis} {f0}\n| resident | step ms | predicted | peak MiB | predicted |\n| --- | --- | --- | --- | --- |")
        for rf in [0, 0.2, 0.4, 0.6, 1.0]:
            r = s.point(f0, extra + ["--offload", "chunked", "--residency", str(rf)] + prof)
            pr = predicted(r)
            res["residency"].append({"resident": rf, "ms": r["ms"], "peak_mib": r["peak_mib"], "predicted": pr})
            save()
            print(f"| {rf:.0%} | {r['ms']:.1f} | {pr['ms']:.1f} | {r['peak_mib']:.0f} | {pr['peak_mib']:.0f} |", flush=True)

    fm = res["chunk_frames"]
    if not a.no_chunks:
        print(f"\nchunk size at {s.axis} {fm}\n| chunk MiB | step ms | peak MiB |\n| --- | --- | --- |")
        for c in [4, 16, 64, 256]:
            r = s.point(fm, extra + ["--offload", "chunked", "--residency", "0", "--chunk-mb", str(c)] + prof)
            res["chunks"].append({"chunk_mb": c, "ms": r["ms"], "peak_mib": r["peak_mib"]})
            save()
            print(f"| {c} | {r['ms']:.1f} | {r['peak_mib']:.0f} |", flush=True)

    save()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib not installed: no plots here (bench/offload/plot.py draws offload.json anywhere)")
        return
    from plot import plot
    print("plots:", plot(res, os.path.join(a.out, "offload_sweep.png")))

if __name__ == "__main__":
    main()
