/* safetensors: header validation over borrowed images, sharded checkpoints through an index
 * (or a diffusers directory), and a deterministic writer. Every header is untrusted input. */
#include "artifacts/safetensors.h"
#include "base/strbuf.h"

#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fileio.h"
#include "base/json.h"

/* Refused before the header is copied or parsed; real checkpoints need a few MB even with
 * tens of thousands of tensors (the Python package refuses above 100 MB too). */
#define DIT_ST_MAX_HEADER ((uint64_t)100 << 20)
/* An index lists every tensor name once; the same bound keeps a hostile one in check. */
#define DIT_ST_MAX_INDEX ((size_t)100 << 20)
/* JSON numbers are doubles: integers from 2^53 on would silently round. */
#define DIT_ST_MAX_INT ((int64_t)DIT_JSON_MAX_SAFE)
/* Far above real checkpoints (Wan 14B has ~1100 tensors, names under 100 bytes); the name cap
 * matches what a manifest accepts, so every tensor read can be listed in a bundle. */
#define DIT_ST_MAX_TENSORS (1u << 20)
#define DIT_ST_MAX_NAME 4096u

static const struct {
  const char *name;
  dit_dtype_t dtype;
} kStDtypes[] = {
    {"F32", DIT_F32}, {"BF16", DIT_BF16}, {"F16", DIT_F16}, {"I64", DIT_I64}, {"I32", DIT_I32},
    {"U8", DIT_U8}, {"BOOL", DIT_U8}, /* masks: torch writes bool tensors as BOOL, one byte each */
    {"F8_E4M3", DIT_F8E4M3}, {"I8", DIT_I8},
};
#define DIT_ST_SUPPORTED "F32, BF16, F16, I64, I32, U8, BOOL, F8_E4M3, I8"

struct dit_safetensors {
  dit_st_tensor_t *tensors; /* sorted by name once loading finishes; names owned */
  size_t count, cap;
  char **files;             /* owned; each tensor's `file` points at one of these */
  size_t nfiles, files_cap;
  dit_mapping_t *maps;      /* owned mappings (open); parse borrows its image instead */
  size_t nmaps, maps_cap;
};

const char *dit_st_dtype_name(dit_dtype_t t) {
  for (size_t i = 0; i < sizeof kStDtypes / sizeof kStDtypes[0]; i++)
    if (kStDtypes[i].dtype == t) return kStDtypes[i].name;
  return "?";
}

/* ---- small helpers ---------------------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 8;
  while (n < need) {
    if (n > SIZE_MAX / 2 / elem) return -1;
    n *= 2;
  }
  void *q = realloc(*p, n * elem);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static uint64_t read_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Offset of the first byte that is not well-formed UTF-8 (NUL included, since names are C
 * strings), or len if all are. The format requires UTF-8 headers, and the JSON parser does not
 * check. */
static size_t utf8_invalid_at(const uint8_t *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    uint8_t c = s[i];
    if (c == 0) return i;
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t n;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) {
      n = 2, cp = c & 0x1fu, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      n = 3, cp = c & 0x0fu, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      n = 4, cp = c & 0x07u, min = 0x10000;
    } else {
      return i;
    }
    if (len - i < n) return i;
    for (size_t k = 1; k < n; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += n;
  }
  return len;
}

static void format_dims(char *buf, size_t cap, int rank, const int64_t *dims) {
  size_t n = 0;
  n += (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* "<file>: <part>" names a JSON document in its messages; the caller frees it. */
static char *doc_name(const char *file, const char *part) {
  size_t n = strlen(file) + strlen(part) + 3;
  char *w = malloc(n);
  if (w) snprintf(w, n, "%s: %s", file, part);
  return w;
}

/* ---- the checkpoint object --------------------------------------------------------------- */

static dit_status_t st_new(dit_safetensors_t **out) {
  *out = calloc(1, sizeof **out);
  return *out ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "safetensors: out of memory");
}

void dit_safetensors_close(dit_safetensors_t *st) {
  if (!st) return;
  for (size_t i = 0; i < st->count; i++) free((char *)st->tensors[i].name);
  free(st->tensors);
  for (size_t i = 0; i < st->nfiles; i++) free(st->files[i]);
  free(st->files);
  for (size_t i = 0; i < st->nmaps; i++) dit_file_unmap(&st->maps[i]);
  free(st->maps);
  free(st);
}

/* Records a file name the tensors will point at; the checkpoint owns the copy. */
static dit_status_t st_add_file(dit_safetensors_t *st, const char *name, const char **out) {
  if (grow((void **)&st->files, &st->files_cap, st->nfiles + 1, sizeof *st->files))
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", name);
  char *d = dup_str(name);
  if (!d) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", name);
  st->files[st->nfiles++] = d;
  *out = d;
  return DIT_OK;
}

size_t dit_safetensors_count(const dit_safetensors_t *st) { return st ? st->count : 0; }

const dit_st_tensor_t *dit_safetensors_at(const dit_safetensors_t *st, size_t i) {
  return st && i < st->count ? &st->tensors[i] : NULL;
}

const dit_st_tensor_t *dit_safetensors_find(const dit_safetensors_t *st, const char *name) {
  if (!st || !name) return NULL;
  size_t lo = 0, hi = st->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(st->tensors[mid].name, name);
    if (c == 0) return &st->tensors[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* ---- one image --------------------------------------------------------------------------- */

static dit_status_t check_metadata(const dit_json_t *meta) {
  DIT_RETURN_IF(dit_json_expect_object(meta));
  dit_json_iter_t it;
  dit_json_t v;
  const char *s;
  dit_json_iter_init(meta, &it);
  while (dit_json_iter_next(&it, &v)) DIT_RETURN_IF(dit_json_as_str(&v, DIT_ST_MAX_HEADER, true, &s));
  return DIT_OK;
}

/* Validates one header entry (a tensor, named by its key) and fills *t except name and file.
 * `base` is the data buffer. */
static dit_status_t parse_entry(const dit_json_t *e, const uint8_t *base, uint64_t data_size,
                                dit_st_tensor_t *t) {
  static const char *const keys[] = {"dtype", "shape", "data_offsets", NULL};
  static const char *const dtypes[] = {"F32", "BF16", "F16", "I64", "I32", "U8", "BOOL", "F8_E4M3", "I8", NULL};
  DIT_RETURN_IF(dit_json_expect_object(e));
  DIT_RETURN_IF(dit_json_check_keys(e, keys));
  int k = 0;
  DIT_RETURN_IF(dit_json_enum(e, "dtype", dtypes, &k));
  t->dtype = kStDtypes[k].dtype;
  uint64_t esize = dit_dtype_size(t->dtype);

  dit_json_t shape, d;
  size_t rank;
  DIT_RETURN_IF(dit_json_array(e, "shape", SIZE_MAX, &shape, &rank));
  if (rank > DIT_MAX_RANK)
    return dit_json_error(&shape, DIT_CODE_OUT_OF_RANGE, "rank %zu exceeds the maximum %d", rank,
                          DIT_MAX_RANK);
  t->rank = (int)rank;
  uint64_t elems = 1;
  int overflow = 0, has_zero = 0, i = 0;
  dit_json_iter_t it;
  dit_json_iter_init(&shape, &it);
  for (; dit_json_iter_next(&it, &d); i++) {
    int64_t v;
    DIT_RETURN_IF(dit_json_as_int(&d, 0, DIT_ST_MAX_INT, &v));
    t->dims[i] = v;
    has_zero |= v == 0;
    if (!overflow && __builtin_mul_overflow(elems, (uint64_t)v, &elems)) overflow = 1;
  }
  char dims_text[8 * 24 + 8];
  format_dims(dims_text, sizeof dims_text, t->rank, t->dims);
  uint64_t nbytes = 0;
  /* A zero dim makes the tensor empty however large the other dims are. */
  if (!has_zero && (overflow || __builtin_mul_overflow(elems, esize, &nbytes)))
    return dit_json_error(&shape, DIT_CODE_OUT_OF_RANGE,
                          "%s x %" PRIu64 " bytes overflows 64 bits", dims_text, esize);

  dit_json_t offsets, o;
  size_t noff;
  DIT_RETURN_IF(dit_json_array(e, "data_offsets", SIZE_MAX, &offsets, &noff));
  if (noff != 2)
    return dit_json_error(&offsets, DIT_CODE_INVALID_ARGUMENT,
                          "expected 2 entries [begin, end], found %zu", noff);
  int64_t be[2];
  dit_json_iter_init(&offsets, &it);
  for (i = 0; dit_json_iter_next(&it, &o); i++)
    DIT_RETURN_IF(dit_json_as_int(&o, 0, DIT_ST_MAX_INT, &be[i]));
  uint64_t begin = (uint64_t)be[0], end = (uint64_t)be[1];
  if (begin > end)
    return dit_json_error(&offsets, DIT_CODE_INVALID_ARGUMENT,
                          "[%" PRIu64 ", %" PRIu64 "]: begin is after end", begin, end);
  if (nbytes != end - begin)
    return dit_json_error(&offsets, DIT_CODE_INVALID_ARGUMENT,
                          "shape %s x %" PRIu64 " bytes (%s) needs %" PRIu64
                          " bytes, but data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64
                          " (expected %" PRIu64 ", found %" PRIu64 ")",
                          dims_text, esize, dtypes[k], nbytes, begin, end, end - begin, nbytes,
                          end - begin);
  if (end > data_size)
    return dit_json_error(&offsets, DIT_CODE_OUT_OF_RANGE,
                          "[%" PRIu64 ", %" PRIu64 "]: end is past the data buffer (expected "
                          "end <= %" PRIu64 ", found %" PRIu64 ")",
                          begin, end, data_size, end);
  t->nbytes = nbytes;
  t->data = base + begin;
  return DIT_OK;
}

typedef struct {
  uint64_t begin, end;
  size_t index;
} st_range_t;

static int cmp_range(const void *a, const void *b) {
  const st_range_t *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* Two tensors sharing bytes would let a write through one corrupt the other, and means the
 * header is lying; empty tensors own no bytes and cannot overlap anything. */
static dit_status_t check_overlaps(const dit_safetensors_t *st, size_t first, const uint8_t *base,
                                   const char *what) {
  size_t n = 0;
  for (size_t i = first; i < st->count; i++) n += st->tensors[i].nbytes != 0;
  if (n < 2) return DIT_OK;
  st_range_t *r = malloc(n * sizeof *r);
  if (!r) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  size_t k = 0;
  for (size_t i = first; i < st->count; i++) {
    const dit_st_tensor_t *t = &st->tensors[i];
    if (!t->nbytes) continue;
    r[k].begin = (uint64_t)((const uint8_t *)t->data - base);
    r[k].end = r[k].begin + t->nbytes;
    r[k].index = i;
    k++;
  }
  qsort(r, n, sizeof *r, cmp_range);
  /* Compare against the furthest-reaching range so far, not just the previous one: a long
   * range can cover several later ones. */
  size_t far = 0;
  dit_status_t s = DIT_OK;
  for (size_t i = 1; i < n; i++) {
    if (r[i].begin < r[far].end) {
      s = DIT_ERR(INVALID_ARGUMENT,
                  "%s: tensors '%s' (data_offsets [%" PRIu64 ", %" PRIu64 "]) and '%s' "
                  "(data_offsets [%" PRIu64 ", %" PRIu64 "]) overlap",
                  what, st->tensors[r[far].index].name, r[far].begin, r[far].end,
                  st->tensors[r[i].index].name, r[i].begin, r[i].end);
      break;
    }
    if (r[i].end > r[far].end) far = i;
  }
  free(r);
  return s;
}

/* Validates one image and appends its tensors (unsorted) to st; `file` is owned by st and
 * names the image in errors. On failure st holds whatever was appended; the caller closes it. */
static dit_status_t st_parse_image(dit_safetensors_t *st, const uint8_t *data, size_t size,
                                   const char *file) {
  if (size < 8)
    return DIT_ERR(DATA_LOSS,
                   "%s: truncated: %zu bytes, expected at least 8 for the header length", file,
                   size);
  uint64_t n = read_le64(data);
  if (n == 0)
    return DIT_ERR(INVALID_ARGUMENT,
                   "%s: header length is 0, expected a JSON object of at least 2 bytes", file);
  if (n > DIT_ST_MAX_HEADER)
    return DIT_ERR(OUT_OF_RANGE, "%s: header length %" PRIu64 " exceeds the limit of %" PRIu64
                   " bytes", file, n, DIT_ST_MAX_HEADER);
  if (n > size - 8)
    return DIT_ERR(DATA_LOSS,
                   "%s: truncated: header length %" PRIu64 " runs past the end of the file "
                   "(expected <= %zu bytes after the length field, found %" PRIu64 ")",
                   file, n, size - 8, n);
  const uint8_t *header = data + 8;
  size_t bad = utf8_invalid_at(header, (size_t)n);
  if (bad < n)
    return DIT_ERR(INVALID_ARGUMENT, "%s: header is not valid UTF-8 (byte 0x%02x at offset %zu)",
                   file, header[bad], bad);

  char *what = doc_name(file, "header");
  if (!what) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", file);
  dit_json_doc_t *doc = NULL;
  dit_json_t root, e;
  dit_json_iter_t it;
  dit_status_t s = dit_json_parse((const char *)header, (size_t)n, what, &doc);
  free(what);
  if (!s) s = dit_json_root(doc, &root);
  size_t count = 0;
  if (!s) {
    dit_json_iter_init(&root, &it);
    while (dit_json_iter_next(&it, &e)) count++;
  }
  if (!s && count > DIT_ST_MAX_TENSORS)
    s = dit_json_error(&root, DIT_CODE_OUT_OF_RANGE, "more than %u tensors", DIT_ST_MAX_TENSORS);
  if (!s && grow((void **)&st->tensors, &st->cap, st->count + count, sizeof *st->tensors))
    s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for %zu tensors", file, count);
  if (s) {
    dit_json_doc_free(doc);
    return s;
  }

  const uint8_t *base = header + n;
  uint64_t data_size = size - 8 - n;
  size_t first = st->count;
  dit_json_iter_init(&root, &it);
  while (!s && dit_json_iter_next(&it, &e)) {
    const char *key = e.v->string;
    if (!strcmp(key, "__metadata__")) {
      s = check_metadata(&e);
      continue;
    }
    if (strlen(key) > DIT_ST_MAX_NAME) {
      s = dit_json_error(&e, DIT_CODE_OUT_OF_RANGE,
                         "tensor name of %zu bytes, expected at most %u", strlen(key),
                         DIT_ST_MAX_NAME);
      break;
    }
    dit_st_tensor_t *t = &st->tensors[st->count];
    memset(t, 0, sizeof *t);
    s = parse_entry(&e, base, data_size, t);
    if (s) break;
    char *name = dup_str(key);
    if (!name) {
      s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", file);
      break;
    }
    t->name = name;
    t->file = file;
    st->count++;
  }
  dit_json_doc_free(doc);
  if (!s) s = check_overlaps(st, first, base, file);
  return s;
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const dit_st_tensor_t *)a)->name, ((const dit_st_tensor_t *)b)->name);
}

/* Sorts by name and refuses duplicates, within one file (repeated JSON keys) or across
 * shards. */
static dit_status_t st_finish(dit_safetensors_t *st) {
  if (st->count > 1) qsort(st->tensors, st->count, sizeof *st->tensors, cmp_tensor_name);
  for (size_t i = 1; i < st->count; i++) {
    const dit_st_tensor_t *a = &st->tensors[i - 1], *b = &st->tensors[i];
    if (strcmp(a->name, b->name)) continue;
    if (a->file == b->file)
      return DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s' appears twice in the header", a->file,
                     a->name);
    return DIT_ERR(INVALID_ARGUMENT, "tensor '%s' appears in two shards: %s and %s", a->name,
                   a->file, b->file);
  }
  return DIT_OK;
}

dit_status_t dit_safetensors_parse(const uint8_t *data, size_t size, const char *what,
                                   dit_safetensors_t **out) {
  *out = NULL;
  if (!what) what = "safetensors image";
  if (!data && size) return DIT_ERR(INVALID_ARGUMENT, "%s: NULL data of %zu bytes", what, size);
  dit_safetensors_t *st;
  DIT_RETURN_IF(st_new(&st));
  const char *file;
  dit_status_t s = st_add_file(st, what, &file);
  if (!s) s = st_parse_image(st, data, size, file);
  if (!s) s = st_finish(st);
  if (s) {
    dit_safetensors_close(st);
    return s;
  }
  *out = st;
  return DIT_OK;
}

/* ---- files, indexes and directories ------------------------------------------------------ */

static dit_status_t st_load_file(dit_safetensors_t *st, const char *path, const char **out_file) {
  if (grow((void **)&st->maps, &st->maps_cap, st->nmaps + 1, sizeof *st->maps))
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path);
  const char *file;
  DIT_RETURN_IF(st_add_file(st, path, &file));
  dit_mapping_t m;
  DIT_RETURN_IF(dit_file_map(path, &m));
  st->maps[st->nmaps++] = m;
  if (out_file) *out_file = file;
  return st_parse_image(st, m.data, m.size, file);
}

static char *join_path(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return dup_str(".");
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, path, n);
    d[n] = 0;
  }
  return d;
}

typedef struct {
  const char *tensor;
  const char *shard;
  size_t shard_index; /* into the sorted distinct shard list */
} st_map_entry_t;

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const st_map_entry_t *)a)->tensor, ((const st_map_entry_t *)b)->tensor);
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Shards must sit beside the index: a name with a directory part could reach anywhere. */
static int plain_file_name(const char *s) {
  return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Every map entry must name a tensor its shard holds, and every shard tensor must be listed
 * with that shard: both lists are sorted by name, so one lockstep walk covers both. */
static dit_status_t check_index_matches(const dit_safetensors_t *st, const char *index,
                                        const st_map_entry_t *e, size_t ne,
                                        const char *const *shard_files) {
  size_t i = 0, j = 0;
  while (i < ne || j < st->count) {
    int c = i == ne ? 1 : j == st->count ? -1 : strcmp(e[i].tensor, st->tensors[j].name);
    if (c < 0)
      return DIT_ERR(NOT_FOUND, "%s: weight_map places tensor '%s' in %s, but that shard does "
                     "not hold it", index, e[i].tensor, shard_files[e[i].shard_index]);
    if (c > 0)
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s holds tensor '%s', which weight_map does not list",
                     index, st->tensors[j].file, st->tensors[j].name);
    if (st->tensors[j].file != shard_files[e[i].shard_index])
      return DIT_ERR(INVALID_ARGUMENT,
                     "%s: weight_map places tensor '%s' in %s, but it is in %s", index,
                     e[i].tensor, shard_files[e[i].shard_index], st->tensors[j].file);
    i++, j++;
  }
  return DIT_OK;
}

static dit_status_t open_index(const char *index, dit_safetensors_t *st) {
  char *text;
  size_t len;
  DIT_RETURN_IF(dit_file_read(index, DIT_ST_MAX_INDEX, &text, &len));
  size_t bad = utf8_invalid_at((const uint8_t *)text, len);
  if (bad < len) {
    dit_status_t s = DIT_ERR(INVALID_ARGUMENT, "%s: index is not valid UTF-8 (byte 0x%02x at "
                             "offset %zu)", index, (unsigned char)text[bad], bad);
    free(text);
    return s;
  }
  dit_json_doc_t *doc = NULL;
  dit_status_t s = dit_json_parse(text, len, index, &doc);
  free(text);
  if (s) return s;

  st_map_entry_t *e = NULL;
  const char **shards = NULL;
  const char **shard_files = NULL;
  char *dir = NULL;
  size_t ne = 0, nshards = 0, cap = 0;
  dit_json_t root, map, v;
  dit_json_iter_t it;
  /* Other members (metadata.total_size, ...) say nothing the shards do not. */
  if ((s = dit_json_root(doc, &root))) goto done;
  if (dit_json_has(&root, "metadata") && (s = dit_json_object(&root, "metadata", &v))) goto done;
  if ((s = dit_json_object(&root, "weight_map", &map))) goto done;
  dit_json_iter_init(&map, &it);
  while (dit_json_iter_next(&it, &v)) cap++;
  if (cap > DIT_ST_MAX_TENSORS) {
    s = dit_json_error(&map, DIT_CODE_OUT_OF_RANGE, "more than %u tensors", DIT_ST_MAX_TENSORS);
    goto done;
  }
  e = calloc(cap ? cap : 1, sizeof *e);
  shards = calloc(cap ? cap : 1, sizeof *shards);
  shard_files = calloc(cap ? cap : 1, sizeof *shard_files);
  dir = dir_of(index);
  if (!e || !shards || !shard_files || !dir) {
    s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", index);
    goto done;
  }
  dit_json_iter_init(&map, &it);
  while (dit_json_iter_next(&it, &v)) {
    const char *shard = NULL;
    if (strlen(v.v->string) > DIT_ST_MAX_NAME) {
      s = dit_json_error(&v, DIT_CODE_OUT_OF_RANGE, "tensor name of %zu bytes, expected at most %u",
                         strlen(v.v->string), DIT_ST_MAX_NAME);
      goto done;
    }
    if ((s = dit_json_as_str(&v, NAME_MAX, true, &shard))) goto done;
    if (!plain_file_name(shard)) {
      char q[96];
      dit_json_quote(shard, q);
      s = dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "shard %s is not a plain file name beside "
                         "the index (no '/', '.' or '..')", q);
      goto done;
    }
    e[ne].tensor = v.v->string;
    e[ne].shard = shard;
    shards[ne] = shard;
    ne++;
  }
  qsort(e, ne, sizeof *e, cmp_entry);
  /* Distinct shards, opened in name order so errors do not depend on the JSON's order. */
  qsort(shards, ne, sizeof *shards, cmp_str_ptr);
  for (size_t i = 0; i < ne; i++)
    if (!nshards || strcmp(shards[nshards - 1], shards[i])) shards[nshards++] = shards[i];
  for (size_t i = 0; i < nshards; i++) {
    char *path = join_path(dir, shards[i]);
    if (!path) {
      s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", index);
      goto done;
    }
    s = st_load_file(st, path, &shard_files[i]);
    free(path);
    if (s) {
      s = dit_status_annotate(s, "%s: shard \"%s\" named in weight_map", index, shards[i]);
      goto done;
    }
  }
  for (size_t i = 0; i < ne; i++) {
    const char **hit = bsearch(&e[i].shard, shards, nshards, sizeof *shards, cmp_str_ptr);
    e[i].shard_index = (size_t)(hit - shards);
  }
  s = st_finish(st);
  if (!s) s = check_index_matches(st, index, e, ne, shard_files);
done:
  free(e);
  free(shards);
  free(shard_files);
  free(dir);
  dit_json_doc_free(doc);
  return s;
}

static int is_regular(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

typedef struct {
  char **items;
  size_t n, cap;
} st_names_t;

static void names_free(st_names_t *l) {
  for (size_t i = 0; i < l->n; i++) free(l->items[i]);
  free(l->items);
}

static int names_push(st_names_t *l, const char *s) {
  if (grow((void **)&l->items, &l->cap, l->n + 1, sizeof *l->items)) return -1;
  char *d = dup_str(s);
  if (!d) return -1;
  l->items[l->n++] = d;
  return 0;
}

static dit_status_t ambiguous(const char *dir, const char *kind, const st_names_t *l) {
  size_t n = 1;
  for (size_t i = 0; i < l->n; i++) n += strlen(l->items[i]) + 2;
  char *list = malloc(n);
  if (!list) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", dir);
  size_t k = 0;
  for (size_t i = 0; i < l->n; i++)
    k += (size_t)snprintf(list + k, n - k, "%s%s", i ? ", " : "", l->items[i]);
  dit_status_t s = DIT_ERR(INVALID_ARGUMENT,
                           "%s: more than one %s, cannot choose: %s; pass the one to use", dir,
                           kind, list);
  free(list);
  return s;
}

/* Picks the checkpoint file in a directory; *out is a heap path. */
static dit_status_t resolve_dir(const char *dir, char **out) {
  *out = NULL;
  static const char *const kPreferred[] = {"diffusion_pytorch_model.safetensors.index.json",
                                           "diffusion_pytorch_model.safetensors"};
  for (size_t i = 0; i < 2; i++) {
    char *p = join_path(dir, kPreferred[i]);
    if (!p) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", dir);
    if (is_regular(p)) {
      *out = p;
      return DIT_OK;
    }
    free(p);
  }
  DIR *d = opendir(dir);
  if (!d) return DIT_ERR(IO, "%s: cannot open directory", dir);
  st_names_t idx = {0}, files = {0};
  dit_status_t s = DIT_OK;
  struct dirent *de;
  while (!s && (de = readdir(d))) {
    int is_index = ends_with(de->d_name, ".safetensors.index.json");
    int is_file = ends_with(de->d_name, ".safetensors");
    if (!is_index && !is_file) continue;
    char *p = join_path(dir, de->d_name);
    if (!p) {
      s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", dir);
      break;
    }
    if (is_regular(p) && names_push(is_index ? &idx : &files, de->d_name))
      s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", dir);
    free(p);
  }
  closedir(d);
  if (!s) {
    if (idx.n > 1) qsort(idx.items, idx.n, sizeof *idx.items, cmp_str_ptr);
    if (files.n > 1) qsort(files.items, files.n, sizeof *files.items, cmp_str_ptr);
    const char *pick = NULL;
    if (idx.n > 1)
      s = ambiguous(dir, "*.safetensors.index.json", &idx);
    else if (idx.n == 1)
      pick = idx.items[0];
    else if (files.n > 1)
      s = ambiguous(dir, "*.safetensors file and no index", &files);
    else if (files.n == 1)
      pick = files.items[0];
    else
      s = DIT_ERR(NOT_FOUND, "%s: no *.safetensors or *.safetensors.index.json file in the "
                  "directory", dir);
    if (pick && !(*out = join_path(dir, pick)))
      s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", dir);
  }
  names_free(&idx);
  names_free(&files);
  return s;
}

dit_status_t dit_safetensors_open(const char *path, dit_safetensors_t **out) {
  *out = NULL;
  char *chosen = NULL;
  if (dit_is_dir(path)) {
    DIT_RETURN_IF(resolve_dir(path, &chosen));
    path = chosen;
  }
  dit_safetensors_t *st;
  dit_status_t s = st_new(&st);
  if (!s) {
    /* Any .json is taken for an index: reading one as a safetensors image would only give a
     * confusing header-length error. */
    if (ends_with(path, ".json")) {
      s = open_index(path, st);
    } else {
      s = st_load_file(st, path, NULL);
      if (!s) s = st_finish(st);
    }
    if (s) {
      dit_safetensors_close(st);
    } else {
      *out = st;
    }
  }
  free(chosen);
  return s;
}

/* ---- writer ------------------------------------------------------------------------------ */

typedef struct {
  char *name;
  dit_dtype_t dtype;
  int rank;
  int64_t dims[DIT_MAX_RANK];
  size_t nbytes;
  void *data;
} st_wtensor_t;

typedef struct {
  char *key, *value;
} st_wmeta_t;

struct dit_st_writer {
  st_wtensor_t *t;
  size_t n, cap;
  st_wmeta_t *meta;
  size_t nmeta, meta_cap;
};

dit_status_t dit_st_writer_create(dit_st_writer_t **out) {
  *out = calloc(1, sizeof **out);
  return *out ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "safetensors writer: out of memory");
}

void dit_st_writer_destroy(dit_st_writer_t *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n; i++) {
    free(w->t[i].name);
    free(w->t[i].data);
  }
  free(w->t);
  for (size_t i = 0; i < w->nmeta; i++) {
    free(w->meta[i].key);
    free(w->meta[i].value);
  }
  free(w->meta);
  free(w);
}

/* What the writer emits must pass our own reader, which wants UTF-8 headers. */
static int valid_utf8_str(const char *s) {
  size_t n = strlen(s);
  return utf8_invalid_at((const uint8_t *)s, n) == n;
}

dit_status_t dit_st_writer_add(dit_st_writer_t *w, const char *name, dit_dtype_t dtype, int rank,
                               const int64_t *dims, const void *data) {
  if (!name) return DIT_ERR(INVALID_ARGUMENT, "safetensors writer: tensor name is NULL");
  if (strlen(name) > DIT_ST_MAX_NAME)
    return DIT_ERR(OUT_OF_RANGE, "safetensors writer: a tensor name of %zu bytes, expected at "
                   "most %u", strlen(name), DIT_ST_MAX_NAME);
  if (!strcmp(name, "__metadata__"))
    return DIT_ERR(INVALID_ARGUMENT, "safetensors writer: tensor name '__metadata__' is reserved");
  if (!valid_utf8_str(name))
    return DIT_ERR(INVALID_ARGUMENT, "safetensors writer: tensor '%s': name is not valid UTF-8",
                   name);
  if (!strcmp(dit_st_dtype_name(dtype), "?"))
    return DIT_ERR(INVALID_ARGUMENT, "safetensors writer: tensor '%s': unknown dtype %d", name,
                   (int)dtype);
  if (rank < 0 || rank > DIT_MAX_RANK)
    return DIT_ERR(OUT_OF_RANGE, "safetensors writer: tensor '%s': rank %d, expected 0..%d", name,
                   rank, DIT_MAX_RANK);
  if (rank && !dims)
    return DIT_ERR(INVALID_ARGUMENT, "safetensors writer: tensor '%s': dims is NULL", name);
  size_t nbytes = dit_dtype_size(dtype);
  int overflow = 0, has_zero = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0 || dims[i] > DIT_ST_MAX_INT)
      return DIT_ERR(OUT_OF_RANGE, "safetensors writer: tensor '%s': dims[%d] is %" PRId64
                     ", expected 0..2^53-1", name, i, dims[i]);
    has_zero |= dims[i] == 0;
    if (!overflow && __builtin_mul_overflow(nbytes, (size_t)dims[i], &nbytes)) overflow = 1;
  }
  if (has_zero) nbytes = 0;
  else if (overflow)
    return DIT_ERR(OUT_OF_RANGE, "safetensors writer: tensor '%s': size overflows", name);
  if (nbytes && !data)
    return DIT_ERR(INVALID_ARGUMENT, "safetensors writer: tensor '%s': data is NULL for %zu bytes",
                   name, nbytes);
  if (grow((void **)&w->t, &w->cap, w->n + 1, sizeof *w->t))
    return DIT_ERR(RESOURCE_EXHAUSTED, "safetensors writer: out of memory");
  st_wtensor_t *t = &w->t[w->n];
  memset(t, 0, sizeof *t);
  t->name = dup_str(name);
  t->data = malloc(nbytes ? nbytes : 1);
  if (!t->name || !t->data) {
    free(t->name);
    free(t->data);
    return DIT_ERR(RESOURCE_EXHAUSTED, "safetensors writer: tensor '%s': cannot copy %zu bytes",
                   name, nbytes);
  }
  if (nbytes) memcpy(t->data, data, nbytes);
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  t->nbytes = nbytes;
  w->n++;
  return DIT_OK;
}

dit_status_t dit_st_writer_set_metadata(dit_st_writer_t *w, const char *key, const char *value) {
  if (!key || !value)
    return DIT_ERR(INVALID_ARGUMENT, "safetensors writer: metadata key or value is NULL");
  if (!valid_utf8_str(key) || !valid_utf8_str(value))
    return DIT_ERR(INVALID_ARGUMENT, "safetensors writer: metadata '%s': not valid UTF-8", key);
  char *v = dup_str(value);
  if (!v) return DIT_ERR(RESOURCE_EXHAUSTED, "safetensors writer: out of memory");
  for (size_t i = 0; i < w->nmeta; i++) {
    if (!strcmp(w->meta[i].key, key)) {
      free(w->meta[i].value);
      w->meta[i].value = v;
      return DIT_OK;
    }
  }
  char *k = dup_str(key);
  if (!k || grow((void **)&w->meta, &w->meta_cap, w->nmeta + 1, sizeof *w->meta)) {
    free(k);
    free(v);
    return DIT_ERR(RESOURCE_EXHAUSTED, "safetensors writer: out of memory");
  }
  w->meta[w->nmeta].key = k;
  w->meta[w->nmeta].value = v;
  w->nmeta++;
  return DIT_OK;
}

static void buf_u64(dit_strbuf_t *b, uint64_t v) { dit_strbuf_printf(b, "%" PRIu64, v); }

static int cmp_wtensor(const void *a, const void *b) {
  return strcmp(((const st_wtensor_t *)a)->name, ((const st_wtensor_t *)b)->name);
}

static int cmp_wmeta(const void *a, const void *b) {
  return strcmp(((const st_wmeta_t *)a)->key, ((const st_wmeta_t *)b)->key);
}

/* The file's first part into *out: the length prefix and the padded header, tensors sorted by
 * name (`what` names the destination in errors). */
static dit_status_t writer_header(dit_st_writer_t *w, const char *path, dit_strbuf_t *out) {
  /* Sorted output makes the file a function of the tensors alone, whatever the add order. */
  if (w->n > 1) qsort(w->t, w->n, sizeof *w->t, cmp_wtensor);
  if (w->nmeta > 1) qsort(w->meta, w->nmeta, sizeof *w->meta, cmp_wmeta);
  for (size_t i = 1; i < w->n; i++)
    if (!strcmp(w->t[i - 1].name, w->t[i].name))
      return DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s' was added twice", path, w->t[i].name);

  dit_strbuf_t b = {0};
  dit_strbuf_put(&b, "\0\0\0\0\0\0\0\0", 8); /* the length, filled in below */
  dit_strbuf_put(&b, "{", 1);
  int first = 1;
  if (w->nmeta) {
    dit_strbuf_puts(&b, "\"__metadata__\":{");
    for (size_t i = 0; i < w->nmeta; i++) {
      if (i) dit_strbuf_put(&b, ",", 1);
      dit_strbuf_json_string(&b, w->meta[i].key);
      dit_strbuf_put(&b, ":", 1);
      dit_strbuf_json_string(&b, w->meta[i].value);
    }
    dit_strbuf_put(&b, "}", 1);
    first = 0;
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < w->n; i++) {
    const st_wtensor_t *t = &w->t[i];
    if (!first) dit_strbuf_put(&b, ",", 1);
    first = 0;
    dit_strbuf_json_string(&b, t->name);
    dit_strbuf_puts(&b, ":{\"dtype\":");
    dit_strbuf_json_string(&b, dit_st_dtype_name(t->dtype));
    dit_strbuf_puts(&b, ",\"shape\":[");
    for (int d = 0; d < t->rank; d++) {
      if (d) dit_strbuf_put(&b, ",", 1);
      buf_u64(&b, (uint64_t)t->dims[d]);
    }
    dit_strbuf_puts(&b, "],\"data_offsets\":[");
    buf_u64(&b, offset);
    dit_strbuf_put(&b, ",", 1);
    if (__builtin_add_overflow(offset, (uint64_t)t->nbytes, &offset) ||
        offset > (uint64_t)DIT_ST_MAX_INT) {
      free(b.p);
      return DIT_ERR(OUT_OF_RANGE, "%s: tensor '%s': data would end past 2^53 bytes", path,
                     t->name);
    }
    buf_u64(&b, offset);
    dit_strbuf_puts(&b, "]}");
  }
  dit_strbuf_put(&b, "}", 1);
  /* Readers may map the data buffer and cast: padding the header keeps it 8-aligned. */
  while (!b.oom && b.len % 8) dit_strbuf_put(&b, " ", 1);
  uint64_t header_len = b.len - 8;
  if (!b.oom && header_len > DIT_ST_MAX_HEADER) {
    free(b.p);
    return DIT_ERR(OUT_OF_RANGE, "%s: header of %" PRIu64 " bytes exceeds the limit of %" PRIu64,
                   path, header_len, DIT_ST_MAX_HEADER);
  }
  if (b.oom) {
    free(b.p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the header of %zu tensors", path, w->n);
  }
  for (int i = 0; i < 8; i++) b.p[i] = (char)(header_len >> (8 * i));
  *out = b;
  return DIT_OK;
}

dit_status_t dit_st_writer_write(dit_st_writer_t *w, const char *path) {
  dit_strbuf_t b = {0};
  DIT_RETURN_IF(writer_header(w, path, &b));
  /* The header, then every tensor's bytes from where they are: no copy of the whole file. */
  const void **parts = malloc((w->n + 1) * sizeof *parts);
  size_t *sizes = parts ? malloc((w->n + 1) * sizeof *sizes) : NULL;
  if (!sizes || w->n + 1 > INT_MAX) {
    free(parts);
    free(sizes);
    free(b.p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the header of %zu tensors", path, w->n);
  }
  parts[0] = b.p, sizes[0] = b.len;
  for (size_t i = 0; i < w->n; i++) parts[i + 1] = w->t[i].data, sizes[i + 1] = w->t[i].nbytes;
  dit_status_t s = dit_file_write_atomic_parts(path, parts, sizes, (int)w->n + 1);
  free(parts);
  free(sizes);
  free(b.p);
  return s;
}

dit_status_t dit_st_writer_serialize(dit_st_writer_t *w, const char *what, uint8_t **out, size_t *out_len) {
  dit_strbuf_t b = {0};
  DIT_RETURN_IF(writer_header(w, what, &b));
  size_t total = b.len;
  for (size_t i = 0; i < w->n; i++) total += w->t[i].nbytes;
  uint8_t *p = malloc(total ? total : 1);
  if (!p) {
    free(b.p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for %zu bytes", what, total);
  }
  memcpy(p, b.p, b.len);
  size_t at = b.len;
  for (size_t i = 0; i < w->n; i++) {
    if (w->t[i].nbytes) memcpy(p + at, w->t[i].data, w->t[i].nbytes);
    at += w->t[i].nbytes;
  }
  free(b.p);
  *out = p, *out_len = total;
  return DIT_OK;
}
