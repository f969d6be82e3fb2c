/* The execution plan (one "plan" blob per rank): values bound to storage and the ordered
 * steps over them. JSON, version 1:
 *
 * {"format": "ditc-plan", "version": 1, "arena_bytes": N,
 *  "values": [{"name", "storage": "arena"|"weight"|"input"|"output", "ref" (weight key or io
 *              name; absent for arena), "dtype", "shape": [..], "offset" (arena only)}],
 *  "steps": [{"op": "<catalog name>", "in": [value indices], "out": [..],
 *             "ints": {"key": n}, "floats": {"key": x}, "block": n,
 *             "kernel": {"cubin", "ptx", "entry", "grid": [3], "block": [3], "smem",
 *                        "tmaps": [{"arg", "box": [2..5], "swizzle"}] (optional)}}]}
 *
 * Version 2 adds an optional "offload" section: the weight-offload schedule ditc planned for
 * this rank, in numbers only (see dit_plan_offload_t); a plan without it streams nothing.
 * Version 3 adds an optional "work" section: what one forward of this rank computes and moves,
 * as the compiler counts it, which `ditrun calibrate` rates the machine by:
 *
 *  "work": {"flops": x, "collectives": N, "collective_bytes": N}
 *
 * Version 4 adds "updates" (optional) to output values: the index of the input value the output
 * replaces in place (a decoder's causal cache): the runtime gives both one buffer, and the plan
 * reads the input before it writes the output. Tensor-map boxes may have 3 to 5 entries.
 *
 *  "offload": {"version": 1, "mode": "layerwise"|"chunked", "chunk_bytes": N,
 *              "head_bytes": N, "tail": [offset, bytes], "overhead_bytes": N,
 *              "predicted_peak_bytes": N, "resident_peak_bytes": N,
 *              "predicted_step_ms": x, "resident_step_ms": x, "profile": {hardware profile},
 *              "blocks": [{"index": i, "range": [lo, hi], "resident_bytes": N, "chunks": N,
 *                          "resident_chunks": N, "yield_steps": [plan steps],
 *                          "window_chunks": [N] (one per window between collectives),
 *                          "flops", "f_star", "t_comp_ms", "t_pref_ms", "t_coll_ms",
 *                          "resident" (the planner's figures, for people)}],
 *              "swap": {"bytes": N, "chunk_bytes": N, "chunks": N, "chunks_per_block": N,
 *                       "forwards": N, "predicted_stall_ms": x, "predicted_peak_bytes": N}}
 *  (offload version 2 adds "swap": see dit_plan_swap_t; version 1 sections have none)
 *
 * The parser (base/json: the text is hostile) validates everything a runtime relies on for
 * memory safety: op names and arity, value indices, arena ranges inside arena_bytes, every temp
 * written by exactly one step before it is read, inputs and weights never written, unique io
 * names, kernel launch limits and module hashes; and the offload section against the steps
 * (every block's steps contiguous, yield points collective steps of their block). Every member
 * must be one the format defines ("ref" only off the arena, "offset" only on it), and every
 * refusal names its field, e.g. "plan: field 'steps[12].in[1]': expected a value index in
 * [0, 340), found 512". dit_plan_check_bindings checks byte ranges against the weight layout. */
#ifndef DIT_ARTIFACTS_PLAN_H
#define DIT_ARTIFACTS_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "artifacts/manifest.h"
#include "base/dtype.h"
#include "base/hw_profile.h"
#include "base/ops.h"
#include "base/status.h"

#define DIT_PLAN_VERSION 4         /* written; 1 (no offload section), 2 (no work) and 3 (no in-place outputs) are still read */
#define DIT_PLAN_OFFLOAD_VERSION 2  /* written only with a swap; 1 (no swap) is still written and read */
#define DIT_PLAN_MAX_SWAP_FORWARDS 100000
#define DIT_PLAN_MAX_OFFLOAD_BLOCKS 4096
#define DIT_PLAN_MAX_YIELDS 63     /* collectives of one block: its compute in at most 64 windows */
#define DIT_PLAN_MAX_IN 7 /* = DIT_OP_MAX_IN */
#define DIT_PLAN_MAX_OUT 3 /* = DIT_OP_MAX_OUT */

typedef enum dit_storage {
  DIT_STORAGE_ARENA = 0,
  DIT_STORAGE_WEIGHT = 1,
  DIT_STORAGE_INPUT = 2,
  DIT_STORAGE_OUTPUT = 3,
} dit_storage_t;

typedef struct dit_plan_value {
  char *name;
  char *ref; /* NULL for arena values */
  dit_storage_t storage;
  dit_dtype_t dtype;
  int rank;
  int64_t dims[DIT_MAX_RANK];
  uint64_t offset; /* arena values only */
  uint64_t nbytes; /* derived: product(dims) * dtype size */
  /* Outputs only: the index of the input value this output replaces in place (one buffer for
   * both; the plan reads the input before it writes the output), else -1. */
  int32_t updates;
} dit_plan_value_t;

/* A tensor map (the bulk tensor copy engine's descriptor) over one kernel argument. A 2-entry
 * box views the value as the 2-D row view [prod(dims[:-1]), dims[-1]] and is {elements of a row,
 * rows}; a box of 3 to 5 entries, as many as the value's rank, views it in its own dims,
 * innermost first (a video [B, F, H, W, C] as {C, W, H, F, B}). It holds a device address, so
 * the plan keeps only what the runtime needs to encode it at load: which argument, the box and
 * the swizzle. The extents come from the value itself, so a map never reaches outside its
 * tensor. */
#define DIT_PLAN_MAX_TMAPS 4
#define DIT_PLAN_TMAP_MAX_RANK 5
typedef struct dit_plan_tmap {
  uint32_t arg;     /* index into the pointer arguments (outputs, then inputs) */
  uint32_t box[DIT_PLAN_TMAP_MAX_RANK]; /* 1..256 each, innermost first */
  uint32_t swizzle; /* bytes: 0, 32, 64 or 128 */
  uint32_t rank;    /* entries of box: 2 (the row view) to 5 */
} dit_plan_tmap_t;

/* A generated kernel for a step (GPU targets): its modules are "kernels" blobs of the bundle,
 * cubin for the target arch and PTX for later ones (none for arch-specific code such as
 * sm_90a's); arguments are the step's output pointers, its input pointers, then its tensor
 * maps by value. */
typedef struct dit_plan_kernel {
  char cubin[DIT_HASH_HEX];
  char ptx[DIT_HASH_HEX]; /* "" when the module has no portable PTX */
  char entry[32];
  uint32_t grid[3], block[3];
  uint32_t smem;          /* dynamic shared memory bytes */
  char source[8];         /* the generator: "nvrtc" or "mlir" (diagnostic) */
  int n_tmaps;
  dit_plan_tmap_t tmaps[DIT_PLAN_MAX_TMAPS];
} dit_plan_kernel_t;

typedef struct dit_plan_step {
  dit_op_kind_t kind;
  int n_in, n_out;
  int32_t in[DIT_PLAN_MAX_IN];
  int32_t out[DIT_PLAN_MAX_OUT];
  dit_attrs_t attrs;
  int32_t block;
  int has_kernel;           /* else the backend runs the op itself (e.g. a library GEMM) */
  dit_plan_kernel_t kernel;
} dit_plan_step_t;

/* One block of the offload schedule. Its weights are [lo, hi) of the rank's weight blob:
 * [lo, split) stays resident, [split, hi) streams into a staging slot in chunks. */
typedef struct dit_plan_offload_block {
  uint32_t index;                   /* the block index plan steps carry (its position) */
  uint64_t lo, hi, split;           /* split: lo + resident_bytes, on a tensor boundary */
  uint32_t chunks, resident_chunks; /* of the whole range, in chunk_bytes (layerwise: 1) */
  uint32_t n_yields;
  uint32_t *yield_steps;            /* its collective steps, ascending */
  uint32_t *window_chunks;          /* n_yields + 1 entries; NULL when absent (layerwise) */
  size_t first_step, last_step;     /* derived at parse: its steps are first..last */
  /* the planner's figures (for people; the runtime reads none) */
  double flops, f_star, t_comp_ms, t_pref_ms, t_coll_ms, resident;
} dit_plan_offload_block_t;

typedef enum dit_plan_offload_mode {
  DIT_PLAN_OFFLOAD_NONE = 0,
  DIT_PLAN_OFFLOAD_LAYERWISE = 1,
  DIT_PLAN_OFFLOAD_CHUNKED = 2,
} dit_plan_offload_mode_t;

/* The expert swap of a two-expert pipeline under a memory budget (offload section version 2,
 * in the plan of the expert that takes over, transformer_2): its resident set (the head, the
 * tail and every block's resident part, in that order, cut into chunks of chunk_bytes per
 * part) is loaded from host memory during the last `forwards` forwards of the expert before it,
 * chunks_per_block chunks after each of that expert's blocks, on its copy queue; at the switch
 * the previous expert's weights leave the device. */
typedef struct dit_plan_swap {
  int present;
  uint64_t bytes;                /* the resident set: head + tail + the blocks' resident parts */
  uint64_t chunk_bytes;
  uint32_t chunks;               /* sum over its parts of ceil(part / chunk_bytes) */
  uint32_t chunks_per_block;
  uint32_t forwards;             /* forwards * chunks_per_block * the outgoing expert's blocks >= chunks */
  double predicted_stall_ms;     /* the first forward after the switch waits for this */
  uint64_t predicted_peak_bytes; /* the pipeline's device peak (both experts at the switch) */
} dit_plan_swap_t;

typedef struct dit_plan_offload {
  dit_plan_offload_mode_t mode;     /* NONE: no section, every weight resident */
  uint64_t chunk_bytes;             /* the copy unit (chunked) */
  uint64_t head_bytes;              /* weights before the blocks: [0, head_bytes) */
  uint64_t tail_offset, tail_bytes; /* weights after them */
  uint64_t overhead_bytes;          /* of the predicted peak: the runtime's own device memory */
  uint64_t predicted_peak_bytes, resident_peak_bytes;
  double predicted_step_ms, resident_step_ms;
  dit_hw_profile_t profile;         /* what the planner assumed */
  size_t n_blocks;
  dit_plan_offload_block_t *blocks;
  dit_plan_swap_t swap;             /* version 2 */
} dit_plan_offload_t;

typedef struct dit_plan_work {
  int present;               /* 0: a plan older than version 3 */
  double flops;              /* floating-point operations of one forward of this rank */
  uint64_t collectives;      /* collective steps of one forward */
  uint64_t collective_bytes; /* the bytes they move, as the compiler counts them */
} dit_plan_work_t;

typedef struct dit_plan {
  uint64_t arena_bytes;
  size_t n_values;
  dit_plan_value_t *values;
  size_t n_steps;
  dit_plan_step_t *steps;
  dit_plan_offload_t offload;
  dit_plan_work_t work;
} dit_plan_t;

/* 1 when step s only names bytes its inputs already hold (the memory plan made it a view; the
 * runtime skips it): a reshape whose output is its input's bytes, a slice of one item's tokens
 * that lies over them, or a concat whose output has nothing but ones before the joined dim and
 * whose inputs lie side by side, in order, exactly over it. */
int dit_plan_step_is_view(const dit_plan_t *p, const dit_plan_step_t *s);

/* Deterministic JSON (caller frees). */
dit_status_t dit_plan_to_json(const dit_plan_t *p, char **out_text);
/* Parses and validates (see above); `what` names the source in errors. Caller owns *out. */
dit_status_t dit_plan_parse(const char *text, size_t len, const char *what, dit_plan_t **out);
void dit_plan_free(dit_plan_t *p);

/* Checks the plan against the manifest: every weight value names a tensor of `weights` with
 * the same dtype and shape, every input/output value matches the manifest's io entry of that
 * name, every io entry is used, and every kernel module is a "kernels" blob. */
dit_status_t dit_plan_check_bindings(const dit_plan_t *p, const dit_manifest_t *m,
                                     const dit_manifest_weights_t *weights, const char *what);

/* The offload section against a weight layout (blob size from the manifest's blob entry):
 * blocks ascending, disjoint and aligned, each range spanning exactly the tensors inside it,
 * every other tensor in the head or the tail, each resident prefix the resident chunks cut
 * back to whole tensors, and every weight a block's steps read inside that block. Called by
 * dit_plan_check_bindings; OK when the plan has no section. */
dit_status_t dit_plan_check_offload(const dit_plan_t *p, const dit_manifest_t *m, const dit_manifest_weights_t *weights,
                                    const char *what);
/* The resident set an expert swap moves: the head, the tail and every block's resident part
 * (bytes), and the chunks of chunk_bytes they make, each part cut on its own (0 chunks when
 * chunk_bytes is 0). */
void dit_plan_swap_totals(const dit_plan_offload_t *o, uint64_t chunk_bytes, uint64_t *out_bytes, uint64_t *out_chunks);
/* The swap's fields as the plan writes them, as object "swap" of parent (NULL: out of memory). */
cJSON *dit_plan_swap_to_json(const dit_plan_swap_t *w, cJSON *parent);
/* Frees the section's arrays and clears it (no offload). */
void dit_plan_offload_clear(dit_plan_offload_t *o);
const char *dit_plan_offload_mode_name(dit_plan_offload_mode_t mode);
/* Prints the section as `ditc inspect` shows it (nothing when there is none). */
void dit_plan_offload_print(const dit_plan_offload_t *o, FILE *f);
/* Prints rank 0's offload section of an open bundle (artifacts/bundle.h), or why its plan
 * cannot be read. */
struct dit_bundle;
void dit_bundle_print_offload(struct dit_bundle *b, FILE *f);

/* Parses a storage name; -1 if unknown. */
int dit_storage_parse(const char *name, dit_storage_t *out);
const char *dit_storage_name(dit_storage_t s);

#endif
