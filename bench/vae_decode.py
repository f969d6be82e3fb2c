#!/usr/bin/env python3
"""The Wan2.1 VAE decode at 81 frames, 480x832 and 720x1280, on one GPU: the compiled decoder
stage (`ditc compile` of a vae/ folder, `ditrun forward`) against diffusers'
AutoencoderKLWan.decode in bf16, same weights and latents.

It makes random weights at the published config (AutoencoderKLWan's class defaults, which are
Wan-AI/Wan2.1-T2V-*-Diffusers' vae/config.json) with diffusers itself, redrawn at a trained
model's scale as tests/data/make_goldens_wan_vae.py draws them (so the output is not all clamped),
cast to bf16 on the GPU, and saves the vae/ folder. Latents [1, 16, 21, H/8, W/8] from a fixed
seed in the transformer's output space; diffusers decodes them de-normalized as WanPipeline does
(latents * std + mean), the stage de-normalizes itself. Per resolution: diffusers' decode time
(the median of --iters after a warm-up decode of one latent frame) and torch.cuda.max_memory_allocated;
ditrun's forward time (the best of --iters processes, from `ditrun: forward S` on stderr) and its
allocation (the `ditrun: memory:` line); PSNR (peak-to-peak 2, the clamped output's range) and
cosine of ditrun's frames against diffusers' (a cosine below 0.999 fails the run). A side that cannot run (out of memory, refused by
ditc) gets a row saying why instead of ending the script. Results go to OUT/vae_decode_<res>.json
and .md, rewritten after each measurement.

--vae wan2.2 measures the Wan2.2 VAE (Wan2.2-TI2V-5B's: 48 channels, 16x, patch 2) at 121 frames of
704x1280 (--res 704p) instead, and --vae flux FLUX.1's AutoencoderKL at 1024x1024 (--res 1024px,
one image from the transformer's packed latents [1, 4096, 64], unpacked and de-normalized as
FluxPipeline does; ditrun forward, one graph): results vae_decode_<vae>_<res>.json/.md. Their
folders come from diffusers' own classes at the published configs.

usage: bench/vae_decode.py --ditc BIN --ditrun BIN --work DIR --out DIR [--vae wan2.1|wan2.2|flux] [--res 480p,720p] [--iters 2] [--keep]
       bench/vae_decode.py --dry-run --out DIR
       bench/vae_decode.py --write-folder DIR
           (DIR/vae in the standard library alone, zero weights: the shapes ditc compiles, for
           filling a kernel cache; compile it with --frames 81 at each resolution)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ceilings import run_info  # noqa: E402
import pipeline_bench as pb  # noqa: E402

# AutoencoderKLWan's class defaults at the pinned diffusers (58eb52c0803e): the published Wan2.1 VAE.
CONFIG = {"attn_scales": [], "base_dim": 96, "decoder_base_dim": None, "dim_mult": [1, 2, 4, 4], "dropout": 0.0,
          "in_channels": 3, "is_residual": False,
          "latents_mean": [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517,
                           -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
          "latents_std": [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
                          1.6382, 1.1253, 2.8251, 1.916],
          "num_res_blocks": 2, "out_channels": 3, "patch_size": None, "scale_factor_spatial": 8, "scale_factor_temporal": 4,
          "temperal_downsample": [False, True, True], "z_dim": 16}
RESOLUTIONS = {"480p": (480, 832), "720p": (720, 1280)}
FRAMES = 81
SEED = 2101
# Wan-AI/Wan2.2-TI2V-5B-Diffusers' vae/config.json (AutoencoderKLWan).
CONFIG_22 = {"attn_scales": [], "base_dim": 160, "decoder_base_dim": 256, "dim_mult": [1, 2, 4, 4], "dropout": 0.0,
             "in_channels": 12, "is_residual": True,
             "latents_mean": [-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813,
                              0.0891, 0.157, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108,
                              -0.2158, 0.2502, -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.123, -0.0313,
                              -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.052, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944,
                              0.3573, -0.0548, -0.1681, -0.0667],
             "latents_std": [0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.499, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
                             0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
                             0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
                             0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744],
             "num_res_blocks": 2, "out_channels": 12, "patch_size": 2, "scale_factor_spatial": 16, "scale_factor_temporal": 4,
             "temperal_downsample": [False, True, True], "z_dim": 48}
# black-forest-labs/FLUX.1-dev's vae/config.json (AutoencoderKL).
CONFIG_FLUX = {"act_fn": "silu", "block_out_channels": [128, 256, 512, 512], "down_block_types": ["DownEncoderBlock2D"] * 4,
               "force_upcast": True, "in_channels": 3, "latent_channels": 16, "latents_mean": None, "latents_std": None,
               "layers_per_block": 2, "mid_block_add_attention": True, "norm_num_groups": 32, "out_channels": 3,
               "sample_size": 1024, "scaling_factor": 0.3611, "shift_factor": 0.1159, "up_block_types": ["UpDecoderBlock2D"] * 4,
               "use_post_quant_conv": False, "use_quant_conv": False}
# Per VAE: its class, config, resolutions (height, width), frames (0: an image), file tag.
VAES = {"wan2.1": dict(cls="AutoencoderKLWan", config=CONFIG, res=RESOLUTIONS, frames=FRAMES, tag="", name="Wan2.1 VAE"),
        "wan2.2": dict(cls="AutoencoderKLWan", config=CONFIG_22, res={"704p": (704, 1280)}, frames=121, tag="wan2.2_",
                       name="Wan2.2 VAE (TI2V-5B)"),
        "flux": dict(cls="AutoencoderKL", config=CONFIG_FLUX, res={"1024px": (1024, 1024)}, frames=0, tag="flux_",
                     name="FLUX.1 VAE")}


V = VAES["wan2.1"]  # the VAE measured (--vae)


def latent_shape(res, frames=None):
    """[B, z, latent frames, h, w] of a decode to `frames` frames at resolution `res`; FLUX.1's: the
    transformer's packed latents [B, (h/16)(w/16), 4 z]."""
    h, w = V["res"][res]
    c = V["config"]
    if not V["frames"]:
        return [1, (h // 16) * (w // 16), 4 * c["latent_channels"]]
    f = frames or V["frames"]
    s = c["scale_factor_spatial"]
    return [1, c["z_dim"], (f - 1) // c["scale_factor_temporal"] + 1, h // s, w // s]


def weight_shapes(cfg):
    """The decoder's tensors and post_quant_conv (what the stage reads; the encoder is ignored)."""
    dim, z, nres = cfg.get("decoder_base_dim") or cfg["base_dim"], cfg["z_dim"], cfg["num_res_blocks"]
    mult, up_t = cfg["dim_mult"], cfg["temperal_downsample"][::-1]
    dims = [dim * mult[-1]] + [dim * m for m in mult[::-1]]
    s = {}

    def conv(name, o, i, kt, k):
        s[name + ".weight"], s[name + ".bias"] = [o, i, kt, k, k], [o]

    def resnet(p, i, o):
        s[p + ".norm1.gamma"] = [i, 1, 1, 1]
        conv(p + ".conv1", o, i, 3, 3)
        s[p + ".norm2.gamma"] = [o, 1, 1, 1]
        conv(p + ".conv2", o, o, 3, 3)
        if i != o:
            conv(p + ".conv_shortcut", o, i, 1, 1)

    conv("post_quant_conv", z, z, 1, 1)
    conv("decoder.conv_in", dims[0], z, 3, 3)
    c = dims[0]
    for r in range(2):
        resnet(f"decoder.mid_block.resnets.{r}", c, c)
    a = "decoder.mid_block.attentions.0."
    s[a + "norm.gamma"] = [c, 1, 1]
    s[a + "to_qkv.weight"], s[a + "to_qkv.bias"] = [3 * c, c, 1, 1], [3 * c]
    s[a + "proj.weight"], s[a + "proj.bias"] = [c, c, 1, 1], [c]
    for i in range(len(mult)):
        cin, cout = dims[i] // 2 if i else dims[i], dims[i + 1]
        for r in range(nres + 1):
            resnet(f"decoder.up_blocks.{i}.resnets.{r}", cout if r else cin, cout)
        if i < len(mult) - 1:
            p = f"decoder.up_blocks.{i}.upsamplers.0."
            if up_t[i]:
                conv(p + "time_conv", 2 * cout, cout, 3, 1)
            s[p + "resample.1.weight"], s[p + "resample.1.bias"] = [cout // 2, cout, 3, 3], [cout // 2]
    s["decoder.norm_out.gamma"] = [dims[-1], 1, 1, 1]
    conv("decoder.conv_out", cfg["out_channels"], dims[-1], 3, 3)
    return s


def write_folder(path, cfg=None):
    """path/vae: config.json and zero bf16 weights. Returns the weights' bytes. The Wan2.1 VAE's
    from the standard library alone; the others' shapes from diffusers' class (torch needed)."""
    cfg = cfg or V["config"]
    vae = os.path.join(path, "vae")
    os.makedirs(vae, exist_ok=True)
    if V is not VAES["wan2.1"]:
        # The other VAEs' shapes come from diffusers' classes: where torch imports (a GPU machine, or
        # tests/gpu/prepare.sh's VAE_TORCH_PATH), never in CI.
        import torch  # device only
        import diffusers  # device only
        from safetensors.torch import save_file  # device only
        with torch.device("meta"):
            model = getattr(diffusers, V["cls"])(**cfg)
        zeros = {k: torch.zeros(v.shape, dtype=torch.bfloat16) for k, v in model.state_dict().items()}
        save_file(zeros, os.path.join(vae, "diffusion_pytorch_model.safetensors"))
        pb.write_json(os.path.join(vae, "config.json"), {"_class_name": V["cls"], "_diffusers_version": "0.40.0.dev0", **cfg})
        return sum(2 * t.numel() for t in zeros.values())
    pb.write_json(os.path.join(vae, "config.json"), {"_class_name": "AutoencoderKLWan", "_diffusers_version": "0.40.0.dev0", **cfg})
    return pb.write_zero_safetensors(os.path.join(vae, "diffusion_pytorch_model.safetensors"), weight_shapes(cfg))


def shape_flags(res):
    h, w = V["res"][res]
    return (["--frames", str(V["frames"])] if V["frames"] else []) + ["--height", str(h), "--width", str(w)]


def psnr_db(mse):
    """PSNR of a [-1, 1] signal (peak-to-peak 2)."""
    return math.inf if mse == 0 else 10 * math.log10(4.0 / mse)


def fmt(v, spec, missing="-"):
    return missing if v is None else format(v, spec)


def lines(res):
    """The results as a markdown table: one row a contender, a failed side saying why."""
    h, w = V["res"][res["res"]]
    what = f"{V['frames']} frames at {w}x{h}" if V["frames"] else f"one {w}x{h} image"
    L = [f"{V['name']} decode, {what} (latents {'x'.join(map(str, res['latents']))}), bf16, random weights "
         f"at the published config", "",
         "| contender | decode ms | peak GiB | vs diffusers | PSNR dB | cosine |", "|---|---|---|---|---|---|"]
    d, o, p = res.get("diffusers", {}), res.get("ditrun", {}), res.get("parity", {})
    rows = [(f"diffusers {V['cls']}.decode", d, {}), ("ditrun (compiled stage)", o, p)]
    tl = res.get("ditrun_tiled")
    if tl:
        win = f", {tl['tiles']} windows of {tl['window']} latent columns" if tl.get("tiles") else ""
        rows.append((f"ditrun, --vae-budget {tl.get('budget_gib')} GiB{win}", tl, tl.get("parity", {})))
    for name, e, q in rows:
        if e.get("failed"):
            L.append(f"| {name} | failed: {e['failed'][:160]} | | | | |")
            continue
        ratio = d["ms"] / e["ms"] if e.get("ms") and d.get("ms") and e is not d else None
        L.append(f"| {name} | {fmt(e.get('ms'), '.1f')} | {fmt(e.get('peak_gib'), '.2f')} | {fmt(ratio, '.2f')}{'x' if ratio else ''} | "
                 f"{fmt(q.get('psnr_db'), '.2f')} | {fmt(q.get('cosine'), '.6f')} |")
    if d.get("peak_gib") is not None or o.get("peak_gib") is not None:
        L += ["", "peak GiB: diffusers' torch.cuda.max_memory_allocated (tensors only); ditrun's own allocation (weights, "
              "activations and caches: its memory line, the larger decoder's for a chunked decode). decode ms: ditrun's without "
              "loading its bundles" + (f" ({1e3 * o['load_s']:.0f} ms more)" if o.get("load_s") is not None else "")
              + (f"; the device's peak over the ditrun process (nvidia-smi, the CUDA context included): {o['device_peak_gib']:.2f} GiB"
                 if o.get("device_peak_gib") is not None else "")]
    return L


def save_res(res, out):
    path = pb.save(res, out, f"vae_decode_{V['tag']}{res['res']}.json")
    with open(os.path.join(out, f"vae_decode_{V['tag']}{res['res']}.md"), "w") as fh:
        fh.write("\n".join(lines(res)) + "\n")
    return path


def ditrun_line(stderr, prefix):
    for line in stderr.splitlines():
        if line.startswith(prefix):
            return line.split()
    return None


def dry_run(a):
    """Shapes against diffusers' tiny VAE, the folder writer and the table, with made-up numbers
    (nothing it writes is a measurement)."""
    golden = os.path.join(HERE, "..", "tests", "data", "wan_vae_tiny", "vae")
    if os.path.isdir(golden):
        cfg = {k: v for k, v in json.load(open(os.path.join(golden, "config.json"))).items() if not k.startswith("_")}
        want = {k: v for k, v in pb.read_header_shapes(os.path.join(golden, "diffusion_pytorch_model.safetensors")).items()
                if k.startswith(("decoder.", "post_quant_conv."))}
        got = weight_shapes(cfg)
        bad = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        assert not bad, f"weight_shapes differs from diffusers' tiny AutoencoderKLWan at {bad[:5]}"
        assert sorted(cfg) == sorted(CONFIG), f"config fields differ from diffusers': {sorted(set(cfg) ^ set(CONFIG))}"
    else:
        print(f"note: {os.path.normpath(golden)} is missing: the shapes are not checked against diffusers' tiny VAE")
    n = pb.param_count(weight_shapes(CONFIG))
    assert 70e6 < n < 76e6, n  # the decoder's 73.3M of the Wan2.1 VAE's 127M parameters
    assert latent_shape("480p") == [1, 16, 21, 60, 104] and latent_shape("720p") == [1, 16, 21, 90, 160]
    os.makedirs(a.out, exist_ok=True)
    folder = os.path.join(a.out, "folder")
    nbytes = write_folder(folder)
    assert nbytes == 2 * n and pb.read_header_shapes(os.path.join(folder, "vae", "diffusion_pytorch_model.safetensors")) == \
        weight_shapes(CONFIG)
    assert json.load(open(os.path.join(folder, "vae", "config.json")))["_class_name"] == "AutoencoderKLWan"
    print(f"Wan2.1 VAE decoder: {n / 1e6:.1f}M parameters; zero-weight folder {nbytes / 1e6:.0f} MB")
    for r, ok in (("480p", True), ("720p", False)):
        res = {"res": r, "latents": latent_shape(r), "dry_run": True,
               "diffusers": {"ms": 30000.0, "peak_gib": 20.0},
               "ditrun": {"ms": 12000.0, "peak_gib": 40.0} if ok else {"failed": "out of memory: 150.00 GiB needed"},
               "parity": {"psnr_db": 48.5, "cosine": 0.99995} if ok else {},
               "ditrun_tiled": {"ms": 14000.0, "peak_gib": 3.0, "budget_gib": 3.4, "tiles": 3, "window": 63, "halo": 7,
                                "parity": {"psnr_db": 48.5, "cosine": 0.99995}}}
        for line in lines(res):
            print(line)
        save_res(res, a.out)
    return 0


def measure(a, folder, flags, extra, inputs, out, ref, dev):
    """ditrun's decode of the latents in `inputs` with the bundles `ditc` compiles from folder/vae
    (flags, plus extra for the chunks' graphs: --vae-budget splits the decoder, its head compiled
    too): the best of --iters, its allocation and split of the time, and its frames against
    diffusers' (ref). Returns the entry and 1 if it failed or missed the cosine bar, else 0."""
    import torch  # device only
    from safetensors.torch import load_file  # device only
    vae, e = os.path.join(folder, "vae"), {}
    chunk = ["--vae-chunk", str(a.chunk)] if a.chunk else []
    tail = ["--vae-part", "tail"] if extra else []
    bundle, e["ditc_compile_s"], refused = pb.ditc_compile(a.ditc, vae, flags + chunk + tail + extra)
    first = head = None
    if bundle and a.chunk:  # the first latent frame's graph, a bundle of its own
        first, _, refused = pb.ditc_compile(a.ditc, vae, flags + chunk + tail + extra + ["--vae-first"])
    if first and extra:  # a split decoder's head: whole frames, one latent frame a forward
        head, _, refused = pb.ditc_compile(a.ditc, vae, flags + ["--vae-chunk", "1", "--vae-part", "head"])
    if not bundle or (a.chunk and not first) or (extra and not head):
        return {"failed": "ditc compile: " + refused}, 1
    if extra:
        info = subprocess.run([a.ditrun, "info", bundle], capture_output=True, text=True).stdout.split("\n")
        tile = [x.split() for x in info if x.startswith("tile ")]
        if tile:
            e["tiles"], e["window"], e["halo"] = int(tile[0][1]), int(tile[0][3]), int(tile[0][-1])
    times = []
    for _ in range(a.iters):
        if a.chunk:  # chunk by chunk (ditrun decode): the device's peak seen by nvidia-smi
            from gpumem import MemPoll, used_mib
            base, poll = used_mib(0), MemPoll(gpu=0, every_s=0.02)
            poll.start()
            p = subprocess.run([a.ditrun, "decode", bundle, "--first", first] + (["--head", head] if head else []) +
                               ["--latents", inputs, "--out", out], capture_output=True, text=True)
            poll.stop = True
            poll.join()
            t = ditrun_line(p.stderr, "ditrun: vae decode ")
            if not p.returncode:  # "ditrun: vae decode T s (loading L s, M MiB allocated)"
                times.append(float(t[3]) - float(t[6]))  # the decode without its bundles' loading
                e["load_s"] = float(t[6])
                e["peak_gib"] = float(t[8]) / 1024
                e["split_s"] = {"forwards": float(t[12]), "caches": float(t[15]), "frames": float(t[18]),
                                "frames_beside_forwards": float(t[20])}
                e["device_peak_gib"] = (poll.peak - base) / 1024
        else:
            p = subprocess.run([a.ditrun, "forward", bundle, "--inputs", inputs, "--out", out], capture_output=True, text=True)
            t, m = ditrun_line(p.stderr, "ditrun: forward "), ditrun_line(p.stderr, "ditrun: memory:")
            if not p.returncode:
                times.append(float(t[2].rstrip("s")))
                if m:
                    e["peak_gib"] = float(m[2]) / 1024
        if p.returncode:
            return {"failed": (p.stderr.strip() or "ditrun failed").splitlines()[-1][:300]}, 1
    e["ms"] = 1e3 * min(times)
    ours = load_file(out)["frames" if a.chunk else "sample"]
    if ref is None:
        return e, 0
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    o, w = ours.to(dev, torch.float64).flatten(), ref.to(dev, torch.float64).flatten()
    mse = float(((o - w) ** 2).mean())
    cos = float(torch.nn.functional.cosine_similarity(o, w, dim=0))
    e["parity"] = {"psnr_db": psnr_db(mse), "cosine": cos, "max_abs": float((o - w).abs().max()),
                   "clamped_share": float((w.abs() >= 1).double().mean()), "parity_ok": cos >= pb.COSINE_MIN}
    return e, int(not e["parity"]["parity_ok"])


def run(a):
    import torch  # device only
    from safetensors.torch import load_file, save_file  # device only
    import diffusers  # device only
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "data"))
    if V["frames"]:
        from make_goldens_wan_vae import redraw_parameters  # device only (imports diffusers)
    else:
        from make_goldens_flux_vae import redraw_parameters  # device only

    dev, bf16, fails = torch.device("cuda"), torch.bfloat16, 0
    gen = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    cfg = V["config"]
    model = getattr(diffusers, V["cls"])(**cfg).eval()
    redraw_parameters(model, gen)
    folder, store = os.path.join(a.work, "pipeline"), os.path.join(a.work, "store")
    model.save_pretrained(os.path.join(folder, "vae"))
    model = model.to(dev, bf16)
    if V["frames"]:
        z = cfg["z_dim"]
        mean = torch.tensor(cfg["latents_mean"], device=dev).view(1, z, 1, 1, 1)
        inv_std = 1.0 / torch.tensor(cfg["latents_std"], device=dev).view(1, z, 1, 1, 1)

    def decode(latents):  # the pipeline's de-normalization (FluxPipeline's unpacking first), then the decode
        with torch.no_grad():
            if V["frames"]:
                return model.decode((latents / inv_std + mean).to(bf16), return_dict=False)[0]
            h, w = V["res"][r]
            x = diffusers.FluxPipeline._unpack_latents(latents, h, w, 8)
            return model.decode((x / cfg["scaling_factor"] + cfg["shift_factor"]).to(bf16), return_dict=False)[0]

    for r in a.res.split(","):
        res = {"run": run_info(), "res": r, "vae": a.vae, "latents": latent_shape(r), "config": cfg, "frames": V["frames"], "iters": a.iters,
               "device": torch.cuda.get_device_name(0), "diffusers": {}, "ditrun": {}, "parity": {}}
        print(lines(res)[0], flush=True)
        latents = torch.randn(latent_shape(r), generator=gen)
        inputs = os.path.join(a.work, f"latents_{r}.safetensors")
        save_file({"latents": latents}, inputs)
        # diffusers first, its frames kept on the host; then the model leaves the device for ditrun.
        ref = None
        model.to(dev)
        try:
            decode((latents[:, :, :1] if V["frames"] else latents).to(dev))  # warm-up
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(a.iters):
                t0 = time.perf_counter()
                ref = decode(latents.to(dev))
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                ref = ref.cpu()
            res["diffusers"] = {"ms": 1e3 * sorted(times)[len(times) // 2], "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError among them
            res["diffusers"] = {"failed": str(e).strip().splitlines()[0][:200]}
            fails += 1
        save_res(res, a.out)
        model.to("cpu")
        torch.cuda.empty_cache()
        flags = shape_flags(r) + ["--dtype", "bf16", "--target", "sm_90", "--store", store]
        res["ditrun"], bad = measure(a, folder, flags, [], inputs, os.path.join(a.work, f"sample_{r}.safetensors"), ref, dev)
        res["ditrun"]["vae_chunk"] = a.chunk
        res["parity"] = res["ditrun"].pop("parity", {})
        fails += bad
        budget = a.budget or (a.budget_share * res["diffusers"]["peak_gib"] if a.budget_share and res["diffusers"].get("peak_gib") else 0)
        if budget and a.chunk:  # the same decode split into windows that fit the budget
            budget = math.floor(budget * 100) / 100
            res["ditrun_tiled"], bad = measure(a, folder, flags, ["--vae-budget", str(budget)], inputs,
                                               os.path.join(a.work, f"sample_{r}_tiled.safetensors"), ref, dev)
            res["ditrun_tiled"]["budget_gib"] = budget
            fails += bad
        res["complete"] = True
        save_res(res, a.out)
        print("\n".join(lines(res)), flush=True)
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pb.add_contender_flags(ap, "where the model, latents and bundle go (removed at the end unless --keep)", "results directory")
    ap.add_argument("--vae", default="wan2.1", choices=sorted(VAES), help="the VAE (default wan2.1)")
    ap.add_argument("--res", help="resolutions, comma-separated: 480p, 720p (wan2.1, the default both), 704p (wan2.2), 1024px (flux)")
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=1, help="latent frames a decoder forward takes (ditrun decode); 0: one "
                    "graph over the whole video (ditrun forward)")
    ap.add_argument("--budget", type=float, default=0, help="GiB: also the decode split into the fewest windows whose "
                    "predicted peak fits (ditc --vae-budget), a row of its own")
    ap.add_argument("--budget-share", type=float, default=0, help="the same with a budget of this share of diffusers' peak "
                    "measured in the run (e.g. 0.33)")
    pb.add_switches(ap, "--keep")
    ap.add_argument("--dry-run", action="store_true", help="check the shapes, folder writer and table without torch or a GPU")
    ap.add_argument("--write-folder", metavar="DIR")
    a = ap.parse_args()
    global V
    V = VAES[a.vae]
    a.res = a.res or ",".join(V["res"])
    for r in a.res.split(","):
        if r not in V["res"]:
            ap.error(f"--res {r}: --vae {a.vae} takes {', '.join(V['res'])}")
    if not V["frames"]:
        a.chunk = 0  # an image decodes in one graph
        if a.budget or a.budget_share:
            ap.error(f"--budget: --vae {a.vae} decodes an image in one graph (no windows)")
    if a.iters < 1:
        ap.error("--iters: expected at least 1")
    return pb.dispatch(ap, a, dry_run, run, ("ditc", "ditrun", "work", "out"), write_folder=lambda: (
        f"wrote {a.write_folder}/vae: {write_folder(a.write_folder)} bytes of zero weights"))


if __name__ == "__main__":
    sys.exit(main())
