#include "runtime/offload_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

/* Events: the fork and join of the copy queue, the yield point, then per block "slot full"
 * (READY) and "block finished" (DONE). */
enum { EV_FORK = 0, EV_JOIN = 1, EV_YIELD = 2, EV_BLOCKS = 3 };
/* Timed events around each block's wait for its slot: the prefetch stall on the compute queue. */
#define EV_STALL(b, after) (DIT_BACKEND_TIMED_EVENTS + 2 * (b) + (after))

typedef struct eng_block {
  uint64_t lo, hi;         /* the block's byte range in the weight blob */
  uint64_t split;          /* [lo, split) resident, [split, hi) streamed */
  uint32_t chunks, resident_chunks; /* the plan's, of the whole range */
  uint32_t streamed;       /* chunks of [split, hi) */
  size_t first, last;      /* its steps */
  size_t *yields;          /* its collective steps, ascending */
  int n_yields;
  uint32_t *windows;       /* chunked: per window of its compute (n_yields + 1), the chunks
                              of the next block's load that hide behind it */
  uint8_t *resident;       /* backend memory holding [lo, split) */
} eng_block_t;

struct dit_offload_engine {
  const dit_backend_vtable_t *be;
  void *st;
  const uint8_t *host;
  int chunked, n;
  uint64_t chunk;
  eng_block_t *b;
  uint8_t *slot[2];
  uint8_t *head, *tail;    /* weights before the first block and after the last */
  uint64_t head_bytes, tail_lo, tail_bytes;
  int *step_block;         /* per step: the block it belongs to, or -1 */
  /* the prefetch in flight: block pf, groups issued so far of pf_groups; group g is its
   * streamed chunks [pf_bound[g], pf_bound[g + 1]) */
  int pf, pf_group, pf_groups;
  int pace;                /* the block whose collectives pace it, or -1 */
  uint32_t *pf_bound;
  int timed;               /* stall events recorded (blocks fit the timed event range) */
  /* Host pacing (the variant): groups that reached their yield point wait, not on the copy
   * queue, but on the host until it sees the collective's event complete. */
  int host_paced, due, paused_ev;
  /* Across forwards (an even number of blocks, no captured graph): the last block that uses
   * slot 0 is followed by the next forward's block 0 in it, so repeated forwards (a sampler's
   * loop) load block 0 behind the last block's compute instead of before the first's. */
  int wrap, wrapped, primed;
  double host_s;           /* host time inside the hooks during the current forward */
  dit_offload_stats_t stats;
  /* Parking (the expert swap): the schedule kept, no device memory; loading back copies the
   * resident set part by part (head, tail, blocks' resident parts) in chunks of park_chunk,
   * cursor at part park_part, byte park_off. */
  const dit_plan_t *plan;
  const dit_manifest_weights_t *lay;
  dit_tensor_t *bound;
  uint64_t slot_size;
  int parked;              /* 1 parked, 2 resident set allocated and coming in, 0 on the device */
  uint64_t park_chunk;
  int park_part;
  uint64_t park_off;
  uint64_t released;       /* bytes given back to the backend so far */
};

int dit_offload_planned(const dit_plan_t *p) { return p->offload.mode != DIT_PLAN_OFFLOAD_NONE; }

uint64_t dit_offload_predicted_peak(const dit_plan_t *p, const dit_manifest_t *m) {
  return dit_offload_planned(p) ? p->offload.predicted_peak_bytes : m->peak_bytes;
}

uint64_t dit_offload_overhead(const dit_plan_t *p) { return dit_offload_planned(p) ? p->offload.overhead_bytes : 0; }

/* Gives every device allocation back, counting the bytes as the backend counted them. */
static void release_device(dit_offload_engine_t *e) {
  for (int i = 0; e->b && i < e->n; i++)
    if (e->b[i].resident) {
      e->be->release(e->st, e->b[i].resident);
      e->b[i].resident = NULL;
      e->released += e->b[i].split - e->b[i].lo;
    }
  for (int k = 0; k < 2; k++)
    if (e->slot[k]) {
      e->be->release(e->st, e->slot[k]);
      e->slot[k] = NULL;
      e->released += e->slot_size ? e->slot_size : 1;
    }
  if (e->head) e->be->release(e->st, e->head), e->released += e->head_bytes ? e->head_bytes : 1;
  if (e->tail) e->be->release(e->st, e->tail), e->released += e->tail_bytes ? e->tail_bytes : 1;
  e->head = e->tail = NULL;
}

void dit_offload_engine_destroy(dit_offload_engine_t *e) {
  if (!e) return;
  release_device(e);
  for (int i = 0; e->b && i < e->n; i++) {
    free(e->b[i].yields);
    free(e->b[i].windows);
  }
  free(e->b);
  free(e->pf_bound);
  free(e->step_block);
  free(e);
}

/* Which block a weight byte offset belongs to, or -1 (resident). */
static int block_of(const dit_offload_engine_t *e, uint64_t off) {
  for (int i = 0; i < e->n; i++)
    if (off >= e->b[i].lo && off < e->b[i].hi) return i;
  return -1;
}

/* The schedule from the plan's typed section: ranges, resident prefixes, chunk counts, yield
 * points and windows, each block's steps and which block every step belongs to. */
static dit_status_t take_schedule(dit_offload_engine_t *e, const dit_plan_t *plan) {
  const dit_plan_offload_t *o = &plan->offload;
  e->chunked = o->mode == DIT_PLAN_OFFLOAD_CHUNKED;
  e->stats.mode = e->chunked ? "chunked" : "layerwise";
  e->chunk = o->chunk_bytes;
  e->head_bytes = o->head_bytes, e->tail_lo = o->tail_offset, e->tail_bytes = o->tail_bytes;
  int most = 0;
  for (int i = 0; i < e->n; i++) {
    const dit_plan_offload_block_t *b = &o->blocks[i];
    eng_block_t *x = &e->b[i];
    x->lo = b->lo, x->hi = b->hi, x->split = b->split;
    x->chunks = b->chunks, x->resident_chunks = b->resident_chunks;
    x->first = b->first_step, x->last = b->last_step;
    x->n_yields = (int)b->n_yields;
    x->yields = calloc((size_t)x->n_yields + 1, sizeof *x->yields);
    x->windows = calloc((size_t)x->n_yields + 1, sizeof *x->windows);
    if (!x->yields || !x->windows) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    for (int k = 0; k < x->n_yields; k++) x->yields[k] = b->yield_steps[k];
    for (int k = 0; b->window_chunks && k <= x->n_yields; k++) x->windows[k] = b->window_chunks[k];
    if (x->n_yields > most) most = x->n_yields;
  }
  e->step_block = malloc((plan->n_steps + 1) * sizeof *e->step_block);
  if (!e->step_block || !(e->pf_bound = calloc((size_t)most + 2, sizeof *e->pf_bound))) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < plan->n_steps; k++) e->step_block[k] = plan->steps[k].block >= 0 ? plan->steps[k].block : -1;
  return DIT_OK;
}

/* Every weight value: resident memory or its block's slot (block i runs from slot i % 2). */
static void bind_weights(dit_offload_engine_t *e) {
  const dit_plan_t *plan = e->plan;
  const dit_manifest_weights_t *lay = e->lay;
  dit_tensor_t *bound = e->bound;
  for (size_t v = 0; v < plan->n_values; v++) {
    const dit_plan_value_t *pv = &plan->values[v];
    if (pv->storage != DIT_STORAGE_WEIGHT) continue;
    for (size_t t = 0; t < lay->n_tensors; t++) {
      const dit_manifest_tensor_t *x = &lay->tensors[t];
      if (strcmp(x->name, pv->ref)) continue;
      const int blk = block_of(e, x->offset);
      if (blk >= 0 && x->offset < e->b[blk].split) bound[v].data = e->b[blk].resident + (x->offset - e->b[blk].lo);
      else if (blk >= 0) bound[v].data = e->slot[blk % 2] + (x->offset - e->b[blk].split);
      else if (x->offset < e->b[0].lo) bound[v].data = e->head + x->offset;
      else bound[v].data = e->tail + (x->offset - e->tail_lo);
      break;
    }
  }
}

static dit_status_t alloc_up(dit_offload_engine_t *e, uint64_t bytes, const char *what, const void *src, uint8_t **out) {
  void *p = NULL;
  DIT_RETURN_IF(e->be->alloc(e->st, bytes ? bytes : 1, what, &p));
  *out = p;
  return bytes && src ? e->be->upload(e->st, p, src, bytes) : DIT_OK;
}

/* The device memory of the resident set (copied from the host when `upload`) and, with
 * `slots`, the two staging slots. */
static dit_status_t alloc_device(dit_offload_engine_t *e, int upload, int slots) {
  dit_status_t s = DIT_OK;
  const uint8_t *h = upload ? e->host : NULL;
  if (!s) s = alloc_up(e, e->head_bytes, "weights before the blocks", h, &e->head);
  if (!s) s = alloc_up(e, e->tail_bytes, "weights after the blocks", h ? h + e->tail_lo : NULL, &e->tail);
  for (int i = 0; !s && i < e->n; i++) {
    eng_block_t *x = &e->b[i];
    const uint64_t res = x->split - x->lo;
    if (res) s = alloc_up(e, res, "resident block weights", h ? h + x->lo : NULL, &x->resident);
  }
  for (int k = 0; k < 2 && !s && slots; k++) {
    void *p = NULL;
    s = e->be->alloc(e->st, e->slot_size, "weight staging slot", &p);
    e->slot[k] = p;
  }
  return s;
}

dit_status_t dit_offload_engine_create(const dit_manifest_t *m, const dit_plan_t *plan, const dit_manifest_weights_t *lay,
                                       const dit_backend_vtable_t *be, void *be_state, const void *host_weights,
                                       size_t host_size, dit_tensor_t *bound, dit_offload_engine_t **out) {
  return dit_offload_engine_create_parked(m, plan, lay, be, be_state, host_weights, host_size, bound, 0, out);
}

dit_status_t dit_offload_engine_create_parked(const dit_manifest_t *m, const dit_plan_t *plan, const dit_manifest_weights_t *lay,
                                              const dit_backend_vtable_t *be, void *be_state, const void *host_weights,
                                              size_t host_size, dit_tensor_t *bound, int parked, dit_offload_engine_t **out) {
  *out = NULL;
  if (!dit_offload_planned(plan)) return DIT_ERR(INTERNAL, "offload engine: the plan has no offload section");
  if (!be->copy_enqueue || !be->mark || !be->wait)
    return DIT_ERR(UNIMPLEMENTED, "plan: field 'offload': the %s backend has no copy queue to stream weights on", be->name);
  dit_offload_engine_t *e = calloc(1, sizeof *e);
  if (!e) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  e->be = be, e->st = be_state, e->host = host_weights;
  e->plan = plan, e->lay = lay, e->bound = bound;
  e->n = (int)plan->offload.n_blocks;
  dit_status_t s = DIT_OK;
  if (EV_BLOCKS + 2 * (size_t)plan->offload.n_blocks > DIT_BACKEND_COLL_EVENTS)
    s = DIT_ERR(UNIMPLEMENTED, "plan: field 'offload.blocks': this runtime streams at most %d blocks, found %zu",
                (DIT_BACKEND_COLL_EVENTS - EV_BLOCKS) / 2, plan->offload.n_blocks);
  if (!s && !(e->b = calloc((size_t)e->n, sizeof *e->b))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = take_schedule(e, plan);
  if (!s && (e->b[e->n - 1].hi > host_size || e->tail_lo + e->tail_bytes > host_size))
    s = DIT_ERR(INTERNAL, "weights blob of %zu bytes shorter than its offload schedule", host_size);
  if (be->pin_host && !s) {
    const void *pinned = NULL;
    s = be->pin_host(be_state, host_weights, host_size, &pinned);
    if (!s) e->host = pinned;
  }
  /* Resident memory: the weights outside the blocks and each block's first resident chunks
   * (a parked engine allocates none until it is loaded back). */
  uint64_t slot = 0;
  e->stats.resident_bytes = e->head_bytes + e->tail_bytes;
  for (int i = 0; !s && i < e->n; i++) {
    eng_block_t *x = &e->b[i];
    /* [lo, split) resident: the resident chunks cut back to whole tensors (the plan's check
     * proved it), so every GEMM operand stays contiguous without assembling it. */
    const uint64_t range = x->hi - x->lo, unit = e->chunked ? e->chunk : range;
    const uint64_t res = x->split - x->lo, str = x->hi - x->split;
    x->streamed = (uint32_t)((str + unit - 1) / unit);
    e->stats.resident_bytes += res;
    e->stats.streamed_bytes += str;
    if (str > slot) slot = str;
  }
  e->slot_size = slot;
  e->parked = parked;
  if (!s && !parked) s = alloc_device(e, 1, 1);
  if (s) {
    dit_offload_engine_destroy(e);
    return s;
  }
  e->stats.blocks = e->n;
  e->wrap = 1;
  e->timed = be->elapsed_ms && DIT_BACKEND_TIMED_EVENTS + 2 * e->n <= DIT_BACKEND_MAX_EVENTS;
  e->stats.chunk_bytes = e->chunked ? e->chunk : 0;
  e->stats.slot_bytes = 2 * slot;
  e->stats.total_weight_bytes = host_size;
  e->stats.predicted_peak_bytes = dit_offload_predicted_peak(plan, m);
  if (!parked) bind_weights(e);
  *out = e;
  return DIT_OK;
}

/* Copies streamed chunks [c0, c1) of block b from the host into its slot. */
static dit_status_t copy_chunks(dit_offload_engine_t *e, int b, uint32_t c0, uint32_t c1) {
  const eng_block_t *x = &e->b[b];
  const uint64_t str = x->hi - x->split, unit = e->chunked ? e->chunk : x->hi - x->lo;
  uint8_t *slot = e->slot[b % 2];
  for (uint32_t c = c0; c < c1; c++) {
    const uint64_t off = (uint64_t)c * unit, n = off + unit > str ? str - off : unit;
    DIT_RETURN_IF(e->be->copy_enqueue(e->st, slot + off, e->host + x->split + off, n, 0));
  }
  return DIT_OK;
}

/* Issues the next group of block pf's streamed chunks; after the last, marks the slot full. */
static dit_status_t issue_group(dit_offload_engine_t *e) {
  const int g = e->pf_group;
  DIT_RETURN_IF(copy_chunks(e, e->pf, e->pf_bound[g], e->pf_bound[g + 1]));
  if (++e->pf_group == e->pf_groups) DIT_RETURN_IF(e->be->mark(e->st, 1, EV_BLOCKS + e->pf));
  return DIT_OK;
}

/* Starts block b's prefetch. In chunked mode it is paced behind block `pace`, the one that
 * computes meanwhile (-1: none): one group per window of that block's compute, group k going
 * out once the collective before window k is done, each window taking the chunks that hide
 * behind it, in order. What the windows cannot hide (a block below F*) goes out first, at
 * once: it would cost its time on the shared link beside the collectives or after them, and
 * beside them it keeps the link busy while they wait on the other rank. */
static dit_status_t start_prefetch(dit_offload_engine_t *e, int b, int pace) {
  const uint32_t streamed = e->b[b].streamed;
  e->pf = b;
  e->pace = pace;
  e->pf_group = 0;
  e->pf_groups = e->chunked && pace >= 0 ? e->b[pace].n_yields + 1 : 1;
  uint64_t room = 0;
  for (int g = 0; e->pf_groups > 1 && g < e->pf_groups; g++) room += e->b[pace].windows[g];
  const uint32_t over = e->pf_groups > 1 && streamed > room ? streamed - (uint32_t)room : 0;
  e->pf_bound[0] = 0;
  for (int g = 0; g < e->pf_groups; g++) {
    const uint32_t left = streamed - e->pf_bound[g];
    const uint64_t fits = e->pf_groups == 1 ? left : (uint64_t)e->b[pace].windows[g] + (g == 0 ? over : 0);
    e->pf_bound[g + 1] = e->pf_bound[g] + (g + 1 == e->pf_groups || fits > left ? left : (uint32_t)fits);
  }
  return issue_group(e);
}

static dit_status_t before_step(dit_offload_engine_t *e, size_t step);
static dit_status_t after_step(dit_offload_engine_t *e, size_t step, int done_event);

dit_status_t dit_offload_before_step(dit_offload_engine_t *e, size_t step) {
  const double t0 = dit_now_s();
  if (step == 0) e->host_s = 0;
  dit_status_t s = before_step(e, step);
  e->host_s += dit_now_s() - t0;
  return s;
}

dit_status_t dit_offload_after_step(dit_offload_engine_t *e, size_t step, int done_event) {
  const double t0 = dit_now_s();
  dit_status_t s = after_step(e, step, done_event);
  e->host_s += dit_now_s() - t0;
  return s;
}

dit_status_t dit_offload_engine_breakdown(dit_offload_engine_t *e, double *stall_ms, double *host_ms) {
  *stall_ms = 0;
  *host_ms = 1e3 * e->host_s;
  for (int b = 0; e->timed && b < e->n; b++) {
    double ms = 0;
    DIT_RETURN_IF(e->be->elapsed_ms(e->st, EV_STALL(b, 0), EV_STALL(b, 1), &ms));
    *stall_ms += ms;
  }
  return e->timed ? DIT_OK : DIT_ERR(UNIMPLEMENTED, "the %s backend does not time events", e->be->name);
}

static dit_status_t host_poll(dit_offload_engine_t *e);

static dit_status_t before_step(dit_offload_engine_t *e, size_t step) {
  if (e->host_paced) DIT_RETURN_IF(host_poll(e));
  if (step == 0) {
    /* Fork the copy queue from the compute queue, then fill both slots (slot 0 already holds
     * block 0 when the previous forward ended by loading it). */
    const int primed = e->primed;
    e->primed = e->wrapped = 0;
    DIT_RETURN_IF(e->be->mark(e->st, 0, EV_FORK));
    DIT_RETURN_IF(e->be->wait(e->st, 1, EV_FORK));
    if (!primed) DIT_RETURN_IF(start_prefetch(e, 0, -1)); /* nothing computes yet to hide it */
    if (e->n > 1) DIT_RETURN_IF(start_prefetch(e, 1, 0));
  }
  const int b = e->step_block[step];
  if (b >= 0 && e->b[b].first == step) {
    if (e->timed) DIT_RETURN_IF(e->be->mark(e->st, 0, EV_STALL(b, 0)));
    DIT_RETURN_IF(e->be->wait(e->st, 0, EV_BLOCKS + b));
    if (e->timed) DIT_RETURN_IF(e->be->mark(e->st, 0, EV_STALL(b, 1)));
  }
  return DIT_OK;
}

static dit_status_t after_step(dit_offload_engine_t *e, size_t step, int done_event) {
  const int b = e->step_block[step];
  if (b >= 0) {
    const eng_block_t *x = &e->b[b];
    /* A yield point: the next group of the prefetch in flight waits for this collective. */
    for (int k = 0; k < x->n_yields; k++)
      if (x->yields[k] == step && e->pace == b && e->pf_group < e->pf_groups && e->host_paced) {
        if (done_event < 0) DIT_RETURN_IF(e->be->mark(e->st, 0, EV_YIELD));
        e->paused_ev = done_event >= 0 ? done_event : EV_YIELD;
        e->due++;
        DIT_RETURN_IF(host_poll(e));
      } else if (x->yields[k] == step && e->pace == b && e->pf_group < e->pf_groups) {
        if (done_event >= 0) { /* the collective runs on its own queue: wait for its end there */
          DIT_RETURN_IF(e->be->wait(e->st, 1, done_event));
        } else {
          DIT_RETURN_IF(e->be->mark(e->st, 0, EV_YIELD));
          DIT_RETURN_IF(e->be->wait(e->st, 1, EV_YIELD));
        }
        DIT_RETURN_IF(issue_group(e));
      }
    if (x->last == step) {
      e->due = 0, e->paused_ev = -1; /* the block is done: whatever is left goes out now */
      while (e->pace == b && e->pf_group < e->pf_groups) DIT_RETURN_IF(issue_group(e));
      /* Block b is done with its slot: block b + 2 may fill it. */
      DIT_RETURN_IF(e->be->mark(e->st, 0, EV_BLOCKS + e->n + b));
      if (b + 2 < e->n) {
        DIT_RETURN_IF(e->be->wait(e->st, 1, EV_BLOCKS + e->n + b));
        DIT_RETURN_IF(start_prefetch(e, b + 2, b + 1));
      } else if (e->wrap && b + 2 == e->n && e->n % 2 == 0) { /* the next forward's block 0 */
        DIT_RETURN_IF(e->be->wait(e->st, 1, EV_BLOCKS + e->n + b));
        DIT_RETURN_IF(start_prefetch(e, 0, b + 1));
        e->wrapped = 1;
      }
    }
  }
  if (b == e->n - 1 && e->b[b].last == step) {
    e->primed = e->wrapped;
    /* Join: the compute queue's later work waits for every copy. */
    DIT_RETURN_IF(e->be->mark(e->st, 1, EV_JOIN));
    DIT_RETURN_IF(e->be->wait(e->st, 0, EV_JOIN));
  }
  return DIT_OK;
}

dit_offload_stats_t dit_offload_engine_stats(const dit_offload_engine_t *e) { return e->stats; }

void dit_offload_engine_across_forwards(dit_offload_engine_t *e, int on) {
  e->wrap = on;
  e->primed = e->wrapped = 0;
}

dit_status_t dit_offload_engine_pace_host(dit_offload_engine_t *e) {
  if (!e->be->query) return DIT_ERR(UNIMPLEMENTED, "host-paced prefetch: the %s backend cannot query events", e->be->name);
  e->host_paced = 1;
  e->due = 0;
  e->paused_ev = -1;
  return DIT_OK;
}

/* Host pacing: the groups due go out once the host sees the pausing collective done. */
static dit_status_t host_poll(dit_offload_engine_t *e) {
  if (!e->due || (e->paused_ev >= 0 && !e->be->query(e->st, e->paused_ev))) return DIT_OK;
  for (; e->due > 0; e->due--)
    if (e->pf_group < e->pf_groups) DIT_RETURN_IF(issue_group(e));
  e->paused_ev = -1;
  return DIT_OK;
}

/* ---- parking (the expert swap) ---- */

int dit_offload_engine_parked(const dit_offload_engine_t *e) { return e->parked; }

uint64_t dit_offload_engine_released(const dit_offload_engine_t *e) { return e->released; }

dit_status_t dit_offload_engine_park(dit_offload_engine_t *e) {
  if (e->parked == 1) return DIT_OK;
  /* Nothing of this engine may be in flight: the caller drained its queues. */
  release_device(e);
  e->parked = 1;
  e->primed = e->wrapped = 0;
  return DIT_OK;
}

dit_status_t dit_offload_engine_unpark_begin(dit_offload_engine_t *e, uint64_t chunk_bytes) {
  if (e->parked != 1) return DIT_OK;
  if (chunk_bytes < 4096) return DIT_ERR(INVALID_ARGUMENT, "offload swap: chunks of %llu bytes, at least 4096", (unsigned long long)chunk_bytes);
  dit_status_t s = alloc_device(e, 0, 0);
  if (s) {
    release_device(e);
    return s;
  }
  e->parked = 2;
  e->park_chunk = chunk_bytes;
  e->park_part = 0;
  e->park_off = 0;
  return DIT_OK;
}

/* Part k of the resident set: head, tail, then block k - 2's resident part. */
static void park_part(const dit_offload_engine_t *e, int k, uint8_t **dst, const uint8_t **src, uint64_t *bytes) {
  if (k == 0) *dst = e->head, *src = e->host, *bytes = e->head_bytes;
  else if (k == 1) *dst = e->tail, *src = e->host + e->tail_lo, *bytes = e->tail_bytes;
  else *dst = e->b[k - 2].resident, *src = e->host + e->b[k - 2].lo, *bytes = e->b[k - 2].split - e->b[k - 2].lo;
}

dit_status_t dit_offload_engine_unpark_copy(dit_offload_engine_t *e, uint32_t max_chunks, const dit_backend_vtable_t *via, void *via_state,
                                            uint32_t *out_left) {
  *out_left = 0;
  if (e->parked != 2) return DIT_OK;
  if (!via) via = e->be, via_state = e->st;
  uint32_t done = 0;
  while (e->park_part < e->n + 2 && done < max_chunks) {
    uint8_t *dst;
    const uint8_t *src;
    uint64_t bytes;
    park_part(e, e->park_part, &dst, &src, &bytes);
    if (e->park_off >= bytes) {
      e->park_part++, e->park_off = 0;
      continue;
    }
    const uint64_t n = bytes - e->park_off < e->park_chunk ? bytes - e->park_off : e->park_chunk;
    DIT_RETURN_IF(via->copy_enqueue(via_state, dst + e->park_off, src + e->park_off, n, 0));
    e->park_off += n;
    done++;
  }
  uint32_t left = 0;
  for (int k = e->park_part; k < e->n + 2; k++) {
    uint8_t *dst;
    const uint8_t *src;
    uint64_t bytes;
    park_part(e, k, &dst, &src, &bytes);
    const uint64_t from = k == e->park_part ? e->park_off : 0;
    if (bytes > from) left += (uint32_t)((bytes - from + e->park_chunk - 1) / e->park_chunk);
  }
  *out_left = left;
  return DIT_OK;
}

dit_status_t dit_offload_engine_unpark_finish(dit_offload_engine_t *e) {
  if (e->parked == 1) DIT_RETURN_IF(dit_offload_engine_unpark_begin(e, e->chunk >= 4096 ? e->chunk : 16u << 20));
  if (e->parked != 2) return DIT_OK;
  uint32_t left = 0;
  DIT_RETURN_IF(dit_offload_engine_unpark_copy(e, UINT32_MAX, NULL, NULL, &left));
  for (int k = 0; k < 2; k++) {
    void *p = NULL;
    DIT_RETURN_IF(e->be->alloc(e->st, e->slot_size, "weight staging slot", &p));
    e->slot[k] = p;
  }
  /* The copies on this engine's queue are done before anything runs from them. */
  DIT_RETURN_IF(e->be->synchronize(e->st));
  e->parked = 0;
  e->primed = e->wrapped = 0;
  bind_weights(e);
  return DIT_OK;
}
