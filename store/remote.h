/* The remote store over HTTP, laid out as the Bazel and sccache HTTP caches are:
 *   GET/PUT/HEAD <url>/cas/<hash>            a blob, as a zstd frame of its bytes
 *   GET/PUT/HEAD <url>/ac/<identity>         the manifest (store entry text, uncompressed)
 *   GET/PUT      <url>/ac/<identity>.sig     its signature, when signed (sign.h)
 * Any server that stores PUT bodies and serves them back works (nginx with WebDAV PUT, a
 * bucket behind a proxy). Nothing downloaded is trusted: every blob is checked against its
 * XXH3-128 and the SHA-256 the manifest lists before it enters the local store, and with a
 * trusted key the manifest's signature is checked before any blob is fetched. A pull stops at
 * its limits (store.h) counted on the bytes that arrive, not on the manifest's claims. A
 * bearer token goes over plain http:// only to a loopback host unless insecure_token, and
 * redirects are never followed, so the token reaches no other host. */
#ifndef DIT_STORE_REMOTE_H
#define DIT_STORE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "store/store.h"

typedef struct dit_remote_options {
  const char *url;    /* http://host[:port][/prefix] or https:// */
  const char *token;  /* bearer token sent as "Authorization: Bearer ..."; NULL: none */
  int insecure_token; /* also send it over plain http:// to a host that is not loopback */
  int timeout_s;      /* connect timeout, and how long a transfer may stall; <= 0: 30 */
  int retries;        /* further attempts after a transient failure; < 0: 3 */
  int verbose;        /* a line per transfer on stderr */
  dit_store_limits_t limits; /* what one pull may bring in; zeros: the defaults */
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

/* 1 if the URL's host is loopback: 127.0.0.0/8, ::1 (also IPv4-mapped) or "localhost". The
 * URL is read by libcurl's own parser, the one that picks the host to connect to. */
int dit_remote_url_is_loopback(const char *url);

/* Uploads entry `identity` of st: every blob the remote lacks (HEAD first), then the
 * signature, then the manifest last, so the remote never lists a manifest whose blobs are
 * missing. A signed entry's signature goes with it. */
dit_status_t dit_remote_push(dit_remote_t *r, dit_store_t *st, const char *identity, dit_remote_stats_t *out);

/* Downloads entry `identity` into st, fetching only the blobs st lacks. With trusted_key
 * (a PEM public key path) an unsigned or wrongly signed manifest is refused before any
 * blob is fetched. An entry already complete in st (and, with a trusted key, signed by it)
 * is used without asking the remote. Past the limits the pull stops with RESOURCE_EXHAUSTED
 * and takes out the blobs it entered; after other failures verified blobs stay (a pull
 * run again does not fetch them again), the manifest is only published when all arrived. */
dit_status_t dit_remote_pull(dit_remote_t *r, dit_store_t *st, const char *identity, const char *trusted_key,
                             dit_remote_stats_t *out);

#endif
