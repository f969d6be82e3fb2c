/* The loader and plan executor: validates a bundle for this process, binds every plan value
 * to backend memory (arena, weights, io staging) and runs the steps in order. A multi-rank
 * bundle runs all its ranks here, one thread each, or one rank per process under a launcher;
 * collective steps and their communicators are in collectives.c. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "artifacts/plan_memory.h"
#include "runtime/exec_internal.h"
#include "runtime/launch/launch_env.h"

const dit_manifest_t *dit_runtime_manifest(const dit_runtime_t *rt) { return rt->m; }

static void rank_destroy(rank_rt_t *rt) {
  if (!rt) return;
  if (rt->be_state) {
    if (rt->be->quiesce) rt->be->quiesce(rt->be_state); /* a failed run may have left copies queued */
    dit_offload_engine_destroy(rt->offload);
    if (rt->coll_send) rt->be->release(rt->be_state, rt->coll_send);
    if (rt->coll_recv) rt->be->release(rt->be_state, rt->coll_recv);
    if (rt->io_buf)
      for (size_t i = 0; i < rt->plan->n_values; i++)
        if (rt->io_buf[i]) rt->be->release(rt->be_state, rt->io_buf[i]);
    if (rt->arena && !rt->arena_borrowed) rt->be->release(rt->be_state, rt->arena);
    if (rt->weights_dev) rt->be->release(rt->be_state, rt->weights_dev);
    rt->be->destroy(rt->be_state);
  }
  free(rt->stage_buf);
  free(rt->pending);
  free(rt->coll_jobs);
  if (rt->host_out)
    for (size_t i = 0; i < rt->plan->n_values; i++) free(rt->host_out[i]);
  free(rt->host_out);
  free(rt->io_buf);
  free(rt->bound);
  free(rt->step_tensors);
  dit_file_unmap(&rt->weights_map);
  dit_plan_free(rt->plan);
}

/* A residual slot's buffers, on the backend that made them. */
static void resid_release(dit_runtime_t *rt, int slot) {
  rank_rt_t *r = rt->resid_rank[slot];
  if (r && rt->resid_start[slot]) r->be->release(r->be_state, rt->resid_start[slot]);
  if (r && rt->resid_neg[slot]) r->be->release(r->be_state, rt->resid_neg[slot]);
  rt->resid_start[slot] = rt->resid_neg[slot] = NULL, rt->resid_valid[slot] = 0;
  rt->resid_rank[slot] = NULL, rt->resid_bytes[slot] = 0;
}

/* The probe's buffers, on the backend that made them. */
static void probe_release(dit_runtime_t *rt) {
  rank_rt_t *r = rt->probe_rank;
  if (r && rt->probe_prev) r->be->release(r->be_state, rt->probe_prev);
  if (r && rt->probe_held) r->be->release(r->be_state, rt->probe_held);
  rt->probe_rank = NULL, rt->probe_prev = rt->probe_held = NULL, rt->probe_bytes = 0, rt->probe_valid = 0;
  rt->probe_held_value = 0;
  for (int i = 0; i < 2; i++) resid_release(rt, i);
}

void dit_runtime_destroy(dit_runtime_t *rt) {
  if (!rt) return;
  probe_release(rt);
  /* The second expert's communicators are the first's: only those are destroyed, once. An
   * abort freed whichever set was active, so after one no pointer is kept. */
  for (int e = 0; e < rt->n_experts; e++)
    for (int r = 0; rt->expert_ranks[e] && r < rt->n_ranks; r++) {
      rank_rt_t *k = &rt->expert_ranks[e][r];
      if (k->comms_borrowed || rt->naborted) {
        k->nworld = NULL;
        memset(k->ngroup, 0, sizeof k->ngroup);
      }
    }
  rt->ranks = rt->expert_ranks[0];
  dit_reuse_free(rt);
  dit_exec_nccl_shutdown(rt);
  for (int e = rt->n_experts - 1; e >= 0; e--) {
    for (int r = 0; rt->expert_ranks[e] && r < rt->n_ranks; r++) rank_destroy(&rt->expert_ranks[e][r]);
    free(rt->expert_ranks[e]);
  }
  dit_comm_destroy(rt->comm);
  dit_tcomm_destroy(rt->tcomm);
  dit_bundle_close(rt->bundle);
  free(rt->mem_peak);
  free(rt);
}

/* The backend for a bundle: its target's unless the caller names one. The CPU backend runs
 * any bundle's plan (it ignores generated kernels), which makes it the reference for GPU ones. */
static const char *backend_name(const dit_manifest_t *m, const dit_runtime_options_t *o) {
  if (o && o->backend) return o->backend;
  return strncmp(m->arch, "sm_", 3) == 0 ? "cuda" : "cpu";
}

static const dit_backend_vtable_t *pick_backend(const char *name) {
  if (!strcmp(name, "cpu")) return dit_backend_cpu();
  if (!strcmp(name, "cuda")) return dit_backend_cuda();
  return NULL;
}

/* The device memory an offload plan allocates itself: its predicted peak without the runtime
 * overhead the profile counted in. */
static uint64_t planned_bytes(const dit_plan_t *p, const dit_manifest_t *m) {
  const uint64_t pk = dit_offload_predicted_peak(p, m), ov = dit_offload_overhead(p);
  return pk > ov ? pk - ov : pk;
}

/* Fitness: can this process run this bundle? Checked before any large allocation. */
static dit_status_t check_fitness(const dit_runtime_t *rt, const dit_runtime_options_t *o) {
  const dit_manifest_t *m = rt->m;
  const char *want = backend_name(m, o);
  if (strcmp(want, "cpu") && strcmp(want, "cuda"))
    return DIT_ERR(INVALID_ARGUMENT, "--backend %s: unknown backend (cpu, cuda)", want);
  if (!pick_backend(want))
    return DIT_ERR(UNAVAILABLE, "backend %s: not compiled into this ditrun (built without CUDA headers)", want);
  if (!strcmp(want, "cuda") && strncmp(m->arch, "sm_", 3))
    return DIT_ERR(FAILED_PRECONDITION, "manifest.json: field 'target.arch' = \"%s\": the bundle has no GPU code; compile it with --target sm_90",
                   m->arch);
  if (o && o->launch && o->launch->world > 1) {
    /* Under a launcher: the bundle's world must be the launch's. One process per rank talks
     * over TCP on the CPU backend and through NCCL on GPUs. */
    DIT_RETURN_IF(dit_launch_check_topology(m, o->launch));
    if (strcmp(want, "cpu"))
      DIT_RETURN_IF_ERROR(dit_nccl_load(NULL), "launch: rank %d of %d from %s: one GPU process per rank needs NCCL; or run one ditrun "
                          "without a launcher, which runs all %d ranks as threads (GPUs with --devices)", o->launch->rank, o->launch->world,
                          dit_launcher_name(o->launch->launcher), m->topology.world);
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (!strcmp(want, "cpu") && pages > 0 && page > 0) {
    double avail = (double)pages * (double)page;
    if ((double)m->peak_bytes * m->topology.world > avail)
      return DIT_ERR(RESOURCE_EXHAUSTED, "manifest.json: field 'memory.peak_bytes': the bundle needs %.2f GiB, this machine has %.2f GiB",
                     (double)m->peak_bytes * m->topology.world / (1 << 30), avail / (1 << 30));
  }
  return DIT_OK;
}

/* The buffer of lender's input matching plan input v (name, dtype and size), or NULL. */
static void *lent_input(const rank_rt_t *lender, const dit_plan_value_t *v) {
  const long i = lender ? dit_plan_lent_input(lender->plan, v) : -1;
  return i >= 0 ? lender->io_buf[i] : NULL;
}

/* What a runtime borrowing from lender does not allocate (dit_plan_lent_bytes). */
static uint64_t lent_bytes(const rank_rt_t *rt, const rank_rt_t *lender) {
  return lender ? dit_plan_lent_bytes(rt->plan, lender->plan) : 0;
}

static dit_status_t bind_values(rank_rt_t *rt, const rank_rt_t *lender) {
  dit_plan_t *p = rt->plan;
  const dit_manifest_weights_t *lay = rt->layout;
  /* Offloaded weights are rebound by the engine afterwards. */
  uint8_t *wbase = rt->weights_dev ? (uint8_t *)rt->weights_dev : (uint8_t *)rt->weights_map.data;
  for (size_t i = 0; i < p->n_values; i++) {
    const dit_plan_value_t *v = &p->values[i];
    dit_tensor_t *t = &rt->bound[i];
    t->dtype = v->dtype;
    t->rank = v->rank;
    memcpy(t->dims, v->dims, sizeof t->dims);
    switch (v->storage) {
      case DIT_STORAGE_ARENA:
        t->data = (uint8_t *)rt->arena + v->offset;
        break;
      case DIT_STORAGE_WEIGHT: {
        const dit_manifest_tensor_t *e = NULL;
        for (size_t k = 0; k < lay->n_tensors && !e; k++)
          if (!strcmp(lay->tensors[k].name, v->ref)) e = &lay->tensors[k];
        /* dit_plan_check_bindings proved presence, dtype and shape; the manifest parser proved
         * the range lies inside the blob, whose size the bundle reader checked. */
        if (!e) return DIT_ERR(INTERNAL, "weight '%s' unbound", v->ref);
        t->data = wbase + e->offset;
        break;
      }
      case DIT_STORAGE_INPUT:
      case DIT_STORAGE_OUTPUT: {
        char what[160];
        snprintf(what, sizeof what, "%s '%s'", v->storage == DIT_STORAGE_INPUT ? "input" : "output", v->ref);
        /* An output that replaces an input in place takes the input's buffer (bound below); an
         * input the lender has is the lender's. */
        void *lent = v->storage == DIT_STORAGE_INPUT ? lent_input(lender, v) : NULL;
        if (v->updates < 0 && !lent) DIT_RETURN_IF(rt->be->alloc(rt->be_state, v->nbytes ? v->nbytes : 1, what, &rt->io_buf[i]));
        t->data = lent ? lent : rt->io_buf[i];
        if (!rt->be->host_memory && v->storage == DIT_STORAGE_OUTPUT) {
          rt->host_out[i] = malloc(v->nbytes ? v->nbytes : 1);
          if (!rt->host_out[i]) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for %s", what);
        }
        break;
      }
    }
  }
  for (size_t i = 0; i < p->n_values; i++)
    if (p->values[i].updates >= 0) rt->bound[i].data = rt->bound[p->values[i].updates].data;
  return DIT_OK;
}

static dit_status_t load_blob(void *ctx, const char *hash, dit_mapping_t *out) {
  return dit_bundle_map_blob((dit_bundle_t *)ctx, hash, out);
}

/* The backend's load-time preparation (kernels, GEMM plans timed on the real operands). A
 * parked expert's weights are still in host memory, which the device cannot read: it is
 * prepared against `stand_in`'s (the expert before it, the same plan shapes), whose device
 * weights are in place; the backend follows its operands' addresses when they move. */
static dit_status_t prepare_backend(rank_rt_t *rt, const rank_rt_t *stand_in) {
  const dit_plan_t *p = rt->plan;
  if (!stand_in) return rt->be->prepare(rt->be_state, p, rt->bound, load_blob, rt->bundle);
  const dit_plan_t *q = stand_in->plan;
  if (q->n_values != p->n_values)
    return DIT_ERR(INTERNAL, "expert swap: the experts' plans have %zu and %zu values", q->n_values, p->n_values);
  dit_tensor_t *own = malloc((p->n_values + 1) * sizeof *own);
  if (!own) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  memcpy(own, rt->bound, p->n_values * sizeof *own);
  for (size_t i = 0; i < p->n_values; i++)
    if (p->values[i].storage == DIT_STORAGE_WEIGHT) {
      if (q->values[i].storage != DIT_STORAGE_WEIGHT || q->values[i].nbytes != p->values[i].nbytes) {
        free(own);
        return DIT_ERR(INTERNAL, "expert swap: value %zu ('%s') differs between the experts' plans", i, p->values[i].name);
      }
      rt->bound[i].data = stand_in->bound[i].data;
    }
  dit_status_t s = rt->be->prepare(rt->be_state, p, rt->bound, load_blob, rt->bundle);
  memcpy(rt->bound, own, p->n_values * sizeof *own);
  free(own);
  return s;
}

/* A weights shard's content hash against the manifest's (dit_bundle_check_blob), as a thread runs it. */
typedef struct weights_check {
  const dit_bundle_t *bundle;
  const char *hash;
  const dit_mapping_t *map;
  dit_status_t s;
} weights_check_t;

static void *check_weights(void *p) {
  weights_check_t *w = p;
  w->s = dit_bundle_check_blob(w->bundle, w->hash, w->map);
  return NULL;
}

/* An expert that swaps in stays in host memory until the one before it has run (loaded alone,
 * it loads as any offloaded plan). */
static int rank_parked(const rank_rt_t *rt) { return rt->plan->offload.swap.present && rt->owner->n_experts > 1; }

dit_status_t dit_exec_graph_decide(int option, const dit_graph_facts_t *f, int *on) {
  *on = 0;
  if (option < 0) return DIT_OK;
  if (option == 0) {
    /* Auto also keeps offload's engine and a launched process's collectives out of graphs: the
     * engine loads the next forward's first block behind this one (a graph must leave no copy in
     * flight), and collectives with other processes run between steps. */
    *on = f->ranks == 1 && !f->launched && f->backend_graphs && !f->offload && !f->parked && !f->reuse && !f->profile;
    return DIT_OK;
  }
  if (f->ranks > 1) return DIT_ERR(UNIMPLEMENTED, "--cuda-graph: graphs of multi-rank runs are not built (collectives run between steps)");
  if (f->parked)
    return DIT_ERR(UNIMPLEMENTED, "--cuda-graph: a bundle with an expert swap changes its weights' memory at the switch; run it without graphs");
  if (!f->backend_graphs) return DIT_ERR(UNAVAILABLE, "--cuda-graph: the %s backend has no graphs", f->backend);
  if (f->reuse) return DIT_ERR(UNIMPLEMENTED, "reuse: --cuda-graph (a replayed forward cannot leave out a reused group's steps)");
  *on = !f->profile;
  return DIT_OK;
}

dit_status_t dit_exec_graph_resolve(rank_rt_t *k, int reuse) {
  const dit_runtime_t *o = k->owner;
  const dit_graph_facts_t f = {.ranks = o->n_ranks, .launched = o->process, .backend = k->be->name,
                               .backend_graphs = k->be->capture_begin && k->be->capture_end && k->be->replay,
                               .offload = dit_offload_planned(k->plan), .parked = rank_parked(k), .reuse = reuse,
                               .profile = k->profile != NULL};
  int on = 0;
  DIT_RETURN_IF(dit_exec_graph_decide(o->graph_option, &f, &on));
  k->graph = !on ? 0 : k->graph ? k->graph : 1;
  return DIT_OK;
}

/* Loads rank `rank` of an opened bundle for expert rt->expert: its plan, weights shard and
 * backend memory. `share` (may be NULL) is expert 0's state of the same rank, whose activation
 * arena this one borrows when large enough: the experts never run at the same time. */
static dit_status_t rank_load(rank_rt_t *rt, const dit_runtime_options_t *o, int threads, rank_rt_t *share, const rank_rt_t *lender) {
  const char *expert = rt->mexpert ? rt->m->experts[rt->mexpert].name : "transformer";
  const dit_manifest_rank_t *r0 = dit_manifest_expert_rank(rt->m, rt->mexpert ? expert : NULL, rt->rank);
  if (!r0) return DIT_ERR(NOT_FOUND, "manifest.json: field 'ranks': no entry for rank %d of %s", rt->rank, expert);
  rt->layout = dit_manifest_find_weights(rt->m, r0->weights);
  if (!rt->layout) return DIT_ERR(NOT_FOUND, "manifest.json: rank %d weights blob %s has no layout in 'weights'", rt->rank, r0->weights);
  dit_mapping_t pm;
  DIT_RETURN_IF(dit_bundle_map_blob(rt->bundle, r0->plan, &pm));
  char what[80];
  snprintf(what, sizeof what, "blobs/%.32s (plan of rank %d)", r0->plan, rt->rank);
  dit_status_t s = dit_plan_parse((const char *)pm.data, pm.size, what, &rt->plan);
  if (!s) s = dit_plan_check_bindings(rt->plan, rt->m, rt->layout, what);
  dit_file_unmap(&pm);
  DIT_RETURN_IF(s);
  DIT_RETURN_IF(dit_bundle_map_blob(rt->bundle, r0->weights, &rt->weights_map));
  rt->be = pick_backend(backend_name(rt->m, o));
  if (!rt->be || rt->be->abi_version != DIT_BACKEND_ABI_VERSION) return DIT_ERR(INTERNAL, "backend table version mismatch");
  dit_backend_config_t cfg = {threads, rt->device, rt->m->arch, rt->m->min_driver};
  DIT_RETURN_IF(rt->be->create(&cfg, &rt->be_state));
  const int offload = dit_offload_planned(rt->plan);
  DIT_RETURN_IF(dit_exec_graph_resolve(rt, 0)); /* a refused --cuda-graph before the big allocations */
  if (rt->be->memory_info) {
    /* Predicted peak against what the device has free, before the big allocations. */
    size_t fr = 0, tot = 0;
    DIT_RETURN_IF(rt->be->memory_info(rt->be_state, &fr, &tot));
    uint64_t need = offload ? planned_bytes(rt->plan, rt->m) : rt->m->peak_bytes;
    const uint64_t lent = lent_bytes(rt, lender);
    need = need > lent ? need - lent : 0;
    if (offload && rt->plan->offload.swap.present) {
      /* The pipeline's peak, less what the expert before it holds already. */
      const uint64_t pk = rt->plan->offload.swap.predicted_peak_bytes - dit_offload_overhead(rt->plan);
      const uint64_t held = share && share->be->allocated_bytes ? share->be->allocated_bytes(share->be_state) : 0;
      need = pk > held ? pk - held : 0;
    }
    if (need > fr)
      return DIT_ERR(RESOURCE_EXHAUSTED, "%s: field '%s': the bundle needs %.2f GiB, the device has %.2f GiB free of %.2f GiB",
                     offload ? what : "manifest.json",
                     !offload ? "memory.peak_bytes" : rt->plan->offload.swap.present ? "offload.swap.predicted_peak_bytes" : "offload.predicted_peak_bytes",
                     (double)need / (1 << 30),
                     (double)fr / (1 << 30), (double)tot / (1 << 30));
  }
  rt->bound = calloc(rt->plan->n_values + 1, sizeof *rt->bound);
  rt->io_buf = calloc(rt->plan->n_values + 1, sizeof *rt->io_buf);
  rt->host_out = calloc(rt->plan->n_values + 1, sizeof *rt->host_out);
  rt->step_tensors = calloc(DIT_PLAN_MAX_IN + DIT_PLAN_MAX_OUT, sizeof *rt->step_tensors);
  if (!rt->bound || !rt->io_buf || !rt->host_out || !rt->step_tensors) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (!share) share = (rank_rt_t *)lender;
  if (share && share->arena && share->plan->arena_bytes >= rt->plan->arena_bytes) {
    rt->arena = share->arena;
    rt->arena_borrowed = 1;
  } else {
    DIT_RETURN_IF(rt->be->alloc(rt->be_state, rt->plan->arena_bytes ? rt->plan->arena_bytes : 1, "activation arena", &rt->arena));
  }
  /* The weights shard was left unhashed at open (DIT_BUNDLE_HASH_LATER): hashed here before
   * anything reads it, on a thread of its own beside its upload to a device. */
  weights_check_t wc = {rt->bundle, r0->weights, &rt->weights_map, DIT_OK};
  if (!rt->be->host_memory && !offload) {
    pthread_t th;
    const int threaded = !pthread_create(&th, NULL, check_weights, &wc);
    dit_status_t u = rt->be->alloc(rt->be_state, rt->weights_map.size, "weights", &rt->weights_dev);
    if (!u) u = rt->be->upload(rt->be_state, rt->weights_dev, rt->weights_map.data, rt->weights_map.size);
    if (threaded) pthread_join(th, NULL);
    else check_weights(&wc);
    if (u) dit_status_free(wc.s);
    DIT_RETURN_IF(u);
  } else {
    check_weights(&wc);
  }
  DIT_RETURN_IF(wc.s);
  DIT_RETURN_IF(bind_values(rt, lender));
  const int parked = rank_parked(rt);
  if (offload)
    DIT_RETURN_IF(dit_offload_engine_create_parked(rt->m, rt->plan, rt->layout, rt->be, rt->be_state, rt->weights_map.data,
                                                   rt->weights_map.size, rt->bound, parked, &rt->offload));
  if (offload && o && o->offload_pace_host) DIT_RETURN_IF(dit_offload_engine_pace_host(rt->offload));
  /* A captured graph (--cuda-graph) must leave no copy in flight; DIT_OFFLOAD_ACROSS=0 turns the
   * cross-forward load of block 0 off, to compare. */
  const char *across = getenv("DIT_OFFLOAD_ACROSS");
  if (offload && (rt->graph || (across && !strcmp(across, "0")))) dit_offload_engine_across_forwards(rt->offload, 0);
  if (rt->be->prepare) DIT_RETURN_IF(prepare_backend(rt, parked ? share : NULL));
  DIT_RETURN_IF(dit_exec_alloc_collective_scratch(rt));
  /* Rank = ((cfg lane * cp) + cp rank) * tp + tp rank: a tensor-parallel group is tp
   * consecutive ranks. */
  rt->tp = rt->m->topology.tp;
  if (rt->tp < 1 || rt->tp > 64) return DIT_ERR(UNIMPLEMENTED, "manifest.json: topology.tp = %d: at most 64 supported", rt->tp);
  for (int i = 0; i < rt->tp; i++) rt->tp_group[i] = rt->rank - rt->rank % rt->tp + i;
  rt->cp = rt->m->topology.cp;
  if (rt->cp < 1 || rt->cp > 64) return DIT_ERR(UNIMPLEMENTED, "manifest.json: topology.cp = %d: at most 64 supported", rt->cp);
  const int lane_base = rt->rank / (rt->cp * rt->tp) * rt->cp * rt->tp, tp_rank = rt->rank % rt->tp;
  for (int i = 0; i < rt->cp; i++) rt->cp_group[i] = lane_base + i * rt->tp + tp_rank;
  return DIT_OK;
}

/* What rank i of this process holds now over all its experts: backends count what they
 * allocate, the offload engines what they gave back. */
static uint64_t rank_current(const dit_runtime_t *rt, int i) {
  uint64_t a = 0;
  for (int e = 0; e < rt->n_experts; e++) {
    const rank_rt_t *r = &rt->expert_ranks[e][i];
    if (!r->be || !r->be->allocated_bytes) return 0;
    a += r->be->allocated_bytes(r->be_state);
    if (r->offload) a -= dit_offload_engine_released(r->offload);
  }
  return a;
}

static void note_peak(dit_runtime_t *rt, int i) {
  const uint64_t a = rank_current(rt, i);
  if (a > rt->mem_peak[i]) rt->mem_peak[i] = a;
}

/* DIT_FAIL_STEP=RANK:STEP makes that rank fail when it reaches that step of a forward, and
 * RANK:STEP:die makes its process exit on the spot (no cleanup, as a crash would): test knobs
 * for the failure paths (every other rank must stop with an error, none may hang). */
static long fail_step_of(int rank, int *die) {
  const char *f = getenv("DIT_FAIL_STEP");
  int r = -1, n = 0;
  long step = -1;
  *die = 0;
  if (!f || sscanf(f, "%d:%ld%n", &r, &step, &n) != 2 || r != rank || step < 0) return -1;
  *die = !strcmp(f + n, ":die");
  return step;
}

dit_status_t dit_runtime_load(const char *bundle_dir, const dit_runtime_options_t *o,
                              dit_runtime_t **out) {
  *out = NULL;
  dit_runtime_t *rt = calloc(1, sizeof *rt);
  if (!rt) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  dit_status_t s = dit_bundle_open(bundle_dir, DIT_BUNDLE_HASH_BLOBS | DIT_BUNDLE_HASH_LATER, &rt->bundle);
  if (!s) {
    rt->m = dit_bundle_manifest(rt->bundle);
    s = check_fitness(rt, o);
  }
  rt->process = !s && o && o->launch && o->launch->world > 1;
  if (!s) {
    rt->n_ranks = rt->process ? 1 : rt->m->topology.world;
    rt->n_experts = rt->m->n_experts == 2 ? 2 : 1;
    if (o && o->only_expert && rt->n_experts == 2) {
      if (!strcmp(o->only_expert, "transformer")) rt->only = 0;
      else if (!strcmp(o->only_expert, rt->m->experts[1].name)) rt->only = 1;
      else s = DIT_ERR(NOT_FOUND, "expert %s: the bundle has the experts transformer and %s", o->only_expert, rt->m->experts[1].name);
      rt->n_experts = 1;
    }
    for (int e = 0; e < rt->n_experts; e++)
      if (!(rt->expert_ranks[e] = calloc((size_t)rt->n_ranks, sizeof *rt->expert_ranks[e]))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    rt->ranks = rt->expert_ranks[0];
  }
  if (!s && rt->process) s = dit_tcomm_create(o->launch, 60000, &rt->tcomm);
  if (!s && rt->n_ranks > 1) s = dit_comm_create_local(rt->n_ranks, 600000, &rt->comm);
  rt->graph_option = o ? o->graph : 0;
  /* The CPU threads are shared out between the ranks. */
  int threads = o && o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  int per_rank = rt->n_ranks > 0 && threads / rt->n_ranks > 0 ? threads / rt->n_ranks : 1;
  /* Devices: a launched process takes its local rank's GPU; the ranks of one process go
   * round-robin over --devices GPUs from --device. */
  int proc_device = o ? o->device : 0;
  const int spread = o && o->devices > 1 ? o->devices : 1;
  if (!s && rt->process && strcmp(backend_name(rt->m, o), "cpu")) {
    const dit_backend_vtable_t *be = pick_backend(backend_name(rt->m, o));
    int count = 0;
    s = be && be->device_count ? be->device_count(&count) : DIT_ERR(UNIMPLEMENTED, "backend without device enumeration");
    if (!s) s = dit_launch_pick_device(o->launch, count, getenv("CUDA_VISIBLE_DEVICES"), &proc_device);
  }
  /* A lender: one rank of the same backend (checked against this bundle's once its backend is
   * picked), in this process. */
  const rank_rt_t *lender = NULL;
  if (!s && o && o->borrow) {
    if (o->borrow->n_ranks != 1 || o->borrow->process || rt->n_ranks != 1 || rt->n_experts != 1)
      s = DIT_ERR(INVALID_ARGUMENT, "%s: borrowing memory from another runtime takes two bundles of one rank and one expert", bundle_dir);
    else if (o->borrow->ranks[0].be != pick_backend(backend_name(rt->m, o)) || o->borrow->ranks[0].device != (o ? o->device : 0))
      s = DIT_ERR(INVALID_ARGUMENT, "%s: the runtime it borrows memory from runs on another backend or device", bundle_dir);
    else lender = &o->borrow->ranks[0];
  }
  /* Every expert's ranks, each with its own plan, weights and backend state, from the one
   * verified open of the bundle; communicators are set up once, on the first expert's. */
  for (int e = 0; !s && e < rt->n_experts; e++) {
    rt->ranks = rt->expert_ranks[e];
    for (int r = 0; !s && r < rt->n_ranks; r++) {
      rank_rt_t *k = &rt->ranks[r];
      k->expert = e;
      k->mexpert = e + rt->only;
      k->rank = rt->process ? o->launch->rank : r;
      k->device = rt->process ? proc_device : (o ? o->device : 0) + r % spread;
      k->owner = rt;
      k->fail_step = fail_step_of(k->rank, &k->fail_die);
      k->tcomm = rt->tcomm;
      k->stage = o && o->stage_collectives;
      k->bundle = rt->bundle;
      k->m = rt->m;
      s = rank_load(k, o, rt->n_ranks > 1 ? per_rank : (o ? o->threads : 0), e ? &rt->expert_ranks[0][r] : NULL, lender);
    }
    if (!s && e == 0) s = dit_exec_nccl_setup(rt, o);
    for (int r = 0; !s && e > 0 && r < rt->n_ranks; r++) {
      rank_rt_t *k = &rt->ranks[r];
      const rank_rt_t *first = &rt->expert_ranks[0][r];
      k->nworld = first->nworld;
      memcpy(k->ngroup, first->ngroup, sizeof k->ngroup);
      k->comms_borrowed = 1;
    }
    if (!s) s = dit_exec_collectives_setup(rt, o);
  }
  rt->ranks = rt->expert_ranks[0];
  if (!s && !(rt->mem_peak = calloc((size_t)rt->n_ranks, sizeof *rt->mem_peak))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  for (int r = 0; !s && r < rt->n_ranks; r++) note_peak(rt, r);
  if (s) {
    dit_runtime_destroy(rt);
    return dit_status_annotate(s, "%s", bundle_dir);
  }
  *out = rt;
  return DIT_OK;
}

static const dit_plan_value_t *find_io(const rank_rt_t *rt, dit_storage_t kind, const char *name, size_t *index) {
  for (size_t i = 0; i < rt->plan->n_values; i++) {
    const dit_plan_value_t *v = &rt->plan->values[i];
    if (v->storage == kind && !strcmp(v->ref, name)) {
      *index = i;
      return v;
    }
  }
  return NULL;
}

static void format_dims(char *buf, size_t cap, const int64_t *d, int rank) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, cap - n, "[");
  for (int i = 0; i < rank && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", d[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* A key_bound step counts its mask's valid prefix and reads nothing after the first zero, so a
 * mask with a nonzero there (not a prefix then padding) would be cut short silently; it is
 * refused here, on the host, instead. */
dit_status_t dit_exec_check_mask_input(const dit_plan_t *plan, size_t value, const char *name, const dit_tensor_t *src) {
  int mask = 0;
  for (size_t i = 0; i < plan->n_steps && !mask; i++)
    mask = plan->steps[i].kind == DIT_OP_KEY_BOUND && plan->steps[i].in[0] == (int32_t)value;
  if (!mask || src->rank != 2) return DIT_OK;
  const int64_t L = src->dims[1];
  const size_t row = (size_t)L * dit_dtype_size(src->dtype);
  for (int64_t b = 0; b < src->dims[0]; b++) {
    int64_t stray;
    const int64_t len = dit_mask_prefix((const char *)src->data + (size_t)b * row, src->dtype, L, &stray);
    if (stray >= 0)
      return DIT_ERR(INVALID_ARGUMENT,
                     "input '%s': batch item %" PRId64 " has a nonzero at position %" PRId64 " after a zero at %" PRId64
                     "; a mask must be a valid prefix then padding",
                     name, b, stray, len);
  }
  return DIT_OK;
}

/* A token_rows step reads one value of every run of `group` tokens (a latent frame's timestep),
 * so a run whose values differ would be cut to its first silently; it is refused here, on the
 * host, naming the item, the token and the run. */
dit_status_t dit_exec_check_rows_input(const dit_plan_t *plan, size_t value, const char *name, const dit_tensor_t *src) {
  int64_t group = 0;
  for (size_t i = 0; i < plan->n_steps && !group; i++)
    if (plan->steps[i].kind == DIT_OP_TOKEN_ROWS && plan->steps[i].in[0] == (int32_t)value)
      DIT_RETURN_IF(dit_attrs_get_int(&plan->steps[i].attrs, "token_rows", "group", &group));
  if (group <= 1 || src->rank != 2) return DIT_OK;
  const size_t es = dit_dtype_size(src->dtype);
  const char *d = src->data;
  for (int64_t b = 0; b < src->dims[0]; b++)
    for (int64_t t = 0; t < src->dims[1]; t++) {
      const int64_t first = t - t % group;
      if (memcmp(d + ((size_t)(b * src->dims[1] + t)) * es, d + ((size_t)(b * src->dims[1] + first)) * es, es))
        return DIT_ERR(INVALID_ARGUMENT,
                       "input '%s': batch item %" PRId64 ", token %" PRId64 " differs from token %" PRId64 ", the first of its run of %" PRId64
                       " (tokens %" PRId64 "..%" PRId64 ", one latent frame); this bundle reads one value a run, as diffusers' pipelines "
                       "give every token of a frame the same timestep",
                       name, b, t, first, group, first, first + group - 1);
    }
  return DIT_OK;
}

/* n elements of src into dst of integer dtype dt (i32 or i64): integers, or floats holding
 * integers, in dt's range. */
static dit_status_t convert_int_input(const char *name, void *dst, dit_dtype_t dt, const dit_tensor_t *src, size_t n) {
  const double lim = dt == DIT_I32 ? 2147483648.0 : 9223372036854775808.0; /* 2^31, 2^63 */
  for (size_t i = 0; i < n; i++) {
    double x;
    if (src->dtype == DIT_I64) {
      x = (double)((const int64_t *)src->data)[i];
      if (dt == DIT_I64) { /* exact, whatever double would round */
        ((int64_t *)dst)[i] = ((const int64_t *)src->data)[i];
        continue;
      }
    } else if (src->dtype == DIT_I32) {
      x = ((const int32_t *)src->data)[i];
    } else if (src->dtype == DIT_U8) {
      x = ((const uint8_t *)src->data)[i];
    } else if (src->dtype == DIT_I8) {
      x = ((const int8_t *)src->data)[i];
    } else {
      float f;
      if (dit_convert(&f, DIT_F32, (const char *)src->data + i * dit_dtype_size(src->dtype), src->dtype, 1))
        return DIT_ERR(INVALID_ARGUMENT, "input '%s': cannot convert %s to %s", name, dit_dtype_name(src->dtype), dit_dtype_name(dt));
      x = f;
    }
    if (!(x >= -lim && x < lim) || x != floor(x))
      return DIT_ERR(INVALID_ARGUMENT, "input '%s': element %zu is %g, expected an integer in the range of %s", name, i, x,
                     dit_dtype_name(dt));
    if (dt == DIT_I32) ((int32_t *)dst)[i] = (int32_t)x;
    else ((int64_t *)dst)[i] = (int64_t)x;
  }
  return DIT_OK;
}

/* `kind` ("input", "output") `name`'s shape against the plan's, named in the error. */
static dit_status_t check_shape(const dit_plan_value_t *v, const char *kind, const char *name, const dit_tensor_t *t) {
  int same = t->rank == v->rank;
  for (int i = 0; same && i < v->rank; i++) same = t->dims[i] == v->dims[i];
  if (same) return DIT_OK;
  char want[128], got[128];
  format_dims(want, sizeof want, v->dims, v->rank);
  format_dims(got, sizeof got, t->dims, t->rank);
  return DIT_ERR(INVALID_ARGUMENT, "%s '%s': shape %s, the bundle expects %s", kind, name, got, want);
}

static dit_status_t rank_set_input(rank_rt_t *rt, const char *name, const dit_tensor_t *src) {
  size_t idx;
  const dit_plan_value_t *v = find_io(rt, DIT_STORAGE_INPUT, name, &idx);
  if (!v) return DIT_ERR(NOT_FOUND, "input '%s': the bundle has no such input", name);
  DIT_RETURN_IF(check_shape(v, "input", name, src));
  DIT_RETURN_IF(dit_exec_check_mask_input(rt->plan, idx, name, src));
  DIT_RETURN_IF(dit_exec_check_rows_input(rt->plan, idx, name, src));
  size_t n = (size_t)dit_tensor_numel(src);
  if (v->dtype == DIT_I32 || v->dtype == DIT_I64) {
    void *buf = rt->be->host_memory ? rt->bound[idx].data : malloc(v->nbytes + 1);
    if (!buf) return DIT_ERR(RESOURCE_EXHAUSTED, "input '%s': out of memory", name);
    dit_status_t s = convert_int_input(name, buf, v->dtype, src, n);
    if (!rt->be->host_memory) {
      if (!s) s = rt->be->upload(rt->be_state, rt->bound[idx].data, buf, v->nbytes);
      free(buf);
    }
    return s;
  }
  void *stage = NULL;
  const void *from = src->data;
  dit_dtype_t from_t = src->dtype;
  if (src->dtype == DIT_I64 || src->dtype == DIT_I32 || src->dtype == DIT_U8 || src->dtype == DIT_I8) {
    /* Timesteps arrive as integers from diffusers' schedulers, masks as integers or bools; the
     * model reads floats. */
    float *f = malloc(n * sizeof *f + 1);
    if (!f) return DIT_ERR(RESOURCE_EXHAUSTED, "input '%s': out of memory", name);
    for (size_t i = 0; i < n; i++)
      f[i] = src->dtype == DIT_I64 ? (float)((const int64_t *)src->data)[i]
             : src->dtype == DIT_I32 ? (float)((const int32_t *)src->data)[i]
             : src->dtype == DIT_I8  ? (float)((const int8_t *)src->data)[i]
                                     : (float)((const uint8_t *)src->data)[i];
    stage = f;
    from = f;
    from_t = DIT_F32;
  }
  dit_status_t s = DIT_OK;
  if (rt->be->host_memory) {
    if (dit_convert(rt->bound[idx].data, v->dtype, from, from_t, n))
      s = DIT_ERR(INVALID_ARGUMENT, "input '%s': cannot convert %s to %s", name, dit_dtype_name(src->dtype), dit_dtype_name(v->dtype));
  } else if (from_t == v->dtype) { /* nothing to convert: straight from the caller's memory */
    s = rt->be->upload(rt->be_state, rt->bound[idx].data, from, v->nbytes);
  } else {
    void *tmp = malloc(v->nbytes + 1);
    if (!tmp) s = DIT_ERR(RESOURCE_EXHAUSTED, "input '%s': out of memory", name);
    else if (dit_convert(tmp, v->dtype, from, from_t, n))
      s = DIT_ERR(INVALID_ARGUMENT, "input '%s': cannot convert %s to %s", name, dit_dtype_name(src->dtype), dit_dtype_name(v->dtype));
    else s = rt->be->upload(rt->be_state, rt->bound[idx].data, tmp, v->nbytes);
    free(tmp);
  }
  free(stage);
  return s;
}

typedef struct rank_job {
  dit_runtime_t *rt;
  int rank;
  dit_rank_fn fn;
  void *arg;
  dit_status_t status;
} rank_job_t;

static void *rank_thread(void *p) {
  rank_job_t *j = p;
  j->status = j->fn(j->rt, &j->rt->ranks[j->rank], j->arg);
  return NULL;
}

dit_status_t dit_exec_run_ranks(dit_runtime_t *rt, dit_rank_fn fn, void *arg) {
  if (rt->n_ranks == 1) return fn(rt, &rt->ranks[0], arg);
  rank_job_t *jobs = calloc((size_t)rt->n_ranks, sizeof *jobs);
  pthread_t *th = calloc((size_t)rt->n_ranks, sizeof *th);
  if (!jobs || !th) {
    free(jobs);
    free(th);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  int started = 0;
  dit_status_t s = DIT_OK;
  for (int r = 0; r < rt->n_ranks; r++) {
    jobs[r] = (rank_job_t){rt, r, fn, arg, DIT_OK};
    if (pthread_create(&th[r], NULL, rank_thread, &jobs[r]) != 0) {
      s = DIT_ERR(RESOURCE_EXHAUSTED, "cannot start the thread of rank %d", r);
      if (rt->comm) dit_comm_abort(rt->comm, r, "a rank thread could not start");
      if (rt->nccl) dit_exec_nccl_abort_all(rt, r, "a rank thread could not start");
      break;
    }
    started++;
  }
  for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < started; r++) {
    if (!s && jobs[r].status && dit_status_code(jobs[r].status) != DIT_CODE_ABORTED) {
      s = dit_status_annotate(jobs[r].status, "rank %d", r);
      jobs[r].status = DIT_OK;
    }
  }
  for (int r = 0; r < started; r++) {
    if (!s && jobs[r].status) s = dit_status_annotate(jobs[r].status, "rank %d", r);
    else dit_status_free(jobs[r].status);
  }
  free(jobs);
  free(th);
  return s;
}

static dit_status_t rank_step(rank_rt_t *rt, dit_comm_t *comm, size_t i) {
  const dit_plan_step_t *st = &rt->plan->steps[i];
  DIT_RETURN_IF(dit_exec_collectives_before_step(rt, st));
  if (dit_op_is_collective(st->kind)) return dit_exec_run_collective(rt, comm, st);
  dit_tensor_t *ins = rt->step_tensors, *outs = rt->step_tensors + DIT_PLAN_MAX_IN;
  for (int k = 0; k < st->n_in; k++) ins[k] = rt->bound[st->in[k]];
  for (int k = 0; k < st->n_out; k++) outs[k] = rt->bound[st->out[k]];
  if (dit_plan_step_is_view(rt->plan, st)) return DIT_OK; /* a view (passes/memplan.c): its inputs hold its bytes */
  return rt->be->run_step(rt->be_state, i, st, ins, outs);
}

static dit_status_t rank_forward_steps(rank_rt_t *rt, dit_comm_t *comm);

/* Records the forward's steps as a graph (nothing runs while capturing). */
static dit_status_t capture_forward(rank_rt_t *rt, dit_comm_t *comm) {
  DIT_RETURN_IF(rt->be->capture_begin(rt->be_state));
  dit_status_t s = rank_forward_steps(rt, comm);
  dit_status_t e = rt->be->capture_end(rt->be_state);
  if (s) {
    dit_status_free(e);
    return dit_status_annotate(s, "capturing the forward");
  }
  return e;
}

static dit_status_t rank_forward(rank_rt_t *rt, dit_comm_t *comm) {
  if (rt->profile) return rank_forward_steps(rt, comm); /* step by step, never a graph */
  if (rt->graph == 1) {
    /* Record once; every forward, the first too, replays the graph. A capture that fails under
     * auto leaves this forward and the later ones step by step: the graph was the runtime's
     * choice, and nothing ran while capturing. */
    dit_status_t s = capture_forward(rt, comm);
    if (s && rt->owner->graph_option > 0) return s;
    rt->graph = s ? 0 : 2;
    dit_status_free(s);
  }
  if (rt->graph == 2) {
    DIT_RETURN_IF(rt->be->replay(rt->be_state));
    return rt->be->synchronize(rt->be_state);
  }
  return rank_forward_steps(rt, comm);
}

/* A rank failed for its own reason (not because another aborted): every collective that may
 * wait for it stops (this process's other ranks, NCCL, the other processes), so no rank hangs. */
static void rank_failed(rank_rt_t *rt, dit_comm_t *comm, dit_status_t s) {
  if (!s || dit_status_code(s) == DIT_CODE_ABORTED) return;
  if (comm) dit_comm_abort(comm, rt->rank, dit_status_message(s));
  if (rt->owner->nccl) dit_exec_nccl_abort_all(rt->owner, rt->rank, dit_status_message(s));
  if (rt->tcomm) {
    dit_tcomm_abort(rt->tcomm);
    dit_tcomm_report_failure(rt->tcomm, dit_status_message(s));
  }
}

/* The incoming expert's state of this rank while a swap loads it during this forward, with
 * how many chunks to load after each block; NULL when none. Starts the swap (allocates its
 * resident set) on the first forward of its window. */
static dit_status_t swap_target(rank_rt_t *rt, rank_rt_t **out, uint32_t *per_block) {
  *out = NULL;
  dit_runtime_t *o = rt->owner;
  if (o->swap_left <= 0 || o->swap_next == rt->expert || o->swap_next < 0 || o->swap_next >= o->n_experts) return DIT_OK;
  const int idx = (int)(rt - o->expert_ranks[rt->expert]);
  rank_rt_t *in = &o->expert_ranks[o->swap_next][idx];
  const dit_plan_swap_t *w = &in->plan->offload.swap;
  if (!in->offload || !w->present || !dit_offload_engine_parked(in->offload) || (uint32_t)o->swap_left > w->forwards) return DIT_OK;
  if (dit_offload_engine_parked(in->offload) == 1) {
    DIT_RETURN_IF(dit_offload_engine_unpark_begin(in->offload, w->chunk_bytes));
    note_peak(o, idx);
  }
  /* The plan's pace, or faster when fewer forwards are left than it planned for. */
  uint32_t left = 0;
  DIT_RETURN_IF(dit_offload_engine_unpark_copy(in->offload, 0, NULL, NULL, &left));
  const uint64_t boundaries = (uint64_t)o->swap_left * (rt->plan->offload.n_blocks ? rt->plan->offload.n_blocks : 1);
  const uint64_t need = (left + boundaries - 1) / boundaries;
  *per_block = need > w->chunks_per_block ? (uint32_t)need : w->chunks_per_block;
  if (left) *out = in;
  if (left && rt->rank == o->expert_ranks[0][0].rank) o->swap_stats.forwards++;
  return DIT_OK;
}

/* In-flight step timing (rank_rt_t.profile_in_flight): event EV_FIRST marked before the first
 * step of a window, EV_FIRST + 1 + j after its j-th step; at the window's end the queue is
 * drained and the times read, and the next window starts after that drain. */
enum { EV_FIRST = DIT_BACKEND_TIMED_EVENTS, EV_WINDOW = DIT_BACKEND_MAX_EVENTS - DIT_BACKEND_TIMED_EVENTS - 1 };

static dit_status_t in_flight_flush(rank_rt_t *rt, const size_t *win, int *n) {
  if (!*n) return DIT_OK;
  DIT_RETURN_IF(rt->be->synchronize(rt->be_state));
  for (int j = 0; j < *n; j++) {
    double ms = 0;
    DIT_RETURN_IF(rt->be->elapsed_ms(rt->be_state, EV_FIRST + j, EV_FIRST + 1 + j, &ms));
    rt->profile[rt->plan->steps[win[j]].kind] += ms / 1e3;
    if (rt->profile_steps) rt->profile_steps[win[j]] += ms / 1e3;
  }
  *n = 0;
  return DIT_OK;
}

static dit_status_t rank_forward_steps(rank_rt_t *rt, dit_comm_t *comm) {
  const dit_plan_t *p = rt->plan;
  const int in_flight = rt->profile && rt->profile_in_flight;
  size_t win[EV_WINDOW];
  int n_win = 0;
  rank_rt_t *incoming = NULL;
  uint32_t per_block = 0;
  DIT_RETURN_IF(swap_target(rt, &incoming, &per_block));
  dit_reuse_forward_begin(rt);
  for (size_t i = 0; i < p->n_steps; i++) {
    int skip = 0;
    dit_status_t rs = dit_reuse_skip(rt, i, &skip);
    if (rs) {
      rank_failed(rt, comm, rs);
      return dit_status_annotate(rs, "step %zu", i);
    }
    if (skip) continue;
    if ((long)i == rt->fail_step) {
      if (rt->fail_die) _exit(3);
      dit_status_t f = DIT_ERR(INTERNAL, "injected failure (DIT_FAIL_STEP=%d:%zu)", rt->rank, i);
      rank_failed(rt, comm, f);
      return dit_status_annotate(f, "step %zu", i);
    }
    dit_status_t s = rt->offload ? dit_offload_before_step(rt->offload, i) : DIT_OK;
    const double t0 = rt->profile ? dit_now_s() : 0;
    if (!s && in_flight && !n_win) s = rt->be->mark(rt->be_state, 0, EV_FIRST);
    if (!s) s = rank_step(rt, comm, i);
    if (!s && in_flight) {
      win[n_win] = i;
      s = rt->be->mark(rt->be_state, 0, EV_FIRST + 1 + n_win++);
      if (!s && n_win == EV_WINDOW) s = in_flight_flush(rt, win, &n_win);
    } else if (!s && rt->profile) { /* each step drained before the next, timed by kind */
      s = rt->be->synchronize(rt->be_state);
      const double dt = dit_now_s() - t0;
      rt->profile[p->steps[i].kind] += dt;
      if (rt->profile_steps) rt->profile_steps[i] += dt;
    }
    if (!s && rt->reuse) s = dit_reuse_after_step(rt, i);
    if (!s && rt->offload) s = dit_offload_after_step(rt->offload, i, dit_exec_collective_done_event(rt, &p->steps[i]));
    if (!s && incoming && p->steps[i].block >= 0 && (i + 1 == p->n_steps || p->steps[i + 1].block != p->steps[i].block)) {
      /* Between blocks: the next share of the incoming expert's resident set, on this
       * expert's copy queue behind its own prefetch. */
      uint32_t before = 0, after = 0;
      s = dit_offload_engine_unpark_copy(incoming->offload, 0, NULL, NULL, &before);
      if (!s) s = dit_offload_engine_unpark_copy(incoming->offload, per_block, rt->be, rt->be_state, &after);
      if (!s && rt->rank == rt->owner->expert_ranks[0][0].rank) rt->owner->swap_stats.chunks_before += before - after;
    }
    if (s) {
      s = dit_status_annotate(s, "step %zu (%s, block %d, '%s')", i, dit_op_info(p->steps[i].kind)->name, p->steps[i].block,
                              p->values[p->steps[i].out[0]].name);
      rank_failed(rt, comm, s);
      return s;
    }
  }
  if (rt->graph == 1) return DIT_OK; /* nothing runs while capturing */
  dit_status_t s = in_flight ? in_flight_flush(rt, win, &n_win) : DIT_OK;
  if (!s) s = rt->be->synchronize(rt->be_state);
  if (!s) s = dit_reuse_forward_end(rt);
  dit_exec_collectives_settled(rt);
  rank_failed(rt, comm, s); /* a queued collective may have failed: the others must not wait for it */
  return rt->owner->nccl ? dit_exec_nccl_after_sync(rt->owner, s) : s;
}

int dit_runtime_cfg_lanes(const dit_runtime_t *rt) { return rt->m->topology.cfg; }

/* Ranks are ordered ((cfg lane * cp) + cp rank) * tp + tp rank. */
static int lane_size(const dit_runtime_t *rt) { return rt->m->topology.cp * rt->m->topology.tp; }

dit_status_t dit_runtime_set_input_lane(dit_runtime_t *rt, int lane, const char *name, const dit_tensor_t *src) {
  if (lane < 0 || lane >= rt->m->topology.cfg)
    return DIT_ERR(OUT_OF_RANGE, "cfg lane %d: the bundle has %d", lane, rt->m->topology.cfg);
  int per = lane_size(rt);
  for (int r = 0; r < rt->n_ranks; r++)
    if (rt->ranks[r].rank / per == lane) DIT_RETURN_IF(rank_set_input(&rt->ranks[r], name, src));
  return DIT_OK;
}

/* A bundle with per-token timesteps (Wan2.2 TI2V) takes timestep [B, T]; a caller's [B] means
 * the same timestep for every token, as diffusers' pipeline expands it. *out is NULL when src is
 * used as given, else a [B, T] copy the caller frees; any other shape is refused naming both
 * accepted ones. */
static dit_status_t broadcast_timestep(const dit_runtime_t *rt, const char *name, const dit_tensor_t *src, void **out,
                                       dit_tensor_t *view) {
  *out = NULL;
  size_t idx;
  const dit_plan_value_t *v = rt->n_ranks > 0 ? find_io(&rt->ranks[0], DIT_STORAGE_INPUT, name, &idx) : NULL;
  if (!v || strcmp(name, "timestep") || v->rank != 2) return DIT_OK;
  if (src->rank == 2 && src->dims[0] == v->dims[0] && src->dims[1] == v->dims[1]) return DIT_OK;
  if (src->rank != 1 || src->dims[0] != v->dims[0]) {
    char got[128];
    format_dims(got, sizeof got, src->dims, src->rank);
    return DIT_ERR(INVALID_ARGUMENT, "input '%s': shape %s, the bundle expects [%" PRId64 ",%" PRId64 "] (one timestep per token) or [%" PRId64
                   "] (one per batch item, repeated over the %" PRId64 " tokens)",
                   name, got, v->dims[0], v->dims[1], v->dims[0], v->dims[1]);
  }
  const size_t es = dit_dtype_size(src->dtype), tokens = (size_t)v->dims[1];
  char *buf = malloc((size_t)v->dims[0] * tokens * es + 1);
  if (!buf) return DIT_ERR(RESOURCE_EXHAUSTED, "input '%s': out of memory", name);
  for (int64_t b = 0; b < v->dims[0]; b++)
    for (size_t t = 0; t < tokens; t++) memcpy(buf + ((size_t)b * tokens + t) * es, (const char *)src->data + (size_t)b * es, es);
  *view = (dit_tensor_t){buf, src->dtype, 2, {v->dims[0], v->dims[1]}};
  *out = buf;
  return DIT_OK;
}

dit_status_t dit_runtime_set_input(dit_runtime_t *rt, const char *name, const dit_tensor_t *src) {
  void *expanded;
  dit_tensor_t view;
  DIT_RETURN_IF(broadcast_timestep(rt, name, src, &expanded, &view));
  if (expanded) src = &view;
  /* Every rank sees the whole input; each takes the part its plan reads. */
  dit_status_t s = DIT_OK;
  for (int r = 0; !s && r < rt->n_ranks; r++) s = rank_set_input(&rt->ranks[r], name, src);
  free(expanded);
  return s;
}

static dit_status_t rank_forward_job(dit_runtime_t *rt, rank_rt_t *k, void *arg) {
  (void)arg;
  return rank_forward(k, rt->n_ranks > 1 ? rt->comm : NULL);
}

static dit_status_t forward_profiled(dit_runtime_t *rt, int in_flight, double *seconds, double *step_seconds) {
  dit_status_t s = DIT_OK;
  for (int r = 0; !s && r < rt->n_ranks; r++) {
    rank_rt_t *k = &rt->ranks[r];
    if (in_flight && k->offload)
      return DIT_ERR(FAILED_PRECONDITION, "in-flight step times: the bundle streams weights, and its offload engine's stall timing holds the "
                     "timed events; time its steps one by one instead");
    if (in_flight && (!k->be->mark || !k->be->elapsed_ms))
      return DIT_ERR(UNIMPLEMENTED, "in-flight step times: the %s backend has no timed events", k->be->name);
  }
  for (int r = 0; !s && r < rt->n_ranks; r++) {
    rt->ranks[r].profile_in_flight = in_flight;
    if (!(rt->ranks[r].profile = calloc(DIT_OP_COUNT, sizeof(double)))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s && step_seconds) {
    memset(step_seconds, 0, rt->ranks[0].plan->n_steps * sizeof *step_seconds);
    rt->ranks[0].profile_steps = step_seconds;
  }
  if (!s) s = dit_runtime_forward(rt);
  if (!s) memcpy(seconds, rt->ranks[0].profile, DIT_OP_COUNT * sizeof(double));
  rt->ranks[0].profile_steps = NULL;
  for (int r = 0; r < rt->n_ranks; r++) {
    free(rt->ranks[r].profile);
    rt->ranks[r].profile = NULL;
    rt->ranks[r].profile_in_flight = 0;
  }
  return s;
}

dit_status_t dit_runtime_forward_profiled(dit_runtime_t *rt, double *seconds, double *step_seconds) {
  return forward_profiled(rt, 0, seconds, step_seconds);
}

dit_status_t dit_runtime_forward_profiled_in_flight(dit_runtime_t *rt, double *seconds, double *step_seconds) {
  return forward_profiled(rt, 1, seconds, step_seconds);
}

dit_status_t dit_runtime_forward(dit_runtime_t *rt) {
  dit_status_t s = dit_exec_run_ranks(rt, rank_forward_job, NULL);
  dit_reuse_forward_done(rt);
  if (rt->swap_left > 0) rt->swap_left--;
  return s && rt->process ? dit_status_annotate(s, "rank %d", rt->ranks[0].rank) : s;
}

dit_status_t dit_runtime_output(dit_runtime_t *rt, const char *name, dit_tensor_t *out_view) {
  return dit_runtime_output_lane(rt, 0, name, out_view);
}

int dit_runtime_output_is_copy(const dit_runtime_t *rt) { return rt->process || !rt->ranks[0].be->host_memory; }

dit_status_t dit_runtime_output_lane(dit_runtime_t *rt, int lane, const char *name, dit_tensor_t *out_view) {
  if (lane < 0 || lane >= rt->m->topology.cfg)
    return DIT_ERR(OUT_OF_RANGE, "cfg lane %d: the bundle has %d", lane, rt->m->topology.cfg);
  /* After the last collective every rank of a lane holds its whole output; the lane's first
   * rank answers. */
  const int root = lane * lane_size(rt);
  if (rt->process) {
    /* The lane's first rank holds it; every process gets it, so every process calls this
     * in the same order. */
    rank_rt_t *me = &rt->ranks[0];
    size_t idx;
    const dit_plan_value_t *v = find_io(me, DIT_STORAGE_OUTPUT, name, &idx);
    if (!v) return DIT_ERR(NOT_FOUND, "output '%s': the bundle has no such output", name);
    if (!me->host_out[idx] && !(me->host_out[idx] = malloc(v->nbytes ? v->nbytes : 1)))
      return DIT_ERR(RESOURCE_EXHAUSTED, "output '%s': out of memory", name);
    if (me->rank == root) DIT_RETURN_IF(me->be->download(me->be_state, me->host_out[idx], me->bound[idx].data, v->nbytes));
    int world[64];
    for (int r = 0; r < rt->m->topology.world && r < 64; r++) world[r] = r;
    DIT_RETURN_IF(dit_tcomm_broadcast(rt->tcomm, world, rt->m->topology.world, root, me->host_out[idx], v->nbytes));
    *out_view = me->bound[idx];
    out_view->data = me->host_out[idx];
    return DIT_OK;
  }
  rank_rt_t *r0 = &rt->ranks[root];
  size_t idx;
  const dit_plan_value_t *v = find_io(r0, DIT_STORAGE_OUTPUT, name, &idx);
  if (!v) return DIT_ERR(NOT_FOUND, "output '%s': the bundle has no such output", name);
  *out_view = r0->bound[idx];
  if (!r0->be->host_memory) {
    DIT_RETURN_IF(r0->be->download(r0->be_state, r0->host_out[idx], r0->bound[idx].data, v->nbytes));
    out_view->data = r0->host_out[idx];
  }
  return DIT_OK;
}

/* Device binding needs the io buffers of the one rank this process runs, on a backend with
 * device memory that can work on a caller's queue. */
static dit_status_t device_rank(dit_runtime_t *rt, const char *kind, const char *name, rank_rt_t **out) {
  if (rt->n_ranks != 1 || rt->process)
    return DIT_ERR(UNIMPLEMENTED, "%s '%s': device memory binds to a bundle of one rank, this one has %d; bind host memory", kind, name,
                   rt->m->topology.world);
  rank_rt_t *k = &rt->ranks[0];
  if (k->be->host_memory || !k->be->external_copy || !k->be->external_join)
    return DIT_ERR(INVALID_ARGUMENT, "%s '%s': device memory given, the bundle runs on the %s backend, which takes host memory", kind, name,
                   k->be->name);
  *out = k;
  return DIT_OK;
}

/* Device memory is copied as is: a conversion would need a kernel of its own per dtype pair,
 * and the caller's framework converts on its device for free. */
static dit_status_t check_device_dtype(const dit_plan_value_t *v, const char *kind, const char *name, const dit_tensor_t *t) {
  if (t->dtype == v->dtype) return DIT_OK;
  return DIT_ERR(INVALID_ARGUMENT, "%s '%s': dtype %s in device memory, the bundle's is %s (device memory is copied without conversion)", kind,
                 name, dit_dtype_name(t->dtype), dit_dtype_name(v->dtype));
}

/* The rank and plan value a device input `name` is copied to, after checking src against it. */
static dit_status_t device_input(dit_runtime_t *rt, const char *name, const dit_tensor_t *src, rank_rt_t **k, size_t *idx,
                                 const dit_plan_value_t **v) {
  DIT_RETURN_IF(device_rank(rt, "input", name, k));
  if (!(*v = find_io(*k, DIT_STORAGE_INPUT, name, idx))) return DIT_ERR(NOT_FOUND, "input '%s': the bundle has no such input", name);
  DIT_RETURN_IF(check_shape(*v, "input", name, src));
  return check_device_dtype(*v, "input", name, src);
}

dit_status_t dit_runtime_check_input_device(dit_runtime_t *rt, const char *name, const dit_tensor_t *src) {
  rank_rt_t *k = NULL;
  size_t idx = 0;
  const dit_plan_value_t *v;
  return device_input(rt, name, src, &k, &idx, &v);
}

dit_status_t dit_runtime_set_input_device(dit_runtime_t *rt, const char *name, const dit_tensor_t *src, void *queue) {
  rank_rt_t *k = NULL;
  size_t idx = 0;
  const dit_plan_value_t *v;
  DIT_RETURN_IF(device_input(rt, name, src, &k, &idx, &v));
  return k->be->external_copy(k->be_state, queue, k->bound[idx].data, src->data, v->nbytes);
}

dit_status_t dit_runtime_output_device(dit_runtime_t *rt, const char *name, const dit_tensor_t *dst, void *queue) {
  rank_rt_t *k = NULL;
  DIT_RETURN_IF(device_rank(rt, "output", name, &k));
  size_t idx = 0;
  const dit_plan_value_t *v = find_io(k, DIT_STORAGE_OUTPUT, name, &idx);
  if (!v) return DIT_ERR(NOT_FOUND, "output '%s': the bundle has no such output", name);
  DIT_RETURN_IF(check_shape(v, "output", name, dst));
  DIT_RETURN_IF(check_device_dtype(v, "output", name, dst));
  return k->be->external_copy(k->be_state, queue, dst->data, k->bound[idx].data, v->nbytes);
}

dit_status_t dit_runtime_output_buffer(dit_runtime_t *rt, const char *name, dit_tensor_t *out_view, int *device_memory) {
  if (rt->n_ranks != 1 || rt->process)
    return DIT_ERR(UNIMPLEMENTED, "output '%s': a view in the runtime's memory is of a bundle of one rank, this one has %d", name,
                   rt->m->topology.world);
  rank_rt_t *k = &rt->ranks[0];
  size_t idx;
  if (!find_io(k, DIT_STORAGE_OUTPUT, name, &idx)) return DIT_ERR(NOT_FOUND, "output '%s': the bundle has no such output", name);
  *out_view = k->bound[idx];
  *device_memory = !k->be->host_memory;
  return DIT_OK;
}

dit_status_t dit_runtime_zero_input(dit_runtime_t *rt, const char *name) {
  for (int r = 0; r < rt->n_ranks; r++) {
    rank_rt_t *k = &rt->ranks[r];
    size_t idx;
    const dit_plan_value_t *v = find_io(k, DIT_STORAGE_INPUT, name, &idx);
    if (!v) return DIT_ERR(NOT_FOUND, "input '%s': the bundle has no such input", name);
    DIT_RETURN_IF(k->be->zero(k->be_state, k->bound[idx].data, v->nbytes));
  }
  return DIT_OK;
}

const char *dit_runtime_output_updates(const dit_runtime_t *rt, const char *name) {
  const rank_rt_t *k = &rt->ranks[0];
  for (size_t i = 0; i < k->plan->n_values; i++) {
    const dit_plan_value_t *v = &k->plan->values[i];
    if (v->storage == DIT_STORAGE_OUTPUT && v->ref && !strcmp(v->ref, name))
      return v->updates >= 0 ? k->plan->values[v->updates].ref : NULL;
  }
  return NULL;
}

const char *dit_runtime_backend(const dit_runtime_t *rt) { return rt->ranks[0].be->name; }

dit_status_t dit_runtime_join_queue(dit_runtime_t *rt, void *queue, int queue_waits) {
  const rank_rt_t *k = &rt->ranks[0];
  /* Host memory: every copy and step has finished when its call returns, nothing to order. A
   * NULL queue of a device backend is its default one (CUDA's legacy stream), ordered too. */
  if (!queue && (k->be->host_memory || rt->n_ranks != 1 || rt->process)) return DIT_OK;
  if (rt->n_ranks != 1 || rt->process)
    return DIT_ERR(UNIMPLEMENTED, "a caller's stream orders the work of a bundle of one rank, this one has %d", rt->m->topology.world);
  if (!k->be->external_join)
    return DIT_ERR(INVALID_ARGUMENT, "a stream was given, the bundle runs on the %s backend, which has none", k->be->name);
  return k->be->external_join(k->be_state, queue, queue_waits);
}

int dit_runtime_offload_stats(const dit_runtime_t *rt, dit_offload_stats_t *out) {
  if (!rt->ranks[0].offload) return 0;
  *out = dit_offload_engine_stats(rt->ranks[0].offload);
  return 1;
}

dit_status_t dit_runtime_offload_breakdown(dit_runtime_t *rt, double *stall_ms, double *host_ms) {
  if (!rt->ranks[0].offload) return DIT_ERR(FAILED_PRECONDITION, "the bundle streams no weights");
  return dit_offload_engine_breakdown(rt->ranks[0].offload, stall_ms, host_ms);
}

/* What one expert's state of a rank is predicted to allocate, by the rule its allocations follow. */
static uint64_t rank_predicted(const dit_runtime_t *rt, const rank_rt_t *r) {
  const int device = strncmp(rt->m->arch, "sm_", 3) == 0;
  dit_plan_memory_t mem;
  dit_plan_memory(r->plan, device, &mem);
  const uint64_t borrowed = r->arena_borrowed ? mem.arena : 0;
  if (dit_offload_planned(r->plan)) {
    const uint64_t p = planned_bytes(r->plan, rt->m);
    return p > borrowed ? p - borrowed : 0;
  }
  return mem.total - borrowed + r->weights_map.size;
}

dit_status_t dit_runtime_memory(const dit_runtime_t *rt, uint64_t *allocated, uint64_t *predicted, int *out_rank) {
  *allocated = *predicted = 0;
  *out_rank = 0;
  for (int i = 0; i < rt->n_ranks; i++) {
    uint64_t p = 0;
    for (int e = 0; e < rt->n_experts; e++) {
      const rank_rt_t *r = &rt->expert_ranks[e][i];
      if (!r->be->allocated_bytes) return DIT_ERR(UNIMPLEMENTED, "the %s backend does not count its allocations", r->be->name);
      p += rank_predicted(rt, r);
    }
    p += dit_reuse_rank_bytes(&rt->ranks[i]); /* reuse's anchor copies, beyond the manifest's peak */
    /* The most it held at once (an expert swap allocates and releases while it runs). */
    uint64_t a = rank_current(rt, i);
    if (rt->mem_peak && rt->mem_peak[i] > a) a = rt->mem_peak[i];
    const rank_rt_t *last = &rt->expert_ranks[rt->n_experts - 1][i];
    if (last->plan->offload.swap.present && rt->n_experts > 1) {
      /* The pipeline's peak, as the compiler predicted it by the same rule. */
      const uint64_t pk = last->plan->offload.swap.predicted_peak_bytes, ov = dit_offload_overhead(last->plan);
      p = pk > ov ? pk - ov : pk;
    }
    if (i == 0 || a > *allocated) *allocated = a, *predicted = p, *out_rank = rt->ranks[i].rank;
  }
  return DIT_OK;
}

int dit_runtime_expert_count(const dit_runtime_t *rt) { return rt->n_experts; }

int dit_runtime_expert_active(const dit_runtime_t *rt) { return rt->active; }

dit_status_t dit_runtime_expert_find(const dit_runtime_t *rt, const char *name, int *out_index) {
  *out_index = 0;
  if (rt->m->n_experts == 2 && rt->n_experts == 1) { /* loaded for one expert (only_expert) */
    const char *loaded = rt->only ? rt->m->experts[rt->only].name : "transformer";
    if (!strcmp(name ? name : "transformer", loaded)) return DIT_OK;
    return DIT_ERR(NOT_FOUND, "--expert %s: the runtime was loaded for expert %s only", name, loaded);
  }
  if (!name || !strcmp(name, "transformer")) return DIT_OK;
  for (int e = 1; e < rt->n_experts; e++)
    if (!strcmp(rt->m->experts[e].name, name)) return *out_index = e, DIT_OK;
  return DIT_ERR(NOT_FOUND, "--expert %s: the bundle has %s", name,
                 rt->n_experts > 1 ? "the experts transformer and transformer_2" : "one transformer (no experts section)");
}

dit_status_t dit_runtime_expert_select(dit_runtime_t *rt, int index) {
  if (index < 0 || index >= rt->n_experts)
    return DIT_ERR(OUT_OF_RANGE, "expert %d: the bundle has %d expert%s", index, rt->n_experts, rt->n_experts == 1 ? "" : "s");
  if (index == rt->active) return DIT_OK;
  /* An expert held in host memory (the swap of a budgeted bundle): the outgoing expert's
   * queues drain (the incoming resident set was loaded on them), its weights leave the device,
   * and what the forwards before did not load comes in now, with the slots. */
  const double t0 = dit_now_s();
  int switched = 0;
  for (int r = 0; r < rt->n_ranks; r++) {
    rank_rt_t *out = &rt->expert_ranks[rt->active][r], *in = &rt->expert_ranks[index][r];
    if (!in->offload || !dit_offload_engine_parked(in->offload)) continue;
    switched = 1;
    uint32_t left = 0;
    DIT_RETURN_IF(dit_offload_engine_unpark_copy(in->offload, 0, NULL, NULL, &left));
    if (r == 0) rt->swap_stats.chunks_at_switch = left;
    DIT_RETURN_IF_ERROR(out->be->synchronize(out->be_state), "expert switch, rank %d", out->rank);
    if (out->offload) DIT_RETURN_IF(dit_offload_engine_park(out->offload));
    DIT_RETURN_IF_ERROR(dit_offload_engine_unpark_finish(in->offload), "expert switch, rank %d", in->rank);
    note_peak(rt, r);
  }
  if (switched) {
    rt->swap_stats.switched = 1;
    rt->swap_stats.switch_ms = (dit_now_s() - t0) * 1e3;
    uint64_t chunks = 0;
    const rank_rt_t *in0 = &rt->expert_ranks[index][0];
    dit_plan_swap_totals(&in0->plan->offload, in0->plan->offload.swap.chunk_bytes ? in0->plan->offload.swap.chunk_bytes : 1,
                         &rt->swap_stats.bytes, &chunks);
  }
  rt->active = index;
  rt->ranks = rt->expert_ranks[index];
  rt->swap_left = 0;
  return DIT_OK;
}

void dit_runtime_expert_upcoming(dit_runtime_t *rt, int next, int forwards_left) {
  rt->swap_next = next;
  rt->swap_left = forwards_left > 0 && next != rt->active ? forwards_left : 0;
  /* A new window after an earlier switch: its figures start over. */
  if (rt->swap_left && rt->swap_stats.switched) memset(&rt->swap_stats, 0, sizeof rt->swap_stats);
}

dit_runtime_swap_stats_t dit_runtime_swap_stats(const dit_runtime_t *rt) { return rt->swap_stats; }

dit_status_t dit_runtime_memory_beyond_plan(dit_runtime_t *rt, uint64_t *bytes) {
  rank_rt_t *r = &rt->ranks[0];
  *bytes = 0;
  if (!r->be->memory_info) return DIT_ERR(UNIMPLEMENTED, "the %s backend does not report device memory", r->be->name);
  size_t fr = 0, tot = 0;
  DIT_RETURN_IF(r->be->memory_info(r->be_state, &fr, &tot));
  const uint64_t used = tot - fr, plan = planned_bytes(r->plan, rt->m);
  *bytes = used > plan ? used - plan : 0;
  return DIT_OK;
}

/* Streams the rank's weight blob from host memory into two chunk-sized device buffers on the
 * copy queue, as the offload engine does, and times it from the first enqueue to the last
 * copy's completion. */
dit_status_t dit_runtime_measure_h2d(dit_runtime_t *rt, uint64_t chunk_bytes, int repeats, double *gbs) {
  rank_rt_t *r = &rt->ranks[0];
  const dit_backend_vtable_t *be = r->be;
  if (!be->copy_enqueue || !be->mark || !be->wait || !be->pin_host)
    return DIT_ERR(UNIMPLEMENTED, "the %s backend has no copy queue", be->name);
  if (chunk_bytes < 4096) return DIT_ERR(INVALID_ARGUMENT, "chunk of %llu bytes: at least 4096", (unsigned long long)chunk_bytes);
  const size_t total = r->weights_map.size;
  const void *host = NULL;
  const double tp = dit_now_s();
  DIT_RETURN_IF(be->pin_host(r->be_state, r->weights_map.data, total, &host));
  fprintf(stderr, "ditrun: %.1f MiB of weights page-locked in %.2fs\n", (double)total / 1048576.0, dit_now_s() - tp);
  void *dev[2] = {NULL, NULL};
  dit_status_t s = DIT_OK;
  for (int k = 0; k < 2 && !s; k++) s = be->alloc(r->be_state, chunk_bytes, "copy calibration buffer", &dev[k]);
  double best = 0;
  for (int rep = 0; rep < repeats && !s; rep++) {
    s = be->synchronize(r->be_state);
    const double t0 = dit_now_s();
    for (size_t off = 0, i = 0; !s && off < total; off += chunk_bytes, i++)
      s = be->copy_enqueue(r->be_state, dev[i % 2], (const uint8_t *)host + off, total - off < chunk_bytes ? total - off : chunk_bytes, 0);
    if (!s) s = be->mark(r->be_state, 1, 0);
    if (!s) s = be->wait(r->be_state, 0, 0);
    if (!s) s = be->synchronize(r->be_state);
    const double dt = dit_now_s() - t0;
    if (!s && dt > 0 && (double)total / dt / 1e9 > best) best = (double)total / dt / 1e9;
  }
  for (int k = 0; k < 2; k++)
    if (dev[k]) be->release(r->be_state, dev[k]);
  *gbs = best;
  return s;
}

/* Step-level access works on single-rank runs (cross-backend parity of one plan) and on cfg lanes
 * of one rank each in this process (the step cache's segments of a forward): rank 0 is lane 0. */
const dit_plan_t *dit_runtime_plan(const dit_runtime_t *rt) { return rt->ranks[0].plan; }

dit_status_t dit_runtime_stepwise(const dit_runtime_t *rt) {
  const int world = rt->m->topology.world, cfg = rt->m->topology.cfg, cp = rt->m->topology.cp, tp = rt->m->topology.tp;
  if (rt->n_ranks == 1 && world == 1) return DIT_OK;
  if (cfg != 2 || cp * tp != 1)
    return DIT_ERR(UNIMPLEMENTED, "step-by-step runs take one rank, or one rank per cfg lane; this bundle has %d ranks (cfg %d, cp %d, tp %d)",
                   world, cfg, cp, tp);
  if (rt->process)
    return DIT_ERR(UNIMPLEMENTED, "step-by-step runs take both cfg lanes in one process; this one runs lane %d alone (one process per lane)",
                   rt->ranks[0].rank);
  for (int e = 0; e < rt->n_experts; e++) {
    const dit_plan_t *p = rt->expert_ranks[e][0].plan;
    for (size_t i = 0; i < p->n_steps; i++)
      if (dit_op_is_collective(p->steps[i].kind))
        return DIT_ERR(UNIMPLEMENTED, "step-by-step runs take cfg lanes without collectives between them; step %zu of the plan is a %s",
                       i, dit_op_info(p->steps[i].kind)->name);
  }
  return DIT_OK;
}

/* Steps [from, to) of one rank, synchronized once at the end. */
static dit_status_t rank_steps(rank_rt_t *r, size_t from, size_t to) {
  for (size_t i = from; i < to; i++) {
    /* With offload, the weight schedule runs too (steps are then taken in plan order). */
    dit_status_t s = r->offload ? dit_offload_before_step(r->offload, i) : DIT_OK;
    if (!s) s = rank_step(r, NULL, i);
    if (!s && r->offload) s = dit_offload_after_step(r->offload, i, -1);
    DIT_RETURN_IF_ERROR(s, "step %zu (%s)", i, dit_op_info(r->plan->steps[i].kind)->name);
  }
  return r->be->synchronize(r->be_state);
}

typedef struct steps_range {
  size_t from, to;
} steps_range_t;

static dit_status_t rank_steps_job(dit_runtime_t *rt, rank_rt_t *k, void *arg) {
  (void)rt;
  const steps_range_t *r = arg;
  return rank_steps(k, r->from, r->to);
}

/* On cfg lanes every lane runs the steps, in its thread as a forward does. */
dit_status_t dit_runtime_steps(dit_runtime_t *rt, size_t from, size_t to) {
  DIT_RETURN_IF(dit_runtime_stepwise(rt));
  rank_rt_t *r0 = &rt->ranks[0];
  if (from > to || to > r0->plan->n_steps) return DIT_ERR(OUT_OF_RANGE, "steps [%zu, %zu) of %zu", from, to, r0->plan->n_steps);
  steps_range_t range = {from, to};
  return dit_exec_run_ranks(rt, rank_steps_job, &range);
}

dit_status_t dit_runtime_step(dit_runtime_t *rt, size_t i) {
  if (rt->n_ranks == 1 && i >= rt->ranks[0].plan->n_steps) return DIT_ERR(OUT_OF_RANGE, "step %zu of %zu", i, rt->ranks[0].plan->n_steps);
  return dit_runtime_steps(rt, i, i + 1);
}

dit_status_t dit_runtime_read_value(dit_runtime_t *rt, size_t v, void *host) {
  rank_rt_t *r0 = &rt->ranks[0];
  if (v >= r0->plan->n_values) return DIT_ERR(OUT_OF_RANGE, "value %zu of %zu", v, r0->plan->n_values);
  size_t n = r0->plan->values[v].nbytes;
  if (r0->be->host_memory) {
    memcpy(host, r0->bound[v].data, n);
    return DIT_OK;
  }
  return r0->be->download(r0->be_state, host, r0->bound[v].data, n);
}

dit_status_t dit_runtime_write_value(dit_runtime_t *rt, size_t v, const void *host) {
  rank_rt_t *r0 = &rt->ranks[0];
  if (v >= r0->plan->n_values) return DIT_ERR(OUT_OF_RANGE, "value %zu of %zu", v, r0->plan->n_values);
  if (r0->plan->values[v].storage == DIT_STORAGE_WEIGHT) return DIT_ERR(INVALID_ARGUMENT, "value %zu is a weight", v);
  size_t n = r0->plan->values[v].nbytes;
  if (r0->be->host_memory) {
    memcpy(r0->bound[v].data, host, n);
    return DIT_OK;
  }
  return r0->be->upload(r0->be_state, r0->bound[v].data, host, n);
}

void dit_runtime_probe_reset(dit_runtime_t *rt) { rt->probe_valid = rt->resid_valid[0] = rt->resid_valid[1] = 0; }

/* Rank 0's previous signal for values like v: kept while the expert, dtype and size stay; else made
 * anew on the active expert's rank 0 (no previous signal; the held base, made on first hold, dropped). */
static dit_status_t probe_buffers(dit_runtime_t *rt, const dit_plan_value_t *v) {
  rank_rt_t *r0 = &rt->ranks[0];
  if (rt->probe_rank == r0 && rt->probe_bytes == v->nbytes && rt->probe_dtype == v->dtype) return DIT_OK;
  probe_release(rt);
  if (!r0->be->probe_change) return DIT_ERR(UNIMPLEMENTED, "the %s backend has no probe kernel", r0->be->name);
  if (v->dtype != DIT_F32 && v->dtype != DIT_BF16 && v->dtype != DIT_F16)
    return DIT_ERR(INVALID_ARGUMENT, "probe: value '%s' has dtype %s: expected f32, bf16 or f16", v->name, dit_dtype_name(v->dtype));
  rt->probe_rank = r0, rt->probe_bytes = v->nbytes, rt->probe_dtype = v->dtype;
  dit_status_t s = r0->be->alloc(r0->be_state, v->nbytes, "the step cache's previous probe", &rt->probe_prev);
  if (s) probe_release(rt);
  return s;
}

static dit_status_t probe_value(const dit_runtime_t *rt, size_t v, const dit_plan_value_t **out) {
  DIT_RETURN_IF(dit_runtime_stepwise(rt));
  const dit_plan_t *p = rt->ranks[0].plan;
  if (v >= p->n_values) return DIT_ERR(OUT_OF_RANGE, "probe: value %zu of %zu", v, p->n_values);
  *out = &p->values[v];
  return DIT_OK;
}

dit_status_t dit_runtime_probe_hold(dit_runtime_t *rt, size_t v) {
  const dit_plan_value_t *pv = NULL;
  DIT_RETURN_IF(probe_value(rt, v, &pv));
  DIT_RETURN_IF(probe_buffers(rt, pv));
  rank_rt_t *r0 = &rt->ranks[0];
  if (!rt->probe_held) DIT_RETURN_IF(r0->be->alloc(r0->be_state, pv->nbytes, "the step cache's probe base", &rt->probe_held));
  DIT_RETURN_IF(r0->be->copy2d(r0->be_state, 0, rt->probe_held, pv->nbytes, r0->bound[v].data, pv->nbytes, pv->nbytes, 1));
  rt->probe_held_value = v + 1;
  return DIT_OK;
}

dit_status_t dit_runtime_probe_change(dit_runtime_t *rt, size_t v, size_t base, int update_prev, double *change) {
  *change = NAN;
  const dit_plan_value_t *pv = NULL, *pb = NULL;
  DIT_RETURN_IF(probe_value(rt, v, &pv));
  rank_rt_t *r0 = &rt->ranks[0];
  const void *b = NULL;
  if (base == DIT_PROBE_HELD) {
    if (rt->probe_rank != r0 || !rt->probe_held_value) return DIT_ERR(FAILED_PRECONDITION, "probe: no base held on this expert");
    pb = &r0->plan->values[rt->probe_held_value - 1];
  } else if (base != SIZE_MAX) {
    DIT_RETURN_IF(probe_value(rt, base, &pb));
    b = r0->bound[base].data;
  }
  if (pb && (pb->dtype != pv->dtype || pb->nbytes != pv->nbytes))
    return DIT_ERR(INVALID_ARGUMENT, "probe: base '%s' (%s, %llu bytes) differs from value '%s' (%s, %llu bytes)", pb->name,
                   dit_dtype_name(pb->dtype), (unsigned long long)pb->nbytes, pv->name, dit_dtype_name(pv->dtype),
                   (unsigned long long)pv->nbytes);
  DIT_RETURN_IF(probe_buffers(rt, pv));
  if (base == DIT_PROBE_HELD) b = rt->probe_held;
  if (!rt->probe_valid && !update_prev) return DIT_OK; /* nothing to compare with, nothing to keep */
  double sums[2];
  DIT_RETURN_IF(r0->be->probe_change(r0->be_state, r0->bound[v].data, b, rt->probe_prev, pv->dtype,
                                     pv->nbytes / dit_dtype_size(pv->dtype), update_prev, sums));
  if (rt->probe_valid) *change = sums[1] > 0 ? sums[0] / sums[1] : sums[0] > 0 ? INFINITY : 0;
  if (update_prev) rt->probe_valid = 1;
  return DIT_OK;
}

/* A residual slot's rank: the slot's cfg lane on a bundle with cfg lanes, else rank 0. */
static rank_rt_t *resid_owner(dit_runtime_t *rt, int slot) { return rt->n_ranks == 2 ? &rt->ranks[slot] : &rt->ranks[0]; }

/* A slot's residual buffers for values like v on its rank of the active expert: kept while the
 * expert, dtype and size stay, else made anew (no residual kept). */
static dit_status_t resid_buffers(dit_runtime_t *rt, int slot, const dit_plan_value_t *v) {
  rank_rt_t *r = resid_owner(rt, slot);
  if (rt->resid_rank[slot] != r || rt->resid_bytes[slot] != v->nbytes || rt->resid_dtype[slot] != v->dtype) {
    resid_release(rt, slot);
    if (!r->be->probe_change) return DIT_ERR(UNIMPLEMENTED, "the %s backend has no probe kernel", r->be->name);
    if (v->dtype != DIT_F32 && v->dtype != DIT_BF16 && v->dtype != DIT_F16)
      return DIT_ERR(INVALID_ARGUMENT, "residual: value '%s' has dtype %s: expected f32, bf16 or f16", v->name, dit_dtype_name(v->dtype));
    rt->resid_rank[slot] = r, rt->resid_bytes[slot] = v->nbytes, rt->resid_dtype[slot] = v->dtype;
  }
  if (!rt->resid_start[slot])
    DIT_RETURN_IF(r->be->alloc(r->be_state, v->nbytes, "the step cache's residual start", &rt->resid_start[slot]));
  if (!rt->resid_neg[slot]) DIT_RETURN_IF(r->be->alloc(r->be_state, v->nbytes, "the step cache's residual", &rt->resid_neg[slot]));
  return DIT_OK;
}

/* The probe kernel does the arithmetic: with r = x - base rounded to the dtype it stores prev = r,
 * so keeping -R = start - end and then start - (-R) give the residual and its reuse in one pass
 * each (the two sums it returns are not used). */
dit_status_t dit_runtime_residual(dit_runtime_t *rt, dit_residual_op_t op, int slot, size_t v) {
  const dit_plan_value_t *pv = NULL;
  if (slot < 0 || slot > 1) return DIT_ERR(OUT_OF_RANGE, "residual: slot %d: expected 0 or 1", slot);
  DIT_RETURN_IF(probe_value(rt, v, &pv));
  DIT_RETURN_IF(resid_buffers(rt, slot, pv));
  rank_rt_t *r0 = resid_owner(rt, slot);
  const size_t n = pv->nbytes / dit_dtype_size(pv->dtype);
  double sums[2];
  switch (op) {
  case DIT_RESIDUAL_START:
    return r0->be->copy2d(r0->be_state, 0, rt->resid_start[slot], pv->nbytes, r0->bound[v].data, pv->nbytes, pv->nbytes, 1);
  case DIT_RESIDUAL_KEEP:
    DIT_RETURN_IF(r0->be->probe_change(r0->be_state, rt->resid_start[slot], r0->bound[v].data, rt->resid_neg[slot], pv->dtype, n, 1, sums));
    rt->resid_valid[slot] = 1;
    return DIT_OK;
  case DIT_RESIDUAL_APPLY:
    if (!rt->resid_valid[slot]) return DIT_ERR(FAILED_PRECONDITION, "residual: slot %d has no residual kept on this expert", slot);
    return r0->be->probe_change(r0->be_state, rt->resid_start[slot], rt->resid_neg[slot], r0->bound[v].data, pv->dtype, n, 1, sums);
  }
  return DIT_ERR(INVALID_ARGUMENT, "residual: op %d", (int)op);
}
