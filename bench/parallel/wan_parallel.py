#!/usr/bin/env python3
"""Parallel topologies on several GPUs, every contender in one run: one GPU against Ulysses-2,
ring-2, tensor-parallel-2 and cfg-parallel-2 (and any --topology given), for the same model,
shape, weights and inputs.

For each topology: `ditc compile`, then
  - parity: one forward, one process per rank (`ditrun launch`), against the one-GPU forward
    (cosine and relative L2); and the same with the ranks as threads of one process;
  - speed: a `generate` with classifier-free guidance (two forwards and the UniPC update per
    step), the median step time over steps 2..N, speedup over one GPU and efficiency
    (speedup / GPUs); again with NCCL_P2P_DISABLE=1 (collectives through host memory).

usage: bench/parallel/wan_parallel.py --ditc BIN --ditrun BIN --model DIR --out RESULTS_DIR
           [--frames 81 --height 480 --width 832] [--text-len 512] [--steps 4] [--topology "FLAGS"]...
           [--in-order] [--no-threads] [--no-p2p-variant] [--env-variant VAR=VALUE] [--target sm_90|cpu]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ceilings import run_info  # noqa: E402

DEFAULT_TOPOLOGIES = ["--cp 2 --cp-mode ulysses", "--cp 2 --cp-mode ring", "--tp 2", "--cfg-parallel"]
STEP = re.compile(r"ditrun: step (\d+)/(\d+)\s+t=\S+\s+([0-9.]+)s")


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        print("FAILED:", " ".join(cmd), "\n", r.stdout[-2000:], r.stderr[-4000:], flush=True)
    return r


def compile_bundle(a, flags, out):
    cmd = [a.ditc, "compile", a.model, "--frames", str(a.frames), "--height", str(a.height), "--width", str(a.width),
           "--text-len", str(a.text_len), "--dtype", "bf16", "--target", a.target, "-o", out, "-q"] + flags.split()
    r = run(cmd)
    return r.stdout.strip().splitlines()[-1].split()[2] if r.returncode == 0 else None


def world_of(bundle):
    with open(os.path.join(bundle, "manifest.json")) as fh:
        return json.load(fh)["topology"]["world"]


def ranks_cmd(a, world, mode):
    """The command prefix that runs a bundle's ranks: one process each, or threads of one."""
    if world == 1:
        return [a.ditrun]
    if mode == "processes":
        return [a.ditrun, "launch", "-n", str(world), "--"]
    return [a.ditrun]


def thread_flags(world, mode):
    return ["--devices", str(world)] if world > 1 and mode == "threads" else []


def forward(a, bundle, inputs, out, mode):
    w = world_of(bundle)
    cmd = ranks_cmd(a, w, mode) + ["forward", bundle, "--inputs", inputs, "--out", out] + thread_flags(w, mode)
    if os.path.exists(out):
        os.remove(out)
    r = run(cmd)
    return load_file(out)["sample"].float() if r.returncode == 0 else None


def step_times(a, bundle, gen_inputs, mode, env=None, extra=()):
    w = world_of(bundle)
    out = os.path.join(a.out, "g.safetensors")
    cmd = ranks_cmd(a, w, mode) + ["generate", bundle, "--prompt-embeds", gen_inputs, "--negative-embeds", gen_inputs,
                                   "--init-latents", gen_inputs, "--steps", str(a.steps), "--out", out] + thread_flags(w, mode) + list(extra)
    r = run(cmd, env)
    if r.returncode:
        return None, "failed"
    t = [float(m.group(3)) for m in STEP.finditer(r.stderr)]
    coll = re.search(r"collectives: ([^)]*)\)", r.stderr)
    if not t:
        return None, "no step times"
    return (statistics.median(t[1:]) if len(t) > 1 else t[0] if t else None), (coll.group(1) if coll else "none")


def split(a, bundle, inputs, env=None):
    """One step-synchronized forward of every rank (threads of one process, a GPU each): rank
    0's milliseconds in GEMMs, attention, collectives and the rest."""
    w = world_of(bundle)
    r = run([a.ditrun, "bench", bundle, "--inputs", inputs, "--steps", "2"] + (["--devices", str(w)] if w > 1 else []), env)
    for line in r.stdout.splitlines():
        if line.startswith("split_ms"):
            v = line.split()[1:]
            v = v[:v.index("(step-synchronized")]
            return {v[i]: float(v[i + 1]) for i in range(0, len(v) - 1, 2)}
    return None


def compare(x, ref):
    x, ref = x.double(), ref.double()
    cos = torch.nn.functional.cosine_similarity(x.flatten(), ref.flatten(), dim=0).item()
    return cos, ((x - ref).norm() / ref.norm()).item()


def main():
    ap = argparse.ArgumentParser()
    for k in ("--ditc", "--ditrun", "--model", "--out"):
        ap.add_argument(k, required=True)
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--topology", action="append", help="ditc flags of one topology (default: the four two-GPU ones)")
    ap.add_argument("--no-p2p-variant", action="store_true", help="skip the NCCL_P2P_DISABLE=1 timings")
    ap.add_argument("--time-threads", action="store_true", help="also time the ranks as threads of one process")
    ap.add_argument("--no-threads", action="store_true", help="skip the runs with the ranks as threads of one process")
    ap.add_argument("--in-order", action="store_true",
                    help="also time each topology with --no-overlap-collectives (ditrun overlaps NCCL collectives by default)")
    ap.add_argument("--env-variant", help="also time each multi-GPU topology with these environment variables set "
                    "(e.g. 'DIT_CUDA_COPY=engines', or several separated by spaces)")
    ap.add_argument("--target", default="sm_90", help="cpu: a dry run of the whole benchmark on the CPU backend")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.model, "config.json")) as fh:
        cfg = json.load(fh)
    f, h, w = (a.frames - 1) // 4 + 1, a.height // 8, a.width // 8
    g = torch.Generator().manual_seed(0)
    fin = os.path.join(a.out, "forward_inputs.safetensors")
    save_file({"hidden_states": torch.randn(1, cfg["in_channels"], f, h, w, generator=g), "timestep": torch.tensor([700]),
               "encoder_hidden_states": torch.randn(1, a.text_len, cfg["text_dim"], generator=g)}, fin)
    gin = os.path.join(a.out, "generate_inputs.safetensors")
    save_file({"prompt_embeds": torch.randn(1, a.text_len, cfg["text_dim"], generator=g),
               "negative_prompt_embeds": torch.randn(1, a.text_len, cfg["text_dim"], generator=g),
               "init_latents": torch.randn(1, cfg["in_channels"], f, h, w, generator=g)}, gin)

    one = compile_bundle(a, "", os.path.join(a.out, "b"))
    if not one:
        sys.exit("compile failed")
    ref = forward(a, one, fin, os.path.join(a.out, "f1.safetensors"), "processes")
    t1, _ = step_times(a, one, gin, "processes")
    split1 = split(a, one, fin)
    print(f"one GPU: step with CFG {t1 * 1e3:.1f} ms (median of steps 2..{a.steps}); forward split {split1}", flush=True)
    rows = []
    p2p_env = dict(os.environ, NCCL_P2P_DISABLE="1")
    for flags in a.topology or DEFAULT_TOPOLOGIES:
        b = compile_bundle(a, flags, os.path.join(a.out, "b"))
        row = {"topology": flags, "world": world_of(b) if b else None}
        if b:
            for mode in ("processes",) if a.no_threads else ("processes", "threads"):
                y = forward(a, b, fin, os.path.join(a.out, "fp.safetensors"), mode)
                if y is not None:
                    row[f"cosine_{mode}"], row[f"rel_l2_{mode}"] = compare(y, ref)
                if mode == "processes" or a.time_threads:
                    t, coll = step_times(a, b, gin, mode)
                    row[f"step_ms_{mode}"], row[f"collectives_{mode}"] = (t * 1e3 if t else None), coll
            if a.in_order and row["world"] > 1 and flags.split() != ["--cfg-parallel"]:
                t, _ = step_times(a, b, gin, "processes", extra=("--no-overlap-collectives",))
                row["step_ms_in_order"] = t * 1e3 if t else None
            if a.env_variant and row["world"] > 1:
                env = dict(os.environ, **dict(kv.split("=", 1) for kv in a.env_variant.split()))
                t, _ = step_times(a, b, gin, "processes", env)
                row["step_ms_env_variant"] = t * 1e3 if t else None
                row["split_ms_env_variant"] = split(a, b, fin, env)
            if not a.no_p2p_variant:
                t, _ = step_times(a, b, gin, "processes", p2p_env)
                row["step_ms_no_p2p"] = t * 1e3 if t else None
            row["split_ms"] = split(a, b, fin)
        rows.append(row)
        print(json.dumps(row), flush=True)

    print(f"\nWan transformer {a.frames}x{a.height}x{a.width}, generate step with CFG (2 forwards + UniPC), "
          f"median of steps 2..{a.steps}; one process per GPU unless marked threads")
    print("| topology | GPUs | step ms | speedup | efficiency | collectives in order: step ms, speedup | threads: step ms | "
          "NCCL_P2P_DISABLE=1: step ms, speedup | cosine vs 1 GPU (processes / threads) | collectives |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| one GPU | 1 | {t1 * 1e3:.1f} | 1.00 | 1.00 | | | | | |")

    def f1(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"
    for r in rows:
        sp = t1 * 1e3 / r["step_ms_processes"] if r.get("step_ms_processes") else None
        spn = t1 * 1e3 / r["step_ms_no_p2p"] if r.get("step_ms_no_p2p") else None
        r["speedup"], r["efficiency"], r["speedup_no_p2p"] = sp, (sp / r["world"] if sp else None), spn
        spo = t1 * 1e3 / r["step_ms_in_order"] if r.get("step_ms_in_order") else None
        r["speedup_in_order"] = spo
        print(f"| {r['topology']} | {r['world']} | {f1(r.get('step_ms_processes'), '.1f')} | {f1(sp, '.2f')} | "
              f"{f1(r['efficiency'], '.2f')} | {f1(r.get('step_ms_in_order'), '.1f')}, {f1(spo, '.2f')} | "
              f"{f1(r.get('step_ms_threads'), '.1f')} | {f1(r.get('step_ms_no_p2p'), '.1f')}, "
              f"{f1(spn, '.2f')} | {f1(r.get('cosine_processes'), '.6f')} / {f1(r.get('cosine_threads'), '.6f')} | "
              f"{r.get('collectives_processes')} / {r.get('collectives_threads')} |")
    if a.env_variant:
        print(f"\nwith {a.env_variant}: " + ", ".join(f"{r['topology']} {f1(r.get('step_ms_env_variant'), '.1f')} ms" for r in rows))
    print("\nOne forward, step-synchronized, rank 0 (ms): " + f"one GPU {split1}")
    for r in rows:
        print(f"  {r['topology']}: {r.get('split_ms')}")
    with open(os.path.join(a.out, "parallel.json"), "w") as fh:
        json.dump({"run": run_info(), "one_gpu_step_ms": t1 * 1e3, "one_gpu_split_ms": split1, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
