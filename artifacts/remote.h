/* The remote store over HTTP, laid out as the Bazel and sccache HTTP caches are:
 *   GET/PUT/HEAD <url>/cas/<hash>            a blob, as a zstd frame of its bytes
 *   GET/PUT/HEAD <url>/ac/<identity>         the manifest (store entry text, uncompressed)
 *   GET/PUT      <url>/ac/<identity>.sig     its signature, when signed (sign.h)
 * Any server that stores PUT bodies and serves them back works (nginx with WebDAV PUT, a
 * bucket behind a proxy). Nothing downloaded is trusted: every blob is checked against its
 * XXH3-128 and the SHA-256 the manifest lists before it enters the local store, and with a
 * trusted key the manifest's signature is checked before any blob is fetched. */
#ifndef DIT_ARTIFACTS_REMOTE_H
#define DIT_ARTIFACTS_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "artifacts/store.h"
#include "base/status.h"

typedef struct dit_remote_options {
  const char *url;    /* http://host[:port][/prefix] or https:// */
  const char *token;  /* bearer token sent as "Authorization: Bearer ..."; NULL: none */
  int timeout_s;      /* connect timeout, and how long a transfer may stall; <= 0: 30 */
  int retries;        /* further attempts after a transient failure; < 0: 3 */
  int verbose;        /* a line per transfer on stderr */
} dit_remote_options_t;

typedef struct dit_remote_stats {
  size_t blobs_transferred, blobs_present;
  uint64_t raw_bytes;  /* blob bytes transferred */
  uint64_t wire_bytes; /* compressed bytes on the wire for them */
  double seconds;
} dit_remote_stats_t;

typedef struct dit_remote dit_remote_t;

/* The caller owns *out. */
dit_status_t dit_remote_create(const dit_remote_options_t *opts, dit_remote_t **out);
void dit_remote_destroy(dit_remote_t *r);

/* 1 if s names an http:// or https:// URL. */
int dit_remote_is_url(const char *s);

/* Uploads entry `identity` of st: every blob the remote lacks (HEAD first), then the
 * signature, then the manifest last, so the remote never lists a manifest whose blobs are
 * missing. A signed entry's signature goes with it. */
dit_status_t dit_remote_push(dit_remote_t *r, dit_store_t *st, const char *identity, dit_remote_stats_t *out);

/* Downloads entry `identity` into st, fetching only the blobs st lacks. With trusted_key
 * (a PEM public key path) an unsigned or wrongly signed manifest is refused before any
 * blob is fetched. An entry already complete in st (and, with a trusted key, signed by it)
 * is used without asking the remote. */
dit_status_t dit_remote_pull(dit_remote_t *r, dit_store_t *st, const char *identity, const char *trusted_key,
                             dit_remote_stats_t *out);

#endif
