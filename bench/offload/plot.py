#!/usr/bin/env python3
"""Draws an offload sweep's results (the offload.json of bench/offload/sweep.py) as one PNG:
step time and peak memory against frames (or batch size) per mode (with the planner's predictions), the
resident-fraction trade (peak memory against step time) and the chunk-size sweep; panels
without data are left out.

usage: bench/offload/plot.py OFFLOAD_JSON [PNG] [--title TEXT]
"""
import argparse
import json
import os


def plot(res, path, title=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ["time", "memory"] + (["residency"] if res.get("residency") else []) + (["chunks"] if res.get("chunks") else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    ax = dict(zip(panels, axes[0]))
    axis = res.get("axis", "frames")  # the swept shape: frames, or the batch size (FLUX.1's sweep)
    for mode in res["modes"]:
        pts = [p for p in res["points"] if p["mode"] == mode]
        if not pts:
            continue
        fr = [p[axis] for p in pts]
        line = ax["time"].plot(fr, [p["ms"] for p in pts], "o-", label=mode)[0]
        ax["memory"].plot(fr, [p["peak_mib"] / 1024 for p in pts], "o-", label=mode, color=line.get_color())
        pred = [p for p in pts if p.get("predicted")]
        if pred:
            fp = [p[axis] for p in pred]
            ax["time"].plot(fp, [p["predicted"]["ms"] for p in pred], "--", color=line.get_color(), label=f"{mode}, predicted")
            ax["memory"].plot(fp, [p["predicted"]["peak_mib"] / 1024 for p in pred], "--", color=line.get_color(),
                              label=f"{mode}, predicted")
    for key, t in (("time", "forward ms"), ("memory", "peak device memory, GiB")):
        ax[key].set_xscale("log")
        ax[key].set_yscale("log" if key == "time" else "linear")
        ax[key].set_xlabel(axis)
        ax[key].set_title(t)
        ax[key].legend(fontsize=7)
    if "residency" in ax:
        r = res["residency"]
        a = ax["residency"]
        a.plot([p["peak_mib"] / 1024 for p in r], [p["ms"] for p in r], "o-", label="measured")
        a.plot([p["predicted"]["peak_mib"] / 1024 for p in r], [p["predicted"]["ms"] for p in r], "k--", label="predicted")
        for p in r:
            a.annotate(f"{p['resident']:.0%}", (p["peak_mib"] / 1024, p["ms"]))
        a.set_xlabel("peak device memory, GiB")
        a.set_ylabel("forward ms")
        a.set_title(f"resident fraction, {axis} {res.get('residency_frames', '')}")
        a.legend(fontsize=7)
    if "chunks" in ax:
        a = ax["chunks"]
        a.plot([p["chunk_mb"] for p in res["chunks"]], [p["ms"] for p in res["chunks"]], "o-")
        a.set_xscale("log", base=2)
        a.set_xlabel("chunk MiB")
        a.set_ylabel("forward ms")
        a.set_title(f"chunk size, {axis} {res.get('chunk_frames', '')}")
    fig.suptitle(title or " ".join(x for x in ("offload sweep", res.get("extra", ""), res.get("run_flags", "")) if x))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("png", nargs="?")
    ap.add_argument("--title")
    a = ap.parse_args()
    res = json.load(open(a.json))
    print(plot(res, a.png or os.path.splitext(a.json)[0] + ".png", a.title))


if __name__ == "__main__":
    main()
