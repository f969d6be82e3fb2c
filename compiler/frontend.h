/* Model frontends: read a diffusers model directory (config.json + safetensors) or pipeline
 * directory (model_index.json), validate it, and build the DiT graph for one shape. One frontend per family; `_class_name` picks it. */
#ifndef DIT_COMPILER_FRONTEND_H
#define DIT_COMPILER_FRONTEND_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "artifacts/safetensors.h"
#include "base/dtype.h"
#include "base/status.h"
#include "ir/graph.h"

/* What the user asked for, in pixel units. */
typedef struct dit_shape_request {
  int64_t batch;
  int64_t frames, height, width; /* pixels */
  int64_t text_len;
  dit_dtype_t dtype;             /* compute/storage policy: f32 or bf16 */
  int tp, tp_rank;               /* tensor-parallel degree (0 or 1: none) and this graph's rank */
  int cp, cp_rank;               /* context-parallel degree (0 or 1: none) and this graph's rank */
  int cp_mode;                   /* DIT_CP_* when cp > 1 */
  int ulysses;                   /* DIT_CP_USP: the Ulysses degree U (ring degree cp / U) */
  int sp;                        /* sequence parallelism inside the tensor-parallel group */
} dit_shape_request_t;

enum { DIT_CP_NONE = 0, DIT_CP_GATHER = 1, DIT_CP_ULYSSES = 2, DIT_CP_RING = 3, DIT_CP_USP = 4 };

/* What a pipeline's model_index.json says this build reads. */
typedef struct dit_pipeline_index {
  char class_name[64];        /* "WanPipeline"; "" when the model was not given as a pipeline */
  char transformer_class[64]; /* the `transformer` entry's class */
  char scheduler_class[64];   /* the `scheduler` entry's class; "" if none is listed */
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
} dit_scheduler_defaults_t;

typedef struct dit_model {
  char family[32];       /* "wan" */
  char model_class[64];  /* config _class_name */
  char variant[32];      /* e.g. "wan2.1"; decides VAE factors */
  int vae_temporal, vae_spatial;
  cJSON *config;         /* normalized config: every field the frontend reads, defaults filled */
  dit_safetensors_t *weights;
  char model_dir[4096];  /* the folder of config.json and the weights (a pipeline's transformer/) */
  dit_pipeline_index_t pipeline;     /* class_name "" unless loaded from a pipeline directory */
  dit_scheduler_defaults_t scheduler; /* present only for a pipeline with a scheduler config */
  /* Family-specific parsed config. */
  struct {
    int64_t patch[3], heads, head_dim, in_channels, out_channels, text_dim, freq_dim, ffn_dim,
        layers, rope_max_seq_len;
    int cross_attn_norm;
    double eps;
  } wan;
} dit_model_t;

/* The latent shape a request maps to, [C, f, h, w] before patching. */
typedef struct dit_latent_shape {
  int64_t channels, frames, height, width;
} dit_latent_shape_t;

/* Loads config.json and the checkpoint of model_dir and validates both against the family's
 * definition (unsupported options refused naming the field; every expected tensor present
 * with its shape; no unexpected tensors). A directory with model_index.json and no
 * config.json is a diffusers pipeline: its transformer/ folder is loaded and its
 * scheduler/scheduler_config.json, if present, read into m->scheduler. variant may be NULL
 * (chosen from the config). Caller owns *out. */
dit_status_t dit_model_load(const char *model_dir, const char *variant, dit_model_t **out);
void dit_model_free(dit_model_t *m);

/* The readers dit_model_load uses, on text of `len` bytes named `what` in messages (so tests
 * and fuzzers reach them without files). dit_model_config_parse fills the family, class,
 * normalized config (m->config, freed by dit_model_free) and family fields of a zeroed m. */
dit_status_t dit_model_config_parse(const char *text, size_t len, const char *what, dit_model_t *m);
dit_status_t dit_pipeline_index_parse(const char *text, size_t len, const char *what,
                                      dit_pipeline_index_t *out);
dit_status_t dit_scheduler_config_parse(const char *text, size_t len, const char *what,
                                        dit_scheduler_defaults_t *out);

/* Turns pixel sizes into latent sizes with the variant's VAE factors, refusing sizes that
 * do not map exactly (names the flag, expected and found). */
dit_status_t dit_model_latent_shape(const dit_model_t *m, const dit_shape_request_t *req,
                                    dit_latent_shape_t *out);

/* Builds the forward graph: inputs hidden_states [B,C,f,h,w], timestep [B] (f32),
 * encoder_hidden_states [B,L,text_dim]; output sample [B,C_out,f,h,w]. With req->tp > 1 it is
 * the graph of tensor-parallel rank req->tp_rank: q/k/v and FFN-up column-parallel, attention
 * out and FFN-down row-parallel (an all-reduce after each), heads divided, the QK RMSNorm over
 * all heads through an all-reduce of the rows' sums of squares; the rest replicated. */
dit_status_t dit_model_build_graph(const dit_model_t *m, const dit_shape_request_t *req,
                                   dit_graph_t **out);

/* Content hash of the checkpoint: XXH3-128 over every tensor's name, dtype, shape and bytes,
 * in name order (independent of file names, sharding and header order). */
dit_status_t dit_model_weights_hash(const dit_model_t *m, char out_hex[33]);

#endif
