/* A non-owning tensor view used between the executor and the backends. */
#ifndef DIT_RUNTIME_TENSOR_H
#define DIT_RUNTIME_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

typedef struct dit_tensor {
  void *data;
  dit_dtype_t dtype;
  int rank;
  int64_t dims[DIT_MAX_RANK];
} dit_tensor_t;

static inline int64_t dit_tensor_numel(const dit_tensor_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

static inline size_t dit_tensor_nbytes(const dit_tensor_t *t) {
  return (size_t)dit_tensor_numel(t) * dit_dtype_size(t->dtype);
}

#endif
