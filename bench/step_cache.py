#!/usr/bin/env python3
"""Step caching on one GPU: `ditrun generate --step-cache` for each policy at several settings
against the exact run from the same noise, and cache-dit (DBCache, TaylorSeer) on diffusers with
the same random-weight model as the peer, in one run.

  --part wan   Wan2.1-1.3B (the model folder and 480x832 81-frame bundle tests/gpu/run.sh makes),
               50 UniPC steps with CFG 5, shift 3.
  --part flux  FLUX.1-dev at 1024x1024 (bench/flux_forward.py's random-weight pipeline, --flux-layers
               D,S blocks), 28 steps, embedded guidance 3.5.
  --part hunyuan  HunyuanVideo at 1280x720, 33 frames (--hunyuan-layers D,S, default 2,4), 30 steps,
               embedded guidance 6.
  --part qwen  Qwen-Image at 1328x1328 (--qwen-layers N, default 20), 50 steps, true CFG 4.
  Parts combine with commas (wan,flux); all is every one.

Per policy: the denoising loop's seconds (ditrun's own line) and the process's, speedup over exact,
the steps skipped and the forwards run, and the final latents' cosine, relative L2 and PSNR against
exact (PSNR over the exact latents' range: 20 log10((max - min) / RMSE)). The weights are random:
the quality figures say how far a policy moves the result from the exact one on such a model, not
what a trained model's videos would lose. The policies keep their sources' parameters: EasyCache
runs with its published warmup (--ret_steps 7) and thresholds around its Wan defaults (0.05, 0.06).

The peer: diffusers' pipeline exact, then under cache_dit.enable_cache at cache-dit's default DBCache
(F8B0, residual diff 0.08) and its recommended DBCache F1B0 + TaylorSeer order 1 (residual diff
0.12); each against diffusers' exact run. cache-dit comes from PyPI (`pip install --no-index
--find-links .whl cache-dit` on a host without the network); without it the peer rows say so.

Results: OUT/step_cache.json, rewritten after every run, and OUT/step_cache.md (the tables).
--dry-run runs the parsing, the metrics, the table and, given --ditrun, --bundle and --inputs of a
tiny bundle, the real sweep of the ditrun half on it (CPU), without torch.

usage: bench/step_cache.py --part wan|flux|hunyuan|qwen[,...]|all --ditc BIN --ditrun BIN --work DIR --out DIR
           [--wan-model DIR --wan-bundle BUNDLE] [--flux-layers D,S] [--no-peer] [--keep]
       bench/step_cache.py --dry-run --out DIR [--ditrun BIN --bundle B --inputs I.safetensors --steps N]
"""
import argparse
import array
import json
import math
import os
import re
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pipeline_bench as pb  # noqa: E402
from ceilings import run_info  # noqa: E402

# (--step-cache, --cache-warmup, --cache-cooldown), most telling first: a sweep cut short by its
# --budget keeps these. ditrun's defaults (W 2, C 1) but for EasyCache's published warmup. "auto"
# runs `ditrun calibrate-cache` first (its own row: the exact runs it takes) and then the policy
# the profile's gate picks. Thresholds: TeaCache's published Wan2.1-1.3B settings (0.05, 0.08);
# first-block cache at cache-dit's two residual-difference defaults (0.08 for DBCache, 0.12 for
# F1B0), the peer's comparable settings. "MODE:qP" is MODE at the P-th percentile of its probe's
# per-step changes (fbcache only: teacache's threshold bounds a sum of rescaled changes), measured by a MODE:0 run first (it skips nothing: its own row, exact, which
# also shows what probing costs): on random weights the published thresholds can sit far outside
# the model's range, and the percentiles put every policy, and the peer, where it acts.
EASYCACHE_WARMUP = 7
POLICIES = [("off", 2, 1), ("cadence:2", 2, 1), ("fbcache:0.08", 2, 1), ("teacache:0.08", 2, 1),
            ("easycache:0.05", EASYCACHE_WARMUP, 1), ("delta:0.05", 2, 1), ("auto", 2, 1), ("fbcache:0.12", 2, 1),
            ("teacache:0.05", 2, 1), ("cadence:3", 2, 1), ("easycache:0.1", EASYCACHE_WARMUP, 1), ("delta:0.1", 2, 1)]
# cache-dit's settings: name -> (DBCacheConfig fields, TaylorSeer order or None). F1B0 is first-block
# cache, the setting fbcache compares with; a threshold "qP" is fbcache's P-th percentile (above).
PEERS = {"cache-dit DBCache F8B0 0.08": ({"Fn_compute_blocks": 8, "Bn_compute_blocks": 0, "residual_diff_threshold": 0.08,
                                          "max_warmup_steps": 8}, None),
         "cache-dit DBCache F1B0 0.08": ({"Fn_compute_blocks": 1, "Bn_compute_blocks": 0, "residual_diff_threshold": 0.08,
                                          "max_warmup_steps": 8}, None),
         "cache-dit DBCache F1B0 0.12 + TaylorSeer 1": ({"Fn_compute_blocks": 1, "Bn_compute_blocks": 0,
                                                         "residual_diff_threshold": 0.12, "max_warmup_steps": 8}, 1)}
for q in (50, 70, 90):
    PEERS[f"cache-dit DBCache F1B0 q{q}"] = ({"Fn_compute_blocks": 1, "Bn_compute_blocks": 0, "residual_diff_threshold": f"q{q}",
                                             "max_warmup_steps": 8}, None)
PEERS["cache-dit DBCache F1B0 q90 + TaylorSeer 1"] = ({"Fn_compute_blocks": 1, "Bn_compute_blocks": 0,
                                                     "residual_diff_threshold": "q90", "max_warmup_steps": 8}, 1)
QUANTILE = re.compile(r"^(fbcache):q(\d+)$")
PROBE_RE = re.compile(r"^ditrun: step (\d+)/\d+ .*?  probe (\S+)  ", re.M)
WAN = {"frames": 81, "height": 480, "width": 832, "text_len": 512, "steps": 50, "guidance": 5.0, "shift": 3.0}
FLUX = {"steps": 28, "guidance": 3.5}
HUNYUAN = {"steps": 30, "guidance": 6.0, "frames": 33}  # at 33 frames: 129 would take minutes a run
QWEN = {"steps": 50, "true_cfg": 4.0}
RANDOM_NOTE = ("random weights: cosine, relative L2 and PSNR say how far a policy moves the final latents from the exact "
               "run's on such a model")
LOOP_RE = re.compile(r"^(?:\[rank \d+\] )?ditrun: generate (\d+) steps in ([0-9.]+)s$", re.M)
CACHE_RE = re.compile(r"^(?:\[rank \d+\] )?ditrun: step cache (\S+): skipped (\d+) of (\d+) steps(?: \(([\d ]+)\))?, "
                      r"(\d+) forwards? saved(; skipped steps ran block 0 and the output head on the block stack's kept residual)?$", re.M)


# --- standard library: the ditrun log, the latents, the metrics, the table ---

def parse_log(text):
    """(loop seconds, skipped steps, forwards saved) from ditrun generate's stderr."""
    m = LOOP_RE.search(text)
    c = CACHE_RE.search(text)
    skipped = [int(x) for x in (c.group(4) or "").split()] if c else []
    return (float(m.group(2)) if m else None), skipped, (int(c.group(5)) if c else 0)


def read_f32(path, name="latents"):
    """A tensor of an F32 or BF16 safetensors file as a flat array('f') (BF16 widened exactly)."""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        e = json.loads(fh.read(n))[name]
        if e["dtype"] not in ("F32", "BF16"):
            raise ValueError(f"{path}: {name} is {e['dtype']}, expected F32 or BF16")
        fh.seek(8 + n + e["data_offsets"][0])
        raw = fh.read(e["data_offsets"][1] - e["data_offsets"][0])
        if e["dtype"] == "BF16":  # little-endian bf16 is the high half of an f32: two zero bytes below it
            wide = bytearray(2 * len(raw))
            wide[2::4], wide[3::4] = raw[0::2], raw[1::2]
            raw = bytes(wide)
        a = array.array("f")
        a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def quality(ref, x):
    """Cosine, relative L2 and PSNR (over ref's range) of x against ref, in double."""
    if len(ref) != len(x):
        raise ValueError(f"{len(x)} elements against {len(ref)}")
    dot = rr = xx = se = 0.0
    for a, b in zip(ref, x):
        dot += a * b
        rr += a * a
        xx += b * b
        se += (a - b) * (a - b)
    cos = dot / math.sqrt(rr * xx) if rr > 0 and xx > 0 else float("nan")
    rng = max(ref) - min(ref)
    psnr = float("inf") if se == 0 else 20 * math.log10(rng / math.sqrt(se / len(ref)))
    return {"cosine": cos, "rel_l2": math.sqrt(se / rr) if rr > 0 else float("nan"), "psnr_db": psnr}


def table(rows, title):
    """A markdown table of one model's rows (ditrun's policies, then the peer's settings)."""
    f = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
    L = [f"### {title}", "", "| contender | policy | loop s | process s | speedup | skipped steps | forwards | cosine | "
         "rel L2 | PSNR dB |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r.get("failed"):
            L.append(f"| {r['contender']} | {r['policy']} | failed: {r['failed'][:100]} | | | | | | | |")
            continue
        q = r.get("quality") or {}
        L.append(f"| {r['contender']} | {r['policy']} | {f(r.get('loop_s'), '{:.2f}')} | {f(r.get('process_s'), '{:.2f}')} | "
                 f"{f(r.get('speedup'), '{:.2f}x')} | {f(r.get('skipped_count'), '{}')} | {f(r.get('forwards'), '{}')} | "
                 f"{f(q.get('cosine'), '{:.6f}')} | {f(q.get('rel_l2'), '{:.3e}')} | {f(q.get('psnr_db'), '{:.2f}')} |")
    return L + ["", RANDOM_NOTE, ""]


def write_results(res, out):
    pb.save(res, out, "step_cache.json")
    lines = []
    for part in ("wan", "flux", "hunyuan", "qwen", "tiny"):
        if res.get(part):
            lines += table(res[part]["rows"], res[part]["title"])
    with open(os.path.join(out, "step_cache.md.tmp"), "w") as fh:
        fh.write("\n".join(lines))
    os.replace(os.path.join(out, "step_cache.md.tmp"), os.path.join(out, "step_cache.md"))
    return lines


def selected_policies(text):
    """--policies' comma-separated specs as POLICIES entries (their warmup and cooldown; others get
    ditrun's defaults, easycache its published warmup; "spec@W" sets the warmup); None: all of
    POLICIES. "off" always first."""
    if not text:
        return None
    known = {p[0]: p for p in POLICIES}
    out = [known["off"]]
    for x in text.split(","):
        spec, _, w = x.partition("@")  # "spec@W": warmup W
        if spec and spec != "off":
            p = known.get(spec) or (spec, EASYCACHE_WARMUP if spec.startswith("easycache:") else 2, 1)
            out.append((spec, int(w), p[2]) if w else p)
    return out


def selected_peers(text):
    """--peers' comma-separated items as a dict of PEERS' form: an index into PEERS, or "FnBb@T"
    (DBCache with n front and b back blocks computed, residual difference T, cache-dit's warmup of 8
    steps; "+TS" adds TaylorSeer order 1) for a threshold measured in another run; None: all."""
    if not text:
        return None
    names, out = list(PEERS), {}
    for item in text.split(","):
        m = re.match(r"^F(\d+)B(\d+)@([0-9.]+)(\+TS)?$", item)
        if not m:
            out[names[int(item)]] = PEERS[names[int(item)]]
            continue
        name = f"cache-dit DBCache F{m.group(1)}B{m.group(2)} {m.group(3)}" + (" + TaylorSeer 1" if m.group(4) else "")
        out[name] = ({"Fn_compute_blocks": int(m.group(1)), "Bn_compute_blocks": int(m.group(2)),
                      "residual_diff_threshold": float(m.group(3)), "max_warmup_steps": 8}, 1 if m.group(4) else None)
    return out


def policy_args(spec, w, c, profile):
    """generate's step-cache flags for one POLICIES entry ("off": none)."""
    if spec == "off":
        return []
    if spec == "auto":  # the profile's warmup and cooldown: its thresholds were chosen for them
        return ["--step-cache", "auto", "--cache-profile", profile]
    return ["--step-cache", spec, "--cache-warmup", str(w), "--cache-cooldown", str(c)]


def percentile(xs, p):
    """The p-th percentile of xs, linear between order statistics."""
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    i = int(k)
    return xs[i] + (xs[min(i + 1, len(xs) - 1)] - xs[i]) * (k - i)


def probe_thresholds(ditrun, bundle, args, steps, work, res, part, mode):
    """MODE:0 once (nothing skipped: an exact run that reports its probe's change each step): its
    row, and res[part]["thresholds"][mode] = {"changes": [...], "qP": the P-th percentile} for P in
    10..90. Returns that dict, or None when the run failed."""
    th = res[part].setdefault("thresholds", {})
    if mode in th:
        return th[mode]
    path = os.path.join(work, f"{part}_{mode}_0.safetensors")
    t0 = time.perf_counter()
    r = subprocess.run([ditrun, "generate", bundle] + list(args) + ["--out", path, "--step-cache", f"{mode}:0"], capture_output=True,
                       text=True)
    row = {"contender": "ditrun", "policy": f"{mode}:0", "probe_pass": True, "process_s": time.perf_counter() - t0}
    rows = res[part]["rows"]
    if r.returncode:
        row["failed"] = r.stderr.strip()[-400:]
        rows.append(row)
        return None
    changes = [float(v) for _, v in PROBE_RE.findall(r.stderr) if v not in ("nan", "-nan")]
    row["loop_s"], row["skipped"], _ = parse_log(r.stderr)
    row["skipped_count"], row["forwards"] = len(row["skipped"]), None
    exact = next((x for x in rows if x["policy"] == "off" and x.get("loop_s")), None)
    if exact:
        row["quality"] = quality(read_f32(os.path.join(work, f"{part}_off.safetensors")), read_f32(path))
        row["speedup"] = exact["loop_s"] / row["loop_s"]
    os.remove(path)
    rows.append(row)
    th[mode] = {"changes": changes, **{f"q{p}": percentile(changes, p) for p in range(10, 100, 10)}}
    print(f"{part} {mode}:0 probe pass: loop {row['loop_s']:.2f} s; changes " +
          " ".join(f"q{p} {th[mode][f'q{p}']:.4f}" for p in (10, 50, 70, 90)), flush=True)
    return th[mode]


def calibrate(ditrun, bundle, args, work, part, rows):
    """`ditrun calibrate-cache` over the sweep's inputs (the exact runs the profile is fitted on):
    a row of its own with its seconds and the gate's choice; the profile's path, or None."""
    profile = os.path.join(work, f"{part}_cache_profile.json")
    t0 = time.perf_counter()
    r = subprocess.run([ditrun, "calibrate-cache", bundle] + list(args) + ["--profile-out", profile], capture_output=True,
                       text=True)
    row = {"contender": "ditrun", "policy": "calibrate-cache", "process_s": time.perf_counter() - t0}
    if r.returncode:
        row["failed"] = r.stderr.strip()[-400:]
        rows.append(row)
        return None
    with open(profile) as fh:
        row["profile"] = json.load(fh)
    row["log"] = r.stderr.strip()[-800:]
    print(f"{part} calibrate-cache: {row['process_s']:.1f} s\n{row['log']}", flush=True)
    rows.append(row)
    return profile


def ditrun_sweep(ditrun, bundle, args, steps, forwards_per_step, work, res, part, out, policies=None, budget=None):
    """Every policy of `policies` (default POLICIES) through `ditrun generate bundle args...`, the
    exact run first (after a 2-step unrecorded run: the first process pays for cold caches, which
    would flatter every speedup); each row appended to res[part]["rows"] and the results rewritten.
    Policies left when `budget` seconds have passed are skipped (a row says so). Returns the failures."""
    rows, fails, exact, profile = res[part]["rows"], 0, None, None
    t_start = time.perf_counter()
    warm = list(args)
    warm[warm.index("--steps") + 1] = "2"
    subprocess.run([ditrun, "generate", bundle] + warm + ["--out", os.path.join(work, f"{part}_warm.safetensors")],
                   capture_output=True, text=True)
    for spec, w, c in policies or POLICIES:
        if budget and time.perf_counter() - t_start > budget and spec != "off":
            rows.append({"contender": "ditrun", "policy": spec, "failed": f"not run: the sweep's {budget:.0f} s budget was spent"})
            continue
        if spec == "auto" and not profile:
            profile = calibrate(ditrun, bundle, args, work, part, rows)
            if not profile:
                fails += 1
                continue
        q = QUANTILE.match(spec)
        if q:
            th = probe_thresholds(ditrun, bundle, args, steps, work, res, part, q.group(1))
            if not th:
                rows.append({"contender": "ditrun", "policy": spec, "failed": f"no {q.group(1)}:0 probe pass"})
                fails += 1
                continue
            spec = f"{q.group(1)}:{th['q' + q.group(2)]:.4g}"
        path = os.path.join(work, f"{part}_{spec.replace(':', '_')}.safetensors")
        cmd = [ditrun, "generate", bundle] + list(args) + ["--out", path] + policy_args(spec, w, c, profile)
        row = {"contender": "ditrun", "policy": spec, "warmup": w, "cooldown": c}
        if q:
            row["percentile"] = int(q.group(2))
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        row["process_s"] = time.perf_counter() - t0
        if r.returncode:
            row["failed"] = r.stderr.strip()[-400:]
            fails += 1
        else:
            row["loop_s"], row["skipped"], saved = parse_log(r.stderr)
            m = CACHE_RE.search(r.stderr)
            if m and m.group(1) != spec:
                row["resolved"] = m.group(1)  # what auto chose
            row["hidden_reuse"] = bool(m and m.group(6))
            row["skipped_count"] = len(row["skipped"])
            row["forwards"] = steps * forwards_per_step - saved
            lat = read_f32(path)
            if exact is None:
                exact, exact_s = lat, row["loop_s"]
            row["quality"] = quality(exact, lat)
            row["speedup"] = exact_s / row["loop_s"] if row["loop_s"] else None
            print(f"{part} ditrun {row.get('resolved', spec)}: loop {row['loop_s']:.2f} s ({row['speedup']:.2f}x), skipped "
                  f"{row['skipped_count']}, {row['forwards']} forwards, cosine {row['quality']['cosine']:.6f}, PSNR "
                  f"{row['quality']['psnr_db']:.2f} dB", flush=True)
            if spec != "off":
                os.remove(path)
        rows.append(row)
        write_results(res, out)
    return fails


def plot(res, out):
    """OUT/step_cache_<part>.png: speedup against final-latent cosine, ditrun's policies and the
    peer's settings (each against its own exact run); none without matplotlib."""
    try:
        import matplotlib  # device only
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # device only
    except ImportError:
        return []
    made = []
    for part in ("wan", "flux", "hunyuan", "qwen"):
        rows = [r for r in (res.get(part) or {}).get("rows", []) if r.get("speedup") and r.get("quality")]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for who, mark in (("ditrun", "o"), ("cache-dit", "s"), ("diffusers", "^")):
            pts = [r for r in rows if r["contender"] == who]
            if not pts:
                continue
            xs = [max(1 - r["quality"]["cosine"], 1e-7) for r in pts]
            ax.scatter(xs, [r["speedup"] for r in pts], marker=mark, label=who)
            for x, r in zip(xs, pts):
                label = r.get("resolved", r["policy"]).replace("cache-dit ", "")
                if who == "ditrun" and r["policy"] != "off" and "warmup" in r:
                    label += f" W{r['warmup']}"
                ax.annotate(label, (x, r["speedup"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("1 - cosine of the final latents against the exact run (random weights)")
        ax.set_ylabel("speedup over the exact run")
        ax.set_title(res[part]["title"], fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        path = os.path.join(out, f"step_cache_{part}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        made.append(path)
    return made


def dry_run(a):
    os.makedirs(a.out, exist_ok=True)
    log = ("ditrun: step 4/10  t=818  skipped (step cache: 2 forwards saved)  0.000s\n"
           "ditrun: generate 10 steps in 1.250s\n"
           "ditrun: step cache easycache:0.06: skipped 3 of 10 steps (3 5 7), 6 forwards saved\n")
    assert parse_log(log) == (1.25, [3, 5, 7], 6), parse_log(log)
    assert parse_log("[rank 1] ditrun: step cache off: skipped 0 of 4 steps, 0 forwards saved\n") == (None, [], 0)
    ref = array.array("f", [1.0, -2.0, 3.0, 0.5])
    q = quality(ref, ref)
    assert q["cosine"] > 0.999999 and q["rel_l2"] == 0 and q["psnr_db"] == float("inf"), q
    q = quality(ref, array.array("f", [1.0, -2.0, 3.0, 1.0]))  # range 5, RMSE 0.25: 26.02 dB
    assert abs(q["psnr_db"] - 20 * math.log10(5 / 0.25)) < 1e-9, q
    path = os.path.join(a.out, "dry.safetensors")
    h = json.dumps({"latents": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + ref.tobytes())
    assert list(read_f32(path)) == list(ref)
    specs = [p[0] for p in POLICIES]
    assert specs[0] == "off" and "cadence:2" in specs and "cadence:3" in specs
    assert sum(s.startswith("delta:") for s in specs) >= 2 and sum(s.startswith("easycache:") for s in specs) >= 2
    res = {"dry_run": True, "run": run_info(),
           "wan": {"title": "Wan2.1-1.3B, 480x832, 81 frames, 50 steps, CFG 5 (made-up times)", "rows": [
               {"contender": "ditrun", "policy": "off", "loop_s": 60.0, "process_s": 70.0, "speedup": 1.0, "skipped_count": 0,
                "forwards": 100, "quality": quality(ref, ref)},
               {"contender": "ditrun", "policy": "easycache:0.06", "loop_s": 25.0, "process_s": 35.0, "speedup": 2.4,
                "skipped_count": 29, "forwards": 42, "quality": q},
               {"contender": "cache-dit", "policy": "absent", "failed": "cache-dit is not installed"}]}}
    if a.ditrun and a.bundle and a.inputs:
        res["tiny"] = {"title": f"tiny bundle {os.path.basename(a.bundle.rstrip('/'))}, {a.steps} steps, CFG 5 (CPU)", "rows": []}
        args = ["--prompt-embeds", a.inputs, "--negative-embeds", a.inputs, "--init-latents", a.inputs, "--steps", str(a.steps),
                "--guidance", "5", "--shift", "3"]
        if ditrun_sweep(a.ditrun, a.bundle, args, a.steps, 2, a.out, res, "tiny", a.out, selected_policies(a.policies)):
            print("the tiny sweep failed")
            return 1
    for line in write_results(res, a.out):
        print(line)
    return 0


# --- on the device ---

def cache_dit_module():
    """cache_dit, or None with a line saying how to install it."""
    try:
        import cache_dit  # device only
        return cache_dit
    except ImportError:
        print("cache-dit is not installed: the peer rows are skipped (pip install cache-dit, or "
              "pip install --no-index --find-links .whl cache-dit with its wheel in .whl)", flush=True)
        return None


def peer_rows(torch, call, exact_s, exact_latents, ours_exact, res, part, out, peers=None):
    """diffusers' pipeline under cache-dit at each of PEERS: rows against diffusers' exact run
    (exact_latents, exact_s); ours_exact records how far diffusers' exact run is from ditrun's."""
    rows = res[part]["rows"]
    rows.append({"contender": "diffusers", "policy": "off", "loop_s": exact_s, "speedup": 1.0,
                 "quality": quality(exact_latents, exact_latents), "vs_ditrun_exact": quality(ours_exact, exact_latents)})
    write_results(res, out)
    cd = cache_dit_module()
    if cd is None:
        rows.append({"contender": "cache-dit", "policy": "-", "failed": "cache-dit is not installed"})
        write_results(res, out)
        return
    for name, (db, order) in (peers or PEERS).items():
        row = {"contender": "cache-dit", "policy": name, "cache_dit_version": getattr(cd, "__version__", None)}
        th = db["residual_diff_threshold"]
        if isinstance(th, str):  # fbcache's percentile, from its probe pass in this run
            probe = res[part].get("thresholds", {}).get("fbcache")
            if not probe:
                row["failed"] = f"threshold {th}: no fbcache probe pass in this run"
                rows.append(row)
                continue
            db = {**db, "residual_diff_threshold": probe[th]}
            row["policy"] = name.replace(th, f"{probe[th]:.4g} ({th})")
        try:
            kw = {"cache_config": cd.DBCacheConfig(**db)}
            if order:
                kw["calibrator_config"] = cd.TaylorSeerCalibratorConfig(taylorseer_order=order)
            pipe = call.pipe
            cd.enable_cache(pipe, **kw)
            lat, row["loop_s"] = call()
            try:
                stats = cd.summary(pipe)
                row["cache_stats"] = str(stats)[:400]
            except Exception as e:  # the summary's form differs between releases; the timing does not need it
                row["cache_stats"] = f"unavailable: {e}"[:200]
            cd.disable_cache(pipe)
            row["speedup"] = exact_s / row["loop_s"]
            row["quality"] = quality(exact_latents, lat)
            print(f"{part} {row['policy']}: {row['loop_s']:.2f} s ({row['speedup']:.2f}x), cosine {row['quality']['cosine']:.6f}",
                  flush=True)
        except Exception as e:
            row["failed"] = f"{type(e).__name__}: {e}"[:400]
        rows.append(row)
        write_results(res, out)


def timed_call(torch, pipe, kwargs):
    """A callable running pipe(**kwargs) on the device: (flat fp32 latents, seconds)."""
    def call():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            lat = pipe(**kwargs, output_type="latent", return_dict=False)[0]
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        return array.array("f", lat.float().flatten().cpu().tolist()), dt
    def warm():
        """Two unrecorded steps: the first call pays for cold caches and kernel selection."""
        with torch.no_grad():
            pipe(**{**kwargs, "num_inference_steps": 2}, output_type="latent", return_dict=False)
    call.pipe, call.warm = pipe, warm
    return call


def run_wan(torch, a, res):
    from safetensors.torch import save_file  # device only
    from diffusers import UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel  # device only

    p = WAN
    res["wan"] = {"title": f"Wan2.1-1.3B, {p['height']}x{p['width']}, {p['frames']} frames, {p['steps']} steps, CFG "
                           f"{p['guidance']}", "rows": [], **p}
    model = WanTransformer3DModel.from_pretrained(a.wan_model, torch_dtype=torch.bfloat16).eval()
    cfg = model.config
    f, h, w = (p["frames"] - 1) // 4 + 1, p["height"] // 8, p["width"] // 8
    g = torch.Generator().manual_seed(0)
    init = torch.randn(1, cfg.in_channels, f, h, w, generator=g)
    pe = torch.randn(1, p["text_len"], cfg.text_dim, generator=g)
    ne = torch.randn(1, p["text_len"], cfg.text_dim, generator=g)
    inputs = os.path.join(a.work, "wan_inputs.safetensors")
    save_file({"prompt_embeds": pe, "negative_prompt_embeds": ne, "init_latents": init}, inputs)
    args = ["--prompt-embeds", inputs, "--negative-embeds", inputs, "--init-latents", inputs, "--steps", str(p["steps"]),
            "--guidance", str(p["guidance"]), "--shift", str(p["shift"])]
    fails = ditrun_sweep(a.ditrun, a.wan_bundle, args, p["steps"], 2, a.work, res, "wan", a.out, selected_policies(a.policies),
                         a.budget)
    if a.no_peer:
        return fails
    ours = read_f32(os.path.join(a.work, "wan_off.safetensors"))
    sched = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=p["shift"],
                                    num_train_timesteps=1000, solver_order=2, solver_type="bh2", predict_x0=True,
                                    lower_order_final=True, final_sigmas_type="zero", timestep_spacing="linspace")
    dev = torch.device("cuda")
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=sched, transformer=model.to(dev))
    pipe.set_progress_bar_config(disable=True)
    call = timed_call(torch, pipe, dict(prompt_embeds=pe.to(dev), negative_prompt_embeds=ne.to(dev), height=p["height"],
                                        width=p["width"], num_frames=p["frames"], num_inference_steps=p["steps"],
                                        guidance_scale=p["guidance"], latents=init.to(dev)))
    call.warm()
    exact, exact_s = call()
    peer_rows(torch, call, exact_s, exact, ours, res, "wan", a.out, selected_peers(a.peers))
    return fails


def mmdit_spec(torch, part, a):
    """A flow family's sweep: its benchmark module, diffusers classes, blocks, the generate inputs
    (random, seeded) and how ditrun and the pipeline take them."""
    import diffusers  # device only
    bf16 = torch.bfloat16
    g = torch.Generator().manual_seed(7)
    if part == "flux":
        import flux_forward as m
        layers = tuple(int(x) for x in a.flux_layers.split(",")) if a.flux_layers else (19, 38)
        p = FLUX
        gi = {"prompt_embeds": torch.randn(1, m.TEXT_LEN, m.CONFIG["joint_attention_dim"], generator=g),
              "pooled_prompt_embeds": torch.randn(1, m.CONFIG["pooled_projection_dim"], generator=g),
              "init_latents": torch.randn(1, m.tokens(), m.CONFIG["in_channels"], generator=g)}
        return dict(module=m, layers=layers, p=p, cls=(diffusers.FluxTransformer2DModel, diffusers.FluxPipeline),
                    make=dict(text_encoder_2=None, tokenizer_2=None), shape=["--height", str(m.HEIGHT), "--width", str(m.WIDTH),
                                                                           "--batch", "1", "--text-len", str(m.TEXT_LEN)],
                    title=f"FLUX.1-dev ({layers[0]} double, {layers[1]} single blocks), {m.WIDTH}x{m.HEIGHT}, {p['steps']} steps, "
                          f"guidance {p['guidance']}", gi=gi, fps=1, args=["--guidance", str(p["guidance"])],
                    pipe=lambda t: dict(prompt_embeds=t["prompt_embeds"].to(bf16), pooled_prompt_embeds=t["pooled_prompt_embeds"].to(bf16),
                                        latents=t["init_latents"].to(bf16), height=m.HEIGHT, width=m.WIDTH,
                                        guidance_scale=p["guidance"]))
    if part == "hunyuan":
        import hunyuan_forward as m
        layers = m.parse_layers(a.hunyuan_layers) if a.hunyuan_layers else (2, 4)
        p = HUNYUAN
        mask = (torch.arange(m.TEXT_LEN) < m.GEN_VALID).float()[None]
        gi = {"prompt_embeds": torch.randn(1, m.TEXT_LEN, m.CONFIG["text_embed_dim"], generator=g), "prompt_attention_mask": mask,
              "pooled_prompt_embeds": torch.randn(1, m.CONFIG["pooled_projection_dim"], generator=g),
              "init_latents": torch.randn(1, *m.latent_shape(p["frames"]), generator=g)}
        return dict(module=m, layers=layers, p=p, cls=(diffusers.HunyuanVideoTransformer3DModel, diffusers.HunyuanVideoPipeline),
                    make=dict(text_encoder_2=None, tokenizer_2=None), shape=list(m.shape_flags(p["frames"])),
                    title=f"HunyuanVideo ({layers[0]} double, {layers[1]} single blocks at the published widths), "
                          f"{m.WIDTH}x{m.HEIGHT}, {p['frames']} frames, {p['steps']} steps, guidance {p['guidance']}",
                    gi=gi, fps=1, args=["--guidance", str(p["guidance"])],
                    pipe=lambda t: dict(prompt_embeds=t["prompt_embeds"].to(bf16), prompt_attention_mask=t["prompt_attention_mask"],
                                        pooled_prompt_embeds=t["pooled_prompt_embeds"].to(bf16), latents=t["init_latents"],
                                        height=m.HEIGHT, width=m.WIDTH, num_frames=p["frames"], guidance_scale=p["guidance"]))
    import qwen_forward as m
    layers = int(a.qwen_layers) if a.qwen_layers else 20
    p = QWEN
    text = (1, m.TEXT_LEN, m.CONFIG["joint_attention_dim"])
    mask = lambda v: (torch.arange(m.TEXT_LEN) < v).to(torch.int64)[None]  # noqa: E731
    gi = {"prompt_embeds": torch.randn(text, generator=g), "prompt_embeds_mask": mask(m.GEN_VALID),
          "negative_prompt_embeds": torch.randn(text, generator=g), "negative_prompt_embeds_mask": mask(m.NEG_VALID),
          "init_latents": torch.randn(1, m.tokens(), m.CONFIG["in_channels"], generator=g).to(bf16).float()}
    return dict(module=m, layers=layers, p=p, cls=(diffusers.QwenImageTransformer2DModel, diffusers.QwenImagePipeline), make={},
                shape=list(m.shape_flags()), title=f"Qwen-Image ({layers} of 60 blocks at the published widths), {m.WIDTH}x{m.HEIGHT}, "
                                                  f"{p['steps']} steps, true CFG {p['true_cfg']}",
                gi=gi, fps=2, args=["--negative-embeds", None, "--true-cfg", str(p["true_cfg"])],
                pipe=lambda t: dict(prompt_embeds=t["prompt_embeds"].to(bf16), prompt_embeds_mask=t["prompt_embeds_mask"],
                                    negative_prompt_embeds=t["negative_prompt_embeds"].to(bf16),
                                    negative_prompt_embeds_mask=t["negative_prompt_embeds_mask"], true_cfg_scale=p["true_cfg"],
                                    latents=t["init_latents"].to(bf16), height=m.HEIGHT, width=m.WIDTH))


def run_mmdit(torch, a, res, part):
    """FLUX.1-dev, HunyuanVideo or Qwen-Image: the random-weight pipeline made with the family's
    benchmark module, its bundle, ditrun's sweep, then diffusers and cache-dit on the same model."""
    from safetensors.torch import save_file  # device only
    from diffusers import FlowMatchEulerDiscreteScheduler  # device only

    sp = mmdit_spec(torch, part, a)
    m, p = sp["module"], sp["p"]
    res[part] = {"title": sp["title"], "rows": [], "layers": list(sp["layers"]) if isinstance(sp["layers"], tuple) else sp["layers"],
                 **p}
    folder = os.path.join(a.work, part)
    model, pipe = pb.make_pipeline(torch, sp["cls"][0], m.model_config(sp["layers"]), sp["cls"][1], folder,
                                   scheduler=FlowMatchEulerDiscreteScheduler(**m.SCHEDULER), vae=None, text_encoder=None,
                                   tokenizer=None, **sp["make"])
    bundle, _, refused = pb.ditc_compile(a.ditc, folder, sp["shape"] + ["--dtype", "bf16", "--target", "sm_90", "--store",
                                                                      os.path.join(a.work, part + "_store")])
    if not bundle:
        res[part]["rows"].append({"contender": "ditrun", "policy": "-", "failed": f"ditc compile: {refused}"})
        write_results(res, a.out)
        return 1
    inputs = os.path.join(a.work, part + "_inputs.safetensors")
    save_file(sp["gi"], inputs)
    model.to("cpu")
    torch.cuda.empty_cache()
    args = ["--prompt-embeds", inputs, "--init-latents", inputs, "--steps", str(p["steps"])] + \
        [inputs if x is None else x for x in sp["args"]]
    fails = ditrun_sweep(a.ditrun, bundle, args, p["steps"], sp["fps"], a.work, res, part, a.out, selected_policies(a.policies),
                         a.budget)
    if a.no_peer:
        return fails
    dev = torch.device("cuda")
    model.to(dev)
    call = timed_call(torch, pipe, {**{k: v.to(dev) if hasattr(v, "to") else v for k, v in sp["pipe"](sp["gi"]).items()},
                                    "num_inference_steps": p["steps"]})
    call.warm()
    exact, exact_s = call()
    peer_rows(torch, call, exact_s, exact, read_f32(os.path.join(a.work, f"{part}_off.safetensors")), res, part, a.out,
              selected_peers(a.peers))
    return fails


def run(a):
    import torch  # device only

    res = {"run": run_info(), "device": torch.cuda.get_device_name(0), "policies": POLICIES, "peers": PEERS,
           "note": RANDOM_NOTE}
    fails = 0
    parts = ["wan", "flux", "hunyuan", "qwen"] if a.part == "all" else a.part.split(",")
    bad = [x for x in parts if x not in ("wan", "flux", "hunyuan", "qwen")]
    if bad:
        sys.exit(f"--part {a.part}: expected wan, flux, hunyuan, qwen (comma-separated) or all, found {bad[0]}")
    if "wan" in parts:
        if not (a.wan_model and a.wan_bundle):
            sys.exit("--part wan needs --wan-model and --wan-bundle")
        fails += run_wan(torch, a, res)
        torch.cuda.empty_cache()
    for part in ("flux", "hunyuan", "qwen"):
        if part in parts:
            fails += run_mmdit(torch, a, res, part)
            torch.cuda.empty_cache()
    res["complete"] = True
    res["plots"] = [os.path.basename(x) for x in plot(res, a.out)]
    for line in write_results(res, a.out):
        print(line)
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pb.add_contender_flags(ap)
    ap.add_argument("--part", default="all", help="wan, flux, hunyuan, qwen, comma-separated, or all")
    ap.add_argument("--wan-model")
    ap.add_argument("--wan-bundle")
    ap.add_argument("--flux-layers", help="D,S: double and single blocks (default: the published 19,38)")
    ap.add_argument("--hunyuan-layers", help="D,S: HunyuanVideo's double and single blocks (default 2,4 of 20,40)")
    ap.add_argument("--qwen-layers", help="Qwen-Image's blocks (default 20 of 60)")
    ap.add_argument("--bundle", help="--dry-run: a tiny bundle for the ditrun sweep")
    ap.add_argument("--inputs", help="--dry-run: its prompt_embeds, negative_prompt_embeds and init_latents")
    ap.add_argument("--steps", type=int, default=10, help="--dry-run: the tiny sweep's steps")
    ap.add_argument("--policies", help="comma-separated --step-cache specs (default: all of POLICIES; off always runs first)")
    ap.add_argument("--budget", type=float, help="seconds for each model's ditrun sweep; policies left after it are skipped")
    ap.add_argument("--peers", help="comma-separated indexes into PEERS (default: all)")
    pb.add_switches(ap, "--no-peer", "--keep", "--dry-run")
    a = ap.parse_args()
    return pb.dispatch(ap, a, dry_run, run, ("ditc", "ditrun", "work", "out"))


if __name__ == "__main__":
    sys.exit(main())
