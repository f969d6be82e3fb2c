/* Plan serialization, parsing and validation. */
#include "artifacts/plan.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

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
  free(p);
}

/* ---- writer ---- */

static cJSON *int_array(const int64_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
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
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
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

dit_status_t dit_plan_parse(const char *text, size_t len, const char *what, dit_plan_t **out) {
  *out = NULL;
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!root) return DIT_ERR(INVALID_ARGUMENT, "%s: not valid JSON", what);
  dit_plan_t *p = calloc(1, sizeof *p);
  dit_status_t st = p ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  const char *fmt = NULL;
  uint64_t version = 0;
  if (!st && !cJSON_IsObject(root)) st = DIT_ERR(INVALID_ARGUMENT, "%s: not a JSON object", what);
  if (!st) st = get_str(root, "format", what, "plan", &fmt);
  if (!st && strcmp(fmt, "ditc-plan"))
    st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'format': expected \"ditc-plan\", found \"%s\"", what, fmt);
  if (!st) st = get_uint(root, "version", what, "plan", 1000, &version);
  if (!st && version != DIT_PLAN_VERSION)
    st = DIT_ERR(FAILED_PRECONDITION, "%s: field 'version': this build reads plan version %d, found %" PRIu64,
                 what, DIT_PLAN_VERSION, version);
  if (!st) st = get_uint(root, "arena_bytes", what, "plan", 1ull << 50, &p->arena_bytes);
  const cJSON *values = cJSON_GetObjectItemCaseSensitive(root, "values");
  const cJSON *steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
  if (!st && !cJSON_IsArray(values)) st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'values' missing or not an array", what);
  if (!st && !cJSON_IsArray(steps)) st = DIT_ERR(INVALID_ARGUMENT, "%s: field 'steps' missing or not an array", what);
  if (!st) st = parse_values(values, what, p);
  if (!st) st = parse_steps(steps, what, p);
  if (!st) st = check_dataflow(p, what);
  cJSON_Delete(root);
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
  return DIT_OK;
}
