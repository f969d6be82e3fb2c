/* The local content-addressed store: blobs addressed by their XXH3-128, an action cache from
 * compile identity to manifest, materialized bundle directories, and the checkpoint-hash
 * memo. Layout under the store root:
 *   cas/<first 2 hex>/<hash>   blobs (read-only files); bundles sharing a blob store it once
 *   ac/<identity>              the bundle's manifest.json, every blob listed with its sha256
 *   ac/<identity>.xxh128       XXH3-128 of those bytes (as a bundle's manifest.xxh128)
 *   ac/<identity>.sig          optional ed25519 signature of that manifest (sign.h)
 *   bundles/<identity>/        bundle directories whose blobs are hard links into cas/
 *   memo/<key>.json            checkpoint content-hash memo (compiler side)
 *   tmp/                       private temporaries, renamed into place when complete
 *   lock                       flock: shared while publishing, exclusive for gc and rm
 * Blobs are published before the manifest that names them, each by one rename or link, so
 * a reader never sees a torn file or a manifest whose blobs are missing. Several processes
 * publishing the same identity leave one entry: the first manifest stays (the same identity
 * means equivalent bundles). */
#ifndef DIT_STORE_STORE_H
#define DIT_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "artifacts/manifest.h"
#include "base/status.h"

typedef struct dit_store dit_store_t;
typedef struct dit_store_quota dit_store_quota_t;

/* Opens (creating the layout if missing) the store at root. The caller owns *out. */
dit_status_t dit_store_open(const char *root, dit_store_t **out);
void dit_store_close(dit_store_t *st);
const char *dit_store_root(const dit_store_t *st);

/* The writer lock. Every publishing call below takes it shared by itself; a caller that
 * publishes blobs and then their manifest in several calls holds it around all of them so
 * gc cannot sweep the blobs in between. Nests; exclusive cannot nest inside shared. */
dit_status_t dit_store_lock(dit_store_t *st, int exclusive);
void dit_store_unlock(dit_store_t *st);

/* ---- blobs ---- */

/* 1 if cas holds blob `hash` as a regular file of `size` bytes (size is not hashed). */
int dit_store_has_blob(const dit_store_t *st, const char *hash, uint64_t size);
/* The path of blob `hash` (caller frees); it need not exist. */
dit_status_t dit_store_blob_path(const dit_store_t *st, const char *hash, char **out_path);
/* Puts the store's blob `hash` of `size` bytes at dst: a hard link, or a copy across file
 * systems; NOT_FOUND when the store lacks it. An existing dst is taken as it (by its name). */
dit_status_t dit_store_blob_place(dit_store_t *st, const char *hash, uint64_t size, const char *dst);

/* A blob arriving from outside (a remote, an archive): streamed into a private temporary
 * file while its XXH3-128 and SHA-256 are computed, and entered into cas only by commit,
 * after its size, hash and (when sha256 is not NULL) SHA-256 match. More bytes than `size`
 * are refused as they arrive. Destroying an uncommitted writer discards everything. */
typedef struct dit_store_blob_writer dit_store_blob_writer_t;
dit_status_t dit_store_blob_writer_create(dit_store_t *st, const char *hash, uint64_t size,
                                          const char *sha256, const char *source,
                                          dit_store_blob_writer_t **out);
dit_status_t dit_store_blob_writer_append(dit_store_blob_writer_t *w, const void *data, size_t n);
/* Drops what was written so far (a retried download starts again). */
dit_status_t dit_store_blob_writer_reset(dit_store_blob_writer_t *w);
uint64_t dit_store_blob_writer_received(const dit_store_blob_writer_t *w);
/* Every byte appended from now on is charged to q (not owned; it must outlive w), and a
 * committed blob is recorded there. */
void dit_store_blob_writer_set_quota(dit_store_blob_writer_t *w, dit_store_quota_t *q);
dit_status_t dit_store_blob_writer_commit(dit_store_blob_writer_t *w);
void dit_store_blob_writer_destroy(dit_store_blob_writer_t *w);

/* ---- limits on what one pull or import from outside may add ---- */

#define DIT_STORE_DEFAULT_MAX_BYTES ((uint64_t)256 << 30)
#define DIT_STORE_DEFAULT_MAX_BLOBS ((uint64_t)65536)

typedef struct dit_store_limits {
  uint64_t max_bytes; /* blob bytes, counted as they are decompressed; 0: the default */
  uint64_t max_blobs; /* blobs one manifest or archive may list; 0: the default */
} dit_store_limits_t;

/* The running count of one pull or import against its limits. A manifest's sizes are only
 * claims: the count grows with the bytes that actually arrive, and every writer given the
 * quota refuses the byte that would pass the limit. It also remembers the blobs its writers
 * entered into cas, so a refused transfer can take them out again. */
/* limits may be NULL (the defaults); `what` (copied) names the transfer in out-of-memory
 * errors (the callers annotate the limit errors). */
dit_status_t dit_store_quota_create(const dit_store_limits_t *limits, const char *what, dit_store_quota_t **out);
void dit_store_quota_destroy(dit_store_quota_t *q);
/* Before anything is fetched: refuses a manifest listing more blobs than allowed, or whose
 * blobs missing from st (NULL: all of them) claim more bytes than allowed. */
dit_status_t dit_store_quota_check_manifest(dit_store_quota_t *q, const dit_store_t *st, const dit_manifest_t *m);
/* Counts n more bytes; RESOURCE_EXHAUSTED naming the limit and the count when they would
 * pass it (nothing is counted then). */
dit_status_t dit_store_quota_charge(dit_store_quota_t *q, uint64_t n);
/* Gives back bytes that were dropped (a download that starts again). */
void dit_store_quota_refund(dit_store_quota_t *q, uint64_t n);
uint64_t dit_store_quota_bytes(const dit_store_quota_t *q);
/* 1 once a limit refused something. */
int dit_store_quota_exceeded(const dit_store_quota_t *q);
/* Takes the exclusive lock (the caller must hold none) and removes the blobs this quota's
 * writers entered that no entry lists: a refused transfer leaves nothing behind. */
dit_status_t dit_store_quota_rollback(dit_store_quota_t *q, dit_store_t *st);

/* ---- the action cache: identity -> manifest ---- */

/* Reads and validates ac/<identity> (parses, recorded identity == recomputed == the name)
 * and marks the entry used (its mtime is the last use gc goes by). Any of the outputs may
 * be NULL; the caller owns what it receives. NOT_FOUND when there is no entry. */
dit_status_t dit_store_get_manifest(dit_store_t *st, const char *identity, dit_manifest_t **out_m,
                                    char **out_text, size_t *out_len);
/* 1 if the entry exists, validates and every blob it lists is in cas with its size. */
int dit_store_has_entry(dit_store_t *st, const char *identity);

/* Publishes a manifest text as ac/<identity> after checking it (parses, names identity,
 * every blob listed with a sha256 and present in cas). sig_text (may be NULL) is published
 * first as ac/<identity>.sig. An existing entry is kept; *out_existed (may be NULL) says so. */
dit_status_t dit_store_put_manifest(dit_store_t *st, const char *identity, const char *text,
                                    size_t len, const char *sig_text, int *out_existed);

/* The entry's signature text; NOT_FOUND when it is unsigned. Caller frees. */
dit_status_t dit_store_get_signature(dit_store_t *st, const char *identity, char **out_text,
                                     size_t *out_len);
dit_status_t dit_store_put_signature(dit_store_t *st, const char *identity, const char *sig_text);

/* Adds a bundle directory: opened and validated, every blob hashed (XXH3-128 and SHA-256)
 * and entered into cas (hard-linked when the bundle lies in this store's bundles/, copied
 * otherwise, so a later edit of a file outside the store cannot reach the store), then the
 * manifest with sha256 fields published. out_identity may be NULL. */
dit_status_t dit_store_import_bundle(dit_store_t *st, const char *bundle_dir,
                                     char out_identity[DIT_HASH_HEX]);

/* Makes parent_dir/<identity> (parent_dir NULL: <root>/bundles) a bundle directory of the
 * entry, unless a valid one is already there: manifest.json (the entry's text),
 * manifest.xxh128, manifest.sig when signed, and blobs/ as hard links into cas (copies across
 * file systems), built aside and renamed into place. *out_path is the directory (caller
 * frees). The bundle reader then validates it as any other bundle directory. */
dit_status_t dit_store_materialize(dit_store_t *st, const char *identity, const char *parent_dir,
                                   char **out_path);

/* ---- listing and maintenance ---- */

typedef struct dit_store_entry {
  char identity[DIT_HASH_HEX];
  int64_t last_used;       /* unix seconds */
  uint64_t bytes;          /* sum of the listed blobs' sizes */
  int is_signed;
  int complete;            /* every listed blob present with its size */
  dit_manifest_t *manifest;/* NULL when the entry does not validate */
  char *error;             /* why it does not validate, else NULL */
} dit_store_entry_t;

/* Every entry, most recently used first. Caller frees with dit_store_entries_free. */
dit_status_t dit_store_list(dit_store_t *st, dit_store_entry_t **out, size_t *out_n);
void dit_store_entries_free(dit_store_entry_t *e, size_t n);

typedef struct dit_store_stats {
  size_t entries, blobs;           /* what is left */
  uint64_t bytes;                  /* bytes of the blobs left */
  size_t entries_removed, blobs_removed;
  uint64_t bytes_removed;
  size_t bad_entries, bad_blobs;   /* verify: entries that fail, blobs whose bytes are wrong */
} dit_store_stats_t;

/* Rehashes every blob (a wrong one is removed, so a later publish or pull replaces it) and
 * checks every entry; each problem is reported on `report` naming the file with expected and
 * found values. Returns OK with the counts; the caller decides the exit status. */
dit_status_t dit_store_verify(dit_store_t *st, FILE *report, dit_store_stats_t *out);

/* Removes one entry (its manifest, signature and bundle directory) and the blobs no other
 * entry lists. NOT_FOUND if there is no such entry. */
dit_status_t dit_store_remove(dit_store_t *st, const char *identity, dit_store_stats_t *out);

/* Drops entries unused for more than max_age_s (< 0: no age limit), then least recently
 * used entries until the blobs left take at most max_bytes (0: no size limit), then every
 * blob no entry lists and stale temporaries. */
dit_status_t dit_store_gc(dit_store_t *st, uint64_t max_bytes, int64_t max_age_s,
                          dit_store_stats_t *out);

/* ---- memo ---- */

/* A small text record under memo/<key>.json (key: 32 hex). NOT_FOUND when absent. */
dit_status_t dit_store_memo_read(dit_store_t *st, const char *key, char **out_text, size_t *out_len);
dit_status_t dit_store_memo_write(dit_store_t *st, const char *key, const char *text);

/* ---- helpers shared by the remote and archive code ---- */

/* "<n> B", "<n.n> KiB/MiB/GiB" into out. */
void dit_format_bytes(uint64_t n, char out[32]);
/* SHA-256 of a whole file as 64 hex digits, computed with its XXH3-128 in one pass. */
dit_status_t dit_file_hashes(const char *path, char out_hash[DIT_HASH_HEX],
                             char out_sha256[DIT_SHA256_HEX], uint64_t *out_size);

#endif
