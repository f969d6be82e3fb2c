/* Whether a forward is captured as a device graph (runtime/exec.c): dit_exec_graph_decide's
 * three options against every fact (auto: a graph exactly where one applies, none elsewhere
 * without an error; on: refusals naming why; off: never), and dit_exec_graph_resolve's rank
 * states (a captured graph kept, dropped when reuse starts under auto, refused under on). */
#include <string.h>

#include "check.h"
#include "runtime/exec_internal.h"

/* One fact against a run where a graph applies (one rank, a GPU backend, nothing in the way):
 * what auto gives, and what on gives or the refusal it names. */
typedef struct fact_case {
  const char *what;
  dit_graph_facts_t f;
  int auto_on, on;       /* *on for options 0 and 1 (on: where not refused) */
  dit_code_t code;       /* option 1's refusal (DIT_CODE_OK: none) */
  const char *message;
} fact_case_t;

/* The facts: ranks, launched, backend, backend_graphs, offload, parked, reuse, profile. */
static const fact_case_t kCases[] = {
    {"nothing in the way", {1, 0, "cuda", 1, 0, 0, 0, 0}, 1, 1, DIT_CODE_OK, NULL},
    {"two ranks", {2, 0, "cuda", 1, 0, 0, 0, 0}, 0, 0, DIT_CODE_UNIMPLEMENTED,
     "--cuda-graph: graphs of multi-rank runs are not built (collectives run between steps)"},
    {"a parked expert swap", {1, 0, "cuda", 1, 1, 1, 0, 0}, 0, 0, DIT_CODE_UNIMPLEMENTED,
     "--cuda-graph: a bundle with an expert swap changes its weights' memory at the switch; run it without graphs"},
    {"the cpu backend", {1, 0, "cpu", 0, 0, 0, 0, 0}, 0, 0, DIT_CODE_UNAVAILABLE, "--cuda-graph: the cpu backend has no graphs"},
    {"reuse", {1, 0, "cuda", 1, 0, 0, 1, 0}, 0, 0, DIT_CODE_UNIMPLEMENTED,
     "reuse: --cuda-graph (a replayed forward cannot leave out a reused group's steps)"},
    /* Several reasons: the ranks are named first (as before any rank loads). */
    {"four cpu ranks", {4, 0, "cpu", 0, 0, 0, 0, 0}, 0, 0, DIT_CODE_UNIMPLEMENTED, "graphs of multi-rank runs"},
    /* What auto leaves out but a forced graph runs: an offload engine (its cross-forward load
     * turned off), a launched process's one rank; a profiled forward runs step by step. */
    {"an offload engine", {1, 0, "cuda", 1, 1, 0, 0, 0}, 0, 1, DIT_CODE_OK, NULL},
    {"a launched process", {1, 1, "cuda", 1, 0, 0, 0, 0}, 0, 1, DIT_CODE_OK, NULL},
    {"a profiled forward", {1, 0, "cuda", 1, 0, 0, 0, 1}, 0, 0, DIT_CODE_OK, NULL},
};

static void test_decide(void) {
  for (size_t i = 0; i < sizeof kCases / sizeof *kCases; i++) {
    const fact_case_t *c = &kCases[i];
    int on = 7;
    /* Auto: a graph or none, never an error. */
    CHECK_OK(dit_exec_graph_decide(0, &c->f, &on));
    if (on != c->auto_on) fprintf(stderr, "auto with %s\n", c->what);
    CHECK_EQ_INT(on, c->auto_on);
    /* On (any positive option): the graph, or the refusal naming why. */
    for (int option = 1; option <= 2; option++) {
      on = 7;
      if (c->code == DIT_CODE_OK) {
        CHECK_OK(dit_exec_graph_decide(option, &c->f, &on));
        if (on != c->on) fprintf(stderr, "on with %s\n", c->what);
        CHECK_EQ_INT(on, c->on);
        continue;
      }
      dit_status_t s = dit_exec_graph_decide(option, &c->f, &on);
      CHECK(s && dit_status_code(s) == c->code && strstr(dit_status_message(s), c->message));
      if (!s || dit_status_code(s) != c->code || !strstr(dit_status_message(s), c->message))
        fprintf(stderr, "on with %s: %s\n", c->what, s ? dit_status_message(s) : "no error");
      dit_status_free(s);
    }
    /* Off: no graph, nothing refused. */
    on = 7;
    CHECK_OK(dit_exec_graph_decide(-1, &c->f, &on));
    CHECK_EQ_INT(on, 0);
  }
}

static dit_status_t fake_capture(void *state) {
  (void)state;
  return DIT_OK;
}

/* A rank's graph state through resolve: at load, once captured, when reuse starts. */
static void test_resolve(void) {
  dit_backend_vtable_t gpu = {.name = "fake", .capture_begin = fake_capture, .capture_end = fake_capture, .replay = fake_capture};
  dit_backend_vtable_t cpu = {.name = "cpu"};
  dit_plan_t plan;
  memset(&plan, 0, sizeof plan);
  struct dit_runtime rt;
  memset(&rt, 0, sizeof rt);
  rt.n_ranks = 1, rt.n_experts = 1;
  rank_rt_t k;
  memset(&k, 0, sizeof k);
  k.owner = &rt, k.plan = &plan, k.be = &gpu;

  rt.graph_option = 0; /* auto: captured at the next forward, kept once captured */
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 1);
  k.graph = 2;
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 2);
  CHECK_OK(dit_exec_graph_resolve(&k, 1)); /* reuse starts: the captured graph is left unused */
  CHECK_EQ_INT(k.graph, 0);

  rt.graph_option = 1, k.graph = 0; /* on: refused when reuse starts */
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 1);
  CHECK_ERR(dit_exec_graph_resolve(&k, 1), UNIMPLEMENTED, "reuse: --cuda-graph");

  rt.graph_option = 0, k.graph = 0; /* the plan's facts: offload streaming, a parked swap */
  plan.offload.mode = DIT_PLAN_OFFLOAD_CHUNKED;
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 0);
  rt.graph_option = 1;
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 1);
  plan.offload.swap.present = 1, rt.n_experts = 2, k.graph = 0;
  CHECK_ERR(dit_exec_graph_resolve(&k, 0), UNIMPLEMENTED, "expert swap");
  rt.n_experts = 1; /* an expert loaded alone loads as any offloaded plan */
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 1);
  plan.offload.mode = DIT_PLAN_OFFLOAD_NONE, plan.offload.swap.present = 0;

  rt.n_ranks = 2, rt.graph_option = 0, k.graph = 0; /* the runtime's facts: ranks, a launch */
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 0);
  rt.n_ranks = 1, rt.process = 1;
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 0);
  rt.process = 0;

  k.be = &cpu; /* a backend without graphs */
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 0);
  rt.graph_option = 1;
  CHECK_ERR(dit_exec_graph_resolve(&k, 0), UNAVAILABLE, "--cuda-graph: the cpu backend has no graphs");
  rt.graph_option = -1, k.be = &gpu;
  CHECK_OK(dit_exec_graph_resolve(&k, 0));
  CHECK_EQ_INT(k.graph, 0);
}

int main(void) {
  test_decide();
  test_resolve();
  return check_summary("test_exec_graph");
}
