/* The loader and plan executor: validates a bundle for this process, binds every plan value
 * to backend memory (arena, weights, io staging) and runs the steps in order. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/bundle.h"
#include "artifacts/plan.h"
#include "runtime/backend.h"
#include "runtime/ditrun.h"

struct dit_runtime {
  dit_bundle_t *bundle;
  const dit_manifest_t *m;
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
};

const dit_manifest_t *dit_runtime_manifest(const dit_runtime_t *rt) { return rt->m; }

void dit_runtime_destroy(dit_runtime_t *rt) {
  if (!rt) return;
  if (rt->be_state) {
    if (rt->io_buf)
      for (size_t i = 0; i < rt->plan->n_values; i++)
        if (rt->io_buf[i]) rt->be->release(rt->be_state, rt->io_buf[i]);
    if (rt->arena) rt->be->release(rt->be_state, rt->arena);
    if (rt->weights_dev) rt->be->release(rt->be_state, rt->weights_dev);
    rt->be->destroy(rt->be_state);
  }
  if (rt->host_out)
    for (size_t i = 0; i < rt->plan->n_values; i++) free(rt->host_out[i]);
  free(rt->host_out);
  free(rt->io_buf);
  free(rt->bound);
  free(rt->step_tensors);
  dit_file_unmap(&rt->weights_map);
  dit_plan_free(rt->plan);
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
  if (m->topology.world != 1)
    return DIT_ERR(FAILED_PRECONDITION, "manifest.json: field 'topology.world': the bundle needs %d ranks, this launch has 1",
                   m->topology.world);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (!strcmp(want, "cpu") && pages > 0 && page > 0) {
    double avail = (double)pages * (double)page;
    if ((double)m->peak_bytes > avail)
      return DIT_ERR(RESOURCE_EXHAUSTED, "manifest.json: field 'memory.peak_bytes': the bundle needs %.2f GiB, this machine has %.2f GiB",
                     (double)m->peak_bytes / (1 << 30), avail / (1 << 30));
  }
  return DIT_OK;
}

static dit_status_t bind_values(dit_runtime_t *rt) {
  dit_plan_t *p = rt->plan;
  const dit_manifest_weights_t *lay = rt->layout;
  uint8_t *wbase = rt->be->host_memory ? (uint8_t *)rt->weights_map.data : (uint8_t *)rt->weights_dev;
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
  const dit_manifest_rank_t *r0 = NULL;
  if (!s) {
    for (size_t i = 0; i < rt->m->n_ranks && !r0; i++)
      if (rt->m->ranks[i].rank == 0) r0 = &rt->m->ranks[i];
    if (!r0) s = DIT_ERR(NOT_FOUND, "manifest.json: field 'ranks': no entry for rank 0");
  }
  if (!s) {
    rt->layout = dit_manifest_find_weights(rt->m, r0->weights);
    if (!rt->layout) s = DIT_ERR(NOT_FOUND, "manifest.json: rank 0 weights blob %s has no layout in 'weights'", r0->weights);
  }
  if (!s) {
    dit_mapping_t pm;
    s = dit_bundle_map_blob(rt->bundle, r0->plan, &pm);
    if (!s) {
      char what[64];
      snprintf(what, sizeof what, "blobs/%.32s (plan)", r0->plan);
      s = dit_plan_parse((const char *)pm.data, pm.size, what, &rt->plan);
      if (!s) s = dit_plan_check_bindings(rt->plan, rt->m, rt->layout, what);
      dit_file_unmap(&pm);
    }
  }
  if (!s) s = dit_bundle_map_blob(rt->bundle, r0->weights, &rt->weights_map);
  if (!s) {
    rt->be = pick_backend(backend_name(rt->m, o));
    if (!rt->be || rt->be->abi_version != DIT_BACKEND_ABI_VERSION)
      s = DIT_ERR(INTERNAL, "backend table version mismatch");
  }
  if (!s) {
    dit_backend_config_t cfg = {o ? o->threads : 0, o ? o->device : 0, rt->m->arch, rt->m->min_driver};
    s = rt->be->create(&cfg, &rt->be_state);
  }
  if (!s && rt->be->memory_info) {
    /* Predicted peak against what the device has free, before the big allocations. */
    size_t fr = 0, tot = 0;
    s = rt->be->memory_info(rt->be_state, &fr, &tot);
    if (!s && rt->m->peak_bytes > fr)
      s = DIT_ERR(RESOURCE_EXHAUSTED, "manifest.json: field 'memory.peak_bytes': the bundle needs %.2f GiB, the device has %.2f GiB free of %.2f GiB",
                  (double)rt->m->peak_bytes / (1 << 30), (double)fr / (1 << 30), (double)tot / (1 << 30));
  }
  if (!s) {
    rt->bound = calloc(rt->plan->n_values + 1, sizeof *rt->bound);
    rt->io_buf = calloc(rt->plan->n_values + 1, sizeof *rt->io_buf);
    rt->host_out = calloc(rt->plan->n_values + 1, sizeof *rt->host_out);
    rt->step_tensors = calloc(DIT_PLAN_MAX_IN + DIT_PLAN_MAX_OUT, sizeof *rt->step_tensors);
    if (!rt->bound || !rt->io_buf || !rt->host_out || !rt->step_tensors) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s) s = rt->be->alloc(rt->be_state, rt->plan->arena_bytes ? rt->plan->arena_bytes : 1, "activation arena", &rt->arena);
  if (!s && !rt->be->host_memory) {
    s = rt->be->alloc(rt->be_state, rt->weights_map.size, "weights", &rt->weights_dev);
    if (!s) s = rt->be->upload(rt->be_state, rt->weights_dev, rt->weights_map.data, rt->weights_map.size);
  }
  if (!s) s = bind_values(rt);
  if (!s && rt->be->prepare) s = rt->be->prepare(rt->be_state, rt->plan, rt->bound, load_blob, rt->bundle);
  if (s) {
    dit_runtime_destroy(rt);
    return dit_status_annotate(s, "%s", bundle_dir);
  }
  *out = rt;
  return DIT_OK;
}

static const dit_plan_value_t *find_io(const dit_runtime_t *rt, dit_storage_t kind, const char *name, size_t *index) {
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

dit_status_t dit_runtime_set_input(dit_runtime_t *rt, const char *name, const dit_tensor_t *src) {
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

dit_status_t dit_runtime_forward(dit_runtime_t *rt) {
  const dit_plan_t *p = rt->plan;
  dit_tensor_t *ins = rt->step_tensors, *outs = rt->step_tensors + DIT_PLAN_MAX_IN;
  for (size_t i = 0; i < p->n_steps; i++) {
    const dit_plan_step_t *st = &p->steps[i];
    for (int k = 0; k < st->n_in; k++) ins[k] = rt->bound[st->in[k]];
    for (int k = 0; k < st->n_out; k++) outs[k] = rt->bound[st->out[k]];
    dit_status_t s = rt->be->run_step(rt->be_state, i, st, ins, outs);
    if (s)
      return dit_status_annotate(s, "step %zu (%s, block %d, '%s')", i, dit_op_info(st->kind)->name, st->block,
                                 p->values[st->out[0]].name);
  }
  return rt->be->synchronize(rt->be_state);
}

dit_status_t dit_runtime_output(dit_runtime_t *rt, const char *name, dit_tensor_t *out_view) {
  size_t idx;
  const dit_plan_value_t *v = find_io(rt, DIT_STORAGE_OUTPUT, name, &idx);
  if (!v) return DIT_ERR(NOT_FOUND, "output '%s': the bundle has no such output", name);
  *out_view = rt->bound[idx];
  if (!rt->be->host_memory) {
    DIT_RETURN_IF(rt->be->download(rt->be_state, rt->host_out[idx], rt->bound[idx].data, v->nbytes));
    out_view->data = rt->host_out[idx];
  }
  return DIT_OK;
}

const dit_plan_t *dit_runtime_plan(const dit_runtime_t *rt) { return rt->plan; }

dit_status_t dit_runtime_step(dit_runtime_t *rt, size_t i) {
  const dit_plan_t *p = rt->plan;
  if (i >= p->n_steps) return DIT_ERR(OUT_OF_RANGE, "step %zu of %zu", i, p->n_steps);
  const dit_plan_step_t *st = &p->steps[i];
  dit_tensor_t *ins = rt->step_tensors, *outs = rt->step_tensors + DIT_PLAN_MAX_IN;
  for (int k = 0; k < st->n_in; k++) ins[k] = rt->bound[st->in[k]];
  for (int k = 0; k < st->n_out; k++) outs[k] = rt->bound[st->out[k]];
  DIT_RETURN_IF_ERROR(rt->be->run_step(rt->be_state, i, st, ins, outs), "step %zu (%s)", i, dit_op_info(st->kind)->name);
  return rt->be->synchronize(rt->be_state);
}

dit_status_t dit_runtime_read_value(dit_runtime_t *rt, size_t v, void *host) {
  if (v >= rt->plan->n_values) return DIT_ERR(OUT_OF_RANGE, "value %zu of %zu", v, rt->plan->n_values);
  size_t n = rt->plan->values[v].nbytes;
  if (rt->be->host_memory) {
    memcpy(host, rt->bound[v].data, n);
    return DIT_OK;
  }
  return rt->be->download(rt->be_state, host, rt->bound[v].data, n);
}

dit_status_t dit_runtime_write_value(dit_runtime_t *rt, size_t v, const void *host) {
  if (v >= rt->plan->n_values) return DIT_ERR(OUT_OF_RANGE, "value %zu of %zu", v, rt->plan->n_values);
  if (rt->plan->values[v].storage == DIT_STORAGE_WEIGHT) return DIT_ERR(INVALID_ARGUMENT, "value %zu is a weight", v);
  size_t n = rt->plan->values[v].nbytes;
  if (rt->be->host_memory) {
    memcpy(rt->bound[v].data, host, n);
    return DIT_OK;
  }
  return rt->be->upload(rt->be_state, rt->bound[v].data, host, n);
}
