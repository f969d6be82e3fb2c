/* The loader and plan executor: validates a bundle for this process, binds every plan value
 * to backend memory (arena, weights, io staging) and runs the steps in order. A multi-rank
 * bundle runs all its ranks here, one thread each, with in-process collectives (GPUs: NCCL
 * when every rank has a device of its own), or one rank per process under a launcher (TCP
 * collectives on the CPU, NCCL on GPUs). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/bundle.h"
#include "artifacts/plan.h"
#include "base/clock.h"
#include "runtime/backend.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/comm_nccl.h"
#include "runtime/comm/comm_tcp.h"
#include "runtime/ditrun.h"
#include "runtime/launch/launch_env.h"
#include "runtime/offload_engine.h"

#define DIT_COLL_GROUPS 5 /* a collective's "group" attribute: 0 tp, 1 cp, 3 Ulysses, 4 ring */

typedef struct rank_rt {
  int rank;
  dit_bundle_t *bundle;      /* borrowed from the runtime */
  const dit_manifest_t *m;   /* borrowed */
  const dit_manifest_weights_t *layout;
  dit_plan_t *plan;
  dit_mapping_t weights_map;
  const dit_backend_vtable_t *be;
  void *be_state;
  void *arena;
  void *weights_dev;         /* uploaded weights when the backend is not host memory */
  void **io_buf;             /* per plan value: backend buffer for inputs and outputs */
  void **host_out;           /* per plan value: host copy of outputs (device backends) */
  dit_tensor_t *bound;       /* per plan value */
  dit_tensor_t *step_tensors;/* scratch for one step's operands */
  int tp_group[64];          /* world ranks of this rank's tensor-parallel group */
  int tp;
  int cp_group[64];          /* world ranks of this rank's context-parallel group */
  int cp;
  int graph;                 /* 1: capture the forward as a graph; 2: captured */
  dit_offload_engine_t *offload; /* streams block weights when the bundle plans it */
  int stage;                 /* collectives through host copies (always on device memory) */
  char *stage_buf;           /* their host staging */
  size_t stage_cap;
  void *coll_send, *coll_recv; /* collectives' scratch in backend memory */
  size_t coll_cap;
  dit_tcomm_t *tcomm;        /* collectives with other processes (one rank per process) */
  int device;                /* GPU ordinal */
  struct dit_runtime *owner;
  dit_ncomm_t *nworld;       /* NCCL: the world, and the communicator of each plan group */
  dit_ncomm_t *ngroup[DIT_COLL_GROUPS];
  void *queue;               /* NCCL: the backend's compute queue */
} rank_rt_t;

struct dit_runtime {
  dit_bundle_t *bundle;
  const dit_manifest_t *m;
  int n_ranks;
  rank_rt_t *ranks;
  dit_comm_t *comm;          /* NULL for one rank */
  int process;               /* 1: this process runs only ranks[0], one rank of a launch */
  dit_tcomm_t *tcomm;        /* then: its collectives with the other processes */
  /* NCCL collectives: enqueued under the read lock; a failure (a rank's step, a peer that
   * died, an asynchronous NCCL error) aborts every communicator under the write lock. */
  int nccl;
  pthread_rwlock_t nlock;
  int naborted;
  char nwhy[512];
  pthread_t watchdog;
  int watching;              /* the watchdog runs while this is 1 (atomic) */
};

const dit_manifest_t *dit_runtime_manifest(const dit_runtime_t *rt) { return rt->m; }

static void rank_destroy(rank_rt_t *rt) {
  if (!rt) return;
  if (rt->be_state) {
    dit_offload_engine_destroy(rt->offload);
    if (rt->coll_send) rt->be->release(rt->be_state, rt->coll_send);
    if (rt->coll_recv) rt->be->release(rt->be_state, rt->coll_recv);
    if (rt->io_buf)
      for (size_t i = 0; i < rt->plan->n_values; i++)
        if (rt->io_buf[i]) rt->be->release(rt->be_state, rt->io_buf[i]);
    if (rt->arena) rt->be->release(rt->be_state, rt->arena);
    if (rt->weights_dev) rt->be->release(rt->be_state, rt->weights_dev);
    rt->be->destroy(rt->be_state);
  }
  free(rt->stage_buf);
  if (rt->host_out)
    for (size_t i = 0; i < rt->plan->n_values; i++) free(rt->host_out[i]);
  free(rt->host_out);
  free(rt->io_buf);
  free(rt->bound);
  free(rt->step_tensors);
  dit_file_unmap(&rt->weights_map);
  dit_plan_free(rt->plan);
}

static void nccl_shutdown(dit_runtime_t *rt);

void dit_runtime_destroy(dit_runtime_t *rt) {
  if (!rt) return;
  nccl_shutdown(rt);
  for (int r = 0; rt->ranks && r < rt->n_ranks; r++) rank_destroy(&rt->ranks[r]);
  free(rt->ranks);
  dit_comm_destroy(rt->comm);
  dit_tcomm_destroy(rt->tcomm);
  dit_bundle_close(rt->bundle);
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

static dit_status_t bind_values(rank_rt_t *rt) {
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
        DIT_RETURN_IF(rt->be->alloc(rt->be_state, v->nbytes ? v->nbytes : 1, what, &rt->io_buf[i]));
        t->data = rt->io_buf[i];
        if (!rt->be->host_memory && v->storage == DIT_STORAGE_OUTPUT) {
          rt->host_out[i] = malloc(v->nbytes ? v->nbytes : 1);
          if (!rt->host_out[i]) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for %s", what);
        }
        break;
      }
    }
  }
  return DIT_OK;
}

static dit_status_t load_blob(void *ctx, const char *hash, dit_mapping_t *out) {
  return dit_bundle_map_blob((dit_bundle_t *)ctx, hash, out);
}

static dit_status_t alloc_collective_scratch(rank_rt_t *rt);

/* Loads rank `rank` of an opened bundle: its plan, weights shard and backend memory. */
static dit_status_t rank_load(rank_rt_t *rt, const dit_runtime_options_t *o, int threads) {
  const dit_manifest_rank_t *r0 = NULL;
  for (size_t i = 0; i < rt->m->n_ranks && !r0; i++)
    if (rt->m->ranks[i].rank == rt->rank) r0 = &rt->m->ranks[i];
  if (!r0) return DIT_ERR(NOT_FOUND, "manifest.json: field 'ranks': no entry for rank %d", rt->rank);
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
  const int offload = dit_offload_planned(rt->m);
  if (rt->be->memory_info) {
    /* Predicted peak against what the device has free, before the big allocations. */
    size_t fr = 0, tot = 0;
    DIT_RETURN_IF(rt->be->memory_info(rt->be_state, &fr, &tot));
    const uint64_t need = offload ? dit_offload_predicted_peak(rt->m) : rt->m->peak_bytes;
    if (need > fr)
      return DIT_ERR(RESOURCE_EXHAUSTED, "manifest.json: field '%s': the bundle needs %.2f GiB, the device has %.2f GiB free of %.2f GiB",
                     offload ? "summary.offload.predicted_peak_bytes" : "memory.peak_bytes", (double)need / (1 << 30), (double)fr / (1 << 30),
                     (double)tot / (1 << 30));
  }
  rt->bound = calloc(rt->plan->n_values + 1, sizeof *rt->bound);
  rt->io_buf = calloc(rt->plan->n_values + 1, sizeof *rt->io_buf);
  rt->host_out = calloc(rt->plan->n_values + 1, sizeof *rt->host_out);
  rt->step_tensors = calloc(DIT_PLAN_MAX_IN + DIT_PLAN_MAX_OUT, sizeof *rt->step_tensors);
  if (!rt->bound || !rt->io_buf || !rt->host_out || !rt->step_tensors) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  DIT_RETURN_IF(rt->be->alloc(rt->be_state, rt->plan->arena_bytes ? rt->plan->arena_bytes : 1, "activation arena", &rt->arena));
  if (!rt->be->host_memory && !offload) {
    DIT_RETURN_IF(rt->be->alloc(rt->be_state, rt->weights_map.size, "weights", &rt->weights_dev));
    DIT_RETURN_IF(rt->be->upload(rt->be_state, rt->weights_dev, rt->weights_map.data, rt->weights_map.size));
  }
  DIT_RETURN_IF(bind_values(rt));
  if (offload)
    DIT_RETURN_IF(dit_offload_engine_create(rt->m, rt->plan, rt->layout, rt->be, rt->be_state, rt->weights_map.data, rt->weights_map.size,
                                            rt->bound, &rt->offload));
  if (rt->be->prepare) DIT_RETURN_IF(rt->be->prepare(rt->be_state, rt->plan, rt->bound, load_blob, rt->bundle));
  DIT_RETURN_IF(alloc_collective_scratch(rt));
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

static dit_status_t nccl_setup(dit_runtime_t *rt, const dit_runtime_options_t *o);

dit_status_t dit_runtime_load(const char *bundle_dir, const dit_runtime_options_t *o,
                              dit_runtime_t **out) {
  *out = NULL;
  dit_runtime_t *rt = calloc(1, sizeof *rt);
  if (!rt) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  dit_status_t s = dit_bundle_open(bundle_dir, DIT_BUNDLE_HASH_BLOBS, &rt->bundle);
  if (!s) {
    rt->m = dit_bundle_manifest(rt->bundle);
    s = check_fitness(rt, o);
  }
  rt->process = !s && o && o->launch && o->launch->world > 1;
  if (!s) {
    rt->n_ranks = rt->process ? 1 : rt->m->topology.world;
    rt->ranks = calloc((size_t)rt->n_ranks, sizeof *rt->ranks);
    if (!rt->ranks) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s && rt->process) s = dit_tcomm_create(o->launch, 60000, &rt->tcomm);
  if (!s && rt->n_ranks > 1) s = dit_comm_create_local(rt->n_ranks, 600000, &rt->comm);
  if (!s && o && o->graph && rt->n_ranks > 1)
    s = DIT_ERR(UNIMPLEMENTED, "--cuda-graph: graphs of multi-rank runs are not built (collectives run between steps)");
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
  for (int r = 0; !s && r < rt->n_ranks; r++) {
    rt->ranks[r].rank = rt->process ? o->launch->rank : r;
    rt->ranks[r].device = rt->process ? proc_device : (o ? o->device : 0) + r % spread;
    rt->ranks[r].owner = rt;
    rt->ranks[r].tcomm = rt->tcomm;
    rt->ranks[r].stage = o && o->stage_collectives;
    rt->ranks[r].bundle = rt->bundle;
    rt->ranks[r].m = rt->m;
    s = rank_load(&rt->ranks[r], o, rt->n_ranks > 1 ? per_rank : (o ? o->threads : 0));
    if (!s && o && o->graph) {
      rank_rt_t *k = &rt->ranks[r];
      if (!k->be->capture_begin || !k->be->capture_end || !k->be->replay)
        s = DIT_ERR(UNAVAILABLE, "--cuda-graph: the %s backend has no graphs", k->be->name);
      else k->graph = 1;
    }
  }
  if (!s) s = nccl_setup(rt, o);
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

static dit_status_t rank_set_input(rank_rt_t *rt, const char *name, const dit_tensor_t *src) {
  size_t idx;
  const dit_plan_value_t *v = find_io(rt, DIT_STORAGE_INPUT, name, &idx);
  if (!v) return DIT_ERR(NOT_FOUND, "input '%s': the bundle has no such input", name);
  int same = src->rank == v->rank;
  for (int i = 0; same && i < v->rank; i++) same = src->dims[i] == v->dims[i];
  if (!same) {
    char want[128], got[128];
    format_dims(want, sizeof want, v->dims, v->rank);
    format_dims(got, sizeof got, src->dims, src->rank);
    return DIT_ERR(INVALID_ARGUMENT, "input '%s': shape %s, the bundle expects %s", name, got, want);
  }
  size_t n = (size_t)dit_tensor_numel(src);
  void *stage = NULL;
  const void *from = src->data;
  dit_dtype_t from_t = src->dtype;
  if (src->dtype == DIT_I64 || src->dtype == DIT_I32) {
    /* Timesteps arrive as integers from diffusers' schedulers; the model embeds floats. */
    float *f = malloc(n * sizeof *f + 1);
    if (!f) return DIT_ERR(RESOURCE_EXHAUSTED, "input '%s': out of memory", name);
    for (size_t i = 0; i < n; i++)
      f[i] = src->dtype == DIT_I64 ? (float)((const int64_t *)src->data)[i] : (float)((const int32_t *)src->data)[i];
    stage = f;
    from = f;
    from_t = DIT_F32;
  }
  dit_status_t s = DIT_OK;
  if (rt->be->host_memory) {
    if (dit_convert(rt->io_buf[idx], v->dtype, from, from_t, n))
      s = DIT_ERR(INVALID_ARGUMENT, "input '%s': cannot convert %s to %s", name, dit_dtype_name(src->dtype), dit_dtype_name(v->dtype));
  } else {
    void *tmp = malloc(v->nbytes + 1);
    if (!tmp) s = DIT_ERR(RESOURCE_EXHAUSTED, "input '%s': out of memory", name);
    else if (dit_convert(tmp, v->dtype, from, from_t, n))
      s = DIT_ERR(INVALID_ARGUMENT, "input '%s': cannot convert %s to %s", name, dit_dtype_name(src->dtype), dit_dtype_name(v->dtype));
    else s = rt->be->upload(rt->be_state, rt->io_buf[idx], tmp, v->nbytes);
    free(tmp);
  }
  free(stage);
  return s;
}

/* ---- collectives ----
 * Every collective is: lay out the data the communicator sends (2-D copies on the backend's
 * compute queue), one communicator call on contiguous buffers in backend memory, lay out what
 * it received. The copies are the backend's, so the same code runs on host and device memory;
 * only the communicator call is staged through host memory when the backend's memory is not
 * the host's (or when asked to, which checks that path on the CPU). */

typedef enum { COMM_ALLREDUCE, COMM_ALLGATHER, COMM_ALLTOALL } comm_kind_t;

/* Runs one communicator call on backend-memory buffers: recv = f(send). For ALLREDUCE, send
 * is recv (in place, `bytes` of dtype); ALLGATHER takes `bytes` and gives n * bytes; ALLTOALL
 * exchanges n chunks of `bytes`. */
static dit_status_t nccl_call(rank_rt_t *rt, int group, int me, comm_kind_t kind, void *send, void *recv, size_t bytes, dit_dtype_t dtype);

static void nccl_abort_all(dit_runtime_t *rt, int rank, const char *why);
static dit_status_t nccl_after_sync(dit_runtime_t *rt, dit_status_t s);

static dit_status_t comm_call(rank_rt_t *rt, dit_comm_t *comm, int group, comm_kind_t kind, const int *members, int n, void *send,
                              void *recv, size_t bytes, dit_dtype_t dtype) {
  if (rt->owner->nccl && n > 1) {
    int me = 0;
    while (me < n && members[me] != rt->rank) me++;
    return nccl_call(rt, group, me, kind, send, recv, bytes, dtype);
  }
  const size_t in = kind == COMM_ALLREDUCE ? bytes : kind == COMM_ALLGATHER ? bytes : (size_t)n * bytes;
  const size_t out = kind == COMM_ALLREDUCE ? bytes : (size_t)n * bytes;
  const int staged = !rt->be->host_memory || rt->stage;
  void *hs = send, *hr = recv;
  if (staged) {
    if (rt->stage_cap < in + out) {
      char *nb = realloc(rt->stage_buf, in + out);
      if (!nb) return DIT_ERR(RESOURCE_EXHAUSTED, "collective: out of host memory staging %zu bytes", in + out);
      rt->stage_buf = nb;
      rt->stage_cap = in + out;
    }
    hs = rt->stage_buf;
    hr = kind == COMM_ALLREDUCE ? hs : rt->stage_buf + in;
    DIT_RETURN_IF(rt->be->download(rt->be_state, hs, send, in));
  }
  dit_status_t s = DIT_OK;
  if (n == 1 || (!comm && !rt->tcomm)) { /* a group of one */
    if (hr != hs) memcpy(hr, hs, in);
  } else if (rt->tcomm) {
    s = kind == COMM_ALLREDUCE   ? dit_tcomm_allreduce_sum(rt->tcomm, members, n, hr, bytes / dit_dtype_size(dtype), dtype)
        : kind == COMM_ALLGATHER ? dit_tcomm_allgather(rt->tcomm, members, n, hs, bytes, hr)
                                 : dit_tcomm_alltoall(rt->tcomm, members, n, hs, hr, bytes);
  } else if (kind == COMM_ALLREDUCE) {
    s = dit_comm_allreduce_sum(comm, rt->rank, members, n, hr, bytes / dit_dtype_size(dtype), dtype);
  } else if (kind == COMM_ALLGATHER) {
    s = dit_comm_allgather(comm, rt->rank, members, n, hs, bytes, hr);
  } else {
    s = dit_comm_alltoall(comm, rt->rank, members, n, hs, hr, bytes);
  }
  if (!s && staged) s = rt->be->upload(rt->be_state, recv, hr, out);
  return s;
}

/* height rows of width bytes, from src (rows spitch apart) to dst (dpitch apart). */
static dit_status_t copy2d(rank_rt_t *rt, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
  return rt->be->copy2d(rt->be_state, dst, dpitch, src, spitch, width, height);
}

/* The members of a collective's group, and this rank's place among them. */
static dit_status_t group_members(const rank_rt_t *rt, const dit_plan_step_t *st, int *members, int *n_out, int *me_out, int *group_out) {
  const char *name = dit_op_info(st->kind)->name;
  int64_t group = 0, n = 0;
  DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "group", &group));
  if (st->kind == DIT_OP_ALLREDUCE) {
    if (group != 0) return DIT_ERR(UNIMPLEMENTED, "allreduce over group %lld: only tensor-parallel groups so far", (long long)group);
    n = rt->tp;
  } else {
    DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "n", &n));
  }
  /* Group 0 is the tensor-parallel group; 1 the whole cp group; with USP, 3 is this rank's
   * Ulysses subgroup (n consecutive cp ranks) and 4 its ring subgroup (the ranks at the same
   * place in every Ulysses subgroup). */
  int me_cp = 0;
  while (me_cp < rt->cp && rt->cp_group[me_cp] != rt->rank) me_cp++;
  if (group == 0) {
    if (n != rt->tp) return DIT_ERR(INVALID_ARGUMENT, "%s: group 0 of %lld, this rank's tensor-parallel group has %d", name, (long long)n, rt->tp);
    memcpy(members, rt->tp_group, sizeof(int) * (size_t)n);
  } else {
    if (n < 1 || n > rt->cp || rt->cp % n || (group != 1 && group != 3 && group != 4) || (group == 1 && n != rt->cp))
      return DIT_ERR(INVALID_ARGUMENT, "%s: group %lld of %lld does not fit this rank's context-parallel group of %d", name,
                     (long long)group, (long long)n, rt->cp);
    for (int64_t k = 0; k < n; k++) {
      const int64_t u = group == 4 ? rt->cp / n : n; /* the Ulysses degree */
      const int64_t c = group == 1 ? k : group == 3 ? me_cp / u * u + k : k * u + me_cp % u;
      members[k] = rt->cp_group[c];
    }
  }
  int me = 0;
  while (me < n && members[me] != rt->rank) me++;
  *n_out = (int)n;
  *me_out = me;
  *group_out = (int)group;
  return DIT_OK;
}

/* Scratch in backend memory for every collective of the plan: what is sent, what arrives. */
static dit_status_t alloc_collective_scratch(rank_rt_t *rt) {
  size_t need = 0;
  for (size_t i = 0; i < rt->plan->n_steps; i++) {
    const dit_plan_step_t *st = &rt->plan->steps[i];
    if (!dit_op_is_collective(st->kind)) continue;
    const dit_attr_t *na = dit_attrs_find(&st->attrs, "n");
    const size_t n = st->kind == DIT_OP_ALLREDUCE ? 1 : na && na->i > 0 && na->i <= 64 ? (size_t)na->i : 64;
    const size_t b = rt->plan->values[st->in[0]].nbytes, o = rt->plan->values[st->out[0]].nbytes;
    if (n * b > need) need = n * b;
    if (o > need) need = o;
  }
  if (!need) return DIT_OK;
  DIT_RETURN_IF(rt->be->alloc(rt->be_state, need, "collective send buffer", &rt->coll_send));
  DIT_RETURN_IF(rt->be->alloc(rt->be_state, need, "collective receive buffer", &rt->coll_recv));
  rt->coll_cap = need;
  return DIT_OK;
}

static dit_status_t run_collective(rank_rt_t *rt, dit_comm_t *comm, const dit_plan_step_t *st) {
  const dit_tensor_t *x = &rt->bound[st->in[0]], *y = &rt->bound[st->out[0]];
  const char *name = dit_op_info(st->kind)->name;
  int members[64], n = 1, me = 0, group = 0;
  DIT_RETURN_IF(group_members(rt, st, members, &n, &me, &group));
  const size_t es = dit_dtype_size(x->dtype), bytes = dit_tensor_nbytes(x);
  if (x->dtype != y->dtype) return DIT_ERR(INVALID_ARGUMENT, "%s: input and output differ in dtype", name);
  if (st->kind == DIT_OP_ALLREDUCE) {
    if (dit_tensor_numel(x) != dit_tensor_numel(y)) return DIT_ERR(INVALID_ARGUMENT, "allreduce: input and output differ in size");
    DIT_RETURN_IF(copy2d(rt, y->data, bytes, x->data, bytes, bytes, 1));
    return comm_call(rt, comm, group, COMM_ALLREDUCE, members, n, y->data, y->data, bytes, y->dtype);
  }
  if (x->rank != 3 || y->rank != 3) return DIT_ERR(INVALID_ARGUMENT, "%s: operands are not [B, T, C]", name);
  if ((size_t)n * bytes > rt->coll_cap) return DIT_ERR(INTERNAL, "%s: collective scratch of %zu bytes is short", name, rt->coll_cap);
  uint8_t *send = rt->coll_send, *recv = rt->coll_recv, *yd = y->data;
  const uint8_t *xd = x->data;
  const size_t B = (size_t)x->dims[0], T = (size_t)x->dims[1], row = (size_t)x->dims[2] * es;
  switch (st->kind) {
    case DIT_OP_REDUCE_SCATTER: { /* the group's sum (fp32, group order), then this member's token share */
      const size_t Tl = T / (size_t)n;
      DIT_RETURN_IF(copy2d(rt, recv, bytes, xd, bytes, bytes, 1));
      DIT_RETURN_IF(comm_call(rt, comm, group, COMM_ALLREDUCE, members, n, recv, recv, bytes, x->dtype));
      return copy2d(rt, yd, Tl * row, recv + (size_t)me * Tl * row, T * row, Tl * row, B);
    }
    case DIT_OP_RING_SHIFT: /* every member's block, then the previous member's */
      DIT_RETURN_IF(comm_call(rt, comm, group, COMM_ALLGATHER, members, n, (void *)xd, recv, bytes, x->dtype));
      return copy2d(rt, yd, bytes, recv + (size_t)((me + n - 1) % n) * bytes, bytes, bytes, 1);
    case DIT_OP_ALLGATHER: /* recv = [member][B][T][C] -> y[b][member*T + t][c] */
      DIT_RETURN_IF(comm_call(rt, comm, group, COMM_ALLGATHER, members, n, (void *)xd, recv, bytes, x->dtype));
      for (int p = 0; p < n; p++) DIT_RETURN_IF(copy2d(rt, yd + (size_t)p * T * row, (size_t)n * T * row, recv + (size_t)p * bytes, T * row, T * row, B));
      return DIT_OK;
    case DIT_OP_ALLTOALL: {
      const dit_attr_t *rv = dit_attrs_find(&st->attrs, "reverse");
      const int reverse = rv ? (int)rv->i : 0;
      /* Chunks exchanged: [B][T_local][heads/n * Dh] per member. Forward: member p gets head
       * group p of my tokens; reverse: member p gets my heads of its tokens. */
      const size_t Tl = reverse ? T / (size_t)n : T, seg = (reverse ? (size_t)x->dims[2] : (size_t)x->dims[2] / (size_t)n) * es;
      const size_t chunk = B * Tl * seg, yrow = (size_t)y->dims[2] * es;
      /* This member's own chunk goes straight from x to y; the others are laid out, exchanged
       * (the communicator skips or ignores the own chunk) and laid out again. */
      for (size_t b = 0; b < B; b++) {
        if (reverse) DIT_RETURN_IF(copy2d(rt, yd + b * Tl * yrow + (size_t)me * seg, yrow, xd + (b * T + (size_t)me * Tl) * seg, seg, seg, Tl));
        else DIT_RETURN_IF(copy2d(rt, yd + (b * (size_t)n * Tl + (size_t)me * Tl) * seg, seg, xd + b * Tl * row + (size_t)me * seg, row, seg, Tl));
      }
      for (int p = 0; p < n; p++) {
        if (p == me) continue;
        if (reverse) DIT_RETURN_IF(copy2d(rt, send + (size_t)p * chunk, Tl * seg, xd + (size_t)p * Tl * seg, T * seg, Tl * seg, B));
        else DIT_RETURN_IF(copy2d(rt, send + (size_t)p * chunk, seg, xd + (size_t)p * seg, row, seg, B * Tl));
      }
      DIT_RETURN_IF(comm_call(rt, comm, group, COMM_ALLTOALL, members, n, send, recv, chunk, x->dtype));
      for (int p = 0; p < n; p++) {
        if (p == me) continue;
        if (reverse) DIT_RETURN_IF(copy2d(rt, yd + (size_t)p * seg, yrow, recv + (size_t)p * chunk, seg, seg, B * Tl));
        else DIT_RETURN_IF(copy2d(rt, yd + (size_t)p * Tl * seg, (size_t)n * Tl * seg, recv + (size_t)p * chunk, Tl * seg, Tl * seg, B));
      }
      return DIT_OK;
    }
    default: return DIT_ERR(INTERNAL, "%s is not a collective", name);
  }
}

/* ---- NCCL ----
 * GPU ranks that each have a device of their own (a launch's processes, or one process's
 * ranks spread by --devices) run their collectives through NCCL, on device buffers, enqueued
 * on the compute queue: nothing waits on the host. One communicator per plan group, split
 * from the world in group order; a rank's failure, a peer's death (the launch's liveness
 * channel) or an asynchronous NCCL error aborts them all, so no rank hangs in a collective. */

typedef dit_status_t (*rank_fn)(dit_runtime_t *rt, rank_rt_t *rank, void *arg);
typedef struct rank_job {
  dit_runtime_t *rt;
  int rank;
  rank_fn fn;
  void *arg;
  dit_status_t status;
} rank_job_t;

static void *rank_thread(void *p) {
  rank_job_t *j = p;
  j->status = j->fn(j->rt, &j->rt->ranks[j->rank], j->arg);
  return NULL;
}

/* fn on every rank of this process, one thread each (directly when there is one); the first
 * failure for a rank's own reason wins over the ABORTED ones it caused elsewhere. */
static dit_status_t run_ranks(dit_runtime_t *rt, rank_fn fn, void *arg) {
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
      if (rt->nccl) nccl_abort_all(rt, r, "a rank thread could not start");
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

static void nccl_free_comms(rank_rt_t *k, int abort) {
  for (int g = DIT_COLL_GROUPS - 1; g >= -1; g--) {
    dit_ncomm_t **c = g < 0 ? &k->nworld : &k->ngroup[g];
    if (!*c) continue;
    if (abort) dit_ncomm_abort(*c);
    else dit_ncomm_destroy(*c);
    *c = NULL;
  }
}

/* Stops every collective of this process and tells the other processes. If a collective
 * call holds the lock past ten seconds (blocked on a dead peer) the process cannot be
 * stopped cleanly and exits. */
static void nccl_abort_all(dit_runtime_t *rt, int rank, const char *why) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += 10;
  if (pthread_rwlock_timedwrlock(&rt->nlock, &t) != 0) {
    fprintf(stderr, "ditrun: rank %d: %s; a collective did not stop, exiting\n", rank, why);
    _exit(70);
  }
  if (!rt->naborted) {
    rt->naborted = 1;
    snprintf(rt->nwhy, sizeof rt->nwhy, "rank %d: %s", rank, why);
    if (rt->tcomm && rank == rt->ranks[0].rank) dit_tcomm_report_failure(rt->tcomm, why);
    for (int r = 0; r < rt->n_ranks; r++) {
      rt->ranks[r].be->native_queue(rt->ranks[r].be_state);
      nccl_free_comms(&rt->ranks[r], 1);
    }
  }
  pthread_rwlock_unlock(&rt->nlock);
}

/* After a rank's queue drained: an abort (here or elsewhere) wins over what the queue said. */
static dit_status_t nccl_after_sync(dit_runtime_t *rt, dit_status_t s) {
  pthread_rwlock_rdlock(&rt->nlock);
  dit_status_t a = rt->naborted ? DIT_ERR(ABORTED, "collectives aborted: %s", rt->nwhy) : DIT_OK;
  pthread_rwlock_unlock(&rt->nlock);
  if (a) dit_status_free(s);
  return a ? a : s;
}

static dit_status_t nccl_call(rank_rt_t *rt, int group, int me, comm_kind_t kind, void *send, void *recv, size_t bytes, dit_dtype_t dtype) {
  dit_runtime_t *o = rt->owner;
  pthread_rwlock_rdlock(&o->nlock);
  dit_ncomm_t *c = group >= 0 && group < DIT_COLL_GROUPS ? rt->ngroup[group] : NULL;
  dit_status_t s = DIT_OK;
  if (o->naborted) s = DIT_ERR(ABORTED, "collectives aborted: %s", o->nwhy);
  else if (!c) s = DIT_ERR(INTERNAL, "no NCCL communicator for group %d", group);
  else {
    void *q = rt->be->native_queue(rt->be_state);
    s = kind == COMM_ALLREDUCE   ? dit_ncomm_allreduce_sum(c, recv, bytes / dit_dtype_size(dtype), dtype, q)
        : kind == COMM_ALLGATHER ? dit_ncomm_allgather(c, send, recv, bytes, q)
                                 : dit_ncomm_alltoall(c, send, recv, bytes, me, q);
  }
  pthread_rwlock_unlock(&o->nlock);
  return s;
}

/* The groups the plan's collectives use: used[g] = 1 + the index of a step using group g. */
static dit_status_t groups_used(const rank_rt_t *k, int used[DIT_COLL_GROUPS], int *any) {
  *any = 0;
  for (size_t i = 0; i < k->plan->n_steps; i++) {
    const dit_plan_step_t *st = &k->plan->steps[i];
    if (!dit_op_is_collective(st->kind)) continue;
    int64_t g = 0;
    DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, dit_op_info(st->kind)->name, "group", &g));
    if (g < 0 || g >= DIT_COLL_GROUPS) return DIT_ERR(INVALID_ARGUMENT, "step %zu: collective group %lld", i, (long long)g);
    if (!used[g]) used[g] = (int)i + 1;
    *any = 1;
  }
  return DIT_OK;
}

typedef struct nccl_init {
  unsigned char id[DIT_NCCL_ID_BYTES];
  int used[DIT_COLL_GROUPS];
} nccl_init_t;

static dit_status_t rank_nccl_init(dit_runtime_t *rt, rank_rt_t *k, void *arg) {
  const nccl_init_t *in = arg;
  k->be->native_queue(k->be_state); /* NCCL takes the device current on this thread */
  DIT_RETURN_IF(dit_ncomm_create(in->id, rt->m->topology.world, k->rank, &k->nworld));
  for (int g = 0; g < DIT_COLL_GROUPS; g++) {
    if (!in->used[g]) continue;
    int members[64], n = 0, me = 0, group = 0;
    DIT_RETURN_IF(group_members(k, &k->plan->steps[in->used[g] - 1], members, &n, &me, &group));
    DIT_RETURN_IF_ERROR(dit_ncomm_split(k->nworld, members[0], me, &k->ngroup[g]), "rank %d, collective group %d", k->rank, g);
  }
  return DIT_OK;
}

static dit_status_t rank_nccl_destroy(dit_runtime_t *rt, rank_rt_t *k, void *arg) {
  (void)rt, (void)arg;
  k->be->native_queue(k->be_state);
  nccl_free_comms(k, 0);
  return DIT_OK;
}

static void *nccl_watch(void *p) {
  dit_runtime_t *rt = p;
  while (__atomic_load_n(&rt->watching, __ATOMIC_ACQUIRE)) {
    usleep(50 * 1000);
    dit_status_t e = rt->tcomm ? dit_tcomm_status(rt->tcomm) : DIT_OK;
    pthread_rwlock_rdlock(&rt->nlock);
    for (int r = 0; !e && !rt->naborted && r < rt->n_ranks; r++)
      for (int g = -1; !e && g < DIT_COLL_GROUPS; g++) {
        dit_ncomm_t *c = g < 0 ? rt->ranks[r].nworld : rt->ranks[r].ngroup[g];
        if (c) e = dit_ncomm_async_error(c);
      }
    pthread_rwlock_unlock(&rt->nlock);
    if (e) {
      nccl_abort_all(rt, rt->ranks[0].rank, dit_status_message(e));
      dit_status_free(e);
      break;
    }
  }
  return NULL;
}

static dit_status_t nccl_setup(dit_runtime_t *rt, const dit_runtime_options_t *o) {
  rank_rt_t *r0 = &rt->ranks[0];
  if (!r0->be->native_queue || rt->m->topology.world < 2 || (o && o->stage_collectives)) return DIT_OK;
  nccl_init_t in;
  memset(&in, 0, sizeof in);
  int any = 0;
  DIT_RETURN_IF(groups_used(r0, in.used, &any));
  if (!any) return DIT_OK;
  if (!rt->process) {
    /* Ranks that share a device, or no NCCL: collectives staged through host memory. */
    for (int r = 1; r < rt->n_ranks; r++)
      for (int q = 0; q < r; q++)
        if (rt->ranks[r].device == rt->ranks[q].device) return DIT_OK;
    dit_status_t e = dit_nccl_load(NULL);
    if (e) {
      dit_status_free(e);
      return DIT_OK;
    }
  }
  if (!rt->process || rt->ranks[0].rank == 0) DIT_RETURN_IF(dit_nccl_unique_id(in.id));
  if (rt->process) {
    int world[64];
    for (int r = 0; r < rt->m->topology.world && r < 64; r++) world[r] = r;
    DIT_RETURN_IF_ERROR(dit_tcomm_broadcast(rt->tcomm, world, rt->m->topology.world, 0, in.id, sizeof in.id), "sharing the NCCL id");
  }
  if (pthread_rwlock_init(&rt->nlock, NULL)) return DIT_ERR(RESOURCE_EXHAUSTED, "cannot make a lock");
  rt->nccl = 1;
  DIT_RETURN_IF(run_ranks(rt, rank_nccl_init, &in));
  __atomic_store_n(&rt->watching, 1, __ATOMIC_RELEASE);
  if (pthread_create(&rt->watchdog, NULL, nccl_watch, rt)) {
    rt->watching = 0;
    return DIT_ERR(RESOURCE_EXHAUSTED, "cannot start the collectives' watchdog");
  }
  return DIT_OK;
}

static void nccl_shutdown(dit_runtime_t *rt) {
  if (!rt->nccl) return;
  if (__atomic_exchange_n(&rt->watching, 0, __ATOMIC_ACQ_REL)) pthread_join(rt->watchdog, NULL);
  dit_status_free(run_ranks(rt, rank_nccl_destroy, NULL));
  pthread_rwlock_destroy(&rt->nlock);
  rt->nccl = 0;
}

const char *dit_runtime_collectives(const dit_runtime_t *rt) {
  if (rt->m->topology.world < 2) return "none (one rank)";
  if (rt->nccl) return "NCCL";
  if (rt->process) return "TCP between processes";
  return rt->ranks[0].be->host_memory && !rt->ranks[0].stage ? "in-process" : "in-process, staged through host memory";
}

static dit_status_t rank_step(rank_rt_t *rt, dit_comm_t *comm, size_t i) {
  const dit_plan_step_t *st = &rt->plan->steps[i];
  if (dit_op_is_collective(st->kind)) return run_collective(rt, comm, st);
  dit_tensor_t *ins = rt->step_tensors, *outs = rt->step_tensors + DIT_PLAN_MAX_IN;
  for (int k = 0; k < st->n_in; k++) ins[k] = rt->bound[st->in[k]];
  for (int k = 0; k < st->n_out; k++) outs[k] = rt->bound[st->out[k]];
  return rt->be->run_step(rt->be_state, i, st, ins, outs);
}

static dit_status_t rank_forward_steps(rank_rt_t *rt, dit_comm_t *comm);

static dit_status_t rank_forward(rank_rt_t *rt, dit_comm_t *comm) {
  if (rt->graph == 1) {
    /* Record once; every forward, the first too, replays the graph. */
    DIT_RETURN_IF(rt->be->capture_begin(rt->be_state));
    dit_status_t s = rank_forward_steps(rt, comm);
    dit_status_t e = rt->be->capture_end(rt->be_state);
    if (s) {
      dit_status_free(e);
      return dit_status_annotate(s, "capturing the forward");
    }
    DIT_RETURN_IF(e);
    rt->graph = 2;
  }
  if (rt->graph == 2) {
    DIT_RETURN_IF(rt->be->replay(rt->be_state));
    return rt->be->synchronize(rt->be_state);
  }
  return rank_forward_steps(rt, comm);
}

static dit_status_t rank_forward_steps(rank_rt_t *rt, dit_comm_t *comm) {
  const dit_plan_t *p = rt->plan;
  for (size_t i = 0; i < p->n_steps; i++) {
    dit_status_t s = rt->offload ? dit_offload_before_step(rt->offload, i) : DIT_OK;
    if (!s) s = rank_step(rt, comm, i);
    if (!s && rt->offload) s = dit_offload_after_step(rt->offload, i);
    if (s) {
      s = dit_status_annotate(s, "step %zu (%s, block %d, '%s')", i, dit_op_info(p->steps[i].kind)->name, p->steps[i].block,
                              p->values[p->steps[i].out[0]].name);
      if (dit_status_code(s) != DIT_CODE_ABORTED) {
        if (comm) dit_comm_abort(comm, rt->rank, dit_status_message(s));
        if (rt->owner->nccl) nccl_abort_all(rt->owner, rt->rank, dit_status_message(s));
      }
      return s;
    }
  }
  if (rt->graph == 1) return DIT_OK; /* nothing runs while capturing */
  dit_status_t s = rt->be->synchronize(rt->be_state);
  return rt->owner->nccl ? nccl_after_sync(rt->owner, s) : s;
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

dit_status_t dit_runtime_set_input(dit_runtime_t *rt, const char *name, const dit_tensor_t *src) {
  /* Every rank sees the whole input; each takes the part its plan reads. */
  for (int r = 0; r < rt->n_ranks; r++) DIT_RETURN_IF(rank_set_input(&rt->ranks[r], name, src));
  return DIT_OK;
}

static dit_status_t rank_forward_job(dit_runtime_t *rt, rank_rt_t *k, void *arg) {
  (void)arg;
  return rank_forward(k, rt->n_ranks > 1 ? rt->comm : NULL);
}

dit_status_t dit_runtime_forward(dit_runtime_t *rt) {
  dit_status_t s = run_ranks(rt, rank_forward_job, NULL);
  return s && rt->process ? dit_status_annotate(s, "rank %d", rt->ranks[0].rank) : s;
}

dit_status_t dit_runtime_output(dit_runtime_t *rt, const char *name, dit_tensor_t *out_view) {
  return dit_runtime_output_lane(rt, 0, name, out_view);
}

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

int dit_runtime_offload_stats(const dit_runtime_t *rt, dit_offload_stats_t *out) {
  if (!rt->ranks[0].offload) return 0;
  *out = dit_offload_engine_stats(rt->ranks[0].offload);
  return 1;
}

dit_status_t dit_runtime_offload_breakdown(dit_runtime_t *rt, double *stall_ms, double *host_ms) {
  if (!rt->ranks[0].offload) return DIT_ERR(FAILED_PRECONDITION, "the bundle streams no weights");
  return dit_offload_engine_breakdown(rt->ranks[0].offload, stall_ms, host_ms);
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
  DIT_RETURN_IF(be->pin_host(r->be_state, r->weights_map.data, total, &host));
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

/* Step-level access works on single-rank runs (cross-backend parity of one plan). */
const dit_plan_t *dit_runtime_plan(const dit_runtime_t *rt) { return rt->ranks[0].plan; }

dit_status_t dit_runtime_step(dit_runtime_t *rt, size_t i) {
  if (rt->n_ranks != 1) return DIT_ERR(UNIMPLEMENTED, "step-by-step runs take single-rank bundles (this one has %d ranks)", rt->n_ranks);
  rank_rt_t *r0 = &rt->ranks[0];
  if (i >= r0->plan->n_steps) return DIT_ERR(OUT_OF_RANGE, "step %zu of %zu", i, r0->plan->n_steps);
  /* With offload, the weight schedule runs too (steps are then taken in plan order). */
  dit_status_t s = r0->offload ? dit_offload_before_step(r0->offload, i) : DIT_OK;
  if (!s) s = rank_step(r0, NULL, i);
  if (!s && r0->offload) s = dit_offload_after_step(r0->offload, i);
  DIT_RETURN_IF_ERROR(s, "step %zu (%s)", i, dit_op_info(r0->plan->steps[i].kind)->name);
  return r0->be->synchronize(r0->be_state);
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
