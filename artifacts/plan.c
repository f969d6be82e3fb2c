/* Plan serialization (cJSON), parsing through base/json and validation, the offload section included. */
#include "artifacts/plan.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json.h"

static const char *const kStorage[] = {"arena", "weight", "input", "output", NULL};

int dit_storage_parse(const char *name, dit_storage_t *out) {
  for (int i = 0; i < 4; i++)
    if (!strcmp(name, kStorage[i])) {
      *out = (dit_storage_t)i;
      return 0;
    }
  return -1;
}

const char *dit_storage_name(dit_storage_t s) { return (unsigned)s < 4 ? kStorage[s] : "?"; }

void dit_plan_free(dit_plan_t *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n_values; i++) {
    free(p->values[i].name);
    free(p->values[i].ref);
  }
  free(p->values);
  free(p->steps);
  dit_plan_offload_clear(&p->offload);
  free(p);
}

void dit_plan_offload_clear(dit_plan_offload_t *o) {
  for (size_t i = 0; o->blocks && i < o->n_blocks; i++) {
    free(o->blocks[i].yield_steps);
    free(o->blocks[i].window_chunks);
  }
  free(o->blocks);
  memset(o, 0, sizeof *o);
}

const char *dit_plan_offload_mode_name(dit_plan_offload_mode_t mode) {
  return mode == DIT_PLAN_OFFLOAD_CHUNKED ? "chunked" : mode == DIT_PLAN_OFFLOAD_LAYERWISE ? "layerwise" : "none";
}

/* ---- writer ---- */

static cJSON *int_array(const int64_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

static cJSON *u32_array(const uint32_t *v, size_t n) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

static cJSON *pair(uint64_t a, uint64_t b) {
  cJSON *r = cJSON_CreateArray();
  if (r) cJSON_AddItemToArray(r, cJSON_CreateNumber((double)a)), cJSON_AddItemToArray(r, cJSON_CreateNumber((double)b));
  return r;
}

static unsigned profile_with(const dit_hw_profile_t *hw) {
  return (hw->overhead_mib > 0 ? DIT_HW_WITH_OVERHEAD : 0) | (hw->step_overhead_us > 0 ? DIT_HW_WITH_STEP_OVERHEAD : 0) |
         (hw->coll_gbs > 0 ? DIT_HW_WITH_COLLECTIVES : 0);
}

static dit_status_t offload_to_json(const dit_plan_offload_t *o, cJSON *root) {
  cJSON *of = cJSON_AddObjectToObject(root, "offload");
  if (!of) return DIT_ERR(RESOURCE_EXHAUSTED, "plan: out of memory");
  cJSON_AddNumberToObject(of, "version", o->swap.present ? 2 : 1);
  cJSON_AddStringToObject(of, "mode", dit_plan_offload_mode_name(o->mode));
  cJSON_AddNumberToObject(of, "chunk_bytes", (double)o->chunk_bytes);
  cJSON_AddNumberToObject(of, "head_bytes", (double)o->head_bytes);
  cJSON_AddItemToObject(of, "tail", pair(o->tail_offset, o->tail_bytes));
  cJSON_AddNumberToObject(of, "overhead_bytes", (double)o->overhead_bytes);
  cJSON_AddNumberToObject(of, "predicted_peak_bytes", (double)o->predicted_peak_bytes);
  cJSON_AddNumberToObject(of, "resident_peak_bytes", (double)o->resident_peak_bytes);
  cJSON_AddNumberToObject(of, "predicted_step_ms", o->predicted_step_ms);
  cJSON_AddNumberToObject(of, "resident_step_ms", o->resident_step_ms);
  cJSON *hp = cJSON_AddObjectToObject(of, "profile");
  DIT_RETURN_IF(hp ? dit_hw_profile_add_json(&o->profile, profile_with(&o->profile), hp) : DIT_ERR(RESOURCE_EXHAUSTED, "plan: out of memory"));
  cJSON *blocks = cJSON_AddArrayToObject(of, "blocks");
  for (size_t i = 0; blocks && i < o->n_blocks; i++) {
    const dit_plan_offload_block_t *b = &o->blocks[i];
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddItemToArray(blocks, x);
    cJSON_AddNumberToObject(x, "index", b->index);
    cJSON_AddItemToObject(x, "range", pair(b->lo, b->hi));
    cJSON_AddNumberToObject(x, "resident_bytes", (double)(b->split - b->lo));
    cJSON_AddNumberToObject(x, "chunks", b->chunks);
    cJSON_AddNumberToObject(x, "resident_chunks", b->resident_chunks);
    cJSON_AddItemToObject(x, "yield_steps", u32_array(b->yield_steps, b->n_yields));
    if (b->window_chunks) cJSON_AddItemToObject(x, "window_chunks", u32_array(b->window_chunks, (size_t)b->n_yields + 1));
    cJSON_AddNumberToObject(x, "flops", b->flops);
    cJSON_AddNumberToObject(x, "f_star", b->f_star);
    cJSON_AddNumberToObject(x, "t_comp_ms", b->t_comp_ms);
    cJSON_AddNumberToObject(x, "t_pref_ms", b->t_pref_ms);
    cJSON_AddNumberToObject(x, "t_coll_ms", b->t_coll_ms);
    cJSON_AddNumberToObject(x, "resident", b->resident);
  }
  if (o->swap.present && !dit_plan_swap_to_json(&o->swap, of)) return DIT_ERR(RESOURCE_EXHAUSTED, "plan: out of memory");
  return DIT_OK;
}

cJSON *dit_plan_swap_to_json(const dit_plan_swap_t *w, cJSON *parent) {
  cJSON *x = cJSON_AddObjectToObject(parent, "swap");
  if (!x) return NULL;
  cJSON_AddNumberToObject(x, "bytes", (double)w->bytes);
  cJSON_AddNumberToObject(x, "chunk_bytes", (double)w->chunk_bytes);
  cJSON_AddNumberToObject(x, "chunks", w->chunks);
  cJSON_AddNumberToObject(x, "chunks_per_block", w->chunks_per_block);
  cJSON_AddNumberToObject(x, "forwards", w->forwards);
  cJSON_AddNumberToObject(x, "predicted_stall_ms", w->predicted_stall_ms);
  cJSON_AddNumberToObject(x, "predicted_peak_bytes", (double)w->predicted_peak_bytes);
  return x;
}

dit_status_t dit_plan_to_json(const dit_plan_t *p, char **out_text) {
  *out_text = NULL;
  cJSON *root = cJSON_CreateObject();
  if (!root) return DIT_ERR(RESOURCE_EXHAUSTED, "plan: out of memory");
  cJSON_AddStringToObject(root, "format", "ditc-plan");
  cJSON_AddNumberToObject(root, "version", DIT_PLAN_VERSION);
  cJSON_AddNumberToObject(root, "arena_bytes", (double)p->arena_bytes);
  if (p->work.present) {
    cJSON *w = cJSON_AddObjectToObject(root, "work");
    cJSON_AddNumberToObject(w, "flops", p->work.flops);
    cJSON_AddNumberToObject(w, "collectives", (double)p->work.collectives);
    cJSON_AddNumberToObject(w, "collective_bytes", (double)p->work.collective_bytes);
  }
  cJSON *values = cJSON_AddArrayToObject(root, "values");
  for (size_t i = 0; values && i < p->n_values; i++) {
    const dit_plan_value_t *v = &p->values[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(values, o);
    cJSON_AddStringToObject(o, "name", v->name);
    cJSON_AddStringToObject(o, "storage", dit_storage_name(v->storage));
    if (v->ref) cJSON_AddStringToObject(o, "ref", v->ref);
    cJSON_AddStringToObject(o, "dtype", dit_dtype_name(v->dtype));
    cJSON_AddItemToObject(o, "shape", int_array(v->dims, v->rank));
    if (v->storage == DIT_STORAGE_ARENA) cJSON_AddNumberToObject(o, "offset", (double)v->offset);
    if (v->updates >= 0) cJSON_AddNumberToObject(o, "updates", v->updates);
  }
  cJSON *steps = cJSON_AddArrayToObject(root, "steps");
  for (size_t i = 0; steps && i < p->n_steps; i++) {
    const dit_plan_step_t *s = &p->steps[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(steps, o);
    cJSON_AddStringToObject(o, "op", dit_op_info(s->kind)->name);
    int64_t tmp[DIT_PLAN_MAX_IN];
    for (int k = 0; k < s->n_in; k++) tmp[k] = s->in[k];
    cJSON_AddItemToObject(o, "in", int_array(tmp, s->n_in));
    for (int k = 0; k < s->n_out; k++) tmp[k] = s->out[k];
    cJSON_AddItemToObject(o, "out", int_array(tmp, s->n_out));
    cJSON *ints = cJSON_AddObjectToObject(o, "ints");
    cJSON *floats = cJSON_AddObjectToObject(o, "floats");
    for (int a = 0; ints && floats && a < s->attrs.count; a++) {
      const dit_attr_t *at = &s->attrs.items[a];
      if (at->is_float) cJSON_AddNumberToObject(floats, at->key, at->f);
      else cJSON_AddNumberToObject(ints, at->key, (double)at->i);
    }
    cJSON_AddNumberToObject(o, "block", s->block);
    if (s->has_kernel) {
      const dit_plan_kernel_t *k = &s->kernel;
      cJSON *ko = cJSON_AddObjectToObject(o, "kernel");
      cJSON_AddStringToObject(ko, "cubin", k->cubin);
      cJSON_AddStringToObject(ko, "ptx", k->ptx);
      cJSON_AddStringToObject(ko, "entry", k->entry);
      int64_t g[3] = {k->grid[0], k->grid[1], k->grid[2]}, b[3] = {k->block[0], k->block[1], k->block[2]};
      cJSON_AddItemToObject(ko, "grid", int_array(g, 3));
      cJSON_AddItemToObject(ko, "block", int_array(b, 3));
      cJSON_AddNumberToObject(ko, "smem", k->smem);
      if (k->source[0]) cJSON_AddStringToObject(ko, "source", k->source);
      cJSON *tm = k->n_tmaps ? cJSON_AddArrayToObject(ko, "tmaps") : NULL;
      for (int i = 0; tm && i < k->n_tmaps; i++) {
        cJSON *t = cJSON_CreateObject();
        int64_t box[DIT_PLAN_TMAP_MAX_RANK];
        for (uint32_t d = 0; d < k->tmaps[i].rank; d++) box[d] = k->tmaps[i].box[d];
        cJSON_AddNumberToObject(t, "arg", k->tmaps[i].arg);
        cJSON_AddItemToObject(t, "box", int_array(box, (int)k->tmaps[i].rank));
        cJSON_AddNumberToObject(t, "swizzle", k->tmaps[i].swizzle);
        cJSON_AddItemToArray(tm, t);
      }
    }
  }
  dit_status_t os = p->offload.mode != DIT_PLAN_OFFLOAD_NONE ? offload_to_json(&p->offload, root) : DIT_OK;
  char *text = os ? NULL : cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (os) return os;
  if (!text) return DIT_ERR(RESOURCE_EXHAUSTED, "plan: out of memory while printing");
  *out_text = text;
  return DIT_OK;
}

/* ---- parser ---- */

/* Every read below goes through base/json: each value is type- and range-checked before use
 * and every refusal names its field path, e.g. "field 'steps[12].in[1]'". */

#define MAX_VALUES (1 << 22)
#define MAX_STEPS (1 << 22)
#define MAX_NAME 4096                    /* bytes of a value name or a ref */
#define MAX_DIM ((int64_t)1 << 40)       /* one dimension of a value */
#define MAX_ARENA ((int64_t)1 << 50)
#define MAX_ATTR_INT 9007199254740992.0  /* 2^53: integer attributes are exact doubles */
#define MAX_BLOCK 1000000
#define MAX_SMEM 232448                  /* dynamic shared memory of any CUDA device */

static dit_status_t oom(const dit_json_t *v) { return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", v->what); }

/* A view of obj's member `key` for a message about it (the member need not exist). */
static dit_json_t member_view(const dit_json_t *obj, const char *key) {
  dit_json_t r = *obj;
  dit_json_path_key(r.path, obj->path, key);
  return r;
}

/* A string member of at most MAX_NAME bytes; its view stays with the caller to name it in a refusal. */
static dit_status_t get_str(const dit_json_t *obj, const char *key, dit_json_t *out_view, const char **out) {
  DIT_RETURN_IF(dit_json_get(obj, key, out_view));
  return dit_json_as_str(out_view, MAX_NAME, true, out);
}

/* The refusal of a string that is not what the field needs: "expected ..., found "..."". */
static dit_status_t refuse_str(const dit_json_t *v, const char *expected, const char *found) {
  char q[96];
  dit_json_quote(found, q);
  return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected %s, found %s", expected, q);
}

static int is_hex32(const char *s) {
  if (strlen(s) != 32) return 0;
  for (int i = 0; i < 32; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

/* A PTX identifier: the runtime looks the entry up by this name in its module. */
static int is_identifier(const char *s) {
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' || *s == '$')) return 0;
  for (s++; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '$')) return 0;
  return 1;
}

/* A kernel module: 32 lowercase hex digits, or "" where allow_empty (no portable PTX). */
static dit_status_t get_module(const dit_json_t *k, const char *key, bool allow_empty, char dst[DIT_HASH_HEX]) {
  dit_json_t v;
  const char *s = NULL;
  DIT_RETURN_IF(get_str(k, key, &v, &s));
  if (!(allow_empty && !s[0]) && !is_hex32(s))
    return refuse_str(&v, allow_empty ? "\"\" or 32 lowercase hex digits" : "32 lowercase hex digits", s);
  memcpy(dst, s, strlen(s) + 1);
  return DIT_OK;
}

/* A name or a ref: at most MAX_NAME bytes (empty only where allow_empty), copied. */
static dit_status_t dup_name(const dit_json_t *obj, const char *key, bool allow_empty, char **out) {
  const char *s = NULL;
  DIT_RETURN_IF(dit_json_str(obj, key, MAX_NAME, allow_empty, &s));
  if (!(*out = strdup(s))) return oom(obj);
  return DIT_OK;
}

/* "shape": at most DIT_MAX_RANK dimensions in [0, 2^40] whose product times 16 fits 64 bits. */
static dit_status_t parse_shape(const dit_json_t *o, dit_plan_value_t *v, uint64_t *numel) {
  dit_json_t a, e;
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(o, "shape", 1u << 20, &a, &n));
  if (n > DIT_MAX_RANK) return dit_json_error(&a, DIT_CODE_OUT_OF_RANGE, "rank %zu exceeds the maximum %d", n, DIT_MAX_RANK);
  uint64_t total = 1;
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  for (int i = 0; dit_json_iter_next(&it, &e); i++) {
    DIT_RETURN_IF(dit_json_as_int(&e, 0, MAX_DIM, &v->dims[i]));
    const uint64_t d = (uint64_t)v->dims[i];
    if (d && total > (UINT64_MAX >> 4) / d)
      return dit_json_error(&a, DIT_CODE_OUT_OF_RANGE, "more than 2^60 elements (dimensions 0..%d multiply past it)", i);
    total *= d;
  }
  v->rank = (int)n;
  *numel = total;
  return DIT_OK;
}

static dit_status_t parse_value(const dit_json_t *o, dit_plan_t *p, dit_plan_value_t *v) {
  static const char *const keys[] = {"name", "storage", "ref", "dtype", "shape", "offset", "updates", NULL};
  DIT_RETURN_IF(dit_json_expect_object(o));
  DIT_RETURN_IF(dit_json_check_keys(o, keys));
  DIT_RETURN_IF(dup_name(o, "name", true, &v->name)); /* diagnostic only: unnamed temps are "" */
  int storage = 0;
  DIT_RETURN_IF(dit_json_enum(o, "storage", kStorage, &storage));
  v->storage = (dit_storage_t)storage;
  dit_json_t d;
  const char *dtype = NULL;
  DIT_RETURN_IF(get_str(o, "dtype", &d, &dtype));
  if (dit_dtype_parse(dtype, &v->dtype)) return refuse_str(&d, "one of f32, bf16, f16, i64, i32", dtype);
  uint64_t numel = 0;
  DIT_RETURN_IF(parse_shape(o, v, &numel));
  v->nbytes = numel * dit_dtype_size(v->dtype);
  v->updates = -1;
  if (dit_json_has(o, "updates")) {
    int64_t u = 0;
    dit_json_t f = member_view(o, "updates");
    if (v->storage != DIT_STORAGE_OUTPUT)
      return dit_json_error(&f, DIT_CODE_INVALID_ARGUMENT, "only outputs update an input in place (this value is %s)", kStorage[storage]);
    DIT_RETURN_IF(dit_json_int(o, "updates", 0, MAX_VALUES, &u));
    v->updates = (int32_t)u; /* its input: checked once every value is read (check_updates) */
  }
  if (v->storage != DIT_STORAGE_ARENA) {
    if (dit_json_has(o, "offset")) {
      dit_json_t f = member_view(o, "offset");
      return dit_json_error(&f, DIT_CODE_INVALID_ARGUMENT, "only arena values have an offset (this one is %s)", kStorage[storage]);
    }
    return dup_name(o, "ref", false, &v->ref);
  }
  if (dit_json_has(o, "ref")) {
    dit_json_t f = member_view(o, "ref");
    return dit_json_error(&f, DIT_CODE_INVALID_ARGUMENT, "an arena value has no ref (only weights, inputs and outputs)");
  }
  int64_t off = 0;
  DIT_RETURN_IF(dit_json_int(o, "offset", 0, (int64_t)p->arena_bytes, &off));
  v->offset = (uint64_t)off;
  if (v->nbytes > p->arena_bytes - v->offset) {
    char q[96];
    dit_json_quote(v->name, q);
    return dit_json_error(o, DIT_CODE_OUT_OF_RANGE, "%s: bytes %" PRIu64 "..%" PRIu64 " lie outside the arena of %" PRIu64 " bytes", q,
                          v->offset, v->offset + v->nbytes, p->arena_bytes);
  }
  return DIT_OK;
}

static dit_status_t parse_values(const dit_json_t *root, dit_plan_t *p) {
  dit_json_t a, o;
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(root, "values", MAX_VALUES, &a, &n));
  if (!(p->values = calloc(n + 1, sizeof *p->values))) return oom(root);
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  while (dit_json_iter_next(&it, &o)) DIT_RETURN_IF(parse_value(&o, p, &p->values[p->n_values++]));
  /* An in-place output names an input of its dtype and size, which no other output updates. */
  dit_json_iter_init(&a, &it);
  for (size_t i = 0; dit_json_iter_next(&it, &o); i++) {
    const dit_plan_value_t *v = &p->values[i];
    if (v->updates < 0) continue;
    const dit_plan_value_t *in = (size_t)v->updates < p->n_values ? &p->values[v->updates] : NULL;
    int taken = 0;
    for (size_t j = 0; j < i; j++) taken |= p->values[j].updates == v->updates;
    if (!in || in->storage != DIT_STORAGE_INPUT || in->dtype != v->dtype || in->nbytes != v->nbytes || taken) {
      dit_json_t f = member_view(&o, "updates");
      return dit_json_error(&f, DIT_CODE_INVALID_ARGUMENT, "value %d is not an input of this output's dtype and size that no other output updates",
                            v->updates);
    }
  }
  return DIT_OK;
}

/* "in" or "out": at most max indices into the values. */
static dit_status_t parse_index_list(const dit_json_t *o, const char *key, size_t n_values, size_t max, int32_t *out, int *n_out) {
  dit_json_t a, e;
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(o, key, max, &a, &n));
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  for (size_t i = 0; dit_json_iter_next(&it, &e); i++) {
    double d = 0;
    DIT_RETURN_IF(dit_json_as_num(&e, -HUGE_VAL, HUGE_VAL, &d));
    if (!(d >= 0 && d < (double)n_values && d == floor(d))) {
      char f[40];
      dit_json_fmt_num(d, f);
      return dit_json_error(&e, DIT_CODE_OUT_OF_RANGE, "expected a value index in [0, %zu), found %s", n_values, f);
    }
    out[i] = (int32_t)d;
  }
  *n_out = (int)n;
  return DIT_OK;
}

/* "ints" or "floats": an optional object of numbers, added to the step's attributes. */
static dit_status_t parse_attr_group(const dit_json_t *o, const char *key, int is_float, dit_attrs_t *a) {
  if (!dit_json_has(o, key)) return DIT_OK;
  dit_json_t g, m;
  DIT_RETURN_IF(dit_json_object(o, key, &g));
  dit_json_iter_t it;
  dit_json_iter_init(&g, &it);
  while (dit_json_iter_next(&it, &m)) {
    const char *name = m.v->string; /* the member's key (json.h) */
    const size_t len = strlen(name);
    if (len == 0 || len >= DIT_ATTR_KEY_MAX)
      return dit_json_error(&m, DIT_CODE_OUT_OF_RANGE, "attribute key of %zu bytes, expected 1..%d", len, DIT_ATTR_KEY_MAX - 1);
    if (dit_attrs_find(a, name))
      return dit_json_error(&m, DIT_CODE_INVALID_ARGUMENT, "attribute '%s' given twice (in ints and in floats)", name);
    if (a->count >= DIT_MAX_ATTRS)
      return dit_json_error(&m, DIT_CODE_OUT_OF_RANGE, "more than %d attributes in the step", DIT_MAX_ATTRS);
    int rc;
    if (is_float) {
      double d = 0;
      DIT_RETURN_IF(dit_json_as_num(&m, -DBL_MAX, DBL_MAX, &d));
      rc = dit_attrs_set_float(a, name, d);
    } else {
      int64_t v = 0;
      DIT_RETURN_IF(dit_json_as_int(&m, -(int64_t)MAX_ATTR_INT, (int64_t)MAX_ATTR_INT, &v));
      rc = dit_attrs_set_int(a, name, v);
    }
    if (rc) return dit_json_error(&m, DIT_CODE_INTERNAL, "attribute not stored");
  }
  return DIT_OK;
}

/* "grid" or "block" of a kernel: 3 integers, each in [1, max[i]]. */
static dit_status_t parse_dim3(const dit_json_t *k, const char *key, const int64_t max[3], uint32_t out[3]) {
  dit_json_t a, e;
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(k, key, 1u << 20, &a, &n));
  if (n != 3) return dit_json_error(&a, DIT_CODE_INVALID_ARGUMENT, "expected 3 integers (x, y, z), found %zu entries", n);
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  for (int i = 0; dit_json_iter_next(&it, &e); i++) {
    int64_t v = 0;
    DIT_RETURN_IF(dit_json_as_int(&e, 1, max[i], &v));
    out[i] = (uint32_t)v;
  }
  return DIT_OK;
}

/* One tensor map over argument 0..n_args-1 of its kernel. */
static dit_status_t parse_tmap(const dit_json_t *t, int n_args, dit_plan_tmap_t *m) {
  static const char *const keys[] = {"arg", "box", "swizzle", NULL};
  DIT_RETURN_IF(dit_json_expect_object(t));
  DIT_RETURN_IF(dit_json_check_keys(t, keys));
  int64_t arg = 0, sw = 0;
  DIT_RETURN_IF(dit_json_int(t, "arg", 0, n_args - 1, &arg));
  dit_json_t b, e;
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(t, "box", 1u << 20, &b, &n));
  if (n < 2 || n > DIT_PLAN_TMAP_MAX_RANK)
    return dit_json_error(&b, DIT_CODE_INVALID_ARGUMENT, "expected 2 integers (elements of a row, rows) or 3 to %d (the value's dims), found %zu entries",
                          DIT_PLAN_TMAP_MAX_RANK, n);
  m->rank = (uint32_t)n;
  dit_json_iter_t it;
  dit_json_iter_init(&b, &it);
  for (int i = 0; dit_json_iter_next(&it, &e); i++) {
    int64_t v = 0;
    DIT_RETURN_IF(dit_json_as_int(&e, 1, 256, &v));
    m->box[i] = (uint32_t)v;
  }
  DIT_RETURN_IF(dit_json_int(t, "swizzle", 0, 128, &sw));
  if (sw != 0 && sw != 32 && sw != 64 && sw != 128) {
    dit_json_t f = member_view(t, "swizzle");
    return dit_json_error(&f, DIT_CODE_OUT_OF_RANGE, "expected 0, 32, 64 or 128 bytes, found %" PRId64, sw);
  }
  m->arg = (uint32_t)arg;
  m->swizzle = (uint32_t)sw;
  return DIT_OK;
}

/* Launch limits of every CUDA device: bounds on what a bundle may ask for. */
static dit_status_t parse_kernel(const dit_json_t *o, dit_plan_step_t *s) {
  static const char *const keys[] = {"cubin", "ptx", "entry", "grid", "block", "smem", "source", "tmaps", NULL};
  static const int64_t gmax[3] = {2147483647, 65535, 65535}, bmax[3] = {1024, 1024, 64};
  if (!dit_json_has(o, "kernel")) return DIT_OK;
  dit_plan_kernel_t *k = &s->kernel;
  dit_json_t ko;
  DIT_RETURN_IF(dit_json_object(o, "kernel", &ko));
  DIT_RETURN_IF(dit_json_check_keys(&ko, keys));
  DIT_RETURN_IF(get_module(&ko, "cubin", false, k->cubin));
  DIT_RETURN_IF(get_module(&ko, "ptx", true, k->ptx));
  DIT_RETURN_IF(dit_json_str_copy(&ko, "entry", k->entry, sizeof k->entry, false));
  if (!is_identifier(k->entry)) {
    dit_json_t f = member_view(&ko, "entry");
    return refuse_str(&f, "a PTX identifier ([A-Za-z_$][A-Za-z0-9_$]*)", k->entry);
  }
  DIT_RETURN_IF(parse_dim3(&ko, "grid", gmax, k->grid));
  DIT_RETURN_IF(parse_dim3(&ko, "block", bmax, k->block));
  const uint64_t threads = (uint64_t)k->block[0] * k->block[1] * k->block[2];
  if (threads > 1024) {
    dit_json_t f = member_view(&ko, "block");
    return dit_json_error(&f, DIT_CODE_OUT_OF_RANGE, "%" PRIu64 " threads, at most 1024", threads);
  }
  int64_t smem = 0;
  DIT_RETURN_IF(dit_json_int(&ko, "smem", 0, MAX_SMEM, &smem));
  k->smem = (uint32_t)smem;
  if (dit_json_has(&ko, "source")) DIT_RETURN_IF(dit_json_str_copy(&ko, "source", k->source, sizeof k->source, false));
  if (dit_json_has(&ko, "tmaps")) {
    dit_json_t tm, t;
    size_t n = 0;
    DIT_RETURN_IF(dit_json_array(&ko, "tmaps", DIT_PLAN_MAX_TMAPS, &tm, &n));
    if (n == 0) return dit_json_error(&tm, DIT_CODE_INVALID_ARGUMENT, "expected 1..%d tensor maps, found none (leave it out)", DIT_PLAN_MAX_TMAPS);
    dit_json_iter_t it;
    dit_json_iter_init(&tm, &it);
    while (dit_json_iter_next(&it, &t)) DIT_RETURN_IF(parse_tmap(&t, s->n_in + s->n_out, &k->tmaps[k->n_tmaps++]));
  }
  s->has_kernel = 1;
  return DIT_OK;
}

static dit_status_t parse_step(const dit_json_t *o, size_t n_values, dit_plan_step_t *s) {
  static const char *const keys[] = {"op", "in", "out", "ints", "floats", "block", "kernel", NULL};
  DIT_RETURN_IF(dit_json_expect_object(o));
  DIT_RETURN_IF(dit_json_check_keys(o, keys));
  dit_json_t op;
  const char *opname = NULL;
  DIT_RETURN_IF(get_str(o, "op", &op, &opname));
  if (dit_op_kind_parse(opname, &s->kind)) {
    char q[96];
    dit_json_quote(opname, q);
    return dit_json_error(&op, DIT_CODE_INVALID_ARGUMENT, "unknown op %s", q);
  }
  const dit_op_info_t *info = dit_op_info(s->kind);
  DIT_RETURN_IF(parse_index_list(o, "in", n_values, DIT_PLAN_MAX_IN, s->in, &s->n_in));
  DIT_RETURN_IF(parse_index_list(o, "out", n_values, DIT_PLAN_MAX_OUT, s->out, &s->n_out));
  if (s->n_in < info->min_inputs || s->n_in > info->max_inputs || s->n_out < info->min_outputs || s->n_out > info->max_outputs)
    return dit_json_error(o, DIT_CODE_INVALID_ARGUMENT, "%s with %d inputs and %d outputs, expected %d..%d and %d..%d", info->name, s->n_in,
                          s->n_out, info->min_inputs, info->max_inputs, info->min_outputs, info->max_outputs);
  DIT_RETURN_IF(parse_attr_group(o, "ints", 0, &s->attrs));
  DIT_RETURN_IF(parse_attr_group(o, "floats", 1, &s->attrs));
  DIT_RETURN_IF(parse_kernel(o, s));
  s->block = -1;
  if (dit_json_has(o, "block")) {
    int b = -1;
    DIT_RETURN_IF(dit_json_i32(o, "block", -1, MAX_BLOCK, &b));
    s->block = b;
  }
  return DIT_OK;
}

static dit_status_t parse_steps(const dit_json_t *root, dit_plan_t *p) {
  dit_json_t a, o;
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(root, "steps", MAX_STEPS, &a, &n));
  if (!(p->steps = calloc(n + 1, sizeof *p->steps))) return oom(root);
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  while (dit_json_iter_next(&it, &o)) DIT_RETURN_IF(parse_step(&o, p->n_values, &p->steps[p->n_steps++]));
  return DIT_OK;
}

/* An input or output value, sorted by (storage, ref) to find a name bound twice. */
typedef struct io_ref {
  int storage;
  const char *ref;
  size_t idx;
} io_ref_t;

static int cmp_io(const void *a, const void *b) {
  const io_ref_t *x = a, *y = b;
  if (x->storage != y->storage) return x->storage < y->storage ? -1 : 1;
  int c = strcmp(x->ref, y->ref);
  if (c) return c;
  return x->idx < y->idx ? -1 : 1;
}

int dit_plan_step_is_view(const dit_plan_t *p, const dit_plan_step_t *s) {
  if ((s->kind != DIT_OP_RESHAPE && s->kind != DIT_OP_CONCAT && s->kind != DIT_OP_SLICE_TOKENS) || s->n_out != 1 || s->n_in < 1) return 0;
  const dit_plan_value_t *y = &p->values[s->out[0]];
  if (y->storage != DIT_STORAGE_ARENA) return 0;
  if (s->kind == DIT_OP_SLICE_TOKENS) { /* one item: tokens [t0, t0 + count) are one run of x's bytes */
    const dit_plan_value_t *x = &p->values[s->in[0]];
    const dit_attr_t *t0 = dit_attrs_find(&s->attrs, "t0");
    if (x->storage != DIT_STORAGE_ARENA || x->rank != 3 || x->dims[0] != 1 || x->dims[1] < 1 || !t0 || t0->is_float || t0->i < 0) return 0;
    const uint64_t row = x->nbytes / (uint64_t)x->dims[1];
    return y->offset == x->offset + (uint64_t)t0->i * row && y->dtype == x->dtype && y->offset + y->nbytes <= x->offset + x->nbytes;
  }
  uint64_t at = y->offset;
  for (int k = 0; k < s->n_in; k++) {
    const dit_plan_value_t *x = &p->values[s->in[k]];
    if (x->storage != DIT_STORAGE_ARENA || x->offset != at) return 0;
    at += x->nbytes;
  }
  if (at != y->offset + y->nbytes) return 0;
  if (s->kind == DIT_OP_RESHAPE) return s->n_in == 1;
  const dit_attr_t *dim = dit_attrs_find(&s->attrs, "dim");
  if (!dim || dim->is_float || dim->i < 0 || dim->i >= y->rank) return 0;
  for (int64_t d = 0; d < dim->i; d++)
    if (y->dims[d] != 1) return 0;
  return 1;
}

/* Dataflow: temps written once before being read; inputs and weights never written;
 * outputs written exactly once; an op's outputs do not overlap its arena inputs; no io name
 * bound twice. */
static dit_status_t check_dataflow(const dit_plan_t *p, const char *what) {
  uint8_t *written = calloc(p->n_values + 1, 1);
  io_ref_t *io = malloc((p->n_values + 1) * sizeof *io);
  if (!written || !io) {
    free(written), free(io);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  }
  dit_status_t st = DIT_OK;
  char a[96], b[96];
  for (size_t i = 0; i < p->n_steps && !st; i++) {
    const dit_plan_step_t *s = &p->steps[i];
    const int view = dit_plan_step_is_view(p, s); /* its output is exactly its inputs' bytes: the runtime skips it */
    for (int k = 0; k < s->n_in && !st; k++) {
      const dit_plan_value_t *v = &p->values[s->in[k]];
      int ready = v->storage == DIT_STORAGE_INPUT || v->storage == DIT_STORAGE_WEIGHT || written[s->in[k]];
      if (!ready) {
        dit_json_quote(v->name, a);
        st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'steps[%zu].in[%d]': reads values[%d] %s before any step writes it", what, i, k, s->in[k], a);
      }
    }
    for (int k = 0; k < s->n_out && !st; k++) {
      const dit_plan_value_t *v = &p->values[s->out[k]];
      dit_json_quote(v->name, a);
      for (int j = 0; j < k && !st; j++)
        if (s->out[j] == s->out[k])
          st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'steps[%zu].out[%d]': the same value written twice (values[%d] %s, also out[%d])", what, i,
                       k, s->out[k], a, j);
      if (st) break;
      if (v->storage == DIT_STORAGE_INPUT || v->storage == DIT_STORAGE_WEIGHT)
        st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'steps[%zu].out[%d]': writes %s values[%d] %s", what, i, k, dit_storage_name(v->storage),
                     s->out[k], a);
      else if (written[s->out[k]])
        st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'steps[%zu].out[%d]': values[%d] %s written a second time", what, i, k, s->out[k], a);
      written[s->out[k]] = 1;
      for (int j = 0; j < s->n_in && !st && v->storage == DIT_STORAGE_ARENA && !view; j++) {
        const dit_plan_value_t *u = &p->values[s->in[j]];
        if (u->storage == DIT_STORAGE_ARENA && u->offset < v->offset + v->nbytes && v->offset < u->offset + u->nbytes) {
          dit_json_quote(u->name, b);
          st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'steps[%zu].out[%d]': output %s overlaps input %s (in[%d]) in the arena", what, i, k, a, b,
                       j);
        }
      }
    }
  }
  size_t n_io = 0;
  for (size_t v = 0; v < p->n_values && !st; v++) {
    const dit_plan_value_t *val = &p->values[v];
    if (val->storage == DIT_STORAGE_OUTPUT && !written[v]) {
      dit_json_quote(val->ref, a);
      st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'values[%zu]': output %s is never written", what, v, a);
    }
    if (val->storage == DIT_STORAGE_INPUT || val->storage == DIT_STORAGE_OUTPUT) io[n_io++] = (io_ref_t){(int)val->storage, val->ref, v};
  }
  if (!st && n_io > 1) {
    qsort(io, n_io, sizeof *io, cmp_io);
    for (size_t i = 1; i < n_io && !st; i++) {
      const io_ref_t *x = &io[i - 1], *y = &io[i];
      if (x->storage == y->storage && !strcmp(x->ref, y->ref)) {
        dit_json_quote(y->ref, a);
        st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'values[%zu].ref': %s %s listed twice (also values[%zu])", what, y->idx,
                     dit_storage_name((dit_storage_t)y->storage), a, x->idx);
      }
    }
  }
  free(io);
  free(written);
  return st;
}

/* ---- the offload section ---- */

#define MAX_SAFE_INT ((int64_t)9007199254740991LL) /* 2^53 - 1 */
#define MAX_FIGURE 1e300

static dit_status_t get_u32(const dit_json_t *o, const char *key, int64_t lo, int64_t hi, uint32_t *out) {
  int64_t v = 0;
  DIT_RETURN_IF(dit_json_int(o, key, lo, hi, &v));
  *out = (uint32_t)v;
  return DIT_OK;
}

/* [a, b] of two integers in [0, 2^53). */
static dit_status_t get_pair(const dit_json_t *o, const char *key, uint64_t *a, uint64_t *b) {
  dit_json_t arr;
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(o, key, 2, &arr, &n));
  int64_t v[2] = {0, 0};
  DIT_RETURN_IF(dit_json_as_int_array(&arr, 2, 0, MAX_SAFE_INT, v, &n));
  if (n != 2) return dit_json_error(&arr, DIT_CODE_INVALID_ARGUMENT, "expected 2 integers, found %zu", n);
  *a = (uint64_t)v[0], *b = (uint64_t)v[1];
  return DIT_OK;
}

/* The block of every step, checked against the section's blocks: each block's steps are
 * contiguous, and no step belongs to a block the section does not list. */
static dit_status_t offload_steps(const dit_json_t *blocks, dit_plan_t *p) {
  dit_plan_offload_t *o = &p->offload;
  for (size_t i = 0; i < o->n_blocks; i++) o->blocks[i].first_step = SIZE_MAX;
  for (size_t k = 0; k < p->n_steps; k++) {
    const int32_t b = p->steps[k].block;
    if (b < 0) continue;
    if ((size_t)b >= o->n_blocks)
      return dit_json_error(blocks, DIT_CODE_INVALID_ARGUMENT, "%zu blocks, but steps[%zu] belongs to block %d", o->n_blocks, k, b);
    dit_plan_offload_block_t *x = &o->blocks[b];
    if (x->first_step != SIZE_MAX && x->last_step + 1 != k)
      return dit_json_error(blocks, DIT_CODE_INVALID_ARGUMENT, "the steps of block %d are not contiguous (steps[%zu] follows steps[%zu])",
                            b, k, x->last_step);
    if (x->first_step == SIZE_MAX) x->first_step = k;
    x->last_step = k;
  }
  for (size_t i = 0; i < o->n_blocks; i++)
    if (o->blocks[i].first_step == SIZE_MAX)
      return dit_json_error(blocks, DIT_CODE_INVALID_ARGUMENT, "block %zu has no steps in the plan", i);
  return DIT_OK;
}

static dit_status_t parse_offload_block(const dit_json_t *b, size_t i, const dit_plan_t *p, dit_plan_offload_block_t *x) {
  static const char *const keys[] = {"index", "range", "resident_bytes", "chunks", "resident_chunks", "yield_steps", "window_chunks",
                                     "flops", "f_star", "t_comp_ms", "t_pref_ms", "t_coll_ms", "resident", NULL};
  const dit_plan_offload_t *o = &p->offload;
  DIT_RETURN_IF(dit_json_expect_object(b));
  DIT_RETURN_IF(dit_json_check_keys(b, keys));
  DIT_RETURN_IF(get_u32(b, "index", (int64_t)i, (int64_t)i, &x->index));
  DIT_RETURN_IF(get_pair(b, "range", &x->lo, &x->hi));
  const uint64_t prev = i ? o->blocks[i - 1].hi : o->head_bytes;
  if (x->lo >= x->hi || x->lo < prev) {
    dit_json_t r;
    dit_json_get(b, "range", &r);
    return dit_json_error(&r, DIT_CODE_OUT_OF_RANGE, "expected [lo, hi) with %" PRIu64 " <= lo < hi (after %s), found [%" PRIu64 ", %" PRIu64 ")",
                          prev, i ? "the previous block" : "head_bytes", x->lo, x->hi);
  }
  const uint64_t range = x->hi - x->lo;
  int64_t res = 0;
  DIT_RETURN_IF(dit_json_int(b, "resident_bytes", 0, (int64_t)range, &res));
  x->split = x->lo + (uint64_t)res;
  const uint64_t unit = o->mode == DIT_PLAN_OFFLOAD_CHUNKED ? o->chunk_bytes : range;
  const uint64_t chunks = (range + unit - 1) / unit;
  if (chunks > UINT32_MAX) return dit_json_error(b, DIT_CODE_OUT_OF_RANGE, "%" PRIu64 " chunks, at most 4294967295", chunks);
  DIT_RETURN_IF(get_u32(b, "chunks", (int64_t)chunks, (int64_t)chunks, &x->chunks));
  DIT_RETURN_IF(get_u32(b, "resident_chunks", 0, x->chunks, &x->resident_chunks));
  dit_json_t ys, it;
  size_t ny = 0;
  DIT_RETURN_IF(dit_json_array(b, "yield_steps", DIT_PLAN_MAX_YIELDS, &ys, &ny));
  x->n_yields = (uint32_t)ny;
  if (!(x->yield_steps = calloc(ny + 1, sizeof *x->yield_steps))) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", ys.what);
  dit_json_iter_t yi;
  dit_json_iter_init(&ys, &yi);
  for (size_t k = 0; dit_json_iter_next(&yi, &it); k++) {
    int64_t st = 0;
    const int64_t lo = k ? (int64_t)x->yield_steps[k - 1] + 1 : (int64_t)x->first_step;
    DIT_RETURN_IF(dit_json_as_int(&it, lo, (int64_t)x->last_step, &st));
    if (!dit_op_is_collective(p->steps[st].kind))
      return dit_json_error(&it, DIT_CODE_INVALID_ARGUMENT, "steps[%" PRId64 "] is %s, expected a collective step", st,
                            dit_op_info(p->steps[st].kind)->name);
    x->yield_steps[k] = (uint32_t)st;
  }
  if (dit_json_has(b, "window_chunks")) {
    dit_json_t ws;
    size_t nw = 0;
    DIT_RETURN_IF(dit_json_array(b, "window_chunks", DIT_PLAN_MAX_YIELDS + 1, &ws, &nw));
    if (nw != ny + 1)
      return dit_json_error(&ws, DIT_CODE_INVALID_ARGUMENT, "expected %zu counts (one per window between collectives), found %zu", ny + 1,
                            nw);
    if (!(x->window_chunks = calloc(nw, sizeof *x->window_chunks))) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", ws.what);
    int64_t v[DIT_PLAN_MAX_YIELDS + 1];
    DIT_RETURN_IF(dit_json_as_int_array(&ws, nw, 0, UINT32_MAX, v, &nw));
    for (size_t k = 0; k < nw; k++) x->window_chunks[k] = (uint32_t)v[k];
  } else if (o->mode == DIT_PLAN_OFFLOAD_CHUNKED) {
    return dit_json_error(b, DIT_CODE_NOT_FOUND, "missing 'window_chunks' (chunked mode paces chunks by them)");
  }
  const struct {
    const char *key;
    double hi, *dst;
  } figs[] = {{"flops", MAX_FIGURE, &x->flops},         {"f_star", MAX_FIGURE, &x->f_star},       {"t_comp_ms", MAX_FIGURE, &x->t_comp_ms},
              {"t_pref_ms", MAX_FIGURE, &x->t_pref_ms}, {"t_coll_ms", MAX_FIGURE, &x->t_coll_ms}, {"resident", 1, &x->resident}};
  for (size_t k = 0; k < sizeof figs / sizeof figs[0]; k++) DIT_RETURN_IF(dit_json_num(b, figs[k].key, 0, figs[k].hi, figs[k].dst));
  return DIT_OK;
}

/* The expert swap (see dit_plan_swap_t); its bytes and chunks are checked against the weight
 * layout by dit_plan_check_offload. */
static dit_status_t parse_swap(const dit_json_t *of, dit_plan_offload_t *o) {
  static const char *const keys[] = {"bytes", "chunk_bytes", "chunks", "chunks_per_block", "forwards", "predicted_stall_ms",
                                     "predicted_peak_bytes", NULL};
  dit_plan_swap_t *w = &o->swap;
  dit_json_t x;
  DIT_RETURN_IF(dit_json_object(of, "swap", &x));
  DIT_RETURN_IF(dit_json_check_keys(&x, keys));
  int64_t v = 0;
  DIT_RETURN_IF(dit_json_int(&x, "bytes", 1, MAX_SAFE_INT, &v));
  w->bytes = (uint64_t)v;
  DIT_RETURN_IF(dit_json_int(&x, "chunk_bytes", 4096, 1ll << 40, &v));
  w->chunk_bytes = (uint64_t)v;
  DIT_RETURN_IF(get_u32(&x, "chunks", 1, UINT32_MAX, &w->chunks));
  DIT_RETURN_IF(get_u32(&x, "chunks_per_block", 1, w->chunks, &w->chunks_per_block));
  DIT_RETURN_IF(get_u32(&x, "forwards", 1, DIT_PLAN_MAX_SWAP_FORWARDS, &w->forwards));
  DIT_RETURN_IF(dit_json_num(&x, "predicted_stall_ms", 0, MAX_FIGURE, &w->predicted_stall_ms));
  DIT_RETURN_IF(dit_json_int(&x, "predicted_peak_bytes", 1, MAX_SAFE_INT, &v));
  w->predicted_peak_bytes = (uint64_t)v;
  w->present = 1;
  return DIT_OK;
}

static dit_status_t parse_offload(const dit_json_t *root, dit_plan_t *p) {
  static const char *const keys[] = {"version", "mode", "chunk_bytes", "head_bytes", "tail", "overhead_bytes", "predicted_peak_bytes",
                                     "resident_peak_bytes", "predicted_step_ms", "resident_step_ms", "profile", "blocks", "swap", NULL};
  static const char *const modes[] = {"layerwise", "chunked", NULL};
  dit_plan_offload_t *o = &p->offload;
  dit_json_t of, hp, blocks, b;
  DIT_RETURN_IF(dit_json_object(root, "offload", &of));
  DIT_RETURN_IF(dit_json_check_keys(&of, keys));
  int64_t version = 0;
  DIT_RETURN_IF(dit_json_int(&of, "version", 1, DIT_PLAN_OFFLOAD_VERSION, &version));
  int mode = 0;
  DIT_RETURN_IF(dit_json_enum(&of, "mode", modes, &mode));
  int64_t chunk = 0;
  DIT_RETURN_IF(dit_json_int(&of, "chunk_bytes", 4096, 1ll << 40, &chunk));
  o->chunk_bytes = (uint64_t)chunk;
  DIT_RETURN_IF(dit_json_u64(&of, "head_bytes", &o->head_bytes));
  DIT_RETURN_IF(get_pair(&of, "tail", &o->tail_offset, &o->tail_bytes));
  DIT_RETURN_IF(dit_json_u64(&of, "predicted_peak_bytes", &o->predicted_peak_bytes));
  int64_t ov = 0;
  DIT_RETURN_IF(dit_json_int(&of, "overhead_bytes", 0, (int64_t)o->predicted_peak_bytes, &ov));
  o->overhead_bytes = (uint64_t)ov;
  DIT_RETURN_IF(dit_json_u64(&of, "resident_peak_bytes", &o->resident_peak_bytes));
  DIT_RETURN_IF(dit_json_num(&of, "predicted_step_ms", 0, MAX_FIGURE, &o->predicted_step_ms));
  DIT_RETURN_IF(dit_json_num(&of, "resident_step_ms", 0, MAX_FIGURE, &o->resident_step_ms));
  DIT_RETURN_IF(dit_json_object(&of, "profile", &hp));
  DIT_RETURN_IF(dit_hw_profile_from_json(&hp, 0, &o->profile, NULL));
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(&of, "blocks", DIT_PLAN_MAX_OFFLOAD_BLOCKS, &blocks, &n));
  if (n == 0) return dit_json_error(&blocks, DIT_CODE_INVALID_ARGUMENT, "expected 1..%d blocks, found none", DIT_PLAN_MAX_OFFLOAD_BLOCKS);
  if (!(o->blocks = calloc(n, sizeof *o->blocks))) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", of.what);
  o->n_blocks = n;
  o->mode = mode == 1 ? DIT_PLAN_OFFLOAD_CHUNKED : DIT_PLAN_OFFLOAD_LAYERWISE;
  DIT_RETURN_IF(offload_steps(&blocks, p));
  dit_json_iter_t bi;
  dit_json_iter_init(&blocks, &bi);
  for (size_t i = 0; dit_json_iter_next(&bi, &b); i++) DIT_RETURN_IF(parse_offload_block(&b, i, p, &o->blocks[i]));
  if (o->tail_offset < o->blocks[n - 1].hi) {
    dit_json_t t;
    dit_json_get(&of, "tail", &t);
    return dit_json_error(&t, DIT_CODE_OUT_OF_RANGE, "starts at %" PRIu64 ", inside the last block (ends at %" PRIu64 ")", o->tail_offset,
                          o->blocks[n - 1].hi);
  }
  if (o->tail_bytes > UINT64_MAX / 2 - o->tail_offset)
    return dit_json_error(&of, DIT_CODE_OUT_OF_RANGE, "tail of %" PRIu64 " bytes overflows", o->tail_bytes);
  if (dit_json_has(&of, "swap") && version < 2) {
    dit_json_t x;
    dit_json_get(&of, "swap", &x);
    return dit_json_error(&x, DIT_CODE_INVALID_ARGUMENT, "an offload section of version %" PRId64 " has no swap (version 2 and later)", version);
  }
  if (version >= 2 && !dit_json_has(&of, "swap"))
    return dit_json_error(&of, DIT_CODE_NOT_FOUND, "missing 'swap' (an offload section of version 2 carries the expert swap)");
  return version >= 2 ? parse_swap(&of, o) : DIT_OK;
}

void dit_plan_swap_totals(const dit_plan_offload_t *o, uint64_t chunk_bytes, uint64_t *out_bytes, uint64_t *out_chunks) {
  *out_bytes = *out_chunks = 0;
  if (!chunk_bytes) return;
  for (size_t i = 0; i < o->n_blocks + 2; i++) {
    const uint64_t part = i == 0 ? o->head_bytes : i == 1 ? o->tail_bytes : o->blocks[i - 2].split - o->blocks[i - 2].lo;
    *out_bytes += part;
    *out_chunks += (part + chunk_bytes - 1) / chunk_bytes;
  }
}

/* The section against the rank's weight layout (see plan.h). */
dit_status_t dit_plan_check_offload(const dit_plan_t *p, const dit_manifest_t *m, const dit_manifest_weights_t *w, const char *what) {
  const dit_plan_offload_t *o = &p->offload;
  if (o->mode == DIT_PLAN_OFFLOAD_NONE) return DIT_OK;
  const dit_manifest_blob_t *blob = dit_manifest_find_blob(m, w->blob);
  if (!blob) return DIT_ERR(NOT_FOUND, "%s: field 'offload': weights blob %s is not listed in the manifest", what, w->blob);
  const uint64_t size = blob->size;
  for (size_t i = 0; i < o->n_blocks; i++) {
    const dit_plan_offload_block_t *x = &o->blocks[i];
    if (x->lo % DIT_WEIGHT_ALIGN || x->hi > size)
      return DIT_ERR(OUT_OF_RANGE, "%s: field 'offload.blocks[%zu].range': [%" PRIu64 ", %" PRIu64 ") must start at a multiple of %d and end inside the weights blob of %" PRIu64 " bytes",
                     what, i, x->lo, x->hi, DIT_WEIGHT_ALIGN, size);
  }
  if (o->tail_bytes && (o->tail_offset % DIT_WEIGHT_ALIGN || o->tail_offset + o->tail_bytes > size))
    return DIT_ERR(OUT_OF_RANGE, "%s: field 'offload.tail': [%" PRIu64 ", +%" PRIu64 ") must start at a multiple of %d and end inside the weights blob of %" PRIu64 " bytes",
                   what, o->tail_offset, o->tail_bytes, DIT_WEIGHT_ALIGN, size);
  uint64_t *span = calloc(2 * o->n_blocks, sizeof *span); /* per block: its tensors' first offset and last end */
  int32_t *block_of = calloc(w->n_tensors + 1, sizeof *block_of);
  if (!span || !block_of) {
    free(span), free(block_of);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  }
  for (size_t i = 0; i < o->n_blocks; i++) span[2 * i] = UINT64_MAX;
  uint64_t head_end = 0, tail_lo = UINT64_MAX, tail_end = 0;
  dit_status_t s = DIT_OK;
  for (size_t t = 0; !s && t < w->n_tensors; t++) {
    const dit_manifest_tensor_t *x = &w->tensors[t];
    const uint64_t end = x->offset + x->nbytes;
    size_t lo = 0, hi = o->n_blocks; /* the last block starting at or before the tensor */
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      if (o->blocks[mid].lo <= x->offset) lo = mid;
      else hi = mid;
    }
    const dit_plan_offload_block_t *b = &o->blocks[lo];
    block_of[t] = -1;
    if (x->offset >= b->lo && x->offset < b->hi) {
      if (end > b->hi)
        s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload.blocks[%zu].range': tensor '%s' (bytes %" PRIu64 "..%" PRIu64 ") reaches past its end %" PRIu64,
                    what, lo, x->name, x->offset, end, b->hi);
      else if (x->offset < b->split && end > b->split)
        s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload.blocks[%zu].resident_bytes': the resident part ends at byte %" PRIu64 ", inside tensor '%s' (%" PRIu64 "..%" PRIu64 ")",
                    what, lo, b->split - b->lo, x->name, x->offset, end);
      block_of[t] = (int32_t)lo;
      if (x->offset < span[2 * lo]) span[2 * lo] = x->offset;
      if (end > span[2 * lo + 1]) span[2 * lo + 1] = end;
    } else if (end <= o->head_bytes) {
      if (end > head_end) head_end = end;
    } else if (x->offset >= o->tail_offset && end <= o->tail_offset + o->tail_bytes) {
      if (x->offset < tail_lo) tail_lo = x->offset;
      if (end > tail_end) tail_end = end;
    } else {
      s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload': tensor '%s' (bytes %" PRIu64 "..%" PRIu64 ") lies in no block, nor in the head [0, %" PRIu64 ") or the tail [%" PRIu64 ", %" PRIu64 ")",
                  what, x->name, x->offset, end, o->head_bytes, o->tail_offset, o->tail_offset + o->tail_bytes);
    }
  }
  for (size_t i = 0; !s && i < o->n_blocks; i++) {
    const dit_plan_offload_block_t *b = &o->blocks[i];
    if (span[2 * i] != b->lo || span[2 * i + 1] != b->hi)
      s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload.blocks[%zu].range': expected the span of its tensors [%" PRIu64 ", %" PRIu64 "), found [%" PRIu64 ", %" PRIu64 ")",
                  what, i, span[2 * i] == UINT64_MAX ? 0 : span[2 * i], span[2 * i + 1], b->lo, b->hi);
    if (s) break;
    const uint64_t range = b->hi - b->lo, unit = o->mode == DIT_PLAN_OFFLOAD_CHUNKED ? o->chunk_bytes : range;
    const uint64_t want = (uint64_t)b->resident_chunks * unit;
    const uint64_t split = dit_manifest_weights_split(w, b->lo, b->hi, b->lo + (want < range ? want : range));
    if (split != b->split)
      s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload.blocks[%zu].resident_bytes': expected %" PRIu64 " (%u resident chunks cut back to whole tensors), found %" PRIu64,
                  what, i, split - b->lo, b->resident_chunks, b->split - b->lo);
  }
  if (!s && head_end != o->head_bytes)
    s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload.head_bytes': expected %" PRIu64 " (the end of the weights before the blocks), found %" PRIu64,
                what, head_end, o->head_bytes);
  if (!s && (tail_end ? tail_lo != o->tail_offset || tail_end - tail_lo != o->tail_bytes : o->tail_bytes != 0))
    s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload.tail': expected [%" PRIu64 ", %" PRIu64 "] (the weights after the blocks), found [%" PRIu64 ", %" PRIu64 "]",
                what, tail_end ? tail_lo : o->tail_offset, tail_end ? tail_end - tail_lo : 0, o->tail_offset, o->tail_bytes);
  if (!s && o->swap.present) {
    uint64_t bytes = 0, chunks = 0;
    dit_plan_swap_totals(o, o->swap.chunk_bytes, &bytes, &chunks);
    if (bytes != o->swap.bytes || chunks != o->swap.chunks)
      s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload.swap': expected %" PRIu64 " bytes in %" PRIu64 " chunks (the head, the tail and the blocks' "
                  "resident parts), found %" PRIu64 " in %u", what, bytes, chunks, o->swap.bytes, o->swap.chunks);
    else if ((uint64_t)o->swap.forwards * o->swap.chunks_per_block * o->n_blocks < o->swap.chunks)
      s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload.swap': %u forwards of %zu blocks at %u chunks each move fewer than its %u chunks", what,
                  o->swap.forwards, o->n_blocks, o->swap.chunks_per_block, o->swap.chunks);
  }
  /* A block's weights are read only by its own steps: a slot holds one block at a time. */
  int32_t *value_tensor = s ? NULL : malloc((p->n_values + 1) * sizeof *value_tensor);
  if (!s && !value_tensor) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  for (size_t v = 0; !s && v < p->n_values; v++) {
    value_tensor[v] = -1;
    if (p->values[v].storage != DIT_STORAGE_WEIGHT) continue;
    for (size_t t = 0; t < w->n_tensors && value_tensor[v] < 0; t++)
      if (!strcmp(w->tensors[t].name, p->values[v].ref)) value_tensor[v] = (int32_t)t;
  }
  for (size_t k = 0; !s && k < p->n_steps; k++) {
    const dit_plan_step_t *st = &p->steps[k];
    for (int j = 0; !s && j < st->n_in; j++) {
      const int32_t t = value_tensor[st->in[j]];
      if (t >= 0 && block_of[t] >= 0 && block_of[t] != st->block)
        s = DIT_ERR(INVALID_ARGUMENT, "%s: steps[%zu] (block %d) reads '%s' of offload block %d; a block's weights are read by its own steps only",
                    what, k, st->block, w->tensors[t].name, block_of[t]);
    }
  }
  free(value_tensor);
  free(span);
  free(block_of);
  return s;
}

static dit_status_t parse_work(const dit_json_t *w, dit_plan_work_t *out) {
  static const char *const keys[] = {"flops", "collectives", "collective_bytes", NULL};
  DIT_RETURN_IF(dit_json_expect_object(w));
  DIT_RETURN_IF(dit_json_check_keys(w, keys));
  DIT_RETURN_IF(dit_json_num(w, "flops", 0, 1e24, &out->flops));
  DIT_RETURN_IF(dit_json_u64(w, "collectives", &out->collectives));
  DIT_RETURN_IF(dit_json_u64(w, "collective_bytes", &out->collective_bytes));
  out->present = 1;
  return DIT_OK;
}

dit_status_t dit_plan_parse(const char *text, size_t len, const char *what, dit_plan_t **out) {
  static const char *const keys[] = {"format", "version", "arena_bytes", "values", "steps", "offload", "work", NULL};
  *out = NULL;
  /* The whole document is checked first (NUL bytes, duplicate keys, depth, trailing bytes). */
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_json_t root, f;
  dit_plan_t *p = NULL;
  const char *fmt = NULL;
  int64_t version = 0, arena = 0;
  dit_status_t st = dit_json_root(doc, &root);
  if (!st && !(p = calloc(1, sizeof *p))) st = oom(&root);
  if (!st) st = get_str(&root, "format", &f, &fmt);
  if (!st && strcmp(fmt, "ditc-plan")) st = refuse_str(&f, "\"ditc-plan\"", fmt);
  /* The version first: a later format may add members this build does not know. */
  if (!st) st = dit_json_int(&root, "version", 0, (int64_t)DIT_JSON_MAX_SAFE, &version);
  if (!st && (version < 1 || version > DIT_PLAN_VERSION)) {
    f = member_view(&root, "version");
    st = dit_json_error(&f, DIT_CODE_FAILED_PRECONDITION, "this build reads plan versions 1..%d, found %" PRId64, DIT_PLAN_VERSION, version);
  }
  if (!st) st = dit_json_check_keys(&root, keys);
  if (!st) st = dit_json_int(&root, "arena_bytes", 0, MAX_ARENA, &arena);
  if (!st) p->arena_bytes = (uint64_t)arena;
  if (!st) st = parse_values(&root, p);
  if (!st) st = parse_steps(&root, p);
  if (!st) st = check_dataflow(p, root.what);
  if (!st && dit_json_has(&root, "offload")) {
    if (version < 2) {
      f = member_view(&root, "offload");
      st = dit_json_error(&f, DIT_CODE_INVALID_ARGUMENT, "a version %" PRId64 " plan has no offload section (version 2 and later)", version);
    } else {
      st = parse_offload(&root, p);
    }
  }
  if (!st && dit_json_has(&root, "work")) st = dit_json_get(&root, "work", &f);
  if (!st && dit_json_has(&root, "work")) {
    if (version < 3)
      st = dit_json_error(&f, DIT_CODE_INVALID_ARGUMENT, "a version %" PRId64 " plan has no work section (version 3 and later)", version);
    else
      st = parse_work(&f, &p->work);
  }
  dit_json_doc_free(doc);
  if (st) {
    dit_plan_free(p);
    return st;
  }
  *out = p;
  return DIT_OK;
}

static int dims_equal(int ra, const int64_t *a, int rb, const int64_t *b) {
  if (ra != rb) return 0;
  for (int i = 0; i < ra; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

static const dit_manifest_io_t *find_io(const dit_manifest_io_t *io, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(io[i].name, name)) return &io[i];
  return NULL;
}

dit_status_t dit_plan_check_bindings(const dit_plan_t *p, const dit_manifest_t *m,
                                     const dit_manifest_weights_t *weights, const char *what) {
  size_t used_in = 0, used_out = 0;
  for (size_t i = 0; i < p->n_values; i++) {
    const dit_plan_value_t *v = &p->values[i];
    if (v->storage == DIT_STORAGE_WEIGHT) {
      const dit_manifest_tensor_t *t = NULL;
      for (size_t k = 0; k < weights->n_tensors && !t; k++)
        if (!strcmp(weights->tensors[k].name, v->ref)) t = &weights->tensors[k];
      if (!t)
        return DIT_ERR(NOT_FOUND, "%s: values[%zu]: weight '%s' is not in weights blob %s", what, i, v->ref, weights->blob);
      if (t->dtype != v->dtype || !dims_equal(t->rank, t->dims, v->rank, v->dims))
        return DIT_ERR(INVALID_ARGUMENT, "%s: values[%zu]: weight '%s' is %s rank %d in the plan but %s rank %d in the manifest layout",
                       what, i, v->ref, dit_dtype_name(v->dtype), v->rank, dit_dtype_name(t->dtype), t->rank);
    } else if (v->storage == DIT_STORAGE_INPUT || v->storage == DIT_STORAGE_OUTPUT) {
      int is_in = v->storage == DIT_STORAGE_INPUT;
      const dit_manifest_io_t *io = is_in ? find_io(m->io_inputs, m->n_inputs, v->ref)
                                          : find_io(m->io_outputs, m->n_outputs, v->ref);
      if (!io) return DIT_ERR(NOT_FOUND, "%s: values[%zu]: %s '%s' is not in the manifest's io", what, i, dit_storage_name(v->storage), v->ref);
      if (io->dtype != v->dtype || !dims_equal(io->rank, io->dims, v->rank, v->dims))
        return DIT_ERR(INVALID_ARGUMENT, "%s: values[%zu]: %s '%s' differs in dtype or shape from the manifest's io entry",
                       what, i, dit_storage_name(v->storage), v->ref);
      if (is_in) used_in++;
      else used_out++;
    }
  }
  for (size_t i = 0; i < p->n_steps; i++) {
    const dit_plan_step_t *st = &p->steps[i];
    if (!st->has_kernel) continue;
    const char *mods[2] = {st->kernel.cubin, st->kernel.ptx};
    for (int k = 0; k < 2; k++) {
      if (!mods[k][0]) continue;
      const dit_manifest_blob_t *b = dit_manifest_find_blob(m, mods[k]);
      if (!b || strcmp(b->role, "kernels"))
        return DIT_ERR(NOT_FOUND, "%s: steps[%zu]: kernel module %s is not a \"kernels\" blob of the manifest", what, i, mods[k]);
    }
  }
  if (used_in != m->n_inputs || used_out != m->n_outputs)
    return DIT_ERR(INVALID_ARGUMENT, "%s: binds %zu inputs and %zu outputs, the manifest lists %zu and %zu",
                   what, used_in, used_out, m->n_inputs, m->n_outputs);
  return dit_plan_check_offload(p, m, weights, what);
}
