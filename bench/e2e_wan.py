#!/usr/bin/env python3
"""Wan2.1-T2V-1.3B from a prompt to an MP4 on one GPU, end to end: `ditrun generate` on the
compiled pipeline against diffusers' WanPipeline on the same components.

The pipeline (made on the GPU with torch, the pinned diffusers and transformers): the transformer
at the published config (pipeline_bench.WAN21_1_3B, --layers of its 30 blocks), the UMT5-XXL text
encoder (umt5_encode.CONFIG, --te-layers of its 24 blocks; the published vocabulary), the Wan2.1
VAE (vae_decode.CONFIG), the published UniPC scheduler (flow sigmas, flow shift 3:
wan22_forward.scheduler_config), random weights redrawn at a trained model's scale
(pipeline_bench.redraw_small for the transformer, as tests/gpu/pipeline_parity.py; the UMT5 and
VAE goldens' draws for the others), saved in bf16 by WanPipeline.save_pretrained, its tokenizer/
replaced by tests/data/wan_pipeline_tiny/tokenizer (a real SentencePiece model of a small
vocabulary: its ids fit the published one). One prompt and negative prompt, 480x832, 81 frames,
--steps (default 50) with CFG 5, the same initial latents [1, 16, 21, 60, 104] on both sides.

  ours    `ditc compile PIPE --dtype bf16 --target sm_90` (the transformer with its text encoder
          and VAE decoder stages), then ONE `ditrun generate BUNDLE --prompt P --negative-prompt N
          --init-latents X --out ours.mp4 --out-frames ours.safetensors`. total s: the wall clock
          of that cold process (bundles loaded and verified, tokenizer, text encoder, 50 steps,
          VAE decode, H.264 encode) less its `ditrun: out-frames` write, which only the comparison
          below needs; the stages from what it prints on stderr (load: the transformer's bundle;
          the text encoder's and decoder's loads are inside their stages' times).
  peer    WanPipeline of the same in-memory bf16 components (tokenizer from the same files,
          scheduler from the same config), latents= the same noise, output_type "np", then
          diffusers.utils.export_to_video at 16 fps: timed from the call to the MP4 written, after
          a 2-step call of the same shapes (CUDA/cuDNN init, allocator warm-up not counted). Its
          stages: encode_prompt and vae.decode timed in place (synchronized), denoise the rest of
          the call (its np postprocessing included). --peer-compile adds a row with
          torch.compile(transformer) (its warm-up call compiles).

Quality, the cheapest honest comparison: the one decode of each run, no extra runs. ditrun's
float frames (`--out-frames`: the decoder's output, [1, 3, F, H, W] in [-1, 1], before the MP4's
8-bit rounding) mapped to [0, 1] as diffusers' postprocessing maps its decode ((x + 1) / 2,
clamped), against diffusers' output_type "np" frames ([1, F, H, W, 3] in [0, 1], also before its
MP4): PSNR (peak 1) and cosine over every value, both in [0, 1]. The MP4s themselves are not
decoded back.

Results: OUT/e2e_wan.json and OUT/e2e_wan.md, rewritten after each measurement; a row that cannot
run says why. A progress line per phase gives the elapsed seconds (the device call is bounded:
model making + compile + ours + the peer's warm-up and run must fit it; --skip-peer, --layers,
--te-layers and --steps shorten it).

usage: bench/e2e_wan.py --ditc BIN --ditrun BIN --work DIR --out DIR [--layers 30] [--te-layers 24]
           [--steps 50] [--skip-peer] [--peer-compile] [--keep]
       bench/e2e_wan.py ... --pipeline DIR --init-latents X.safetensors [--frames F --height H
           --width W --text-len L --target cpu --dtype fp32]   (an existing pipeline folder; with
           --skip-peer no torch: tests/integration/bench_e2e.sh runs the tiny one on the CPU)
       bench/e2e_wan.py --dry-run --out DIR   (the tables with placeholder rows, standard library only)
"""
import argparse
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import pipeline_bench as pb  # noqa: E402
import umt5_encode  # noqa: E402
import vae_decode  # noqa: E402
import wan22_forward  # noqa: E402
from ceilings import run_info  # noqa: E402

FRAMES, HEIGHT, WIDTH, TEXT_LEN = 81, 480, 832, 512
GUIDANCE, SHIFT, FPS = 5.0, 3.0, 16
SEED = 2101
PROMPT = "A red fox runs through fresh snow at dawn, soft golden light, the camera tracking beside it"
NEGATIVE = "blurry, low quality, static, distorted"
TOKENIZER = os.path.join(ROOT, "tests", "data", "wan_pipeline_tiny", "tokenizer")

OURS, PEER, PEER_COMPILE = "ditrun generate (cold process)", "diffusers WanPipeline", "diffusers WanPipeline + torch.compile"
PEER_COLD = "diffusers WanPipeline (cold process)"
STAGES = ("load", "text_encoder", "denoise", "vae_decode", "encode")
STAGE_RE = {"load": r"^ditrun: loaded and verified \S+ in ([0-9.]+)s", "text_encoder": r"^ditrun: text encoder ([0-9.]+) s",
            "denoise": r"^ditrun: generate \d+ steps in ([0-9.]+)s$", "vae_decode": r"^ditrun: vae decode ([0-9.]+) s ",
            "encode": r"^ditrun: encode .* ([0-9.]+) s$", "out_frames": r"^ditrun: out-frames ([0-9.]+) s$"}


def latent_shape(frames, height, width):
    return [1, 16, (frames - 1) // 4 + 1, height // 8, width // 8]


def ditrun_stages(stderr):
    """The seconds ditrun printed per stage (absent: not printed)."""
    out = {}
    for k, rx in STAGE_RE.items():
        m = re.search(rx, stderr, re.M)
        if m:
            out[k] = float(m.group(1))
    return out


class Clock:
    """The progress line of each phase, with the seconds since the start."""

    def __init__(self):
        self.t0 = time.perf_counter()

    def __call__(self, what):
        print(f"[e2e {time.perf_counter() - self.t0:7.1f} s] {what}", flush=True)


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def lines(res):
    """The results as markdown: one row a contender, a row that did not run saying why."""
    s, f = res["shape"], res["shape"]["frames"]
    what = (f"the pipeline folder {res['pipeline']} (transformer {res['layers']} blocks, text encoder {res['te_layers']})"
            if res.get("pipeline") else f"random weights at the published configs (transformer {res['layers']} of 30 blocks, "
            f"UMT5-XXL {res['te_layers']} of 24)")
    L = [f"Wan2.1-T2V-1.3B, prompt to MP4, {f} frames at {s['width']}x{s['height']}, {res['steps']} steps with CFG "
         f"{res['guidance']} (UniPC, flow shift {res['shift']}), {res['dtype']}, {what}, {res.get('device', 'GPU')}", "",
         "| contender | total s | load s | text encoder s | denoise s | VAE decode s | encode MP4 s | vs diffusers | vs diffusers "
         "cold | PSNR dB | cosine |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    peer = next((r for r in res["rows"] if r["contender"] == PEER and r.get("total_s")), None)
    cold = next((r for r in res["rows"] if r["contender"] == PEER_COLD and r.get("total_s")), None)
    for r in res["rows"]:
        why = r.get("failed") or r.get("skipped")
        if why:
            L.append(f"| {r['contender']} | {'failed' if r.get('failed') else 'skipped'}: {why[:200]} | | | | | | | | | |")
            continue
        st = r.get("stages", {})
        ratio = peer["total_s"] / r["total_s"] if peer and r.get("total_s") else None
        rc = cold["total_s"] / r["total_s"] if cold and r.get("total_s") else None
        q = r.get("quality", {})
        L.append(f"| {r['contender']} | {fmt(r.get('total_s'), '.2f')} | " + " | ".join(fmt(st.get(k), ".2f") for k in STAGES) +
                 f" | {fmt(ratio, '.2f')}{'x' if ratio else ''} | {fmt(rc, '.2f')}{'x' if rc else ''} | {fmt(q.get('psnr_db'), '.2f')} | "
                 f"{fmt(q.get('cosine'), '.6f')} |")
    ours = row(res, OURS)
    L += ["", "total: ditrun's process wall clock (cold: bundles loaded and verified) less its --out-frames write"
          + (f" ({ours['out_frames_s']:.2f} s)" if ours.get("out_frames_s") is not None else "")
          + "; diffusers' call + export_to_video after a 2-step warm-up call (its components already in memory: "
          "no load); diffusers cold: the wall clock of a fresh Python process that imports torch and diffusers, loads the "
          "pipeline folder (WanPipeline.from_pretrained, .to('cuda')), makes the same call and export_to_video, as ditrun's "
          "process does (its load column: imports and from_pretrained). PSNR (peak 1) and cosine: the float frames "
          "before each MP4, in [0, 1], against diffusers' output_type np frames."]
    for r in res["rows"]:
        if r.get("export_failed"):
            L.append(f"{r['contender']}: no MP4 written ({r['export_failed']}): its total is without the encode")
    se = res.get("same_embeddings") or {}
    if se.get("latents_cosine") is not None:
        L.append(f"the loop alone (ditrun generate from diffusers' own prompt embeddings, the same noise): final latents cosine "
                 f"{se['latents_cosine']:.6f}, relative L2 {se['latents_rel_l2']:.3e} against diffusers' call")
    elif se.get("failed"):
        L.append(f"the loop alone: failed ({se['failed']})")
    if res.get("phases"):
        L.append("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in res["phases"].items()))
    return L


def save_res(res, out):
    path = pb.save(res, out, "e2e_wan.json")
    with open(os.path.join(out, "e2e_wan.md"), "w") as fh:
        fh.write("\n".join(lines(res)) + "\n")
    return path


def new_results(a):
    return {"run": run_info(), "dry_run": False, "shape": {"frames": a.frames, "height": a.height, "width": a.width,
                                                          "text_len": a.text_len},
            "latents": latent_shape(a.frames, a.height, a.width), "steps": a.steps, "guidance": GUIDANCE, "shift": SHIFT,
            "fps": FPS, "dtype": a.dtype, "pipeline": a.pipeline, "layers": a.layers, "te_layers": a.te_layers, "prompt": a.prompt, "negative_prompt": a.negative_prompt,
            "phases": {}, "rows": [{"contender": OURS, "skipped": "not run yet"}, {"contender": PEER, "skipped": "not run yet"},
                                   {"contender": PEER_COLD, "skipped": "not run yet"}, {"contender": PEER_COMPILE, "skipped": "not run yet"}]}


def row(res, name):
    return next(r for r in res["rows"] if r["contender"] == name)


def set_row(res, name, **fields):
    for i, r in enumerate(res["rows"]):
        if r["contender"] == name:
            res["rows"][i] = {"contender": name, **fields}


def compile_flags(a):
    return ["--frames", str(a.frames), "--height", str(a.height), "--width", str(a.width), "--text-len", str(a.text_len),
            "--dtype", a.dtype, "--target", a.target]


def generate_cmd(a, bundle, init, mp4, frames):
    """The one generate; without an MP4 (mp4 None) --out is the frames file itself."""
    out = ["--out", mp4, "--out-frames", frames] if mp4 else ["--out", frames]
    return [a.ditrun, "generate", bundle, "--prompt", a.prompt, "--negative-prompt", a.negative_prompt, "--init-latents", init,
            "--steps", str(a.steps), "--guidance", str(GUIDANCE), "--shift", str(SHIFT), "--sampler", "unipc",
            "--fps", str(FPS)] + out


def mp4_refusal(a):
    """Why ditrun cannot write an MP4 here (FFmpeg's libraries are loaded at run time), or None:
    one frame of zeros through `ditrun frames`, so the long run is not lost at its last step."""
    probe = os.path.join(a.work, "probe.safetensors")
    pb.write_zero_safetensors(probe, {"frames": [1, 3, 1, 16, 16]})
    p = subprocess.run([a.ditrun, "frames", probe, "--out", os.path.join(a.work, "probe.mp4")], capture_output=True, text=True)
    return (p.stderr.strip() or "ditrun frames failed").splitlines()[0][:300] if p.returncode else None


def run_ours(a, res, bundle, init, clock):
    """One `ditrun generate` process: its wall clock and printed stages into the ours row."""
    mp4, frames = os.path.join(a.work, "ours.mp4"), os.path.join(a.work, "ours_frames.safetensors")
    no_mp4 = mp4_refusal(a)
    if no_mp4:
        clock(f"ours: no MP4 on this host ({no_mp4}): the frames file only")
        mp4 = None
    clock("ours: ditrun generate (one process: text encoder, loop, VAE decode, MP4)")
    t0 = time.perf_counter()
    p = subprocess.run(generate_cmd(a, bundle, init, mp4, frames), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    with open(os.path.join(a.out, "e2e_wan_ditrun.log"), "w") as fh:
        fh.write(p.stderr)
    if p.returncode:
        set_row(res, OURS, failed=(p.stderr.strip() or "ditrun generate failed").splitlines()[-1][:300])
        return None
    st = ditrun_stages(p.stderr)
    extra = st.pop("out_frames", 0.0)
    set_row(res, OURS, total_s=wall - extra, process_wall_s=wall, out_frames_s=extra, stages=st,
            **({"mp4_bytes": os.path.getsize(mp4)} if mp4 else {"export_failed": no_mp4}))
    clock(f"ours: {wall - extra:.2f} s (process {wall:.2f} s; " + ", ".join(f"{k} {v:.2f}" for k, v in st.items()) + ")")
    return frames


# --- the device side (torch) ---

def make_pipeline(a, torch, folder, clock):
    """The components on the GPU in bf16 and their WanPipeline folder (tokenizer/ from TOKENIZER)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel  # device only
    from transformers import UMT5Config, UMT5EncoderModel  # device only
    sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
    from make_goldens_umt5 import redraw_parameters as redraw_umt5  # device only
    from make_goldens_wan_vae import redraw_parameters as redraw_vae  # device only

    dev, bf16 = torch.device("cuda"), torch.bfloat16
    torch.manual_seed(SEED)
    with torch.device(dev):
        tr = WanTransformer3DModel(**dict(pb.WAN21_1_3B, num_layers=a.layers)).eval()
    pb.redraw_small(torch, tr, SEED + 1)
    tr = tr.to(bf16)
    clock(f"made the transformer ({a.layers} blocks)")
    te_cfg = {k: v for k, v in umt5_encode.config(a.te_layers).items() if k != "architectures"}
    with torch.device(dev):
        te = UMT5EncoderModel(UMT5Config(**te_cfg)).eval()
    redraw_umt5(te, torch.Generator().manual_seed(SEED + 2))
    te = te.to(bf16)
    torch.cuda.empty_cache()
    clock(f"made the UMT5-XXL text encoder ({a.te_layers} blocks)")
    with torch.device(dev):
        vae = AutoencoderKLWan(**vae_decode.CONFIG).eval()
    redraw_vae(vae, torch.Generator().manual_seed(SEED + 3))
    vae = vae.to(bf16)
    sched = UniPCMultistepScheduler.from_config(wan22_forward.scheduler_config({"shift": SHIFT}))
    tok, why = load_tokenizer(TOKENIZER)
    pipe = WanPipeline(tokenizer=tok, text_encoder=te, vae=vae, scheduler=sched, transformer=tr)
    pipe.set_progress_bar_config(disable=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    # The tokenizer folder is the SentencePiece files themselves (what the C tokenizer reads), named
    # in model_index.json even where transformers here could not load them (then only the peer fails).
    shutil.rmtree(os.path.join(folder, "tokenizer"), ignore_errors=True)
    shutil.copytree(TOKENIZER, os.path.join(folder, "tokenizer"))
    index = json.load(open(os.path.join(folder, "model_index.json")))
    index["tokenizer"] = ["transformers", "T5Tokenizer"]
    pb.write_json(os.path.join(folder, "model_index.json"), index)
    clock("saved the pipeline folder (bf16)" + (f"; no tokenizer for the peer: {why}" if why else ""))
    return pipe if tok is not None else why


def load_tokenizer(path):
    """(the folder's tokenizer, None): transformers' fast one (converted from spiece.model), else
    the SentencePiece one; (None, why) when neither loads."""
    from transformers import AutoTokenizer, T5Tokenizer  # device only
    try:
        return AutoTokenizer.from_pretrained(path), None
    except Exception:  # the conversion needs protobuf
        try:
            return T5Tokenizer.from_pretrained(path), None
        except Exception as e:  # no sentencepiece package
            return None, f"transformers cannot load {path}: " + (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def load_pipeline(torch, folder):
    from diffusers import WanPipeline  # device only
    tok, why = load_tokenizer(os.path.join(folder, "tokenizer"))
    if why:
        raise RuntimeError(why)
    pipe = WanPipeline.from_pretrained(folder, tokenizer=tok, torch_dtype=torch.bfloat16).to("cuda")
    pipe.set_progress_bar_config(disable=True)
    return pipe


def timed_stages(torch, pipe, seconds):
    """encode_prompt and vae.decode timed in place (synchronized), into seconds[name]."""
    def wrap(obj, attr, name):
        fn = getattr(obj, attr)

        def timed(*args, **kw):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn(*args, **kw)
            torch.cuda.synchronize()
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
            return out
        setattr(obj, attr, timed)
    wrap(pipe, "encode_prompt", "text_encoder")
    wrap(pipe.vae, "decode", "vae_decode")


def run_peer(a, torch, pipe, init, name, clock):
    """Warm-up (2 steps), then the timed call + export_to_video: (row fields, frames [F, H, W, 3])."""
    from diffusers.utils import export_to_video  # device only
    seconds = {}
    timed_stages(torch, pipe, seconds)
    call = dict(prompt=a.prompt, negative_prompt=a.negative_prompt, height=a.height, width=a.width, num_frames=a.frames,
                guidance_scale=GUIDANCE, max_sequence_length=a.text_len, output_type="np")
    clock(f"{name}: warm-up call (2 steps)")
    with torch.no_grad():
        pipe(latents=init.clone(), num_inference_steps=2, **call)
    torch.cuda.synchronize()
    seconds.clear()
    clock(f"{name}: timed call ({a.steps} steps) + export_to_video")
    mp4 = os.path.join(a.work, "diffusers.mp4")
    last = {}

    def keep_last(p, i, t, kw):  # the final latents, for the loop's comparison with the same embeddings
        if i == a.steps - 1:
            last["latents"] = kw["latents"].float().cpu()
        return kw
    t0 = time.perf_counter()
    with torch.no_grad():
        video = pipe(latents=init.clone(), num_inference_steps=a.steps, callback_on_step_end=keep_last,
                     callback_on_step_end_tensor_inputs=["latents"], **call).frames
    t_call = time.perf_counter() - t0
    row = {}
    try:
        export_to_video(list(video[0]), mp4, fps=FPS)
    except Exception as e:  # no imageio/ffmpeg nor OpenCV here
        row["export_failed"] = str(e).strip().splitlines()[0][:200]
    total = time.perf_counter() - t0
    st = {"text_encoder": seconds.get("text_encoder"), "vae_decode": seconds.get("vae_decode")}
    st["denoise"] = t_call - sum(v for v in st.values() if v)
    if not row.get("export_failed"):
        st["encode"] = total - t_call
    row.update(total_s=total, call_s=t_call, stages=st)
    clock(f"{name}: {total:.2f} s (call {t_call:.2f} s)" + (f"; export failed: {row['export_failed']}" if row.get("export_failed") else ""))
    row["_latents"] = last.get("latents")
    return row, video[0]


def cold_child(spec_path):
    """The peer as a user's script runs it, in a process of its own: import, load the folder, the
    call, export_to_video; the seconds of each into spec's result file."""
    t0 = time.perf_counter()
    spec = json.load(open(spec_path))
    import torch  # device only
    from diffusers.utils import export_to_video  # device only
    from safetensors.torch import load_file  # device only
    t1 = time.perf_counter()
    pipe = load_pipeline(torch, spec["folder"])
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    latents = load_file(spec["init"])["init_latents"].to("cuda", torch.float32)
    with torch.no_grad():
        video = pipe(latents=latents, num_inference_steps=spec["steps"], **spec["call"]).frames
    t3 = time.perf_counter()
    out = {"import_s": t1 - t0, "load_s": t2 - t1, "call_s": t3 - t2}
    try:
        export_to_video(list(video[0]), spec["mp4"], fps=FPS)
        out["export_s"] = time.perf_counter() - t3
    except Exception as e:  # no imageio/ffmpeg nor OpenCV here
        out["export_failed"] = str(e).strip().splitlines()[0][:200]
    json.dump(out, open(spec["result"], "w"))
    return 0


def run_peer_cold(a, folder, init, clock):
    """cold_child in a fresh process, timed from its start: the row's fields."""
    spec, result = os.path.join(a.work, "cold_spec.json"), os.path.join(a.work, "cold_result.json")
    call = dict(prompt=a.prompt, negative_prompt=a.negative_prompt, height=a.height, width=a.width, num_frames=a.frames,
                guidance_scale=GUIDANCE, max_sequence_length=a.text_len, output_type="np")
    pb.write_json(spec, {"folder": folder, "init": init, "steps": a.steps, "call": call, "mp4": os.path.join(a.work, "diffusers_cold.mp4"),
                         "result": result})
    clock(f"{PEER_COLD}: a fresh process (import, from_pretrained, {a.steps} steps, export_to_video)")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--cold-child", spec], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode or not os.path.exists(result):
        return {"failed": (p.stderr.strip() or "the process failed").splitlines()[-1][:300]}
    r = json.load(open(result))
    row = {"total_s": wall, "process": r, "stages": {"load": r["import_s"] + r["load_s"], "denoise": r["call_s"]}}
    if r.get("export_failed"):
        row["export_failed"] = r["export_failed"]
    else:
        row["stages"]["encode"] = r["export_s"]
    clock(f"{PEER_COLD}: {wall:.2f} s (import {r['import_s']:.2f}, load {r['load_s']:.2f}, call {r['call_s']:.2f})")
    return row


def same_embeddings(a, torch, pipe, bundle, init, ref_latents, clock):
    """The loop alone against diffusers': ditrun generate from diffusers' own prompt embeddings
    (encode_prompt, CFG's negative too), the same noise, its final latents against the timed
    call's. What this leaves out of the frames' difference is the text encoders'."""
    from safetensors.torch import load_file, save_file  # device only
    clock("same embeddings: ditrun generate from diffusers' prompt embeddings")
    with torch.no_grad():
        pe, ne = pipe.encode_prompt(prompt=a.prompt, negative_prompt=a.negative_prompt, do_classifier_free_guidance=True,
                                    num_videos_per_prompt=1, max_sequence_length=a.text_len, device=torch.device("cuda"))
    emb, out = os.path.join(a.work, "diffusers_embeds.safetensors"), os.path.join(a.work, "same_embeds_latents.safetensors")
    save_file({"prompt_embeds": pe.float().cpu().contiguous(), "negative_prompt_embeds": ne.float().cpu().contiguous()}, emb)
    p = subprocess.run([a.ditrun, "generate", bundle, "--prompt-embeds", emb, "--negative-embeds", emb, "--init-latents", init,
                        "--steps", str(a.steps), "--guidance", str(GUIDANCE), "--shift", str(SHIFT), "--sampler", "unipc", "--out", out],
                       capture_output=True, text=True)
    if p.returncode:
        return {"failed": (p.stderr.strip() or "ditrun generate failed").splitlines()[-1][:300]}
    o = load_file(out)["latents"].to("cuda", torch.float64).flatten()
    w = ref_latents.to("cuda", torch.float64).flatten()
    cos = float(torch.nn.functional.cosine_similarity(o, w, dim=0))
    rel = float((o - w).norm() / w.norm())
    clock(f"same embeddings: final latents cosine {cos:.6f}, relative L2 {rel:.3e}")
    return {"latents_cosine": cos, "latents_rel_l2": rel}


def quality(torch, ours_path, ref):
    """PSNR (peak 1) and cosine of ditrun's frames ([1, 3, F, H, W] in [-1, 1]) mapped to [0, 1]
    against diffusers' np frames ([F, H, W, 3] in [0, 1])."""
    from safetensors.torch import load_file  # device only
    o = load_file(ours_path)["frames"][0].to("cuda", torch.float64)
    o = ((o + 1) / 2).clamp(0, 1).permute(1, 2, 3, 0).flatten()
    w = torch.from_numpy(ref).to("cuda", torch.float64).flatten()
    if o.numel() != w.numel():
        return {"failed": f"frames of {o.numel()} values against diffusers' {w.numel()}"}
    mse = float(((o - w) ** 2).mean())
    cos = float(torch.nn.functional.cosine_similarity(o, w, dim=0))
    return {"psnr_db": math.inf if mse == 0 else 10 * math.log10(1.0 / mse), "cosine": cos,
            "max_abs": float((o - w).abs().max())}


def run(a):
    clock = Clock()
    os.makedirs(a.out, exist_ok=True)
    if a.pipeline:  # the blocks its configs have
        a.layers = json.load(open(os.path.join(a.pipeline, "transformer", "config.json")))["num_layers"]
        a.te_layers = json.load(open(os.path.join(a.pipeline, "text_encoder", "config.json")))["num_layers"]
    res = new_results(a)
    torch = None
    need_torch = not a.skip_peer or not a.pipeline or not a.init_latents
    if need_torch:
        import torch  # device only
        res["device"] = torch.cuda.get_device_name(0)
    else:
        res["device"] = f"{a.target} (no peer)"
    if a.skip_peer:
        set_row(res, PEER, skipped="--skip-peer")
    if not a.peer_compile:
        set_row(res, PEER_COMPILE, skipped="--peer-compile not given")
    save_res(res, a.out)
    # The pipeline folder and the initial latents.
    folder, pipe = a.pipeline, None
    t = time.perf_counter()
    if not folder:
        folder = os.path.join(a.work, "pipeline")
        clock("making the pipeline (random weights at the published configs)")
        try:
            pipe = make_pipeline(a, torch, folder, clock)
        except Exception as e:  # out of memory, a missing package: both rows say why
            why = "making the pipeline: " + (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            for name in (OURS, PEER):
                set_row(res, name, failed=why)
            save_res(res, a.out)
            print("\n".join(lines(res)), flush=True)
            return 1
        res["phases"]["make_s"] = time.perf_counter() - t
    init = a.init_latents
    if not init:
        from safetensors.torch import save_file  # device only
        init = os.path.join(a.work, "init_latents.safetensors")
        save_file({"init_latents": torch.randn(res["latents"], generator=torch.Generator().manual_seed(SEED + 4))}, init)
    save_res(res, a.out)
    # ours: compile, then one generate.
    clock("ditc compile (transformer, text encoder and VAE decoder stages)")
    t = time.perf_counter()
    bundle, res["phases"]["compile_s"], refused = pb.ditc_compile(a.ditc, folder, compile_flags(a) + ["-o", os.path.join(a.work, "b")])
    clock(f"ditc compile: {res['phases']['compile_s']:.1f} s")
    frames = None
    if not bundle:
        set_row(res, OURS, failed="ditc compile: " + refused)
    else:
        t = time.perf_counter()
        frames = run_ours(a, res, bundle, init, clock)
        res["phases"]["ours_s"] = time.perf_counter() - t
    save_res(res, a.out)
    fails = 0 if frames else 1
    # The peer: the same components, noise and prompt; first as a script runs it, in a fresh process.
    if not a.skip_peer and not a.skip_cold:
        t = time.perf_counter()
        set_row(res, PEER_COLD, **run_peer_cold(a, folder, init, clock))
        res["phases"]["peer_cold_s"] = time.perf_counter() - t
        save_res(res, a.out)
    elif a.skip_peer or a.skip_cold:
        set_row(res, PEER_COLD, skipped="--skip-peer" if a.skip_peer else "--skip-cold")
    if not a.skip_peer:
        from safetensors.torch import load_file  # device only
        latents = load_file(init)["init_latents"].to("cuda", torch.float32)
        name, t = PEER, time.perf_counter()
        try:
            if isinstance(pipe, str):  # made without a tokenizer transformers could load
                raise RuntimeError(pipe)
            if pipe is None:
                clock("loading the pipeline folder into WanPipeline")
                pipe = load_pipeline(torch, folder)
            fields, ref = run_peer(a, torch, pipe, latents, PEER, clock)
            ref_latents = fields.pop("_latents", None)
            set_row(res, PEER, **fields)
            if frames:
                q = row(res, OURS)["quality"] = quality(torch, frames, ref)
                clock(f"quality: PSNR {q.get('psnr_db', math.nan):.2f} dB, cosine {q.get('cosine', math.nan):.6f} (ours against diffusers)")
            save_res(res, a.out)
            if bundle and ref_latents is not None and not a.skip_same_embeddings:
                res["same_embeddings"] = same_embeddings(a, torch, pipe, bundle, init, ref_latents, clock)
                save_res(res, a.out)
            if a.peer_compile:
                name = PEER_COMPILE
                pipe.transformer = torch.compile(pipe.transformer)
                fields, other = run_peer(a, torch, pipe, latents, PEER_COMPILE, clock)
                set_row(res, PEER_COMPILE, **fields, quality=quality_np(torch, other, ref))
        except Exception as e:  # out of memory, a missing package: the row says why
            set_row(res, name, failed=(str(e).strip().splitlines() or [type(e).__name__])[0][:300])
            fails += 1
        res["phases"]["peer_s"] = time.perf_counter() - t
    res["complete"] = True
    save_res(res, a.out)
    print("\n".join(lines(res)), flush=True)
    return 1 if fails else 0


def quality_np(torch, frames, ref):
    """PSNR and cosine of two [F, H, W, 3] frame arrays in [0, 1]."""
    o, w = torch.from_numpy(frames).to("cuda", torch.float64).flatten(), torch.from_numpy(ref).to("cuda", torch.float64).flatten()
    mse = float(((o - w) ** 2).mean())
    return {"psnr_db": math.inf if mse == 0 else 10 * math.log10(1.0 / mse),
            "cosine": float(torch.nn.functional.cosine_similarity(o, w, dim=0))}


def dry_run(a):
    """The tables with placeholder rows (nothing here is a measurement), the shapes and the
    command lines, standard library only."""
    assert latent_shape(FRAMES, HEIGHT, WIDTH) == [1, 16, 21, 60, 104]
    assert pb.WAN21_1_3B["num_layers"] == 30 and umt5_encode.CONFIG["num_layers"] == 24
    sched = wan22_forward.scheduler_config({"shift": SHIFT})
    assert sched["_class_name"] == "UniPCMultistepScheduler" and sched["flow_shift"] == SHIFT and sched["use_flow_sigmas"]
    assert os.path.isfile(os.path.join(TOKENIZER, "spiece.model")), TOKENIZER
    a.ditc, a.ditrun, a.work = a.ditc or "ditc", a.ditrun or "ditrun", a.work or "WORK"
    print("compile: " + shlex.join([a.ditc, "compile", "PIPE"] + compile_flags(a)))
    print("generate: " + shlex.join(generate_cmd(a, "BUNDLE", "X.safetensors", "ours.mp4", "ours_frames.safetensors")))
    res = new_results(a)
    res.update(dry_run=True, device="(dry run)", phases={"make_s": 60.0, "compile_s": 40.0})
    set_row(res, OURS, total_s=100.0, process_wall_s=101.5, out_frames_s=1.5,
            stages={"load": 5.0, "text_encoder": 2.0, "denoise": 75.0, "vae_decode": 15.0, "encode": 3.0},
            quality={"psnr_db": 40.0, "cosine": 0.9999})
    set_row(res, PEER, total_s=150.0, call_s=148.0, stages={"text_encoder": 1.0, "denoise": 145.0, "vae_decode": 2.0, "encode": 2.0})
    set_row(res, PEER_COLD, total_s=170.0, stages={"load": 20.0, "denoise": 148.0, "encode": 2.0})
    set_row(res, PEER_COMPILE, failed="out of memory")
    for line in lines(res):
        print(line)
    save_res(res, a.out)
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--cold-child":  # run_peer_cold's process
        return cold_child(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pb.add_contender_flags(ap, "where the pipeline, bundles and outputs go (removed at the end unless --keep)", "results directory")
    ap.add_argument("--layers", type=int, default=30, help="transformer blocks at the published widths (of 30)")
    ap.add_argument("--te-layers", type=int, default=24, help="UMT5-XXL blocks at the published widths (of 24)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--frames", type=int, default=FRAMES)
    ap.add_argument("--height", type=int, default=HEIGHT)
    ap.add_argument("--width", type=int, default=WIDTH)
    ap.add_argument("--text-len", type=int, default=TEXT_LEN)
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--negative-prompt", default=NEGATIVE)
    ap.add_argument("--pipeline", help="an existing pipeline folder instead of making one")
    ap.add_argument("--init-latents", help="a safetensors file with tensor init_latents instead of drawing them")
    pb.add_switches(ap, "--skip-peer", "--peer-compile", "--keep", "--skip-same-embeddings", "--skip-cold")
    ap.add_argument("--dry-run", action="store_true", help="the tables with placeholder rows, without torch or a GPU")
    a = ap.parse_args()
    if not 1 <= a.layers <= 30 or not 1 <= a.te_layers <= 24:
        ap.error("--layers: expected 1..30; --te-layers: expected 1..24")
    if a.steps < 1:
        ap.error("--steps: expected at least 1")
    if a.peer_compile and a.skip_peer:
        ap.error("--peer-compile is a peer row: not with --skip-peer")
    return pb.dispatch(ap, a, dry_run, run, ("ditc", "ditrun", "work", "out"))


if __name__ == "__main__":
    sys.exit(main())
