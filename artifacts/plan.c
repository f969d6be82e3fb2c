/* Plan serialization, parsing and validation, the offload section included. */
#include "artifacts/plan.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json.h"

static const char *const kStorage[] = {"arena", "weight", "input", "output"};

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
  cJSON_AddNumberToObject(of, "version", DIT_PLAN_OFFLOAD_VERSION);
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
  return DIT_OK;
}

dit_status_t dit_plan_to_json(const dit_plan_t *p, char **out_text) {
  *out_text = NULL;
  cJSON *root = cJSON_CreateObject();
  if (!root) return DIT_ERR(RESOURCE_EXHAUSTED, "plan: out of memory");
  cJSON_AddStringToObject(root, "format", "ditc-plan");
  cJSON_AddNumberToObject(root, "version", DIT_PLAN_VERSION);
  cJSON_AddNumberToObject(root, "arena_bytes", (double)p->arena_bytes);
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
        int64_t box[2] = {k->tmaps[i].box[0], k->tmaps[i].box[1]};
        cJSON_AddNumberToObject(t, "arg", k->tmaps[i].arg);
        cJSON_AddItemToObject(t, "box", int_array(box, 2));
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

#define MAX_VALUES (1 << 22)
#define MAX_STEPS (1 << 22)

static dit_status_t get_uint(const cJSON *o, const char *key, const char *what, const char *ctx,
                             uint64_t max, uint64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) return DIT_ERR(NOT_FOUND, "%s: %s: missing field '%s'", what, ctx, key);
  if (!cJSON_IsNumber(v)) return DIT_ERR(INVALID_ARGUMENT, "%s: %s: field '%s' is not a number", what, ctx, key);
  double d = v->valuedouble;
  if (!(d >= 0) || d != floor(d) || d > (double)max)
    return DIT_ERR(OUT_OF_RANGE, "%s: %s: field '%s' = %g, expected an integer in 0..%" PRIu64,
                   what, ctx, key, d, max);
  *out = (uint64_t)d;
  return DIT_OK;
}

static dit_status_t get_str(const cJSON *o, const char *key, const char *what, const char *ctx,
                            const char **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) return DIT_ERR(NOT_FOUND, "%s: %s: missing field '%s'", what, ctx, key);
  if (!cJSON_IsString(v) || !v->valuestring)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s: field '%s' is not a string", what, ctx, key);
  *out = v->valuestring;
  return DIT_OK;
}

static dit_status_t parse_shape(const cJSON *o, const char *what, const char *ctx, int *rank,
                                int64_t *dims, uint64_t *numel) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "shape");
  if (!a) return DIT_ERR(NOT_FOUND, "%s: %s: missing field 'shape'", what, ctx);
  if (!cJSON_IsArray(a)) return DIT_ERR(INVALID_ARGUMENT, "%s: %s: 'shape' is not an array", what, ctx);
  int n = cJSON_GetArraySize(a);
  if (n > DIT_MAX_RANK) return DIT_ERR(OUT_OF_RANGE, "%s: %s: rank %d exceeds %d", what, ctx, n, DIT_MAX_RANK);
  uint64_t total = 1;
  int i = 0;
  const cJSON *d;
  cJSON_ArrayForEach(d, a) {
    if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble != floor(d->valuedouble) ||
        d->valuedouble > (double)(1ull << 40))
      return DIT_ERR(OUT_OF_RANGE, "%s: %s: shape[%d] is not a dimension in 0..2^40", what, ctx, i);
    dims[i] = (int64_t)d->valuedouble;
    if (dims[i] && total > (UINT64_MAX >> 4) / (uint64_t)dims[i])
      return DIT_ERR(OUT_OF_RANGE, "%s: %s: shape has too many elements", what, ctx);
    total *= (uint64_t)dims[i];
    i++;
  }
  *rank = n;
  *numel = total;
  return DIT_OK;
}

static dit_status_t parse_index_list(const cJSON *o, const char *key, const char *what,
                                     const char *ctx, size_t n_values, int max, int32_t *out,
                                     int *n_out) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!a) return DIT_ERR(NOT_FOUND, "%s: %s: missing field '%s'", what, ctx, key);
  if (!cJSON_IsArray(a)) return DIT_ERR(INVALID_ARGUMENT, "%s: %s: '%s' is not an array", what, ctx, key);
  int n = cJSON_GetArraySize(a);
  if (n > max) return DIT_ERR(OUT_OF_RANGE, "%s: %s: '%s' has %d entries, at most %d", what, ctx, key, n, max);
  int i = 0;
  const cJSON *d;
  cJSON_ArrayForEach(d, a) {
    if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble != floor(d->valuedouble) ||
        d->valuedouble >= (double)n_values)
      return DIT_ERR(OUT_OF_RANGE, "%s: %s: %s[%d] is not a value index in 0..%zu", what, ctx,
                     key, i, n_values ? n_values - 1 : 0);
    out[i++] = (int32_t)d->valuedouble;
  }
  *n_out = n;
  return DIT_OK;
}

static dit_status_t parse_values(const cJSON *arr, const char *what, dit_plan_t *p) {
  int n = cJSON_GetArraySize(arr);
  if (n > MAX_VALUES) return DIT_ERR(OUT_OF_RANGE, "%s: %d values, at most %d", what, n, MAX_VALUES);
  p->values = calloc((size_t)n + 1, sizeof *p->values);
  if (!p->values) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  const cJSON *o;
  cJSON_ArrayForEach(o, arr) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "values[%zu]", p->n_values);
    dit_plan_value_t *v = &p->values[p->n_values++];
    if (!cJSON_IsObject(o)) return DIT_ERR(INVALID_ARGUMENT, "%s: %s is not an object", what, ctx);
    const char *name = NULL, *storage = NULL, *dtype = NULL;
    DIT_RETURN_IF(get_str(o, "name", what, ctx, &name));
    DIT_RETURN_IF(get_str(o, "storage", what, ctx, &storage));
    DIT_RETURN_IF(get_str(o, "dtype", what, ctx, &dtype));
    if (!(v->name = strdup(name))) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
    if (dit_storage_parse(storage, &v->storage))
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s: unknown storage '%s' (arena, weight, input, output)", what, ctx, storage);
    if (dit_dtype_parse(dtype, &v->dtype))
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s: unknown dtype '%s'", what, ctx, dtype);
    uint64_t numel = 0;
    DIT_RETURN_IF(parse_shape(o, what, ctx, &v->rank, v->dims, &numel));
    v->nbytes = numel * dit_dtype_size(v->dtype);
    if (v->storage == DIT_STORAGE_ARENA) {
      DIT_RETURN_IF(get_uint(o, "offset", what, ctx, p->arena_bytes, &v->offset));
      if (v->nbytes > p->arena_bytes - v->offset)
        return DIT_ERR(OUT_OF_RANGE, "%s: %s '%s': bytes %" PRIu64 "..%" PRIu64 " outside the arena of %" PRIu64,
                       what, ctx, v->name, v->offset, v->offset + v->nbytes, p->arena_bytes);
    } else {
      const char *ref = NULL;
      DIT_RETURN_IF(get_str(o, "ref", what, ctx, &ref));
      if (!(v->ref = strdup(ref))) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
    }
  }
  return DIT_OK;
}

static dit_status_t parse_attr_group(const cJSON *o, const char *key, int is_float,
                                     const char *what, const char *ctx, dit_attrs_t *a) {
  const cJSON *group = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!group) return DIT_OK;
  if (!cJSON_IsObject(group)) return DIT_ERR(INVALID_ARGUMENT, "%s: %s: '%s' is not an object", what, ctx, key);
  const cJSON *it;
  cJSON_ArrayForEach(it, group) {
    if (!it->string || !cJSON_IsNumber(it))
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s: attribute '%s' is not a number", what, ctx,
                     it->string ? it->string : "?");
    if (dit_attrs_find(a, it->string))
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s: attribute '%s' given twice", what, ctx, it->string);
    double d = it->valuedouble;
    int rc;
    if (is_float) {
      rc = dit_attrs_set_float(a, it->string, d);
    } else {
      if (d != floor(d) || fabs(d) > 9007199254740992.0)
        return DIT_ERR(INVALID_ARGUMENT, "%s: %s: integer attribute '%s' = %g", what, ctx, it->string, d);
      rc = dit_attrs_set_int(a, it->string, (int64_t)d);
    }
    if (rc) return DIT_ERR(OUT_OF_RANGE, "%s: %s: too many attributes or key '%s' too long", what, ctx, it->string);
  }
  return DIT_OK;
}

static dit_status_t parse_attrs(const cJSON *o, const char *what, const char *ctx, dit_attrs_t *a) {
  DIT_RETURN_IF(parse_attr_group(o, "ints", 0, what, ctx, a));
  return parse_attr_group(o, "floats", 1, what, ctx, a);
}

static int is_hex32(const char *s) {
  if (strlen(s) != 32) return 0;
  for (int i = 0; i < 32; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

static dit_status_t parse_dim3(const cJSON *o, const char *key, const char *what, const char *ctx,
                               const uint64_t max[3], uint32_t out[3]) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s: kernel '%s' must be an array of 3 integers", what, ctx, key);
  for (int i = 0; i < 3; i++) {
    const cJSON *d = cJSON_GetArrayItem(a, i);
    if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > (double)max[i] || d->valuedouble != floor(d->valuedouble))
      return DIT_ERR(OUT_OF_RANGE, "%s: %s: kernel %s[%d] outside 1..%" PRIu64, what, ctx, key, i, max[i]);
    out[i] = (uint32_t)d->valuedouble;
  }
  return DIT_OK;
}

/* Launch limits of every CUDA device: bounds on what a bundle may ask for. */
static dit_status_t parse_kernel(const cJSON *o, const char *what, const char *ctx, dit_plan_step_t *s) {
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "kernel");
  if (!k) return DIT_OK;
  if (!cJSON_IsObject(k)) return DIT_ERR(INVALID_ARGUMENT, "%s: %s: 'kernel' is not an object", what, ctx);
  const char *cubin = NULL, *ptx = NULL, *entry = NULL;
  DIT_RETURN_IF(get_str(k, "cubin", what, ctx, &cubin));
  DIT_RETURN_IF(get_str(k, "ptx", what, ctx, &ptx));
  DIT_RETURN_IF(get_str(k, "entry", what, ctx, &entry));
  if (!is_hex32(cubin) || (ptx[0] && !is_hex32(ptx)))
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s: kernel module hashes must be 32 lowercase hex digits", what, ctx);
  size_t n = strlen(entry);
  if (n == 0 || n >= sizeof s->kernel.entry)
    return DIT_ERR(OUT_OF_RANGE, "%s: %s: kernel entry name of %zu bytes, expected 1..%zu", what, ctx, n, sizeof s->kernel.entry - 1);
  static const uint64_t gmax[3] = {2147483647ull, 65535, 65535}, bmax[3] = {1024, 1024, 64};
  DIT_RETURN_IF(parse_dim3(k, "grid", what, ctx, gmax, s->kernel.grid));
  DIT_RETURN_IF(parse_dim3(k, "block", what, ctx, bmax, s->kernel.block));
  if ((uint64_t)s->kernel.block[0] * s->kernel.block[1] * s->kernel.block[2] > 1024)
    return DIT_ERR(OUT_OF_RANGE, "%s: %s: kernel block of more than 1024 threads", what, ctx);
  uint64_t smem;
  DIT_RETURN_IF(get_uint(k, "smem", what, ctx, 232448, &smem));
  snprintf(s->kernel.cubin, sizeof s->kernel.cubin, "%s", cubin);
  snprintf(s->kernel.ptx, sizeof s->kernel.ptx, "%s", ptx);
  snprintf(s->kernel.entry, sizeof s->kernel.entry, "%s", entry);
  s->kernel.smem = (uint32_t)smem;
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(k, "source");
  if (src && (!cJSON_IsString(src) || strlen(src->valuestring) >= sizeof s->kernel.source))
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s: kernel 'source' must be a short string", what, ctx);
  if (src) snprintf(s->kernel.source, sizeof s->kernel.source, "%s", src->valuestring);
  const cJSON *tm = cJSON_GetObjectItemCaseSensitive(k, "tmaps");
  if (tm) {
    int n_tm = cJSON_GetArraySize(tm);
    if (!cJSON_IsArray(tm) || n_tm < 1 || n_tm > DIT_PLAN_MAX_TMAPS)
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s: kernel 'tmaps' must be an array of 1..%d tensor maps", what, ctx, DIT_PLAN_MAX_TMAPS);
    const cJSON *t;
    cJSON_ArrayForEach(t, tm) {
      dit_plan_tmap_t *m = &s->kernel.tmaps[s->kernel.n_tmaps++];
      char tctx[96];
      snprintf(tctx, sizeof tctx, "%s: kernel tmaps[%d]", ctx, s->kernel.n_tmaps - 1);
      if (!cJSON_IsObject(t)) return DIT_ERR(INVALID_ARGUMENT, "%s: %s is not an object", what, tctx);
      uint64_t arg, sw;
      DIT_RETURN_IF(get_uint(t, "arg", what, tctx, (uint64_t)(s->n_in + s->n_out - 1), &arg));
      DIT_RETURN_IF(get_uint(t, "swizzle", what, tctx, 128, &sw));
      if (sw != 0 && sw != 32 && sw != 64 && sw != 128)
        return DIT_ERR(OUT_OF_RANGE, "%s: %s: swizzle %" PRIu64 ", expected 0, 32, 64 or 128", what, tctx, sw);
      static const uint64_t bmax[3] = {256, 256, 1};
      uint32_t box[3];
      const cJSON *b = cJSON_GetObjectItemCaseSensitive(t, "box");
      if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 2)
        return DIT_ERR(INVALID_ARGUMENT, "%s: %s: 'box' must be an array of 2 integers", what, tctx);
      int i = 0;
      const cJSON *e;
      cJSON_ArrayForEach(e, b) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > (double)bmax[i] || e->valuedouble != floor(e->valuedouble))
          return DIT_ERR(OUT_OF_RANGE, "%s: %s: box[%d] outside 1..%" PRIu64, what, tctx, i, bmax[i]);
        box[i++] = (uint32_t)e->valuedouble;
      }
      *m = (dit_plan_tmap_t){(uint32_t)arg, {box[0], box[1]}, (uint32_t)sw};
    }
  }
  s->has_kernel = 1;
  return DIT_OK;
}

static dit_status_t parse_steps(const cJSON *arr, const char *what, dit_plan_t *p) {
  int n = cJSON_GetArraySize(arr);
  if (n > MAX_STEPS) return DIT_ERR(OUT_OF_RANGE, "%s: %d steps, at most %d", what, n, MAX_STEPS);
  p->steps = calloc((size_t)n + 1, sizeof *p->steps);
  if (!p->steps) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  const cJSON *o;
  cJSON_ArrayForEach(o, arr) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "steps[%zu]", p->n_steps);
    dit_plan_step_t *s = &p->steps[p->n_steps++];
    if (!cJSON_IsObject(o)) return DIT_ERR(INVALID_ARGUMENT, "%s: %s is not an object", what, ctx);
    const char *opname = NULL;
    DIT_RETURN_IF(get_str(o, "op", what, ctx, &opname));
    if (dit_op_kind_parse(opname, &s->kind))
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s: unknown op '%s'", what, ctx, opname);
    const dit_op_info_t *info = dit_op_info(s->kind);
    DIT_RETURN_IF(parse_index_list(o, "in", what, ctx, p->n_values, DIT_PLAN_MAX_IN, s->in, &s->n_in));
    DIT_RETURN_IF(parse_index_list(o, "out", what, ctx, p->n_values, DIT_PLAN_MAX_OUT, s->out, &s->n_out));
    if (s->n_in < info->min_inputs || s->n_in > info->max_inputs || s->n_out < info->min_outputs ||
        s->n_out > info->max_outputs)
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s: %s with %d inputs and %d outputs, expected %d..%d and %d..%d",
                     what, ctx, info->name, s->n_in, s->n_out, info->min_inputs, info->max_inputs,
                     info->min_outputs, info->max_outputs);
    DIT_RETURN_IF(parse_attrs(o, what, ctx, &s->attrs));
    DIT_RETURN_IF(parse_kernel(o, what, ctx, s));
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "block");
    s->block = -1;
    if (b) {
      if (!cJSON_IsNumber(b) || b->valuedouble < -1 || b->valuedouble > 1e6 || b->valuedouble != floor(b->valuedouble))
        return DIT_ERR(OUT_OF_RANGE, "%s: %s: 'block' is not an integer in -1..1e6", what, ctx);
      s->block = (int32_t)b->valuedouble;
    }
  }
  return DIT_OK;
}

/* Dataflow: temps written once before being read; inputs and weights never written;
 * outputs written exactly once; an op's outputs do not overlap its arena inputs. */
static dit_status_t check_dataflow(const dit_plan_t *p, const char *what) {
  uint8_t *written = calloc(p->n_values + 1, 1);
  if (!written) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  dit_status_t st = DIT_OK;
  for (size_t i = 0; i < p->n_steps && !st; i++) {
    const dit_plan_step_t *s = &p->steps[i];
    for (int k = 0; k < s->n_in && !st; k++) {
      const dit_plan_value_t *v = &p->values[s->in[k]];
      int ready = v->storage == DIT_STORAGE_INPUT || v->storage == DIT_STORAGE_WEIGHT || written[s->in[k]];
      if (!ready)
        st = DIT_ERR(INVALID_ARGUMENT, "%s: steps[%zu]: reads '%s' before any step writes it", what, i, v->name);
    }
    for (int k = 0; k < s->n_out && !st; k++) {
      const dit_plan_value_t *v = &p->values[s->out[k]];
      if (v->storage == DIT_STORAGE_INPUT || v->storage == DIT_STORAGE_WEIGHT)
        st = DIT_ERR(INVALID_ARGUMENT, "%s: steps[%zu]: writes %s '%s'", what, i, dit_storage_name(v->storage), v->name);
      else if (written[s->out[k]])
        st = DIT_ERR(INVALID_ARGUMENT, "%s: steps[%zu]: '%s' written a second time", what, i, v->name);
      written[s->out[k]] = 1;
      for (int j = 0; j < s->n_in && !st && v->storage == DIT_STORAGE_ARENA; j++) {
        const dit_plan_value_t *u = &p->values[s->in[j]];
        if (u->storage == DIT_STORAGE_ARENA && u->offset < v->offset + v->nbytes && v->offset < u->offset + u->nbytes)
          st = DIT_ERR(INVALID_ARGUMENT, "%s: steps[%zu]: output '%s' overlaps input '%s' in the arena", what, i, v->name, u->name);
      }
      for (int j = 0; j < k && !st; j++)
        if (s->out[j] == s->out[k]) st = DIT_ERR(INVALID_ARGUMENT, "%s: steps[%zu]: the same value written twice", what, i);
    }
  }
  for (size_t v = 0; v < p->n_values && !st; v++) {
    const dit_plan_value_t *val = &p->values[v];
    if (val->storage == DIT_STORAGE_OUTPUT && !written[v])
      st = DIT_ERR(INVALID_ARGUMENT, "%s: output '%s' is never written", what, val->ref);
    for (size_t u = 0; u < v && !st; u++) {
      const dit_plan_value_t *o = &p->values[u];
      if (val->ref && o->ref && val->storage == o->storage && val->storage != DIT_STORAGE_WEIGHT &&
          !strcmp(val->ref, o->ref))
        st = DIT_ERR(INVALID_ARGUMENT, "%s: %s '%s' listed twice", what, dit_storage_name(val->storage), val->ref);
    }
  }
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

static dit_status_t parse_offload(const dit_json_t *root, dit_plan_t *p) {
  static const char *const keys[] = {"version", "mode", "chunk_bytes", "head_bytes", "tail", "overhead_bytes", "predicted_peak_bytes",
                                     "resident_peak_bytes", "predicted_step_ms", "resident_step_ms", "profile", "blocks", NULL};
  static const char *const modes[] = {"layerwise", "chunked", NULL};
  dit_plan_offload_t *o = &p->offload;
  dit_json_t of, hp, blocks, b;
  DIT_RETURN_IF(dit_json_object(root, "offload", &of));
  DIT_RETURN_IF(dit_json_check_keys(&of, keys));
  int64_t version = 0;
  DIT_RETURN_IF(dit_json_int(&of, "version", DIT_PLAN_OFFLOAD_VERSION, DIT_PLAN_OFFLOAD_VERSION, &version));
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
  return DIT_OK;
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

dit_status_t dit_plan_parse(const char *text, size_t len, const char *what, dit_plan_t **out) {
  *out = NULL;
  /* The whole document is checked first (NUL bytes, duplicate keys, depth, trailing bytes). */
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_json_t jroot;
  dit_status_free(dit_json_root(doc, &jroot)); /* a non-object is refused below, with the plan's own message */
  const cJSON *root = jroot.v;
  dit_plan_t *p = calloc(1, sizeof *p);
  dit_status_t st = p ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  const char *fmt = NULL;
  uint64_t version = 0;
  if (!st && !cJSON_IsObject(root)) st = DIT_ERR(INVALID_ARGUMENT, "%s: not a JSON object", what);
  if (!st) st = get_str(root, "format", what, "plan", &fmt);
  if (!st && strcmp(fmt, "ditc-plan"))
    st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'format': expected \"ditc-plan\", found \"%s\"", what, fmt);
  if (!st) st = get_uint(root, "version", what, "plan", 1000, &version);
  if (!st && (version < 1 || version > DIT_PLAN_VERSION))
    st = DIT_ERR(FAILED_PRECONDITION, "%s: field 'version': this build reads plan versions 1..%d, found %" PRIu64,
                 what, DIT_PLAN_VERSION, version);
  if (!st) st = get_uint(root, "arena_bytes", what, "plan", 1ull << 50, &p->arena_bytes);
  const cJSON *values = cJSON_GetObjectItemCaseSensitive(root, "values");
  const cJSON *steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
  if (!st && !cJSON_IsArray(values)) st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'values' missing or not an array", what);
  if (!st && !cJSON_IsArray(steps)) st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'steps' missing or not an array", what);
  if (!st) st = parse_values(values, what, p);
  if (!st) st = parse_steps(steps, what, p);
  if (!st) st = check_dataflow(p, what);
  if (!st && dit_json_has(&jroot, "offload")) {
    if (version < 2)
      st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'offload': a version %" PRIu64 " plan has no offload section (version 2 and later)", what,
                   version);
    else st = parse_offload(&jroot, p);
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
