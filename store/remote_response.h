/* What a remote store sends back, checked as hostile input (remote.h sends the requests):
 * a blob body (zstd frames decoded as they arrive into a verifying store writer, bounded by
 * the blob's size, the transfer's quota and zstd's worst case on the wire), a manifest body
 * (parsed, its identity the one asked for and recomputed from its inputs, every blob with
 * a SHA-256) and a signature body (the signature file format). Fed from memory here, so
 * the fuzz target tests/fuzz/fuzz_remote_response.c reaches it without a network. */
#ifndef DIT_STORE_REMOTE_RESPONSE_H
#define DIT_STORE_REMOTE_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "artifacts/manifest.h"
#include "base/status.h"
#include "store/store.h"

typedef struct dit_remote_blob_body dit_remote_blob_body_t;

/* A body for blob b of st; q (may be NULL) counts its decoded bytes. `what` (copied) names
 * the body in errors. The caller owns *out. */
dit_status_t dit_remote_blob_body_create(dit_store_t *st, const dit_manifest_blob_t *b, dit_store_quota_t *q,
                                         const char *what, dit_remote_blob_body_t **out);
/* Bytes as they come off the wire. An error refuses the rest of the body. */
dit_status_t dit_remote_blob_body_feed(dit_remote_blob_body_t *k, const void *p, size_t n);
/* Forgets an attempt: the next byte fed starts the body again. */
dit_status_t dit_remote_blob_body_reset(dit_remote_blob_body_t *k);
/* The whole body arrived: its frame must be complete and its bytes the blob's (size,
 * XXH3-128, the manifest's SHA-256); then the blob enters the store. */
dit_status_t dit_remote_blob_body_finish(dit_remote_blob_body_t *k);
uint64_t dit_remote_blob_body_wire_bytes(const dit_remote_blob_body_t *k);
void dit_remote_blob_body_destroy(dit_remote_blob_body_t *k);

/* A manifest body answering GET ac/<identity>: parses it and checks that it records
 * `identity`, that its inputs hash to it, and that every blob lists its SHA-256. The caller
 * owns *out_m. */
dit_status_t dit_remote_manifest_body_check(const char *text, size_t len, const char *identity, const char *what,
                                            dit_manifest_t **out_m);

/* A signature body answering GET ac/<identity>.sig: at most 64 KiB and in the signature file
 * format (sign.h), whoever signed it; trust is the caller's to decide. */
dit_status_t dit_remote_signature_body_check(const char *sig, size_t len, const char *what);

#endif
