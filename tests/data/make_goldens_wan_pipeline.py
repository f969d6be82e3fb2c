#!/usr/bin/env python3
"""Makes tests/data/wan_pipeline_tiny/: a whole tiny Wan2.1 text-to-video pipeline directory and
what diffusers' WanPipeline makes of a prompt with it; with the argument wan22, the same for
Wan2.2 TI2V-5B's layout in tests/data/wan22_pipeline_tiny/ (48 latent channels, the Wan2.2 VAE of
wan22_vae_tiny (spatial factor 16), expand_timesteps: per-token timesteps), 64 x 64.

  model_index.json, scheduler/, transformer/, text_encoder/, vae/   WanPipeline.save_pretrained
      of components whose sizes fit each other: a tiny WanTransformer3DModel (16 latent channels,
      text_dim = the encoder's d_model), a tiny UMT5EncoderModel (umt5_tiny's configuration with
      the tokenizer's vocabulary size), the tiny AutoencoderKLWan of wan_vae_tiny/vae (z_dim 16),
      the Wan2.1 UniPC scheduler (flow sigmas, flow_shift 3)
  tokenizer/            tok_t5_tiny's files (spiece.model + tokenizer_config.json +
                        special_tokens_map.json), the SentencePiece model of the tokenizer goldens
  golden.safetensors    init_latents [1, 16, f, h, w] (passed as latents=), frames [1, 3, F, H, W]:
                        WanPipeline(prompt, negative_prompt, steps, guidance, output_type="np")
                        of the folder as reloaded by WanPipeline.from_pretrained, mapped back from
                        [0, 1] to the decoder's [-1, 1] (x * 2 - 1); prompt_embeds and
                        negative_prompt_embeds (encode_prompt's) and latents (output_type="latent")
                        for diagnosis
  meta.json             the call's arguments and the versions

Not a test dependency (CI reads the committed outputs). Run with torch, transformers (and protobuf
for its SentencePiece conversion) and the pinned diffusers:
  PYTHONPATH=/opt/tpy:/tmp/pb:.ref/src python3 tests/data/make_goldens_wan_pipeline.py [wan22]
"""
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
import transformers
from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel
from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_goldens import finish_pipeline_folder, fresh_dir, make_unipc, redraw_parameters  # noqa: E402
from make_goldens_umt5 import TINY as UMT5_TINY  # noqa: E402
from make_goldens_umt5 import redraw_parameters as redraw_umt5  # noqa: E402

# Per layout: the folder, the VAE golden it takes, latent channels, the VAE's spatial factor,
# WanPipeline's expand_timesteps, the picture's size.
# (64 x 64: the Wan2.2 VAE's 16x leaves 4 x 4 latents, 2 x 2 tokens a frame; its frames make the
# folder larger).
LAYOUTS = {"wan21": dict(name="wan_pipeline_tiny", vae="wan_vae_tiny", z=16, spatial=8, expand=False, size=32, max_bytes=1_000_000),
           "wan22": dict(name="wan22_pipeline_tiny", vae="wan22_vae_tiny", z=48, spatial=16, expand=True, size=64, max_bytes=1_200_000)}
LAYOUT = LAYOUTS[sys.argv[1] if len(sys.argv) > 1 else "wan21"]
NAME = LAYOUT["name"]
MAX_FOLDER_BYTES = LAYOUT["max_bytes"]
SEED = 7301
FRAMES, HEIGHT, WIDTH = 5, LAYOUT["size"], LAYOUT["size"]
TEXT_LEN = 16
STEPS, GUIDANCE, SHIFT = 3, 5.0, 3.0
PROMPT = "A red fox runs   through snow at dawn"
NEGATIVE = "blurry"

TRANSFORMER = dict(
    patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=LAYOUT["z"], out_channels=LAYOUT["z"],
    text_dim=UMT5_TINY["d_model"], freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None, added_kv_proj_dim=None, rope_max_seq_len=64,
)


def main():
    out = fresh_dir(NAME)
    tok_src = os.path.join(HERE, "tok_t5_tiny")
    tok = AutoTokenizer.from_pretrained(tok_src)
    torch.manual_seed(SEED)
    te = UMT5EncoderModel(UMT5Config(**dict(UMT5_TINY, vocab_size=len(tok)))).eval()
    redraw_umt5(te, torch.Generator().manual_seed(SEED + 1))
    tr = WanTransformer3DModel(**TRANSFORMER).eval()
    redraw_parameters(tr, torch.Generator().manual_seed(SEED + 2))
    vae = AutoencoderKLWan.from_pretrained(os.path.join(HERE, LAYOUT["vae"], "vae")).eval()
    assert vae.config.z_dim == TRANSFORMER["in_channels"]
    pipe = WanPipeline(tokenizer=tok, text_encoder=te, vae=vae, scheduler=make_unipc(SHIFT), transformer=tr,
                       expand_timesteps=LAYOUT["expand"])
    pipe.save_pretrained(out, safe_serialization=True)
    # The tokenizer folder is the tokenizer goldens' own files (the SentencePiece model the C
    # tokenizer reads), whatever save_pretrained wrote.
    shutil.rmtree(os.path.join(out, "tokenizer"))
    shutil.copytree(tok_src, os.path.join(out, "tokenizer"))

    # Everything below runs on the folder as diffusers reads it back.
    pipe = WanPipeline.from_pretrained(out)
    pipe.set_progress_bar_config(disable=True)
    sp = LAYOUT["spatial"]
    f, h, w = (FRAMES - 1) // 4 + 1, HEIGHT // sp, WIDTH // sp
    init = torch.randn((1, LAYOUT["z"], f, h, w), generator=torch.Generator().manual_seed(SEED + 3))
    call = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                num_inference_steps=STEPS, guidance_scale=GUIDANCE, max_sequence_length=TEXT_LEN,
                generator=torch.Generator().manual_seed(SEED + 4))
    with torch.no_grad():
        video = pipe(latents=init.clone(), output_type="np", **call).frames  # [1, F, H, W, 3] in [0, 1]
        latents = pipe(latents=init.clone(), output_type="latent", **call).frames
        pe, ne = pipe.encode_prompt(PROMPT, NEGATIVE, do_classifier_free_guidance=True, max_sequence_length=TEXT_LEN)
    video = torch.from_numpy(np.asarray(video, dtype=np.float32))
    frames = (video.permute(0, 4, 1, 2, 3) * 2.0 - 1.0).contiguous()
    assert frames.shape == (1, 3, FRAMES, HEIGHT, WIDTH), frames.shape
    # The picture must depend on the prompt: a pixel range that is not all clamped.
    inside = float(((video > 0.01) & (video < 0.99)).float().mean())
    print(f"{NAME}: frames {tuple(frames.shape)}, {inside:.3f} of the values inside (0, 1)")
    assert inside > 0.3, "the decoded frames are mostly clamped"
    ids = tok([PROMPT, NEGATIVE], padding="max_length", max_length=TEXT_LEN, truncation=True, add_special_tokens=True)
    save_file({"init_latents": init.contiguous(), "frames": frames, "latents": latents.contiguous(),
               "prompt_embeds": pe.contiguous(), "negative_prompt_embeds": ne.contiguous()},
              os.path.join(out, "golden.safetensors"))
    meta = dict(prompt=PROMPT, negative_prompt=NEGATIVE, frames=FRAMES, height=HEIGHT, width=WIDTH, text_len=TEXT_LEN,
                steps=STEPS, guidance=GUIDANCE, shift=SHIFT, sampler="unipc", fps=16, seed=SEED,
                input_ids=ids["input_ids"], attention_mask=ids["attention_mask"],
                versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                              diffusers=diffusers.__version__, numpy=np.__version__))
    finish_pipeline_folder(out, NAME, meta, MAX_FOLDER_BYTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
