/* One-file bundle archives (.ditb): a store entry's manifest, signature and blobs in one
 * file, blobs zstd-compressed. Format 1.0, integers little-endian:
 *   header   8 bytes "DITB\r\n\x1a\n", u16 major = 1, u16 minor = 0, u32 flags = 0
 *   records  u32 kind, u32 name_len, u64 raw_size, u64 stored_size, name, stored bytes
 *     1 manifest   the manifest text as is (stored_size == raw_size)
 *     2 signature  optional, right after the manifest; as is (sign.h)
 *     3 blob       one or more zstd frames of raw_size bytes
 *   every record but the end is named by the 32 hex XXH3-128 of its raw bytes, so damage to
 *   any field of the manifest is caught, not only to the inputs the identity covers
 *     4 end        name empty, raw_size = the number of blob records, stored_size 0
 * The manifest comes first, then every blob it lists exactly once and in its order, then
 * the end record, then nothing. Every length is checked against what is left before it is
 * used, and every blob against its size, XXH3-128 and listed SHA-256. */
#ifndef DIT_STORE_ARCHIVE_H
#define DIT_STORE_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "store/store.h"

#define DIT_DITB_MAJOR 1
#define DIT_DITB_MINOR 0

typedef struct dit_ditb_stats {
  size_t blobs;
  uint64_t raw_bytes, file_bytes;
} dit_ditb_stats_t;

/* Writes entry `identity` of st to out_path (through a temporary file and a rename). */
dit_status_t dit_ditb_write(dit_store_t *st, const char *identity, const char *out_path, dit_ditb_stats_t *out);

/* Reads an archive image into st: with trusted_key (may be NULL) its signature is checked
 * before any blob is read; every blob is verified before it enters the store, and the
 * manifest enters last. limits (NULL: the defaults) bound the blob count and the bytes
 * decoded; a refused archive (any error) leaves none of its blobs behind and no entry.
 * out_identity receives the entry's identity. */
dit_status_t dit_ditb_import(dit_store_t *st, const uint8_t *data, size_t size, const char *what,
                             const char *trusted_key, const dit_store_limits_t *limits, char out_identity[33]);

/* The same checks without a store (for fuzzing): blobs are decompressed and hashed, up to
 * max_raw_bytes of them in all (0: no limit). */
dit_status_t dit_ditb_check(const uint8_t *data, size_t size, const char *what, uint64_t max_raw_bytes);

/* 1 if the file at path starts with the archive magic. */
int dit_ditb_is_archive(const char *path);

#endif
