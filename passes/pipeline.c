/* The fixed pass order and the dump hook. */
#include <string.h>

#include "passes/passes.h"

typedef dit_status_t (*pass_fn)(dit_graph_t *, dit_pass_result_t *);

static dit_status_t pass_verify(dit_graph_t *g, dit_pass_result_t *r) {
  (void)r;
  return dit_graph_verify(g);
}

static const struct {
  const char *name;
  pass_fn run;
} kPasses[] = {
    {"verify", pass_verify},
    {"dce", dit_pass_dce},
    {"fuse", dit_pass_fuse},
    {"schedule", dit_pass_schedule},
    {"group", dit_pass_group},
    {"memplan", dit_pass_memplan},
};
#define N_PASSES (sizeof kPasses / sizeof kPasses[0])

const char *const *dit_pass_names(void) {
  static const char *names[N_PASSES + 1];
  for (size_t i = 0; i < N_PASSES; i++) names[i] = kPasses[i].name;
  names[N_PASSES] = NULL;
  return names;
}

dit_status_t dit_passes_run(dit_graph_t *g, const dit_pass_options_t *opts,
                            dit_pass_result_t *out) {
  memset(out, 0, sizeof *out);
  const char *dump = opts ? opts->dump_after : NULL;
  FILE *df = opts && opts->dump ? opts->dump : stderr;
  if (dump && strcmp(dump, "all") != 0) {
    int known = 0;
    for (size_t i = 0; i < N_PASSES; i++) known |= strcmp(dump, kPasses[i].name) == 0;
    if (!known)
      return DIT_ERR(INVALID_ARGUMENT, "--dump-after=%s: unknown pass (passes: verify, dce, fuse, schedule, group, memplan, all)", dump);
  }
  for (size_t i = 0; i < N_PASSES; i++) {
    DIT_RETURN_IF_ERROR(kPasses[i].run(g, out), "pass %s", kPasses[i].name);
    if (dump && (!strcmp(dump, "all") || !strcmp(dump, kPasses[i].name))) {
      fprintf(df, "// after pass %s\n", kPasses[i].name);
      dit_graph_print(g, df);
    }
  }
  DIT_RETURN_IF_ERROR(dit_graph_verify(g), "after the pipeline");
  return DIT_OK;
}
