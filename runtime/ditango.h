/* Selective attention-state reuse under context parallelism (DiTango: Algorithm 1 of its §4), the
 * per-step planner. Under `--cp N --cp-mode ring --reuse ditango --reuse-group G` the N key/value
 * partitions of a self-attention layer form m = N / G groups of G ranks in topology order (under
 * `--cp-mode usp --ulysses U` the N / U ring members, each a rank holding U ranks' tokens in its
 * heads / U after the all-to-all, form m = N / U / G groups: the ranks sharing a Ulysses index,
 * grouped as ring mode groups the ranks, the all-to-alls around it unchanged); a rank's
 * own group (the local group) is always computed; each of the m - 1 remote groups, named by its
 * distance o = 1..m-1 from the rank's group (group (own - o) mod m), has an attention state
 * AS = (OUT, LSE) that a step either computes or takes from the state cache. The group is the unit
 * of state: its G partitions are merged by LSE before the cache, so the paper's sum over j in G of
 * Eq. 12 is taken on the group's composed state (w(G) = sum of its partitions' w exactly).
 *
 * The planner sees numbers only (the executor measures them), per layer and step:
 *  - drift D(t) = ||OUT_loc(t) - OUT_loc(t_a)||, the L2 distance of the local group's output from the
 *    layer's last anchor t_a, summed in squares over the ranks of the cp group before the root (the
 *    token partitions are disjoint, so every rank then holds the same number);
 *  - at an anchor step, after the layer ran: ||OUT_loc(t_a)||, ||OUT_G(t_a)|| per remote group, and
 *    w(G, t_a) = the mean over (batch, head, query) rows of e^LSE_G / sum_k e^LSE_k (k: the local
 *    group and every remote group), those sums and means also taken over the ranks.
 * Decision for step t, layer l (Algorithm 1):
 *    alpha(G) = ||OUT_G(t_a)|| / ||OUT_loc(t_a)||                      (Eq. 9, refreshed at anchors)
 *    ASE(G,t) = w(G, t_a) * alpha(G) * max(0, D(t) - D(t_c,G))         (Eqs. 7, 8, 10, 12)
 *  where t_c,G is the step the group was last computed (D(t_c) = 0 when that is the anchor, giving
 *  Eq. 10 exactly; for a group recomputed after the anchor, its error since then is extrapolated as
 *  the growth of the local drift since then, the triangle inequality's bound when the drift keeps its
 *  direction: no copy of the local state per t_c is kept).
 *    anchor  = step < warmup  or  no anchor yet  or  every remote ASE > eps  or  D(t)/||OUT_loc(t_a)|| > eps_local
 *    anchor: every group computed, w and alpha refreshed, every t_c reset, the anchor's ASEs (the errors
 *            reuse would have carried: the "anchor correction errors") join eps's history;
 *    else:   group G computed (t_c,G = t) when ASE(G,t) > eps, reused otherwise.
 *  eps is the q-quantile of the history (lower nearest rank, sorted): q = 1 - R + k (r - R), clamped to
 *  [0, 1], k = DIT_DITANGO_GAIN (the anchors' errors are those of the oldest caches, larger than the
 *  errors between anchors, so q = 1 - R alone recomputes less than R), R the target compute ratio
 *  and r the ratio achieved so far (computed remote groups over all
 *  remote groups decided after warm-up; R while none), so a run computing too much raises eps; eps is
 *  recomputed at the first decision of every step and after every anchor's errors join. R = 1
 *  computes every group at every step (every step is an anchor: the run equals plain ring attention);
 *  R = 0 reuses every group outside anchors (eps = infinity).
 * Every rank that runs the same planner over the same (reduced) numbers takes the same decisions, which
 * a transfer needs: rank p sends its K/V to p + o*G exactly when p + o*G expects it. With one rank per
 * process every process gathers every rank's per-rank sums (runtime/reuse_exec.c) and adds them in
 * rank order, the order the one-process run adds its threads' in: the same bits everywhere, so each
 * process runs its own planner to the same decisions (and the one-process run's), with no decision
 * table to send. Rank 0 deciding and broadcasting would need the same gather to rank 0 first, and a
 * tree or ring allreduce of doubles would add in another order (other bits than one process).
 *
 * The executor side (compiler/frontends/blocks.c reuse_ring, passes/memplan.c, runtime/reuse_exec.c):
 *  - graph: per self-attention layer, ring0 + G-1 ring hops inside the local group (ring_shift over a
 *    subgroup of G consecutive ranks; usp: G consecutive ring members, U ranks apart), then per remote
 *    distance o: a ring_shift of K/V by o*G members over the cp group (usp: over the ring subgroup of
 *    the ranks sharing this rank's Ulysses index), G-1 hops inside the subgroup, the group's state merged by LSE, then a
 *    state_cache op (slot = layer * (m-1) + o-1) whose outputs the memory plan keeps at the bottom of
 *    the arena for the whole forward, once per guidance branch running through the plan (OUT in the
 *    activation dtype, LSE fp32: counted in the arena and the predicted peak); the final merges take
 *    the local state and every slot's cached state. Every op of a slot carries reuse_slot.
 *  - runtime: a step's decisions are made before its forwards (runtime/generate.c) from the drift
 *    predicted one step ahead; a REUSE slot's steps are all skipped (no transfer on either end, no
 *    compute, no cache write), so the merge reads the state cached at t_c. The local drift is
 *    measured where the local state is made against an fp32 copy taken at the layer's anchor, kept
 *    in backend memory (the backend's sum_sq_diff: the state is read where it lies); at anchors the
 *    norms are gathered the same way and the LSE rows downloaded for the weights after the forward. In diagnostic mode a
 *    reused slot's steps run but its cache write does not: the executor measures
 *    ||OUT_fresh - OUT_cached|| / ||OUT_fresh|| instead (dit_ditango_measured).
 *  - the CUDA backend runs state_cache as device copies and the statistics as reduction kernels
 *    (runtime/cuda/backend_cuda.c). Still to come: NCCL point-to-point for the distance shift instead
 *    of the all-gather the in-process ring_shift uses, cache loads scheduled into the transfers'
 *    bubbles on a second stream, two-expert bundles, joint attention (FLUX.1, Qwen-Image, HunyuanVideo).
 * Under a memory cap (`ditc compile --reuse-cache-mb M`) k adjacent remote groups share one cached
 * state: their states merged by LSE before the cache, the planner's "group" then the merged state
 * (the report's group g covers distances g*k-k+1 .. g*k), decided as one. The memory plan is static
 * (the caches hold their arena region for the whole run), so k is decided at compile time, the
 * smallest that fits (manifest topology.reuse.merge and cache_bytes), not per run: restoring the
 * finer grouping at the next anchor, as a dynamic scheme would, needs the finer slots' memory,
 * which is what the cap rules out. A cap that even one state per layer passes is refused. */
#ifndef DIT_RUNTIME_DITANGO_H
#define DIT_RUNTIME_DITANGO_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* `generate`'s defaults for --reuse-ratio, --reuse-eps-local and --reuse-warmup. */
#define DIT_DITANGO_DEFAULT_RATIO 1.0
#define DIT_DITANGO_DEFAULT_EPS_LOCAL 0.2
#define DIT_DITANGO_DEFAULT_WARMUP 2
/* How strongly eps's quantile follows the gap between the achieved and the target ratio. */
#define DIT_DITANGO_GAIN 4.0

typedef struct dit_ditango_options {
  double ratio;     /* R, the target share of remote-group attention recomputed after warm-up, in [0, 1] */
  double eps_local; /* the local group's relative drift that forces an anchor, > 0 */
  int warmup;       /* leading steps computed in full (anchors), >= 1 (nothing is cached before step 0) */
  int diagnostic;   /* the executor also computes what it reuses and reports the measured error */
} dit_ditango_options_t;

enum { DIT_DITANGO_REUSE = 0, DIT_DITANGO_COMPUTE = 1 };

/* Refuses out-of-range options, naming the option, the expected range and the value. */
dit_status_t dit_ditango_check(const dit_ditango_options_t *o);

typedef struct dit_ditango dit_ditango_t;

/* A planner for `steps` steps of `layers` self-attention layers with `groups` remote groups each
 * (m - 1 >= 1). Caller owns *out. */
dit_status_t dit_ditango_create(const dit_ditango_options_t *o, int steps, int layers, int groups, dit_ditango_t **out);
void dit_ditango_destroy(dit_ditango_t *p);

/* Decides step `step` of `layer` (steps in order; within a step any layer order) from the local drift
 * D(t) (ignored while the layer has no anchor): compute[g] gets DIT_DITANGO_COMPUTE or _REUSE for
 * remote group g (distance g + 1), *is_anchor whether every group is computed and the layer's anchor
 * statistics are due (dit_ditango_anchor). Refused out of order or out of range. */
dit_status_t dit_ditango_decide(dit_ditango_t *p, int step, int layer, double drift, uint8_t *compute, int *is_anchor);
/* An anchor's statistics of `layer` (after dit_ditango_decide said anchor): ||OUT_loc||, and per remote
 * group ||OUT_G|| and w(G). Refused when no anchor is due or a value is negative or not finite. */
dit_status_t dit_ditango_anchor(dit_ditango_t *p, int layer, double local_norm, const double *group_norm,
                                const double *group_weight);
/* Diagnostic mode: the measured relative error of group g's reused state at (step, layer). */
void dit_ditango_measured(dit_ditango_t *p, int step, int layer, int group, double error);

/* The current threshold eps: 0 before the first anchor correction error (every group exceeds it, so the
 * next step anchors and starts the history), infinity with R = 0. */
double dit_ditango_epsilon(const dit_ditango_t *p);
/* Remote groups computed and decided over the steps after warm-up (anchors included). */
void dit_ditango_counts(const dit_ditango_t *p, int64_t *computed, int64_t *decided);
/* The predicted ASE of group g at (step, layer) as decided (NaN where none was predicted: warm-up's
 * first step, R = 1). */
double dit_ditango_ase(const dit_ditango_t *p, int step, int layer, int group);

/* The report: {"format": "ditango-report", "version": 1, "ratio", "eps_local", "warmup", "diagnostic",
 * "layers", "groups", "computed", "decided", "steps": [{"step", "layers": [{"layer", "anchor", "eps",
 * "drift", "groups": [{"group" (distance), "decision": "compute"|"reuse", "ase", "error"}]}]}]}, numbers
 * printed with 9 significant digits, null for NaN (no prediction, no measurement) and for infinity;
 * steps not decided are left out. Deterministic: the same decisions give the same bytes. */
dit_status_t dit_ditango_report(const dit_ditango_t *p, FILE *f);

#endif
