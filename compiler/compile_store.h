/* The compile driver's side of the store (private to compiler/): the checkpoint-hash memo,
 * lookups that hand back a stored bundle, and the explanation of a miss. */
#ifndef DIT_COMPILER_COMPILE_STORE_H
#define DIT_COMPILER_COMPILE_STORE_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "store/store.h"
#include "base/status.h"
#include "compiler/frontend.h"

/* The checkpoint's content hash (dit_model_weights_hash). With a store, a memo keyed by
 * every checkpoint file's (path, device, inode, size, mtime, ctime) returns the recorded
 * hash without reading the weights, unless `rehash`; a fresh hash is recorded. st may be
 * NULL (no memo). *out_memo_hit says whether the memo answered. */
dit_status_t dit_compile_weights_hash(dit_store_t *st, const dit_model_t *m, int rehash, char out_hex[33],
                                      int *out_memo_hit);

/* Looks the identity up in the store; on a hit makes out_dir/<identity> its bundle directory
 * and sets *out_path (caller frees), else leaves it NULL. */
dit_status_t dit_compile_store_lookup(dit_store_t *st, const char *identity, const char *out_dir,
                                      char **out_path);

/* Prints to f which identity inputs (JSON paths, "this compile vs the entry") differ between
 * `inputs` and the nearest entries of the store, or of the bundles under out_dir when st is
 * NULL. Returns the number of candidates compared. */
size_t dit_compile_explain(dit_store_t *st, const char *out_dir, const cJSON *inputs, const char *identity,
                           FILE *f);

#endif
