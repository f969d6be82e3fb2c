/* Files: whole-file reads with a size cap, read-only mappings, durable atomic writes,
 * directory helpers. Every error names the path and the system's reason. */
#ifndef DIT_BASE_FILEIO_H
#define DIT_BASE_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Reads the whole file into a NUL-terminated heap buffer (caller frees). Files larger than
 * max_bytes are refused with OUT_OF_RANGE. */
dit_status_t dit_file_read(const char *path, size_t max_bytes, char **out_data,
                           size_t *out_size);

/* A read-only mapping of a whole file. An empty file maps to data == NULL, size 0. */
typedef struct dit_mapping {
  const uint8_t *data;
  size_t size;
} dit_mapping_t;
dit_status_t dit_file_map(const char *path, dit_mapping_t *out);
void dit_file_unmap(dit_mapping_t *m);

/* Writes data to path through a temporary file in the same directory, fsync, rename. */
dit_status_t dit_file_write_atomic(const char *path, const void *data, size_t size);
/* The same for a file made of n_parts buffers written one after the other. */
dit_status_t dit_file_write_atomic_parts(const char *path, const void *const *parts, const size_t *sizes, int n_parts);
/* Writes (and fsyncs) a new file; fails if it exists. */
dit_status_t dit_file_write_new(const char *path, const void *data, size_t size);

/* mkdir -p. */
dit_status_t dit_mkdirs(const char *path, int mode);
/* rm -rf of a directory we created (no symlink following). Missing is fine. */
dit_status_t dit_remove_tree(const char *path);
/* fsync a directory so a rename inside it is durable. */
dit_status_t dit_fsync_dir(const char *path);

int dit_path_exists(const char *path);
int dit_is_dir(const char *path);

/* snprintf into a fixed buffer; returns an OUT_OF_RANGE status if truncated. */
dit_status_t dit_path_join(char *out, size_t cap, const char *a, const char *b);

#endif
