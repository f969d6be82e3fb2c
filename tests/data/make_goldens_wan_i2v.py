#!/usr/bin/env python3
"""Image-to-video goldens: what diffusers' WanImageToVideoPipeline makes of a prompt and a PNG.

  ti2v   adds to tests/data/wan22_pipeline_tiny/ (the Wan2.2 TI2V-5B layout of
         make_goldens_wan_pipeline.py wan22, expand_timesteps): the pipeline loaded from that
         folder as WanImageToVideoPipeline (no image encoder), its image's encoding the first
         latent frame.
  wan21  writes tests/data/wan21_i2v_pipeline_tiny/: a whole tiny Wan2.1-I2V pipeline (a
         WanTransformer3DModel of 36 input channels with image_dim, a tiny CLIPVisionModel as
         image_encoder and its CLIPImageProcessor, the UMT5 text encoder and Wan2.1 VAE of
         wan_pipeline_tiny's kind), its image's encoding followed by zero frames concatenated to
         the latents with the mask, and the CLIP image encoder's penultimate hidden states as
         image tokens. Text is padded to 512 tokens, as the pipeline pads it (the attention
         takes all but the last 512 tokens of the context as image tokens).

Each writes, in the pipeline folder:
  i2v_image.png            the input picture, of another size than the video's (the pipeline
                           resizes it with PIL's LANCZOS; the CLIP preprocessing with BICUBIC)
  i2v_golden.safetensors   init_latents (passed as latents=), frames [1, 3, F, H, W] (the
                           pipeline's np output in [0, 1] mapped to [-1, 1]), latents (the
                           pipeline's output_type="latent"), image_latents (prepare_latents'
                           latent_condition: the normalized encoding) and, for wan21,
                           image_embeds (encode_image's)
  i2v_meta.json            the call's arguments and the versions

transformers 5 resizes in CLIPImageProcessor through torchvision when it is installed and
through PIL otherwise; these goldens are made without torchvision (PIL), which the C
preprocessing reproduces byte for byte.

Not a test dependency (CI reads the committed outputs). Run with torch, transformers, PIL and the
pinned diffusers:
  PYTHONPATH=/opt/tpy:/tmp/pb:.ref/src python3 tests/data/make_goldens_wan_i2v.py ti2v|wan21
"""
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import PIL
import PIL.Image
import torch
from safetensors.torch import save_file

import diffusers
import transformers
from diffusers import AutoencoderKLWan, WanImageToVideoPipeline, WanTransformer3DModel
from transformers import AutoTokenizer, CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel, UMT5Config, UMT5EncoderModel

# pipeline_wan_i2v's prompt cleaning calls ftfy.fix_text whether or not ftfy is installed; without
# it, the identity (ftfy only repairs mis-encoded text, which these prompts are not; the C side
# does the same as WanPipeline without ftfy).
import diffusers.pipelines.wan.pipeline_wan_i2v as _i2v  # noqa: E402
if not hasattr(_i2v, "ftfy"):
    _i2v.ftfy = type("ftfy", (), {"fix_text": staticmethod(lambda text: text)})

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_goldens import finish_pipeline_folder, fresh_dir, make_unipc, redraw_parameters  # noqa: E402
from make_goldens_umt5 import TINY as UMT5_TINY  # noqa: E402
from make_goldens_clip_vision import redraw_parameters as redraw_clip_vision  # noqa: E402
from make_goldens_umt5 import redraw_parameters as redraw_umt5  # noqa: E402

SEED = 7411
PROMPT = "A paper boat drifts down a rainy street"
NEGATIVE = "blurry"
STEPS, GUIDANCE = 3, 5.0
FRAMES = 5
IMAGE_SIZE = (45, 38)  # width, height: neither the video's size nor its aspect
CLIP_TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, image_size=28, patch_size=14,
                 hidden_act="gelu", layer_norm_eps=1e-5, projection_dim=16)


def picture(seed):
    """A photo-like RGB picture: smooth gradients, a disc and noise (uint8)."""
    w, h = IMAGE_SIZE
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = 128 + 100 * np.sin(x / 7.0) * np.cos(y / 9.0)
    g = 255 * x / w
    b = np.where((x - w / 2) ** 2 + (y - h / 2) ** 2 < (h / 3) ** 2, 220.0, 40.0)
    img = np.stack([r, g, b], -1) + rng.normal(0, 12, (h, w, 3))
    return PIL.Image.fromarray(np.clip(img, 0, 255).round().astype(np.uint8), "RGB")


def tiny_wan21(out):
    """A tiny Wan2.1-I2V pipeline saved into out."""
    tok_src = os.path.join(HERE, "tok_t5_tiny")
    tok = AutoTokenizer.from_pretrained(tok_src)
    torch.manual_seed(SEED)
    te = UMT5EncoderModel(UMT5Config(**dict(UMT5_TINY, vocab_size=len(tok)))).eval()
    redraw_umt5(te, torch.Generator().manual_seed(SEED + 1))
    clip = CLIPVisionModel(CLIPVisionConfig(**CLIP_TINY)).eval()
    redraw_clip_vision(clip, torch.Generator().manual_seed(SEED + 5))  # make_goldens_clip_vision.py's draw
    proc = CLIPImageProcessor(size={"shortest_edge": CLIP_TINY["image_size"]},
                              crop_size={"height": CLIP_TINY["image_size"], "width": CLIP_TINY["image_size"]})
    heads, head_dim = 2, 16
    tr = WanTransformer3DModel(patch_size=[1, 2, 2], num_attention_heads=heads, attention_head_dim=head_dim, in_channels=36,
                               out_channels=16, text_dim=UMT5_TINY["d_model"], freq_dim=32, ffn_dim=64, num_layers=2,
                               cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
                               image_dim=CLIP_TINY["hidden_size"], added_kv_proj_dim=heads * head_dim, rope_max_seq_len=64).eval()
    redraw_parameters(tr, torch.Generator().manual_seed(SEED + 2))
    vae = AutoencoderKLWan.from_pretrained(os.path.join(HERE, "wan_vae_tiny", "vae")).eval()
    pipe = WanImageToVideoPipeline(tokenizer=tok, text_encoder=te, vae=vae, scheduler=make_unipc(3.0), image_processor=proc,
                                   image_encoder=clip, transformer=tr)
    pipe.save_pretrained(out, safe_serialization=True)
    shutil.rmtree(os.path.join(out, "tokenizer"))
    shutil.copytree(tok_src, os.path.join(out, "tokenizer"))


LAYOUTS = {
    "ti2v": dict(name="wan22_pipeline_tiny", z=48, spatial=16, size=64, text_len=16, shift=3.0, make=None, max_bytes=1_400_000),
    "wan21": dict(name="wan21_i2v_pipeline_tiny", z=16, spatial=8, size=32, text_len=512, shift=3.0, make=tiny_wan21,
                  max_bytes=1_300_000),
}


def main():
    layout = LAYOUTS[sys.argv[1]]
    out = os.path.join(HERE, layout["name"])
    if layout["make"]:
        out = fresh_dir(layout["name"])
        layout["make"](out)
    for f in ("i2v_image.png", "i2v_golden.safetensors", "i2v_meta.json"):
        if os.path.exists(os.path.join(out, f)):
            os.remove(os.path.join(out, f))
    pipe = WanImageToVideoPipeline.from_pretrained(out)
    pipe.set_progress_bar_config(disable=True)
    image = picture(SEED + 6)
    image.save(os.path.join(out, "i2v_image.png"))
    image = PIL.Image.open(os.path.join(out, "i2v_image.png"))  # read back, as the C side reads it
    size, sp, z = layout["size"], layout["spatial"], layout["z"]
    f, h, w = (FRAMES - 1) // 4 + 1, size // sp, size // sp
    init = torch.randn((1, z, f, h, w), generator=torch.Generator().manual_seed(SEED + 3))
    call = dict(image=image, prompt=PROMPT, negative_prompt=NEGATIVE, height=size, width=size, num_frames=FRAMES,
                num_inference_steps=STEPS, guidance_scale=GUIDANCE, max_sequence_length=layout["text_len"],
                generator=torch.Generator().manual_seed(SEED + 4))
    # The normalized encoding prepare_latents computes, for diagnosis.
    captured = {}
    orig = pipe.prepare_latents

    def spy(*args, **kwargs):
        res = orig(*args, **kwargs)
        captured["condition"] = res[1]
        return res

    pipe.prepare_latents = spy
    with torch.no_grad():
        video = pipe(latents=init.clone(), output_type="np", **call).frames
        latents = pipe(latents=init.clone(), output_type="latent", **call).frames
        embeds = pipe.encode_image(image, "cpu") if pipe.image_encoder is not None else None
    video = torch.from_numpy(np.asarray(video, dtype=np.float32))
    frames = (video.permute(0, 4, 1, 2, 3) * 2.0 - 1.0).contiguous()
    assert frames.shape == (1, 3, FRAMES, size, size), frames.shape
    inside = float(((video > 0.01) & (video < 0.99)).float().mean())
    print(f"{layout['name']}: frames {tuple(frames.shape)}, {inside:.3f} of the values inside (0, 1)")
    assert inside > 0.3, "the decoded frames are mostly clamped"
    cond = captured["condition"]
    if z == 16:  # the concatenated condition: the mask's 4 channels, then the encoding
        cond = cond[:, 4:]
    tensors = {"init_latents": init.contiguous(), "frames": frames, "latents": latents.contiguous(),
               "image_latents": cond.contiguous()}
    if embeds is not None:
        tensors["image_embeds"] = embeds.contiguous()
    save_file(tensors, os.path.join(out, "i2v_golden.safetensors"))
    meta = dict(prompt=PROMPT, negative_prompt=NEGATIVE, frames=FRAMES, height=size, width=size, text_len=layout["text_len"],
                steps=STEPS, guidance=GUIDANCE, shift=layout["shift"], sampler="unipc", seed=SEED,
                image="i2v_image.png", image_size=list(IMAGE_SIZE),
                image_len=int(embeds.shape[1]) if embeds is not None else None,
                versions=dict(torch=torch.__version__, transformers=transformers.__version__, diffusers=diffusers.__version__,
                              numpy=np.__version__, pillow=PIL.__version__,
                              image_processor=type(pipe.image_processor).__name__ if pipe.image_processor is not None else None))
    with open(os.path.join(out, "i2v_meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    if layout["make"]:
        meta_main = dict(meta, note="the pipeline folder of the i2v goldens (i2v_*)")
        finish_pipeline_folder(out, layout["name"], meta_main, layout["max_bytes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
