#!/usr/bin/env python3
"""Makes tests/data/qwen_pipeline_tiny/: a whole tiny Qwen-Image text-to-image pipeline directory
and what diffusers' QwenImagePipeline makes of a prompt with it.

  model_index.json, scheduler/, transformer/, text_encoder/, vae/
      QwenImagePipeline.save_pretrained of components whose sizes fit each other: qwen_tiny's
      QwenImageTransformer2DModel (in_channels 16 = 4 latent channels x 2x2 packing) with
      joint_attention_dim 48, the text encoder's width, make_goldens_declm.py's tiny
      Qwen2_5_VLForConditionalGeneration (the tokenizer's vocabulary size), a tiny
      AutoencoderKLQwenImage (z_dim 4; the Wan2.1 VAE's layout, vae_scale_factor 8), Qwen-Image's
      FlowMatchEulerDiscreteScheduler config
  tokenizer/            tok_qwen2_tiny's files (the tokenizer goldens' Qwen2Tokenizer with the
                        template's special tokens)
  golden.safetensors    init_latents (packed, passed as latents=); latents: the final latents
                        (output_type "latent") with the negative prompt and true_cfg_scale;
                        frames [1, 3, H, W]: the VAE's decode of them as the pipeline decodes
                        (unpacked, de-normalized, frame 0), the float image in [-1, 1];
                        prompt_embeds, prompt_embeds_mask (encode_prompt's: the prompt's rows
                        alone, unpadded; ditrun pads them to max_sequence_length with zero rows
                        masked out) for diagnosis
  meta.json             the call's arguments and the versions

Not a test dependency (CI reads the committed outputs). Run with torch, transformers and the
pinned diffusers:
  PYTHONPATH=/opt/tpy:/tmp/pb:.ref/src python3 tests/data/make_goldens_qwen_pipeline.py
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
from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline, QwenImageTransformer2DModel
from transformers import AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_goldens import QWEN_IMAGE_SCHEDULER, finish_pipeline_folder, fresh_dir, redraw_parameters  # noqa: E402
from make_goldens_declm import QWEN_TEXT, QWEN_VISION  # noqa: E402
from make_goldens_declm import redraw_parameters as redraw_lm  # noqa: E402
from make_goldens_qwen import TINY as QWEN_TINY  # noqa: E402
from make_goldens_wan_vae import redraw_parameters as redraw_vae  # noqa: E402

NAME = "qwen_pipeline_tiny"
MAX_FOLDER_BYTES = 1_200_000
SEED = 5309
HEIGHT, WIDTH = 64, 48
TEXT_LEN = 96  # max_sequence_length: the rows after the template's first 34 tokens (the tiny tokenizer makes the template 104 tokens)
STEPS, TRUE_CFG = 3, 4.0
PROMPT = "A lighthouse on a cliff, 1920s poster"
NEGATIVE = "blurry"
Z = QWEN_TINY["in_channels"] // 4
VAE = dict(base_dim=4, z_dim=Z, dim_mult=[1, 2, 2, 2], num_res_blocks=1, attn_scales=[], temperal_downsample=[False, True, True],
           dropout=0.0, latents_mean=[0.3, -0.2, 0.1, -0.4][:Z], latents_std=[1.5, 0.8, 2.1, 1.2][:Z])


def main():
    out = fresh_dir(NAME)
    tok_src = os.path.join(HERE, "tok_qwen2_tiny")
    tok = AutoTokenizer.from_pretrained(tok_src)
    torch.manual_seed(SEED)
    te = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=dict(QWEN_TEXT, vocab_size=len(tok)),
                                                             vision_config=QWEN_VISION)).eval()
    redraw_lm(te, torch.Generator().manual_seed(SEED + 1))
    tr = QwenImageTransformer2DModel(**dict(QWEN_TINY, joint_attention_dim=QWEN_TEXT["hidden_size"])).eval()
    redraw_parameters(tr, torch.Generator().manual_seed(SEED + 2))
    vae = AutoencoderKLQwenImage(**VAE).eval()
    redraw_vae(vae, torch.Generator().manual_seed(SEED + 3))
    pipe = QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(**QWEN_IMAGE_SCHEDULER), vae=vae, text_encoder=te, tokenizer=tok,
                             transformer=tr)
    pipe.save_pretrained(out, safe_serialization=True)
    shutil.rmtree(os.path.join(out, "tokenizer"))
    shutil.copytree(tok_src, os.path.join(out, "tokenizer"))

    pipe = QwenImagePipeline.from_pretrained(out)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor == 8
    h, w = HEIGHT // 8, WIDTH // 8
    init = torch.randn((1, (h // 2) * (w // 2), QWEN_TINY["in_channels"]), generator=torch.Generator().manual_seed(SEED + 4))
    call = dict(prompt=PROMPT, negative_prompt=NEGATIVE, true_cfg_scale=TRUE_CFG, height=HEIGHT, width=WIDTH,
                num_inference_steps=STEPS, max_sequence_length=TEXT_LEN)
    with torch.no_grad():
        latents = pipe(latents=init.clone(), output_type="latent", **call).images
        image = pipe(latents=init.clone(), output_type="pt", **call).images  # [1, 3, H, W] in [0, 1]
        pe, pm = pipe.encode_prompt(PROMPT, max_sequence_length=TEXT_LEN)
        pm = torch.ones(pe.shape[:2]) if pm is None else pm  # one prompt: no padding, the pipeline's mask None
        x = pipe._unpack_latents(latents, HEIGHT, WIDTH, pipe.vae_scale_factor)
        mean = torch.tensor(VAE["latents_mean"]).view(1, Z, 1, 1, 1)
        inv_std = 1.0 / torch.tensor(VAE["latents_std"]).view(1, Z, 1, 1, 1)
        sample = pipe.vae.decode(x / inv_std + mean, return_dict=False)[0][:, :, 0]
    assert sample.shape == (1, 3, HEIGHT, WIDTH), sample.shape
    assert torch.allclose(image, (sample / 2 + 0.5).clamp(0, 1), atol=1e-6), "the pipeline decodes otherwise"
    inside = float(((image > 0.01) & (image < 0.99)).float().mean())
    print(f"{NAME}: sample {tuple(sample.shape)}, {inside:.3f} of the values inside (0, 1); prompt rows {int(pm.sum())} of {pm.shape[1]}")
    assert inside > 0.3, "the decoded image is mostly clamped"
    assert pe.shape[1] < TEXT_LEN, "the prompt fills max_sequence_length: the padded rows ditrun adds are not tested"
    save_file({"init_latents": init.contiguous(), "latents": latents.contiguous(), "frames": sample.contiguous(),
               "prompt_embeds": pe.contiguous(), "prompt_embeds_mask": pm.float().contiguous()},
              os.path.join(out, "golden.safetensors"))
    meta = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, text_len=TEXT_LEN, steps=STEPS,
                true_cfg=TRUE_CFG, seed=SEED,
                versions=dict(torch=torch.__version__, transformers=transformers.__version__, diffusers=diffusers.__version__,
                              numpy=np.__version__))
    finish_pipeline_folder(out, NAME, meta, MAX_FOLDER_BYTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
