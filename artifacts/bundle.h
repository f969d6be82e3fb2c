/* Bundles on disk: the writer (blobs, then an atomic publish of the whole directory) and the
 * reader/validator. Layout of a bundle directory named by its identity:
 *   manifest.json        the manifest (manifest.h)
 *   manifest.xxh128      XXH3-128 hex of manifest.json's bytes and a newline (the identity
 *                        covers only `inputs`; this covers every other field)
 *   blobs/<hash>         every blob, named by its XXH3-128
 *   diagnostics.json     paths, host, user, times: outside the hashed set, never validated
 */
#ifndef DIT_ARTIFACTS_BUNDLE_H
#define DIT_ARTIFACTS_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "artifacts/manifest.h"
#include "base/fileio.h"
#include "base/status.h"

/* ---- writer ---- */
typedef struct dit_bundle_writer dit_bundle_writer_t;

/* Starts a bundle under parent_dir (created if missing) in a temporary directory
 * parent_dir/.tmp-<random>. The caller owns *out. */
dit_status_t dit_bundle_writer_create(const char *parent_dir, dit_bundle_writer_t **out);

/* Adds a whole blob from memory; out_hash receives its XXH3-128 hex. Adding identical bytes
 * twice stores them once. */
dit_status_t dit_bundle_writer_add_blob(dit_bundle_writer_t *w, const void *data, size_t size,
                                        char out_hash[DIT_HASH_HEX]);

/* Streams a large blob: begin, append any number of times, end (which names it). */
/* Where a blob named by its hash goes in the bundle being written (caller frees): a file put
 * there by other means (a link to a store's copy) is the blob. */
dit_status_t dit_bundle_writer_blob_dest(dit_bundle_writer_t *w, const char *hash, char **out_path);
dit_status_t dit_bundle_writer_blob_begin(dit_bundle_writer_t *w);
dit_status_t dit_bundle_writer_blob_append(dit_bundle_writer_t *w, const void *data, size_t size);
dit_status_t dit_bundle_writer_blob_end(dit_bundle_writer_t *w, char out_hash[DIT_HASH_HEX],
                                        uint64_t *out_size);

/* Computes the identity from m->inputs into m->identity, writes manifest.json and
 * diagnostics.json (if not NULL; any JSON text), and renames the temporary directory to
 * parent_dir/<identity>. If that directory already exists (the same identity was published
 * before, by us or a concurrent writer) the new copy is discarded and the existing one kept;
 * *out_existed says which. *out_path (caller frees) is the final directory. After publish the
 * writer only needs destroying. */
dit_status_t dit_bundle_writer_publish(dit_bundle_writer_t *w, dit_manifest_t *m,
                                       const char *diagnostics_json, char **out_path,
                                       int *out_existed);

/* Removes the temporary directory unless it was published. */
void dit_bundle_writer_destroy(dit_bundle_writer_t *w);

/* ---- reader ---- */
typedef struct dit_bundle dit_bundle_t;

enum {
  DIT_BUNDLE_HASH_BLOBS = 1u << 0, /* hash every blob (else size and presence only) */
  /* With HASH_BLOBS: blobs of role "weights" are left to the caller, who hashes each as it reads
   * it (dit_bundle_check_blob), so that the hash and the read (a device upload) overlap. */
  DIT_BUNDLE_HASH_LATER = 1u << 1,
};

/* Opens and validates a bundle directory: manifest.json parsed and validated, the identity
 * recomputed from its inputs and equal to the recorded one (and to the directory name when
 * that name is 32 hex digits), every blob present with the right size, and with the right
 * hash when DIT_BUNDLE_HASH_BLOBS. Every error names the file or field with expected and
 * found values. The caller owns *out. */
dit_status_t dit_bundle_open(const char *dir, unsigned flags, dit_bundle_t **out);
void dit_bundle_close(dit_bundle_t *b);

const dit_manifest_t *dit_bundle_manifest(const dit_bundle_t *b);
const char *dit_bundle_dir(const dit_bundle_t *b);

/* Maps blob `hash` read-only (checked against its listed size; hashed unless the bundle was
 * opened with DIT_BUNDLE_HASH_BLOBS, which already did). Unmap with dit_file_unmap. */
dit_status_t dit_bundle_map_blob(dit_bundle_t *b, const char *hash, dit_mapping_t *out);

/* Hashes a mapping of blob `hash` (dit_bundle_map_blob's) and checks it against the manifest:
 * DATA_LOSS naming the file on a mismatch. Thread-safe: it reads the mapping only. */
dit_status_t dit_bundle_check_blob(const dit_bundle_t *b, const char *hash, const dit_mapping_t *map);

/* Blobs (and their bytes) whose content hash this process has computed so far, over every
 * bundle opened or mapped: what verification cost. */
void dit_bundle_hash_stats(uint64_t *out_blobs, uint64_t *out_bytes);

#endif
