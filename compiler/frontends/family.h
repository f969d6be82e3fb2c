/* What a model family's frontend file gives the family-independent loader (model.c): how
 * to read its config, check a checkpoint, name its variant and VAE factors, map a request to
 * latents and build the graph. Adding a family is one such table, its file and its tests.
 * Also the helpers every family's config reader and checkpoint check share. */
#ifndef DIT_COMPILER_FRONTENDS_FAMILY_H
#define DIT_COMPILER_FRONTENDS_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include "base/json.h"
#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"

typedef struct dit_expected dit_expected_t;

/* A text encoder of a transformer's pipeline, as its pipeline feeds the loop: the stage's role
 * (also its folder in the pipeline directory), its tokenizer folder, the generate argument it
 * makes from which output, how it pads (DIT_PADDING_*: masked and zeroed past the prompt as
 * WanPipeline, every position attended and every row kept as FluxPipeline, ...), whether it runs
 * at its tokenizer's model_max_length instead of --text-len, and the pipeline's prompt template
 * (NULL: none), the rows of it dropped from the output's front (the stage then runs at --text-len
 * + drop tokens) and the argument taking the kept rows' mask (NULL: none). */
typedef struct dit_stage_feed {
  const char *role, *tokenizer, *argument, *output;
  int padding, tokenizer_length;
  const char *prompt_template;
  int drop;
  const char *mask_argument;
} dit_stage_feed_t;

/* An image-to-video pipeline's stages: the VAE encoder over the image alone (the first latent
 * frame held to its encoding: Wan2.2 TI2V) or over the image followed by zero frames (the
 * encoding a condition concatenated to the latents: Wan2.1/2.2 I2V), and whether an image
 * encoder's embeddings feed the transformer too (Wan2.1 I2V's CLIP). */
typedef enum { DIT_IMAGE_NONE, DIT_IMAGE_FIRST_FRAME, DIT_IMAGE_VIDEO } dit_image_vae_t;
typedef struct dit_image_stages {
  dit_image_vae_t vae;
  int image_encoder;
} dit_image_stages_t;

struct dit_family {
  const char *name;        /* the manifest's model.family: "wan", "flux" */
  const char *model_class; /* config.json's _class_name (transformers' configs: architectures[0]) */
  /* Further classes read as this family (NULL-terminated; NULL: none): a model with a head the
   * family does not run (CLIPVisionModelWithProjection's projection). */
  const char *const *other_classes;
  /* 1: a text encoder, whose shape is only --batch and --text-len (no pixels, no latents). */
  int text_encoder;
  /* 1: an image encoder, whose image size is its config's: --height and --width may be left out. */
  int image_encoder;
  /* Normalizes raw into m->config (defaults filled) and the family's typed config. */
  dit_status_t (*parse_config)(dit_model_t *m, const dit_json_t *raw);
  /* The tensors m's config calls for in a transformer folder's checkpoint; a tensor containing
   * one of the NULL-terminated `ignored` substrings (may be NULL) is allowed besides. */
  void (*expected)(const dit_model_t *m, dit_expected_t *l);
  const char *const *ignored;
  /* Sets m->variant and the VAE factors (m->pipeline.vae, m->vae_spatial, m->vae_temporal);
   * want is --variant or NULL; vae_what names vae/config.json in messages. */
  dit_status_t (*pick_variant)(dit_model_t *m, const char *want, const char *vae_what);
  /* What the compiler cannot build for this model, refused by name (NULL: everything it reads). */
  dit_status_t (*check_compilable)(const dit_model_t *m);
  /* The pipeline's part of the bundle identity (NULL: none, the config and weights are all). */
  dit_status_t (*pipeline_identity)(const dit_model_t *m, cJSON **out);
  dit_status_t (*latent_shape)(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out);
  dit_status_t (*build_graph)(const dit_model_t *m, const dit_shape_request_t *r, dit_graph_t **out);
  /* The generate contract (frontend.h); NULL: none in the manifest. */
  dit_status_t (*generate)(const dit_model_t *m, const dit_latent_shape_t *ls, dit_manifest_generate_t *out);
  /* A transformer's pipeline stages (compile_stages.c): its text encoders (n_text_stages entries;
   * NULL: one text_encoder from tokenizer/ at --text-len making prompt_embeds as WanPipeline does,
   * listed without argument fields), and whether its VAE decodes whole images in one graph (no
   * chunks, no first frame, no windows). */
  const dit_stage_feed_t *text_stages;
  size_t n_text_stages;
  int image_decoder;
  /* Its VAE decodes the whole video in one graph (its mid block attends across frames: no chunks,
   * no first frame's graph, no spatial windows). */
  int whole_video_decoder;
  /* With whole_video_decoder: the pipeline's VAE decodes framewise, as diffusers' default
   * (tile_sample_min_num_frames, tile_sample_stride_num_frames in video frames): a video of more
   * than decode_window / temporal latent frames in windows of decode_window / temporal + 1 latent
   * frames every decode_stride / temporal, each window one graph (manifest.h window_stride). 0:
   * the whole video in one graph at any length. */
  int64_t decode_window, decode_stride;
  /* What its image-to-video pipeline encodes from generate's --image (NULL: it takes no image). */
  void (*image_stages)(const dit_model_t *m, dit_image_stages_t *out);
};

extern const dit_family_t dit_family_wan;
extern const dit_family_t dit_family_flux;
extern const dit_family_t dit_family_hunyuan;
extern const dit_family_t dit_family_qwen;
extern const dit_family_t dit_family_umt5;
extern const dit_family_t dit_family_t5;

/* UMT5's bucket of a key `rel` positions after its query (negative: before), as transformers'
 * encoder computes it in fp32: num_buckets / 2 per direction, half of those exact distances,
 * the rest logarithmic up to max_distance. */
int32_t dit_umt5_relative_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance);
extern const dit_family_t dit_family_wan_vae;
extern const dit_family_t dit_family_kl_vae;
extern const dit_family_t dit_family_hunyuan_vae;
extern const dit_family_t dit_family_clip_text;
extern const dit_family_t dit_family_clip_vision;
extern const dit_family_t dit_family_qwen25vl_text;
extern const dit_family_t dit_family_llama_text;

/* ---- shared hooks of the stage families ---- */

/* pick_variant of a family with one variant, named as the family. */
dit_status_t dit_family_one_variant(dit_model_t *m, const char *want, const char *vae_what);
/* latent_shape of a text encoder: tokens only, the pixel and image flags refused by name. */
dit_status_t dit_family_text_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out);

/* ---- config readers ---- */

/* DIT_CF_BOOLS: exactly count booleans; DIT_CF_FLOATS: at most count numbers in [lo, hi]. */
typedef enum { DIT_CF_INT, DIT_CF_BOOL, DIT_CF_FLOAT, DIT_CF_STR, DIT_CF_INTS, DIT_CF_BOOLS, DIT_CF_FLOATS } dit_config_kind_t;

/* One __init__ argument of a diffusers model class, with the range this build accepts. */
typedef struct dit_config_field {
  const char *key;
  dit_config_kind_t kind;
  int nullable;
  int64_t lo, hi; /* value range; DIT_CF_STR: hi is the longest length; DIT_CF_INTS: elements' range */
  int count;      /* DIT_CF_INTS: exactly this many integers */
  const char *form; /* DIT_CF_INTS: what they are, for messages ("[t, h, w]"); may be NULL */
} dit_config_field_t;

/* The normalized config: `defaults` (JSON text of every field) overlaid with raw's fields,
 * each checked against its entry; a key not in fields is refused naming it (keys starting
 * with '_' are diffusers' bookkeeping and skipped). Caller owns *out. */
dit_status_t dit_config_read(const dit_config_field_t *fields, size_t n_fields, const char *defaults, const char *class_name,
                             const dit_json_t *raw, cJSON **out);
/* dit_config_read of raw without the keys in the NULL-terminated `ignored` (fields of a saved
 * config that do not change the forward: bookkeeping, training settings, other heads' fields). */
dit_status_t dit_config_read_ignoring(const dit_config_field_t *fields, size_t n_fields, const char *defaults,
                                      const char *class_name, const char *const *ignored, const dit_json_t *raw, cJSON **out);
/* The three rotary axes' widths of field key (a DIT_CF_INTS of count 3), checked to be even and
 * to sum to head_dim (messages name what, the config's path). */
dit_status_t dit_config_rope_axes(const cJSON *cfg, const char *key, int64_t head_dim, const char *what, int64_t axes[3]);
/* A number of a normalized config (0 for null or absent). */
int64_t dit_config_int(const cJSON *cfg, const char *key);
double dit_config_num(const cJSON *cfg, const char *key);
int dit_config_bool(const cJSON *cfg, const char *key);

/* ---- checkpoint checks ---- */

dit_status_t dit_expected_create(dit_expected_t **out);
void dit_expected_destroy(dit_expected_t *l);
/* The config field that calls for the tensors expected from here on ("" or NULL: none). */
void dit_expected_why(dit_expected_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A tensor the config requires, named printf-style. */
void dit_expected_add(dit_expected_t *l, int rank, const int64_t *dims, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* prefix.weight [out, in] and, with bias, prefix.bias [out]. */
void dit_expected_linear(dit_expected_t *l, int64_t out, int64_t in, int bias, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A TimestepEmbedding or text projection at prefix: prefix.linear_1 [D, in] and
 * prefix.linear_2 [D, D], both with bias. */
void dit_expected_embedder(dit_expected_t *l, int64_t D, int64_t in, const char *prefix);
/* The tensors of FLUX-style blocks (blocks.h's dit_blocks_flux_double and dit_blocks_flux_single):
 * `layers` double-stream blocks transformer_blocks.<i> and `single_layers` single-stream blocks
 * single_transformer_blocks.<i>, of model width D, MLP width M and per-head q/k norms of head_dim. */
void dit_expected_flux_blocks(dit_expected_t *l, int64_t layers, int64_t single_layers, int64_t D, int64_t M, int64_t head_dim);
/* Every expected tensor present in weights, a float type and of its shape; no other tensor
 * but those containing one of the NULL-terminated `ignored` substrings (may be NULL). */
dit_status_t dit_expected_check(dit_expected_t *l, const dit_safetensors_t *weights, const char *dir,
                                const char *const *ignored);

/* ---- variants ---- */

/* An image family's VAE factors (m->pipeline.vae, m->vae_spatial, m->vae_temporal): the
 * pipeline VAE's spatial factor, or 8 without a VAE as diffusers' image pipelines default;
 * temporal 1. */
void dit_image_vae_factors(dit_model_t *m);

/* The latents of an image family whose pipeline packs 2x2 latent pixels into a token of
 * in_channels: an image (no --frames) of height and width multiples of 2 * the VAE factor, no
 * image tokens; out: in_channels / 4 channels, the latent size, (h/2)(w/2) tokens. */
dit_status_t dit_packed_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, int64_t in_channels,
                                     dit_latent_shape_t *out);

/* The latents of an image VAE decoder stage (AutoencoderKL of FLUX.1, AutoencoderKLQwenImage) fed
 * the packed latents its transformer gives: [B, (H/2s)(W/2s), 4 z_dim] for --height and --width
 * multiples of 2s, s the VAE factor (dit_packed_latent_shape). An image has no frames: --frames other
 * than 1 and the video decoder's --vae-chunk, --vae-first, --vae-part (the encoder's among them) and
 * --vae-tiles are refused by name, as is parallelism. */
dit_status_t dit_image_vae_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, int64_t z_dim, dit_latent_shape_t *out);

/* ---- generate contracts ---- */

/* A pipeline condition: the pipeline argument and the transformer input it feeds. */
typedef struct dit_generate_condition {
  const char *argument, *input;
} dit_generate_condition_t;

/* What every flow-match pipeline's generate contract (frontend.h) has: none without a scheduler
 * config (g left absent, DIT_OK); a scheduler but FlowMatchEulerDiscreteScheduler refused naming
 * `pipeline`; else g present with the latents in hidden_states, the timestep input "timestep"
 * (the scheduler's t over timestep_divisor), default_steps and the n_cond conditions. The
 * family adds the rest and the schedule (pipeline.h's dit_flow_schedule_from). */
dit_status_t dit_flow_generate(const dit_model_t *m, const char *pipeline, int default_steps, double timestep_divisor,
                               const dit_generate_condition_t *cond, int n_cond, dit_manifest_generate_t *g);

/* ---- parallel layouts ---- */

/* The layouts a joint-attention family builds (image tokens shared by the context-parallel group,
 * the text whole on every rank, dit_blocks_joint_attention): tp dividing `heads`, cp gather,
 * ulysses (heads / tp divisible by cp) or ring over `tokens` image tokens that split into cp equal
 * parts, cfg lanes; sequence parallelism and usp refused naming the flag. */
dit_status_t dit_joint_parallel_check(const dit_model_t *m, const dit_shape_request_t *req, int64_t heads, int64_t tokens);

/* The graph and block builder of a rank of such a family (a layout dit_joint_parallel_check
 * accepted): the request's dtype, tp and cp, `heads` heads of head_dim, norms' eps, m's weights.
 * On error nothing is left to free. */
dit_status_t dit_joint_builder(const dit_model_t *m, const dit_shape_request_t *req, int64_t heads, int64_t head_dim, double eps,
                               dit_graph_t **g, dit_blocks_t **b);

#endif
