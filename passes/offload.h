/* The F* overlap model and the weight-offload planner (the ChunkFlow seed, §3): per block,
 * whether streaming its weights from host memory hides behind its compute, and which fraction
 * of each block's weights to keep resident for a memory budget or a latency target (pure
 * arithmetic over per-block FLOPs and bytes, so it can be checked exactly); and the graph work
 * behind it: which weights each block reads, each block's work and collectives, and the
 * windows of its compute between collectives. Block membership comes from the graph (the
 * frontend tags every op with its block), never from weight names. */
#ifndef DIT_PASSES_OFFLOAD_H
#define DIT_PASSES_OFFLOAD_H

#include <stdint.h>

#include "base/hw_profile.h"
#include "base/status.h"
#include "ir/graph.h"

typedef enum dit_offload_mode { DIT_OFFLOAD_NONE = 0, DIT_OFFLOAD_LAYERWISE = 1, DIT_OFFLOAD_CHUNKED = 2 } dit_offload_mode_t;

typedef struct dit_offload_block {
  double flops;          /* per GPU, after sharding */
  uint64_t offset;       /* where its weights start in the blob */
  uint64_t bytes;        /* the block's weights (B_pref with nothing resident) */
  uint32_t steps;        /* plan steps */
  double coll_count, coll_bytes; /* its collectives, and the bytes each rank hands them */
  /* outputs */
  double f_star;         /* FLOPs above which the whole block's prefetch hides */
  double t_comp_ms, t_pref_ms; /* t_pref for the streamed part */
  double t_coll_ms;      /* its collectives (0 where the profile does not model them) */
  double resident;       /* fraction kept on the device: whole chunks, cut back to whole tensors */
  uint64_t resident_bytes;
  uint32_t chunks, resident_chunks;
} dit_offload_block_t;

typedef struct dit_offload_request {
  dit_offload_mode_t mode;
  uint64_t chunk_bytes;       /* the copy unit (chunked; layerwise uses whole blocks) */
  double residency;           /* < 0: not given */
  double memory_budget_bytes; /* <= 0: not given */
  double latency_target_ms;   /* <= 0: not given */
  uint64_t other_bytes;       /* weights outside the blocks (always resident) plus activations */
  /* What a resident prefix of `want` bytes of the block at `offset` becomes once cut back to
   * whole tensors as the runtime does; NULL: bytes are divisible anywhere. */
  uint64_t (*whole_tensors)(void *ctx, uint64_t offset, uint64_t bytes, uint64_t want);
  void *ctx;
} dit_offload_request_t;

typedef struct dit_offload_result {
  double step_ms;         /* predicted forward time */
  double none_step_ms;    /* the same with every weight resident */
  uint64_t peak_bytes;    /* predicted device memory */
  uint64_t none_peak_bytes;
} dit_offload_result_t;

/* Fills every block's outputs and the totals. Blocks run in order; block i+1's streamed part
 * loads while block i computes (chunked: only while it computes, never beside its collectives;
 * layerwise: beside them too, contention not modeled); the first block's hides behind the
 * last block of the previous forward where the runtime loads it across forwards. Memory: resident parts, plus
 * two staging slots the size of the largest streamed part, plus other_bytes. A budget picks the
 * largest uniform resident fraction that fits (an error naming both numbers when even none
 * fits); a latency target the smallest per-block fractions that meet it. */
dit_status_t dit_offload_plan(const dit_hw_profile_t *hw, const dit_offload_request_t *req, dit_offload_block_t *blocks,
                              int n_blocks, dit_offload_result_t *out);

/* Communication-aware pacing: a block's collectives cut its compute into windows (before the
 * first, between two, after the last); the next block's chunks load only inside windows, so
 * they never share the host link with a collective. The number of whole chunks of chunk_bytes
 * whose load hides behind a window of `flops`. */
uint32_t dit_offload_window_chunks(const dit_hw_profile_t *hw, double flops, uint32_t steps, uint64_t chunk_bytes);

/* The compute time of `flops` in `steps` plan steps, ms: flops at the profile's rate plus the
 * per-step overhead. */
double dit_offload_compute_ms(const dit_hw_profile_t *hw, double flops, uint32_t steps);


/* ---- the graph's blocks ---- */

#define DIT_OFFLOAD_ALL_BLOCKS (-2147483647 - 1) /* dit_offload_block_work over the whole graph */
#define DIT_OFFLOAD_MAX_WINDOWS 64               /* windows of a block's compute between collectives */

/* The number of blocks the graph's ops are tagged with (the largest block index + 1). */
int dit_offload_graph_blocks(const dit_graph_t *g);

/* Per value of the graph: the block whose ops read it when it is a weight read only inside one
 * block; -1 for any other value (a weight outside the blocks or read by several). out has
 * dit_graph_num_values(g) entries. */
void dit_offload_weight_blocks(const dit_graph_t *g, int32_t *out);

/* Adds block `block`'s op count (its plan steps: lowering keeps one step per op), collectives
 * and the bytes each rank hands them to b (DIT_OFFLOAD_ALL_BLOCKS: the whole graph). */
void dit_offload_block_work(const dit_graph_t *g, int block, dit_offload_block_t *b);

/* A block's collectives cut its compute into windows (before the first, between two, after the
 * last). yield_ops: the collectives' op positions in the scheduled graph (the chunks scheduled
 * after one wait for it); window_chunks: per window, the whole chunks of chunk_bytes whose load
 * hides behind it. */
typedef struct dit_offload_windows {
  int n_yields;
  int32_t yield_ops[DIT_OFFLOAD_MAX_WINDOWS - 1];
  uint32_t window_chunks[DIT_OFFLOAD_MAX_WINDOWS];
} dit_offload_windows_t;
dit_status_t dit_offload_block_windows(const dit_hw_profile_t *hw, const dit_graph_t *g, int block, uint64_t chunk_bytes,
                                       dit_offload_windows_t *out);

/* The F* plan over the graph's blocks: fills each block's FLOPs, steps and collectives from the
 * graph, then runs dit_offload_plan. The caller fills every block's offset and bytes (where its
 * weights lie), which only the weight layout knows. */
dit_status_t dit_offload_plan_graph(const dit_hw_profile_t *hw, const dit_offload_request_t *req, const dit_graph_t *g,
                                    dit_offload_block_t *blocks, int n_blocks, dit_offload_result_t *out);

#endif
