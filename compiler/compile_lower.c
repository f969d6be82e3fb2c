/* The lowering: a planned graph becomes the execution plan (values, steps), its kernels
 * (GPU targets), and, with --offload, each rank's typed offload section from the F* plan. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/plan_memory.h"
#include "base/hw_profile.h"
#include "compiler/codegen_cuda.h"
#include "compiler/compile_internal.h"
#include "passes/offload.h"

/* One groupnorm (op i, copied: appending moves the ops) as groupnorm_stats and groupnorm_apply
 * appended to the graph; the apply takes over its output value, so its readers, name and output
 * role stay. Sets *done when the shape leaves it as it is. */
static dit_status_t split_groupnorm(dit_graph_t *g, int32_t i, int *done) {
  const dit_op_t op = *dit_graph_cop_at(g, i);
  const dit_value_t *x = dit_graph_cvalue(g, op.in[0]), *y = dit_graph_cvalue(g, op.out[0]);
  const int64_t B = x->dims[0], C = x->dims[x->rank - 1];
  const dit_attr_t *ga = dit_attrs_find(&op.attrs, "groups"), *ea = dit_attrs_find(&op.attrs, "eps");
  if (!ga || !ea) return DIT_ERR(INTERNAL, "lowering: groupnorm '%s' lacks its groups or eps", y->name);
  const int64_t S = B > 0 && C > 0 ? dit_cuda_groupnorm_slices(B, dit_value_numel(x) / (B * C), C, ga->i) : 0;
  *done = 0;
  if (!S) return DIT_OK;
  dit_attrs_t sa = {0}, aa = {0};
  if (dit_attrs_set_int(&sa, "groups", ga->i) || dit_attrs_set_int(&sa, "slices", S) || dit_attrs_set_float(&aa, "eps", ea->f))
    return DIT_ERR(RESOURCE_EXHAUSTED, "lowering: out of memory");
  char name[512];
  snprintf(name, sizeof name, "%s.stats", y->name ? y->name : "groupnorm");
  const dit_dtype_t dt = y->dtype;
  dit_graph_set_block(g, op.block);
  dit_vid_t ins[4] = {op.in[0], dit_graph_op(g, DIT_OP_GROUPNORM_STATS, &op.in[0], 1, &sa, DIT_F32, name), op.in[1], op.in[2]};
  const dit_vid_t tmp = ins[1] < 0 ? -1 : dit_graph_op(g, DIT_OP_GROUPNORM_APPLY, ins, 4, &aa, dt, name);
  dit_graph_set_block(g, -1);
  if (tmp < 0) return dit_status_make(dit_status_code(dit_graph_status(g)), "%s", dit_status_message(dit_graph_status(g)));
  /* The apply writes the groupnorm's value; its own becomes an orphan that compaction drops. */
  const int32_t a = dit_graph_num_ops(g) - 1;
  dit_graph_op_at(g, a)->out[0] = op.out[0];
  dit_graph_value(g, op.out[0])->producer = a;
  dit_graph_value(g, tmp)->producer = -1;
  *done = 1;
  return DIT_OK;
}

dit_status_t dit_compile_lower_target(const char *target, dit_graph_t *g, int *split) {
  if (split) *split = 0;
  if (!strcmp(target, "cpu")) return DIT_OK;
  const int32_t n = dit_graph_num_ops(g);
  uint8_t *keep = malloc(3 * (size_t)n + 1), *was_split = malloc((size_t)n + 1);
  int32_t *order = malloc((3 * (size_t)n + 1) * sizeof *order);
  dit_status_t s = keep && was_split && order ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "lowering: out of memory");
  int32_t count = 0;
  for (int32_t i = 0; !s && i < n; i++) {
    int done = 0;
    if (dit_graph_cop_at(g, i)->kind == DIT_OP_GROUPNORM) s = split_groupnorm(g, i, &done);
    was_split[i] = (uint8_t)done;
    count += done;
  }
  if (!s && count) {
    /* Drop the split groupnorms (the appended pairs keep their order at the end), then put each
     * pair where its groupnorm was. */
    for (int32_t i = 0; i < n + 2 * count; i++) keep[i] = i >= n || !was_split[i];
    s = dit_graph_compact(g, keep);
    int32_t m = 0, dropped = 0, pair = n - count;
    for (int32_t i = 0; !s && i < n; i++) {
      if (was_split[i]) {
        order[m++] = pair++;
        order[m++] = pair++;
        dropped++;
      } else {
        order[m++] = i - dropped;
      }
    }
    if (!s) s = dit_graph_reorder(g, order);
  }
  if (!s && split) *split = count;
  free(keep);
  free(was_split);
  free(order);
  return s;
}

dit_status_t dit_compile_lower(const dit_graph_t *g, uint64_t arena_bytes, dit_plan_t **out) {
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
  dit_status_t u = dit_graph_check_updates(g);
  if (u) {
    dit_plan_free(p);
    return u;
  }
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
    pv->updates = pv->storage == DIT_STORAGE_OUTPUT ? val->updates : -1;
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


/* ---- kernels ---- */

dit_status_t dit_compile_kernels(const char *target, const dit_graph_t *g, dit_plan_t *plan, dit_bundle_writer_t *w,
                                 uint64_t *module_sizes, cJSON *summary, dit_compile_progress_t *pr) {
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
    dit_compile_progress(pr, "codegen %s: %d kernel steps (%d MLIR, %d NVRTC), %d library GEMM steps; %d modules compiled (%.2fs), %d from the cache",
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


/* ---- the offload sections ---- */

static uint64_t resident_whole_tensors(void *layout, uint64_t offset, uint64_t bytes, uint64_t want) {
  return dit_manifest_weights_split(layout, offset, offset + bytes, offset + want) - offset;
}

/* Where one build's blocks lie in its shard's blob: per block the span of the tensors its ops
 * read (membership from the graph), the sum of their bytes, and per layout tensor its block
 * (-1 outside the blocks). The plan binds each weight value to the tensor of its ref. */
typedef struct block_spans {
  uint64_t *lo, *hi, *bytes;
  /* The weights outside the blocks as the runtime holds them: [0, head_bytes) and
   * [tail_offset, tail_offset + tail_bytes), alignment padding included. */
  uint64_t head_bytes, tail_offset, tail_bytes;
} block_spans_t;

static void spans_free(block_spans_t *sp) { free(sp->lo), free(sp->hi), free(sp->bytes); }

static dit_status_t block_spans(const dit_rank_build_t *rb, const dit_manifest_weights_t *lay, int n, block_spans_t *sp) {
  memset(sp, 0, sizeof *sp);
  const size_t nv = (size_t)dit_graph_num_values(rb->g);
  int32_t *vblock = calloc(nv + 1, sizeof *vblock);
  sp->lo = calloc((size_t)n, sizeof *sp->lo), sp->hi = calloc((size_t)n, sizeof *sp->hi), sp->bytes = calloc((size_t)n, sizeof *sp->bytes);
  if (!vblock || !sp->lo || !sp->hi || !sp->bytes) {
    free(vblock);
    spans_free(sp);
    return DIT_ERR(RESOURCE_EXHAUSTED, "offload plan: out of memory");
  }
  dit_offload_weight_blocks(rb->g, vblock);
  for (int i = 0; i < n; i++) sp->lo[i] = UINT64_MAX;
  for (size_t t = 0; t < lay->n_tensors; t++) {
    const dit_manifest_tensor_t *e = &lay->tensors[t];
    int32_t blk = -1;
    for (size_t v = 0; v < rb->plan->n_values && v < nv && blk < 0; v++) /* lowering keeps value ids */
      if (rb->plan->values[v].storage == DIT_STORAGE_WEIGHT && !strcmp(rb->plan->values[v].ref, e->name)) blk = vblock[v];
    if (blk < 0 || blk >= n) continue;
    sp->bytes[blk] += e->nbytes;
    if (e->offset < sp->lo[blk]) sp->lo[blk] = e->offset;
    if (e->offset + e->nbytes > sp->hi[blk]) sp->hi[blk] = e->offset + e->nbytes;
  }
  free(vblock);
  for (int i = 0; i < n; i++)
    if (sp->lo[i] == UINT64_MAX) {
      spans_free(sp);
      return DIT_ERR(UNIMPLEMENTED, "offload plan: block %d reads no weights of its own; every block must hold some to stream", i);
    }
  const uint64_t first = sp->lo[0], last = sp->hi[n - 1];
  sp->tail_offset = UINT64_MAX;
  for (size_t t = 0; t < lay->n_tensors; t++) { /* the tail starts at its first tensor: alignment kept */
    const dit_manifest_tensor_t *x = &lay->tensors[t];
    if (x->offset + x->nbytes <= first && x->offset + x->nbytes > sp->head_bytes) sp->head_bytes = x->offset + x->nbytes;
    if (x->offset >= last && x->offset < sp->tail_offset) sp->tail_offset = x->offset;
  }
  if (sp->tail_offset == UINT64_MAX) sp->tail_offset = last;
  for (size_t t = 0; t < lay->n_tensors; t++) {
    const dit_manifest_tensor_t *x = &lay->tensors[t];
    if (x->offset >= last && x->offset + x->nbytes - sp->tail_offset > sp->tail_bytes) sp->tail_bytes = x->offset + x->nbytes - sp->tail_offset;
  }
  return DIT_OK;
}

/* The typed section of one build's plan: its own shard's ranges (a tensor-parallel shard may
 * differ from rank 0's by a few tensors, biases added once), rank 0's planned residency in
 * whole chunks of its own range, and its own collectives as yield points. */
static dit_status_t fill_section(const dit_hw_profile_t *hw, const dit_offload_request_t *req, const dit_offload_result_t *res,
                                 const dit_offload_block_t *bl, int n, uint64_t overhead, dit_rank_build_t *rb,
                                 const dit_manifest_weights_t *lay) {
  block_spans_t sp;
  DIT_RETURN_IF(block_spans(rb, lay, n, &sp));
  dit_plan_offload_t *o = &rb->plan->offload;
  dit_plan_offload_clear(o);
  o->mode = req->mode == DIT_OFFLOAD_CHUNKED ? DIT_PLAN_OFFLOAD_CHUNKED : DIT_PLAN_OFFLOAD_LAYERWISE;
  o->chunk_bytes = req->chunk_bytes;
  o->overhead_bytes = overhead;
  o->predicted_peak_bytes = res->peak_bytes, o->resident_peak_bytes = res->none_peak_bytes;
  o->predicted_step_ms = res->step_ms, o->resident_step_ms = res->none_step_ms;
  o->profile = *hw;
  o->head_bytes = sp.head_bytes, o->tail_offset = sp.tail_offset, o->tail_bytes = sp.tail_bytes;
  dit_status_t s = (o->blocks = calloc((size_t)n, sizeof *o->blocks)) ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "offload plan: out of memory");
  if (!s) o->n_blocks = (size_t)n;
  for (int i = 0; !s && i < n; i++) {
    dit_plan_offload_block_t *x = &o->blocks[i];
    x->index = (uint32_t)i;
    x->lo = sp.lo[i], x->hi = sp.hi[i];
    const uint64_t range = x->hi - x->lo, unit = o->mode == DIT_PLAN_OFFLOAD_CHUNKED ? o->chunk_bytes : range;
    x->chunks = (uint32_t)((range + unit - 1) / unit);
    x->resident_chunks = bl[i].resident_chunks < x->chunks ? bl[i].resident_chunks : x->chunks;
    const uint64_t want = (uint64_t)x->resident_chunks * unit;
    x->split = dit_manifest_weights_split(lay, x->lo, x->hi, x->lo + (want < range ? want : range));
    /* Yield points: the block's collectives; step i of the plan is op i of the graph. */
    dit_offload_windows_t win;
    s = dit_offload_block_windows(hw, rb->g, i, req->chunk_bytes ? req->chunk_bytes : 1, &win);
    if (s) break;
    x->n_yields = (uint32_t)win.n_yields;
    x->yield_steps = calloc((size_t)win.n_yields + 1, sizeof *x->yield_steps);
    x->window_chunks = calloc((size_t)win.n_yields + 1, sizeof *x->window_chunks);
    if (!x->yield_steps || !x->window_chunks) s = DIT_ERR(RESOURCE_EXHAUSTED, "offload plan: out of memory");
    for (int k = 0; !s && k < win.n_yields; k++) {
      const size_t step = (size_t)win.yield_ops[k];
      if (step >= rb->plan->n_steps || rb->plan->steps[step].block != i || !dit_op_is_collective(rb->plan->steps[step].kind))
        s = DIT_ERR(INTERNAL, "offload plan: op %zu of block %d is no collective step of the plan", step, i);
      else x->yield_steps[k] = (uint32_t)step;
    }
    for (int k = 0; !s && k <= win.n_yields; k++) x->window_chunks[k] = win.window_chunks[k];
    x->flops = bl[i].flops, x->f_star = bl[i].f_star, x->t_comp_ms = bl[i].t_comp_ms, x->t_pref_ms = bl[i].t_pref_ms;
    x->t_coll_ms = bl[i].t_coll_ms, x->resident = bl[i].resident;
  }
  /* The first and last steps of each block, as the parser derives them. */
  for (int i = 0; !s && i < n; i++) o->blocks[i].first_step = SIZE_MAX;
  for (size_t k = 0; !s && k < rb->plan->n_steps; k++) {
    const int32_t b = rb->plan->steps[k].block;
    if (b < 0 || b >= n) continue;
    if (o->blocks[b].first_step == SIZE_MAX) o->blocks[b].first_step = k;
    o->blocks[b].last_step = k;
  }
  spans_free(&sp);
  return s;
}

static dit_status_t offload_request(const dit_compile_options_t *o, dit_offload_request_t *req, dit_hw_profile_t *hw) {
  memset(req, 0, sizeof *req);
  if (!strcmp(o->offload, "layerwise")) req->mode = DIT_OFFLOAD_LAYERWISE;
  else if (!strcmp(o->offload, "chunked")) req->mode = DIT_OFFLOAD_CHUNKED;
  else return DIT_ERR(INVALID_ARGUMENT, "--offload %s: expected none, layerwise or chunked", o->offload);
  req->chunk_bytes = (uint64_t)(o->chunk_mb * (1 << 20));
  req->residency = o->residency;
  req->memory_budget_bytes = o->memory_budget_gib * (double)(1u << 30);
  req->latency_target_ms = o->latency_target_ms;
  return dit_hw_profile_load(o->profile, hw);
}

/* One expert's F* plan over its rank 0's graph (bl: n blocks, filled), and with `write` its
 * section in each of its nb builds. */
static dit_status_t offload_one(const dit_offload_request_t *req0, const dit_hw_profile_t *hw, dit_rank_build_t *rb, int nb, int tp,
                                const dit_manifest_weights_t *layouts, uint64_t runtime_bytes, dit_offload_block_t *bl, int n,
                                dit_offload_result_t *res, int write) {
  dit_offload_request_t req = *req0;
  memset(bl, 0, (size_t)n * sizeof *bl);
  /* Rank 0's blocks: what a block streams is its whole byte range (alignment padding
   * included); what it keeps resident ends at a tensor boundary, as the runtime cuts it. */
  block_spans_t sp;
  DIT_RETURN_IF(block_spans(&rb[0], &layouts[0], n, &sp));
  for (int i = 0; i < n; i++) bl[i].offset = sp.lo[i], bl[i].bytes = sp.hi[i] - sp.lo[i];
  req.whole_tensors = resident_whole_tensors;
  req.ctx = (void *)&layouts[0];
  const uint64_t overhead = (uint64_t)(hw->overhead_mib * (1 << 20));
  /* Besides the blocks, the runtime holds the weights outside them (an empty range takes one
   * byte, as it allocates them) and its own allocations. */
  req.other_bytes = (sp.head_bytes ? sp.head_bytes : 1) + (sp.tail_bytes ? sp.tail_bytes : 1) + runtime_bytes + overhead;
  spans_free(&sp);
  dit_status_t s = dit_offload_plan_graph(hw, &req, rb[0].g, bl, n, res);
  for (int r = 0; !s && write && r < nb; r++) {
    s = fill_section(hw, &req, res, bl, n, overhead, &rb[r], &layouts[r % tp]);
    if (s && nb > 1) s = dit_status_annotate(s, "rank (cp %d, tp %d)", r / tp, r % tp);
  }
  return s;
}

static void offload_summary(const dit_compile_options_t *o, const dit_offload_request_t *req, const dit_hw_profile_t *hw,
                            const dit_offload_result_t *res, const dit_offload_block_t *bl, int n, cJSON *summary) {
  /* For people (and benchmarks): the plans' totals. The runtime reads the plan's section. */
  cJSON *of = cJSON_AddObjectToObject(summary, "offload");
  cJSON_AddStringToObject(of, "mode", o->offload);
  cJSON_AddNumberToObject(of, "chunk_bytes", (double)req->chunk_bytes);
  cJSON *hp = cJSON_AddObjectToObject(of, "profile");
  dit_hw_profile_add_json(hw, DIT_HW_WITH_OVERHEAD | DIT_HW_WITH_STEP_OVERHEAD | DIT_HW_WITH_COLLECTIVES, hp);
  /* The peaks count the runtime's own device memory (the profile's overhead) too. */
  cJSON_AddNumberToObject(of, "overhead_bytes", (double)(uint64_t)(hw->overhead_mib * (1 << 20)));
  cJSON_AddNumberToObject(of, "predicted_step_ms", res->step_ms);
  cJSON_AddNumberToObject(of, "resident_step_ms", res->none_step_ms);
  cJSON_AddNumberToObject(of, "predicted_peak_bytes", (double)res->peak_bytes);
  cJSON_AddNumberToObject(of, "resident_peak_bytes", (double)res->none_peak_bytes);
  double comp = 0, pref = 0, coll = 0;
  for (int i = 0; i < n; i++) comp += bl[i].t_comp_ms, pref += bl[i].t_pref_ms, coll += bl[i].t_coll_ms;
  cJSON_AddNumberToObject(of, "blocks", n);
  cJSON_AddNumberToObject(of, "t_comp_ms", comp);
  cJSON_AddNumberToObject(of, "t_pref_ms", pref);
  cJSON_AddNumberToObject(of, "t_coll_ms", coll);
  cJSON_AddNumberToObject(of, "f_star_per_block", bl[0].f_star);
}

static dit_status_t check_blocks(const dit_compile_options_t *o, const dit_rank_build_t *rb, int *n) {
  *n = dit_offload_graph_blocks(rb[0].g);
  if (*n < 1) return DIT_ERR(UNIMPLEMENTED, "--offload %s: the graph has no transformer blocks to stream", o->offload);
  if (*n > DIT_PLAN_MAX_OFFLOAD_BLOCKS) return DIT_ERR(UNIMPLEMENTED, "--offload: %d blocks, the plan holds at most %d", *n, DIT_PLAN_MAX_OFFLOAD_BLOCKS);
  return DIT_OK;
}

dit_status_t dit_compile_offload(const dit_compile_options_t *o, dit_rank_build_t *rb, int nb, int tp,
                                 const dit_manifest_weights_t *layouts, uint64_t runtime_bytes, cJSON *summary) {
  dit_offload_request_t req;
  dit_hw_profile_t hw;
  DIT_RETURN_IF(offload_request(o, &req, &hw));
  int n = 0;
  DIT_RETURN_IF(check_blocks(o, rb, &n));
  dit_offload_block_t *bl = calloc((size_t)n + 1, sizeof *bl);
  if (!bl) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  dit_offload_result_t res;
  dit_status_t s = offload_one(&req, &hw, rb, nb, tp, layouts, runtime_bytes, bl, n, &res, 1);
  if (!s) offload_summary(o, &req, &hw, &res, bl, n, summary);
  free(bl);
  return s;
}

/* ---- the expert swap ---- */

/* What one build's offload engine allocates (plan_memory's rule for the weights): the head and
 * the tail (an empty one takes a byte), the resident parts, and two slots (set: without them). */
static uint64_t engine_bytes(const dit_plan_offload_t *o, int with_slots) {
  uint64_t b = (o->head_bytes ? o->head_bytes : 1) + (o->tail_bytes ? o->tail_bytes : 1), slot = 0;
  for (size_t i = 0; i < o->n_blocks; i++) {
    b += o->blocks[i].split - o->blocks[i].lo;
    if (o->blocks[i].hi - o->blocks[i].split > slot) slot = o->blocks[i].hi - o->blocks[i].split;
  }
  return b + (with_slots ? 2 * (slot ? slot : 1) : 0);
}

/* The pipeline's device peak for rank build pair (a: transformer, b: transformer_2), as the
 * runtime allocates: b's runtime memory borrows a's arena; while a runs its last forwards b's
 * resident set comes in beside it; at the switch a's weights leave and b's slots come. */
static uint64_t swap_peak(const dit_rank_build_t *a, const dit_rank_build_t *b, int gpu, uint64_t overhead) {
  dit_plan_memory_t ma, mb;
  dit_plan_memory(a->plan, gpu, &ma);
  dit_plan_memory(b->plan, gpu, &mb);
  const uint64_t fixed_b = mb.total - (mb.arena <= ma.arena ? mb.arena : 0);
  const uint64_t window = ma.total + engine_bytes(&a->plan->offload, 1) + fixed_b + engine_bytes(&b->plan->offload, 0);
  const uint64_t after = ma.total + fixed_b + engine_bytes(&b->plan->offload, 1);
  return (window > after ? window : after) + overhead;
}

/* The same before sections exist: from the planner's figures for rank 0. */
static uint64_t swap_peak_planned(const dit_rank_build_t *a, const dit_rank_build_t *b, int gpu, const dit_offload_result_t *ra,
                                  const dit_offload_result_t *rbr, const dit_offload_block_t *blb, int n, uint64_t head_tail_b) {
  dit_plan_memory_t ma, mb;
  dit_plan_memory(a->plan, gpu, &ma);
  dit_plan_memory(b->plan, gpu, &mb);
  const uint64_t arena_b = mb.arena <= ma.arena ? mb.arena : 0;
  uint64_t set_b = head_tail_b;
  for (int i = 0; i < n; i++) set_b += blb[i].resident_bytes;
  /* ra->peak_bytes: a's runtime memory, overhead and weights; b's runtime memory without the
   * borrowed arena and its resident set come beside it; after the switch b's full peak plus
   * a's runtime memory, less the arena it borrows. */
  const uint64_t window = ra->peak_bytes + mb.total - arena_b + set_b;
  const uint64_t after = rbr->peak_bytes + ma.total - arena_b;
  return window > after ? window : after;
}

dit_status_t dit_compile_offload_experts(const dit_compile_options_t *o, dit_rank_build_t *rb, int nb, int tp,
                                         const dit_manifest_weights_t *layouts, int gpu, cJSON *summary) {
  dit_offload_request_t req;
  dit_hw_profile_t hw;
  DIT_RETURN_IF(offload_request(o, &req, &hw));
  int n = 0;
  DIT_RETURN_IF(check_blocks(o, rb, &n));
  dit_offload_block_t *bl = calloc(2 * ((size_t)n + 1), sizeof *bl);
  if (!bl) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  dit_offload_block_t *bl2 = bl + n + 1;
  dit_plan_memory_t m0, m1;
  dit_plan_memory(rb[0].plan, gpu, &m0);
  dit_plan_memory(rb[nb].plan, gpu, &m1);
  const uint64_t overhead = (uint64_t)(hw.overhead_mib * (1 << 20));
  block_spans_t sp;
  dit_status_t s = block_spans(&rb[nb], &layouts[tp], n, &sp);
  const uint64_t head_tail_b = s ? 0 : (sp.head_bytes ? sp.head_bytes : 1) + (sp.tail_bytes ? sp.tail_bytes : 1);
  if (!s) spans_free(&sp);
  dit_offload_result_t r0, r1;
  if (!s && req.memory_budget_bytes > 0) {
    /* The budget holds the whole pipeline: one resident fraction for both experts, the
     * largest whose swap peak (transformer streaming, transformer_2's resident set coming in
     * beside it) fits, found by bisection over the planner's monotone peak. */
    const double budget = req.memory_budget_bytes;
    dit_offload_request_t q = req;
    q.memory_budget_bytes = 0, q.latency_target_ms = 0;
    double lo = 0, hi = 1;
    uint64_t peak = 0;
    for (int it = 0; !s && it < 40; it++) {
      q.residency = it == 0 ? 0 : it == 1 ? 1 : (lo + hi) / 2;
      s = offload_one(&q, &hw, rb, nb, tp, layouts, m0.total, bl, n, &r0, 0);
      if (!s) s = offload_one(&q, &hw, rb + nb, nb, tp, layouts + tp, m1.total, bl2, n, &r1, 0);
      if (s) break;
      peak = swap_peak_planned(&rb[0], &rb[nb], gpu, &r0, &r1, bl2, n, head_tail_b);
      const int fits = (double)peak <= budget;
      if (it == 0 && !fits)
        s = DIT_ERR(RESOURCE_EXHAUSTED, "--memory-budget %.6g GiB: the two-expert pipeline needs %.6g GiB with every block streamed "
                    "(transformer's slots and runtime memory, transformer_2's weights outside the blocks beside them)",
                    budget / (1u << 30), (double)peak / (1u << 30));
      else if (it == 1 && fits) lo = hi = 1;
      else if (it > 1) *(fits ? &lo : &hi) = q.residency;
      if (it >= 1 && lo == hi) break;
    }
    req = q;
    req.residency = lo;
  }
  if (!s) s = offload_one(&req, &hw, rb, nb, tp, layouts, m0.total, bl, n, &r0, 1);
  if (!s) s = offload_one(&req, &hw, rb + nb, nb, tp, layouts + tp, m1.total, bl2, n, &r1, 1);
  /* The swap: transformer_2's resident set, in chunks paced into the copy time transformer's
   * own streaming leaves free behind each block's compute. */
  const uint64_t chunk = req.chunk_bytes >= 4096 ? req.chunk_bytes : 16ull << 20;
  uint32_t per_block = UINT32_MAX;
  for (int i = 0; !s && i < n; i++) {
    const dit_plan_offload_block_t *next = &rb[0].plan->offload.blocks[(i + 1) % n];
    const uint32_t hide = dit_offload_window_chunks(&hw, bl[i].flops, bl[i].steps, chunk);
    const uint64_t streamed = (next->hi - next->split + chunk - 1) / chunk;
    const uint32_t free_chunks = hide > streamed ? hide - (uint32_t)streamed : 0;
    if (free_chunks < per_block) per_block = free_chunks;
  }
  const int hidden = per_block >= 1;
  if (per_block < 1) per_block = 1;
  uint64_t most = 0, peak = 0;
  for (int r = 0; !s && r < nb; r++) {
    uint64_t bytes, chunks;
    dit_plan_swap_totals(&rb[nb + r].plan->offload, chunk, &bytes, &chunks);
    if (chunks > most) most = chunks;
    const uint64_t pk = swap_peak(&rb[r], &rb[nb + r], gpu, overhead);
    if (pk > peak) peak = pk;
  }
  if (!s && most > UINT32_MAX) s = DIT_ERR(UNIMPLEMENTED, "--offload: the expert swap takes %" PRIu64 " chunks, at most 4294967295", most);
  if (!s && per_block > most) per_block = (uint32_t)most;
  const uint64_t per_forward = (uint64_t)per_block * (uint64_t)n;
  const uint64_t forwards = per_forward ? (most + per_forward - 1) / per_forward : 1;
  if (!s && forwards > DIT_PLAN_MAX_SWAP_FORWARDS)
    s = DIT_ERR(UNIMPLEMENTED, "--offload: the expert swap needs %" PRIu64 " forwards, at most %d", forwards, DIT_PLAN_MAX_SWAP_FORWARDS);
  /* Unhidden copies cost their time on the link; the first forward after the switch loads
   * transformer_2's block 0 before it computes, as any first forward does. */
  const double chunk_ms = (double)chunk / (hw.eta_pref * hw.bw_h2d_gbs * 1e9) * 1e3;
  const double stall = bl2[0].t_pref_ms + (hidden ? 0 : (double)most * chunk_ms);
  for (int r = 0; !s && r < nb; r++) {
    dit_plan_swap_t *w = &rb[nb + r].plan->offload.swap;
    uint64_t bytes, chunks;
    dit_plan_swap_totals(&rb[nb + r].plan->offload, chunk, &bytes, &chunks);
    *w = (dit_plan_swap_t){1, bytes, chunk, (uint32_t)chunks, per_block, (uint32_t)forwards, stall, peak};
  }
  if (!s && req.memory_budget_bytes > 0 && (double)peak > o->memory_budget_gib * (double)(1u << 30))
    s = DIT_ERR(RESOURCE_EXHAUSTED, "--memory-budget %.6g GiB: the two-expert pipeline's peak is %.6g GiB on its largest rank",
                o->memory_budget_gib, (double)peak / (1u << 30));
  if (!s) {
    offload_summary(o, &req, &hw, &r0, bl, n, summary);
    cJSON *sw = dit_plan_swap_to_json(&rb[nb].plan->offload.swap, cJSON_GetObjectItem(summary, "offload"));
    if (!sw || !cJSON_AddNumberToObject(sw, "residency", req.residency)) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  free(bl);
  return s;
}

dit_status_t dit_compile_write_plan(dit_bundle_writer_t *w, dit_rank_build_t *rb) {
  char *text = NULL;
  DIT_RETURN_IF(dit_plan_to_json(rb->plan, &text));
  rb->plan_size = strlen(text);
  dit_status_t s = dit_bundle_writer_add_blob(w, text, rb->plan_size, rb->plan_hash);
  free(text);
  return s;
}
