/* Content hashing: XXH3-128 digests as 32 lowercase hex digits (canonical big-endian order),
 * and the compile identity = XXH3-128 of the canonical JSON of the compile inputs (object keys
 * sorted by byte order at every level, no whitespace). */
#ifndef DIT_ARTIFACTS_IDENTITY_H
#define DIT_ARTIFACTS_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/status.h"

void dit_hash128_hex(const void *data, size_t size, char out_hex[33]);

/* Streaming XXH3-128. */
typedef struct dit_hasher dit_hasher_t;
dit_status_t dit_hasher_create(dit_hasher_t **out);
void dit_hasher_update(dit_hasher_t *h, const void *data, size_t size);
void dit_hasher_hex(const dit_hasher_t *h, char out_hex[33]);
void dit_hasher_destroy(dit_hasher_t *h);

/* 1 if s is exactly 32 lowercase hex digits. */
int dit_is_hash_hex(const char *s);

/* Canonical JSON text (caller frees). */
dit_status_t dit_json_canonical(const cJSON *v, char **out_text);
dit_status_t dit_identity_compute(const cJSON *inputs, char out_hex[33]);

#endif
