/* The compile driver: options and identity, store lookups, and the orchestration: load and
 * validate the model, build, plan and lower each rank's graph (compile_lower.c), lay out its
 * weights (compile_weights.c), plan the offload, write and publish the bundle. */
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
#include "artifacts/plan_memory.h"
#include "store/store.h"
#include "base/hw_profile.h"
#include "base/strbuf.h"
#include "compiler/codegen_cuda.h"
#include "compiler/compile_internal.h"
#include "compiler/compile_store.h"
#include "dit_sources_hash.h"
#include "passes/offload.h"
#include "passes/passes.h"

double dit_compile_secs(struct timespec a, struct timespec b) {
  return (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
}

void dit_compile_progress(dit_compile_progress_t *p, const char *fmt, ...) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  p->last = now;
  if (p->quiet) return;
  fprintf(stderr, "ditc: [%d/%d %6.2fs] ", ++p->step, p->total, dit_compile_secs(p->t0, now));
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

/* ---- manifest ---- */

static cJSON *shape_json(const dit_compile_options_t *o, const dit_latent_shape_t *ls) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "batch", (double)o->shape.batch);
  /* An image model's frames: 1, given or not. */
  cJSON_AddNumberToObject(s, "frames", (double)(o->shape.frames < 0 ? ls->frames : o->shape.frames));
  /* A text encoder has no pixels: 0 (the flags left out). */
  cJSON_AddNumberToObject(s, "height", (double)(o->shape.height < 0 ? 0 : o->shape.height));
  cJSON_AddNumberToObject(s, "width", (double)(o->shape.width < 0 ? 0 : o->shape.width));
  cJSON_AddNumberToObject(s, "text_len", (double)o->shape.text_len);
  /* Only image-conditioned models have it: other models keep their identity. */
  if (ls->image_len) cJSON_AddNumberToObject(s, "image_len", (double)ls->image_len);
  cJSON *l = cJSON_AddArrayToObject(s, "latent");
  double lat[4] = {(double)ls->channels, (double)ls->frames, (double)ls->height, (double)ls->width};
  for (int i = 0; i < 4; i++) cJSON_AddItemToArray(l, cJSON_CreateNumber(lat[i]));
  return s;
}

static int tp_of(const dit_compile_options_t *o) { return o->shape.tp > 1 ? o->shape.tp : 1; }

static int cfg_of(const dit_compile_options_t *o) { return o->cfg_parallel ? 2 : 1; }
static int cp_of(const dit_compile_options_t *o) { return o->shape.cp > 1 ? o->shape.cp : 1; }
/* The Ulysses degree under usp (1 otherwise), and the ring members that reuse groups partition:
 * the cp ranks under ring, the cp / U ranks sharing a Ulysses index under usp. */
static int ulysses_of(const dit_compile_options_t *o) {
  return o->shape.cp_mode == DIT_CP_USP && o->shape.ulysses > 1 ? o->shape.ulysses : 1;
}
static int ring_members(const dit_compile_options_t *o) { return cp_of(o) / ulysses_of(o); }
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
  if (o->shape.reuse_group) {
    cJSON_AddStringToObject(t, "reuse", "ditango");
    cJSON_AddNumberToObject(t, "reuse_group", o->shape.reuse_group);
    if (o->reuse_cache_mb > 0) cJSON_AddNumberToObject(t, "reuse_cache_mb", o->reuse_cache_mb);
  }
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


/* A one-expert bundle without a generate section is written as schema 1.0, byte for byte as
 * before those sections. */
static int schema_minor(const dit_compile_options_t *o, const dit_model_t *m, const dit_manifest_generate_t *gen, int stages,
                        const dit_manifest_stage_t *list, size_t n_list) {
  int need = o->shape.vae_part == DIT_VAE_HEAD || o->shape.vae_part == DIT_VAE_TAIL ? DIT_SCHEMA_MINOR_TILES : 0;
  if (o->image_processor_dir) need = DIT_SCHEMA_MINOR_IMAGE;
  for (size_t i = 0; i < n_list; i++) {
    const int later = list[i].prompt_template[0] || list[i].drop || list[i].mask_argument[0] || list[i].padding == DIT_PADDING_MASKED;
    const int r = dit_manifest_stage_minor(list[i].role), f = later ? DIT_SCHEMA_MINOR_IMAGE : list[i].argument[0] ? DIT_SCHEMA_MINOR_FEEDS : 0;
    need = r > need ? r : need;
    need = f > need ? f : need;
    if (list[i].window_stride && need < DIT_SCHEMA_MINOR_WINDOWS) need = DIT_SCHEMA_MINOR_WINDOWS;
  }
  return need     ? need
         : stages ? DIT_SCHEMA_MINOR_STAGES
         : o->shape.reuse_group ? DIT_SCHEMA_MINOR_REUSE
         : gen->present      ? DIT_SCHEMA_MINOR_GENERATE
         : m->pipeline.n_experts > 1 ? DIT_SCHEMA_MINOR_EXPERTS
                                     : 0;
}

/* The state cache's copies: one per guidance branch that runs through a rank's plan. */
static int reuse_copies(const dit_compile_options_t *o) { return o->shape.reuse_group ? (o->cfg_parallel ? 1 : 2) : 0; }

/* One copy of a graph's state cache as the memory plan lays it out (every state_cache output
 * rounded to the arena alignment, passes/memplan.c), and its state_cache ops. */
static uint64_t state_cache_bytes(const dit_graph_t *g, int *slots) {
  uint64_t bytes = 0;
  *slots = 0;
  for (int32_t i = 0; i < dit_graph_num_ops(g); i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (op->kind != DIT_OP_STATE_CACHE) continue;
    ++*slots;
    for (int k = 0; k < op->n_out; k++) {
      const uint64_t n = dit_value_nbytes(dit_graph_cvalue(g, op->out[k]));
      bytes += (n ? n + DIT_ARENA_ALIGN - 1 : DIT_ARENA_ALIGN) / DIT_ARENA_ALIGN * DIT_ARENA_ALIGN;
    }
  }
  return bytes;
}

/* --reuse-cache-mb: k, the adjacent remote groups per cached state. The memory plan is static and
 * the caches sit in it for the whole run, so k is fixed here: merging at run time and restoring the
 * finer grouping at an anchor would need the finer slots' memory anyway. Rank 0's graph with one
 * state per remote group gives a slot's bytes (every rank's are alike) and the layers; k is the
 * smallest with copies x layers x ceil(remote / k) slots within the cap. Refused, naming the sizes,
 * when one state per layer (k = remote) does not fit. */
static dit_status_t reuse_merge_for_cap(const dit_compile_options_t *o, const dit_model_t *m, int *merge) {
  *merge = o->shape.reuse_group ? 1 : 0;
  if (!o->shape.reuse_group || !(o->reuse_cache_mb > 0)) return DIT_OK;
  dit_shape_request_t req = o->shape;
  req.tp = tp_of(o), req.cp = cp_of(o), req.tp_rank = req.cp_rank = 0;
  req.reuse_copies = reuse_copies(o), req.reuse_merge = 1;
  dit_graph_t *g = NULL;
  DIT_RETURN_IF_ERROR(dit_model_build_graph(m, &req, &g), "--reuse-cache-mb: sizing the state cache");
  int slots = 0;
  const uint64_t all = state_cache_bytes(g, &slots);
  dit_graph_destroy(g);
  const int remote = ring_members(o) / req.reuse_group - 1, layers = slots / remote;
  if (!slots || slots % remote) return DIT_ERR(INTERNAL, "--reuse-cache-mb: %d state caches, expected a multiple of the %d remote groups", slots, remote);
  const uint64_t slot = all / (uint64_t)slots, copies = (uint64_t)req.reuse_copies;
  const uint64_t cap = (uint64_t)(o->reuse_cache_mb * 1048576.0);
  for (int k = 1; k <= remote; k++) {
    const uint64_t need = copies * (uint64_t)layers * (uint64_t)((remote - 1) / k + 1) * slot;
    if (need <= cap) {
      *merge = k;
      return DIT_OK;
    }
  }
  return DIT_ERR(RESOURCE_EXHAUSTED,
                 "--reuse-cache-mb %g: the state cache needs at least %" PRIu64 " bytes (%.3f MiB: one merged state per layer, "
                 "%d layers x %" PRIu64 " bytes x %" PRIu64 " cop%s), the cap is %" PRIu64 " bytes; with one state per remote group "
                 "(%d) it would need %" PRIu64 " bytes",
                 o->reuse_cache_mb, copies * (uint64_t)layers * slot, (double)(copies * (uint64_t)layers * slot) / 1048576.0, layers, slot,
                 copies, copies == 1 ? "y" : "ies", cap, remote, copies * all);
}

/* Where the pipeline switches experts, as WanPipeline computes it: boundary_ratio *
 * num_train_timesteps (1000 without a scheduler config). */
static double boundary_timestep(const dit_model_t *m) {
  const dit_pipeline_t *p = &m->pipeline;
  int64_t ntt = p->scheduler.present && p->scheduler.num_train_timesteps > 0 ? p->scheduler.num_train_timesteps : 1000;
  return p->index.boundary_ratio * (double)ntt;
}

/* The second expert seen as a model of its own: the same config and pipeline, its weights.
 * A shallow view: owns nothing. */
static dit_model_t second_expert_view(const dit_model_t *m) {
  dit_model_t v = *m;
  v.weights = m->pipeline.experts[1].weights;
  v.config = m->pipeline.experts[1].config;
  snprintf(v.model_dir, sizeof v.model_dir, "%s", m->pipeline.experts[1].dir);
  return v;
}

/* What two-expert bundles cannot do yet, refused before any work. */
/* Sparse attention: the video self-attention of the Wan family (its text is the cross-attention's
 * keys, always attended); one plan per bundle, so the dense first steps are not built yet. */
static dit_status_t check_sparse_options(const dit_compile_options_t *o, const dit_model_t *m) {
  const dit_sparse_attn_t *sp = &o->shape.sparse;
  if (!sp->pattern) return DIT_OK;
  if (strcmp(m->family, "wan"))
    return DIT_ERR(UNIMPLEMENTED, "--sparse-attn %s: family %s (%s); supported: wan", dit_sparse_attn_name(sp->pattern), m->family,
                   m->model_class);
  if (sp->dense_steps != 0)
    return DIT_ERR(UNIMPLEMENTED, "--sparse-dense-steps %" PRId64 ": a bundle holds one plan, so every step runs the sparse one; "
                   "only 0 is supported (--sparse-dense-layers keeps the first layers dense)", sp->dense_steps);
  return DIT_OK;
}

static dit_status_t check_experts_options(const dit_compile_options_t *o, const dit_model_t *m) {
  if (m->pipeline.n_experts < 2) return DIT_OK;
  double b = boundary_timestep(m);
  if (!(b > 0 && b <= 1000))
    return DIT_ERR(INVALID_ARGUMENT, "%s/model_index.json: boundary_ratio %g x num_train_timesteps gives boundary timestep %g, "
                   "expected in (0, 1000]", m->pipeline.dir, m->pipeline.index.boundary_ratio, b);
  return DIT_OK;
}

/* Identity inputs: everything that decides the bundle's bytes, nothing about where. */
static dit_status_t identity_inputs(const dit_compile_options_t *o, const dit_model_t *m,
                                    const dit_latent_shape_t *ls, const char *weights_hash, const char *weights_hash_2,
                                    const dit_manifest_stage_t *stages, size_t n_stages, const dit_carried_files_t *tok,
                                    cJSON **out) {
  cJSON *in = cJSON_CreateObject();
  if (!in) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  /* Both only when present: bundles without them keep their identity. */
  if (n_stages) {
    cJSON *sj = cJSON_AddArrayToObject(in, "stages");
    for (size_t i = 0; i < n_stages; i++) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "role", stages[i].role);
      cJSON_AddStringToObject(e, "identity", stages[i].identity);
      if (stages[i].argument[0]) { /* only where listed: the stages of bundles without them keep their identity */
        cJSON_AddStringToObject(e, "argument", stages[i].argument);
        cJSON_AddStringToObject(e, "output", stages[i].output);
        cJSON_AddStringToObject(e, "padding", dit_padding_names[stages[i].padding]);
        if (stages[i].prompt_template[0]) cJSON_AddStringToObject(e, "template", stages[i].prompt_template);
        if (stages[i].drop) cJSON_AddNumberToObject(e, "drop", (double)stages[i].drop);
        if (stages[i].mask_argument[0]) cJSON_AddStringToObject(e, "mask_argument", stages[i].mask_argument);
      }
      cJSON_AddItemToArray(sj, e);
    }
  }
  if (tok && tok->n) {
    cJSON *tj = cJSON_AddObjectToObject(in, tok->role);
    for (size_t i = 0; i < tok->n; i++) cJSON_AddStringToObject(tj, tok->name[i], tok->hash[i]);
  }
  cJSON *model = cJSON_AddObjectToObject(in, "model");
  cJSON_AddStringToObject(model, "class", m->model_class);
  cJSON_AddStringToObject(model, "variant", m->variant);
  cJSON_AddItemToObject(model, "config", cJSON_Duplicate(m->config, 1));
  cJSON *pipeline = NULL;
  dit_status_t ps = dit_model_pipeline_identity(m, &pipeline);
  if (ps) {
    cJSON_Delete(in);
    return ps;
  }
  if (pipeline) cJSON_AddItemToObject(model, "pipeline", pipeline);
  /* What generate is told (the scheduler's config among it) is part of what was compiled. */
  dit_manifest_generate_t gen;
  cJSON *gj = NULL;
  ps = dit_model_generate_contract(m, ls, &gen);
  if (!ps && gen.present) ps = dit_manifest_generate_json(&gen, &gj);
  if (ps) {
    cJSON_Delete(in);
    return ps;
  }
  if (gj) cJSON_AddItemToObject(in, "generate", gj);
  cJSON_AddStringToObject(in, "weights", weights_hash);
  if (weights_hash_2) {
    /* Only two-expert pipelines have it: one-expert bundles keep their identity. */
    cJSON *ex = cJSON_AddObjectToObject(in, "experts");
    cJSON_AddStringToObject(ex, "weights_2", weights_hash_2);
    cJSON_AddNumberToObject(ex, "boundary_timestep", boundary_timestep(m));
  }
  cJSON_AddItemToObject(in, "shape", shape_json(o, ls));
  cJSON_AddStringToObject(in, "dtype", dit_dtype_name(o->shape.dtype));
  cJSON_AddItemToObject(in, "topology", topology_json(o));
  cJSON_AddStringToObject(in, "target", o->target);
  cJSON *opts = cJSON_AddObjectToObject(in, "options");
  if (o->shape.sparse.pattern) {
    /* The pattern changes the numerics: part of the identity, and recorded for the runtime. */
    const dit_sparse_attn_t *sp = &o->shape.sparse;
    cJSON *sa = cJSON_AddObjectToObject(opts, "sparse_attn");
    cJSON_AddStringToObject(sa, "pattern", dit_sparse_attn_name(sp->pattern));
    if (sp->pattern == DIT_SPARSE_STA) {
      cJSON *wj = cJSON_AddArrayToObject(sa, "window");
      for (int d = 0; d < 3; d++) cJSON_AddItemToArray(wj, cJSON_CreateNumber((double)sp->window[d]));
    }
    cJSON_AddNumberToObject(sa, "tile", DIT_SPARSE_TILE);
    cJSON_AddNumberToObject(sa, "dense_steps", (double)sp->dense_steps);
    cJSON_AddNumberToObject(sa, "dense_layers", (double)sp->dense_layers);
  }
  if (o->quant) cJSON_AddStringToObject(opts, "quant", dit_quant_name(o->quant)); /* absent: bundles keep their identity */
  if (o->attn_quant) cJSON_AddStringToObject(opts, "attn_quant", dit_quant_name(o->attn_quant)); /* likewise */
  /* The VAE's encoder (absent: its decoder, bundles keep their identity). */
  if (o->shape.vae_part == DIT_VAE_ENCODER) cJSON_AddStringToObject(opts, "vae_part", "encoder");
  if (o->shape.vae_chunk > 0) {
    /* A decoder in chunks (absent: the whole video, bundles keep their identity). */
    cJSON *vc = cJSON_AddObjectToObject(opts, "vae_chunk");
    cJSON_AddNumberToObject(vc, "frames", (double)o->shape.vae_chunk);
    cJSON_AddBoolToObject(vc, "first", o->shape.vae_first);
    /* A split decoder's part (absent: the whole decoder, bundles keep their identity). */
    if (o->shape.vae_part == DIT_VAE_HEAD) cJSON_AddStringToObject(vc, "part", "head");
    if (o->shape.vae_part == DIT_VAE_TAIL) {
      cJSON_AddStringToObject(vc, "part", "tail");
      cJSON_AddNumberToObject(vc, "tiles", (double)o->shape.vae_tiles);
    }
  }
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
    dit_status_t ps = dit_hw_profile_load(o->profile, &hw);
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
  snprintf(schema, sizeof schema, "%d.%d", DIT_SCHEMA_MAJOR, schema_minor(o, m, &gen, n_stages || (tok && tok->n), stages, n_stages));
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

/* ---- bundle entries ---- */

static void add_blob_entry(dit_manifest_blob_t *blobs, size_t *n, const char *role, const char *hash, uint64_t size) {
  for (size_t i = 0; i < *n; i++)
    if (!strcmp(blobs[i].hash, hash)) return; /* identical modules are stored once */
  snprintf(blobs[*n].role, sizeof blobs[*n].role, "%s", role);
  memcpy(blobs[*n].hash, hash, DIT_HASH_HEX);
  blobs[*n].size = size;
  (*n)++;
}

/* ---- one rank ---- */

static void rank_build_free(dit_rank_build_t *r) {
  dit_graph_destroy(r->g);
  dit_plan_free(r->plan);
  free(r->module_sizes);
  cJSON_Delete(r->quant);
}

/* Graph, passes, plan, weights shard and kernels of one tensor-parallel rank. Rank 0 reports
 * progress and takes the dumps. */
static dit_status_t build_rank(const dit_compile_options_t *o, const dit_model_t *m, const dit_latent_shape_t *ls,
                               const dit_shape_request_t *req, dit_bundle_writer_t *w, dit_store_t *store, const char *weights_hash,
                               dit_rank_build_t *rb, dit_manifest_weights_t *layout, cJSON *codegen_summary, dit_compile_progress_t *pr) {
  const int first = req->tp_rank == 0 && req->cp_rank == 0;
  dit_compile_progress_t quiet = *pr;
  quiet.quiet = 1;
  dit_compile_progress_t *p = first ? pr : &quiet;
  DIT_RETURN_IF(dit_model_build_graph(m, req, &rb->g));
  if ((o->quant || o->attn_quant) && first && !(rb->quant = cJSON_CreateObject())) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  DIT_RETURN_IF(dit_compile_quantize(m, rb->g, o->quant, rb->quant, p));
  DIT_RETURN_IF(dit_compile_quantize_attention(rb->g, o->attn_quant, rb->quant, p));
  int split = 0;
  DIT_RETURN_IF(dit_compile_lower_target(o->target, rb->g, &split));
  char lowered[64] = "";
  if (split) snprintf(lowered, sizeof lowered, "; %d groupnorms as stats + apply", split);
  dit_compile_progress(p, "graph: %d ops, %d values; latent %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 "%s%s", dit_graph_num_ops(rb->g),
           dit_graph_num_values(rb->g), ls->channels, ls->frames, ls->height, ls->width, lowered,
           req->tp > 1 ? " (tensor-parallel rank 0)" : "");
  dit_pass_options_t popt = {first ? o->dump_after : NULL, o->dump};
  DIT_RETURN_IF(dit_passes_run(rb->g, &popt, &rb->pres));
  dit_compile_progress(p, "passes verify,dce,fuse,schedule,group,memplan: arena %.2f MiB (%.2f MiB without reuse), %d ops removed, "
           "%d fused, %d linears in groups", (double)rb->pres.arena_bytes / (1 << 20), (double)rb->pres.naive_bytes / (1 << 20),
           rb->pres.removed_ops, rb->pres.fused_ops, rb->pres.grouped_ops);
  if (first && o->dump_ir) dit_graph_print(rb->g, o->dump ? o->dump : stdout);
  DIT_RETURN_IF(dit_compile_lower(rb->g, rb->pres.arena_bytes, &rb->plan));
  /* Context-parallel ranks of one tensor-parallel shard use the same weights: written once. */
  if (req->cp_rank == 0) DIT_RETURN_IF(dit_compile_weights_blob(w, store, m, rb->g, rb->plan, weights_hash, layout, p));
  for (size_t i = 0; i < layout->n_tensors; i++)
    if (layout->tensors[i].offset + layout->tensors[i].nbytes > rb->weights_size)
      rb->weights_size = layout->tensors[i].offset + layout->tensors[i].nbytes;
  if (!(rb->module_sizes = calloc(2 * rb->plan->n_steps + 1, sizeof *rb->module_sizes)))
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (codegen_summary) DIT_RETURN_IF(dit_compile_kernels(o->target, rb->g, rb->plan, w, rb->module_sizes, codegen_summary, p));
  return DIT_OK; /* the plan blob is written once the offload plan has added its section */
}

/* ---- driver ---- */

/* A decoder tail without --vae-tiles takes the fewest that fit --vae-budget: *c is o with them
 * (and no budget left); *resolved says whether o needed it. */
static dit_status_t resolve_tail_tiles(const dit_compile_options_t *o, dit_compile_options_t *c, int *resolved) {
  *resolved = 0;
  if (o->shape.vae_part != DIT_VAE_TAIL || o->shape.vae_tiles) return DIT_OK;
  if (!(o->vae_budget_gib > 0))
    return DIT_ERR(INVALID_ARGUMENT, "--vae-part tail: the windows come from --vae-tiles N or --vae-budget GIB; neither was given");
  int64_t t = 0;
  uint64_t peak = 0;
  DIT_RETURN_IF(dit_compile_vae_tiles(o, 0, &t, &peak));
  if (!o->quiet)
    fprintf(stderr, "ditc: --vae-budget %g GiB: %" PRId64 " window%s, a predicted peak of %.1f MiB\n", o->vae_budget_gib, t,
            t == 1 ? "" : "s", (double)peak / (double)(1ull << 20));
  *c = *o;
  c->shape.vae_tiles = t;
  c->vae_budget_gib = 0;
  *resolved = 1;
  return DIT_OK;
}

dit_status_t dit_compile(const dit_compile_options_t *o, dit_compile_result_t *out) {
  memset(out, 0, sizeof *out);
  {
    dit_compile_options_t c;
    int resolved = 0;
    DIT_RETURN_IF(resolve_tail_tiles(o, &c, &resolved));
    if (resolved) return dit_compile(&c, out);
  }
  int gpu = strcmp(o->target, "cpu") != 0;
  if (gpu && !dit_cuda_target_supported(o->target))
    return DIT_ERR(INVALID_ARGUMENT, "--target %s: supported targets: cpu, sm_80, sm_86, sm_89, sm_90", o->target);
  if (gpu && o->shape.dtype != DIT_BF16)
    return DIT_ERR(UNIMPLEMENTED, "--target %s with --dtype %s: GPU targets run bf16 (fp32 accumulation); use --dtype bf16",
                   o->target, dit_dtype_name(o->shape.dtype));
  if (o->shape.reuse_group) {
    const int G = o->shape.reuse_group, cp = cp_of(o), u = ulysses_of(o), usp = o->shape.cp_mode == DIT_CP_USP;
    if (cp < 2 || (o->shape.cp_mode != DIT_CP_RING && !usp))
      return DIT_ERR(UNIMPLEMENTED, "--reuse ditango: needs --cp N (N >= 2) --cp-mode ring or usp, found --cp %d --cp-mode %s", cp,
                     cp_mode_name(o));
    /* usp with a U that does not split cp into a ring: the frontend refuses it by name. */
    if (!usp && (G < 1 || cp % G || cp / G < 2))
      return DIT_ERR(INVALID_ARGUMENT, "--reuse-group %d: the ranks per reuse group: expected a divisor of --cp %d that leaves >= 2 groups", G, cp);
    if (usp && u > 1 && cp % u == 0 && cp / u >= 2 && (G < 1 || (cp / u) % G || cp / u / G < 2))
      return DIT_ERR(INVALID_ARGUMENT,
                     "--reuse-group %d: the ring members per reuse group: expected a divisor of the %d ring members (--cp %d / --ulysses %d) "
                     "that leaves >= 2 groups",
                     G, cp / u, cp, u);
    /* A reuse group spans G ring members, each with its U Ulysses ranks: G x U consecutive cp ranks. */
    const int world = tp_of(o) * cp * cfg_of(o), k = o->ranks_per_node;
    if (k > 0 && k < world && k % (tp_of(o) * G * u))
      return DIT_ERR(INVALID_ARGUMENT, "--ranks-per-node %d: a reuse group of %d (x ulysses %d x tp %d) would straddle nodes", k, G, u,
                     tp_of(o));
  }
  /* FP8 tensor cores start at sm_89; a tensor-parallel shard would need the scales of its slice. */
  if (o->quant == DIT_QUANT_FP8 && gpu && (!strcmp(o->target, "sm_80") || !strcmp(o->target, "sm_86")))
    return DIT_ERR(UNIMPLEMENTED, "--quant fp8 with --target %s: fp8 matmuls need sm_89 or sm_90", o->target);
  if (o->quant == DIT_QUANT_FP8 && tp_of(o) > 1)
    return DIT_ERR(UNIMPLEMENTED, "--quant fp8 with --tp %d: tensor-parallel shards are not quantized yet; use --tp 1", tp_of(o));
  if (o->quant != DIT_QUANT_NONE && o->quant != DIT_QUANT_FP8)
    return DIT_ERR(INVALID_ARGUMENT, "--quant %s: the GEMMs take none or fp8 (%s is an --attn-quant mode)", dit_quant_name(o->quant),
                   dit_quant_name(o->quant));
  /* FP8 attention is the Hopper kernel's (wgmma on e4m3 and s8); shards would split its heads. */
  if (o->attn_quant != DIT_QUANT_NONE && gpu && strcmp(o->target, "sm_90"))
    return DIT_ERR(UNIMPLEMENTED, "--attn-quant %s with --target %s: fp8 attention is written for sm_90 (wgmma on e4m3 and s8)",
                   dit_quant_name(o->attn_quant), o->target);
  if (o->attn_quant != DIT_QUANT_NONE && tp_of(o) > 1)
    return DIT_ERR(UNIMPLEMENTED, "--attn-quant %s with --tp %d: tensor-parallel shards are not quantized yet; use --tp 1",
                   dit_quant_name(o->attn_quant), tp_of(o));
  dit_compile_progress_t pr = {.quiet = o->quiet, .total = (gpu ? 8 : 7) + (o->store_dir != NULL) + (o->quant != DIT_QUANT_NONE) +
                                                      (o->attn_quant != DIT_QUANT_NONE) +
                                                      (o->tokenizer_dir != NULL)};
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
  char weights_hash[33], weights_hash_2[33] = "";
  dit_model_t m2;
  memset(&m2, 0, sizeof m2);
  dit_manifest_stage_t stages[DIT_MAX_STAGES];
  size_t n_stages = 0;
  dit_carried_files_t tok;
  memset(&tok, 0, sizeof tok);

  dit_status_t s = dit_model_load(o->model_dir, o->variant, &m);
  if (!s) s = dit_model_check_compilable(m);
  if (!s) s = check_experts_options(o, m);
  if (!s) s = check_sparse_options(o, m);
  const int experts = !s && m->pipeline.n_experts > 1 ? 2 : 1;
  if (experts == 2) {
    m2 = second_expert_view(m);
    pr.total += 2;
  }
  if (!s) dit_compile_progress(&pr, "loaded %s (%s, %zu tensors) from %s", m->model_class, m->variant,
                   dit_safetensors_count(m->weights), o->model_dir);
  if (!s) s = dit_model_latent_shape(m, &o->shape, &ls);
  dit_store_t *store = NULL;
  int memo = 0;
  if (!s && o->store_dir) s = dit_store_open(o->store_dir, &store);
  if (!s) s = dit_compile_weights_hash(store, m, o->rehash, weights_hash, &memo);
  if (!s) dit_compile_progress(&pr, "weights content hash %s%s", weights_hash, memo ? " (memo: checkpoint files unchanged, not rehashed)" : "");
  if (!s && experts == 2) s = dit_compile_weights_hash(store, &m2, o->rehash, weights_hash_2, &memo);
  if (!s && experts == 2) dit_compile_progress(&pr, "transformer_2 weights content hash %s", weights_hash_2);
  if (!s) s = dit_compile_stages(o, m, 0, stages, &n_stages);
  if (!s) s = dit_carried_files_read(o, &tok);
  if (!s) s = identity_inputs(o, m, &ls, weights_hash, experts == 2 ? weights_hash_2 : NULL, stages, n_stages, &tok, &man.inputs);
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
    dit_compile_progress(&pr, "found identical bundle %s%s%s: nothing to compile", out->path, out->from_store ? " in store " : "",
             out->from_store ? o->store_dir : "");
    cJSON_Delete(man.inputs);
    dit_model_free(m);
    dit_store_close(store);
    dit_carried_files_free(&tok);
    return s;
  }
  if (!s && o->explain) dit_compile_explain(store, o->out_dir, man.inputs, out->identity, stderr);
  /* One graph, plan and weights shard per tensor-parallel rank. */
  const int tp = tp_of(o), cp = cp_of(o), world = tp * cp * cfg_of(o), nb = tp * cp;
  /* With two experts, builds [nb, 2nb) and layouts [tp, 2tp) are transformer_2's. */
  dit_rank_build_t *rb = calloc((size_t)(nb * experts), sizeof *rb);
  dit_manifest_weights_t *layouts = calloc((size_t)(tp * experts), sizeof *layouts);
  /* The manifest's layouts, one per distinct blob: experts with equal weights share theirs. */
  dit_manifest_weights_t *uniq = calloc((size_t)(tp * experts), sizeof *uniq);
  dit_manifest_rank_t *ranks = calloc((size_t)(world * experts), sizeof *ranks);
  dit_manifest_expert_t ex[2];
  memset(ex, 0, sizeof ex);
  if (!s && (!rb || !layouts || !uniq || !ranks)) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  cJSON *codegen_summary = gpu ? cJSON_CreateObject() : NULL;
  if (!s) s = dit_bundle_writer_create(o->out_dir, &w);
  int merge = 0;
  if (!s) s = reuse_merge_for_cap(o, m, &merge);
  if (!s && merge > 1)
    dit_compile_progress(&pr, "--reuse-cache-mb %g: %d adjacent remote groups per cached state", o->reuse_cache_mb, merge);
  /* Build index cp_rank * tp + tp_rank; every cfg lane runs the same builds. */
  for (int r = 0; !s && r < nb; r++) {
    dit_shape_request_t req = o->shape;
    req.tp = tp;
    req.tp_rank = r % tp;
    req.cp = cp;
    req.cp_rank = r / tp;
    req.reuse_copies = reuse_copies(o);
    req.reuse_merge = merge;
    s = build_rank(o, m, &ls, &req, w, store, weights_hash, &rb[r], &layouts[r % tp], gpu ? codegen_summary : NULL, &pr);
    if (s && nb > 1) s = dit_status_annotate(s, "rank (cp %d, tp %d)", r / tp, r % tp);
  }
  /* The second expert: the same graph and plan over its own weights. Its kernels are the
   * first's (same shapes, same steps), so none is generated again. */
  for (int r = 0; !s && experts == 2 && r < nb; r++) {
    dit_shape_request_t req = o->shape;
    req.tp = tp;
    req.tp_rank = r % tp;
    req.cp = cp;
    req.cp_rank = r / tp;
    req.reuse_copies = reuse_copies(o);
    req.reuse_merge = merge;
    dit_compile_progress_t quiet = pr;
    quiet.quiet = 1;
    dit_rank_build_t *b2 = &rb[nb + r];
    s = build_rank(o, &m2, &ls, &req, w, store, weights_hash_2, b2, &layouts[tp + r % tp], NULL, &quiet);
    if (!s && b2->plan->n_steps != rb[r].plan->n_steps)
      s = DIT_ERR(INTERNAL, "transformer_2: %zu plan steps, transformer has %zu", b2->plan->n_steps, rb[r].plan->n_steps);
    for (size_t i = 0; !s && i < b2->plan->n_steps; i++) {
      b2->plan->steps[i].has_kernel = rb[r].plan->steps[i].has_kernel;
      b2->plan->steps[i].kernel = rb[r].plan->steps[i].kernel;
      b2->module_sizes[2 * i] = rb[r].module_sizes[2 * i];
      b2->module_sizes[2 * i + 1] = rb[r].module_sizes[2 * i + 1];
    }
    if (s) s = dit_status_annotate(s, "transformer_2 (%s)", m->pipeline.experts[1].dir);
    else if (r == 0) dit_compile_progress(&pr, "transformer_2: plan and weights (the transformer's kernels)");
  }
  size_t max_steps = 0;
  for (int r = 0; !s && r < nb; r++) max_steps += rb[r].plan->n_steps;
  if (!s && !(blobs = calloc((2 * (size_t)nb + 2 * max_steps) * (size_t)experts + tok.n, sizeof *blobs))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  /* The carried files, each a blob named by its file (hashed and verified like the others). */
  for (size_t i = 0; !s && i < tok.n; i++) {
    char h[DIT_HASH_HEX];
    s = dit_bundle_writer_add_blob(w, tok.data[i], tok.size[i], h);
    if (!s && !strcmp(h, tok.hash[i])) {
      add_blob_entry(blobs, &n_blobs, tok.role, h, tok.size[i]);
      snprintf(blobs[n_blobs - 1].name, sizeof blobs[n_blobs - 1].name, "%s", tok.name[i]);
    } else if (!s) {
      s = DIT_ERR(INTERNAL, "%s file %s: hashed %s when read, %s when written", tok.role, tok.name[i], tok.hash[i], h);
    }
  }
  if (!s && tok.n) dit_compile_progress(&pr, "%s: %zu file%s from %s", tok.role, tok.n, tok.n > 1 ? "s" : "", tok.dir);
  for (int r = 0; !s && r < nb; r++)
    for (size_t i = 0; i < rb[r].plan->n_steps; i++) {
      const dit_plan_step_t *st = &rb[r].plan->steps[i];
      if (!st->has_kernel) continue;
      add_blob_entry(blobs, &n_blobs, "kernels", st->kernel.cubin, rb[r].module_sizes[i * 2]);
      if (st->kernel.ptx[0]) add_blob_entry(blobs, &n_blobs, "kernels", st->kernel.ptx, rb[r].module_sizes[i * 2 + 1]);
    }
  if (!s) {
    s = dit_model_generate_contract(m, &ls, &man.generate);
    man.schema_major = DIT_SCHEMA_MAJOR;
    man.schema_minor = schema_minor(o, m, &man.generate, n_stages || tok.n, stages, n_stages);
    man.n_stages = n_stages;
    memcpy(man.stages, stages, n_stages * sizeof *stages);
    snprintf(man.family, sizeof man.family, "%s", m->family);
    snprintf(man.model_class, sizeof man.model_class, "%s", m->model_class);
    snprintf(man.variant, sizeof man.variant, "%s", m->variant);
    snprintf(man.arch, sizeof man.arch, "%s", o->target);
    man.topology.world = world;
    man.topology.tp = tp;
    man.topology.cp = cp;
    man.topology.cfg = cfg_of(o);
    snprintf(man.topology.cp_mode, sizeof man.topology.cp_mode, "%s", cp_mode_name(o));
    if (o->shape.reuse_group) {
      /* A state-cache slot per self-attention layer and cached state (remote group, or k merged). */
      int slots = 0;
      const uint64_t bytes = state_cache_bytes(rb[0].g, &slots);
      const int remote = ring_members(o) / o->shape.reuse_group - 1, per_layer = (remote - 1) / merge + 1;
      man.topology.reuse_group = o->shape.reuse_group;
      man.topology.reuse_ulysses = ulysses_of(o);
      man.topology.reuse_merge = merge;
      man.topology.reuse_layers = slots / per_layer;
      man.topology.reuse_copies = reuse_copies(o);
      man.topology.reuse_cache_bytes = bytes * (uint64_t)reuse_copies(o);
      if (!slots || slots % per_layer)
        s = DIT_ERR(INTERNAL, "--reuse ditango: the plan has %d state caches, expected a multiple of the %d cached states per layer >= 1",
                    slots, per_layer);
    }
    man.shape.batch = o->shape.batch;
    man.shape.frames = o->shape.frames < 0 ? ls.frames : o->shape.frames;
    man.shape.height = o->shape.height < 0 ? 0 : o->shape.height;
    man.shape.width = o->shape.width < 0 ? 0 : o->shape.width;
    man.shape.text_len = o->shape.text_len;
    man.shape.latent[0] = ls.channels;
    man.shape.latent[1] = ls.frames;
    man.shape.latent[2] = ls.height;
    man.shape.latent[3] = ls.width;
    man.shape.tile_count = ls.tile_count;
    man.shape.tile_full = ls.tile_full;
    man.shape.tile_halo = ls.tile_halo;
    man.dtype = o->shape.dtype;
    if (!s) s = fill_io(rb[0].plan, DIT_STORAGE_INPUT, &man.io_inputs, &man.n_inputs);
    if (!s) s = fill_io(rb[0].plan, DIT_STORAGE_OUTPUT, &man.io_outputs, &man.n_outputs);
  }
  if (!s) {
    const int n_blocks = dit_offload_graph_blocks(rb[0].g);
    dit_cost_t *pb = calloc((size_t)n_blocks + 1, sizeof *pb);
    dit_cost_t tot = dit_graph_cost(rb[0].g, pb, n_blocks);
    cJSON *sum = cJSON_CreateObject();
    man.summary = sum;
    cJSON *passes = cJSON_AddArrayToObject(sum, "passes");
    for (const char *const *pn = dit_pass_names(); *pn; pn++) cJSON_AddItemToArray(passes, cJSON_CreateString(*pn));
    /* Per rank (rank 0's plan; tensor-parallel ranks do equal work). */
    cJSON_AddNumberToObject(sum, "steps", (double)rb[0].plan->n_steps);
    cJSON_AddNumberToObject(sum, "flops", tot.flops);
    cJSON_AddNumberToObject(sum, "bytes", tot.bytes);
    cJSON_AddNumberToObject(sum, "blocks", n_blocks);
    cJSON_AddNumberToObject(sum, "flops_per_block", pb && n_blocks ? pb[0].flops : 0);
    /* Each rank's forward, typed in its plan: what ditrun calibrate rates the machine by. The
     * summary repeats rank 0's for people. */
    for (int r = 0; r < nb; r++) {
      dit_offload_block_t all = {0};
      dit_offload_block_work(rb[r].g, DIT_OFFLOAD_ALL_BLOCKS, &all);
      dit_plan_work_t *wk = &rb[r].plan->work;
      wk->present = 1;
      wk->flops = r ? dit_graph_cost(rb[r].g, NULL, 0).flops : tot.flops;
      wk->collectives = (uint64_t)all.coll_count, wk->collective_bytes = (uint64_t)all.coll_bytes;
    }
    cJSON_AddNumberToObject(sum, "collectives", (double)rb[0].plan->work.collectives);
    cJSON_AddNumberToObject(sum, "collective_bytes", (double)rb[0].plan->work.collective_bytes);
    cJSON_AddNumberToObject(sum, "arena_bytes_without_reuse", (double)rb[0].pres.naive_bytes);
    cJSON_AddNumberToObject(sum, "tokens", (double)ls.tokens);
    if (rb[0].quant) {
      if (o->quant) cJSON_AddItemToObject(sum, "quant", cJSON_DetachItemFromObject(rb[0].quant, "quant"));
      if (o->attn_quant) cJSON_AddItemToObject(sum, "attn_quant", cJSON_DetachItemFromObject(rb[0].quant, "attn_quant"));
    }
    free(pb);
    /* The offload plan adds its section to every rank's plan; then the plans are written. */
    /* What the runtime allocates besides weights, by the rule it allocates with. */
    dit_plan_memory_t mem0;
    dit_plan_memory(rb[0].plan, gpu, &mem0);
    if (o->offload && strcmp(o->offload, "none"))
      s = experts == 2 ? dit_compile_offload_experts(o, rb, nb, tp, layouts, gpu, sum) : dit_compile_offload(o, rb, nb, tp, layouts, mem0.total, sum);
    for (int r = 0; !s && r < nb * experts; r++) s = dit_compile_write_plan(w, &rb[r]);
    if (codegen_summary && cJSON_GetObjectItem(codegen_summary, "codegen"))
      cJSON_AddItemToObject(sum, "codegen", cJSON_DetachItemFromObject(codegen_summary, "codegen"));
    /* Ranks ((cfg lane * cp) + cp rank) * tp + tp rank: every lane runs the same shards, so
     * ranks holding the same shard share its plan and weights blobs. */
    for (int r = 0; r < world; r++) {
      ranks[r].rank = r;
      memcpy(ranks[r].weights, layouts[r % tp].blob, DIT_HASH_HEX);
      memcpy(ranks[r].plan, rb[r % nb].plan_hash, DIT_HASH_HEX);
    }
    for (int r = 0; r < tp * experts; r++) {
      layouts[r].tp_rank = r % tp;
      layouts[r].tp_size = tp;
      add_blob_entry(blobs, &n_blobs, "weights", layouts[r].blob, rb[(r / tp) * nb + r % tp].weights_size);
    }
    for (int r = nb; !s && r < nb * experts; r++) add_blob_entry(blobs, &n_blobs, "plan", rb[r].plan_hash, rb[r].plan_size);
    if (experts == 2) {
      for (int r = 0; r < world; r++) {
        ranks[world + r].rank = r;
        memcpy(ranks[world + r].weights, layouts[tp + r % tp].blob, DIT_HASH_HEX);
        memcpy(ranks[world + r].plan, rb[nb + r % nb].plan_hash, DIT_HASH_HEX);
      }
      snprintf(ex[0].name, sizeof ex[0].name, "transformer");
      snprintf(ex[1].name, sizeof ex[1].name, "transformer_2");
      ex[0].ranks = ranks;
      ex[1].ranks = ranks + world;
      ex[0].n_ranks = ex[1].n_ranks = (size_t)world;
      man.experts = ex;
      man.n_experts = 2;
      man.boundary_timestep = boundary_timestep(m);
    }
    for (int r = 0; !s && r < nb; r++) {
      add_blob_entry(blobs, &n_blobs, "plan", rb[r].plan_hash, rb[r].plan_size);
      /* Each rank's process holds its own shard and what the runtime allocates to run its plan
       * (arena, io, collective buffers, library workspace): the peak is the largest rank's. */
      dit_plan_memory_t mem;
      dit_plan_memory(rb[r].plan, gpu, &mem);
      uint64_t peak = mem.total + rb[r].weights_size, weights = rb[r].weights_size;
      if (experts == 2) {
        /* Both experts are loaded up front, each with its own plan's memory. */
        dit_plan_memory(rb[nb + r].plan, gpu, &mem);
        peak += mem.total + rb[nb + r].weights_size;
        weights += rb[nb + r].weights_size;
      }
      if (rb[r].pres.arena_bytes > man.arena_bytes) man.arena_bytes = rb[r].pres.arena_bytes;
      if (weights > man.weight_bytes) man.weight_bytes = weights;
      if (peak > man.peak_bytes) man.peak_bytes = peak;
    }
    man.blobs = blobs;
    man.n_blobs = n_blobs;
    man.min_driver = gpu ? dit_cuda_min_driver() : 0;
    size_t n_uniq = 0;
    for (int r = 0; r < tp * experts; r++) {
      int seen = 0;
      for (size_t i = 0; i < n_uniq && !seen; i++) seen = !strcmp(uniq[i].blob, layouts[r].blob);
      if (!seen) uniq[n_uniq++] = layouts[r];
    }
    man.weights = uniq;
    man.n_weights = n_uniq;
    man.ranks = ranks;
    man.n_ranks = (size_t)world;
    /* Check every plan against the manifest we are about to publish, as the runtime will. */
    for (int r = 0; !s && r < nb * experts; r++)
      s = dit_plan_check_bindings(rb[r].plan, &man, &layouts[(r / nb) * tp + (r % nb) % tp], "plan");
  }
  if (!s) dit_compile_progress(&pr, "plan: %zu steps, %.3g GFLOP per forward%s, predicted peak %.2f MiB%s", rb[0].plan->n_steps,
                   cJSON_GetObjectItem(man.summary, "flops")->valuedouble / 1e9, tp > 1 ? " per rank" : "",
                   (double)man.peak_bytes / (1 << 20), tp > 1 ? " per rank" : "");
  char *diag = NULL;
  if (!s) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    diag = diagnostics_json(o, dit_compile_secs(pr.t0, now));
    s = dit_bundle_writer_publish(w, &man, diag, &out->path, &out->existed);
  }
  if (!s) {
    memcpy(out->identity, man.identity, DIT_HASH_HEX);
    dit_compile_progress(&pr, "%s bundle %s", out->existed ? "found identical" : "published", out->path);
  }
  if (!s && store) s = dit_store_import_bundle(store, out->path, NULL);
  if (!s && store) dit_compile_progress(&pr, "entered %s into store %s", out->identity, o->store_dir);
  dit_store_close(store);
  free(diag);
  dit_bundle_writer_destroy(w);
  cJSON_Delete(man.inputs);
  cJSON_Delete(man.summary);
  cJSON_Delete(codegen_summary);
  free(man.io_inputs);
  free(man.io_outputs);
  for (int r = 0; r < tp * experts && layouts; r++) {
    for (size_t i = 0; i < layouts[r].n_tensors; i++) free(layouts[r].tensors[i].name);
    free(layouts[r].tensors);
  }
  for (int r = 0; r < nb * experts && rb; r++) rank_build_free(&rb[r]);
  free(layouts);
  free(uniq);
  free(ranks);
  free(rb);
  free(blobs);
  dit_model_free(m);
  dit_carried_files_free(&tok);
  return s;
}

dit_status_t dit_compile_identity(const dit_compile_options_t *o, cJSON **out_inputs, char out_identity[33]) {
  *out_inputs = NULL;
  {
    dit_compile_options_t c;
    int resolved = 0;
    DIT_RETURN_IF(resolve_tail_tiles(o, &c, &resolved));
    if (resolved) return dit_compile_identity(&c, out_inputs, out_identity);
  }
  dit_model_t *m = NULL;
  dit_store_t *store = NULL;
  dit_latent_shape_t ls;
  char weights_hash[33], weights_hash_2[33] = "";
  int memo = 0;
  dit_status_t s = dit_model_load(o->model_dir, o->variant, &m);
  if (!s) s = dit_model_check_compilable(m);
  if (!s) s = check_experts_options(o, m);
  if (!s) s = check_sparse_options(o, m);
  if (!s) s = dit_model_latent_shape(m, &o->shape, &ls);
  if (!s && o->store_dir) s = dit_store_open(o->store_dir, &store);
  if (!s) s = dit_compile_weights_hash(store, m, o->rehash, weights_hash, &memo);
  const int two = !s && m->pipeline.n_experts > 1;
  if (two) {
    dit_model_t m2 = second_expert_view(m);
    s = dit_compile_weights_hash(store, &m2, o->rehash, weights_hash_2, &memo);
  }
  dit_manifest_stage_t stages[DIT_MAX_STAGES];
  size_t n_stages = 0;
  dit_carried_files_t tok;
  memset(&tok, 0, sizeof tok);
  if (!s) s = dit_compile_stages(o, m, 1, stages, &n_stages);
  if (!s) s = dit_carried_files_read(o, &tok);
  if (!s) s = identity_inputs(o, m, &ls, weights_hash, two ? weights_hash_2 : NULL, stages, n_stages, &tok, out_inputs);
  dit_carried_files_free(&tok);
  if (!s) s = dit_identity_compute(*out_inputs, out_identity);
  if (s) {
    cJSON_Delete(*out_inputs);
    *out_inputs = NULL;
  }
  dit_store_close(store);
  dit_model_free(m);
  return s;
}

