/* The DiT graph IR: SSA values with shape and dtype, ops from the catalog in base/ops.def,
 * a builder that infers output shapes, a verifier, a textual printer and cost counts. */
#ifndef DIT_IR_GRAPH_H
#define DIT_IR_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "base/dtype.h"
#include "base/ops.h"
#include "base/status.h"

typedef int32_t dit_vid_t; /* value index; -1 = none */

typedef enum dit_value_kind {
  DIT_VALUE_TEMP = 0,   /* produced by an op */
  DIT_VALUE_INPUT = 1,  /* supplied by the caller at run time */
  DIT_VALUE_WEIGHT = 2, /* a checkpoint tensor */
} dit_value_kind_t;

typedef struct dit_value {
  char *name;        /* diagnostic name, e.g. "blocks.3.attn1.q" */
  char *ref;         /* checkpoint key (weights) or io name (inputs, outputs); may be NULL */
  dit_value_kind_t kind;
  int is_output;     /* returned to the caller under `ref` */
  /* An output that overwrites graph input `updates` in place (the runtime gives both one buffer:
   * a decoder's causal cache, read and then replaced by its next state), else -1. */
  dit_vid_t updates;
  dit_dtype_t dtype;
  int rank;
  int64_t dims[DIT_MAX_RANK];
  int32_t producer;  /* op index, -1 for inputs and weights */
  int64_t offset;    /* arena offset once memory-planned, else -1 */
  /* Weights of one tensor-parallel shard: dims[slice_dim] elements of the checkpoint tensor
   * starting at slice_start along that dim; slice_dim -1 for the whole tensor. */
  int slice_dim;
  int64_t slice_start;
  /* The checkpoint key of a weight whose ref differs from it (two slices of one checkpoint
   * tensor in one graph need two names); NULL: ref is the key. */
  char *src;
  /* A constant: a weight whose bytes (dtype, dims) the frontend computed from the config and
   * shape (a rotary table), owned by the graph; NULL for checkpoint tensors. */
  void *data;
} dit_value_t;

#define DIT_OP_MAX_IN 7 /* attention_fp8: q8, qs, k8, ks, vt8, vs and a tile schedule */
#define DIT_OP_MAX_OUT 3 /* layernorm and adaln with a residual and a row quantizer folded in: codes, sum, scales */

typedef struct dit_op {
  dit_op_kind_t kind;
  int n_in, n_out;
  dit_vid_t in[DIT_OP_MAX_IN];
  dit_vid_t out[DIT_OP_MAX_OUT];
  dit_attrs_t attrs;
  int32_t block; /* transformer block index, -1 outside the blocks */
} dit_op_t;

typedef struct dit_graph dit_graph_t;

dit_status_t dit_graph_create(dit_graph_t **out);
void dit_graph_destroy(dit_graph_t *g);

/* Builder. Functions return the new value id, or -1 after recording a sticky error (bad
 * operands, out of memory) that dit_graph_status reports; building may continue, so a
 * frontend checks once at the end. */
dit_vid_t dit_graph_input(dit_graph_t *g, const char *name, dit_dtype_t dtype, int rank,
                          const int64_t *dims);
dit_vid_t dit_graph_weight(dit_graph_t *g, const char *key, dit_dtype_t dtype, int rank,
                           const int64_t *dims);
/* A slice of a checkpoint tensor whose full shape is full_dims: count elements along dim from
 * start (a tensor-parallel shard). */
dit_vid_t dit_graph_weight_slice(dit_graph_t *g, const char *key, dit_dtype_t dtype, int rank,
                                 const int64_t *full_dims, int dim, int64_t start, int64_t count);
/* Like dit_graph_weight_slice, for a second slice of the same checkpoint tensor in one graph:
 * the value is named ref, its bytes are key's. */
dit_vid_t dit_graph_weight_slice_as(dit_graph_t *g, const char *ref, const char *key, dit_dtype_t dtype, int rank,
                                    const int64_t *full_dims, int dim, int64_t start, int64_t count);
/* A constant weight named key (unique within the graph, not a checkpoint key): the bytes of
 * numel(dims) elements of dtype at data are copied. The ranks of a context-parallel group share
 * one weights blob, so a constant must be the same on all of them (slice it per rank with ops). */
dit_vid_t dit_graph_constant(dit_graph_t *g, const char *key, dit_dtype_t dtype, int rank, const int64_t *dims,
                             const void *data);
/* Appends an op with one output whose shape is inferred from the operands and attrs. */
dit_vid_t dit_graph_op(dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_in,
                       const dit_attrs_t *attrs, dit_dtype_t out_dtype, const char *name);
/* Ops with two outputs (attention with lse): both ids through out_ids. */
dit_status_t dit_graph_op2(dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_in,
                           const dit_attrs_t *attrs, const dit_dtype_t out_dtypes[2],
                           const char *name, dit_vid_t out_ids[2]);
void dit_graph_mark_output(dit_graph_t *g, dit_vid_t v, const char *name);
/* Marks v an output that replaces graph input `input` in place: same dtype and size, and every op
 * that reads the input comes before v's producer (checked by dit_graph_check_updates once the
 * graph is scheduled). */
void dit_graph_mark_output_updating(dit_graph_t *g, dit_vid_t v, const char *name, dit_vid_t input);
/* Every in-place output's input is read only by ops before the output's producer. */
dit_status_t dit_graph_check_updates(const dit_graph_t *g);
/* Ops appended from now on are tagged with this block index (-1 to clear). */
void dit_graph_set_block(dit_graph_t *g, int32_t block);
/* The first recorded builder error (borrowed), or OK. */
dit_status_t dit_graph_status(const dit_graph_t *g);

/* Inspection. Pointers stay valid until the graph is modified. */
int32_t dit_graph_num_values(const dit_graph_t *g);
int32_t dit_graph_num_ops(const dit_graph_t *g);
dit_value_t *dit_graph_value(dit_graph_t *g, dit_vid_t v);
const dit_value_t *dit_graph_cvalue(const dit_graph_t *g, dit_vid_t v);
dit_op_t *dit_graph_op_at(dit_graph_t *g, int32_t i);
const dit_op_t *dit_graph_cop_at(const dit_graph_t *g, int32_t i);

/* Keeps only ops for which keep[i] != 0 and the values still referenced (inputs and outputs
 * always stay); value ids are renumbered. */
dit_status_t dit_graph_compact(dit_graph_t *g, const uint8_t *keep_ops);

/* Puts the ops in the order `order` gives (a permutation of 0..n_ops-1, ops[order[0]] first).
 * Refused, and nothing changes, unless it is a permutation in which every op comes after the
 * producers of its inputs. */
dit_status_t dit_graph_reorder(dit_graph_t *g, const int32_t *order);

/* Infers an op's output shapes; shared by the builder and the verifier. */
dit_status_t dit_infer_shapes(const dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins,
                              int n_in, const dit_attrs_t *attrs, int n_out,
                              int out_rank[DIT_OP_MAX_OUT],
                              int64_t out_dims[DIT_OP_MAX_OUT][DIT_MAX_RANK]);

/* Checks the output dtypes an op kind fixes (reshape, concat and rope_table keep x's, key_bound
 * writes i32); the other kinds' outputs take the dtype the builder asks for. */
dit_status_t dit_check_out_dtypes(const dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_out,
                                  const dit_dtype_t *out_dtypes);

/* Checks arity, value ids, SSA order (every operand defined before use, every temp produced
 * exactly once), inferred shapes and fixed dtypes equal to recorded ones, and that outputs exist. */
dit_status_t dit_graph_verify(const dit_graph_t *g);

/* Textual form, one line per value/op, stable across runs. */
void dit_graph_print(const dit_graph_t *g, FILE *f);

int64_t dit_value_numel(const dit_value_t *v);
uint64_t dit_value_nbytes(const dit_value_t *v);

/* Arithmetic (multiply-add = 2) and memory traffic (operand and result bytes, each once). */
typedef struct dit_cost {
  double flops;
  double bytes;
} dit_cost_t;
dit_cost_t dit_op_cost(const dit_graph_t *g, const dit_op_t *op);
/* Totals over the graph; per_block (optional, n_blocks entries) gets each block's share. */
dit_cost_t dit_graph_cost(const dit_graph_t *g, dit_cost_t *per_block, int n_blocks);

#endif
