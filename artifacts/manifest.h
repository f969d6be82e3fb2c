/* The bundle manifest (manifest.json): a typed view, a deterministic serializer and a
 * bounds-checked parser that validates internal consistency. Schema 1.0:
 *
 * {
 *   "format": "ditc-bundle",
 *   "schema": {"major": 1, "minor": 0},
 *   "identity": "<32 hex>",                  XXH3-128 of canonical(inputs), see identity.h
 *   "inputs": {...},                          the normalized compile inputs (object)
 *   "model": {"family": "wan", "class": "WanTransformer3DModel", "variant": "wan2.1"},
 *   "target": {"arch": "cpu" | "sm_90" | ..., "min_driver": 0},
 *   "topology": {"world": 1, "tp": 1, "cp": 1, "cfg": 1, "cp_mode": "none",
 *                "reuse": {"mode": "ditango", "group": G, "layers": L, "copies": C}},
 *                                             reuse: schema 1.3, optional (cp_mode "ring" or
 *                                             "usp"): attention-state reuse in groups of G ring
 *                                             members (cp / G groups; under usp "ulysses": U, and
 *                                             cp / U / G groups of the ranks sharing a Ulysses
 *                                             index), L self-attention layers with a state cache
 *                                             slot per remote group, C cache copies (1 or 2)
 *   "shape": {"batch": B, "frames": F, "height": H, "width": W, "text_len": L,
 *             "latent": [C, f, h, w],
 *             "tile": {"count": T, "full": W0, "halo": R}},   schema 1.5, optional: a VAE
 *                                             decoder's tail over one of T windows w wide of
 *                                             its input's full width W0, the R pixels at each
 *                                             window's inner edges not exact (dit_vae_tile_span)
 *   "dtype": "f32" | "bf16",
 *   "io": {"inputs": [{"name", "dtype", "shape": [..]}], "outputs": [...]},
 *   "blobs": [{"role": "plan" | "weights" | "kernels", "hash": "<32 hex>", "size": N,
 *              "sha256": "<64 hex>"}],     sha256 optional (the store adds it, remote pulls
 *                                           check it)
 *   "weights": [{"blob": "<hash>", "tp_rank": 0, "tp_size": 1,
 *                "tensors": [{"name", "dtype", "shape": [..], "offset": N, "nbytes": N}]}],
 *   "ranks": [{"rank": 0, "plan": "<hash>", "weights": "<hash>"}],
 *   "memory": {"arena_bytes": N, "weight_bytes": N, "peak_bytes": N},
 *   "summary": {...},                         free-form plan summaries (flops, op counts)
 *   "experts": {"boundary_timestep": T,       schema 1.1, optional: a pipeline of two experts
 *               "list": [{"name": "transformer" | "transformer_2",
 *                         "ranks": [{"rank", "plan", "weights"}]}]},
 *   "generate": {                             schema 1.2, optional: how `ditrun generate` drives
 *                                             the model, as its diffusers pipeline does
 *     "latents": "<input>",                   the input the sampler's latents feed, in its shape
 *     "timestep": {"input": "<input>", "divisor": D},   the scheduler's t / D, in the model dtype;
 *                                             with "dtype": "f32" in fp32 (the pipeline keeps
 *                                             it in the fp32 latents' dtype)
 *     "steps": N,                             the pipeline's default num_inference_steps
 *     "guidance": {"input": "<input>", "scale": S, "default": G},  optional: an embedded
 *                                             guidance, --guidance (default G) * S
 *     "conditions": [{"argument": "prompt_embeds", "input": "encoder_hidden_states"}, ...],
 *     "true_cfg": "plain" | "norm",           negative-prompt CFG; "norm" rescales to the
 *                                             conditional prediction's norm over the last dim
 *     "schedule": {"sampler": "flow_match_euler", "num_train_timesteps": N, "shift": S,
 *                  "sigmas": "one_to_1/n" | "one_to_zero",   the pipeline's initial sigmas
 *                  "dynamic": null | {"base_shift", "max_shift", "base_image_seq_len",
 *                                     "max_image_seq_len", "image_seq_len", "time_shift_type"},
 *                  "shift_terminal": null | x}},
 *   "stages": [{"role": "text_encoder" | "vae_decoder",   schema 1.4, optional: the pipeline's
 *               "identity": "<32 hex>",       other stages, each a bundle of its own published
 *               "family": "umt5", "class": "UMT5EncoderModel",   beside this one (or in the
 *               "argument": "<name>", "output": "<name>",        store), at most one per role;
 *               "padding": "zeroed" | "attended" | "masked",     role "vae_decoder_first":
 *               "template": "...{}...", "drop": n,
 *               "mask_argument": "<name>",
 *               "window_stride": s}, ...]
 *                                             latent frame 0's graph of a VAE decoding in chunks
 *                                             (vae_decoder: the later chunks' or, for an image, the
 *                                             whole decode); "vae_decoder_head" (schema 1.5): the
 *                                             full-frame part of a decoder whose other two run in
 *                                             tiles; "text_encoder_2" (schema 1.6): a pipeline's
 *                                             second text encoder (its tokenizer tokenizer_2/).
 *                                             "vae_encoder", "vae_encoder_first" (schema 1.7):
 *                                             the VAE encoder of an image-to-video pipeline's
 *                                             --image (one frame, or the image and zero frames
 *                                             in chunks, _first frame 0's graph);
 *                                             "image_encoder" (schema 1.7): its CLIP image
 *                                             encoder, whose bundle carries the pipeline's
 *                                             image_processor/preprocessor_config.json.
 *                                             argument, output, padding (schema 1.6, optional,
 *                                             the three together, text encoders only): the
 *                                             generate argument the stage makes (a condition's
 *                                             argument; each made by one stage at most), from
 *                                             its output of that name ([1, L, D] or pooled [1, D]),
 *                                             and how the pipeline encodes: "zeroed" (WanPipeline:
 *                                             the prompt's white space cleaned, the tokenizer's
 *                                             mask as attention_mask, the rows past the prompt's
 *                                             tokens zeroed), "attended" (FluxPipeline: the text
 *                                             as given, every position attended, every row kept).
 *                                             "masked" (schema 1.7, HunyuanVideoPipeline: the
 *                                             tokenizer's mask, every row kept). template, drop,
 *                                             mask_argument (schema 1.7, optional, with
 *                                             argument): the prompt goes into the template's
 *                                             "{}" (and is not cleaned), the output's first drop
 *                                             rows are the template's and go, and the mask of
 *                                             the rows kept (the tokenizer's, from drop on) is
 *                                             the generate argument mask_argument.
 *                                             window_stride (schema 1.8, optional, vae_decoder
 *                                             only): the pipeline decodes a video of more
 *                                             latent frames than the stage takes framewise, as
 *                                             diffusers' AutoencoderKLHunyuanVideo does: windows
 *                                             of up to the stage's n latent frames starting
 *                                             every s (0, s, 2s, ...), each decoded alone (a
 *                                             shorter last window by "vae_decoder_last", schema
 *                                             1.8), every window's first frame but the first
 *                                             window's dropped, its first frames blended
 *                                             linearly with the previous window's last ones
 *                                             (the window's sample frames beyond s times the
 *                                             temporal ratio, plus one), s times the ratio
 *                                             frames kept of each (the first window one more).
 *                                             Without them a text_encoder stage makes
 *                                             prompt_embeds from last_hidden_state, "zeroed"
 * }
 *
 * A blob of role "tokenizer" (schema 1.4) is a file of the pipeline's tokenizer folder that a
 * text-encoder bundle carries so it needs nothing else at run time; one of role "image_processor"
 * (schema 1.7) the image preprocessor's configuration an image-encoder bundle carries. Their
 * "name" (required there, refused on other roles) is the file's name in that folder: a plain
 * name, unique in the bundle.
 *
 * Without "experts" a bundle is one transformer (schema 1.0, written exactly as before). With
 * it, list[0] is "transformer" (high noise, timesteps >= T) and repeats `ranks` verbatim, so
 * every reader of `ranks` runs it; list[1] is "transformer_2" (timesteps < T) with its own
 * per-rank plans and weights, whose layouts are in `weights` like the first expert's.
 *
 * Blob files live at blobs/<hash> inside the bundle directory.
 */
#ifndef DIT_ARTIFACTS_MANIFEST_H
#define DIT_ARTIFACTS_MANIFEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "base/dtype.h"
#include "base/status.h"

#define DIT_SCHEMA_MAJOR 1
#define DIT_SCHEMA_MINOR 8
#define DIT_SCHEMA_MINOR_EXPERTS 1 /* the first minor with the experts section */
#define DIT_SCHEMA_MINOR_GENERATE 2 /* the first minor with the generate section */
#define DIT_SCHEMA_MINOR_REUSE 3 /* the first minor with topology.reuse */
#define DIT_SCHEMA_MINOR_STAGES 4 /* the first minor with the stages section and tokenizer blobs */
#define DIT_SCHEMA_MINOR_TILES 5  /* the first minor with shape.tile and the vae_decoder_head stage */
#define DIT_SCHEMA_MINOR_FEEDS 6  /* the first minor with a stage's argument/output/padding and text_encoder_2 */
#define DIT_SCHEMA_MINOR_IMAGE 7  /* the first minor with the image-to-video stages and image_processor blobs */
#define DIT_SCHEMA_MINOR_WINDOWS 8 /* the first minor with a VAE decoder stage's window_stride and vae_decoder_last */
#define DIT_MAX_STAGES 8
#define DIT_MAX_EXPERTS 2
#define DIT_GEN_MAX_CONDITIONS 8
#define DIT_HASH_HEX 33 /* 32 hex digits + NUL */
#define DIT_SHA256_HEX 65 /* 64 hex digits + NUL */
#define DIT_WEIGHT_ALIGN 4096

typedef struct dit_manifest_blob {
  char role[16];
  char hash[DIT_HASH_HEX];
  uint64_t size;
  char sha256[DIT_SHA256_HEX]; /* lowercase hex SHA-256 of the blob; "" when not listed */
  char name[64];               /* a named role (dit_manifest_blob_named): the file's name in its folder; else "" */
} dit_manifest_blob_t;

/* One entry of the stages section. */
typedef struct dit_manifest_stage {
  char role[24];               /* one of dit_manifest_stage_minor's roles */
  char identity[DIT_HASH_HEX]; /* the stage's bundle */
  char family[32], model_class[64];
  char argument[64];           /* the generate argument a text encoder makes; "": none listed (the defaults) */
  char output[64];             /* the output it takes (with argument) */
  int padding;                 /* DIT_PADDING_*, with argument */
  /* Schema 1.7, optional, with argument: the pipeline's prompt template ("{}" where the prompt
   * goes; "": the prompt alone), the token rows it drops from the front of the output (the
   * template's), and the generate argument that takes the mask of the rows kept ("": none). */
  char prompt_template[1024];
  int64_t drop;
  char mask_argument[64];
  /* Schema 1.8, optional, vae_decoder alone: the pipeline decodes more latent frames than the
   * stage takes in windows of the stage's frames starting every window_stride latent frames
   * (0: the stage decodes the whole video). */
  int64_t window_stride;
} dit_manifest_stage_t;

/* How a text encoder stage pads (its "padding"): WanPipeline's "zeroed" (the tokenizer's mask
 * as attention_mask, rows past the prompt zeroed), FluxPipeline's "attended" (no mask: every
 * position attended, every row kept), HunyuanVideo's "masked" (the tokenizer's mask, every row
 * kept as encoded). */
enum { DIT_PADDING_ZEROED = 0, DIT_PADDING_ATTENDED = 1, DIT_PADDING_MASKED = 2 };
extern const char *const dit_padding_names[]; /* indexed by DIT_PADDING_*, NULL-terminated */

typedef struct dit_manifest_tensor {
  char *name;
  dit_dtype_t dtype;
  int rank;
  int64_t dims[DIT_MAX_RANK];
  uint64_t offset, nbytes;
} dit_manifest_tensor_t;

typedef struct dit_manifest_weights {
  char blob[DIT_HASH_HEX];
  int tp_rank, tp_size;
  size_t n_tensors;
  dit_manifest_tensor_t *tensors;
} dit_manifest_weights_t;

typedef struct dit_manifest_rank {
  int rank;
  char plan[DIT_HASH_HEX];
  char weights[DIT_HASH_HEX];
} dit_manifest_rank_t;

typedef struct dit_manifest_expert {
  char name[32];               /* "transformer" or "transformer_2" */
  size_t n_ranks;
  dit_manifest_rank_t *ranks;  /* one per world rank, in rank order as parsed */
} dit_manifest_expert_t;

typedef struct dit_manifest_io {
  char name[64];
  dit_dtype_t dtype;
  int rank;
  int64_t dims[DIT_MAX_RANK];
} dit_manifest_io_t;

/* The generate section, typed (see the schema above). */
typedef struct dit_manifest_generate {
  int present;
  char latents[64];
  char timestep_input[64];
  double timestep_divisor;
  int timestep_f32;         /* 1: the pipeline passes t / D in fp32, not rounded to the model dtype */
  char guidance_input[64];  /* "" without an embedded guidance */
  double guidance_scale;
  double guidance_default;  /* the pipeline's default guidance_scale */
  int64_t default_steps;    /* the pipeline's default num_inference_steps */
  size_t n_conditions;
  struct {
    char argument[64], input[64];
  } conditions[DIT_GEN_MAX_CONDITIONS];
  int true_cfg_norm;
  struct {
    int64_t num_train_timesteps;
    double shift;
    int sigmas_to_zero; /* initial sigmas linspace(1, 0, n+1)[:-1] instead of linspace(1, 1/n, n) */
    int dynamic;        /* the rest of this group only when 1 */
    double base_shift, max_shift;
    int64_t base_image_seq_len, max_image_seq_len, image_seq_len;
    int time_shift_linear; /* time_shift_type "linear" (else "exponential") */
    int has_shift_terminal;
    double shift_terminal;
  } schedule;
} dit_manifest_generate_t;

typedef struct dit_manifest {
  int schema_major, schema_minor;
  char identity[DIT_HASH_HEX];
  cJSON *inputs;             /* owned */
  char family[32], model_class[64], variant[32];
  char arch[16];
  int64_t min_driver;
  struct {
    int world, tp, cp, cfg;
    char cp_mode[16];
    int reuse_group;  /* attention-state reuse: ring members per group (0: no reuse section) */
    int reuse_ulysses; /* the Ulysses degree U under usp (1 under ring): the groups partition cp / U ring members */
    int reuse_layers; /* self-attention layers with state-cache slots */
    int reuse_copies; /* state-cache copies: one per branch running through the plan */
    int reuse_merge;  /* adjacent remote groups per cached state (a --reuse-cache-mb cap; 1: one each) */
    uint64_t reuse_cache_bytes; /* the state cache's bytes in the arena, every copy (0: not recorded) */
  } topology;
  struct {
    int64_t batch, frames, height, width, text_len;
    int64_t latent[4]; /* C, f, h, w */
    int64_t tile_count, tile_full, tile_halo; /* shape.tile (count 0: none) */
  } shape;
  dit_dtype_t dtype;
  size_t n_inputs, n_outputs;
  dit_manifest_io_t *io_inputs, *io_outputs;
  size_t n_blobs;
  dit_manifest_blob_t *blobs;
  size_t n_weights;
  dit_manifest_weights_t *weights;
  size_t n_ranks;
  dit_manifest_rank_t *ranks;
  uint64_t arena_bytes, weight_bytes, peak_bytes;
  cJSON *summary;            /* owned, may be NULL */
  /* The experts section: n_experts 0 for a one-transformer bundle, else 2. */
  double boundary_timestep;
  size_t n_experts;
  dit_manifest_expert_t *experts;
  dit_manifest_generate_t generate;
  size_t n_stages;             /* 0: no stages section */
  dit_manifest_stage_t stages[DIT_MAX_STAGES];
} dit_manifest_t;

/* The generate section alone as a tree (what the compile identity hashes). Caller owns *out. */
dit_status_t dit_manifest_generate_json(const dit_manifest_generate_t *g, cJSON **out);

/* Serializes deterministically (fixed key order, two-space indentation, trailing newline).
 * Caller frees *out_text with free(). */
dit_status_t dit_manifest_to_json(const dit_manifest_t *m, char **out_text);

/* Parses and validates: required fields and types, schema major == ours and minor not newer,
 * hex hashes, every count/offset/length in bounds, weights layouts (4 KiB-aligned offsets,
 * nbytes == product(shape) * dtype size, inside the blob's size, no overlaps, unique names),
 * ranks 0..world-1 each once, every referenced blob listed with the right role, topology
 * world == tp*cp*cfg. `what` names the source in errors. Caller owns *out. */
dit_status_t dit_manifest_parse(const char *text, size_t len, const char *what,
                                dit_manifest_t **out);

void dit_manifest_free(dit_manifest_t *m);

/* Lookups; NULL if absent. */
const dit_manifest_blob_t *dit_manifest_find_blob(const dit_manifest_t *m, const char *hash);
const dit_manifest_weights_t *dit_manifest_find_weights(const dit_manifest_t *m,
                                                        const char *blob);

/* The expert named `name` (NULL or "transformer": the first); NULL if the bundle has none
 * by that name. A one-expert bundle answers "transformer" with NULL too: its ranks are `ranks`. */
const dit_manifest_expert_t *dit_manifest_find_expert(const dit_manifest_t *m, const char *name);
/* The rank entry of world rank r for expert `name` (as dit_manifest_find_expert; NULL or
 * "transformer" is `ranks`); NULL if absent. */
const dit_manifest_rank_t *dit_manifest_expert_rank(const dit_manifest_t *m, const char *name, int r);

/* The stage of role `role`; NULL if the bundle has none. */
const dit_manifest_stage_t *dit_manifest_find_stage(const dit_manifest_t *m, const char *role);
/* The least schema minor a stage role needs; -1: not a stage role. */
int dit_manifest_stage_minor(const char *role);
/* The least schema minor a blob role carrying a file name needs (tokenizer, image_processor); -1:
 * a role without names. */
int dit_manifest_blob_named(const char *role);
/* The text-encoder stage that makes generate argument `argument` (its argument field); NULL if none. */
const dit_manifest_stage_t *dit_manifest_stage_for(const dit_manifest_t *m, const char *argument);

/* Window i of `count` windows `window` wide over `full` columns, each with `halo` inexact columns
 * at its inner edges (an edge at column 0 or `full` is exact): its first column *offset (evenly
 * spaced, the first at 0, the last ending at `full`) and the columns [*lo, *hi) it gives, which
 * the windows partition. Returns 0 when the windows cannot cover the width exactly
 * (count * window - 2 * halo * (count - 1) < full, window > full, window <= 2 * halo, or i out
 * of range). */
int dit_vae_tile_span(int64_t count, int64_t full, int64_t window, int64_t halo, int64_t i, int64_t *offset, int64_t *lo, int64_t *hi);

/* The narrowest window with which `count` windows cover `full` columns exactly: 0 when none does
 * or when more than max(1, full - 2 * halo) windows are asked for (a window needs an exact column). */
int64_t dit_vae_tile_window(int64_t count, int64_t full, int64_t halo);

/* Offload residency in whole tensors: of the weights in [lo, hi), a resident prefix wanted up
 * to byte `cut` ends where the first tensor not wholly before `cut` starts (or at hi), so every
 * tensor is either resident or streamed and keeps its alignment. Returns that end. */
uint64_t dit_manifest_weights_split(const dit_manifest_weights_t *w, uint64_t lo, uint64_t hi, uint64_t cut);

/* Prints a human-readable summary (identity, model, target, topology, shape, io, blobs,
 * memory, plan figures). */
void dit_manifest_print(const dit_manifest_t *m, FILE *f);

#endif
