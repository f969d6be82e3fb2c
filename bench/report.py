#!/usr/bin/env python3
"""README.md's figures, rendered from the committed results under bench/results/.

Every measured figure of README.md lives between markers

    <!-- report:NAME -->
    ...generated text...
    <!-- /report:NAME -->

whose content this script computes from results files (each passage names the files it reads;
nothing in it is typed by hand). Outside the markers, README.md may hold no measured figure
(a number with ms, s, GiB, MiB, GB/s, TFLOP/s, % or x after it): --check says where one is.

usage: bench/report.py [--check | --write] [--readme README.md] [--results bench/results]
                       [--tests tests]
       bench/report.py --render NAME [--results DIR] [--allow-dry-run]

--check (the default) exits 1 and prints a unified diff when README.md differs from what the
results give; --write rewrites README.md's passages in place; --render prints one passage
(the wan22 passages are checked once README.md has them: OPTIONAL below). Python's standard library only:
CI runs it where nothing else is installed.
"""
import argparse
import difflib
import json
import math
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = re.compile(r"<!-- report:([a-z0-9_-]+) -->\n(.*?)<!-- /report:\1 -->\n", re.S)


class ReportError(Exception):
    pass


class Results:
    """The results directory; every read is recorded so a passage can name its sources."""

    def __init__(self, results, tests):
        self.dir, self.tests = results, tests

    def json(self, rel):
        path = os.path.join(self.dir, rel)
        try:
            with open(path) as fh:
                return json.load(fh)
        except (OSError, ValueError) as e:
            raise ReportError(f"{path}: {e}")

    def text(self, path):
        try:
            with open(path) as fh:
                return fh.read()
        except OSError as e:
            raise ReportError(f"{path}: {e}")


def need(d, key, where):
    if not isinstance(d, dict) or key not in d or d[key] is None:
        raise ReportError(f"{where}: field '{key}' missing")
    return d[key]


def src(rel, d=None):
    """A results file's name and, where the file records it, its run's date and commit."""
    run = (d or {}).get("run") or {}
    when = f", run of {run['date_utc'][:10]}" if run.get("date_utc") else ""
    return f"`bench/results/{rel}`{when}" + (f" at {run['commit']}" if when and run.get("commit") else "")


def pct(x, digits=1):
    """A relative difference as a signed percentage."""
    return f"{x * 100:+.{digits}f}%"


def gib(mib):
    # nvidia-smi and the sweep report MiB (2^20 bytes); a GiB is 1024 of them.
    return f"{mib / 1024:.2f} GiB"


def wrap(par, width=96):
    """README paragraphs and list items wrap at the README's width; tables stay one row a line."""
    if not par or par.startswith("|"):
        return par
    ind = "  " if par.startswith("- ") else ""
    return textwrap.fill(par, width, subsequent_indent=ind, break_long_words=False, break_on_hyphens=False)


def sci(x):
    m, e = f"{x:.0e}".split("e")
    return f"{m}e{int(e)}"


def sig3(v):
    """The planner rounds every profile rate to three significant digits (passes/offload.c)."""
    return float(f"{v:.3g}") if v and v > 0 else (v or 0.0)


# ---------------------------------------------------------------------------------------------
# Offload sweeps (bench/offload/sweep.py)


class Sweep:
    def __init__(self, res, rel, profile_rel=None):
        self.rel = rel
        self.d = res.json(rel)
        self.points = need(self.d, "points", rel)
        self.profile_rel = profile_rel
        self.profile = res.json(profile_rel) if profile_rel else self.d.get("calibration")
        if self.profile is None:
            raise ReportError(f"{rel}: no 'calibration' recorded and no profile file named for it")
        self.check_profile()

    def point(self, frames, mode):
        for p in self.points:
            if p["frames"] == frames and p["mode"] == mode:
                return p
        raise ReportError(f"{self.rel}: no point at {frames} frames, mode {mode}")

    def has(self, frames, mode):
        return any(p["frames"] == frames and p["mode"] == mode for p in self.points)

    def frames(self):
        return need(self.d, "frames", self.rel)

    def check_profile(self):
        """The predictions must be the profile's: the block count implied by its rate is a whole
        number and the compute time is that many blocks at its rate (plus its per-step cost)."""
        p = sig3(need(self.profile, "p_peak_tflops", self.profile_rel or self.rel))
        per_step = sig3(self.profile.get("step_overhead_us", 0))
        for pt in self.points:
            pr = pt.get("predicted")
            if not pr:
                continue
            block_pref_ms = pr["f_star_gflop"] / p
            n = pr["t_pref_ms"] / block_pref_ms
            comp = round(n) * pr["f_block_gflop"] / p
            extra = pr["t_comp_ms"] - comp
            ok = abs(n - round(n)) < 1e-3 and extra > -1e-3 * comp and (per_step > 0 or abs(extra) < 1e-4 * comp)
            if not ok:
                raise ReportError(f"{self.rel}: the predictions at {pt['frames']} frames ({pt['mode']}) are not those of the "
                                  f"profile {self.profile_rel or 'recorded in it'} ({p:g} TFLOP/s): {n:.4f} blocks, "
                                  f"compute {pr['t_comp_ms']:.3f} ms against {comp:.3f} ms at that rate")

    def calibrated_frames(self):
        """The frame counts the profile measured, when it measured this sweep's model: the sweep
        calibrates at the middle frame count and, with a second shape, the smallest (sweep.py);
        each is confirmed by the measured forward of the unoffloaded point at that count."""
        m = need(self.profile, "measured", "profile")
        fr = self.frames()
        cand = [(fr[len(fr) // 2], m.get("forward_ms_median"))]
        if m.get("second"):
            cand.append((fr[0], m.get("second_forward_ms_median")))
        out = []
        for f, ms in cand:
            if ms and self.has(f, "none") and abs(self.point(f, "none")["ms"] / ms - 1) < 0.05:
                out.append(f)
        return out

    def streamed_gb(self):
        pr = next(p["predicted"] for p in self.points if p.get("predicted"))
        return pr["t_pref_ms"] * 1e-3 * sig3(self.profile["bw_h2d_gbs"])

    def same_model_as_profile(self):
        """The calibration copies the bundle's whole weights blob once (h2d_bytes); a sweep of the
        same model streams about as many bytes per forward."""
        b = self.profile.get("measured", {}).get("h2d_bytes")
        return b is not None and abs(self.streamed_gb() / (b / 1e9) - 1) < 0.1


def errors(sw, in_sample, mode):
    """Predicted against measured step time of one mode's points, split into in-sample (a frame
    count the profile was calibrated at) and out-of-sample."""
    inn, out = [], []
    for p in sw.points:
        if p.get("predicted") and p["mode"] == mode:
            e = (p["predicted"]["ms"] / p["ms"] - 1, p["frames"])
            (inn if p["frames"] in in_sample else out).append(e)
    return inn, out


def worst(errs):
    if not errs:
        return "-"
    e, f = max(errs, key=lambda x: abs(x[0]))
    return f"{pct(e)} ({f})"


def frames_word(n):
    return f"{n} frame" if n == 1 else f"{n} frames"


def listing(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def model_of(res, sw):
    """Which model a profile measured: the calibration copies its bundle's whole weights blob."""
    b = sw.profile.get("measured", {}).get("h2d_bytes")
    m = re.search(r"blob\s+weights\s+\S+\s+(\d+) bytes", res.text(os.path.join(res.dir, "inspect_1.3b_480p.txt")))
    return "Wan2.1-1.3B" if m and b == int(m.group(1)) else f"a model of {b / 1e9:.2f} GB"


def render_offload(res):
    one = Sweep(res, "offload/one_gpu.json")
    full = Sweep(res, "offload/one_gpu_full.json", "offload/one_gpu_full_profile.json")
    big = Sweep(res, "offload/wan14b_720p.json", "offload/wan14b_720p_profile.json")
    con = Sweep(res, "offload/contention.json", "offload/contention_profile.json")
    pace = Sweep(res, "offload/contention_pace_host.json", "offload/contention_profile.json")
    L = []
    L.append("Measured on H200s with random weights at the real configurations; step time is the median "
             "forward of `ditrun bench`, peak memory rank 0's device memory as nvidia-smi reports it "
             "(MiB; GiB = 1024 MiB). Each figure names the results file it comes from (and its run's date where "
             "the file records one); different files are different runs.")
    L.append("")

    def ratio(sw, f, mode, ref):
        return sw.point(f, mode)["ms"] / sw.point(f, ref)["ms"]

    def cost(sw, f):
        p, n = sw.point(f, "chunked"), sw.point(f, "none")
        return (f"{pct(p['ms'] / n['ms'] - 1)} at {frames_word(f)} ({p['ms']:.1f} against {n['ms']:.1f} ms) for "
                f"{(1 - p['peak_mib'] / n['peak_mib']) * 100:.0f}% less memory ({p['peak_mib']} against "
                f"{n['peak_mib']} MiB)")

    f0 = one.frames()[0]
    fr = [f for f in one.frames() if f != f0]
    L.append(f"- Wan2.1-1.3B at 480p on one GPU ({src(one.rel, one.d)}): chunked offload of every block costs "
             + "; ".join(cost(one, f) for f in fr) + "; layerwise "
             + listing([pct(ratio(one, f, 'layerwise', 'none') - 1) for f in fr])
             + f". Chunked is within 3% of no offload from {frames_word(one.d['crossover_measured'])} on, where "
             f"the F* model predicts it ({one.d['crossover_predicted']}); at {frames_word(f0)}, below F*, it takes "
             f"{ratio(one, f0, 'chunked', 'none'):.2f}x as long.")
    xo = full.d["crossover_measured"]
    extra = [f for f in full.frames() if f not in one.frames()]
    kind = "two-shape" if full.profile.get("step_overhead_us") else "one-shape"
    L.append(f"- A run with a {kind} calibration ({src(full.rel, full.d)}) adds {listing([str(f) for f in extra])} frames: "
             "chunked " + "; ".join(cost(full, f) for f in extra if f >= xo)
             + f"; below the crossover " + listing([f"{ratio(full, f, 'chunked', 'none'):.2f}x as long at {f}"
                                                   for f in extra if f < xo]) + ".")
    f = big.frames()[-1]
    p, n = big.point(f, "chunked"), big.point(f, "none")
    L.append(f"- Wan2.1-14B at 720p, {frames_word(f)} ({src(big.rel, big.d)}): chunked costs {pct(p['ms'] / n['ms'] - 1)} "
             f"({p['ms']:.1f} against {n['ms']:.1f} ms) for {(1 - p['peak_mib'] / n['peak_mib']) * 100:.0f}% less "
             f"memory ({gib(p['peak_mib'])} against {gib(n['peak_mib'])}).")
    lo = con.frames()[0]
    cl, cc, cn = con.point(lo, "layerwise"), con.point(lo, "chunked"), con.point(lo, "none")
    rest = [f for f in con.frames() if f != lo]
    L.append(f"- Two GPUs, Ulysses-2 with `NCCL_P2P_DISABLE=1` (collectives through host memory, beside the copies; "
             f"{src(con.rel, con.d)}): at {frames_word(lo)}, below F*, chunked loses to layerwise, {cc['ms']:.1f} against "
             f"{cl['ms']:.1f} ms ({cc['ms'] / cl['ms']:.2f}x as long; the planner predicted {cc['predicted']['ms']:.1f} "
             f"against {cl['predicted']['ms']:.1f}), and no offload takes {cn['ms']:.1f} ms. From {rest[0]} frames on "
             "chunked is " + listing([f"{ratio(con, f, 'layerwise', 'chunked'):.2f}x" for f in rest])
             + " faster than layerwise at " + listing([str(f) for f in rest]) + " frames, "
             + listing([pct(ratio(con, f, 'chunked', 'none') - 1) for f in rest]) + " against no offload. "
             f"Paced by the host instead (`--offload-pace host`; {src(pace.rel, pace.d)}, a separate run with the same "
             "profile) chunked takes " + listing([f"{pace.point(f, 'chunked')['ms']:.1f} ms at {f}" for f in pace.frames()])
             + " frames (stream-paced above: " + listing([f"{con.point(f, 'chunked')['ms']:.1f}" for f in pace.frames()])
             + ").")
    L.append("")
    L.append("The planner's step time against the measured one (predicted / measured - 1; the largest error "
             "of each set, at its frame count). In-sample points are at a frame count the profile was "
             "calibrated at, out-of-sample points are not:")
    L.append("")
    L.append("| run | profile calibrated at | in-sample chunked | layerwise | out-of-sample chunked | layerwise |")
    L.append("| --- | --- | --- | --- | --- | --- |")
    for sw in (one, full, big, con):
        if sw.same_model_as_profile():
            cal = sw.calibrated_frames()
            where = listing([str(f) for f in cal]) + " frames, same run"
        else:
            cal, m = [], sw.profile["measured"]
            where = (f"{model_of(res, sw)}, one shape ({m['forward_ms_median']:.1f} ms forward; "
                     f"`{sw.profile_rel.split('/')[-1]}`)")
        ci, co = errors(sw, cal, "chunked")
        li, lo_ = errors(sw, cal, "layerwise")
        L.append(f"| `{sw.rel.split('/')[-1]}` | {where} | {worst(ci)} | {worst(li)} | {worst(co)} | {worst(lo_)} |")
    for sw in (one, full):
        r = sw.d.get("residency") or []
        if r:
            f = sw.d["residency_frames"]
            e = [(x["predicted"]["ms"] / x["ms"] - 1, f"{x['resident']:.0%} resident") for x in r]
            cells = [worst(e), "", "-", ""] if f in sw.calibrated_frames() else ["-", "", worst(e), ""]
            L.append(f"| `{sw.rel.split('/')[-1]}`, resident 0-100% at {frames_word(f)} | | " + " | ".join(cells) + " |")
    return "\n".join(wrap(x) for x in L) + "\n"


# ---------------------------------------------------------------------------------------------
# Status: the forward, generate and parallel benchmarks, and what the CPU goldens enforce


def golden_limits(res):
    """The max relative errors tests/integration/goldens.sh passes to st_compare."""
    path = os.path.join(res.tests, "integration", "goldens.sh")
    lim = sorted({float(x) for x in re.findall(r"st_compare\"?\s+\S+\s+\S+\s+\S+\s+([0-9.e+-]+)", res.text(path))})
    if not lim:
        raise ReportError(f"{path}: no st_compare limit found")
    return lim


def ceiling_sentence(fw):
    """Ceilings measured in the benchmark's own run, the load-time GEMM choice and the memory check,
    where the results file has them (older runs do not)."""
    out = []
    vc, c = fw.get("vs_ceiling"), fw.get("ceilings")
    if vc and c:
        out.append(f"Against the ceilings measured in the same run: the GEMMs at {vc['gemm'] * 100:.0f}% of the rate "
                   f"torch.matmul reaches at the same shapes ({vc['gemm_tflops']:.0f} TFLOP/s), attention at "
                   f"{vc['attention_tflops']:.0f} TFLOP/s, {vc['attention'] * 100:.0f}% of torch SDPA's cuDNN backend at "
                   f"the same shapes, the other ops at {vc['other_bandwidth'] * 100:.0f}% of the device copy bandwidth.")
    if fw.get("ditrun_heuristic_gemm_ms"):
        out.append(f"With cuBLASLt's first heuristic algorithm instead of the ones timed at load: "
                   f"{fw['ditrun_heuristic_gemm_ms']:.1f} ms.")
    if "runtime_allocated_mib" in fw:
        out.append(f"The runtime allocated {fw['runtime_allocated_mib']:.1f} MiB against a predicted "
                   f"{fw['runtime_predicted_mib']:.1f} MiB"
                   + ("" if fw.get("runtime_within_prediction") else " (over the prediction)") + ".")
    return (" ".join(out) + " ") if out else ""


def render_status(res):
    fw = res.json("forward_results.json")
    gen = res.json("generate_results.json")
    par = res.json("parallel.json")
    lim = golden_limits(res)
    L = []
    L.append(f"CPU parity: `tests/integration/goldens.sh` requires each tiny Wan config's forward and 4-step "
             f"generates (UniPC and Euler, with CFG) to match diffusers' own fp32 outputs to a max relative error "
             f"(max|ours - ref| / max|ref|) of at most {' / '.join(sci(x) for x in lim)}.")
    L.append("")
    ours = need(fw, "ditrun_ms", "forward_results.json")
    L.append(f"GPU, one H200, Wan2.1-1.3B 480p 81 frames, random weights ({src('forward_results.json', fw)}, one run): "
             f"{ours:.1f} ms per forward against diffusers' {fw['eager_ms']:.1f} ms eager "
             f"({fw['eager_ms'] / ours:.2f}x) and {fw['compiled_ms']:.1f} ms under torch.compile "
             f"({fw['compiled_ms'] / ours:.2f}x), output cosine {fw['parity']['cosine']:.5f} to diffusers eager. "
             + ceiling_sentence(fw) +
             f"A 50-step generate with CFG ({src('generate_results.json', gen)}, a separate benchmark): "
             f"{gen['ditrun_loop_s']:.1f} s against diffusers' loop {gen['diffusers_loop_s']:.1f} s "
             f"({gen['diffusers_loop_s'] / gen['ditrun_loop_s']:.2f}x), final latents cosine {gen['cosine']:.6f}.")
    L.append("")
    one = need(par, "one_gpu_step_ms", "parallel.json")
    parts = []
    for r in need(par, "rows", "parallel.json"):
        s = f"`{r['topology']}` {one / need(r, 'step_ms_processes', 'parallel.json rows'):.2f}x"
        if r.get("step_ms_overlap"):
            s += f" ({one / r['step_ms_overlap']:.2f}x overlapped)"
        parts.append(s)
    L.append(f"Two H200s, one process per GPU, generate step with CFG against one GPU's {one:.1f} ms "
             f"({src('parallel.json', par)}, one run): " + listing(parts) + ". This run predates overlapped "
             "collectives as the default: its plain figures keep collectives in plan order, the overlapped ones "
             "are its `--overlap-collectives` variant.")
    return "\n".join(wrap(x) for x in L) + "\n"


# ---------------------------------------------------------------------------------------------
# Wan2.2 at the published sizes (bench/wan22_forward.py, bench/wan22_generate.py)


def measured(res, rel):
    """A results file that must come from a GPU run: a dry run's made-up times are refused
    unless the caller asked to see them (report.py --render --allow-dry-run)."""
    d = res.json(rel)
    if d.get("dry_run") and not getattr(res, "allow_dry_run", False):
        raise ReportError(f"{rel}: written by a --dry-run (made-up times), not a measurement")
    return d


def blocks_phrase(d):
    return (f"{d['layers']} of {d['published_layers']} blocks" if d["layers"] != d["published_layers"]
            else f"all {d['layers']} blocks")


def wan22_expert_text(v, d, e, rel):
    """One expert's forward of a wan22_forward results file: time against diffusers eager and
    torch.compile, parity, peak memory."""
    who = f"`{e['name']}` at timestep {e['timestep']}" if len(d["experts"]) > 1 or v == "a14b" else \
        f"timestep {e['timestep']} (first frame's tokens at 0)"
    if e.get("failed") or not e.get("ditrun_ms"):
        return f"{who}: ditrun failed"
    p = need(e, "parity", rel)
    s = (f"{who}: {e['ditrun_ms']:.1f} ms per forward against diffusers' {e['eager_ms']:.1f} ms eager "
         f"({e['eager_ms'] / e['ditrun_ms']:.2f}x)")
    if e.get("compiled_ms"):
        # Truncated to three decimals: rounding would show 1.0995x as the 1.1x it falls short of.
        s += f" and {e['compiled_ms']:.1f} ms under torch.compile ({math.floor(e['compiled_ms'] / e['ditrun_ms'] * 1000) / 1000:.3f}x)"
    return s + (f", output cosine {p['cosine']:.5f} to diffusers eager (relative L2 {p['rel_l2']:.1e}), peak "
                f"{e['ditrun_peak_gib']:.2f} GiB (nvidia-smi, whole process) against {e['eager_peak_gib']:.2f} GiB "
                f"(torch's allocator)")


def render_wan22(res):
    """One paragraph per variant: each expert's forward against diffusers eager and
    torch.compile, parity, peak memory."""
    names = {"a14b": "Wan2.2-A14B", "ti2v-5b": "Wan2.2-TI2V-5B"}
    L = []
    for v in ("a14b", "ti2v-5b"):
        rel = f"wan22_forward_{v}.json"
        d = measured(res, rel)
        parts = [wan22_expert_text(v, d, e, rel) for e in need(d, "experts", rel)]
        lat = d["latent"]
        L.append(f"- {names[v]}, {blocks_phrase(d)} at the published widths, {d['width']}x{d['height']}, {d['frames']} frames "
                 f"(latents {lat[0]}x{lat[1]}x{lat[2]}x{lat[3]}, {d['tokens']} tokens), text {d['text_len']}, random weights "
                 f"by diffusers' default initialisation ({src(rel, d)}, one run): " + "; ".join(parts) + "."
                 + ("" if d.get("complete") else " The run stopped before its end."))
        # An expert measured again in a later run of its own (bench/wan22_forward.py --expert NAME).
        for name in ("transformer", "transformer_2"):
            rel2 = f"wan22_forward_{v}_{name}.json"
            if os.path.exists(os.path.join(res.dir, rel2)):
                d2 = measured(res, rel2)
                L[-1] += f" In a later run ({src(rel2, d2)}): " + "; ".join(
                    wan22_expert_text(v, d2, e, rel2) for e in need(d2, "experts", rel2)) + "."
        # A later run whose forwards prepare only the expert they run (the run above held both).
        rel1 = f"wan22_forward_{v}_one_expert.json"
        if os.path.exists(os.path.join(res.dir, rel1)):
            d1 = measured(res, rel1)
            L[-1] += (f" With one expert prepared per forward ({src(rel1, d1)}, without torch.compile): " + "; ".join(
                f"`{e['name']}` {e['ditrun_ms']:.1f} ms against {e['eager_ms']:.1f} ms eager, peak {e['ditrun_peak_gib']:.2f} "
                f"GiB against {e['eager_peak_gib']:.2f} GiB" for e in d1["experts"] if e.get("ditrun_ms")) + ".")
    return "\n".join(wrap(x) for x in L) + "\n"


def render_wan22_generate(res):
    """The A14B generate across the boundary (and under a memory budget) and the TI2V
    image-to-video generate, each against the diffusers pipeline."""
    L = []
    for part, name in (("a14b", "Wan2.2-A14B"), ("ti2v", "Wan2.2-TI2V-5B image-to-video")):
        rel = f"wan22_generate_{part}.json"
        if not os.path.exists(os.path.join(res.dir, rel)):
            L.append(f"- {name}: no results file (`bench/results/{rel}`) in this set.")
            continue
        d = measured(res, rel)
        head = (f"- {name}, {d['steps']} UniPC steps with CFG, {blocks_phrase(d)} per expert, {d['width']}x{d['height']}, "
                f"{d['frames']} frames ({src(rel, d)}): ")
        r, g = d.get("ditrun") or {}, d.get("diffusers") or {}
        if r.get("refused"):
            L.append(head + f"ditrun refused: {r['refused'].splitlines()[0][:200]}.")
            continue
        if r.get("failed") or not r.get("loop_s") or not g.get("loop_s"):
            L.append(head + "ditrun failed.")
            continue
        ex = r["experts"]
        s = (head + f"{r['loop_s']:.1f} s against diffusers' pipeline {g['loop_s']:.1f} s ({g['loop_s'] / r['loop_s']:.2f}x), "
             f"final latents cosine {r['cosine']:.5f}")
        if "transformer_2" in ex:
            n1 = ex.count("transformer")
            s += (f"; {n1} steps on `transformer` and {len(ex) - n1} on `transformer_2`, "
                  + ("as the pipeline chose" if d.get("experts_agree") else "not as the pipeline chose"))
        b = d.get("budget")
        if b and b.get("refused"):
            s += (f". Under `--memory-budget` ({b['budget_gib']:g} GiB for the published model, "
                  f"{b['budget_gib_compiled']:.2f} GiB at this size) ditc refused: {b['refused'].splitlines()[-1][:160]}")
        elif b and b.get("loop_s") and b.get("around_switch"):
            w = b["around_switch"]
            s += (f". Under `--memory-budget` ({b['budget_gib']:g} GiB for the published model, {b['budget_gib_compiled']:.2f} "
                  f"GiB at this size): {b['loop_s']:.1f} s, peak {b['peak_gib']:.2f} GiB against {r['peak_gib']:.2f} GiB "
                  f"resident, steps {w['step'] - 1} / {w['step']} / {w['step'] + 1} around the switch {w['before']:.2f} / "
                  f"{w['switch']:.2f} / {w['after'] or 0:.2f} s, cosine {b['cosine']:.5f}")
            idx = [j for j in (w["step"] - 2, w["step"] - 1, w["step"]) if 0 <= j < min(len(b["step_s"]), len(r["step_s"]))]
            if idx:
                cost = sum(b["step_s"][j] for j in idx) / sum(r["step_s"][j] for j in idx) - 1
                s += f"; those three steps take {100 * cost:+.1f}% against the resident run's"
        elif b:
            s += ". The `--memory-budget` run failed"
        L.append(s + ".")
    if os.path.exists(os.path.join(res.dir, "wan22_generate_a14b-swap.json")):
        L.append(swap_sentence(res))
    return "\n".join(wrap(x) for x in L) + "\n"


SWAP_MEMORY_RE = re.compile(r"^ditrun: memory: ([0-9.]+) MiB allocated, ([0-9.]+) MiB predicted", re.M)


def swap_sentence(res):
    """Wan2.2-A14B whole, both experts resident and under a memory budget (bench/wan22_generate.py
    --part a14b-swap): the runtime's memory lines come from the run's committed ditrun logs."""
    rel = "wan22_generate_a14b-swap.json"
    d = measured(res, rel)
    head = (f"- Wan2.2-A14B whole (both experts, {d['published_layers']} blocks each, random weights at the published config), "
            f"{d['width']}x{d['height']}, {d['frames']} frames, {d['steps']} UniPC steps without CFG across the boundary "
            f"({src(rel, d)}): ")
    parts = []
    for key, what in (("resident", "both experts resident"), ("budget", f"under `--memory-budget {d['budget_gib']:g}`")):
        r = d.get(key) or {}
        if not r.get("step_s"):
            parts.append(f"{what}: no run")
            continue
        log = os.path.join(res.dir, f"wan22_generate_a14b-swap_{key}.log")
        mem = SWAP_MEMORY_RE.findall(open(log).read()) if os.path.exists(log) else []
        m = f"{float(mem[-1][1]) / 1024:.2f} GiB predicted and allocated by the runtime, " if mem and mem[-1][0] == mem[-1][1] else ""
        w = r.get("around_switch") or {}
        parts.append(f"{what}: {m}peak {r['peak_gib']:.2f} GiB (nvidia-smi, whole process), steps "
                     + " / ".join(f"{x:.2f}" for x in r["step_s"]) + f" s (`transformer_2` from step {w.get('step')})")
    s = head + "; ".join(parts)
    b, r = d.get("budget") or {}, d.get("resident") or {}
    if b.get("step_s") and r.get("step_s") and b.get("around_switch"):
        i = b["around_switch"]["step"] - 1
        idx = [j for j in (i - 1, i, i + 1) if 0 <= j < min(len(b["step_s"]), len(r["step_s"]))]
        s += (f". The three steps around the switch take {100 * (sum(b['step_s'][j] for j in idx) / sum(r['step_s'][j] for j in idx) - 1):+.1f}% "
              f"against the resident run's")
    if b.get("swap"):
        s += f"; ditrun: {b['swap']}"
    pv = d.get("budget_vs_resident")
    if pv:
        s += f"; final latents against the resident run's: cosine {pv['cosine']:.6f}"
    elif "identical" in d:
        s += f"; final latents {'identical to' if d['identical'] else 'not bit-identical to'} the resident run's (no cosine recorded)"
    return s + "."


def forward_sentence(e, where):
    """One forward's times against diffusers eager and torch.compile, parity and peak memory."""
    p = need(e, "parity", where)
    s = f"{e['ditrun_ms']:.1f} ms against diffusers' {e['eager_ms']:.1f} ms eager ({e['eager_ms'] / e['ditrun_ms']:.2f}x)"
    if e.get("compiled_ms"):
        # Truncated to three decimals: rounding would show 1.0995x as the 1.1x it falls short of.
        s += f" and {e['compiled_ms']:.1f} ms under torch.compile ({math.floor(e['compiled_ms'] / e['ditrun_ms'] * 1000) / 1000:.3f}x)"
    # The runtime's own device allocations (tensors, arena, workspace: what torch's allocator
    # counts on diffusers' side) beside the whole process, which adds the CUDA context.
    mine = (f", of which ditrun's device allocations {e['runtime_allocated_mib'] / 1024:.2f} GiB"
            if e.get("runtime_allocated_mib") else "")
    # Diffusers' whole process by the same measure as ditrun's, where the run took it.
    theirs = (f"{e['eager_process_peak_gib']:.2f} GiB (nvidia-smi, whole process; {e['eager_peak_gib']:.2f} GiB in torch's allocator)"
              if e.get("eager_process_peak_gib") else f"{e['eager_peak_gib']:.2f} GiB (torch's allocator)")
    # The same bundle again with each linear group as one batched GEMM (DIT_BENCH_LINEAR_GROUPS=1), where the run took it.
    g = e.get("groups_parity")
    groups = (f"; with linear groups batched (DIT_CUDA_LINEAR_GROUPS=batched) {e['ditrun_groups_ms']:.1f} ms, cosine {g['cosine']:.5f}"
              if g and e.get("ditrun_groups_ms") else "")
    # The clocks each side's sustained forwards held (DIT_BENCH_CLOCKS=1), where the run took them.
    c, t = e.get("ditrun_clocks"), e.get("compiled_clocks")
    clocks = (f"; SM clock over sustained forwards {c['sm_mhz']:.0f} MHz at {c['power_w']:.0f} W (ditrun) against {t['sm_mhz']:.0f} MHz "
              f"at {t['power_w']:.0f} W (torch.compile)" if c and t else "")
    if clocks and all(any(int(r, 16) & 0x4 for r in x.get("reasons", [])) for x in (c, t)):
        clocks += ", both held down by the software power cap (nvidia-smi's clock-limiting reasons)"
    if clocks and e.get("compiled_ms"):  # power times the timed forward: the energy a forward draws
        clocks += (f"; about {c['power_w'] * e['ditrun_ms'] / 1e3:.0f} J a forward against "
                   f"{t['power_w'] * e['compiled_ms'] / 1e3:.0f} J (median power times forward time)")
    return s + (f", cosine {p['cosine']:.5f} to diffusers eager (relative L2 {p['rel_l2']:.1e}), peak {e['ditrun_peak_gib']:.2f} GiB "
                f"(nvidia-smi, whole process{mine}) against {theirs}{groups}{clocks}")


def generate_sentence(g, what):
    p = g.get("parity")
    if not p:
        return f"the {what} failed"
    return f"the {what}: final latents cosine {p['cosine']:.5f} (relative L2 {p['rel_l2']:.1e}) against the diffusers pipeline's"


def render_mmdit(res):
    """FLUX.1-dev, HunyuanVideo and Qwen-Image forwards and short generates against diffusers,
    and FLUX.1-dev's offload sweep over batch sizes."""
    L = []
    rel = "flux_forward.json"
    d = measured(res, rel)
    dl, sl = d["layers"]
    blocks = "all 19 + 38 blocks" if (dl, sl) == (19, 38) else f"{dl} of 19 double and {sl} of 38 single blocks"
    parts = [f"batch {e['batch']}: " + ("ditrun failed" if e.get("failed") else forward_sentence(e, rel)) for e in d["forwards"]]
    g = d.get("generate")
    L.append(f"- FLUX.1-dev, {blocks}, {d['width']}x{d['height']} ({d['tokens']} image and {d['text_len']} text tokens), random "
             f"weights by diffusers ({src(rel, d)}): " + "; ".join(parts)
             + (f"; {generate_sentence(g, '4-step generate (guidance 3.5)')}" if g else "") + ".")
    # Later forward-only runs (one batch size a call, every contender in it).
    for rel in FLUX_FORWARD_RUNS:
        if os.path.exists(os.path.join(res.dir, rel)):
            d = measured(res, rel)
            L.append(f"- FLUX.1-dev forward, later ({src(rel, d)}): " +
                     "; ".join(f"batch {e['batch']}: " + ("ditrun failed" if e.get("failed") else forward_sentence(e, rel))
                               for e in d["forwards"]) + ".")
    for rel, name in (("hunyuan_forward.json", "HunyuanVideo"), ("qwen_forward.json", "Qwen-Image"),
                      ("qwen_forward_memory.json", "Qwen-Image forward, later")):
        if not os.path.exists(os.path.join(res.dir, rel)):
            L.append(f"- {name}: not measured on a GPU yet (no `bench/results/{rel}`).")
            continue
        d = measured(res, rel)
        lay = d["layers"]
        published = d.get("config", {}).get("num_layers")
        blocks = (f"{lay[0]} double and {lay[1]} single blocks" if isinstance(lay, list)
                  else f"{lay} of {published} blocks" if published and published != lay else f"{lay} blocks")
        shape = f"{d['width']}x{d['height']}" + (f", {d['frames']} frames" if d.get("frames") else "")
        parts = [("ditrun failed" if e.get("failed") else forward_sentence(e, rel)) for e in d["forwards"]]
        g = d.get("generate")
        L.append(f"- {name}, {blocks} at the published widths, {shape} ({d['tokens']} image tokens, text {d['text_len']} with "
                 f"{d.get('text_valid', d['text_len'])} valid), random weights by diffusers ({src(rel, d)}): " + "; ".join(parts)
                 + (f"; {generate_sentence(g, '4-step generate' + (' at ' + str(g['frames']) + ' frames' if g.get('frames') else ''))}"
                    if g else "") + ".")
    # ChunkFlow's offload experiments: FLUX.1-dev over batch sizes, HunyuanVideo at 720p over frame counts.
    for rel, name, axis in (("offload/flux_batches.json", "FLUX.1-dev", "batches"),
                            ("offload/hunyuan_frames.json", "HunyuanVideo 1280x720", "frames"),
                            ("offload/flux_batches_30_blocks.json", "FLUX.1-dev", "batches"),
                            ("offload/hunyuan_frames_30_blocks.json", "HunyuanVideo 1280x720", "frames")):
        if os.path.exists(os.path.join(res.dir, rel)):
            L.append(offload_sweep_text(res, rel, name, axis))
    return "\n".join(wrap(x) for x in L) + "\n"


def offload_sweep_text(res, rel, name, axis):
    """One offload sweep of bench/offload/sweep.py over batch sizes or frame counts: where chunked
    offload with nothing resident comes within 3% of no offload, measured and predicted, and its
    time and peak memory from there on."""
    o = res.json(rel)
    key, what = ("batch", "batch size") if axis == "batches" else ("frames", "frame count")
    at = (lambda b: f"batch {b}") if axis == "batches" else (lambda b: f"{b} frames")
    pts = {(p[key], p["mode"]): p for p in o["points"]}
    bl = o.get("blocks") or {}
    blocks = (f"{bl['num_layers']} double- and {bl['num_single_layers']} single-stream blocks" if "num_single_layers" in bl
              else f"{bl['num_layers']} blocks" if "num_layers" in bl else "fewer blocks")
    head = f"- {name} offload (chunked, nothing resident, against no offload; {src(rel, o)}, {blocks} at the published widths): "
    if not o.get("crossover_measured"):
        return (head + f"chunked stays more than 3% slower than no offload at every {what} measured "
                f"({', '.join(str(b) for b in o[axis])}; predicted crossover: {o.get('crossover_predicted')}).")

    def row(b):
        c, n = pts[(b, "chunked")], pts[(b, "none")]
        return f"{at(b)} {c['ms'] / n['ms']:.3f}x at {100 * (1 - c['peak_mib'] / n['peak_mib']):.0f}% less peak memory"
    rows = [row(b) for b in o[axis] if b >= o["crossover_measured"]]
    return (head + f"chunked comes within 3% of no offload from {at(o['crossover_measured'])} (predicted by F_block >= F*: "
            f"{at(o['crossover_predicted'])}); above it " + ", ".join(rows) + ".")


def reuse_of(r):
    """Where a teacache or fbcache row's skipped steps reused: the block stack's residual (runs that
    report it) or the output (runs before the hidden-level reuse, or --cache-reuse output)."""
    pol = r.get("resolved", r["policy"])
    if not pol.startswith(("teacache:", "fbcache:")) or r.get("probe_pass") or not r.get("skipped_count"):
        return "-"
    return "hidden" if r.get("hidden_reuse") else "output"


def step_cache_rows(part, rel):
    """Markdown rows of one model's step-cache sweep: ditrun's policies against ditrun's exact run,
    the peer's settings against diffusers' exact run."""
    L = ["| contender | policy | warmup | reuse | loop s | speedup | forwards | cosine | PSNR dB |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in need(part, "rows", rel):
        if r.get("failed") or r.get("policy") == "calibrate-cache":
            continue
        q = need(r, "quality", rel)
        pol = r["policy"] + (f" (chose {r['resolved']})" if r.get("resolved") else "") + (" (probe pass)" if r.get("probe_pass") else "")
        if r["contender"] == "cache-dit":
            pol = pol.replace("cache-dit ", "")
        psnr = "exact" if q["psnr_db"] == float("inf") else f"{q['psnr_db']:.1f}"
        fw = r.get("forwards")
        warm = str(r["warmup"]) if r["contender"] == "ditrun" and r["policy"] != "off" and "warmup" in r else \
            "8" if r["contender"] == "cache-dit" else "-"
        L.append(f"| {r['contender']} | {pol} | {warm} | {reuse_of(r) if r['contender'] == 'ditrun' else '-'} | {r['loop_s']:.2f} | "
                 f"{r['speedup']:.2f}x | {'-' if fw is None else fw} | {q['cosine']:.6f} | {psnr} |")
    return L


# The step-cache results, each a run of bench/step_cache.py with its peer in the same run, and what it shows.
STEP_CACHE_RUNS = [("step_cache_wan.json", "wan", "first-block cache reusing the block stack's residual, against cache-dit's "
                    "first-block cache (DBCache F1B0, its warmup of 8 steps) at the same thresholds"),
                   ("step_cache_wan_percentiles.json", "wan", "the same model and inputs before the hidden-level reuse (skipped steps "
                    "reused at the output), thresholds at percentiles of the probe pass's changes"),
                   ("step_cache_wan_published.json", "wan", "the policies at their published thresholds, which on random weights "
                    "skip nothing (the changes are far above them) or, for TeaCache's fitted polynomial, everything"),
                   ("step_cache_flux.json", "flux", "fewer blocks at the published widths (the full model was not run); diffusers' "
                    "exact run here was its first call, cold, which inflates cache-dit's speedups: compare the loop seconds"),
                   ("step_cache_hunyuan.json", "hunyuan", "fewer blocks at the published widths (a 13B model's weights do not fit "
                    "the run's disk twice); thresholds at percentiles of the probe pass's changes, cache-dit's first-block cache at "
                    "the same thresholds"),
                   ("step_cache_qwen.json", "qwen", "fewer blocks at the published widths (a 20B model's weights do not fit "
                    "the run's disk twice); thresholds as for HunyuanVideo")]


def render_step_cache(res):
    """The step-cache sweeps (bench/step_cache.py): each policy's end-to-end speedup and the final
    latents' distance from the exact run, beside cache-dit on diffusers from the same run."""
    L = []
    for rel, key, what in STEP_CACHE_RUNS:
        if not os.path.exists(os.path.join(res.dir, rel)):
            continue
        d = measured(res, rel)
        part = need(d, key, rel)
        L += [wrap(f"{part['title']}: {what} ({src(rel, d)}; {d.get('note', '')}):"), ""]
        L += step_cache_rows(part, rel) + [""]
    return "\n".join(L)


# The lossy-mode runs (bench/lossy.py), one a resolution, the peers in the same call.
LOSSY_RUNS = ["lossy_480p_exact.json", "lossy_480p.json", "lossy_480p_fp8modes.json", "lossy_480p_fp8rows.json", "lossy_480p_fp8lsum.json",
              "lossy_480p_fp8kt192.json", "lossy_480p_rows_warp.json", "lossy_480p_fp8all_torchao.json", "lossy_480p_fp8ffn.json",
              "lossy_480p_fp8all_generate.json", "lossy_480p_s16.json", "lossy_480p_s16_generate.json", "lossy_480p_int8.json", "lossy_480p_int8_generate.json", "lossy_720p.json", "lossy_720p_int8.json", "lossy_flux.json",
              "lossy_hunyuan.json", "lossy_qwen.json"]
# FLUX.1-dev forwards measured after flux_forward.json, a batch size a call (bench/flux_forward.py --no-generate; the
# memory run also --no-compile: diffusers' whole-process peak beside ditrun's).
FLUX_FORWARD_RUNS = ["flux_forward_batch1.json", "flux_forward_batch4.json", "flux_forward_memory.json", "flux_forward_clocks_b4.json"]
# The attention kernel's fp8 form against its bf16 form and SageAttention (bench/attention/run.py --fp8),
# one table a run.
ATTN_FP8_RUNS = ["attention_fp8.json", "attention_fp8_kt192.json"]


def render_lossy(res):
    """Each lossy mode's forward speedup over the exact bf16 bundle, its attention speedup, and the
    forward's and the 50-step generate's distance from the exact run, beside the peers; rows that
    did not run say why."""
    L = []
    f = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
    for rel in LOSSY_RUNS:
        if not os.path.exists(os.path.join(res.dir, rel)):
            continue
        d = measured(res, rel)
        part = need(d, "part", rel)
        extra = f"; STA window {d['sta']} ({d.get('sta_source', '')})" if d.get("sta") else ""
        L += [wrap(f"{need(part, 'title', rel)} on {d.get('device', 'the GPU')} ({src(rel, d)}{extra}):"), "",
              "| contender | mode | version | forward ms | speedup | attention speedup | forward cosine | final cosine | "
              "final PSNR dB |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        notes = []
        for r in need(part, "rows", rel):
            why = r.get("failed") or r.get("skipped")
            if why:
                notes.append(f"- {r['contender']} {r['mode']}: {why.splitlines()[-1][:160]}")
                continue
            q, g = need(r, "forward", rel), (r.get("generate") or {}).get("quality") or {}
            psnr = None if g.get("psnr_db") is None else ("exact" if g["psnr_db"] == float("inf") else f"{g['psnr_db']:.1f}")
            L.append(f"| {r['contender']} | {r['mode']} | {r.get('version') or '-'} | {need(r, 'forward_ms', rel):.1f} | "
                     f"{f(r.get('speedup'), '{:.2f}x')} | {f(r.get('attention_speedup'), '{:.2f}x')} | {q['cosine']:.6f} | "
                     f"{f(g.get('cosine'), '{:.6f}')} | {psnr or '-'} |")
        if "steps" in part and any(r.get("contender") == "ditrun" and not r.get("generate") and not (r.get("failed") or r.get("skipped"))
                                   for r in need(part, "rows", rel)):  # a forward-only part (--lossy's) has no steps
            notes.append("- final cosine and PSNR '-' on a ditrun row: its 50-step generate did not run in this call (the call's "
                         "time budget, or --no-generate)")
        L += [""] + ([wrap(n) for n in notes] + [""] if notes else []) + [wrap(need(d, "note", rel)), ""]
    for arel in ATTN_FP8_RUNS:
        if not os.path.exists(os.path.join(res.dir, arel)):
            continue
        d = measured(res, arel)
        rows = [r for r in need(d, "shapes", arel) if "fp8_ms" in r]
        # The 8-bit forms the run had: e4m3 Q, K, P, V; int8 Q, K with e4m3 P, V; int8 Q, K with bf16 P, V.
        forms = [f for f in ("fp8", "int8fp8", "int8") if all(f + "_ms" in r for r in rows)]
        what = {"fp8": "fp8 (e4m3 Q, K, P, V)", "int8fp8": "int8fp8 (int8 Q, K; e4m3 P, V)", "int8": "int8 (int8 Q, K; bf16 P, V)"}
        L += [wrap(f"The attention kernel alone ({src(arel, d)}): its 8-bit forms, " + ", ".join(what[f] for f in forms) +
                   ", on the same inputs quantized as attn_quant and attn_quant_vt do, against its bf16 form and SageAttention's "
                   "sageattn; cosine of sampled output rows against an fp32 reference of the bf16 inputs:"), "",
              "| B x H x S x L x D | bf16 ms | " + "".join(f"{f} ms | {f} speedup | " for f in forms) + "sageattn ms | " +
              "".join(f"{f} cosine | " for f in forms).rstrip(" "), "| --- " * (3 + 3 * len(forms)) + "|"]
        for r in rows:
            sage = f"{r['sage_ms']:.2f} ({r.get('sage_version') or '-'})" if r.get("sage_ms") else "-"
            L.append(f"| {r['B']}x{r['H']}x{r['SQ']}x{r['LK']}x{r['HD']} | {r['ms']:.2f} | " +
                     "".join(f"{r[f + '_ms']:.2f} | {r[f + '_speedup']:.2f}x | " for f in forms) + f"{sage} | " +
                     "".join(f"{r[f + '_cosine']:.6f} | " for f in forms).rstrip(" "))
        L.append("")
    return "\n".join(L)


def render_pipeline(res):
    """The Python package in diffusers pipelines: parity and device-to-host copies, and the 50-step
    Wan2.1-1.3B pipeline against stock diffusers and torch.compile (tests/gpu/pipeline_parity.py)."""
    p, b = measured(res, "pipeline_parity.json"), measured(res, "pipeline_bench.json")
    L = [wrap(f"On {p.get('device', 'the GPU')}, random weights at the published configs ({src('pipeline_parity.json', p)}; "
              f"{src('pipeline_bench.json', b)}):"), "",
         "| pipeline | steps | final latents cosine vs stock | device-to-host copies stock / compiled |", "| --- | --- | --- | --- |"]
    names = {"wan": "WanPipeline (Wan2.1-1.3B config, 2 blocks, 17x256x256)", "flux": "FluxPipeline (FLUX.1-dev config, 2+2 blocks, 256x256)"}
    for k in ("wan", "flux"):
        r = need(p, k, "pipeline_parity.json")
        L.append(f"| {names[k]} | {r['steps']} | {r['cosine']:.6f} | {r['d2h_stock']} / {r['d2h_compiled']} |")
    w = need(b, "wan", "pipeline_bench.json")
    t, s, c = w["seconds_compiled"], w["seconds_stock"], w["seconds_torch_compile"]
    L += ["", wrap(f"WanPipeline, Wan2.1-1.3B whole, 480x832, 81 frames, {w['steps']} steps with CFG, end to end: the compiled "
                   f"transformer {t:.2f} s, stock {s:.2f} s ({s / t:.2f}x), stock with torch.compile {c:.2f} s ({c / t:.2f}x); "
                   f"final latents cosine {w['cosine']:.6f} against stock."), ""]
    return "\n".join(L)


def render_stages(res):
    """The pipeline stages at the published configs on the GPU: the Wan2.1 VAE decode against
    diffusers (bench/vae_decode.py), the UMT5-XXL encoder against transformers (bench/umt5_encode.py)
    and the whole prompt-to-MP4 run against WanPipeline (bench/e2e_wan.py)."""
    L = []
    for rel in ("vae_decode_480p.json", "vae_decode_480p_chunked.json", "vae_decode_720p.json", "vae_decode_720p_chunked.json"):
        if not os.path.exists(os.path.join(res.dir, rel)):
            continue
        d = measured(res, rel)
        o, t, q = need(d, "ditrun", rel), need(d, "diffusers", rel), need(d, "parity", rel)
        if o.get("vae_chunk") and o.get("load_s") is not None:  # the decoders' allocation, the time without their loading
            how = (f"in chunks of {o['vae_chunk']} latent frame{'s' if o['vae_chunk'] > 1 else ''} with causal caches kept on the "
                   f"device (its bundles' loading, {o['load_s']:.2f} s, not counted)")
        elif o.get("vae_chunk"):
            how = (f"in chunks of {o['vae_chunk']} latent frame{'s' if o['vae_chunk'] > 1 else ''} (device peak incl. the CUDA "
                   f"context, time incl. loading)")
        else:
            how = "one whole-video graph"
        L.append(f"- Wan2.1 VAE decode ({d['res']}, {d['frames']} frames, bf16, random weights at the published config, "
                 f"{d.get('device', 'GPU')}), {how}: the compiled stage {o['ms'] / 1000:.2f} s and {o['peak_gib']:.1f} GiB, diffusers' "
                 f"AutoencoderKLWan.decode {t['ms'] / 1000:.2f} s and {t['peak_gib']:.1f} GiB ({t['ms'] / o['ms']:.2f}x); "
                 f"PSNR {q['psnr_db']:.1f} dB, cosine {q['cosine']:.6f} ({src(rel, d)})")
        tl = d.get("ditrun_tiled")
        if tl and tl.get("ms"):
            tq = need(tl, "parity", rel)
            L.append(f"- The same decode under `ditc --vae-budget {tl['budget_gib']:g}`: its tail in {tl['tiles']} windows of "
                     f"{tl['window']} latent columns (halo {tl['halo']}, exact), {tl['ms'] / 1000:.2f} s and {tl['peak_gib']:.2f} GiB, "
                     f"{t['ms'] / tl['ms']:.2f}x faster than diffusers at {tl['peak_gib'] / t['peak_gib']:.2f} of its peak; PSNR "
                     f"{tq['psnr_db']:.1f} dB, cosine {tq['cosine']:.6f} ({src(rel, d)})")
    for rel, name, what in (("vae_decode_wan2.2_704p.json", "Wan2.2 VAE (TI2V-5B's)", "AutoencoderKLWan"),
                            ("vae_decode_flux_1024px.json", "FLUX.1 VAE", "AutoencoderKL")):
        if not os.path.exists(os.path.join(res.dir, rel)):
            continue
        d = measured(res, rel)
        o, t, q = need(d, "ditrun", rel), need(d, "diffusers", rel), need(d, "parity", rel)
        if d["frames"]:  # the Wan2.2 VAE: 16 pixels a latent pixel
            shape = f"{d['frames']} frames at {d['latents'][4] * 16}x{d['latents'][3] * 16}"
        else:  # FLUX.1's packed latents: 2x2 latent pixels of 8x8 a token
            side = int(round(d["latents"][1] ** 0.5)) * 16
            shape = f"one {side}x{side} image"
        L.append(f"- {name} decode ({shape}, bf16, random weights at the published config, {d.get('device', 'GPU')}): the "
                 f"compiled stage {o['ms'] / 1000:.2f} s and {o['peak_gib']:.1f} GiB, diffusers' {what}.decode {t['ms'] / 1000:.2f} s "
                 f"and {t['peak_gib']:.1f} GiB ({t['ms'] / o['ms']:.2f}x); PSNR {q['psnr_db']:.1f} dB, cosine {q['cosine']:.6f} "
                 f"({src(rel, d)})")
    rel = "umt5_encode.json"
    if os.path.exists(os.path.join(res.dir, rel)):
        d = measured(res, rel)
        o, t, q = need(d, "ditrun", rel), need(d, "transformers", rel), need(d, "parity", rel)
        L.append(f"- UMT5-XXL encoder ({d['layers']} of {d['published_layers']} blocks at the published widths), "
                 f"{d['text_len']} tokens ({d['valid_tokens']} real), bf16, {d.get('device', 'GPU')}: the compiled stage "
                 f"{o['ms']:.2f} ms, transformers {t['version']} {t['ms']:.2f} ms ({t['ms'] / o['ms']:.2f}x); cosine "
                 f"{q['cosine']:.6f} over the prompt's rows ({src(rel, d)})")
    rel = "e2e_wan.json"
    if os.path.exists(os.path.join(res.dir, rel)):
        L.append(e2e_sentence(measured(res, rel), rel))
    return "\n".join(wrap(x) for x in L) + "\n"


def e2e_sentence(d, rel):
    """The whole prompt-to-MP4 run (bench/e2e_wan.py): ditrun's cold process against WanPipeline."""
    rows = {r["contender"]: r for r in need(d, "rows", rel)}
    o, s = rows.get("ditrun generate (cold process)", {}), need(d, "shape", rel)
    if not o.get("total_s"):
        raise ReportError(f"{rel}: ditrun's row has no time: {o.get('failed') or o.get('skipped')}")
    st = o.get("stages", {})
    parts = ", ".join(f"{w} {st[k]:.2f} s" for k, w in (("load", "load"), ("text_encoder", "text encoder"), ("denoise", "loop"),
                                                      ("vae_decode", "VAE decode"), ("encode", "MP4")) if st.get(k) is not None)
    x = (f"- Prompt to MP4, Wan2.1-T2V-1.3B ({d['layers']} of 30 blocks, UMT5-XXL {d['te_layers']} of 24), {s['frames']} frames at "
         f"{s['width']}x{s['height']}, {d['steps']} steps with CFG, {d.get('device', 'GPU')}: one cold `ditrun generate` "
         f"{o['total_s']:.2f} s ({parts})")
    for name in ("diffusers WanPipeline", "diffusers WanPipeline + torch.compile"):
        p = rows.get(name, {})
        if p.get("total_s"):
            x += f"; {name} (in memory, after a warm-up call) {p['total_s']:.2f} s ({p['total_s'] / o['total_s']:.2f}x)"
        else:
            x += f"; {name}: {'failed' if p.get('failed') else 'not run'} ({(p.get('failed') or p.get('skipped') or 'no row')[:80]})"
    warm = rows.get("diffusers WanPipeline", {})
    if (warm.get("stages") or {}).get("denoise") and st.get("denoise"):
        x += f"; its loop {warm['stages']['denoise'] / st['denoise']:.2f}x faster than diffusers' in-memory one (the transformer's margin)"
    c = rows.get("diffusers WanPipeline (cold process)", {})
    if c.get("total_s"):
        x += (f"; diffusers as a script runs it (a fresh process: import, from_pretrained, the call, export) {c['total_s']:.2f} s "
              f"({c['total_s'] / o['total_s']:.2f}x)")
    q = o.get("quality") or {}
    if q.get("cosine") is not None:
        x += f"; frames against diffusers' PSNR {q['psnr_db']:.1f} dB, cosine {q['cosine']:.6f}"
    se = d.get("same_embeddings") or {}
    if se.get("latents_cosine") is not None:
        x += (f"; the loop alone, from diffusers' own prompt embeddings and the same noise: final latents cosine "
              f"{se['latents_cosine']:.6f}, relative L2 {se['latents_rel_l2']:.1e} (the rest is the two bf16 text encoders' "
              f"difference, carried through 50 guided steps)")
    peer = rows.get("diffusers WanPipeline", {})
    if o.get("export_failed") and peer.get("export_failed"):
        x += "; neither side's MP4 encode counted (no FFmpeg libraries on that host)"
    return x + f" ({src(rel, d)})"


SERVE_LINE = re.compile(r"CLI loop ([0-9.]+) s .*?served \(median of (\d+)\): request ([0-9.]+) s.*?queued ([0-9.]+) ms")


def render_serve(res):
    """What `ditrun serve` adds to a 50-step Wan2.1-1.3B job (bench/serve_overhead.py's output)."""
    L = []
    for rel, form in (("serve_overhead.txt", "binary requests (safetensors body)"), ("serve_overhead_json_body.txt", "JSON requests (base64 inputs)")):
        if not os.path.exists(os.path.join(res.dir, rel)):
            continue
        text = res.text(os.path.join(res.dir, rel))
        m, o, f = SERVE_LINE.search(text), re.search(r"overhead over the CLI loop: ([0-9.]+)%", text), \
            re.search(r"request to first step: ([0-9.]+) ms", text)
        if not (m and o and f):
            raise ReportError(f"{rel}: no serve_overhead summary lines")
        L.append(f"- {form}: {m.group(2)} served 50-step jobs (Wan2.1-1.3B, 480x832, 81 frames, CFG, on an H200) took "
                 f"{float(m.group(3)):.3f} s against the command line's loop {float(m.group(1)):.3f} s: overhead "
                 f"{float(o.group(1)):.2f}%; request to first step {float(f.group(1)):.1f} ms ({src(rel)})")
    return "\n".join(wrap(x) for x in L) + "\n"


RENDERERS = {"offload": render_offload, "status": render_status}
# Passages rendered and checked when README.md has them, not yet required of it.
OPTIONAL = {"wan22": render_wan22, "wan22_generate": render_wan22_generate, "mmdit": render_mmdit,
            "step_cache": render_step_cache, "lossy": render_lossy, "pipeline": render_pipeline, "serve": render_serve,
            "stages": render_stages}

# A measured figure: a number followed by a unit of time, memory, rate, a percentage or a ratio.
FIGURE = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?\s?(?:ms|s|GiB|MiB|GB/s|TFLOP/s|%|x|×)(?![\w/])"
                    r"|(?<![\w.-])\d(?:\.\d+)?e-\d+\b|cosine \d\.\d+")


def unmarked_figures(text):
    """Measured-looking figures outside the generated passages (code blocks excepted)."""
    bad = []
    outside = MARK.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    in_code = False
    for i, line in enumerate(outside.split("\n"), 1):
        if line.startswith("```"):
            in_code = not in_code
        if in_code or line.startswith("    "):
            continue
        for m in FIGURE.finditer(re.sub(r"`[^`]*`", "", line)):
            bad.append(f"README.md:{i}: '{m.group(0)}' is a figure outside a generated passage")
    return bad


def render(readme_text, res):
    found = MARK.findall(readme_text)
    names = [n for n, _ in found]
    every = {**RENDERERS, **OPTIONAL}
    missing = sorted(set(RENDERERS) - set(names))
    unknown = sorted(set(names) - set(every))
    if missing or unknown or len(names) != len(set(names)):
        raise ReportError(f"README.md: passages expected {sorted(RENDERERS)} once each (and optionally "
                          f"{sorted(OPTIONAL)}), found {names}")

    def sub(m):
        return f"<!-- report:{m.group(1)} -->\n{every[m.group(1)](res)}<!-- /report:{m.group(1)} -->\n"
    return MARK.sub(sub, readme_text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="exit 1 with a diff when README.md differs (default)")
    g.add_argument("--write", action="store_true", help="rewrite README.md's generated passages")
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--tests", default=os.path.join(ROOT, "tests"))
    ap.add_argument("--render", metavar="NAME", help="print one passage as the results give it, README.md untouched")
    ap.add_argument("--allow-dry-run", action="store_true", help="with --render: accept results of a --dry-run")
    a = ap.parse_args(argv)
    res = Results(a.results, a.tests)
    if a.render:
        every = {**RENDERERS, **OPTIONAL}
        if a.render not in every:
            print(f"report: --render {a.render}: expected one of {sorted(every)}", file=sys.stderr)
            return 2
        res.allow_dry_run = a.allow_dry_run
        try:
            sys.stdout.write(every[a.render](res))
        except ReportError as e:
            print(f"report: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        with open(a.readme) as fh:
            text = fh.read()
        new = render(text, res)
    except (OSError, ReportError) as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    if a.write:
        if new != text:
            with open(a.readme + ".tmp", "w") as fh:
                fh.write(new)
            os.replace(a.readme + ".tmp", a.readme)
        bad = unmarked_figures(new)
        for b in bad:
            print(b, file=sys.stderr)
        return 1 if bad else 0
    status = 0
    if new != text:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), "README.md",
                                                   "README.md from bench/results"))
        print("report: README.md differs from the results; bench/report.py --write regenerates it", file=sys.stderr)
        status = 1
    bad = unmarked_figures(text)
    for b in bad:
        print(b, file=sys.stderr)
    return 1 if bad else status


if __name__ == "__main__":
    sys.exit(main())
