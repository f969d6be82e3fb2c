/* The compile driver's use of the store: the weights-hash memo, store lookups and the
 * explanation of misses (which identity inputs differ from what is stored). */
#include "compiler/compile_store.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "artifacts/bundle.h"
#include "artifacts/identity.h"
#include "base/fileio.h"
#include "base/json.h"

/* ---------------------------------------------------------------------------------- */
/* The weights-hash memo.
 *
 * The memo is kept for the whole checkpoint, not per file: the weights hash runs over
 * tensors in name order, independent of how they are sharded into files, so per-file
 * digests could not be combined into it. One record per model directory lists the stat
 * tuple of every file that holds a tensor; any change to any of them (a rewrite, a touch,
 * a replaced shard, a renamed or added shard) misses and rehashes. */

static int64_t ns_of(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The record of the checkpoint as it is now: files sorted by path with their stat tuples,
 * and the newest mtime among them. */
static dit_status_t checkpoint_files(const dit_model_t *m, cJSON **out_files, int64_t *out_newest) {
  *out_files = NULL;
  *out_newest = 0;
  size_t n = dit_safetensors_count(m->weights);
  char **names = calloc(n + 1, sizeof *names);
  if (!names) return DIT_ERR(RESOURCE_EXHAUSTED, "weights memo: out of memory");
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *f = dit_safetensors_at(m->weights, i)->file;
    int seen = 0;
    for (size_t j = 0; j < k && !seen; j++) seen = names[j] == f || !strcmp(names[j], f);
    if (!seen) names[k++] = (char *)f;
  }
  qsort(names, k, sizeof *names, cmp_cstr);
  cJSON *arr = cJSON_CreateArray();
  dit_status_t s = arr ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "weights memo: out of memory");
  for (size_t i = 0; !s && i < k; i++) {
    char real[PATH_MAX];
    struct stat sb;
    if (!realpath(names[i], real) || stat(real, &sb) != 0) {
      s = DIT_ERR(IO, "%s: cannot stat: %s", names[i], strerror(errno));
      break;
    }
    /* 64-bit values as strings: JSON numbers are doubles and nanosecond times exceed 2^53. */
    char buf[5][32];
    snprintf(buf[0], 32, "%" PRIu64, (uint64_t)sb.st_dev);
    snprintf(buf[1], 32, "%" PRIu64, (uint64_t)sb.st_ino);
    snprintf(buf[2], 32, "%" PRId64, (int64_t)sb.st_size);
    snprintf(buf[3], 32, "%" PRId64, ns_of(sb.st_mtim));
    snprintf(buf[4], 32, "%" PRId64, ns_of(sb.st_ctim));
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "path", real);
    cJSON_AddStringToObject(e, "dev", buf[0]);
    cJSON_AddStringToObject(e, "ino", buf[1]);
    cJSON_AddStringToObject(e, "size", buf[2]);
    cJSON_AddStringToObject(e, "mtime_ns", buf[3]);
    cJSON_AddStringToObject(e, "ctime_ns", buf[4]);
    cJSON_AddItemToArray(arr, e);
    if (ns_of(sb.st_mtim) > *out_newest) *out_newest = ns_of(sb.st_mtim);
  }
  free(names);
  if (s) {
    cJSON_Delete(arr);
    return s;
  }
  *out_files = arr;
  return DIT_OK;
}

static void memo_key(const dit_model_t *m, char out[33]) {
  char real[PATH_MAX];
  const char *dir = realpath(m->model_dir, real) ? real : m->model_dir;
  size_t n = strlen(dir);
  char *buf = malloc(n + 16);
  if (!buf) {
    dit_hash128_hex(dir, n, out);
    return;
  }
  memcpy(buf, "weights-memo:", 13);
  memcpy(buf + 13, dir, n);
  dit_hash128_hex(buf, n + 13, out);
  free(buf);
}

/* A file modified within this window before the memo was written could be modified again
 * without its mtime moving (file times tick coarser than the clock), so such a record is not
 * trusted; the next hash rewrites it and is trusted from then on. Any later write moves the
 * mtime past the recorded one. */
#define RACY_NS ((int64_t)2000000000)

dit_status_t dit_compile_weights_hash(dit_store_t *st, const dit_model_t *m, int rehash, char out_hex[33],
                                      int *out_memo_hit) {
  *out_memo_hit = 0;
  if (!st) return dit_model_weights_hash(m, out_hex);
  cJSON *files = NULL;
  int64_t newest = 0;
  DIT_RETURN_IF(checkpoint_files(m, &files, &newest));
  char key[33];
  memo_key(m, key);
  char *now_files = cJSON_PrintUnformatted(files);
  dit_status_t s = now_files ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "weights memo: out of memory");
  if (!s && !rehash) {
    char *text = NULL;
    size_t len = 0;
    dit_status_t rs = dit_store_memo_read(st, key, &text, &len);
    /* A memo that is missing, unreadable or malformed in any way only means hashing. */
    dit_json_doc_t *doc = NULL;
    dit_json_t root, rf;
    const char *rw = NULL, *rt = NULL;
    if (!rs) rs = dit_json_parse(text, len, "weights memo", &doc);
    if (!rs) rs = dit_json_root(doc, &root);
    if (!rs) rs = dit_json_get(&root, "files", &rf);
    if (!rs) rs = dit_json_str(&root, "weights", 64, false, &rw);
    if (!rs) rs = dit_json_str(&root, "written_ns", 32, false, &rt);
    char *then_files = rs ? NULL : cJSON_PrintUnformatted(rf.v);
    if (then_files && dit_is_hash_hex(rw) && !strcmp(then_files, now_files) && strtoll(rt, NULL, 10) - newest > RACY_NS) {
      memcpy(out_hex, rw, 33);
      *out_memo_hit = 1;
    }
    free(then_files);
    dit_json_doc_free(doc);
    free(text);
    dit_status_free(rs);
  }
  if (!s && !*out_memo_hit) {
    s = dit_model_weights_hash(m, out_hex);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char when[32];
    snprintf(when, sizeof when, "%" PRId64, ns_of(now));
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "format", "ditc-weights-memo");
    cJSON_AddStringToObject(rec, "model_dir", m->model_dir);
    cJSON_AddItemToObject(rec, "files", files);
    files = NULL;
    cJSON_AddStringToObject(rec, "weights", out_hex);
    cJSON_AddStringToObject(rec, "written_ns", when);
    char *text = s ? NULL : cJSON_Print(rec);
    /* The memo only saves time: failing to record it must not fail the compile. */
    if (text) dit_status_free(dit_store_memo_write(st, key, text));
    free(text);
    cJSON_Delete(rec);
  }
  cJSON_Delete(files);
  free(now_files);
  return s;
}

/* ---------------------------------------------------------------------------------- */
/* Lookup */

dit_status_t dit_compile_store_lookup(dit_store_t *st, const char *identity, const char *out_dir, char **out_path) {
  *out_path = NULL;
  if (!dit_store_has_entry(st, identity)) return DIT_OK;
  return dit_store_materialize(st, identity, out_dir, out_path);
}

/* ---------------------------------------------------------------------------------- */
/* Explaining a miss */

typedef struct {
  char *text;
  size_t len, cap;
  size_t count; /* differing leaves */
} diff_t;

static void dput(diff_t *d, const char *s) {
  size_t n = strlen(s);
  if (d->len + n + 1 > d->cap) {
    size_t cap = (d->len + n + 1) * 2;
    char *p = realloc(d->text, cap);
    if (!p) return;
    d->text = p;
    d->cap = cap;
  }
  memcpy(d->text + d->len, s, n + 1);
  d->len += n;
}

/* A value as canonical JSON, cut short for display. */
static void show(const cJSON *v, char out[96]) {
  if (!v) {
    snprintf(out, 96, "(absent)");
    return;
  }
  char *t = NULL;
  dit_status_t s = dit_json_canonical(v, &t);
  if (s) {
    dit_status_free(s);
    snprintf(out, 96, "?");
    return;
  }
  if (strlen(t) > 80) snprintf(out, 96, "%.77s...", t);
  else snprintf(out, 96, "%s", t);
  free(t);
}

#define MAX_SHOWN 8

static void leaf(diff_t *d, const char *path, const cJSON *a, const cJSON *b) {
  if (++d->count > MAX_SHOWN) return;
  char x[96], y[96], line[PATH_MAX];
  show(a, x);
  show(b, y);
  snprintf(line, sizeof line, "%s%s: %s vs %s", d->len ? "; " : "", path[0] ? path : "(inputs)", x, y);
  dput(d, line);
}

static int same(const cJSON *a, const cJSON *b) {
  char *x = NULL, *y = NULL;
  dit_status_t s1 = dit_json_canonical(a, &x), s2 = dit_json_canonical(b, &y);
  int eq = !s1 && !s2 && !strcmp(x, y);
  dit_status_free(s1);
  dit_status_free(s2);
  free(x);
  free(y);
  return eq;
}

/* Walks a (this compile) and b (an entry) in step, recording every differing leaf by its
 * JSON path; objects by key, arrays of equal length by index. */
static void json_diff(diff_t *d, const char *path, const cJSON *a, const cJSON *b) {
  char sub[PATH_MAX];
  if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
    for (const cJSON *k = a->child; k; k = k->next) {
      snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", k->string);
      json_diff(d, sub, k, cJSON_GetObjectItemCaseSensitive(b, k->string));
    }
    for (const cJSON *k = b->child; k; k = k->next) {
      if (cJSON_GetObjectItemCaseSensitive(a, k->string)) continue;
      snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", k->string);
      leaf(d, sub, NULL, k);
    }
    return;
  }
  if (cJSON_IsArray(a) && cJSON_IsArray(b) && cJSON_GetArraySize(a) == cJSON_GetArraySize(b)) {
    int i = 0;
    for (const cJSON *x = a->child, *y = b->child; x && y; x = x->next, y = y->next, i++) {
      snprintf(sub, sizeof sub, "%s[%d]", path, i);
      json_diff(d, sub, x, y);
    }
    return;
  }
  if (!a || !b || !same(a, b)) leaf(d, path, a, b);
}

typedef struct {
  char identity[33];
  int64_t last_used;
  diff_t diff;
} candidate_t;

static int cmp_candidate(const void *x, const void *y) {
  const candidate_t *a = x, *b = y;
  if (a->diff.count != b->diff.count) return a->diff.count < b->diff.count ? -1 : 1;
  if (a->last_used != b->last_used) return a->last_used > b->last_used ? -1 : 1;
  return strcmp(a->identity, b->identity);
}

static int add_candidate(candidate_t **v, size_t *n, size_t *cap, const char *identity, int64_t last_used,
                         const cJSON *inputs, const cJSON *theirs) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    candidate_t *nv = realloc(*v, nc * sizeof *nv);
    if (!nv) return 0;
    *v = nv;
    *cap = nc;
  }
  candidate_t *c = &(*v)[(*n)++];
  memset(c, 0, sizeof *c);
  /* Callers pass only names that passed dit_is_hash_hex: exactly 32 digits. */
  memcpy(c->identity, identity, 32);
  c->identity[32] = 0;
  c->last_used = last_used;
  json_diff(&c->diff, "", inputs, theirs);
  return 1;
}

size_t dit_compile_explain(dit_store_t *st, const char *out_dir, const cJSON *inputs, const char *identity, FILE *f) {
  candidate_t *v = NULL;
  size_t n = 0, cap = 0;
  const char *where = st ? dit_store_root(st) : out_dir;
  if (st) {
    dit_store_entry_t *e = NULL;
    size_t ne = 0;
    dit_status_t s = dit_store_list(st, &e, &ne);
    if (s) {
      fprintf(f, "ditc: explain: %s\n", dit_status_message(s));
      dit_status_free(s);
    }
    for (size_t i = 0; i < ne; i++)
      if (e[i].manifest && strcmp(e[i].identity, identity))
        add_candidate(&v, &n, &cap, e[i].identity, e[i].last_used, inputs, e[i].manifest->inputs);
    dit_store_entries_free(e, ne);
  } else if (out_dir) {
    DIR *d = opendir(out_dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
      if (!dit_is_hash_hex(de->d_name) || !strcmp(de->d_name, identity)) continue;
      char path[PATH_MAX];
      snprintf(path, sizeof path, "%s/%s/manifest.json", out_dir, de->d_name);
      char *text = NULL;
      size_t len = 0;
      dit_manifest_t *m = NULL;
      dit_status_t s = dit_file_read(path, (size_t)64 << 20, &text, &len);
      if (!s) s = dit_manifest_parse(text, len, path, &m);
      struct stat sb;
      if (!s) add_candidate(&v, &n, &cap, de->d_name, stat(path, &sb) == 0 ? (int64_t)sb.st_mtime : 0, inputs, m->inputs);
      dit_status_free(s);
      dit_manifest_free(m);
      free(text);
    }
    if (d) closedir(d);
  }
  if (!n) {
    fprintf(f, "ditc: cache miss: identity %s; %s holds no other entry to compare with\n", identity, where ? where : "(nothing)");
    free(v);
    return 0;
  }
  qsort(v, n, sizeof *v, cmp_candidate);
  fprintf(f, "ditc: cache miss: identity %s is not in %s (%zu other %s); nearest (this compile vs the entry):\n", identity, where, n,
          n == 1 ? "entry" : "entries");
  for (size_t i = 0; i < n && i < 3; i++) {
    candidate_t *c = &v[i];
    char more[48] = "";
    if (c->diff.count > MAX_SHOWN) snprintf(more, sizeof more, "; and %zu more", c->diff.count - MAX_SHOWN);
    fprintf(f, "  %s: %zu input%s differ%s: %s%s\n", c->identity, c->diff.count, c->diff.count == 1 ? "" : "s",
            c->diff.count == 1 ? "s" : "", c->diff.text ? c->diff.text : "", more);
  }
  for (size_t i = 0; i < n; i++) free(v[i].diff.text);
  free(v);
  return n;
}
