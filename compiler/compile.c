/* The compile driver: load and validate the model, build and plan the graph, lower it to an
 * execution plan, lay the weights out in execution order, write and publish the bundle. */
#include "compiler/compile.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "artifacts/bundle.h"
#include "artifacts/identity.h"
#include "artifacts/plan.h"
#include "store/store.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "compiler/compile_store.h"
#include "compiler/codegen_cuda.h"
#include "dit_sources_hash.h"
#include "passes/offload.h"
#include "passes/passes.h"

typedef struct progress {
  int quiet, step, total;
  struct timespec t0, last;
} progress_t;

static double secs(struct timespec a, struct timespec b) {
  return (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
}

static void progress(progress_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(progress_t *p, const char *fmt, ...) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  p->last = now;
  if (p->quiet) return;
  fprintf(stderr, "ditc: [%d/%d %6.2fs] ", ++p->step, p->total, secs(p->t0, now));
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

dit_status_t dit_toolchain_identity(const char *target, cJSON **out) {
  cJSON *t = cJSON_CreateObject();
  if (!t) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  cJSON_AddStringToObject(t, "ditc_sources", DIT_SOURCES_HASH);
  /* The CPU backend executes the plan with the runtime's reference kernels: no code generator
   * touches the output, so only GPU targets record generator versions. */
  if (strcmp(target, "cpu") != 0) {
    dit_status_t s = dit_cuda_toolchain(t);
    if (s) {
      cJSON_Delete(t);
      return s;
    }
  }
  *out = t;
  return DIT_OK;
}

/* ---- lowering ---- */

static dit_status_t lower_to_plan(dit_graph_t *g, uint64_t arena_bytes, dit_plan_t **out) {
  dit_plan_t *p = calloc(1, sizeof *p);
  int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  if (p) {
    p->values = calloc((size_t)nv + 1, sizeof *p->values);
    p->steps = calloc((size_t)no + 1, sizeof *p->steps);
  }
  if (!p || !p->values || !p->steps) {
    dit_plan_free(p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "lowering: out of memory");
  }
  p->arena_bytes = arena_bytes;
  for (dit_vid_t v = 0; v < nv; v++) {
    const dit_value_t *val = dit_graph_cvalue(g, v);
    dit_plan_value_t *pv = &p->values[p->n_values++];
    pv->name = strdup(val->name ? val->name : "");
    pv->dtype = val->dtype;
    pv->rank = val->rank;
    memcpy(pv->dims, val->dims, sizeof pv->dims);
    pv->nbytes = dit_value_nbytes(val);
    if (val->kind == DIT_VALUE_INPUT) pv->storage = DIT_STORAGE_INPUT;
    else if (val->kind == DIT_VALUE_WEIGHT) pv->storage = DIT_STORAGE_WEIGHT;
    else if (val->is_output) pv->storage = DIT_STORAGE_OUTPUT;
    else pv->storage = DIT_STORAGE_ARENA;
    if (pv->storage == DIT_STORAGE_ARENA) {
      if (val->offset < 0) {
        dit_plan_free(p);
        return DIT_ERR(INTERNAL, "lowering: value '%s' has no arena offset", val->name);
      }
      pv->offset = (uint64_t)val->offset;
    } else {
      pv->ref = strdup(val->ref);
    }
    if (!pv->name || (pv->storage != DIT_STORAGE_ARENA && !pv->ref)) {
      dit_plan_free(p);
      return DIT_ERR(RESOURCE_EXHAUSTED, "lowering: out of memory");
    }
  }
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    dit_plan_step_t *s = &p->steps[p->n_steps++];
    s->kind = op->kind;
    s->n_in = op->n_in;
    s->n_out = op->n_out;
    memcpy(s->in, op->in, sizeof(int32_t) * (size_t)op->n_in);
    memcpy(s->out, op->out, sizeof(int32_t) * (size_t)op->n_out);
    s->attrs = op->attrs;
    s->block = op->block;
  }
  *out = p;
  return DIT_OK;
}

/* ---- weights blob ---- */

static uint64_t align_up(uint64_t x) { return (x + DIT_WEIGHT_ALIGN - 1) / DIT_WEIGHT_ALIGN * DIT_WEIGHT_ALIGN; }

/* The layout: the weights the plan uses, in order of first use, each in the plan's dtype and
 * aligned to DIT_WEIGHT_ALIGN; values[i] is the plan value of tensor i. `key` names the blob's
 * bytes (the checkpoint's content, every conversion, slice and offset, this ditc), so that a
 * blob written before can be found without writing it again. */
static dit_status_t weights_layout(const dit_model_t *m, const dit_graph_t *g, const dit_plan_t *p, const char *weights_hash,
                                   dit_manifest_weights_t *layout, size_t **values, char key[33]) {
  size_t n = 0;
  for (size_t i = 0; i < p->n_values; i++) n += p->values[i].storage == DIT_STORAGE_WEIGHT;
  layout->tensors = calloc(n + 1, sizeof *layout->tensors);
  *values = calloc(n + 1, sizeof **values);
  if (!layout->tensors || !*values) return DIT_ERR(RESOURCE_EXHAUSTED, "weights: out of memory");
  dit_strbuf_t kb = {0};
  dit_strbuf_printf(&kb, "weights blob 1 (ditc %s) of %s, aligned to %d\n", DIT_SOURCES_HASH, weights_hash, DIT_WEIGHT_ALIGN);
  uint64_t off = 0;
  for (size_t st = 0; st < p->n_steps; st++) {
    for (int k = 0; k < p->steps[st].n_in; k++) {
      const size_t vid = (size_t)p->steps[st].in[k];
      const dit_plan_value_t *v = &p->values[vid];
      const dit_value_t *gv = dit_graph_cvalue(g, (dit_vid_t)vid); /* lowering keeps value ids */
      if (v->storage != DIT_STORAGE_WEIGHT) continue;
      int seen = 0;
      for (size_t j = 0; j < layout->n_tensors && !seen; j++) seen = !strcmp(layout->tensors[j].name, v->ref);
      if (seen) continue;
      const dit_st_tensor_t *t = dit_safetensors_find(m->weights, v->ref);
      if (!t) {
        dit_strbuf_free(&kb);
        return DIT_ERR(INTERNAL, "weights: '%s' vanished from the checkpoint", v->ref);
      }
      dit_manifest_tensor_t *e = &layout->tensors[layout->n_tensors];
      if (!(e->name = strdup(v->ref))) {
        dit_strbuf_free(&kb);
        return DIT_ERR(RESOURCE_EXHAUSTED, "weights: out of memory");
      }
      (*values)[layout->n_tensors++] = vid;
      e->dtype = v->dtype;
      e->rank = v->rank;
      memcpy(e->dims, v->dims, sizeof e->dims);
      e->offset = align_up(off);
      e->nbytes = v->nbytes;
      off = e->offset + v->nbytes;
      dit_strbuf_printf(&kb, "%s %s>%s", v->ref, dit_dtype_name(t->dtype), dit_dtype_name(v->dtype));
      for (int d = 0; d < v->rank; d++) dit_strbuf_printf(&kb, " %" PRId64, v->dims[d]);
      dit_strbuf_printf(&kb, " slice %d %" PRId64 " at %" PRIu64 "\n", gv->slice_dim, gv->slice_dim < 0 ? 0 : gv->slice_start, e->offset);
    }
  }
  if (kb.oom) {
    dit_strbuf_free(&kb);
    return DIT_ERR(RESOURCE_EXHAUSTED, "weights: out of memory");
  }
  dit_hash128_hex(kb.p, kb.len, key);
  dit_strbuf_free(&kb);
  return DIT_OK;
}

/* Streams the layout's tensors into a blob: each converted to the plan's dtype (a tensor-
 * parallel shard's slice gathered first), zeros up to each offset. */
static dit_status_t write_weights(dit_bundle_writer_t *w, const dit_model_t *m, const dit_graph_t *g, const dit_plan_t *p,
                                  dit_manifest_weights_t *layout, const size_t *values) {
  static const uint8_t zeros[DIT_WEIGHT_ALIGN];
  uint64_t off = 0;
  void *src = NULL, *dst = NULL;
  size_t cap = 0;
  dit_status_t s = dit_bundle_writer_blob_begin(w);
  for (size_t i = 0; !s && i < layout->n_tensors; i++) {
    const dit_manifest_tensor_t *e = &layout->tensors[i];
    const dit_plan_value_t *v = &p->values[values[i]];
    const dit_value_t *gv = dit_graph_cvalue(g, (dit_vid_t)values[i]);
    const dit_st_tensor_t *t = dit_safetensors_find(m->weights, v->ref);
    size_t esize = dit_dtype_size(t->dtype);
    size_t numel = (size_t)(v->nbytes / dit_dtype_size(v->dtype)); /* of the (sliced) value */
    size_t need = (size_t)(t->nbytes / esize) * 4 + 16;
    if (need > cap) {
      free(src);
      free(dst);
      cap = need;
      src = malloc(cap);
      dst = malloc(cap);
      if (!src || !dst) {
        s = DIT_ERR(RESOURCE_EXHAUSTED, "weights: cannot allocate %zu bytes for '%s'", cap, v->ref);
        break;
      }
    }
    /* Tensors inside a safetensors file need not be aligned: copy before converting. A
     * tensor-parallel shard gathers its slice along slice_dim. */
    if (gv->slice_dim < 0) {
      memcpy(src, t->data, t->nbytes);
    } else {
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < gv->slice_dim; d++) outer *= t->dims[d];
      for (int d = gv->slice_dim + 1; d < t->rank; d++) inner *= t->dims[d];
      const size_t run = (size_t)(v->dims[gv->slice_dim] * inner) * esize;
      for (int64_t r = 0; r < outer; r++)
        memcpy((char *)src + (size_t)r * run,
               (const char *)t->data + ((size_t)(r * t->dims[gv->slice_dim] + gv->slice_start) * (size_t)inner) * esize, run);
    }
    if (dit_convert(dst, v->dtype, src, t->dtype, numel)) {
      s = DIT_ERR(INVALID_ARGUMENT, "weights: cannot convert '%s' from %s to %s", v->ref, dit_dtype_name(t->dtype),
                  dit_dtype_name(v->dtype));
      break;
    }
    if (e->offset > off) s = dit_bundle_writer_blob_append(w, zeros, e->offset - off);
    if (!s) s = dit_bundle_writer_blob_append(w, dst, v->nbytes);
    off = e->offset + v->nbytes;
  }
  free(src);
  free(dst);
  uint64_t size = 0;
  if (!s) s = dit_bundle_writer_blob_end(w, layout->blob, &size);
  return s;
}

/* The weights blob of one shard. With a store, one written before for the same bytes (another
 * shape of the same checkpoint, another offload plan) is linked from the store instead. */
static dit_status_t weights_blob(dit_bundle_writer_t *w, dit_store_t *store, const dit_model_t *m, const dit_graph_t *g,
                                 const dit_plan_t *p, const char *weights_hash, dit_manifest_weights_t *layout, progress_t *pr) {
  size_t *values = NULL;
  char key[33];
  dit_status_t s = weights_layout(m, g, p, weights_hash, layout, &values, key);
  const uint64_t size = layout->n_tensors ? layout->tensors[layout->n_tensors - 1].offset + layout->tensors[layout->n_tensors - 1].nbytes : 0;
  int reused = 0;
  if (!s && store) {
    char *text = NULL, *dst = NULL;
    dit_status_t ms = dit_store_memo_read(store, key, &text, NULL); /* NOT_FOUND: not written before */
    dit_json_doc_t *rec = NULL;
    dit_json_t r;
    const char *hb = NULL;
    uint64_t sz = 0;
    if (!ms) ms = dit_json_parse(text, strlen(text), "weights memo record", &rec);
    if (!ms) ms = dit_json_root(rec, &r);
    if (!ms) ms = dit_json_str(&r, "blob", 32, false, &hb);
    if (!ms) ms = dit_json_u64(&r, "size", &sz);
    const int found = !ms && dit_is_hash_hex(hb) && sz == size; /* anything else: written again */
    dit_status_free(ms);
    if (found && !dit_bundle_writer_blob_dest(w, hb, &dst)) {
      dit_status_t ps = dit_store_blob_place(store, hb, size, dst);
      reused = !ps;
      if (reused) snprintf(layout->blob, sizeof layout->blob, "%s", hb);
      dit_status_free(ps); /* a blob gone from the store is written again */
    }
    free(dst);
    dit_json_doc_free(rec);
    free(text);
  }
  if (!s && !reused) s = write_weights(w, m, g, p, layout, values);
  if (!s && store && !reused) {
    char rec[128];
    snprintf(rec, sizeof rec, "{\"blob\": \"%s\", \"size\": %" PRIu64 "}\n", layout->blob, size);
    dit_status_free(dit_store_memo_write(store, key, rec)); /* only a shortcut: a failure costs a rewrite later */
  }
  free(values);
  if (!s)
    progress(pr, "weights: %zu tensors, %.1f MiB in execution order (blob %.12s%s)", layout->n_tensors, (double)size / (1 << 20),
             layout->blob, reused ? ", linked from the store: not written again" : "");
  return s;
}

/* ---- manifest ---- */

static cJSON *shape_json(const dit_compile_options_t *o, const dit_latent_shape_t *ls) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "batch", (double)o->shape.batch);
  cJSON_AddNumberToObject(s, "frames", (double)o->shape.frames);
  cJSON_AddNumberToObject(s, "height", (double)o->shape.height);
  cJSON_AddNumberToObject(s, "width", (double)o->shape.width);
  cJSON_AddNumberToObject(s, "text_len", (double)o->shape.text_len);
  cJSON *l = cJSON_AddArrayToObject(s, "latent");
  double lat[4] = {(double)ls->channels, (double)ls->frames, (double)ls->height, (double)ls->width};
  for (int i = 0; i < 4; i++) cJSON_AddItemToArray(l, cJSON_CreateNumber(lat[i]));
  return s;
}

static int tp_of(const dit_compile_options_t *o) { return o->shape.tp > 1 ? o->shape.tp : 1; }

static int cfg_of(const dit_compile_options_t *o) { return o->cfg_parallel ? 2 : 1; }
static int cp_of(const dit_compile_options_t *o) { return o->shape.cp > 1 ? o->shape.cp : 1; }
static const char *cp_mode_name(const dit_compile_options_t *o) {
  if (cp_of(o) == 1) return "none";
  switch (o->shape.cp_mode) {
    case DIT_CP_ULYSSES: return "ulysses";
    case DIT_CP_RING: return "ring";
    case DIT_CP_USP: return "usp";
    default: return "gather";
  }
}

static cJSON *topology_json(const dit_compile_options_t *o) {
  cJSON *t = cJSON_CreateObject();
  cJSON_AddNumberToObject(t, "world", tp_of(o) * cp_of(o) * cfg_of(o));
  cJSON_AddNumberToObject(t, "tp", tp_of(o));
  cJSON_AddNumberToObject(t, "cp", cp_of(o));
  cJSON_AddNumberToObject(t, "cfg", cfg_of(o));
  cJSON_AddStringToObject(t, "cp_mode", cp_mode_name(o));
  cJSON_AddBoolToObject(t, "sp", o->shape.sp != 0);
  if (o->shape.cp_mode == DIT_CP_USP) cJSON_AddNumberToObject(t, "ulysses", o->shape.ulysses);
  int world = tp_of(o) * cp_of(o) * cfg_of(o);
  cJSON_AddNumberToObject(t, "ranks_per_node", o->ranks_per_node > 0 && o->ranks_per_node < world ? o->ranks_per_node : world);
  return t;
}

static dit_status_t fill_io(const dit_plan_t *p, dit_storage_t which, dit_manifest_io_t **out, size_t *n_out) {
  size_t n = 0;
  for (size_t i = 0; i < p->n_values; i++) n += p->values[i].storage == which;
  *out = calloc(n + 1, sizeof **out);
  if (!*out) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  *n_out = 0;
  for (size_t i = 0; i < p->n_values; i++) {
    const dit_plan_value_t *v = &p->values[i];
    if (v->storage != which) continue;
    dit_manifest_io_t *io = &(*out)[(*n_out)++];
    snprintf(io->name, sizeof io->name, "%s", v->ref);
    io->dtype = v->dtype;
    io->rank = v->rank;
    memcpy(io->dims, v->dims, sizeof io->dims);
  }
  return DIT_OK;
}

static char *diagnostics_json(const dit_compile_options_t *o, double seconds) {
  cJSON *d = cJSON_CreateObject();
  char host[256] = "", cwd[PATH_MAX] = "", model[PATH_MAX] = "";
  gethostname(host, sizeof host - 1);
  if (!realpath(o->model_dir, model)) snprintf(model, sizeof model, "%s", o->model_dir);
  if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
  struct passwd *pw = getpwuid(getuid());
  time_t now = time(NULL);
  char when[64];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  cJSON_AddStringToObject(d, "model_dir", model);
  cJSON_AddStringToObject(d, "cwd", cwd);
  cJSON_AddStringToObject(d, "host", host);
  cJSON_AddStringToObject(d, "user", pw ? pw->pw_name : "");
  cJSON_AddStringToObject(d, "created", when);
  cJSON_AddNumberToObject(d, "compile_seconds", seconds);
  char *text = cJSON_Print(d);
  cJSON_Delete(d);
  return text;
}

static dit_status_t load_profile(const char *spec, dit_hw_profile_t *out);
enum { DIT_MAX_WINDOWS = 64 }; /* windows of a block's compute between its collectives */

/* Identity inputs: everything that decides the bundle's bytes, nothing about where. */
static dit_status_t identity_inputs(const dit_compile_options_t *o, const dit_model_t *m,
                                    const dit_latent_shape_t *ls, const char *weights_hash, cJSON **out) {
  cJSON *in = cJSON_CreateObject();
  if (!in) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  cJSON *model = cJSON_AddObjectToObject(in, "model");
  cJSON_AddStringToObject(model, "class", m->model_class);
  cJSON_AddStringToObject(model, "variant", m->variant);
  cJSON_AddItemToObject(model, "config", cJSON_Duplicate(m->config, 1));
  cJSON_AddStringToObject(in, "weights", weights_hash);
  cJSON_AddItemToObject(in, "shape", shape_json(o, ls));
  cJSON_AddStringToObject(in, "dtype", dit_dtype_name(o->shape.dtype));
  cJSON_AddItemToObject(in, "topology", topology_json(o));
  cJSON_AddStringToObject(in, "target", o->target);
  cJSON *opts = cJSON_AddObjectToObject(in, "options");
  if (o->offload && strcmp(o->offload, "none")) {
    /* Only what changes the plan: the mode, the chunk size, the residency request and the
     * profile's values (3 significant digits, so equivalent hosts share bundles). */
    cJSON *of = cJSON_AddObjectToObject(opts, "offload");
    cJSON_AddStringToObject(of, "mode", o->offload);
    cJSON_AddNumberToObject(of, "chunk_mb", o->chunk_mb);
    if (o->residency >= 0) cJSON_AddNumberToObject(of, "residency", o->residency);
    if (o->memory_budget_gib > 0) cJSON_AddNumberToObject(of, "memory_budget_gib", o->memory_budget_gib);
    if (o->latency_target_ms > 0) cJSON_AddNumberToObject(of, "latency_target_ms", o->latency_target_ms);
    dit_hw_profile_t hw;
    dit_status_t ps = load_profile(o->profile, &hw);
    if (ps) {
      cJSON_Delete(in);
      return ps;
    }
    cJSON *hp = cJSON_AddObjectToObject(of, "profile"); /* the values, not the name */
    cJSON_AddNumberToObject(hp, "p_peak_tflops", hw.p_peak_tflops);
    cJSON_AddNumberToObject(hp, "bw_h2d_gbs", hw.bw_h2d_gbs);
    cJSON_AddNumberToObject(hp, "eta_comp", hw.eta_comp);
    cJSON_AddNumberToObject(hp, "eta_pref", hw.eta_pref);
    if (hw.overhead_mib > 0) cJSON_AddNumberToObject(hp, "overhead_mib", hw.overhead_mib);
    if (hw.step_overhead_us > 0) cJSON_AddNumberToObject(hp, "step_overhead_us", hw.step_overhead_us);
    if (hw.coll_gbs > 0) {
      cJSON_AddNumberToObject(hp, "coll_latency_us", hw.coll_latency_us);
      cJSON_AddNumberToObject(hp, "coll_gbs", hw.coll_gbs);
    }
  }
  char schema[16];
  snprintf(schema, sizeof schema, "%d.%d", DIT_SCHEMA_MAJOR, DIT_SCHEMA_MINOR);
  cJSON_AddStringToObject(in, "schema", schema);
  cJSON *tc = NULL;
  dit_status_t s = dit_toolchain_identity(o->target, &tc);
  if (s) {
    cJSON_Delete(in);
    return s;
  }
  cJSON_AddItemToObject(in, "toolchain", tc);
  *out = in;
  return DIT_OK;
}

/* A bundle already published under the identity: reuse it if it opens and validates. */
static int already_published(const char *out_dir, const char *identity, char **out_path) {
  char path[4200];
  if (dit_path_join(path, sizeof path, out_dir, identity)) return 0;
  if (!dit_is_dir(path)) return 0;
  dit_bundle_t *b = NULL;
  dit_status_t s = dit_bundle_open(path, 0, &b);
  dit_bundle_close(b);
  if (s) {
    dit_status_free(s);
    return 0;
  }
  *out_path = strdup(path);
  return *out_path != NULL;
}

/* ---- kernels ---- */

static void add_blob_entry(dit_manifest_blob_t *blobs, size_t *n, const char *role, const char *hash, uint64_t size) {
  for (size_t i = 0; i < *n; i++)
    if (!strcmp(blobs[i].hash, hash)) return; /* identical modules are stored once */
  snprintf(blobs[*n].role, sizeof blobs[*n].role, "%s", role);
  memcpy(blobs[*n].hash, hash, DIT_HASH_HEX);
  blobs[*n].size = size;
  (*n)++;
}

/* Generates every step's kernel for a GPU target and adds the modules to the bundle. */
static dit_status_t generate_kernels(const char *target, const dit_graph_t *g, dit_plan_t *plan,
                                     dit_bundle_writer_t *w, uint64_t *module_sizes, cJSON *summary, progress_t *pr) {
  dit_cuda_codegen_t *cg;
  DIT_RETURN_IF(dit_cuda_codegen_create(target, NULL, &cg));
  dit_status_t s = DIT_OK;
  int kernels = 0, library = 0;
  for (size_t i = 0; !s && i < plan->n_steps; i++) {
    dit_plan_step_t *st = &plan->steps[i];
    dit_cuda_module_t mod;
    s = dit_cuda_codegen_op(cg, g, dit_graph_cop_at(g, (int32_t)i), &st->has_kernel, &st->kernel, &mod);
    if (s || !st->has_kernel) {
      library += !s;
      continue;
    }
    kernels++;
    s = dit_bundle_writer_add_blob(w, mod.cubin, mod.cubin_size, st->kernel.cubin);
    if (!s && mod.ptx) s = dit_bundle_writer_add_blob(w, mod.ptx, mod.ptx_size, st->kernel.ptx);
    else if (!s) st->kernel.ptx[0] = 0; /* arch-specific code: no portable PTX */
    if (!s) {
      module_sizes[2 * i] = mod.cubin_size;
      module_sizes[2 * i + 1] = mod.ptx_size;
    }
  }
  dit_cuda_codegen_stats_t cs = dit_cuda_codegen_stats(cg);
  if (!s)
    progress(pr, "codegen %s: %d kernel steps (%d MLIR, %d NVRTC), %d library GEMM steps; %d modules compiled (%.2fs), %d from the cache",
             target, kernels, cs.mlir, cs.nvrtc, library, cs.compiled, cs.compile_seconds, cs.cache_hits);
  if (!s && summary && !cJSON_GetObjectItem(summary, "codegen")) {
    cJSON *c = cJSON_AddObjectToObject(summary, "codegen");
    cJSON_AddNumberToObject(c, "mlir_kernel_steps", cs.mlir);
    cJSON_AddNumberToObject(c, "nvrtc_kernel_steps", cs.nvrtc);
    cJSON_AddNumberToObject(c, "library_gemm_steps", library);
    const cJSON *why = dit_cuda_codegen_nvrtc_because(cg);
    if (why) cJSON_AddItemToObject(c, "nvrtc_because", cJSON_Duplicate(why, 1));
  }
  dit_cuda_codegen_destroy(cg);
  return s;
}

/* ---- one rank ---- */

typedef struct rank_build {
  dit_graph_t *g;
  dit_plan_t *plan;
  dit_pass_result_t pres;
  uint64_t *module_sizes; /* per step: cubin and PTX sizes of its kernel */
  uint64_t weights_size, plan_size;
  char plan_hash[DIT_HASH_HEX];
} rank_build_t;

static void rank_build_free(rank_build_t *r) {
  dit_graph_destroy(r->g);
  dit_plan_free(r->plan);
  free(r->module_sizes);
}

/* Graph, passes, plan, weights shard and kernels of one tensor-parallel rank. Rank 0 reports
 * progress and takes the dumps. */
static dit_status_t build_rank(const dit_compile_options_t *o, const dit_model_t *m, const dit_latent_shape_t *ls,
                               const dit_shape_request_t *req, dit_bundle_writer_t *w, dit_store_t *store, const char *weights_hash,
                               rank_build_t *rb, dit_manifest_weights_t *layout, cJSON *codegen_summary, progress_t *pr) {
  const int first = req->tp_rank == 0 && req->cp_rank == 0;
  progress_t quiet = *pr;
  quiet.quiet = 1;
  progress_t *p = first ? pr : &quiet;
  DIT_RETURN_IF(dit_model_build_graph(m, req, &rb->g));
  progress(p, "graph: %d ops, %d values; latent %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 "%s", dit_graph_num_ops(rb->g),
           dit_graph_num_values(rb->g), ls->channels, ls->frames, ls->height, ls->width, req->tp > 1 ? " (tensor-parallel rank 0)" : "");
  dit_pass_options_t popt = {first ? o->dump_after : NULL, o->dump};
  DIT_RETURN_IF(dit_passes_run(rb->g, &popt, &rb->pres));
  progress(p, "passes verify,dce,fuse,memplan: arena %.2f MiB (%.2f MiB without reuse), %d ops removed, %d fused",
           (double)rb->pres.arena_bytes / (1 << 20), (double)rb->pres.naive_bytes / (1 << 20), rb->pres.removed_ops,
           rb->pres.fused_ops);
  if (first && o->dump_ir) dit_graph_print(rb->g, o->dump ? o->dump : stdout);
  DIT_RETURN_IF(lower_to_plan(rb->g, rb->pres.arena_bytes, &rb->plan));
  /* Context-parallel ranks of one tensor-parallel shard use the same weights: written once. */
  if (req->cp_rank == 0) DIT_RETURN_IF(weights_blob(w, store, m, rb->g, rb->plan, weights_hash, layout, p));
  for (size_t i = 0; i < layout->n_tensors; i++)
    if (layout->tensors[i].offset + layout->tensors[i].nbytes > rb->weights_size)
      rb->weights_size = layout->tensors[i].offset + layout->tensors[i].nbytes;
  if (!(rb->module_sizes = calloc(2 * rb->plan->n_steps + 1, sizeof *rb->module_sizes)))
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (codegen_summary) DIT_RETURN_IF(generate_kernels(o->target, rb->g, rb->plan, w, rb->module_sizes, codegen_summary, p));
  char *text = NULL;
  DIT_RETURN_IF(dit_plan_to_json(rb->plan, &text));
  rb->plan_size = strlen(text);
  dit_status_t s = dit_bundle_writer_add_blob(w, text, rb->plan_size, rb->plan_hash);
  free(text);
  return s;
}

/* ---- the offload plan ---- */

static dit_status_t load_profile(const char *spec, dit_hw_profile_t *out) {
  const char *name = spec ? spec : "h200-sxm";
  const dit_hw_profile_t *pre = dit_hw_profile_preset(name);
  if (pre) {
    *out = *pre;
  } else {
    char *text = NULL;
    size_t len = 0;
    DIT_RETURN_IF_ERROR(dit_file_read(name, 1 << 20, &text, &len),
                        "--profile %s: not a preset (h100-pcie, h100-sxm, h200-sxm) nor a readable profile file", name);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(j)) {
      cJSON_Delete(j);
      return DIT_ERR(INVALID_ARGUMENT, "%s: not a JSON object", name);
    }
    static const char *const keys[] = {"p_peak_tflops", "bw_h2d_gbs", "eta_comp", "eta_pref"};
    double *dst[] = {&out->p_peak_tflops, &out->bw_h2d_gbs, &out->eta_comp, &out->eta_pref};
    for (int i = 0; i < 4; i++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
      if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble)) {
        cJSON_Delete(j);
        return DIT_ERR(INVALID_ARGUMENT, "%s: field '%s': expected a positive number", name, keys[i]);
      }
      *dst[i] = v->valuedouble;
    }
    /* Optional, as calibrated (0 where absent: not modeled). */
    static const char *const opt[] = {"overhead_mib", "step_overhead_us", "coll_latency_us", "coll_gbs"};
    double *odst[] = {&out->overhead_mib, &out->step_overhead_us, &out->coll_latency_us, &out->coll_gbs};
    for (int i = 0; i < 4; i++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, opt[i]);
      if (v && (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || !isfinite(v->valuedouble))) {
        cJSON_Delete(j);
        return DIT_ERR(INVALID_ARGUMENT, "%s: field '%s': expected a number >= 0", name, opt[i]);
      }
      *odst[i] = v ? v->valuedouble : 0;
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
    snprintf(out->name, sizeof out->name, "%s", cJSON_IsString(nm) ? nm->valuestring : "file");
    cJSON_Delete(j);
  }
  dit_hw_profile_normalize(out);
  return DIT_OK;
}

static uint64_t resident_whole_tensors(void *layout, uint64_t offset, uint64_t bytes, uint64_t want) {
  return dit_manifest_weights_split(layout, offset, offset + bytes, offset + want) - offset;
}

enum { ALL_BLOCKS = INT_MIN }; /* block_work over the whole forward */

/* Block i's plan steps and collectives (how many, and the bytes each rank hands them). */
static void block_work(const dit_graph_t *g, const dit_plan_t *plan, int block, dit_offload_block_t *b) {
  for (size_t k = 0; k < plan->n_steps; k++) b->steps += block == ALL_BLOCKS || plan->steps[k].block == block;
  for (int32_t k = 0; k < dit_graph_num_ops(g); k++) {
    const dit_op_t *op = dit_graph_cop_at(g, k);
    if ((block != ALL_BLOCKS && op->block != block) || !dit_op_is_collective(op->kind)) continue;
    b->coll_count += 1;
    b->coll_bytes += (double)dit_value_nbytes(dit_graph_cvalue(g, op->in[0]));
  }
}

/* summary.offload.blocks[i]: yield_steps, its collective steps (the chunks scheduled after one
 * wait for it), and window_chunks, per window of its compute (before the first collective,
 * between two, after the last) the whole chunks whose load hides behind that window: the
 * runtime loads the next block's chunks inside them, never beside a collective. */
static dit_status_t add_windows(const dit_hw_profile_t *hw, const dit_graph_t *g, const dit_plan_t *plan, int block,
                                uint64_t chunk, cJSON *out) {
  cJSON *y = cJSON_AddArrayToObject(out, "yield_steps");
  cJSON *w = cJSON_AddArrayToObject(out, "window_chunks");
  uint32_t steps[DIT_MAX_WINDOWS] = {0};
  int n_plan = 0, n_graph = 0;
  for (size_t k = 0; k < plan->n_steps; k++) {
    if (plan->steps[k].block != block) continue;
    if (!dit_op_is_collective(plan->steps[k].kind)) {
      if (n_plan < DIT_MAX_WINDOWS) steps[n_plan]++;
      continue;
    }
    cJSON_AddItemToArray(y, cJSON_CreateNumber((double)k));
    n_plan++;
  }
  if (n_plan >= DIT_MAX_WINDOWS) return DIT_ERR(UNIMPLEMENTED, "offload plan: block %d has %d collectives (at most %d)", block, n_plan, DIT_MAX_WINDOWS - 1);
  double flops = 0;
  for (int32_t k = 0; k < dit_graph_num_ops(g); k++) {
    const dit_op_t *op = dit_graph_cop_at(g, k);
    if (op->block != block) continue;
    if (!dit_op_is_collective(op->kind)) {
      flops += dit_op_cost(g, op).flops;
      continue;
    }
    if (n_graph < n_plan) cJSON_AddItemToArray(w, cJSON_CreateNumber(dit_offload_window_chunks(hw, flops, steps[n_graph], chunk)));
    flops = 0, n_graph++;
  }
  if (n_graph != n_plan)
    return DIT_ERR(INTERNAL, "offload plan: block %d has %d collectives in the graph but %d in the plan", block, n_graph, n_plan);
  cJSON_AddItemToArray(w, cJSON_CreateNumber(dit_offload_window_chunks(hw, flops, steps[n_plan], chunk)));
  return DIT_OK;
}

/* Per block: FLOPs from the graph, the byte range of its weights in the blob (execution order
 * keeps a block's tensors together), collective steps as yield points; then the F* plan. */
static dit_status_t plan_offload(const dit_compile_options_t *o, const dit_model_t *m, const rank_build_t *rb,
                                 const dit_manifest_weights_t *layout, uint64_t io_bytes, cJSON *summary) {
  dit_offload_request_t req = {0};
  if (!strcmp(o->offload, "layerwise")) req.mode = DIT_OFFLOAD_LAYERWISE;
  else if (!strcmp(o->offload, "chunked")) req.mode = DIT_OFFLOAD_CHUNKED;
  else if (strcmp(o->offload, "none")) return DIT_ERR(INVALID_ARGUMENT, "--offload %s: expected none, layerwise or chunked", o->offload);
  req.chunk_bytes = (uint64_t)(o->chunk_mb * (1 << 20));
  req.residency = o->residency;
  req.memory_budget_bytes = o->memory_budget_gib * (double)(1u << 30);
  req.latency_target_ms = o->latency_target_ms;
  dit_hw_profile_t hw;
  DIT_RETURN_IF(load_profile(o->profile, &hw));
  const int n = (int)m->wan.layers;
  dit_offload_block_t *bl = calloc((size_t)n + 1, sizeof *bl);
  dit_cost_t *pb = calloc((size_t)n + 1, sizeof *pb);
  uint64_t *lo = calloc((size_t)n + 1, sizeof *lo), *hi = calloc((size_t)n + 1, sizeof *hi);
  if (!bl || !pb || !lo || !hi) {
    free(bl), free(pb), free(lo), free(hi);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  dit_graph_cost(rb->g, pb, n);
  uint64_t block_total = 0, all = 0;
  for (int i = 0; i < n; i++) lo[i] = UINT64_MAX;
  for (size_t t = 0; t < layout->n_tensors; t++) {
    const dit_manifest_tensor_t *e = &layout->tensors[t];
    all += e->nbytes;
    int blk = -1;
    if (sscanf(e->name, "blocks.%d.", &blk) != 1 || blk < 0 || blk >= n) continue;
    bl[blk].bytes += e->nbytes;
    block_total += e->nbytes;
    if (e->offset < lo[blk]) lo[blk] = e->offset;
    if (e->offset + e->nbytes > hi[blk]) hi[blk] = e->offset + e->nbytes;
  }
  /* What a block streams is its whole byte range (alignment padding included); what it keeps
   * resident ends at a tensor boundary, as the runtime cuts it. */
  for (int i = 0; i < n; i++) {
    bl[i].flops = pb[i].flops;
    block_work(rb->g, rb->plan, i, &bl[i]);
    if (lo[i] != UINT64_MAX && hi[i] > lo[i]) bl[i].offset = lo[i], bl[i].bytes = hi[i] - lo[i];
  }
  req.whole_tensors = resident_whole_tensors;
  req.ctx = (void *)layout;
  const uint64_t overhead = (uint64_t)(hw.overhead_mib * (1 << 20));
  req.other_bytes = (all - block_total) + rb->pres.arena_bytes + io_bytes + overhead;
  dit_offload_result_t res;
  dit_status_t s = dit_offload_plan(&hw, &req, bl, n, &res);
  if (!s) {
    cJSON *of = cJSON_AddObjectToObject(summary, "offload");
    cJSON_AddStringToObject(of, "mode", o->offload);
    cJSON_AddNumberToObject(of, "chunk_bytes", (double)req.chunk_bytes);
    cJSON *hp = cJSON_AddObjectToObject(of, "profile");
    cJSON_AddStringToObject(hp, "name", hw.name);
    cJSON_AddNumberToObject(hp, "p_peak_tflops", hw.p_peak_tflops);
    cJSON_AddNumberToObject(hp, "bw_h2d_gbs", hw.bw_h2d_gbs);
    cJSON_AddNumberToObject(hp, "eta_comp", hw.eta_comp);
    cJSON_AddNumberToObject(hp, "eta_pref", hw.eta_pref);
    cJSON_AddNumberToObject(hp, "overhead_mib", hw.overhead_mib);
    cJSON_AddNumberToObject(hp, "step_overhead_us", hw.step_overhead_us);
    cJSON_AddNumberToObject(hp, "coll_latency_us", hw.coll_latency_us);
    cJSON_AddNumberToObject(hp, "coll_gbs", hw.coll_gbs);
    /* The peaks count the runtime's own device memory (the profile's overhead) too. */
    cJSON_AddNumberToObject(of, "overhead_bytes", (double)overhead);
    cJSON_AddNumberToObject(of, "predicted_step_ms", res.step_ms);
    cJSON_AddNumberToObject(of, "resident_step_ms", res.none_step_ms);
    cJSON_AddNumberToObject(of, "predicted_peak_bytes", (double)res.peak_bytes);
    cJSON_AddNumberToObject(of, "resident_peak_bytes", (double)res.none_peak_bytes);
    cJSON *blocks = cJSON_AddArrayToObject(of, "blocks");
    for (int i = 0; i < n; i++) {
      cJSON *b = cJSON_CreateObject();
      cJSON_AddItemToArray(blocks, b);
      cJSON *rg = cJSON_AddArrayToObject(b, "range");
      cJSON_AddItemToArray(rg, cJSON_CreateNumber((double)(lo[i] == UINT64_MAX ? 0 : lo[i])));
      cJSON_AddItemToArray(rg, cJSON_CreateNumber((double)hi[i]));
      cJSON_AddNumberToObject(b, "flops", bl[i].flops);
      cJSON_AddNumberToObject(b, "bytes", (double)bl[i].bytes);
      cJSON_AddNumberToObject(b, "f_star", bl[i].f_star);
      cJSON_AddNumberToObject(b, "t_comp_ms", bl[i].t_comp_ms);
      cJSON_AddNumberToObject(b, "t_pref_ms", bl[i].t_pref_ms);
      if (bl[i].t_coll_ms > 0) cJSON_AddNumberToObject(b, "t_coll_ms", bl[i].t_coll_ms);
      cJSON_AddNumberToObject(b, "resident", bl[i].resident);
      cJSON_AddNumberToObject(b, "chunks", bl[i].chunks);
      cJSON_AddNumberToObject(b, "resident_chunks", bl[i].resident_chunks);
      if (!s) s = add_windows(&hw, rb->g, rb->plan, i, req.chunk_bytes ? req.chunk_bytes : 1, b);
    }
  }
  free(bl), free(pb), free(lo), free(hi);
  return s;
}

/* ---- driver ---- */

dit_status_t dit_compile(const dit_compile_options_t *o, dit_compile_result_t *out) {
  memset(out, 0, sizeof *out);
  int gpu = strcmp(o->target, "cpu") != 0;
  if (gpu && !dit_cuda_target_supported(o->target))
    return DIT_ERR(INVALID_ARGUMENT, "--target %s: supported targets: cpu, sm_80, sm_86, sm_89, sm_90", o->target);
  if (gpu && o->shape.dtype != DIT_BF16)
    return DIT_ERR(UNIMPLEMENTED, "--target %s with --dtype %s: GPU targets run bf16 (fp32 accumulation); use --dtype bf16",
                   o->target, dit_dtype_name(o->shape.dtype));
  progress_t pr = {.quiet = o->quiet, .total = (gpu ? 8 : 7) + (o->store_dir != NULL)};
  {
    /* Rank groups follow the nodes: the groups that talk most (tensor-parallel, then each
     * Ulysses subgroup) must not straddle a node, so ranks are numbered tp-fastest. */
    int world = tp_of(o) * cp_of(o) * cfg_of(o), k = o->ranks_per_node;
    if (k > 0 && k < world) {
      if (world % k)
        return DIT_ERR(INVALID_ARGUMENT, "--ranks-per-node %d: the world of %d ranks does not fill whole nodes", k, world);
      if (k % tp_of(o))
        return DIT_ERR(INVALID_ARGUMENT, "--ranks-per-node %d: a tensor-parallel group of %d would straddle nodes", k, tp_of(o));
      if (o->shape.cp_mode == DIT_CP_USP && k % (tp_of(o) * o->shape.ulysses))
        return DIT_ERR(INVALID_ARGUMENT, "--ranks-per-node %d: a Ulysses group of %d (x tp %d) would straddle nodes", k, o->shape.ulysses,
                       tp_of(o));
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &pr.t0);

  dit_model_t *m = NULL;
  dit_bundle_writer_t *w = NULL;
  dit_manifest_t man;
  memset(&man, 0, sizeof man);
  dit_manifest_blob_t *blobs = NULL;
  size_t n_blobs = 0;
  dit_latent_shape_t ls;
  char weights_hash[33];

  dit_status_t s = dit_model_load(o->model_dir, o->variant, &m);
  if (!s) progress(&pr, "loaded %s (%s, %zu tensors) from %s", m->model_class, m->variant,
                   dit_safetensors_count(m->weights), o->model_dir);
  if (!s) s = dit_model_latent_shape(m, &o->shape, &ls);
  dit_store_t *store = NULL;
  int memo = 0;
  if (!s && o->store_dir) s = dit_store_open(o->store_dir, &store);
  if (!s) s = dit_compile_weights_hash(store, m, o->rehash, weights_hash, &memo);
  if (!s) progress(&pr, "weights content hash %s%s", weights_hash, memo ? " (memo: checkpoint files unchanged, not rehashed)" : "");
  if (!s) s = identity_inputs(o, m, &ls, weights_hash, &man.inputs);
  if (!s) s = dit_identity_compute(man.inputs, out->identity);
  if (!s && store && !already_published(o->out_dir, out->identity, &out->path)) {
    s = dit_compile_store_lookup(store, out->identity, o->out_dir, &out->path);
    out->from_store = out->path != NULL;
  }
  if (!s && (out->path || already_published(o->out_dir, out->identity, &out->path))) {
    /* The identity covers every input that decides the bytes: nothing to do, except entering
     * a bundle found only in the directory into the store. */
    if (store && !out->from_store && !dit_store_has_entry(store, out->identity))
      s = dit_store_import_bundle(store, out->path, NULL);
    out->existed = 1;
    progress(&pr, "found identical bundle %s%s%s: nothing to compile", out->path, out->from_store ? " in store " : "",
             out->from_store ? o->store_dir : "");
    cJSON_Delete(man.inputs);
    dit_model_free(m);
    dit_store_close(store);
    return s;
  }
  if (!s && o->explain) dit_compile_explain(store, o->out_dir, man.inputs, out->identity, stderr);
  /* One graph, plan and weights shard per tensor-parallel rank. */
  const int tp = tp_of(o), cp = cp_of(o), world = tp * cp * cfg_of(o), nb = tp * cp;
  rank_build_t *rb = calloc((size_t)nb, sizeof *rb);
  dit_manifest_weights_t *layouts = calloc((size_t)tp, sizeof *layouts);
  dit_manifest_rank_t *ranks = calloc((size_t)world, sizeof *ranks);
  if (!s && (!rb || !layouts || !ranks)) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  cJSON *codegen_summary = gpu ? cJSON_CreateObject() : NULL;
  if (!s) s = dit_bundle_writer_create(o->out_dir, &w);
  /* Build index cp_rank * tp + tp_rank; every cfg lane runs the same builds. */
  for (int r = 0; !s && r < nb; r++) {
    dit_shape_request_t req = o->shape;
    req.tp = tp;
    req.tp_rank = r % tp;
    req.cp = cp;
    req.cp_rank = r / tp;
    s = build_rank(o, m, &ls, &req, w, store, weights_hash, &rb[r], &layouts[r % tp], gpu ? codegen_summary : NULL, &pr);
    if (s && nb > 1) s = dit_status_annotate(s, "rank (cp %d, tp %d)", r / tp, r % tp);
  }
  size_t max_steps = 0;
  for (int r = 0; !s && r < nb; r++) max_steps += rb[r].plan->n_steps;
  if (!s && !(blobs = calloc(2 * (size_t)nb + 2 * max_steps, sizeof *blobs))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  for (int r = 0; !s && r < nb; r++)
    for (size_t i = 0; i < rb[r].plan->n_steps; i++) {
      const dit_plan_step_t *st = &rb[r].plan->steps[i];
      if (!st->has_kernel) continue;
      add_blob_entry(blobs, &n_blobs, "kernels", st->kernel.cubin, rb[r].module_sizes[i * 2]);
      if (st->kernel.ptx[0]) add_blob_entry(blobs, &n_blobs, "kernels", st->kernel.ptx, rb[r].module_sizes[i * 2 + 1]);
    }
  if (!s) {
    man.schema_major = DIT_SCHEMA_MAJOR;
    man.schema_minor = DIT_SCHEMA_MINOR;
    snprintf(man.family, sizeof man.family, "%s", m->family);
    snprintf(man.model_class, sizeof man.model_class, "%s", m->model_class);
    snprintf(man.variant, sizeof man.variant, "%s", m->variant);
    snprintf(man.arch, sizeof man.arch, "%s", o->target);
    man.topology.world = world;
    man.topology.tp = tp;
    man.topology.cp = cp;
    man.topology.cfg = cfg_of(o);
    snprintf(man.topology.cp_mode, sizeof man.topology.cp_mode, "%s", cp_mode_name(o));
    man.shape.batch = o->shape.batch;
    man.shape.frames = o->shape.frames;
    man.shape.height = o->shape.height;
    man.shape.width = o->shape.width;
    man.shape.text_len = o->shape.text_len;
    man.shape.latent[0] = ls.channels;
    man.shape.latent[1] = ls.frames;
    man.shape.latent[2] = ls.height;
    man.shape.latent[3] = ls.width;
    man.dtype = o->shape.dtype;
    s = fill_io(rb[0].plan, DIT_STORAGE_INPUT, &man.io_inputs, &man.n_inputs);
    if (!s) s = fill_io(rb[0].plan, DIT_STORAGE_OUTPUT, &man.io_outputs, &man.n_outputs);
  }
  if (!s) {
    uint64_t io_bytes = 0;
    for (size_t i = 0; i < rb[0].plan->n_values; i++)
      if (rb[0].plan->values[i].storage == DIT_STORAGE_INPUT || rb[0].plan->values[i].storage == DIT_STORAGE_OUTPUT)
        io_bytes += rb[0].plan->values[i].nbytes;
    /* Ranks ((cfg lane * cp) + cp rank) * tp + tp rank: every lane runs the same shards, so
     * ranks holding the same shard share its plan and weights blobs. */
    for (int r = 0; r < world; r++) {
      ranks[r].rank = r;
      memcpy(ranks[r].weights, layouts[r % tp].blob, DIT_HASH_HEX);
      memcpy(ranks[r].plan, rb[r % nb].plan_hash, DIT_HASH_HEX);
    }
    for (int r = 0; r < tp; r++) {
      layouts[r].tp_rank = r;
      layouts[r].tp_size = tp;
      add_blob_entry(blobs, &n_blobs, "weights", layouts[r].blob, rb[r].weights_size);
    }
    for (int r = 0; r < nb; r++) {
      add_blob_entry(blobs, &n_blobs, "plan", rb[r].plan_hash, rb[r].plan_size);
      /* Each rank's process holds its own arena, shard and io: the peak is the largest rank's. */
      uint64_t peak = rb[r].pres.arena_bytes + rb[r].weights_size + io_bytes;
      if (rb[r].pres.arena_bytes > man.arena_bytes) man.arena_bytes = rb[r].pres.arena_bytes;
      if (rb[r].weights_size > man.weight_bytes) man.weight_bytes = rb[r].weights_size;
      if (peak > man.peak_bytes) man.peak_bytes = peak;
    }
    man.blobs = blobs;
    man.n_blobs = n_blobs;
    man.min_driver = gpu ? dit_cuda_min_driver() : 0;
    man.weights = layouts;
    man.n_weights = (size_t)tp;
    man.ranks = ranks;
    man.n_ranks = (size_t)world;
    int n_blocks = (int)m->wan.layers;
    dit_cost_t *pb = calloc((size_t)n_blocks + 1, sizeof *pb);
    dit_cost_t tot = dit_graph_cost(rb[0].g, pb, n_blocks);
    cJSON *sum = cJSON_CreateObject();
    cJSON *passes = cJSON_AddArrayToObject(sum, "passes");
    for (const char *const *pn = dit_pass_names(); *pn; pn++) cJSON_AddItemToArray(passes, cJSON_CreateString(*pn));
    /* Per rank (rank 0's plan; tensor-parallel ranks do equal work). */
    cJSON_AddNumberToObject(sum, "steps", (double)rb[0].plan->n_steps);
    cJSON_AddNumberToObject(sum, "flops", tot.flops);
    cJSON_AddNumberToObject(sum, "bytes", tot.bytes);
    cJSON_AddNumberToObject(sum, "blocks", n_blocks);
    cJSON_AddNumberToObject(sum, "flops_per_block", pb && n_blocks ? pb[0].flops : 0);
    {
      /* What ditrun calibrate rates the collectives by. */
      dit_offload_block_t all = {0};
      block_work(rb[0].g, rb[0].plan, ALL_BLOCKS, &all);
      cJSON_AddNumberToObject(sum, "collectives", all.coll_count);
      cJSON_AddNumberToObject(sum, "collective_bytes", all.coll_bytes);
    }
    cJSON_AddNumberToObject(sum, "arena_bytes_without_reuse", (double)rb[0].pres.naive_bytes);
    cJSON_AddNumberToObject(sum, "tokens", (double)(ls.frames / m->wan.patch[0]) * (double)(ls.height / m->wan.patch[1]) *
                                               (double)(ls.width / m->wan.patch[2]));
    free(pb);
    if (o->offload && strcmp(o->offload, "none")) s = plan_offload(o, m, &rb[0], &layouts[0], io_bytes, sum);
    if (codegen_summary && cJSON_GetObjectItem(codegen_summary, "codegen"))
      cJSON_AddItemToObject(sum, "codegen", cJSON_DetachItemFromObject(codegen_summary, "codegen"));
    man.summary = sum;
    /* Check every plan against the manifest we are about to publish, as the runtime will. */
    for (int r = 0; !s && r < nb; r++) s = dit_plan_check_bindings(rb[r].plan, &man, &layouts[r % tp], "plan");
  }
  if (!s) progress(&pr, "plan: %zu steps, %.3g GFLOP per forward%s, predicted peak %.2f MiB%s", rb[0].plan->n_steps,
                   cJSON_GetObjectItem(man.summary, "flops")->valuedouble / 1e9, tp > 1 ? " per rank" : "",
                   (double)man.peak_bytes / (1 << 20), tp > 1 ? " per rank" : "");
  char *diag = NULL;
  if (!s) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    diag = diagnostics_json(o, secs(pr.t0, now));
    s = dit_bundle_writer_publish(w, &man, diag, &out->path, &out->existed);
  }
  if (!s) {
    memcpy(out->identity, man.identity, DIT_HASH_HEX);
    progress(&pr, "%s bundle %s", out->existed ? "found identical" : "published", out->path);
  }
  if (!s && store) s = dit_store_import_bundle(store, out->path, NULL);
  if (!s && store) progress(&pr, "entered %s into store %s", out->identity, o->store_dir);
  dit_store_close(store);
  free(diag);
  dit_bundle_writer_destroy(w);
  cJSON_Delete(man.inputs);
  cJSON_Delete(man.summary);
  cJSON_Delete(codegen_summary);
  free(man.io_inputs);
  free(man.io_outputs);
  for (int r = 0; r < tp && layouts; r++) {
    for (size_t i = 0; i < layouts[r].n_tensors; i++) free(layouts[r].tensors[i].name);
    free(layouts[r].tensors);
  }
  for (int r = 0; r < nb && rb; r++) rank_build_free(&rb[r]);
  free(layouts);
  free(ranks);
  free(rb);
  free(blobs);
  dit_model_free(m);
  return s;
}

dit_status_t dit_compile_identity(const dit_compile_options_t *o, cJSON **out_inputs, char out_identity[33]) {
  *out_inputs = NULL;
  dit_model_t *m = NULL;
  dit_store_t *store = NULL;
  dit_latent_shape_t ls;
  char weights_hash[33];
  int memo = 0;
  dit_status_t s = dit_model_load(o->model_dir, o->variant, &m);
  if (!s) s = dit_model_latent_shape(m, &o->shape, &ls);
  if (!s && o->store_dir) s = dit_store_open(o->store_dir, &store);
  if (!s) s = dit_compile_weights_hash(store, m, o->rehash, weights_hash, &memo);
  if (!s) s = identity_inputs(o, m, &ls, weights_hash, out_inputs);
  if (!s) s = dit_identity_compute(*out_inputs, out_identity);
  if (s) {
    cJSON_Delete(*out_inputs);
    *out_inputs = NULL;
  }
  dit_store_close(store);
  dit_model_free(m);
  return s;
}
