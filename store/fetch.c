/* Resolving a runtime's bundle argument (see fetch.h) through the store, the remote and the
 * archive reader. */
#include "store/fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "base/fileio.h"
#include "store/archive.h"
#include "store/remote.h"
#include "store/sign.h"
#include "store/store.h"

struct dit_fetched {
  char *dir;
  char *temp_root; /* a temporary store to remove, or NULL */
};

const char *dit_fetched_dir(const dit_fetched_t *f) { return f->dir; }

void dit_fetched_destroy(dit_fetched_t *f) {
  if (!f) return;
  if (f->temp_root) dit_status_free(dit_remove_tree(f->temp_root));
  free(f->temp_root);
  free(f->dir);
  free(f);
}

dit_status_t dit_fetch_check_signature(const char *dir, const char *trusted_key) {
  char mp[4200], sp[4200];
  DIT_RETURN_IF(dit_path_join(mp, sizeof mp, dir, "manifest.json"));
  DIT_RETURN_IF(dit_path_join(sp, sizeof sp, dir, "manifest.sig"));
  char *text = NULL, *sig = NULL;
  size_t len = 0, slen = 0;
  dit_status_t s = dit_file_read(mp, (size_t)64 << 20, &text, &len);
  if (!s && dit_path_exists(sp)) s = dit_file_read(sp, (size_t)64 << 10, &sig, &slen);
  if (!s) s = dit_sign_verify(trusted_key, text, len, sig, slen, mp);
  free(text);
  free(sig);
  return s;
}

/* The local store for pulls: the option, $DITC_STORE, or the user's cache directory. */
static dit_status_t pull_cache_dir(const dit_fetch_options_t *o, char *out, size_t cap) {
  const char *env = getenv("DITC_STORE");
  if (o->cache_dir || (env && env[0])) {
    snprintf(out, cap, "%s", o->cache_dir ? o->cache_dir : env);
    return DIT_OK;
  }
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0]) snprintf(out, cap, "%s/ditc/store", xdg);
  else if (home && home[0]) snprintf(out, cap, "%s/.cache/ditc/store", home);
  else return DIT_ERR(FAILED_PRECONDITION, "no local store for pulled blobs: pass --cache DIR or set DITC_STORE");
  return DIT_OK;
}

static dit_status_t temp_store(char **out) {
  const char *t = getenv("TMPDIR");
  size_t n = strlen(t && t[0] ? t : "/tmp") + 32;
  char *p = malloc(n);
  if (!p) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  snprintf(p, n, "%s/ditrun-XXXXXX", t && t[0] ? t : "/tmp");
  if (!mkdtemp(p)) {
    free(p);
    return DIT_ERR(IO, "cannot create a temporary store under %s", t && t[0] ? t : "/tmp");
  }
  *out = p;
  return DIT_OK;
}

dit_status_t dit_fetch_bundle(const char *what, const dit_fetch_options_t *o, dit_fetched_t **out) {
  *out = NULL;
  dit_fetched_t *f = calloc(1, sizeof *f);
  if (!f) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  dit_store_t *st = NULL;
  dit_remote_t *r = NULL;
  dit_status_t s = DIT_OK;
  char root[4200];
  if (!o->store && dit_is_hash_hex(what) && !dit_path_exists(what)) {
    s = DIT_ERR(INVALID_ARGUMENT, "%s: no such bundle directory; to run an identity, name its store with --store URL|DIR", what);
  } else if (dit_is_dir(what) || !(dit_ditb_is_archive(what) || (o->store && dit_is_hash_hex(what)))) {
    /* A directory, or anything else: the bundle reader names what is wrong with it. */
    f->dir = strdup(what);
    if (!f->dir) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  } else if (dit_ditb_is_archive(what)) {
    const char *env = getenv("DITC_STORE");
    if (o->cache_dir) snprintf(root, sizeof root, "%s", o->cache_dir);
    else if (env && env[0]) snprintf(root, sizeof root, "%s", env);
    else if (!(s = temp_store(&f->temp_root))) snprintf(root, sizeof root, "%s", f->temp_root);
    dit_mapping_t map = {0};
    char identity[DIT_HASH_HEX];
    if (!s) s = dit_store_open(root, &st);
    if (!s) s = dit_file_map(what, &map);
    if (!s) s = dit_ditb_import(st, map.data, map.size, what, o->trusted_key, &o->limits, identity);
    dit_file_unmap(&map);
    if (!s) s = dit_store_materialize(st, identity, NULL, &f->dir);
  } else if (dit_remote_is_url(o->store)) {
    s = pull_cache_dir(o, root, sizeof root);
    dit_remote_options_t ro = {o->store, o->token, o->insecure_token, o->timeout_s, o->retries, o->verbose, o->limits};
    dit_remote_stats_t rs;
    if (!s) s = dit_store_open(root, &st);
    if (!s) s = dit_remote_create(&ro, &r);
    if (!s) s = dit_remote_pull(r, st, what, o->trusted_key, &rs);
    if (!s && o->verbose) {
      char a[32], b[32];
      dit_format_bytes(rs.raw_bytes, a);
      dit_format_bytes(rs.wire_bytes, b);
      fprintf(stderr, "ditrun: store %s: %zu blobs fetched (%s, %s on the wire), %zu already in %s (%.2fs)\n", o->store,
              rs.blobs_transferred, a, b, rs.blobs_present, root, rs.seconds);
    }
    if (!s) s = dit_store_materialize(st, what, NULL, &f->dir);
  } else {
    s = dit_store_open(o->store, &st);
    if (!s) s = dit_store_materialize(st, what, NULL, &f->dir);
  }
  if (!s && o->trusted_key) s = dit_fetch_check_signature(f->dir, o->trusted_key);
  dit_remote_destroy(r);
  dit_store_close(st);
  if (s) {
    dit_fetched_destroy(f);
    return s;
  }
  *out = f;
  return DIT_OK;
}
