#!/usr/bin/env python3
"""Wan2.2 denoising loops at the published sizes, `ditrun generate` against diffusers' own
pipelines on the same models, inputs and scheduler, in one run.

  --part a14b  Wan2.2-T2V-A14B (--layers blocks per expert at the real widths, 1280x720, 81
               frames): a 6-step UniPC generate with CFG across the 0.875 boundary (guidance 4
               on transformer, 3 on transformer_2, shift 3), ditrun against WanPipeline.__call__
               (output_type "latent", the same initial latents): final-latents cosine >= 0.999,
               time per step and which expert ran each step (ditrun's log, hooks on diffusers'
               models, and the schedule computed here must agree). With --budget-gib G also
               ditrun compiled with --offload chunked --memory-budget: G is a budget for the
               published 40-block experts, scaled to the blocks compiled here (see
               scaled_budget_gib); a compile that refuses is recorded as a refusal, not a failure.
  --part ti2v  Wan2.2-TI2V-5B image-to-video (all 30 layers, 1280x704, 121 frames, shift 5,
               guidance 5): ditrun generate --image-latents (random normalized image latents
               [1, 48, 1, h, w]) against WanImageToVideoPipeline.__call__ with expand_timesteps,
               its prepare_latents replaced by one returning the same latents, image latents and
               first-frame mask (no VAE encoding); a ditrun without --image-latents is recorded
               as a refusal.

  --part a14b-swap  Wan2.2-T2V-A14B whole (both experts of 40 blocks, random weights written by
               make_tiny_wan at the published config into --scratch, host memory by default, then
               deleted once compiled): a 4-step generate without CFG across the 0.875 boundary
               (t = 999, 900 | 750, 500), first with both experts resident, then compiled with
               --offload chunked --memory-budget G (--budget-gib, default 48) so that transformer_2
               waits in host memory and streams in during the high-noise steps. Peak device memory,
               the steps around the switch and the swap's cost; the two runs' latents must be
               identical. Parity against diffusers is --part a14b's (fewer blocks, the same kernels).

Results: OUT/wan22_generate_<part>.json. Models come from bench/wan22_forward.py's
make_pipeline (diffusers' default initialisation, bf16). --dry-run checks the schedule, the
expert per step, the budget scaling and the summaries without torch or a GPU.

usage: bench/wan22_generate.py --part a14b|ti2v|a14b-swap --ditc BIN --ditrun BIN --work DIR --out DIR
           [--layers N] [--steps 6] [--budget-gib 48] [--scratch DIR] [--keep]
       bench/wan22_generate.py --dry-run --out DIR
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pipeline_bench as pb  # noqa: E402
import wan22_forward as wf  # noqa: E402
from ceilings import run_info  # noqa: E402

PARTS = {
    "a14b": {"variant": "a14b", "guidance": 4.0, "guidance_2": 3.0, "layers": 4},
    "ti2v": {"variant": "ti2v-5b", "guidance": 5.0, "guidance_2": None, "layers": None},
}
STEP_RE = re.compile(r"^ditrun: step (\d+)/(\d+)\s+t=(\S+)\s+(?:expert (\S+)\s+)?([0-9.]+)s(?:\s+\((.*)\))?(?:\s+\[elapsed [^]]*\])?$")
SWAP_RE = re.compile(r"^ditrun: expert swap: (.*)$")
MEMORY_RE = re.compile(r"^ditrun: memory: ([0-9.]+) MiB allocated, ([0-9.]+) MiB predicted", re.M)
LOOP_RE = re.compile(r"^ditrun: generate (\d+) steps in ([0-9.]+)s$")


def flow_unipc_timesteps(steps, shift, train=wf.TRAIN_TIMESTEPS):
    """UniPCMultistepScheduler.set_timesteps with use_flow_sigmas: linspace(1, 1/train, N+1)[:-1]
    flow-shifted, the first nudged below 1, timesteps sigma*train truncated to integers."""
    sig = [1 + (1 / train - 1) * i / steps for i in range(steps)]
    sig = [shift * s / (1 + (shift - 1) * s) for s in sig]
    if abs(sig[0] - 1) < 1e-6:
        sig[0] -= 1e-6
    return [int(s * train) for s in sig]


def experts_per_step(timesteps, boundary_ratio, train=wf.TRAIN_TIMESTEPS):
    """WanPipeline's choice: transformer while t >= boundary_ratio * train, then transformer_2."""
    if boundary_ratio is None:
        return ["transformer"] * len(timesteps)
    b = boundary_ratio * train
    return ["transformer" if t >= b else "transformer_2" for t in timesteps]


def scaled_budget_gib(budget_gib, peak_bytes, weight_bytes, layers, published_layers):
    """A budget meant for the published model, applied to `layers` blocks: what is not weights
    (activations, workspace: the compiled bundle's predicted peak less its weights) stays, the
    weights' share of the budget shrinks with the block count. Weights outside the blocks
    (embeddings, output) are counted as if they scaled too, a small error at these widths."""
    other = (peak_bytes - weight_bytes) / 2**30
    return other + (budget_gib - other) * layers / published_layers


def parse_ditrun_log(text):
    """Per-step (t, expert, seconds) and the loop's seconds from ditrun generate's stderr."""
    steps, loop = [], None
    for line in text.splitlines():
        m = STEP_RE.match(line.strip())
        if m:
            steps.append({"t": float(m.group(3)), "expert": m.group(4) or "transformer", "s": float(m.group(5)),
                          "note": m.group(6)})
        m = LOOP_RE.match(line.strip())
        if m:
            loop = float(m.group(2))
    return steps, loop


def swap_line(text):
    """What ditrun reports of the expert swap (bytes, chunks before and at the switch), or None."""
    for line in text.splitlines():
        m = SWAP_RE.match(line.strip())
        if m:
            return m.group(1)
    return None


def around_switch(step_s, experts):
    """Per-step seconds of the steps either side of the expert switch (the step that switches
    pays for the other expert's weights when they are streamed)."""
    for i in range(1, len(experts)):
        if experts[i] != experts[i - 1]:
            return {"before": step_s[i - 1], "switch": step_s[i], "after": step_s[i + 1] if i + 1 < len(step_s) else None,
                    "step": i + 1}
    return None


def median(x):
    x = sorted(x)
    return x[len(x) // 2] if len(x) % 2 else (x[len(x) // 2 - 1] + x[len(x) // 2]) / 2


def swap_cost(b, r):
    """The budgeted run's steps before, at and after the switch against the resident run's
    same steps, as a fraction (0.03 = 3% slower), or None without both."""
    if not r or not r.get("step_s") or not b.get("around_switch"):
        return None
    i = b["around_switch"]["step"] - 1
    idx = [j for j in (i - 1, i, i + 1) if 0 <= j < min(len(b["step_s"]), len(r["step_s"]))]
    return sum(b["step_s"][j] for j in idx) / sum(r["step_s"][j] for j in idx) - 1


def summary(res):
    L = [f"{res['part']}: {res['steps']} steps with CFG, {res['layers']} of {res['published_layers']} blocks per expert, "
         f"{res['width']}x{res['height']}, {res['frames']} frames"]
    d, r = res.get("diffusers"), res.get("ditrun")
    if d and r and not r.get("failed") and not r.get("refused"):
        L.append(f"diffusers loop {d['loop_s']:.2f} s, ditrun loop {r['loop_s']:.2f} s ({d['loop_s'] / r['loop_s']:.2f}x); "
                 f"median step {median(d['step_s']):.3f} s against {median(r['step_s']):.3f} s; final latents cosine "
                 f"{r['cosine']:.6f}, relative L2 {r['rel_l2']:.3e}; experts {' '.join(r['experts'])}")
    elif r:
        L.append(f"ditrun: {'refused' if r.get('refused') else 'failed'}: {(r.get('refused') or r.get('failed'))[:300]}")
    b = res.get("budget")
    if b:
        if b.get("refused"):
            L.append(f"--memory-budget {b['budget_gib_compiled']:.2f} GiB ({b['budget_gib']:g} GiB at the published size): "
                     f"refused: {b['refused'][:300]}")
        elif b.get("failed"):
            L.append(f"--memory-budget run failed: {b['failed'][:300]}")
        else:
            sw = b.get("around_switch") or {}
            L.append(f"--memory-budget {b['budget_gib_compiled']:.2f} GiB: loop {b['loop_s']:.2f} s, peak {b['peak_gib']:.2f} GiB "
                     f"(resident {r.get('peak_gib', 0):.2f} GiB); steps around the switch {sw.get('before', 0):.3f} / "
                     f"{sw.get('switch', 0):.3f} / {sw.get('after') or 0:.3f} s; cosine {b['cosine']:.6f}")
            cost = swap_cost(b, r)
            if cost is not None:
                L.append(f"the swap's cost: the three steps around the switch take {100 * cost:+.1f}% against the resident "
                         f"bundle's same steps; ditrun: {b.get('swap') or '-'}")
    return L


def new_results(part, steps, layers):
    p = PARTS[part]
    v = wf.VARIANTS[p["variant"]]
    ts = flow_unipc_timesteps(steps, v["shift"])
    return {"part": part, "variant": p["variant"], "config_source": wf.CONFIG_SOURCE, "layers": layers,
            "published_layers": v["config"]["num_layers"], "frames": v["frames"], "height": v["height"],
            "width": v["width"], "text_len": v["text_len"], "latent": wf.latent_shape(v), "steps": steps,
            "shift": v["shift"], "guidance": p["guidance"], "guidance_2": p["guidance_2"],
            "boundary_ratio": v["boundary_ratio"], "timesteps": ts,
            "experts_expected": experts_per_step(ts, v["boundary_ratio"]), "cosine_min": wf.COSINE_MIN}


def save(res, out):
    pb.save(res, out, f"wan22_generate_{res['part']}.json")


def dry_run(a):
    """The schedule and expert choice against the tiny A14B golden's (tests/data), the budget
    scaling and the summaries with made-up times (nothing it writes is a measurement)."""
    ts = flow_unipc_timesteps(6, 3.0)
    assert ts == [999, 937, 857, 750, 600, 376], ts
    ex = experts_per_step(ts, 0.875)
    assert ex == ["transformer"] * 2 + ["transformer_2"] * 4, ex
    meta = os.path.join(HERE, "..", "tests", "data", "wan22_a14b_tiny", "meta.json")
    if os.path.exists(meta):
        m = json.load(open(meta))
        assert [("transformer", "transformer_2")[i] for i in m["expert"]] == experts_per_step(
            flow_unipc_timesteps(m["steps"], m["shift"]), m["boundary_ratio"])
    assert flow_unipc_timesteps(4, 5.0)[0] == 999
    # 10 GiB besides the weights, 2 x 4 blocks of 14 GiB at 40: the 48 GiB budget leaves
    # 38 GiB for 80 blocks' weights, 3.8 GiB for 8.
    g = scaled_budget_gib(48, int(15.6 * 2**30), int(5.6 * 2**30), 4, 40)
    assert abs(g - (10 + 38 * 0.1)) < 1e-9, g
    log = ("ditrun: step 1/6  t=999  expert transformer  0.500s\nditrun: step 2/6  t=937  expert transformer  0.400s\n"
           "ditrun: step 3/6  t=857  expert transformer_2  0.900s  (expert switch 0.092 ms: 0 chunks loaded at the switch)"
           "  [elapsed 1.80s, ETA 1.80s]\n"
           "ditrun: step 4/6  t=750  expert transformer_2  0.400s\n"
           "ditrun: step 5/6  t=600  expert transformer_2  0.400s\nditrun: step 6/6  t=376  expert transformer_2  0.400s\n"
           "ditrun: generate 6 steps in 3.100s\n"
           "ditrun: expert swap: 0.53 MiB of transformer_2's resident set, 4 chunks loaded over 2 forwards before the "
           "switch, 0 at the switch (0.092 ms)\n")
    steps, loop = parse_ditrun_log(log)
    assert steps[2]["note"].startswith("expert switch 0.092 ms") and swap_line(log).startswith("0.53 MiB")
    assert loop == 3.1 and [s["expert"] for s in steps] == ex and [int(s["t"]) for s in steps] == ts
    sw = around_switch([s["s"] for s in steps], [s["expert"] for s in steps])
    assert sw == {"before": 0.4, "switch": 0.9, "after": 0.4, "step": 3}, sw
    one, loop1 = parse_ditrun_log("ditrun: step 1/4  t=999  0.250s  [elapsed 0.25s, ETA 0.75s]\nditrun: generate 4 steps in 1.000s\n")
    assert one[0]["expert"] == "transformer" and one[0]["s"] == 0.25 and loop1 == 1.0
    for part in PARTS:
        res = new_results(part, 6, PARTS[part]["layers"] or wf.VARIANTS[PARTS[part]["variant"]]["config"]["num_layers"])
        res["dry_run"] = True
        st = [s["s"] for s in steps]
        res["diffusers"] = {"loop_s": 4.0, "step_s": [x * 1.3 for x in st], "experts": res["experts_expected"]}
        res["ditrun"] = {"loop_s": loop, "step_s": st, "experts": res["experts_expected"], "cosine": 0.99991,
                         "rel_l2": 0.012, "peak_gib": 20.0}
        res["experts_agree"] = True
        if part == "a14b":
            res["budget"] = {"budget_gib": 48.0, "budget_gib_compiled": g, "loop_s": 3.5, "peak_gib": 14.0,
                             "step_s": st, "around_switch": sw, "cosine": 0.99991}
        for line in summary(res):
            print(line)
        save(res, a.out)
    ts4 = flow_unipc_timesteps(SWAP_STEPS, 3.0)
    assert ts4 == [999, 900, 750, 500] and experts_per_step(ts4, 0.875) == ["transformer"] * 2 + ["transformer_2"] * 2, ts4
    sw4 = {"res": {"step_s": [10.0, 10.0, 10.2, 10.0], "loop_s": 40.2, "peak_gib": 40.0, "predicted_peak_bytes": 44 * 2**30,
                   "around_switch": {"before": 10.0, "switch": 10.2, "after": 10.0, "step": 3}}}
    swr = {"part": "a14b-swap", "steps": 4, "published_layers": 40, "width": 1280, "height": 720, "frames": 81,
           "timesteps": ts4, "budget_gib": 48.0, "identical": False, "budget_vs_resident": {"cosine": 0.999999, "rel_l2": 1e-3},
           "resident": dict(sw4["res"], step_s=[10.0, 10.0, 10.0, 10.0], peak_gib=66.0),
           "budget": dict(sw4["res"], swap="x")}
    assert abs(swap_cost(swr["budget"], swr["resident"]) - 0.2 / 30) < 1e-12
    assert MEMORY_RE.findall("ditrun: memory: 26510.75 MiB allocated, 48420.14 MiB predicted (rank 0; 1 bytes within)\n"
                             "ditrun: memory: 48420.14 MiB allocated, 48420.14 MiB predicted (rank 0)\n")[-1] == ("48420.14", "48420.14")
    assert any("+0.7%" in line for line in swap_summary(swr)), swap_summary(swr)
    r = new_results("a14b", 6, 4)
    r["ditrun"] = {"refused": "ditrun: error: unknown option --image-latents"}
    r["budget"] = {"budget_gib": 48.0, "budget_gib_compiled": g, "refused": "ditc: error: UNIMPLEMENTED: two experts"}
    assert any("refused" in line for line in summary(r))


def run_ditrun(cmd, log_path):
    """ditrun generate with its peak device memory (nvidia-smi over the baseline)."""
    from gpumem import MemPoll, used_mib

    base = used_mib(0)
    poll = MemPoll(gpu=0, every_s=0.05)
    poll.start()
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    poll.stop = True
    poll.join()
    with open(log_path, "w") as fh:
        fh.write(r.stderr)
    steps, loop = parse_ditrun_log(r.stderr)
    return r, {"loop_s": loop, "process_s": wall, "step_s": [s["s"] for s in steps], "experts": [s["expert"] for s in steps],
               "timesteps": [s["t"] for s in steps], "notes": [s["note"] for s in steps], "swap": swap_line(r.stderr),
               "peak_gib": (poll.peak - base) / 1024}


def compare(torch, path, ref):
    from safetensors.torch import load_file  # device only
    from wan_forward import parity

    p = parity(torch, load_file(path)["latents"], ref)
    return {"cosine": p["cosine"], "rel_l2": p["rel_l2"]}


def diffusers_loop(torch, pipe, models, kwargs):
    """pipe(...) with output_type "latent": final latents, seconds per step (synchronized at each
    step's end) and the expert each step ran (forward hooks)."""
    calls, marks = [], []
    hooks = [m.register_forward_pre_hook(lambda mod, args, i=i: calls.append(i)) for i, m in enumerate(models)]

    def on_step(p, i, t, cb):
        torch.cuda.synchronize()
        marks.append(time.perf_counter())
        return {}

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            lat = pipe(output_type="latent", return_dict=False, callback_on_step_end=on_step, **kwargs)[0]
    finally:
        for h in hooks:
            h.remove()
    torch.cuda.synchronize()
    loop = time.perf_counter() - t0
    step_s = [b - a for a, b in zip([t0] + marks[:-1], marks)]
    return lat.float().cpu(), {"loop_s": loop, "step_s": step_s,
                               "experts": [("transformer", "transformer_2")[i] for i in calls[0::2]]}


def run_part(a):
    import torch  # device only
    from safetensors.torch import save_file  # device only

    p = PARTS[a.part]
    v = wf.VARIANTS[p["variant"]]
    layers = a.layers or p["layers"] or v["config"]["num_layers"]
    res = new_results(a.part, a.steps, layers)
    res.update({"run": run_info(), "device": torch.cuda.get_device_name(0),
                "peak_method": "ditrun: nvidia-smi used MiB over the baseline (whole process)"})
    work = os.path.join(a.work, "gen_" + a.part)
    folder = os.path.join(work, "pipeline")
    t0 = time.perf_counter()
    models = wf.make_pipeline(torch, v, layers, folder, seed=10)
    bundle, res["ditc_compile_s"], refused = wf.compile_bundle(a.ditc, folder, v, os.path.join(work, "bundles"))
    res["make_s"] = time.perf_counter() - t0
    if not bundle:
        res["compile_failed"] = refused
        save(res, a.out)
        print("ditc compile failed:", refused)
        return 1
    c, f, h, w = wf.latent_shape(v)
    g = torch.Generator().manual_seed(7)
    pe = torch.randn(1, v["text_len"], v["config"]["text_dim"], generator=g)
    ne = torch.randn(1, v["text_len"], v["config"]["text_dim"], generator=g)
    init = torch.randn(1, v["config"]["out_channels"], f, h, w, generator=g)
    inputs = os.path.join(work, "generate_inputs.safetensors")
    tensors = {"prompt_embeds": pe, "negative_prompt_embeds": ne, "init_latents": init}
    image = None
    if a.part == "ti2v":
        image = torch.randn(1, c, 1, h, w, generator=g)  # normalized latents: zero mean, unit variance
        tensors["image_latents"] = image
    save_file(tensors, inputs)

    dev = torch.device("cuda")
    models = [m.to(dev) for m in models]
    from diffusers import UniPCMultistepScheduler  # device only

    sched = UniPCMultistepScheduler(**{k: x for k, x in wf.scheduler_config(v).items() if not k.startswith("_")})
    kw = dict(prompt_embeds=pe.to(dev), negative_prompt_embeds=ne.to(dev), height=v["height"], width=v["width"],
              num_frames=v["frames"], num_inference_steps=a.steps, guidance_scale=p["guidance"],
              latents=init.clone().to(dev))
    if a.part == "a14b":
        from diffusers import WanPipeline  # device only

        pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=sched, transformer=models[0],
                           transformer_2=models[1], boundary_ratio=v["boundary_ratio"])
        kw["guidance_scale_2"] = p["guidance_2"]
    else:
        from diffusers import AutoencoderKLWan, WanImageToVideoPipeline  # device only

        # Only its config is read (z_dim, the 16x/4x factors): prepare_latents is replaced below.
        vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=8, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                               attn_scales=[], temperal_downsample=[False, True, True], is_residual=True, in_channels=12,
                               out_channels=12, patch_size=2, scale_factor_temporal=4, scale_factor_spatial=16)
        pipe = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=sched, image_processor=None,
                                       image_encoder=None, transformer=models[0], expand_timesteps=True)
        cond = image.to(dev)
        mask = torch.ones(1, 1, f, h, w, device=dev)
        mask[:, :, 0] = 0

        def prepare_latents(image, batch_size, num_channels_latents=16, height=480, width=832, num_frames=81,
                            dtype=None, device=None, generator=None, latents=None, last_image=None):
            # What prepare_latents returns with expand_timesteps, the VAE encoding replaced by
            # the given normalized image latents.
            return latents.to(dev, torch.float32), cond, mask

        pipe.prepare_latents = prepare_latents
        kw["image"] = torch.rand(1, 3, v["height"], v["width"])
    pipe.set_progress_bar_config(disable=True)
    ref, res["diffusers"] = diffusers_loop(torch, pipe, models, kw)
    print(f"diffusers: {res['diffusers']['loop_s']:.2f} s, experts {res['diffusers']['experts']}", flush=True)
    del pipe, models, kw
    torch.cuda.empty_cache()
    save(res, a.out)

    gen = [a.ditrun, "generate", None, "--prompt-embeds", inputs, "--negative-embeds", inputs, "--init-latents", inputs,
           "--steps", str(a.steps), "--guidance", str(p["guidance"]), "--shift", str(v["shift"]), "--sampler", "unipc"]
    if p["guidance_2"] is not None:
        gen += ["--guidance-2", str(p["guidance_2"])]
    fails = 0
    if a.part == "ti2v" and "--image-latents" not in subprocess.run([a.ditrun, "--help"], capture_output=True,
                                                                    text=True).stdout:
        res["ditrun"] = {"refused": "this ditrun has no generate --image-latents"}
    else:
        if a.part == "ti2v":
            gen += ["--image-latents", inputs]
        out = os.path.join(work, "ditrun_latents.safetensors")
        cmd = gen[:2] + [bundle] + gen[3:] + ["--out", out]
        r, res["ditrun"] = run_ditrun(cmd, os.path.join(a.out, f"wan22_generate_{a.part}_ditrun.log"))
        print(r.stderr.strip()[-2000:], flush=True)
        if r.returncode:
            res["ditrun"]["failed"] = r.stderr.strip()[-600:]
            fails += 1
        else:
            res["ditrun"].update(compare(torch, out, ref))
            res["ditrun"]["parity_ok"] = res["ditrun"]["cosine"] >= wf.COSINE_MIN
            res["experts_agree"] = res["ditrun"]["experts"] == res["diffusers"]["experts"] == res["experts_expected"]
            fails += not res["ditrun"]["parity_ok"] or not res["experts_agree"]
    save(res, a.out)

    if a.budget_gib and a.part == "a14b":
        man = json.load(open(os.path.join(bundle, "manifest.json")))
        mem = man["memory"]
        gib = scaled_budget_gib(a.budget_gib, mem["peak_bytes"], mem["weight_bytes"], layers, v["config"]["num_layers"])
        b = {"budget_gib": a.budget_gib, "budget_gib_compiled": gib, "resident_predicted_peak_bytes": mem["peak_bytes"]}
        res["budget"] = b
        bb, b["ditc_compile_s"], refused = wf.compile_bundle(a.ditc, folder, v, os.path.join(work, "bundles"),
                                                             ["--offload", "chunked", "--memory-budget", f"{gib:.3f}"])
        if not bb:
            b["refused"] = refused
        else:
            b["predicted_peak_bytes"] = json.load(open(os.path.join(bb, "manifest.json")))["memory"]["peak_bytes"]
            out = os.path.join(work, "ditrun_budget_latents.safetensors")
            r, run = run_ditrun(gen[:2] + [bb] + gen[3:] + ["--out", out],
                                os.path.join(a.out, f"wan22_generate_{a.part}_budget.log"))
            b.update(run)
            print(r.stderr.strip()[-2000:], flush=True)
            if r.returncode:
                b["failed"] = r.stderr.strip()[-600:]
                fails += 1
            else:
                b.update(compare(torch, out, ref))
                b["around_switch"] = around_switch(b["step_s"], b["experts"])
                if res["ditrun"].get("step_s"):
                    res["ditrun"]["around_switch"] = around_switch(res["ditrun"]["step_s"], res["ditrun"]["experts"])
                fails += b["cosine"] < wf.COSINE_MIN
        save(res, a.out)
    res["complete"] = True
    save(res, a.out)
    for line in summary(res):
        print(line)
    return 1 if fails else 0


SWAP_STEPS = 4
SWAP_BYTES = 58e9  # the experts' weights, with room to spare
SWAP_COSINE_MIN = 0.9999  # the budgeted run's final latents against the resident run's


def swap_summary(res):
    L = [f"a14b-swap: {res['steps']} steps without CFG, both experts of {res['published_layers']} blocks, "
         f"{res['width']}x{res['height']}, {res['frames']} frames; timesteps {res['timesteps']}"]
    for key, what in (("resident", "both experts resident"), ("budget", f"--memory-budget {res['budget_gib']:g} GiB")):
        r = res.get(key)
        if not r:
            continue
        if r.get("failed") or r.get("refused"):
            L.append(f"{what}: {'refused' if r.get('refused') else 'failed'}: {(r.get('refused') or r.get('failed'))[:300]}")
            continue
        sw = r.get("around_switch") or {}
        pred = r["runtime_predicted_mib"] / 1024 if r.get("runtime_predicted_mib") else r["predicted_peak_bytes"] / 2**30
        L.append(f"{what}: predicted peak {pred:.2f} GiB, measured peak {r['peak_gib']:.2f} GiB; "
                 f"steps {' / '.join(f'{x:.3f}' for x in r['step_s'])} s (switch at step {sw.get('step')}); loop {r['loop_s']:.2f} s")
    b, r = res.get("budget") or {}, res.get("resident") or {}
    cost = swap_cost(b, r) if b.get("step_s") and r.get("step_s") else None
    if cost is not None:
        pv = res.get("budget_vs_resident") or {}
        L.append(f"the swap's cost: the three steps around the switch take {100 * cost:+.1f}% against the resident "
                 f"bundle's same steps; final latents against the resident run's: identical {res.get('identical')}, cosine "
                 f"{pv.get('cosine', float('nan')):.6f}; ditrun: {b.get('swap') or '-'}")
    return L


def run_swap(a):
    """--part a14b-swap (see the header)."""
    import torch  # device only
    from safetensors.torch import load_file  # device only

    v = wf.VARIANTS["a14b"]
    res = {"part": a.part, "variant": "a14b", "published_layers": v["config"]["num_layers"], "frames": v["frames"],
           "height": v["height"], "width": v["width"], "text_len": v["text_len"], "steps": SWAP_STEPS,
           "timesteps": flow_unipc_timesteps(SWAP_STEPS, v["shift"]), "budget_gib": a.budget_gib or 48.0,
           "weights": "random, make_tiny_wan --preset wan2.2-a14b (the published config)",
           "run": run_info(), "device": torch.cuda.get_device_name(0),
           "peak_method": "nvidia-smi used MiB over the baseline (whole process)"}
    res["experts_expected"] = experts_per_step(res["timesteps"], v["boundary_ratio"])
    scratch = a.scratch or "/dev/shm/ditc_a14b_swap"
    work, store = os.path.join(a.work, "gen_a14b_swap"), os.path.join(a.work, "gen_a14b_swap", "store")
    os.makedirs(work, exist_ok=True)
    make = os.path.join(os.path.dirname(os.path.abspath(a.ditc)), "make_tiny_wan")
    # The two experts' checkpoint and then the bundle's blobs: 57 GB each, 2 x 14.3e9 bf16 parameters.
    for where in (os.path.dirname(scratch.rstrip("/")) or "/", work):
        free = shutil.disk_usage(where).free
        if free < SWAP_BYTES:
            res["failed"] = f"{where}: {free / 1e9:.1f} GB free; the experts take {SWAP_BYTES / 1e9:.0f} GB there"
            print(res["failed"], flush=True)
            save(res, a.out)
            return 1
    t0 = time.perf_counter()
    subprocess.run(["rm", "-rf", scratch])
    r = subprocess.run([make, "--variant", "t2v-a14b", "--preset", "wan2.2-a14b", "--dtype", "bf16", "--text-len",
                        str(v["text_len"]), "--out", scratch], capture_output=True, text=True)
    res["make_s"] = time.perf_counter() - t0
    print(f"make_tiny_wan: {res['make_s']:.1f} s, rc {r.returncode}", flush=True)
    if r.returncode:
        res["failed"] = r.stderr.strip()[-600:]
        save(res, a.out)
        return 1
    embeds = os.path.join(work, "embeds.safetensors")
    subprocess.run(["cp", os.path.join(scratch, "embeds.safetensors"), embeds])
    bundles = {}
    for key, extra in (("resident", []), ("budget", ["--offload", "chunked", "--memory-budget", f"{res['budget_gib']:g}"])):
        # Into the store's own bundle folder: the two bundles' blobs are links to one copy.
        b, dt, refused = pb.ditc_compile(a.ditc, os.path.join(scratch, "model"),
                                         ["--frames", str(v["frames"]), "--height", str(v["height"]), "--width", str(v["width"]),
                                          "--text-len", str(v["text_len"]), "--dtype", "bf16", "--target", "sm_90", "--store", store]
                                         + extra)
        res[key] = {"ditc_compile_s": dt}
        print(f"ditc compile ({key}): {dt:.1f} s{'' if b else ': ' + refused}", flush=True)
        if not b:
            res[key]["refused"] = refused
        else:
            bundles[key] = b
            res[key]["predicted_peak_bytes"] = json.load(open(os.path.join(b, "manifest.json")))["memory"]["peak_bytes"]
        save(res, a.out)
    subprocess.run(["rm", "-rf", scratch])  # the checkpoint: host memory back for the idle expert
    fails, lat = 0, {}
    for key, b in bundles.items():
        out = os.path.join(work, f"latents_{key}.safetensors")
        cmd = [a.ditrun, "generate", b, "--prompt-embeds", embeds, "--seed", "7", "--steps", str(SWAP_STEPS),
               "--guidance", "1", "--guidance-2", "1", "--out", out]
        r, run = run_ditrun(cmd, os.path.join(a.out, f"wan22_generate_a14b-swap_{key}.log"))
        res[key].update(run)
        print(r.stderr.strip()[-1500:], flush=True)
        mem = MEMORY_RE.findall(r.stderr)
        if mem:  # the last: after the switch, with both experts' device shares
            res[key]["runtime_allocated_mib"], res[key]["runtime_predicted_mib"] = float(mem[-1][0]), float(mem[-1][1])
        if r.returncode:
            res[key]["failed"] = r.stderr.strip()[-600:]
            fails += 1
        else:
            res[key]["around_switch"] = around_switch(run["step_s"], run["experts"])
            res[key]["experts_agree"] = run["experts"] == res["experts_expected"]
            fails += not res[key]["experts_agree"]
            lat[key] = load_file(out)["latents"]
        save(res, a.out)
    if len(lat) == 2:
        # Bit-identical only when both runs pick the same GEMM algorithms: the resident run times
        # cuBLASLt's candidates, while a GEMM whose weights wait in host memory at load keeps the
        # heuristic's first, so the last bits may differ.
        from wan_forward import parity

        res["identical"] = bool(torch.equal(lat["resident"], lat["budget"]))
        res["budget_vs_resident"] = parity(torch, lat["budget"], lat["resident"])
        fails += res["budget_vs_resident"]["cosine"] < SWAP_COSINE_MIN
        cost = swap_cost(res["budget"], res["resident"])
        res["swap_cost"] = cost
    res["complete"] = True
    save(res, a.out)
    for line in swap_summary(res):
        print(line)
    return 1 if fails or len(lat) < 2 else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=sorted(PARTS) + ["a14b-swap"])
    ap.add_argument("--scratch", help="a14b-swap: where make_tiny_wan writes the checkpoint (default /dev/shm/ditc_a14b_swap)")
    pb.add_contender_flags(ap)
    ap.add_argument("--layers", type=int, help="blocks per expert (default: 4 for a14b, all 30 for ti2v)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--budget-gib", type=float, help="a14b: also ditrun under this memory budget (published size)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="check the arithmetic without torch or a GPU")
    a = ap.parse_args()
    return pb.dispatch(ap, a, dry_run, run_swap if a.part == "a14b-swap" else run_part, ("part", "ditc", "ditrun", "work", "out"),
                       scratch=lambda a: os.path.join(a.work, "gen_" + a.part.replace("-", "_")))


if __name__ == "__main__":
    sys.exit(main())
