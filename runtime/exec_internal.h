/* The executor's internals, shared by exec.c (loading, binding, running steps) and
 * collectives.c (collective steps, and the NCCL communicators of GPU ranks). Not an interface:
 * nothing outside runtime/ includes it. */
#ifndef DIT_RUNTIME_EXEC_INTERNAL_H
#define DIT_RUNTIME_EXEC_INTERNAL_H

#include <pthread.h>

#include "artifacts/bundle.h"
#include "artifacts/plan.h"
#include "runtime/backend.h"
#include "runtime/comm/comm.h"
#include "runtime/comm/comm_nccl.h"
#include "runtime/comm/comm_tcp.h"
#include "runtime/ditrun.h"
#include "runtime/offload_engine.h"

#define DIT_COLL_GROUPS 6 /* a collective's "group" attribute: 0 tp, 1 cp, 3 Ulysses, 4 ring, 5 reuse group of usp */

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
  int graph;                 /* 0: step by step; 1: capture the next forward as a graph; 2: captured */
  dit_offload_engine_t *offload; /* streams block weights when the bundle plans it */
  int stage;                 /* collectives through host copies (always on device memory) */
  char *stage_buf;           /* their host staging */
  size_t stage_cap;
  void *coll_send, *coll_recv; /* collectives' scratch in backend memory */
  size_t coll_cap;
  dit_tcomm_t *tcomm;        /* collectives with other processes (one rank per process) */
  int device;                /* GPU ordinal */
  double *profile;           /* per op kind, seconds of a profiled forward (NULL: not profiling) */
  double *profile_steps;     /* per plan step, seconds of a profiled forward (NULL: not asked) */
  int profile_in_flight;     /* ... its steps timed by device events, not drained one by one */
  long fail_step;            /* DIT_FAIL_STEP: the step at which this rank fails, or -1 */
  int fail_die;              /* ... by exiting on the spot */
  struct dit_runtime *owner;
  int expert;                /* which expert of the runtime this rank state runs (0: transformer) */
  int mexpert;               /* that expert's index in the manifest (differs under only_expert) */
  int arena_borrowed;        /* the arena is expert 0's of the same rank (experts run one at a time) */
  int comms_borrowed;        /* the NCCL communicators are expert 0's of the same rank */
  dit_ncomm_t *nworld;       /* NCCL: the world, and the communicator of each plan group */
  dit_ncomm_t *ngroup[DIT_COLL_GROUPS];
  /* Overlapped collectives (collectives.c): the queue they run on (0: none, in order with
   * compute), per plan value the slot of the collective still writing it (-1: none), per slot
   * its value, and per step the arguments of a queued communicator call. */
  int coll_queue;
  int32_t *pending;
  int32_t slot_value[64];
  uint64_t coll_seq;
  size_t coll_step;
  struct coll_job *coll_jobs;
  struct dit_reuse_rank *reuse; /* attention-state reuse: this rank's step tags and statistics (reuse_exec.c) */
} rank_rt_t;

struct dit_runtime {
  dit_bundle_t *bundle;
  const dit_manifest_t *m;
  int n_ranks;
  rank_rt_t *ranks;          /* the active expert's: expert_ranks[active] */
  /* A two-expert bundle keeps both experts' rank states (plans, weights, backend state) from
   * one open of the bundle; forwards run the selected one. */
  int n_experts;             /* 1, or 2 for a two-expert bundle */
  int active;
  int only;                  /* only_expert: the manifest index of the one expert loaded (else 0) */
  rank_rt_t *expert_ranks[2];
  /* The expert swap (offload.swap in the incoming expert's plans): generate says which expert
   * comes next and after how many forwards of the active one; each forward of those loads its
   * share of the incoming expert's resident set between blocks. */
  int swap_next, swap_left;
  uint64_t *mem_peak;        /* per rank of this process: the most its experts held at once */
  dit_runtime_swap_stats_t swap_stats; /* rank 0's, of the latest switch */
  dit_comm_t *comm;          /* NULL for one rank */
  int process;               /* 1: this process runs only ranks[0], one rank of a launch */
  int graph_option;          /* the options' graph: 1 on, -1 off, 0 auto (dit_exec_graph_decide) */
  dit_tcomm_t *tcomm;        /* then: its collectives with the other processes */
  /* NCCL collectives: enqueued under the read lock; a failure (a rank's step, a peer that
   * died, an asynchronous NCCL error) aborts every communicator under the write lock. */
  int nccl;
  pthread_rwlock_t nlock;
  int naborted;
  char nwhy[512];
  pthread_t watchdog;
  int watching;              /* the watchdog runs while this is 1 (atomic) */
  /* The step cache's probe (dit_runtime_probe_change): the previous signal and the held base, in
   * backend memory of the rank they were made on (the active expert's rank 0 then). */
  rank_rt_t *probe_rank;
  void *probe_prev, *probe_held;
  uint64_t probe_bytes;
  dit_dtype_t probe_dtype;
  int probe_valid;           /* probe_prev holds a signal */
  size_t probe_held_value;   /* 1 + the value probe_held copies (0: none) */
  /* The step cache's block-stack residual (dit_runtime_residual), per slot: the start value's
   * copy and minus the residual, on the rank they were made on (slot = cfg lane on a bundle with
   * cfg lanes, else rank 0). */
  rank_rt_t *resid_rank[2];
  void *resid_start[2], *resid_neg[2];
  uint64_t resid_bytes[2];
  dit_dtype_t resid_dtype[2];
  int resid_valid[2];        /* resid_neg holds a residual */
  struct dit_reuse *reuse;   /* attention-state reuse, once dit_runtime_reuse_begin set it up */
};

typedef dit_status_t (*dit_rank_fn)(dit_runtime_t *rt, rank_rt_t *rank, void *arg);

/* What decides whether a rank's forward is captured once as a device graph and replayed. */
typedef struct dit_graph_facts {
  int ranks;          /* ranks in this process */
  int launched;       /* this process is one rank of a launched multi-process world */
  const char *backend; /* the backend's name */
  int backend_graphs; /* it implements capture_begin, capture_end and replay */
  int offload;        /* an offload engine streams weights (copies across forwards) */
  int parked;         /* an expert swap parks the incoming expert's weights in host memory */
  int reuse;          /* attention-state reuse leaves steps out of forwards */
  int profile;        /* a profiled forward: each step timed on its own */
} dit_graph_facts_t;

/* The graph option (1 on, -1 off, 0 auto) against the facts: *on = 1 where the forward is
 * captured. Auto takes a graph exactly where one applies: one rank in this process and no
 * launched world, a backend with graphs, no offload engine, no parked expert swap, no reuse, no
 * profiling; elsewhere no graph, without an error. On refuses what a graph cannot run (several
 * ranks, a parked swap, a backend without graphs, reuse), naming it; a profiled forward still
 * runs step by step. Off: no graph. Pure, for the unit test. */
dit_status_t dit_exec_graph_decide(int option, const dit_graph_facts_t *f, int *on);
/* Rank k's facts (reuse: attention-state reuse is about to run) through dit_exec_graph_decide,
 * into k->graph: 0 where no graph applies (a graph captured already is left unused), else 1
 * unless captured already. */
dit_status_t dit_exec_graph_resolve(rank_rt_t *k, int reuse);

/* Setting input `value` of plan to src: when a key_bound step reads it (a text mask [B, L]),
 * refuses (INVALID_ARGUMENT, naming the input, the batch item and the position) a row with a
 * nonzero after a zero, which the bound would silently ignore. */
dit_status_t dit_exec_check_mask_input(const dit_plan_t *plan, size_t value, const char *name, const dit_tensor_t *src);
/* Likewise, when a token_rows step reads it (per-token timesteps [B, T] read once a latent frame),
 * refuses a run of `group` tokens whose values are not all the first's, naming item and token. */
dit_status_t dit_exec_check_rows_input(const dit_plan_t *plan, size_t value, const char *name, const dit_tensor_t *src);

/* fn on every rank of this process, one thread each (directly when there is one); the first
 * failure for a rank's own reason wins over the ABORTED ones it caused elsewhere. */
dit_status_t dit_exec_run_ranks(dit_runtime_t *rt, dit_rank_fn fn, void *arg);

/* collectives.c: scratch for the plan's collectives, and one collective step. */
dit_status_t dit_exec_alloc_collective_scratch(rank_rt_t *rt);
dit_status_t dit_exec_run_collective(rank_rt_t *rt, dit_comm_t *comm, const dit_plan_step_t *st);

/* collectives.c, overlapped collectives (--overlap-collectives): setup after NCCL's; before
 * every step, the waits for the collectives whose outputs it reads; after a forward drained
 * every queue, settled forgets them. */
dit_status_t dit_exec_collectives_setup(dit_runtime_t *rt, const dit_runtime_options_t *o);
dit_status_t dit_exec_collectives_before_step(rank_rt_t *rt, const dit_plan_step_t *st);
void dit_exec_collectives_settled(rank_rt_t *rt);
/* After collective step st: the event its queue marks when it completes, or -1 when it ran on
 * the compute queue. */
int dit_exec_collective_done_event(const rank_rt_t *rt, const dit_plan_step_t *st);

/* collectives.c: NCCL for GPU ranks with a device each (a no-op otherwise); setup after every
 * rank is loaded, shutdown before any is destroyed. abort_all stops every collective of this
 * process (and tells the other processes); after_sync turns a drained queue's status into
 * ABORTED when that happened. */
dit_status_t dit_exec_nccl_setup(dit_runtime_t *rt, const dit_runtime_options_t *o);
void dit_exec_nccl_shutdown(dit_runtime_t *rt);
void dit_exec_nccl_abort_all(dit_runtime_t *rt, int rank, const char *why);
dit_status_t dit_exec_nccl_after_sync(dit_runtime_t *rt, dit_status_t s);

/* reuse_exec.c: attention-state reuse in the forward. forward_begin binds this forward's cache
 * copy; skip says whether plan step i is left out (measuring a reused state in diagnostic mode);
 * after_step gathers the statistics of step i; forward_end the anchor weights; forward_done (once
 * per forward, after every rank) counts the forward; free releases it all. */
void dit_reuse_forward_begin(rank_rt_t *rt);
dit_status_t dit_reuse_skip(rank_rt_t *rt, size_t i, int *skip);
dit_status_t dit_reuse_after_step(rank_rt_t *rt, size_t i);
dit_status_t dit_reuse_forward_end(rank_rt_t *rt);
/* The bytes of the rank's anchor copies (backend memory the plan's peak does not hold). */
uint64_t dit_reuse_rank_bytes(const rank_rt_t *rt);
void dit_reuse_forward_done(dit_runtime_t *rt);
void dit_reuse_free(dit_runtime_t *rt);

#endif
