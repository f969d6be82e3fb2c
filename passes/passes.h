/* The pass pipeline: graph -> graph transformations and planners, run in a fixed, printed
 * order; any pass's result can be dumped. */
#ifndef DIT_PASSES_PASSES_H
#define DIT_PASSES_PASSES_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "ir/graph.h"

#define DIT_ARENA_ALIGN 256

typedef struct dit_pass_options {
  const char *dump_after; /* pass name, "all", or NULL */
  FILE *dump;             /* where dumps go (stderr if NULL) */
} dit_pass_options_t;

typedef struct dit_pass_result {
  uint64_t arena_bytes;   /* activation arena size from the memory plan */
  uint64_t naive_bytes;   /* sum of all planned values: what no reuse would take */
  int32_t removed_ops;    /* by dead-code elimination */
  int32_t fused_ops;      /* ops folded into their producers */
  int32_t grouped_ops;    /* linears in groups (passes/group.c) */
} dit_pass_result_t;

/* Pass names in pipeline order, NULL-terminated. */
const char *const *dit_pass_names(void);

/* Runs verify -> dce -> fuse -> schedule -> group -> memplan -> verify. An unknown dump_after
 * name is an error listing the known ones. */
dit_status_t dit_passes_run(dit_graph_t *g, const dit_pass_options_t *opts,
                            dit_pass_result_t *out);

/* Individual passes (also used by tests). */
dit_status_t dit_pass_dce(dit_graph_t *g, dit_pass_result_t *r);
/* Folds an activation into the matrix product that feeds it (linear -> gelu_tanh becomes one
 * linear with act = 1) when nothing else reads the product. */
dit_status_t dit_pass_fuse(dit_graph_t *g, dit_pass_result_t *r);
/* Assigns every temp that is not a graph output an offset in one arena so that values live
 * at the same time never overlap and no op's output overlaps its inputs. */
/* Orders the ops so every collective directly follows the chain producing its input
 * (passes/schedule.c); graphs without collectives keep their order. */
dit_status_t dit_pass_schedule(dit_graph_t *g, dit_pass_result_t *r);
/* Marks runs of consecutive linears that read one x through weights of one shape as groups
 * (attrs group_size, group_at), whose outputs the memory plan lays out at one stride
 * (passes/group.c). */
dit_status_t dit_pass_group(dit_graph_t *g, dit_pass_result_t *r);
dit_status_t dit_pass_memplan(dit_graph_t *g, dit_pass_result_t *r);

#endif
