/* The embedding API (ditrun_api.h) over the internal runtime API (ditrun.h): one executor for
 * the command line and embedders. A handle owns what it opened (the fetched bundle directory,
 * the runtime) and the caller's output bindings; no state outside handles.
 *
 * Built into libditrun.so only, not into the static runtime library: it resolves store
 * identities through the store (or its stand-in without DIT_STORE), which the static library's
 * other users link as they choose. */
#include "runtime/ditrun_api.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "runtime/ditrun.h"
#include "store/fetch.h"

/* The public enums are the internal ones, value for value: checked here, at compile time. */
_Static_assert(DITRUN_F32 == (int)DIT_F32 && DITRUN_BF16 == (int)DIT_BF16 && DITRUN_F16 == (int)DIT_F16 &&
                   DITRUN_I64 == (int)DIT_I64 && DITRUN_I32 == (int)DIT_I32 && DITRUN_U8 == (int)DIT_U8,
               "ditrun_dtype mirrors dit_dtype_t");
_Static_assert(DITRUN_INVALID_ARGUMENT == (int)DIT_CODE_INVALID_ARGUMENT && DITRUN_ABORTED == (int)DIT_CODE_ABORTED,
               "ditrun_code mirrors dit_code_t");
_Static_assert(DITRUN_MAX_RANK == DIT_MAX_RANK, "one rank limit");

/* A caller's tensor waiting for the next forward: a device input (copied then) or an output.
 * bound: an input was given since the open (or the expert's selection) and not unbound. */
typedef struct binding {
  int set;
  int bound;
  ditrun_tensor t;
} binding_t;

struct ditrun_bundle {
  dit_fetched_t *fetched;
  dit_runtime_t *rt;
  const dit_manifest_t *m;
  char expert[32];
  binding_t *inputs;  /* per manifest input: device inputs pending until the forward */
  binding_t *outputs; /* per manifest output */
};

/* A status of the runtime is the public status: same object, opaque on both sides. */
static ditrun_status *pub(dit_status_t s) { return (ditrun_status *)s; }
static dit_status_t priv(const ditrun_status *s) { return (dit_status_t)s; }

int ditrun_api_version(void) { return DITRUN_API_VERSION; }
ditrun_code ditrun_status_code(const ditrun_status *s) { return (ditrun_code)dit_status_code(priv(s)); }
const char *ditrun_status_message(const ditrun_status *s) { return dit_status_message(priv(s)); }
const char *ditrun_code_name(ditrun_code code) { return dit_code_name((dit_code_t)code); }
void ditrun_status_free(ditrun_status *s) { dit_status_free(priv(s)); }
void ditrun_free(void *p) { free(p); }

void ditrun_open_options_init(ditrun_open_options *o) {
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
}

void ditrun_bundle_close(ditrun_bundle *b) {
  if (!b) return;
  dit_runtime_destroy(b->rt);
  dit_fetched_destroy(b->fetched); /* after the runtime: it may remove a store the bundle was mapped from */
  free(b->inputs);
  free(b->outputs);
  free(b);
}

ditrun_status *ditrun_bundle_open(const char *path_or_id, const ditrun_open_options *opts, ditrun_bundle **out) {
  if (!out) return pub(DIT_ERR(INVALID_ARGUMENT, "ditrun_bundle_open: out is NULL"));
  *out = NULL;
  if (!path_or_id) return pub(DIT_ERR(INVALID_ARGUMENT, "ditrun_bundle_open: path_or_id is NULL"));
  ditrun_open_options o;
  ditrun_open_options_init(&o);
  if (opts) {
    /* An older caller's smaller structure: its fields, defaults for the rest. */
    if (opts->size < offsetof(ditrun_open_options, backend) || opts->size > sizeof o)
      return pub(DIT_ERR(INVALID_ARGUMENT, "ditrun_open_options.size %zu: expected at most %zu (ditrun_open_options_init sets it)", opts->size,
                         sizeof o));
    memcpy(&o, opts, opts->size);
  }
  ditrun_bundle *b = calloc(1, sizeof *b);
  if (!b) return pub(DIT_ERR(RESOURCE_EXHAUSTED, "out of memory"));
  dit_fetch_options_t fo = {.store = o.store, .cache_dir = o.cache, .timeout_s = 30, .retries = 3};
  dit_status_t s = dit_fetch_bundle(path_or_id, &fo, &b->fetched);
  if (!s) {
    dit_runtime_options_t ro = {.backend = o.backend, .threads = o.threads, .device = o.device, .graph = o.graph, .only_expert = o.expert};
    s = dit_runtime_load(dit_fetched_dir(b->fetched), &ro, &b->rt);
  }
  if (!s) {
    b->m = dit_runtime_manifest(b->rt);
    snprintf(b->expert, sizeof b->expert, "%s", o.expert ? o.expert : "transformer");
    b->inputs = calloc(b->m->n_inputs + 1, sizeof *b->inputs);
    b->outputs = calloc(b->m->n_outputs + 1, sizeof *b->outputs);
    if (!b->inputs || !b->outputs) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (s) {
    ditrun_bundle_close(b);
    return pub(s);
  }
  *out = b;
  return NULL;
}

size_t ditrun_bundle_num_inputs(const ditrun_bundle *b) { return b->m->n_inputs; }
size_t ditrun_bundle_num_outputs(const ditrun_bundle *b) { return b->m->n_outputs; }

static ditrun_status *io_info(const dit_manifest_io_t *io, size_t n, const char *kind, size_t i, ditrun_tensor_info *out) {
  if (i >= n) return pub(DIT_ERR(OUT_OF_RANGE, "%s %zu: the bundle has %zu", kind, i, n));
  out->name = io[i].name;
  out->dtype = (ditrun_dtype)io[i].dtype;
  out->rank = io[i].rank;
  memcpy(out->dims, io[i].dims, sizeof out->dims);
  return NULL;
}

ditrun_status *ditrun_bundle_input(const ditrun_bundle *b, size_t i, ditrun_tensor_info *out) {
  return io_info(b->m->io_inputs, b->m->n_inputs, "input", i, out);
}

ditrun_status *ditrun_bundle_output(const ditrun_bundle *b, size_t i, ditrun_tensor_info *out) {
  return io_info(b->m->io_outputs, b->m->n_outputs, "output", i, out);
}

static cJSON *io_json(const dit_manifest_io_t *io, size_t n) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; a && i < n; i++) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddItemToArray(a, t);
    cJSON_AddStringToObject(t, "name", io[i].name);
    cJSON_AddStringToObject(t, "dtype", dit_dtype_name(io[i].dtype));
    cJSON *sh = cJSON_AddArrayToObject(t, "shape");
    for (int d = 0; d < io[i].rank; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)io[i].dims[d]));
  }
  return a;
}

ditrun_status *ditrun_bundle_describe_json(const ditrun_bundle *b, char **out) {
  const dit_manifest_t *m = b->m;
  cJSON *j = cJSON_CreateObject();
  if (!j) return pub(DIT_ERR(RESOURCE_EXHAUSTED, "out of memory"));
  cJSON_AddStringToObject(j, "identity", m->identity);
  cJSON_AddStringToObject(j, "family", m->family);
  cJSON_AddStringToObject(j, "class", m->model_class);
  cJSON_AddStringToObject(j, "variant", m->variant);
  cJSON_AddStringToObject(j, "target", m->arch);
  cJSON_AddStringToObject(j, "backend", dit_runtime_backend(b->rt));
  cJSON_AddStringToObject(j, "dtype", dit_dtype_name(m->dtype));
  cJSON *sh = cJSON_AddObjectToObject(j, "shape");
  cJSON_AddNumberToObject(sh, "batch", (double)m->shape.batch);
  cJSON_AddNumberToObject(sh, "frames", (double)m->shape.frames);
  cJSON_AddNumberToObject(sh, "height", (double)m->shape.height);
  cJSON_AddNumberToObject(sh, "width", (double)m->shape.width);
  cJSON_AddNumberToObject(sh, "text_len", (double)m->shape.text_len);
  cJSON *tp = cJSON_AddObjectToObject(j, "topology");
  cJSON_AddNumberToObject(tp, "world", m->topology.world);
  cJSON_AddNumberToObject(tp, "tp", m->topology.tp);
  cJSON_AddNumberToObject(tp, "cp", m->topology.cp);
  cJSON_AddNumberToObject(tp, "cfg", m->topology.cfg);
  cJSON *ex = cJSON_AddArrayToObject(j, "experts");
  for (size_t i = 0; i < m->n_experts; i++) cJSON_AddItemToArray(ex, cJSON_CreateString(m->experts[i].name));
  cJSON_AddStringToObject(j, "expert", b->expert);
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m->inputs, "model"), "config");
  cJSON_AddItemToObject(j, "config", cfg ? cJSON_Duplicate(cfg, 1) : cJSON_CreateNull());
  cJSON *gen = NULL;
  dit_status_t s = m->generate.present ? dit_manifest_generate_json(&m->generate, &gen) : DIT_OK;
  if (s) {
    cJSON_Delete(j);
    return pub(s);
  }
  cJSON_AddItemToObject(j, "generate", gen ? gen : cJSON_CreateNull());
  cJSON_AddItemToObject(j, "compile_inputs", cJSON_Duplicate(m->inputs, 1));
  cJSON_AddItemToObject(j, "inputs", io_json(m->io_inputs, m->n_inputs));
  cJSON_AddItemToObject(j, "outputs", io_json(m->io_outputs, m->n_outputs));
  *out = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return *out ? NULL : pub(DIT_ERR(RESOURCE_EXHAUSTED, "out of memory"));
}

ditrun_status *ditrun_bundle_select_expert(ditrun_bundle *b, const char *name) {
  int index;
  dit_status_t s = dit_runtime_expert_find(b->rt, name, &index);
  if (!s) s = dit_runtime_expert_select(b->rt, index);
  if (s) return pub(s);
  snprintf(b->expert, sizeof b->expert, "%s", name ? name : "transformer");
  /* The new expert has inputs of its own: device inputs pending for the old one are dropped. */
  for (size_t i = 0; i < b->m->n_inputs; i++) b->inputs[i].set = b->inputs[i].bound = 0;
  return NULL;
}

ditrun_status *ditrun_dtype_parse(const char *name, ditrun_dtype *out) {
  static const struct {
    const char *name;
    ditrun_dtype dtype;
  } kNames[] = {{"f32", DITRUN_F32},     {"float32", DITRUN_F32}, {"bf16", DITRUN_BF16}, {"bfloat16", DITRUN_BF16},
                {"f16", DITRUN_F16},     {"float16", DITRUN_F16}, {"i64", DITRUN_I64},   {"int64", DITRUN_I64},
                {"i32", DITRUN_I32},     {"int32", DITRUN_I32},   {"u8", DITRUN_U8},     {"uint8", DITRUN_U8},
                {"bool", DITRUN_U8}};
  for (size_t i = 0; name && i < sizeof kNames / sizeof kNames[0]; i++)
    if (!strcmp(name, kNames[i].name)) {
      *out = kNames[i].dtype;
      return NULL;
    }
  return pub(DIT_ERR(INVALID_ARGUMENT, "dtype '%s': expected f32 (float32), bf16 (bfloat16), f16 (float16), i64 (int64), i32 (int32) or u8 (uint8, bool)",
                     name ? name : "(null)"));
}

static ditrun_status *check_tensor(const ditrun_tensor *t, const char *kind, const char *name) {
  if (!t) return pub(DIT_ERR(INVALID_ARGUMENT, "%s '%s': no tensor given", kind, name));
  if (!t->data) return pub(DIT_ERR(INVALID_ARGUMENT, "%s '%s': data is NULL", kind, name));
  if (t->rank < 0 || t->rank > DITRUN_MAX_RANK)
    return pub(DIT_ERR(INVALID_ARGUMENT, "%s '%s': rank %d, expected 0 to %d", kind, name, t->rank, DITRUN_MAX_RANK));
  if ((unsigned)t->dtype >= DIT_DTYPE_COUNT)
    return pub(DIT_ERR(INVALID_ARGUMENT, "%s '%s': dtype %d is not a ditrun_dtype", kind, name, (int)t->dtype));
  if (t->memory != DITRUN_HOST && t->memory != DITRUN_DEVICE)
    return pub(DIT_ERR(INVALID_ARGUMENT, "%s '%s': memory %d is neither DITRUN_HOST nor DITRUN_DEVICE", kind, name, (int)t->memory));
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return pub(DIT_ERR(INVALID_ARGUMENT, "%s '%s': dimension %d is %lld", kind, name, i, (long long)t->dims[i]));
  return NULL;
}

static dit_tensor_t view_of(const ditrun_tensor *t) {
  dit_tensor_t v = {t->data, (dit_dtype_t)t->dtype, t->rank, {0}};
  memcpy(v.dims, t->dims, sizeof v.dims);
  return v;
}

/* The index of the manifest io entry `name`, or -1. */
static long io_index(const dit_manifest_io_t *io, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(io[i].name, name)) return (long)i;
  return -1;
}

ditrun_status *ditrun_bind_input(ditrun_bundle *b, const char *name, const ditrun_tensor *t) {
  if (!name) return pub(DIT_ERR(INVALID_ARGUMENT, "ditrun_bind_input: name is NULL"));
  const long i = io_index(b->m->io_inputs, b->m->n_inputs, name);
  if (i < 0) return pub(DIT_ERR(NOT_FOUND, "input '%s': the bundle has no such input", name));
  b->inputs[i].set = b->inputs[i].bound = 0;
  if (!t) return NULL;
  ditrun_status *e = check_tensor(t, "input", name);
  if (e) return e;
  dit_tensor_t v = view_of(t);
  if (t->memory == DITRUN_HOST) {
    dit_status_t s = dit_runtime_set_input(b->rt, name, &v);
    b->inputs[i].bound = !s;
    return pub(s);
  }
  /* Checked now (shape, dtype, backend: the errors belong to this call), copied at the forward
   * on its stream. */
  dit_status_t s = dit_runtime_check_input_device(b->rt, name, &v);
  if (s) return pub(s);
  b->inputs[i] = (binding_t){1, 1, *t};
  return NULL;
}

ditrun_status *ditrun_bind_output(ditrun_bundle *b, const char *name, const ditrun_tensor *t) {
  if (!name) return pub(DIT_ERR(INVALID_ARGUMENT, "ditrun_bind_output: name is NULL"));
  const long i = io_index(b->m->io_outputs, b->m->n_outputs, name);
  if (i < 0) return pub(DIT_ERR(NOT_FOUND, "output '%s': the bundle has no such output", name));
  b->outputs[i].set = 0;
  if (!t) return NULL;
  ditrun_status *e = check_tensor(t, "output", name);
  if (e) return e;
  const dit_manifest_io_t *io = &b->m->io_outputs[i];
  int same = t->rank == io->rank;
  for (int d = 0; same && d < io->rank; d++) same = t->dims[d] == io->dims[d];
  if (!same) {
    char want[128] = "[", got[128] = "[";
    for (int d = 0; d < io->rank; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "", (long long)io->dims[d]);
    for (int d = 0; d < t->rank; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)t->dims[d]);
    return pub(DIT_ERR(INVALID_ARGUMENT, "output '%s': shape %s], the bundle's is %s]", name, got, want));
  }
  if (t->memory == DITRUN_DEVICE && t->dtype != (ditrun_dtype)io->dtype)
    return pub(DIT_ERR(INVALID_ARGUMENT, "output '%s': dtype %s in device memory, the bundle's is %s (device memory is copied without conversion)",
                       name, dit_dtype_name((dit_dtype_t)t->dtype), dit_dtype_name(io->dtype)));
  if (t->memory == DITRUN_DEVICE) {
    dit_tensor_t own;
    int device = 0;
    dit_status_t s = dit_runtime_output_buffer(b->rt, name, &own, &device);
    if (s) return pub(s);
    if (!device)
      return pub(DIT_ERR(INVALID_ARGUMENT, "output '%s': device memory given, the bundle runs on the %s backend, which takes host memory", name,
                         dit_runtime_backend(b->rt)));
  }
  if (t->memory == DITRUN_HOST && t->dtype > DITRUN_F16)
    return pub(DIT_ERR(INVALID_ARGUMENT, "output '%s': dtype %s, expected a float dtype (the bundle's is %s)", name,
                       dit_dtype_name((dit_dtype_t)t->dtype), dit_dtype_name(io->dtype)));
  b->outputs[i] = (binding_t){1, 1, *t};
  return NULL;
}

static ditrun_status *write_outputs(ditrun_bundle *b, void *stream) {
  for (size_t i = 0; i < b->m->n_outputs; i++) {
    const binding_t *o = &b->outputs[i];
    if (!o->set) continue;
    const char *name = b->m->io_outputs[i].name;
    dit_tensor_t dst = view_of(&o->t);
    if (o->t.memory == DITRUN_DEVICE) {
      dit_status_t s = dit_runtime_output_device(b->rt, name, &dst, stream);
      if (s) return pub(s);
      continue;
    }
    dit_tensor_t src;
    dit_status_t s = dit_runtime_output(b->rt, name, &src);
    if (s) return pub(s);
    if (dit_convert(dst.data, dst.dtype, src.data, src.dtype, (size_t)dit_tensor_numel(&src)))
      return pub(DIT_ERR(INTERNAL, "output '%s': cannot convert %s to %s", name, dit_dtype_name(src.dtype), dit_dtype_name(dst.dtype)));
  }
  return NULL;
}

ditrun_status *ditrun_forward(ditrun_bundle *b, void *stream) {
  /* Device inputs are copied on the caller's stream after the work that produced them; the
   * bundle's stream then waits for those copies (and for any reader of the previous outputs
   * enqueued there), so the forward never overwrites what the caller still reads. */
  for (size_t i = 0; i < b->m->n_inputs; i++)
    if (!b->inputs[i].bound)
      return pub(DIT_ERR(FAILED_PRECONDITION, "input '%s': not bound; the forward needs every input of the bundle (%zu)",
                         b->m->io_inputs[i].name, b->m->n_inputs));
  for (size_t i = 0; i < b->m->n_inputs; i++) {
    if (!b->inputs[i].set) continue;
    dit_tensor_t v = view_of(&b->inputs[i].t);
    dit_status_t s = dit_runtime_set_input_device(b->rt, b->m->io_inputs[i].name, &v, stream);
    if (s) return pub(s);
    b->inputs[i].set = 0;
  }
  dit_status_t s = dit_runtime_join_queue(b->rt, stream, 0);
  if (!s) s = dit_runtime_forward(b->rt);
  if (s) return pub(s);
  return write_outputs(b, stream);
}

ditrun_status *ditrun_output_view(ditrun_bundle *b, const char *name, ditrun_tensor *t) {
  if (!name || !t) return pub(DIT_ERR(INVALID_ARGUMENT, "ditrun_output_view: name or t is NULL"));
  dit_tensor_t v;
  int device = 0;
  dit_status_t s = dit_runtime_output_buffer(b->rt, name, &v, &device);
  if (s && dit_status_code(s) == DIT_CODE_UNIMPLEMENTED) {
    /* Several ranks: the lane's first rank answers, in host memory. */
    dit_status_free(s);
    s = dit_runtime_output(b->rt, name, &v);
    device = 0;
  }
  if (s) return pub(s);
  t->data = v.data;
  t->dtype = (ditrun_dtype)v.dtype;
  t->memory = device ? DITRUN_DEVICE : DITRUN_HOST;
  t->rank = v.rank;
  memcpy(t->dims, v.dims, sizeof t->dims);
  return NULL;
}
