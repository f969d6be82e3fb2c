/* Linear groups (passes/group.c) as one batched product: a backend with a strided-batched GEMM
 * (runtime/cuda) makes a whole group at its first member's step when the members' operands lie
 * at one stride apart in its memory. */
#ifndef DIT_RUNTIME_LINEAR_GROUP_H
#define DIT_RUNTIME_LINEAR_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "artifacts/plan.h"
#include "runtime/tensor.h"

/* count products over one x, the i-th with W + i * w_stride, bias + i * bias_stride, writing
 * Y + i * y_stride (strides in elements; bias_stride 0 without biases). */
typedef struct dit_linear_batch {
  int count;
  int64_t w_stride, bias_stride, y_stride;
} dit_linear_batch_t;

#define DIT_LINEAR_GROUP_MAX 16

/* Whether plan step i begins a linear group that one batched product can make: steps
 * i .. i + G - 1 are linears without a kernel of their own, activation or accumulated input,
 * marked members 0 .. G - 1 (attrs group_size, group_at), over one x, with weights, biases and
 * outputs of one shape and dtype each, the members' weights, biases and outputs one stride apart
 * in memory as bound (bound: the plan's values, plan->n_values of them) and the outputs not
 * overlapping; and the plan streams no weights (offload moves them). Sets *b when it does. */
int dit_linear_group(const dit_plan_t *plan, size_t i, const dit_tensor_t *bound, dit_linear_batch_t *b);

#endif
