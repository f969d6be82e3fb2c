#!/usr/bin/env python3
"""Makes tests/data/hunyuan_pipeline_tiny/: a tiny HunyuanVideo pipeline directory with its two text
encoders and its VAE, and the latents and frames diffusers' HunyuanVideoPipeline makes of a prompt
with it.

  model_index.json, scheduler/, transformer/, text_encoder/, text_encoder_2/, vae/
      HunyuanVideoPipeline.save_pretrained of components whose sizes fit each other: hunyuan_video_
      tiny's HunyuanVideoTransformer3DModel (text_embed_dim 24 = the Llama's width,
      pooled_projection_dim 20 = CLIP's), a tiny LlamaModel (make_goldens_declm.py's layout at width
      24; the pipeline takes hidden_states[-3]), a tiny CLIPTextModel (clip_tiny's, width 20, one
      layer), HunyuanVideo's scheduler, a tiny AutoencoderKLHunyuanVideo (make_goldens_hunyuan_vae.py's
      structure at width 4, its latent channels the transformer's; its decoder's tensors
      alone are kept, the encoder's left out to keep the folder small)
  tokenizer/, tokenizer_2/   tok_llama3_tiny's and tok_clip_tiny's files (the tokenizer goldens')
  golden.safetensors  init_latents (passed as latents=); latents: the final latents
                      (output_type "latent"); prompt_embeds, prompt_attention_mask,
                      pooled_prompt_embeds (encode_prompt's) for diagnosis; frames: the pipeline's
                      video (output_type "pt": vae.decode of latents / scaling_factor with the VAE's
                      default framewise decoding, 17 frames being five latent frames, more than
                      its four: windows of five latent frames at 0 and of two at 3, blended; then
                      the video processor's postprocess to [0, 1]) [1, F, 3, H, W]
  meta.json           the call's arguments and the versions

Not a test dependency (CI reads the committed outputs). Run with torch, transformers and the
pinned diffusers:
  PYTHONPATH=/opt/tpy:/tmp/pb:.ref/src python3 tests/data/make_goldens_hunyuan_pipeline.py
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
from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline, HunyuanVideoTransformer3DModel
from transformers import AutoTokenizer, CLIPTextConfig, CLIPTextModel, CLIPTokenizer, LlamaConfig, LlamaModel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_goldens import finish_pipeline_folder, fresh_dir, redraw_parameters  # noqa: E402
from make_goldens_clip import TINY as CLIP_TINY  # noqa: E402
from make_goldens_clip import redraw_parameters as redraw_clip  # noqa: E402
from make_goldens_declm import LLAMA  # noqa: E402
from make_goldens_declm import redraw_parameters as redraw_lm  # noqa: E402
from make_goldens_hunyuan import SCHEDULER, TINY  # noqa: E402
from make_goldens_hunyuan_vae import TINY as VAE_TINY  # noqa: E402
from make_goldens_hunyuan_vae import load_decoder, make_vae, pipeline_decode, save_decoder, scale_conv_out  # noqa: E402

NAME = "hunyuan_pipeline_tiny"
MAX_FOLDER_BYTES = 700_000
VAE = dict(VAE_TINY, block_out_channels=[4, 4, 4, 4], norm_num_groups=2, latent_channels=TINY["in_channels"])
SEED = 6607
FRAMES, HEIGHT, WIDTH = 17, 16, 16  # five latent frames (framewise decoding), one token a frame: the folder stays small
TEXT_LEN = 256  # max_sequence_length, the pipeline's default (the tiny tokenizer makes the template far longer than its 95 cropped tokens)
STEPS, GUIDANCE = 3, 6.0
PROMPT = "A kite rises over a windy beach"


def main():
    out = fresh_dir(NAME)
    tok_src, tok2_src = os.path.join(HERE, "tok_llama3_tiny"), os.path.join(HERE, "tok_clip_tiny")
    tok, tok2 = AutoTokenizer.from_pretrained(tok_src), CLIPTokenizer.from_pretrained(tok2_src)
    torch.manual_seed(SEED)
    te = LlamaModel(LlamaConfig(**dict(LLAMA, hidden_size=TINY["text_embed_dim"], vocab_size=len(tok)))).eval()
    redraw_lm(te, torch.Generator().manual_seed(SEED + 1))
    te2 = CLIPTextModel(CLIPTextConfig(**dict(CLIP_TINY, hidden_size=TINY["pooled_projection_dim"], intermediate_size=40,
                                              num_attention_heads=2, num_hidden_layers=1, max_position_embeddings=77))).eval()
    redraw_clip(te2, torch.Generator().manual_seed(SEED + 2))
    tr = HunyuanVideoTransformer3DModel(**TINY).eval()
    redraw_parameters(tr, torch.Generator().manual_seed(SEED + 3))
    vae, _ = make_vae(SEED + 5, VAE)
    pipe = HunyuanVideoPipeline(text_encoder=te, tokenizer=tok, transformer=tr, vae=vae,
                                scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), text_encoder_2=te2, tokenizer_2=tok2)
    pipe.set_progress_bar_config(disable=True)
    f, h, w = (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8
    init = torch.randn((1, TINY["in_channels"], f, h, w), generator=torch.Generator().manual_seed(SEED + 4))
    call = dict(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                max_sequence_length=TEXT_LEN)
    # conv_out scaled so the video's decode lies mostly inside [-1, 1] (the processor's clamp then rarely bites).
    with torch.no_grad():
        probe = pipe(latents=init.clone(), output_type="latent", **call).frames
    gain = scale_conv_out(vae, probe / vae.config.scaling_factor)
    pipe.save_pretrained(out, safe_serialization=True)
    save_decoder(vae, os.path.join(out, "vae"))  # the decoder's tensors alone
    for name, src in (("tokenizer", tok_src), ("tokenizer_2", tok2_src)):
        shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        shutil.copytree(src, os.path.join(out, name))

    pipe = HunyuanVideoPipeline.from_pretrained(out, vae=load_decoder(os.path.join(out, "vae")))
    pipe.vae.use_framewise_decoding = True  # AutoencoderKLHunyuanVideo's default, as the pipeline loads it
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        latents = pipe(latents=init.clone(), output_type="latent", **call).frames
        frames = pipe(latents=init.clone(), output_type="pt", **call).frames
        pe, ppe, pm = pipe.encode_prompt(PROMPT, max_sequence_length=TEXT_LEN)
    assert torch.equal(latents, probe), "the saved pipeline's latents differ"
    assert frames.shape == (1, FRAMES, 3, HEIGHT, WIDTH), frames.shape
    # The windows change the decode (the whole video's in one graph differs): the golden tests them.
    assert not torch.allclose(pipeline_decode(pipe.vae, latents, framewise=True), pipeline_decode(pipe.vae, latents), atol=1e-3)
    valid = int(pm.sum())
    print(f"{NAME}: latents {tuple(latents.shape)}; prompt rows {valid} of {pm.shape[1]}")
    assert 0 < valid < TEXT_LEN, "the prompt must leave padded rows in max_sequence_length (the masked padding is tested)"
    save_file({"init_latents": init.contiguous(), "latents": latents.contiguous(), "frames": frames.float().contiguous(),
               "prompt_embeds": pe.contiguous(),
               "prompt_attention_mask": pm.float().contiguous(), "pooled_prompt_embeds": ppe.contiguous()},
              os.path.join(out, "golden.safetensors"))
    meta = dict(prompt=PROMPT, frames=FRAMES, height=HEIGHT, width=WIDTH, text_len=TEXT_LEN, steps=STEPS, guidance=GUIDANCE,
                seed=SEED, vae=VAE, conv_out_gain=gain, versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                                         diffusers=diffusers.__version__, numpy=np.__version__))
    finish_pipeline_folder(out, NAME, meta, MAX_FOLDER_BYTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
