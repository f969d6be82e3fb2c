#!/usr/bin/env python3
"""Makes tests/data/flux_pipeline_tiny/: a whole tiny FLUX.1-dev text-to-image pipeline directory
and what diffusers' FluxPipeline makes of a prompt with it.

  model_index.json, scheduler/, transformer/, text_encoder/, text_encoder_2/, vae/
      FluxPipeline.save_pretrained of components whose sizes fit each other: the tiny
      FluxTransformer2DModel of flux_dev_tiny (guidance-distilled; in_channels 16 = 4 latent
      channels x 2x2 packing; joint_attention_dim 32 = the T5 width, pooled_projection_dim 24 =
      the CLIP width) with one single-stream block; a tiny CLIPTextModel (clip_tiny's
      configuration, 77 positions, one layer of width 24); a tiny T5EncoderModel (t5_tiny's
      configuration, two layers, the tokenizer's vocabulary size); a tiny AutoencoderKL
      (flux_vae_tiny's with 4 latent channels, widths [8, 8, 8, 8], one resnet per level: four
      levels, vae_scale_factor 8); FLUX.1-dev's FlowMatchEulerDiscreteScheduler config. Narrower
      than each stage's own golden so the folder stays under 1 MB beside the two tokenizers
  tokenizer/, tokenizer_2/   tok_clip_tiny's and tok_t5_tiny's files (the tokenizer goldens')
  golden.safetensors  init_latents [1, 16, 16] (packed, passed as latents=); latents: the final
                      latents (output_type "latent"); frames [1, 3, 64, 64]: vae.decode's sample of
                      them as FluxPipeline decodes (unpacked, / scaling_factor + shift_factor),
                      the float image in [-1, 1] before the image processor (named as ditrun
                      writes the decoded image); latents_true_cfg: the
                      final latents with negative_prompt and true_cfg_scale 2; prompt_embeds,
                      pooled_prompt_embeds (encode_prompt's) for diagnosis
  meta.json           the call's arguments, the token ids and the versions

Not a test dependency (CI reads the committed outputs). Run with torch, transformers (and
protobuf for its SentencePiece conversion) and the pinned diffusers:
  PYTHONPATH=/opt/tpy:/tmp/pb:.ref/src python3 tests/data/make_goldens_flux_pipeline.py
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
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
from transformers import AutoTokenizer, CLIPTextConfig, CLIPTextModel, CLIPTokenizer, T5Config, T5EncoderModel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_goldens import FLUX_DEV_SCHEDULER, finish_pipeline_folder, fresh_dir, redraw_parameters  # noqa: E402
from make_goldens_clip import TINY as CLIP_TINY  # noqa: E402
from make_goldens_clip import redraw_parameters as redraw_clip  # noqa: E402
from make_goldens_flux import TINY as FLUX_TINY  # noqa: E402
from make_goldens_flux_vae import TINY as VAE_TINY  # noqa: E402
from make_goldens_flux_vae import pipeline_decode  # noqa: E402
from make_goldens_flux_vae import redraw_parameters as redraw_vae  # noqa: E402
from make_goldens_t5 import TINY as T5_TINY  # noqa: E402
from make_goldens_umt5 import redraw_parameters as redraw_t5  # noqa: E402

NAME = "flux_pipeline_tiny"
MAX_FOLDER_BYTES = 1_000_000
SEED = 8101
HEIGHT = WIDTH = 64
TEXT_LEN = 16  # max_sequence_length: the T5 length (CLIP's is its tokenizer's 77)
STEPS, GUIDANCE, TRUE_CFG = 3, 3.5, 2.0
# Narrower than their own goldens' models (those check each stage, these the pipeline around them).
CLIP_SMALLER = dict(hidden_size=24, intermediate_size=48, num_attention_heads=4, num_hidden_layers=1)
VAE_SMALLER = dict(block_out_channels=[8, 8, 8, 8], layers_per_block=1)
PROMPT = "A red fox runs through snow at dawn"
NEGATIVE = "blurry"


def main():
    out = fresh_dir(NAME)
    tok_src, tok2_src = os.path.join(HERE, "tok_clip_tiny"), os.path.join(HERE, "tok_t5_tiny")
    tok = CLIPTokenizer.from_pretrained(tok_src)
    tok2 = AutoTokenizer.from_pretrained(tok2_src)
    torch.manual_seed(SEED)
    te = CLIPTextModel(CLIPTextConfig(**dict(CLIP_TINY, **CLIP_SMALLER))).eval()
    redraw_clip(te, torch.Generator().manual_seed(SEED + 1))
    te2 = T5EncoderModel(T5Config(**dict(T5_TINY, vocab_size=len(tok2), num_layers=2))).eval()
    redraw_t5(te2, torch.Generator().manual_seed(SEED + 2))
    assert FLUX_TINY["pooled_projection_dim"] == CLIP_SMALLER["hidden_size"] and FLUX_TINY["joint_attention_dim"] == T5_TINY["d_model"]
    tr = FluxTransformer2DModel(**dict(FLUX_TINY, num_single_layers=1), guidance_embeds=True).eval()
    redraw_parameters(tr, torch.Generator().manual_seed(SEED + 3))
    vae = AutoencoderKL(**dict(VAE_TINY, latent_channels=FLUX_TINY["in_channels"] // 4, **VAE_SMALLER)).eval()
    redraw_vae(vae, torch.Generator().manual_seed(SEED + 4))
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**FLUX_DEV_SCHEDULER), vae=vae, text_encoder=te,
                        tokenizer=tok, text_encoder_2=te2, tokenizer_2=tok2, transformer=tr)
    pipe.save_pretrained(out, safe_serialization=True)
    # The tokenizer folders are the tokenizer goldens' own files, whatever save_pretrained wrote.
    for name, src in (("tokenizer", tok_src), ("tokenizer_2", tok2_src)):
        shutil.rmtree(os.path.join(out, name))
        shutil.copytree(src, os.path.join(out, name))

    # Everything below runs on the folder as diffusers reads it back.
    pipe = FluxPipeline.from_pretrained(out)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor == 8 and pipe.tokenizer_max_length == 77
    h, w = HEIGHT // 8, WIDTH // 8
    init = torch.randn((1, (h // 2) * (w // 2), FLUX_TINY["in_channels"]), generator=torch.Generator().manual_seed(SEED + 5))
    call = dict(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                max_sequence_length=TEXT_LEN)
    with torch.no_grad():
        latents = pipe(latents=init.clone(), output_type="latent", **call).images
        image = pipe(latents=init.clone(), output_type="pt", **call).images  # [1, 3, H, W] in [0, 1]
        cfg = pipe(latents=init.clone(), output_type="latent", negative_prompt=NEGATIVE, true_cfg_scale=TRUE_CFG, **call).images
        pe, ppe, _ = pipe.encode_prompt(PROMPT, None, max_sequence_length=TEXT_LEN)
    sample = pipeline_decode(pipe.vae, latents, HEIGHT, WIDTH)
    assert sample.shape == (1, 3, HEIGHT, WIDTH), sample.shape
    # The sample is what the image processor turned into the picture.
    assert torch.allclose(image, (sample / 2 + 0.5).clamp(0, 1), atol=1e-6)
    inside = float(((image > 0.01) & (image < 0.99)).float().mean())
    moved = float((cfg - latents).norm() / latents.norm())
    print(f"{NAME}: sample {tuple(sample.shape)}, {inside:.3f} of the values inside (0, 1); true CFG moves the latents {moved:.4f}")
    assert inside > 0.3, "the decoded image is mostly clamped"
    assert moved > 0.02, "the negative prompt does not move the latents"
    ids = tok([PROMPT], padding="max_length", max_length=77, truncation=True).input_ids
    ids2 = tok2([PROMPT], padding="max_length", max_length=TEXT_LEN, truncation=True).input_ids
    save_file({"init_latents": init.contiguous(), "latents": latents.contiguous(), "frames": sample.contiguous(),
               "latents_true_cfg": cfg.contiguous(), "prompt_embeds": pe.contiguous(),
               "pooled_prompt_embeds": ppe.contiguous()}, os.path.join(out, "golden.safetensors"))
    meta = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, text_len=TEXT_LEN, steps=STEPS,
                guidance=GUIDANCE, true_cfg=TRUE_CFG, seed=SEED, clip_input_ids=ids, t5_input_ids=ids2,
                versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                              diffusers=diffusers.__version__, numpy=np.__version__))
    finish_pipeline_folder(out, NAME, meta, MAX_FOLDER_BYTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
