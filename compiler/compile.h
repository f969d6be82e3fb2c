/* The compile driver: model dir + shape + topology + target -> a published bundle. */
#ifndef DIT_COMPILER_COMPILE_H
#define DIT_COMPILER_COMPILE_H

#include <stdio.h>

#include "base/status.h"
#include "compiler/frontend.h"

/* Lossy modes of the GEMMs (--quant: none, fp8) and of attention (--attn-quant: none; fp8: e4m3 Q,
 * K, P and V; int8: int8 Q K^T, bf16 P V; int8fp8: int8 Q K^T, e4m3 P V). */
typedef enum dit_quant { DIT_QUANT_NONE = 0, DIT_QUANT_FP8 = 1, DIT_QUANT_INT8 = 2, DIT_QUANT_INT8FP8 = 3 } dit_quant_t;
const char *dit_quant_name(dit_quant_t q);
/* "none", "fp8", "int8" or "int8fp8"; returns -1 for anything else. */
int dit_quant_parse(const char *name, dit_quant_t *out);

typedef struct dit_compile_options {
  const char *model_dir;
  const char *variant;     /* NULL: from the config */
  dit_shape_request_t shape;
  const char *target;      /* "cpu" */
  const char *out_dir;     /* parent directory of bundles */
  const char *dump_after;  /* pass name or "all"; NULL for none */
  int dump_ir;             /* print the final graph */
  FILE *dump;              /* where dumps go */
  int quiet;               /* no progress on stderr */
  /* The content-addressed store (store/store.h): looked in first, a fresh bundle is
   * entered into it, and it keeps the checkpoint-hash memo. NULL: none. */
  const char *store_dir;
  int explain;             /* on a miss, print which identity inputs differ from stored ones */
  int rehash;              /* hash the checkpoint even when the memo says it is unchanged */
  int cfg_parallel;        /* two lanes of ranks: the conditional and unconditional branches */
  int ranks_per_node;      /* ranks sharing a node (fast links); 0: all of them */
  /* Weight offload (the F* plan): mode none|layerwise|chunked, the chunk size, and at most one
   * of a resident fraction, a memory budget and a latency target; the hardware profile is a
   * preset name or a JSON file (default h200-sxm). */
  const char *offload;
  double chunk_mb, residency, memory_budget_gib, latency_target_ms;
  const char *profile;
  /* fp8: the blocks' large linears on e4m3 weights and activations (compile_quant.c). */
  dit_quant_t quant;
  /* fp8: self-attention at head dim 128 on e4m3 Q, K, V with block scales (compile_quant.c). */
  dit_quant_t attn_quant;
  /* --reuse-cache-mb: the state cache's cap in MiB (0: none); it decides shape.reuse_merge. */
  double reuse_cache_mb;
  /* --vae-budget: the VAE decode's device memory in GiB (0: none); with a budget, a decoder tail
   * (shape.vae_part) or a pipeline's VAE stage takes the fewest windows that fit. */
  double vae_budget_gib;
  /* --stages: a comma-separated list of transformer, text_encoder, vae; NULL: every stage the
   * pipeline directory has that this build compiles; "": none (compile_stages.c). */
  const char *stages;
  /* A text encoder's tokenizer folder: its files travel in the bundle (blobs of role
   * "tokenizer"). NULL: none. */
  const char *tokenizer_dir;
  /* An image encoder's image_processor folder: its preprocessor_config.json travels in the
   * bundle (a blob of role "image_processor"). NULL: none. */
  const char *image_processor_dir;
} dit_compile_options_t;

typedef struct dit_compile_result {
  char identity[33];
  char *path;              /* caller frees */
  int existed;             /* an identical bundle was already published there */
  int from_store;          /* it came from the store: nothing was compiled */
} dit_compile_result_t;

dit_status_t dit_compile(const dit_compile_options_t *opts, dit_compile_result_t *out);

/* Only the identity: loads and validates the model, hashes the checkpoint (through the
 * store's memo when opts->store_dir) and builds the identity inputs, compiling nothing.
 * The caller owns *out_inputs. */
dit_status_t dit_compile_identity(const dit_compile_options_t *opts, cJSON **out_inputs,
                                  char out_identity[33]);

/* The toolchain part of the identity for a target: our codegen-relevant source hash plus
 * the versions of the code generators the target uses. Caller owns the object. */
dit_status_t dit_toolchain_identity(const char *target, cJSON **out);

#endif
