/* Listing and maintenance of a store: ls, verify (rehash every blob), rm and gc (entries by
 * age and size, then blobs no entry lists, then stale temporaries), all under the exclusive
 * lock where they remove anything. */
#include "store/store_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include "artifacts/identity.h"
#include "base/fileio.h"

/* A bundle directory of this store with no entry yet may be a compile between its publish
 * and its import; gc leaves such directories (and writers' temporaries) this long. */
#define GRACE_SECONDS (60 * 60)
#define STALE_TMP_SECONDS (24 * 60 * 60)

static int cmp_entry_recent(const void *a, const void *b) {
  const dit_store_entry_t *x = a, *y = b;
  if (x->last_used != y->last_used) return x->last_used > y->last_used ? -1 : 1;
  return strcmp(x->identity, y->identity);
}

dit_status_t dit_store_list(dit_store_t *st, dit_store_entry_t **out, size_t *out_n) {
  *out = NULL;
  *out_n = 0;
  DIR *d = opendir(st->ac);
  if (!d) return DIT_ERR(IO, "%s: cannot open directory: %s", st->ac, strerror(errno));
  dit_store_entry_t *v = NULL;
  size_t n = 0, cap = 0;
  dit_status_t s = DIT_OK;
  struct dirent *e;
  while (!s && (e = readdir(d))) {
    if (!dit_is_hash_hex(e->d_name)) continue;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      dit_store_entry_t *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        s = dit_store_oom(st->root);
        break;
      }
      v = nv;
      cap = nc;
    }
    dit_store_entry_t *x = &v[n++];
    memset(x, 0, sizeof *x);
    memcpy(x->identity, e->d_name, DIT_HASH_HEX);
    char *p = dit_store_join(st->ac, e->d_name);
    struct stat sb;
    if (p && stat(p, &sb) == 0) x->last_used = (int64_t)sb.st_mtime;
    free(p);
    char *sp = NULL;
    if (!dit_store_ac_path(st, x->identity, ".sig", &sp)) x->is_signed = dit_path_exists(sp);
    free(sp);
    dit_status_t es = dit_store_read_entry(st, x->identity, 0, &x->manifest, NULL, NULL);
    if (es) {
      x->error = strdup(dit_status_message(es));
      dit_status_free(es);
      continue;
    }
    for (size_t i = 0; i < x->manifest->n_blobs; i++) x->bytes += x->manifest->blobs[i].size;
    x->complete = dit_store_blobs_complete(st, x->manifest);
  }
  closedir(d);
  if (s) {
    dit_store_entries_free(v, n);
    return s;
  }
  if (n > 1) qsort(v, n, sizeof *v, cmp_entry_recent);
  *out = v;
  *out_n = n;
  return DIT_OK;
}

void dit_store_entries_free(dit_store_entry_t *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dit_manifest_free(e[i].manifest);
    free(e[i].error);
  }
  free(e);
}

typedef struct {
  char hash[DIT_HASH_HEX];
  uint64_t size;
  int refs;
} inv_blob_t;

typedef struct {
  inv_blob_t *v;
  size_t n, cap;
} inventory_t;

static int cmp_inv(const void *a, const void *b) { return strcmp(((const inv_blob_t *)a)->hash, ((const inv_blob_t *)b)->hash); }

/* Every file under cas/xx/ named by a hash with the right prefix; other names are strays. */
static dit_status_t scan_cas(dit_store_t *st, inventory_t *inv, FILE *report, size_t *strays) {
  DIR *d = opendir(st->cas);
  if (!d) return DIT_ERR(IO, "%s: cannot open directory: %s", st->cas, strerror(errno));
  dit_status_t s = DIT_OK;
  struct dirent *e;
  while (!s && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *sub = dit_store_join(st->cas, e->d_name);
    DIR *d2 = sub ? opendir(sub) : NULL;
    if (!d2) {
      free(sub);
      continue;
    }
    struct dirent *f;
    while (!s && (f = readdir(d2))) {
      if (f->d_name[0] == '.' && (!f->d_name[1] || (f->d_name[1] == '.' && !f->d_name[2]))) continue;
      char *p = dit_store_join(sub, f->d_name);
      struct stat sb;
      if (!p) {
        s = dit_store_oom(st->root);
      } else if (!dit_is_hash_hex(f->d_name) || strncmp(f->d_name, e->d_name, 2) || strlen(e->d_name) != 2 ||
                 stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (report) fprintf(report, "%s: not a blob of this store (removed by gc)\n", p);
        if (strays) (*strays)++;
      } else {
        if (inv->n == inv->cap) {
          size_t nc = inv->cap ? inv->cap * 2 : 256;
          inv_blob_t *nv = realloc(inv->v, nc * sizeof *nv);
          if (!nv) s = dit_store_oom(st->root);
          else inv->v = nv, inv->cap = nc;
        }
        if (!s) {
          inv_blob_t *b = &inv->v[inv->n++];
          memcpy(b->hash, f->d_name, DIT_HASH_HEX);
          b->size = (uint64_t)sb.st_size;
          b->refs = 0;
        }
      }
      free(p);
    }
    closedir(d2);
    free(sub);
  }
  closedir(d);
  if (!s && inv->n > 1) qsort(inv->v, inv->n, sizeof *inv->v, cmp_inv);
  return s;
}

static inv_blob_t *inv_find(inventory_t *inv, const char *hash) {
  inv_blob_t key;
  memcpy(key.hash, hash, DIT_HASH_HEX);
  return inv->n ? bsearch(&key, inv->v, inv->n, sizeof *inv->v, cmp_inv) : NULL;
}

static dit_status_t remove_blob(dit_store_t *st, const char *hash) {
  char *p = NULL;
  DIT_RETURN_IF(dit_store_blob_path(st, hash, &p));
  dit_status_t s = unlink(p) == 0 || errno == ENOENT ? DIT_OK : DIT_ERR(IO, "%s: cannot remove: %s", p, strerror(errno));
  free(p);
  return s;
}

/* Removes ac/<identity>, its signature and its view. */
static dit_status_t remove_entry_files(dit_store_t *st, const char *identity) {
  char *p = NULL, *sp = NULL, *vp = dit_store_join(st->bundles, identity);
  dit_status_t s = vp ? DIT_OK : dit_store_oom(st->root);
  if (!s) s = dit_store_ac_path(st, identity, "", &p);
  if (!s) s = dit_store_ac_path(st, identity, ".sig", &sp);
  if (!s && unlink(p) != 0 && errno != ENOENT) s = DIT_ERR(IO, "%s: cannot remove: %s", p, strerror(errno));
  if (!s && unlink(sp) != 0 && errno != ENOENT) s = DIT_ERR(IO, "%s: cannot remove: %s", sp, strerror(errno));
  if (!s) {
    /* The digest last: an entry without one reads as damaged, never as valid. */
    size_t n = strlen(p) + 8;
    char *dp = malloc(n);
    if (!dp) s = dit_store_oom(st->root);
    else snprintf(dp, n, "%s.xxh128", p);
    if (dp && unlink(dp) != 0 && errno != ENOENT) s = DIT_ERR(IO, "%s: cannot remove: %s", dp, strerror(errno));
    free(dp);
  }
  if (!s) s = dit_remove_tree(vp);
  free(p);
  free(sp);
  free(vp);
  return s;
}

/* Removes every blob with no reference and the stray files; counts what stays. */
static dit_status_t sweep(dit_store_t *st, inventory_t *inv, dit_store_stats_t *out) {
  for (size_t i = 0; i < inv->n; i++) {
    if (inv->v[i].refs > 0) {
      out->blobs++;
      out->bytes += inv->v[i].size;
      continue;
    }
    DIT_RETURN_IF(remove_blob(st, inv->v[i].hash));
    out->blobs_removed++;
    out->bytes_removed += inv->v[i].size;
  }
  return DIT_OK;
}

static dit_status_t remove_strays_and_temps(dit_store_t *st, int64_t now) {
  /* Under the exclusive lock no writer of this store is running, so tmp/ holds only
   * leftovers of crashed ones. */
  DIR *d = opendir(st->tmp);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *p = dit_store_join(st->tmp, e->d_name);
    if (p) dit_status_free(dit_remove_tree(p));
    free(p);
  }
  if (d) closedir(d);
  /* bundles/ holds compiles in progress (their temporaries, and bundles not yet imported):
   * only old ones, or views of entries that are gone, are removed. */
  d = opendir(st->bundles);
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *p = dit_store_join(st->bundles, e->d_name);
    struct stat sb;
    if (p && lstat(p, &sb) == 0) {
      int64_t age = now - (int64_t)sb.st_mtime;
      int remove = 0;
      if (!strncmp(e->d_name, ".tmp", 4)) remove = age > STALE_TMP_SECONDS;
      else if (dit_is_hash_hex(e->d_name)) {
        char *ap = NULL;
        if (!dit_store_ac_path(st, e->d_name, "", &ap)) remove = !dit_path_exists(ap) && age > GRACE_SECONDS;
        free(ap);
      }
      if (remove) dit_status_free(dit_remove_tree(p));
    }
    free(p);
  }
  if (d) closedir(d);
  /* A signature or digest whose manifest never arrived (a publisher that died between). */
  d = opendir(st->ac);
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.' || dit_is_hash_hex(e->d_name)) continue;
    char id[DIT_HASH_HEX];
    snprintf(id, sizeof id, "%.32s", e->d_name);
    char *mp = dit_store_join(st->ac, id), *p = dit_store_join(st->ac, e->d_name);
    if (mp && p && (!dit_is_hash_hex(id) || !dit_path_exists(mp))) unlink(p);
    free(mp);
    free(p);
  }
  if (d) closedir(d);
  /* Stray files in cas/ (names that are not blobs of their directory). */
  d = opendir(st->cas);
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *sub = dit_store_join(st->cas, e->d_name);
    DIR *d2 = sub ? opendir(sub) : NULL;
    struct dirent *f;
    while (d2 && (f = readdir(d2))) {
      if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
      if (dit_is_hash_hex(f->d_name) && !strncmp(f->d_name, e->d_name, 2) && strlen(e->d_name) == 2) continue;
      char *p = dit_store_join(sub, f->d_name);
      if (p) dit_status_free(dit_remove_tree(p));
      free(p);
    }
    if (d2) closedir(d2);
    free(sub);
  }
  if (d) closedir(d);
  return DIT_OK;
}

/* Counts references of the given entries (those not being removed). */
static void add_refs(inventory_t *inv, const dit_store_entry_t *x, int delta) {
  if (!x->manifest) return;
  for (size_t i = 0; i < x->manifest->n_blobs; i++) {
    inv_blob_t *b = inv_find(inv, x->manifest->blobs[i].hash);
    if (b) b->refs += delta;
  }
}

dit_status_t dit_store_verify(dit_store_t *st, FILE *report, dit_store_stats_t *out) {
  memset(out, 0, sizeof *out);
  inventory_t inv = {0};
  char **bad = NULL;
  size_t nbad = 0;
  /* Hashing runs under the shared lock so publishers are not held up; removing the bad
   * blobs takes the exclusive one. */
  dit_status_t s = dit_store_lock(st, 0);
  if (!s) {
    s = scan_cas(st, &inv, report, NULL);
    bad = calloc(inv.n + 1, sizeof *bad);
    if (!s && !bad) s = dit_store_oom(st->root);
    for (size_t i = 0; !s && i < inv.n; i++) {
      char *p = NULL;
      s = dit_store_blob_path(st, inv.v[i].hash, &p);
      dit_mapping_t map;
      dit_status_t ms = s ? DIT_OK : dit_file_map(p, &map);
      if (ms) {
        if (report) fprintf(report, "%s: cannot read: %s\n", p, dit_status_message(ms));
        dit_status_free(ms);
        bad[nbad++] = strdup(inv.v[i].hash);
      } else if (!s) {
        char found[DIT_HASH_HEX];
        dit_hasher_t *h = NULL;
        s = dit_hasher_create(&h);
        for (size_t off = 0; !s && off < map.size; off += STORE_IO_CHUNK)
          dit_hasher_update(h, map.data + off, map.size - off < STORE_IO_CHUNK ? map.size - off : STORE_IO_CHUNK);
        if (!s) dit_hasher_hex(h, found);
        dit_hasher_destroy(h);
        dit_file_unmap(&map);
        if (!s && strcmp(found, inv.v[i].hash)) {
          if (report) fprintf(report, "%s: content hash mismatch: expected %s, found %s (removed)\n", p, inv.v[i].hash, found);
          bad[nbad++] = strdup(inv.v[i].hash);
        }
      }
      free(p);
    }
    dit_store_unlock(st);
  }
  if (!s && nbad) {
    s = dit_store_lock(st, 1);
    for (size_t i = 0; !s && i < nbad; i++)
      if (bad[i]) s = remove_blob(st, bad[i]);
    /* This store's bundle directories share the damaged inodes: drop the views listing a
     * removed blob, so a compile rebuilds them instead of finding them. */
    dit_store_entry_t *ents = NULL;
    size_t ne = 0;
    if (!s) s = dit_store_list(st, &ents, &ne);
    for (size_t i = 0; !s && i < ne; i++) {
      int hit = 0;
      for (size_t k = 0; ents[i].manifest && k < ents[i].manifest->n_blobs && !hit; k++)
        for (size_t j = 0; j < nbad && !hit; j++) hit = bad[j] && !strcmp(bad[j], ents[i].manifest->blobs[k].hash);
      char *vp = hit ? dit_store_join(st->bundles, ents[i].identity) : NULL;
      if (vp) s = dit_remove_tree(vp);
      free(vp);
    }
    dit_store_entries_free(ents, ne);
    dit_store_unlock(st);
  }
  out->bad_blobs = nbad;
  dit_store_entry_t *ents = NULL;
  size_t ne = 0;
  if (!s) s = dit_store_list(st, &ents, &ne);
  for (size_t i = 0; !s && i < ne; i++) {
    const dit_store_entry_t *x = &ents[i];
    int ok = 1;
    if (!x->manifest) {
      if (report) fprintf(report, "%s/ac/%s: %s\n", st->root, x->identity, x->error ? x->error : "invalid");
      ok = 0;
    } else {
      for (size_t k = 0; k < x->manifest->n_blobs; k++) {
        const dit_manifest_blob_t *b = &x->manifest->blobs[k];
        if (!dit_store_has_blob(st, b->hash, b->size)) {
          if (report)
            fprintf(report, "%s/ac/%s: blob %s (role %s, %" PRIu64 " bytes) missing or damaged: pull or compile it again\n", st->root,
                    x->identity, b->hash, b->role, b->size);
          ok = 0;
        }
      }
    }
    if (!ok) out->bad_entries++;
    out->entries++;
  }
  for (size_t i = 0; i < inv.n; i++) {
    int was_bad = 0;
    for (size_t k = 0; k < nbad && !was_bad; k++) was_bad = bad[k] && !strcmp(bad[k], inv.v[i].hash);
    if (!was_bad) {
      out->blobs++;
      out->bytes += inv.v[i].size;
    }
  }
  dit_store_entries_free(ents, ne);
  for (size_t i = 0; i < nbad; i++) free(bad[i]);
  free(bad);
  free(inv.v);
  return s;
}

dit_status_t dit_store_remove(dit_store_t *st, const char *identity, dit_store_stats_t *out) {
  memset(out, 0, sizeof *out);
  char *p = NULL;
  DIT_RETURN_IF(dit_store_ac_path(st, identity, "", &p));
  dit_status_t s = dit_store_lock(st, 1);
  if (!s && !dit_path_exists(p)) s = DIT_ERR(NOT_FOUND, "store %s: no entry for identity %s", st->root, identity);
  free(p);
  if (s) {
    dit_store_unlock(st);
    return s;
  }
  s = remove_entry_files(st, identity);
  if (!s) out->entries_removed = 1;
  inventory_t inv = {0};
  dit_store_entry_t *ents = NULL;
  size_t ne = 0;
  if (!s) s = scan_cas(st, &inv, NULL, NULL);
  if (!s) s = dit_store_list(st, &ents, &ne);
  for (size_t i = 0; !s && i < ne; i++) add_refs(&inv, &ents[i], 1);
  if (!s) s = sweep(st, &inv, out);
  if (!s) out->entries = ne;
  dit_store_unlock(st);
  dit_store_entries_free(ents, ne);
  free(inv.v);
  return s;
}

dit_status_t dit_store_gc(dit_store_t *st, uint64_t max_bytes, int64_t max_age_s, dit_store_stats_t *out) {
  memset(out, 0, sizeof *out);
  DIT_RETURN_IF(dit_store_lock(st, 1));
  int64_t now = (int64_t)time(NULL);
  inventory_t inv = {0};
  dit_store_entry_t *ents = NULL;
  size_t ne = 0;
  char *drop = NULL;
  dit_status_t s = scan_cas(st, &inv, NULL, NULL);
  if (!s) s = dit_store_list(st, &ents, &ne);
  if (!s && !(drop = calloc(ne + 1, 1))) s = dit_store_oom(st->root);
  if (!s) {
    for (size_t i = 0; i < ne; i++) {
      /* An entry that no longer validates can never be used: it goes, whatever its age. */
      if (!ents[i].manifest || (max_age_s >= 0 && now - ents[i].last_used > max_age_s)) drop[i] = 1;
      else add_refs(&inv, &ents[i], 1);
    }
    if (max_bytes) {
      uint64_t kept = 0;
      for (size_t k = 0; k < inv.n; k++)
        if (inv.v[k].refs > 0) kept += inv.v[k].size;
      /* ents is most recent first: evict from the end. */
      for (size_t i = ne; kept > max_bytes && i-- > 0;) {
        if (drop[i]) continue;
        drop[i] = 1;
        for (size_t k = 0; k < ents[i].manifest->n_blobs; k++) {
          inv_blob_t *b = inv_find(&inv, ents[i].manifest->blobs[k].hash);
          if (b && --b->refs == 0) kept -= b->size;
        }
      }
    }
    for (size_t i = 0; !s && i < ne; i++) {
      if (!drop[i]) {
        out->entries++;
        continue;
      }
      s = remove_entry_files(st, ents[i].identity);
      out->entries_removed++;
    }
  }
  if (!s) s = sweep(st, &inv, out);
  if (!s) s = remove_strays_and_temps(st, now);
  dit_store_unlock(st);
  free(drop);
  dit_store_entries_free(ents, ne);
  free(inv.v);
  return s;
}
