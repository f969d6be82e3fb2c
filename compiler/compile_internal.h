/* Private to the compile driver's files (compiler/compile*.c): the progress reporter, one
 * rank's build, and the steps the driver (compile.c) runs from the lowering (compile_lower.c:
 * graph to plan, kernels, offload sections) and the weight layout (compile_weights.c). */
#ifndef DIT_COMPILER_COMPILE_INTERNAL_H
#define DIT_COMPILER_COMPILE_INTERNAL_H

#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "artifacts/bundle.h"
#include "artifacts/manifest.h"
#include "artifacts/plan.h"
#include "compiler/compile.h"
#include "compiler/frontend.h"
#include "ir/graph.h"
#include "passes/passes.h"
#include "store/store.h"

typedef struct dit_compile_progress {
  int quiet, step, total;
  struct timespec t0, last;
} dit_compile_progress_t;

double dit_compile_secs(struct timespec a, struct timespec b);
/* One numbered progress line on stderr (nothing when quiet). */
void dit_compile_progress(dit_compile_progress_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Graph, plan, weights shard and kernels of one (cp rank, tp rank). */
typedef struct dit_rank_build {
  dit_graph_t *g;
  dit_plan_t *plan;
  dit_pass_result_t pres;
  uint64_t *module_sizes; /* per step: cubin and PTX sizes of its kernel */
  uint64_t weights_size, plan_size;
  char plan_hash[DIT_HASH_HEX];
  cJSON *quant; /* what --quant changed (the manifest summary's "quant"); NULL without it */
} dit_rank_build_t;

/* ---- a VAE decode's tiles (compile_tiles.c) ---- */

/* The fewest windows of a split decoder (o a vae/ folder's options: shape, target, vae_budget_gib)
 * whose decode's predicted device peak fits the budget, in *tiles, the peak in *peak; with
 * allow_whole, 0 when the decoder fits unsplit. The head (whole frames) must fit too. Refused,
 * with the least predicted peak, when no window count fits. */
dit_status_t dit_compile_vae_tiles(const dit_compile_options_t *o, int allow_whole, int64_t *tiles, uint64_t *peak);

/* ---- the pipeline's stages (compile_stages.c) ---- */

/* Compiles (or with identity_only, only identifies) the pipeline's text encoders and VAE decoder
 * as o->stages selects, each into its own bundle beside the transformer's, into out[] (at most
 * DIT_MAX_STAGES) in manifest order; m is the transformer (its family's text_stages and
 * image_decoder say how its pipeline runs them). A model directory that is not a pipeline has none. */
dit_status_t dit_compile_stages(const dit_compile_options_t *o, const dit_model_t *m, int identity_only, dit_manifest_stage_t *out,
                                size_t *n_out);

/* The files a stage's bundle carries so it needs nothing from the pipeline directory at run
 * time, read and hashed, each a blob of `role` named by its file: a text encoder's tokenizer
 * files (--tokenizer-dir; the folder checked by opening it as the runtime will) or an image
 * encoder's preprocessor configuration (the folder of image_processor_dir; the file parsed as
 * the runtime will). None when the options name neither. */
#define DIT_CARRIED_FILES_MAX 5
typedef struct dit_carried_files {
  const char *role; /* the blobs' role and the identity's key */
  const char *dir;
  size_t n;
  const char *name[DIT_CARRIED_FILES_MAX];
  char *data[DIT_CARRIED_FILES_MAX];
  size_t size[DIT_CARRIED_FILES_MAX];
  char hash[DIT_CARRIED_FILES_MAX][DIT_HASH_HEX];
} dit_carried_files_t;
dit_status_t dit_carried_files_read(const dit_compile_options_t *o, dit_carried_files_t *t);
void dit_carried_files_free(dit_carried_files_t *t);

/* ---- quantization (compile_quant.c) ---- */

/* --quant fp8: every linear of the blocks over token rows with a 2-D checkpoint weight becomes
 * linear_fp8 (e4m3 weight, f32 per-channel scale constant); refuses a graph with none. Fills
 * *summary (mode, rule, the op names) when summary is not NULL. */
dit_status_t dit_compile_quantize(const dit_model_t *m, dit_graph_t *g, dit_quant_t quant, cJSON *summary, dit_compile_progress_t *pr);

/* --attn-quant fp8: every attention with as many queries as keys, head dim 64 or 128 and no
 * score bias (a tile schedule or a key bound stays) becomes attn_quant (q, rows 64), attn_quant (k, rows 128),
 * attn_vmax and attn_quant_vt (v) and attention_fp8 in its place; refuses a graph with none. Fills
 * *summary's "attn_quant" when summary is not NULL. */
dit_status_t dit_compile_quantize_attention(dit_graph_t *g, dit_quant_t quant, cJSON *summary, dit_compile_progress_t *pr);

/* ---- lowering (compile_lower.c) ---- */

/* The ops a target runs in another form, rewritten before the passes: on GPU targets each
 * groupnorm whose shape the sliced kernels take becomes groupnorm_stats + groupnorm_apply (one
 * block per group and item would leave most of the device idle); the cpu target keeps the graph.
 * *split (may be NULL) gets the number of groupnorms split. */
dit_status_t dit_compile_lower_target(const char *target, dit_graph_t *g, int *split);
/* The plan of a scheduled, memory-planned graph: one value per graph value (same ids), one
 * step per op in order (step i is op i). Caller owns *out. */
dit_status_t dit_compile_lower(const dit_graph_t *g, uint64_t arena_bytes, dit_plan_t **out);
/* Generates every step's kernel for a GPU target and adds the modules to the bundle. */
dit_status_t dit_compile_kernels(const char *target, const dit_graph_t *g, dit_plan_t *plan, dit_bundle_writer_t *w,
                                 uint64_t *module_sizes, cJSON *summary, dit_compile_progress_t *pr);
/* The F* offload plan (o->offload layerwise|chunked) over rank 0's graph, written into every
 * build's plan as its typed offload section (build r uses layouts[r % tp]), and a short digest
 * into summary.offload for people. runtime_bytes: what the runtime allocates for rank 0's plan
 * besides weights (dit_plan_memory). */
dit_status_t dit_compile_offload(const dit_compile_options_t *o, dit_rank_build_t *rb, int nb, int tp,
                                 const dit_manifest_weights_t *layouts, uint64_t runtime_bytes, cJSON *summary);
/* A two-expert pipeline's offload (builds [0, nb) transformer over layouts [0, tp), [nb, 2nb)
 * transformer_2 over [tp, 2tp)): both experts planned with one resident fraction, the largest
 * whose pipeline peak fits --memory-budget (else as requested), and transformer_2's plans
 * carry the swap that loads its resident set during transformer's last forwards. gpu: a
 * device backend's allocation rule. */
dit_status_t dit_compile_offload_experts(const dit_compile_options_t *o, dit_rank_build_t *rb, int nb, int tp,
                                         const dit_manifest_weights_t *layouts, int gpu, cJSON *summary);
/* Serializes the build's plan into a "plan" blob of the bundle. */
dit_status_t dit_compile_write_plan(dit_bundle_writer_t *w, dit_rank_build_t *rb);

/* ---- weight layout (compile_weights.c) ---- */

/* The weights blob of one tensor-parallel shard: the weights the plan uses in order of first
 * use, each aligned to DIT_WEIGHT_ALIGN. With a store, one written before for the same bytes
 * is linked instead of written again. Fills layout (its tensors and blob hash). */
dit_status_t dit_compile_weights_blob(dit_bundle_writer_t *w, dit_store_t *store, const dit_model_t *m, const dit_graph_t *g,
                                      const dit_plan_t *p, const char *weights_hash, dit_manifest_weights_t *layout,
                                      dit_compile_progress_t *pr);

#endif
