#!/usr/bin/env python3
"""Where a bundle's kernels slow down along its forward, and the clocks the device holds meanwhile.

usage: bench/kernel_timeline.py --bundle DIR --inputs FILE [--ditrun BIN] [--forwards 3] [--sustain 20] [--out FILE]

1. `--forwards` consecutive forwards of the bundle (after one warm-up) in this process through the
   Python package over libditrun ($DITRUN_LIBRARY), under torch.profiler: every kernel by start time.
   Each kernel name's median duration in each fifth of the profiled time shows whether the same
   kernels run slower later in a run (the clock a long run of back-to-back work holds) rather than
   slower everywhere.
2. `ditrun bench --steps SUSTAIN` while nvidia-smi samples the SM clock, power draw, temperature and
   the active clock-limiting reasons every 100 ms: the clock and power under this load.
One JSON object (--out) with both; a summary on stdout. Device only (torch, a GPU)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
FIFTHS = 5


def profile_timeline(torch, bundle, inputs, forwards):
    """Kernels of `forwards` back-to-back forwards by start time: [(start_us, dur_us, name)]."""
    sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
    import ditrun  # device only
    from safetensors.torch import load_file  # device only
    from torch.profiler import ProfilerActivity, profile  # device only
    tensors = load_file(inputs, device="cuda")
    with ditrun.Bundle(bundle, device="cuda") as b:
        kw = {k: v for k, v in tensors.items() if k in {s.name for s in b.inputs}}
        b.forward(**kw)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(forwards):
                b.forward(**kw)
            torch.cuda.synchronize()
    evs = []
    for ev in prof.events():
        if getattr(ev, "device_type", None) != torch.autograd.DeviceType.CUDA or "Memset" in ev.name:
            continue
        dur = ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
        evs.append((ev.time_range.start, dur, ev.name))
    return sorted(evs)


def by_fifth(evs):
    """Each kernel name's count and median microseconds in each fifth of the profiled span."""
    t0, t1 = evs[0][0], evs[-1][0] + evs[-1][1]
    span = max(t1 - t0, 1)
    cells = {}
    for start, dur, name in evs:
        f = min(int((start - t0) * FIFTHS / span), FIFTHS - 1)
        cells.setdefault(name, [[] for _ in range(FIFTHS)])[f].append(dur)
    rows = []
    for name, parts in cells.items():
        total = sum(sum(p) for p in parts)
        rows.append({"name": name[:120], "total_us": total,
                     "median_us": [statistics.median(p) if p else None for p in parts], "count": [len(p) for p in parts]})
    return sorted(rows, key=lambda r: -r["total_us"])


def sustained_clocks(ditrun, bundle, inputs, steps):
    """`ditrun bench --steps STEPS` under gpumem.ClockPoll: its forward median and the clock summary."""
    from gpumem import ClockPoll
    with ClockPoll() as cp:
        r = subprocess.run([ditrun, "bench", bundle, "--inputs", inputs, "--steps", str(steps), "--warmup", "1"], capture_output=True, text=True)
    ms = next((float(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("forward_ms_median")), None)
    return {"forward_ms_median": ms, "clocks": cp.summary(), "bench_rc": r.returncode, "bench_err": r.stderr.strip()[-300:] if r.returncode else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--ditrun", default="ditrun")
    ap.add_argument("--forwards", type=int, default=3)
    ap.add_argument("--sustain", type=int, default=20, help="forwards of the sampled `ditrun bench` (0: none)")
    ap.add_argument("--out")
    a = ap.parse_args()
    import torch  # device only
    res = {"bundle": os.path.basename(os.path.normpath(a.bundle)), "forwards": a.forwards}
    evs = profile_timeline(torch, a.bundle, a.inputs, a.forwards)
    res["kernels"] = len(evs)
    res["by_fifth"] = by_fifth(evs)
    print(f"{len(evs)} kernels over {a.forwards} forwards; median microseconds by fifth of the profiled time:")
    for r in res["by_fifth"][:12]:
        print(f"  {r['total_us'] / 1e3:9.2f} ms  " + " ".join("-" if m is None else f"{m:8.1f}" for m in r["median_us"]) + f"  {r['name'][:70]}")
    if a.sustain:
        from gpumem import clock_line
        c = res["sustained"] = sustained_clocks(a.ditrun, a.bundle, a.inputs, a.sustain)
        print(clock_line(f"ditrun bench, {a.sustain} forwards ({c['forward_ms_median']} ms median)", c["clocks"]))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
