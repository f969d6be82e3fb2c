/* safetensors checkpoints: a bounds-checked parser over a read-only mapping, sharded
 * checkpoints through *.safetensors.index.json, and a writer. */
#ifndef DIT_ARTIFACTS_SAFETENSORS_H
#define DIT_ARTIFACTS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

typedef struct dit_st_tensor {
  const char *name;     /* owned by the checkpoint */
  dit_dtype_t dtype;
  int rank;
  int64_t dims[DIT_MAX_RANK];
  uint64_t nbytes;      /* product(dims) * dtype size */
  const void *data;     /* inside the mapping; valid until the checkpoint is closed */
  const char *file;     /* the file that holds it (owned by the checkpoint) */
} dit_st_tensor_t;

typedef struct dit_safetensors dit_safetensors_t;

/* Opens a checkpoint: a single .safetensors file, a *.safetensors.index.json (shards are
 * resolved relative to it), or a directory holding either (diffusers' names
 * diffusion_pytorch_model.safetensors[.index.json] first, else the only *.safetensors or
 * *.safetensors.index.json in it). Every header is validated: length, JSON, dtype, shape x
 * element size = byte range, ranges in bounds and not overlapping, names unique across shards
 * and matching the index. The caller owns *out (dit_safetensors_close). */
dit_status_t dit_safetensors_open(const char *path, dit_safetensors_t **out);

/* Parses one safetensors image in memory; `what` names it in errors. The data is borrowed
 * and must outlive the result. */
dit_status_t dit_safetensors_parse(const uint8_t *data, size_t size, const char *what,
                                   dit_safetensors_t **out);

void dit_safetensors_close(dit_safetensors_t *st);

/* Tensors sorted by name (byte order). */
size_t dit_safetensors_count(const dit_safetensors_t *st);
const dit_st_tensor_t *dit_safetensors_at(const dit_safetensors_t *st, size_t i);
/* NULL if absent. */
const dit_st_tensor_t *dit_safetensors_find(const dit_safetensors_t *st, const char *name);

/* Safetensors dtype strings ("F32", "BF16", "F16", "I64", "I32") <-> ours. */
const char *dit_st_dtype_name(dit_dtype_t t);

/* Writer: collects tensors (copying their bytes) and writes one file atomically, tensors
 * sorted by name, header padded with spaces to a multiple of 8. */
typedef struct dit_st_writer dit_st_writer_t;
dit_status_t dit_st_writer_create(dit_st_writer_t **out);
dit_status_t dit_st_writer_add(dit_st_writer_t *w, const char *name, dit_dtype_t dtype, int rank,
                               const int64_t *dims, const void *data);
/* Optional string metadata ("__metadata__"). */
dit_status_t dit_st_writer_set_metadata(dit_st_writer_t *w, const char *key, const char *value);
dit_status_t dit_st_writer_write(dit_st_writer_t *w, const char *path);
/* The bytes dit_st_writer_write would write, in memory (`what` names them in errors); the
 * caller frees *out. */
dit_status_t dit_st_writer_serialize(dit_st_writer_t *w, const char *what, uint8_t **out, size_t *out_len);
void dit_st_writer_destroy(dit_st_writer_t *w);

#endif
