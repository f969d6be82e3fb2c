/* Model frontends: read a diffusers model directory (config.json + safetensors) or pipeline
 * directory (model_index.json), validate it, and build the DiT graph for one shape. One
 * frontend per family (compiler/frontends/<family>.c, built from the shared blocks of
 * compiler/frontends/blocks.h); `_class_name` picks it. */
#ifndef DIT_COMPILER_FRONTEND_H
#define DIT_COMPILER_FRONTEND_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "artifacts/manifest.h"
#include "artifacts/safetensors.h"
#include "base/dtype.h"
#include "base/status.h"
#include "compiler/sparse_attn.h"
#include "ir/graph.h"

/* What the user asked for, in pixel units. */
typedef struct dit_shape_request {
  int64_t batch;
  int64_t frames, height, width; /* pixels */
  int64_t text_len;
  int64_t image_len;             /* image tokens of an image-conditioned model; 0: 257, as CLIP gives */
  dit_dtype_t dtype;             /* compute/storage policy: f32 or bf16 */
  int tp, tp_rank;               /* tensor-parallel degree (0 or 1: none) and this graph's rank */
  int cp, cp_rank;               /* context-parallel degree (0 or 1: none) and this graph's rank */
  int cp_mode;                   /* DIT_CP_* when cp > 1 */
  int ulysses;                   /* DIT_CP_USP: the Ulysses degree U (ring degree cp / U) */
  int sp;                        /* sequence parallelism inside the tensor-parallel group */
  /* Attention-state reuse (--reuse ditango, DIT_CP_RING or DIT_CP_USP): G ring members (ranks under
   * ring, each of the cp / U ring positions under usp) per reuse group (0: none), the
   * state cache's copies (2 when both guidance branches run through one plan, else 1), and k: the
   * adjacent remote groups that share one cached state (0 or 1: one state per group). */
  int reuse_group, reuse_copies, reuse_merge;
  dit_sparse_attn_t sparse;      /* the video self-attention's sparse pattern (pattern 0: dense) */
  /* A video decoder's chunked form (0: one graph over the whole video): the graph decodes
   * vae_chunk latent frames, each causal convolution reading the last frames of its input from the
   * previous chunk (inputs cache.NAME, outputs cache.NAME.next); vae_first: the graph of latent
   * frame 0 alone, which diffusers decodes as a chunk of its own. An encoder's chunk: the video
   * frames of vae_chunk latent frames (vae_first: frame 0). */
  int64_t vae_chunk;
  int vae_first;
  /* A decoder split for spatial tiles (DIT_VAE_WHOLE: not split). The head (DIT_VAE_HEAD) runs
   * the part whose receptive field is the whole frame (up to the mid block's attention and the
   * up blocks at latent resolution) over full frames, one latent frame per forward; the tail
   * (DIT_VAE_TAIL) runs the rest over one of vae_tiles overlapping windows of the head's output
   * width, each window wide enough that its core is exact (see dit_vae_tile_span). The encoder
   * (DIT_VAE_ENCODER) is the VAE's other half: a video to its normalized latents (image-to-video's
   * conditioning), one graph over the whole video. */
  int vae_part;
  int64_t vae_tiles;
} dit_shape_request_t;

enum { DIT_VAE_WHOLE = 0, DIT_VAE_HEAD = 1, DIT_VAE_TAIL = 2, DIT_VAE_ENCODER = 3 };

enum { DIT_CP_NONE = 0, DIT_CP_GATHER = 1, DIT_CP_ULYSSES = 2, DIT_CP_RING = 3, DIT_CP_USP = 4 };

/* What a pipeline's model_index.json says this build reads. */
typedef struct dit_pipeline_index {
  char class_name[64];          /* "WanPipeline", "WanImageToVideoPipeline"; "" when not a pipeline */
  char transformer_class[64];   /* the `transformer` entry's class */
  char transformer_2_class[64]; /* the `transformer_2` entry's class; "" when [null, null] or absent */
  char scheduler_class[64];     /* the `scheduler` entry's class; "" if none is listed */
  int has_boundary_ratio;       /* 1 when boundary_ratio is a number (only with transformer_2) */
  double boundary_ratio;        /* in (0, 1]: transformer/ runs timesteps >= ratio * num_train_timesteps */
  int expand_timesteps;         /* Wan2.2 TI2V: per-token timesteps; false unless set */
} dit_pipeline_index_t;

/* The sampler defaults of a pipeline's scheduler/scheduler_config.json, with diffusers'
 * defaults for fields it leaves out. */
typedef struct dit_scheduler_defaults {
  int present;                 /* 0: no scheduler config was read; the rest is unset */
  char class_name[64];         /* "UniPCMultistepScheduler", "FlowMatchEulerDiscreteScheduler", ... */
  int64_t num_train_timesteps; /* 1000 unless set */
  double shift;                /* the flow shift: "flow_shift" (UniPC, ...) or "shift" (FlowMatch*) */
  int use_flow_sigmas;         /* always 1 for FlowMatch* schedulers */
  char prediction_type[32];    /* "flow_prediction", "epsilon", "v_prediction" or "sample" */
  /* FlowMatch* schedulers only (diffusers' defaults otherwise): resolution-dependent shifting,
   * mu = calculate_shift(image tokens, base/max_image_seq_len, base/max_shift), replacing shift. */
  int use_dynamic_shifting;    /* false */
  double base_shift, max_shift; /* 0.5, 1.15 */
  int64_t base_image_seq_len, max_image_seq_len; /* 256, 4096 */
  char time_shift_type[16];    /* "exponential" (default) or "linear" */
  double shift_terminal;       /* 0 when null (default): no stretch; else in (0, 1) */
  int invert_sigmas;           /* false */
} dit_scheduler_defaults_t;

/* The VAE's compression, which maps pixels to latents. */
typedef struct dit_vae_factors {
  int spatial, temporal;
  int64_t z_dim;   /* latent channels; 0 when no VAE config was read */
  char source[32]; /* "vae/config.json" or "variant" (the variant's table) */
} dit_vae_factors_t;

/* WanTransformer3DModel's config, typed. The optional fields are 0 when null. */
typedef struct dit_wan_config {
  int64_t patch[3], heads, head_dim, in_channels, out_channels, text_dim, freq_dim, ffn_dim,
      layers, rope_max_seq_len;
  int64_t image_dim, added_kv_proj_dim, pos_embed_seq_len; /* Wan2.1 I2V / FLF2V; 0: null */
  int cross_attn_norm;
  double eps;
} dit_wan_config_t;

/* FluxTransformer2DModel's config, typed. */
typedef struct dit_flux_config {
  int64_t patch, in_channels, out_channels, layers, single_layers, heads, head_dim, joint_dim, pooled_dim;
  int64_t axes[3]; /* axes_dims_rope: the rotary pairs' split over (text/image index, row, column) */
  int guidance_embeds;
} dit_flux_config_t;

/* HunyuanVideoTransformer3DModel's config, typed. */
typedef struct dit_hunyuan_config {
  int64_t in_channels, out_channels, heads, head_dim, layers, single_layers, refiner_layers, patch, patch_t, text_dim,
      pooled_dim;
  int64_t mlp_dim;  /* int(D * mlp_ratio): the feed-forwards' and single blocks' MLP width */
  int64_t axes[3];  /* rope_axes_dim: the rotary pairs' split over (frame, row, column) */
  double rope_theta;
  int guidance_embeds;
} dit_hunyuan_config_t;
/* QwenImageTransformer2DModel's config, typed. */
typedef struct dit_qwen_config {
  int64_t patch, in_channels, out_channels, layers, heads, head_dim, joint_dim;
  int64_t axes[3]; /* axes_dims_rope: the rotary pairs' split over (frame, row, column) */
} dit_qwen_config_t;

/* UMT5EncoderModel's and T5EncoderModel's config (transformers' UMT5Config, T5Config), typed:
 * the encoder's fields. */
typedef struct dit_umt5_config {
  int64_t vocab, d_model, d_kv, d_ff, layers, heads, buckets, max_distance;
  double eps;
  int shared_bias; /* T5: layer 0's relative_attention_bias table is every layer's bias */
} dit_umt5_config_t;
/* CLIPTextModel's and CLIPVisionModel's configs (transformers' CLIPTextConfig, CLIPVisionConfig),
 * typed: the encoder's fields, then each model's own. */
typedef struct dit_clip_config {
  int64_t hidden, intermediate, layers, heads, positions; /* positions: the vision model's 1 + patches */
  double eps;
  int act;     /* the MLP's activation op (dit_op_kind_t): quick_gelu or gelu */
  int64_t vocab;
  int64_t eos; /* the pooled token: -1, the first position of the largest id (eos_token_id 2), else this id's */
  int64_t channels, image, patch; /* the vision model: num_channels, image_size, patch_size */
} dit_clip_config_t;
/* A decoder-only language model's config as a pipeline's text encoder runs it (transformers'
 * Qwen2.5-VL text config, LlamaConfig), typed, with the hidden state the pipeline takes. */
typedef struct dit_decoder_lm_config {
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  double eps, rope_theta;
  int qkv_bias, o_bias;  /* q/k/v projections' biases (Qwen2; Llama's attention_bias), o_proj's (Llama's) */
  int64_t run_layers;    /* the selected hidden state is the output of the first run_layers layers */
  int final_norm;        /* ... after the final norm (hidden_states[-1]) */
} dit_decoder_lm_config_t;
/* AutoencoderKL's config as its decoder stage reads it (FLUX.1's VAE), typed. */
#define DIT_KL_VAE_LEVELS 4
typedef struct dit_kl_vae_config {
  int64_t latent_channels, out_channels, layers_per_block, groups;
  int64_t widths[DIT_KL_VAE_LEVELS]; /* block_out_channels, the encoder's order (the decoder's reversed) */
  int64_t spatial;                    /* pixels per latent pixel: 2^(levels - 1) */
  double scaling_factor, shift_factor;
  /* AutoencoderKLHunyuanVideo (causal): causal convolutions, a frame-causal mid-block attention,
   * up block i upsampling by up_t[i] in time and up_s[i] in space (1 or 2 each); temporal frames
   * per latent frame after the first. */
  int causal;
  int up_t[DIT_KL_VAE_LEVELS], up_s[DIT_KL_VAE_LEVELS];
  int64_t temporal;
} dit_kl_vae_config_t;
/* AutoencoderKLWan's config as its decoder stage reads it (the Wan2.1 and Wan2.2 VAEs), typed; also
 * AutoencoderKLQwenImage's (the Wan2.1 VAE's structure, decoding images). */
#define DIT_WAN_VAE_MAX_Z 64
typedef struct dit_wan_vae_config {
  int64_t dim;                /* the decoder's base width: decoder_base_dim, else base_dim */
  int64_t z_dim, dim_mult[4], num_res_blocks;
  int64_t in_channels, out_channels; /* the encoder's input, the decoder's output (QwenImage: input_channels, both) */
  int image;                  /* AutoencoderKLQwenImage: an image decoder fed the transformer's packed latents */
  int temporal_up[3];         /* the decoder's up blocks that double frames: temperal_downsample reversed */
  int residual;               /* is_residual: residual up blocks with a duplicating shortcut (Wan2.2) */
  int64_t patch;              /* patch_size: the decoder's pixels unpatchified patch x patch (1: none) */
  int64_t spatial, temporal;  /* pixels per latent pixel (8 * patch) and latent frame (4 after the first) */
  double latents_mean[DIT_WAN_VAE_MAX_Z], latents_std[DIT_WAN_VAE_MAX_Z];
} dit_wan_vae_config_t;

/* A family's frontend (compiler/frontends/family.h). */
typedef struct dit_family dit_family_t;

/* One transformer of a pipeline. */
typedef struct dit_expert {
  char dir[4096];             /* the folder of its config.json and weights */
  cJSON *config;              /* normalized config */
  dit_wan_config_t wan;
  dit_safetensors_t *weights; /* validated against the config */
} dit_expert_t;

/* A model as a pipeline runs it: the transformers it switches between, the VAE factors and
 * the sampler defaults. A bare transformer directory reads as a one-expert pipeline with an
 * empty class name. */
typedef struct dit_pipeline {
  char dir[4096];              /* the pipeline directory; "" for a bare transformer directory */
  dit_pipeline_index_t index;  /* class, boundary_ratio, expand_timesteps; zeroed without model_index.json */
  int n_experts;               /* 1, or 2 with transformer_2 */
  /* [0] is transformer/ (high noise), its config, wan and weights the model's own (m->config,
   * m->wan, m->weights; owned once, by the model); [1] is transformer_2/ (low noise), owned here. */
  dit_expert_t experts[2];
  dit_vae_factors_t vae;
  dit_scheduler_defaults_t scheduler; /* present only for a pipeline with a scheduler config */
} dit_pipeline_t;

typedef struct dit_model {
  const dit_family_t *fam;
  char family[32];       /* "wan", "flux", "hunyuan_video", "qwen" */
  char model_class[64];  /* config _class_name */
  char variant[32];      /* e.g. "wan2.1"; decides VAE factors without a vae/config.json */
  int vae_temporal, vae_spatial; /* = pipeline.vae's */
  cJSON *config;         /* normalized config: every field the frontend reads, defaults filled */
  dit_safetensors_t *weights;
  char model_dir[4096];  /* the folder of config.json and the weights (a pipeline's transformer/) */
  dit_pipeline_t pipeline;
  /* Family-specific parsed config: the one of fam. */
  dit_wan_config_t wan;
  dit_flux_config_t flux;
  dit_hunyuan_config_t hunyuan;
  dit_qwen_config_t qwen;
  dit_umt5_config_t umt5;
  dit_clip_config_t clip;
  dit_decoder_lm_config_t decoder_lm;
  dit_wan_vae_config_t wan_vae;
  dit_kl_vae_config_t kl_vae;
} dit_model_t;

/* The latent shape a request maps to, [C, f, h, w] before patching. */
typedef struct dit_latent_shape {
  int64_t channels, frames, height, width;
  int64_t tokens;    /* image (patch) tokens of one sample */
  int64_t image_len; /* image tokens (encoder_hidden_states_image); 0 for a model without them */
  /* A decoder tail's windows (DIT_VAE_TAIL; count 0 otherwise): how many, the full width they
   * cover and the halo each side (in the tail's input pixels; width above is one window's). */
  int64_t tile_count, tile_full, tile_halo;
} dit_latent_shape_t;

/* Loads config.json and the checkpoint of model_dir and validates both against the family's
 * definition (unsupported options refused naming the field; every expected tensor present
 * with its shape; no unexpected tensors). A directory with model_index.json and no
 * config.json is a diffusers pipeline: its transformer/ folder is loaded, and transformer_2/
 * when listed (both configs must agree on everything but the weights); its
 * scheduler/scheduler_config.json and vae/config.json, if present, are read into
 * m->pipeline. variant may be NULL (chosen from the pipeline's expand_timesteps, else from the
 * config). Caller owns *out. */
dit_status_t dit_model_load(const char *model_dir, const char *variant, dit_model_t **out);
void dit_model_free(dit_model_t *m);

/* Refuses (naming the file and field) what the frontend reads but the graph and runtime
 * cannot run yet: two experts without a boundary_ratio, first-last-frame image tokens
 * (pos_embed_seq_len), and image conditioning outside Wan2.1 I2V's form (image_dim with
 * added_kv_proj_dim = the model width). Latents with concatenated condition channels
 * (in_channels != out_channels, Wan2.2-I2V-A14B) and per-token timesteps (expand_timesteps,
 * Wan2.2 TI2V) compile. */
dit_status_t dit_model_check_compilable(const dit_model_t *m);

/* The pipeline facts that change what is compiled or how it is run, beyond the transformer
 * config and variant: *out is NULL for a single transformer whose VAE factors are its
 * variant's (so such models keep their identity), else an object the caller owns. */
dit_status_t dit_model_pipeline_identity(const dit_model_t *m, cJSON **out);

/* The readers dit_model_load uses, on text of `len` bytes named `what` in messages (so tests
 * and fuzzers reach them without files). dit_model_config_parse fills the family, class,
 * normalized config (m->config, freed by dit_model_free) and family fields of a zeroed m. */
dit_status_t dit_model_config_parse(const char *text, size_t len, const char *what, dit_model_t *m);
dit_status_t dit_pipeline_index_parse(const char *text, size_t len, const char *what,
                                      dit_pipeline_index_t *out);
dit_status_t dit_scheduler_config_parse(const char *text, size_t len, const char *what,
                                        dit_scheduler_defaults_t *out);
/* vae/config.json (AutoencoderKLWan): scale_factor_spatial, scale_factor_temporal and z_dim,
 * with diffusers' defaults (8, 4, 16) for absent fields; source set to "vae/config.json". */
dit_status_t dit_vae_config_parse(const char *text, size_t len, const char *what, dit_vae_factors_t *out);
/* Refuses two experts whose configs differ, naming the field and both values. */
dit_status_t dit_expert_configs_match(const cJSON *a, const char *a_what, const cJSON *b, const char *b_what);

/* Turns pixel sizes into latent sizes with the variant's VAE factors, refusing sizes that
 * do not map exactly (names the flag, expected and found). */
dit_status_t dit_model_latent_shape(const dit_model_t *m, const dit_shape_request_t *req,
                                    dit_latent_shape_t *out);

/* Builds the forward graph: inputs hidden_states [B,C,f,h,w], timestep [B] (f32; [B, f*h*w/patch
 * volume], one per patch token, for a pipeline with expand_timesteps),
 * encoder_hidden_states [B,L,text_dim], and for an image-conditioned model (Wan2.1 I2V)
 * encoder_hidden_states_image [B,n_img,image_dim]; output sample [B,C_out,f,h,w]. With req->tp > 1 it is
 * the graph of tensor-parallel rank req->tp_rank: q/k/v and FFN-up column-parallel, attention
 * out and FFN-down row-parallel (an all-reduce after each), heads divided, the QK RMSNorm over
 * all heads through an all-reduce of the rows' sums of squares; the rest replicated. */
dit_status_t dit_model_build_graph(const dit_model_t *m, const dit_shape_request_t *req,
                                   dit_graph_t **out);

/* How `ditrun generate` drives the model, as its pipeline does (the manifest's generate
 * section): out->present = 0 for a family whose generate the runtime knows without it (Wan). */
dit_status_t dit_model_generate_contract(const dit_model_t *m, const dit_latent_shape_t *ls, dit_manifest_generate_t *out);

/* Content hash of the checkpoint: XXH3-128 over every tensor's name, dtype, shape and bytes,
 * in name order (independent of file names, sharding and header order). */
dit_status_t dit_model_weights_hash(const dit_model_t *m, char out_hex[33]);

#endif
