/* ditrun: the command line of the runtime (verify, info, forward, generate). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "artifacts/bundle.h"
#include "artifacts/plan.h"
#include "artifacts/safetensors.h"
#include "runtime/ditrun.h"
#include "runtime/rng.h"

static const char kUsage[] =
    "usage: ditrun <command> BUNDLE [options]\n"
    "\n"
    "commands:\n"
    "  verify BUNDLE      check integrity: manifest schema, recomputed identity, every blob's\n"
    "                     presence, size and hash, plans against the manifest\n"
    "  info BUNDLE        summarize the manifest\n"
    "  forward BUNDLE --inputs IN.safetensors --out OUT.safetensors\n"
    "                     one transformer forward; inputs named hidden_states, timestep,\n"
    "                     encoder_hidden_states; output sample\n"
    "  generate BUNDLE --prompt-embeds P.safetensors [--negative-embeds N.safetensors]\n"
    "                  [--init-latents X.safetensors | --seed S] [--steps N] [--guidance G]\n"
    "                  [--shift S] [--sampler unipc|euler] --out LATENTS.safetensors\n"
    "                     the denoising loop (defaults: 50 steps, guidance 5, shift 3, unipc);\n"
    "                     reads tensors prompt_embeds, negative_prompt_embeds, init_latents;\n"
    "                     writes latents (fp32)\n"
    "\n"
    "options for forward and generate:\n"
    "  --threads N        CPU threads (default: all)\n"
    "  --backend cpu      run on this backend (default: the bundle's target)\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "ditrun: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see ditrun --help)\n");
  return 2;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- verify / info ---- */

static int cmd_verify(const char *dir) {
  double t0 = now_s();
  dit_bundle_t *b;
  dit_status_t s = dit_bundle_open(dir, DIT_BUNDLE_HASH_BLOBS, &b);
  if (s) return dit_status_report(s, "ditrun");
  const dit_manifest_t *m = dit_bundle_manifest(b);
  uint64_t bytes = 0;
  for (size_t i = 0; i < m->n_blobs; i++) bytes += m->blobs[i].size;
  for (size_t r = 0; !s && r < m->n_ranks; r++) {
    const dit_manifest_rank_t *rk = &m->ranks[r];
    const dit_manifest_weights_t *w = dit_manifest_find_weights(m, rk->weights);
    dit_mapping_t pm;
    char what[96];
    snprintf(what, sizeof what, "%s/blobs/%s (plan of rank %d)", dir, rk->plan, rk->rank);
    if (!w) {
      s = DIT_ERR(NOT_FOUND, "manifest.json: rank %d weights %s have no layout", rk->rank, rk->weights);
      break;
    }
    s = dit_bundle_map_blob(b, rk->plan, &pm);
    if (s) break;
    dit_plan_t *p = NULL;
    s = dit_plan_parse((const char *)pm.data, pm.size, what, &p);
    if (!s) s = dit_plan_check_bindings(p, m, w, what);
    dit_plan_free(p);
    dit_file_unmap(&pm);
  }
  if (!s)
    printf("ok: bundle %s verified: %zu blobs, %.1f MiB hashed, %zu rank plans checked (%.2fs)\n", m->identity, m->n_blobs,
           (double)bytes / (1 << 20), m->n_ranks, now_s() - t0);
  dit_bundle_close(b);
  return dit_status_report(s, "ditrun");
}

static int cmd_info(const char *dir) {
  dit_bundle_t *b;
  dit_status_t s = dit_bundle_open(dir, 0, &b);
  if (s) return dit_status_report(s, "ditrun");
  dit_manifest_print(dit_bundle_manifest(b), stdout);
  dit_bundle_close(b);
  return 0;
}

/* ---- tensor files ---- */

/* Reads tensor `name` of `path` into an aligned heap copy (caller frees t->data). */
static dit_status_t read_tensor(const char *path, const char *name, const char *flag, dit_tensor_t *t) {
  dit_safetensors_t *st;
  DIT_RETURN_IF_ERROR(dit_safetensors_open(path, &st), "%s", flag);
  const dit_st_tensor_t *e = dit_safetensors_find(st, name);
  dit_status_t s = DIT_OK;
  if (!e) {
    s = DIT_ERR(NOT_FOUND, "%s %s: no tensor named '%s' (the file has %zu tensors%s%s)", flag, path, name,
                dit_safetensors_count(st), dit_safetensors_count(st) ? ", e.g. " : "",
                dit_safetensors_count(st) ? dit_safetensors_at(st, 0)->name : "");
  } else {
    t->dtype = e->dtype;
    t->rank = e->rank;
    memcpy(t->dims, e->dims, sizeof t->dims);
    t->data = malloc(e->nbytes ? e->nbytes : 1);
    if (!t->data) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path);
    else memcpy(t->data, e->data, e->nbytes);
  }
  dit_safetensors_close(st);
  return s;
}

static dit_status_t write_tensor(const char *path, const char *name, const dit_tensor_t *t) {
  dit_st_writer_t *w;
  DIT_RETURN_IF(dit_st_writer_create(&w));
  dit_status_t s = dit_st_writer_add(w, name, t->dtype, t->rank, t->dims, t->data);
  if (!s) s = dit_st_writer_write(w, path);
  dit_st_writer_destroy(w);
  return s;
}

/* ---- forward / generate ---- */

typedef struct run_args {
  const char *bundle, *inputs, *out, *prompt, *negative, *init, *sampler, *backend;
  int64_t steps, seed, threads;
  double guidance, shift;
  int have_seed;
} run_args_t;

static int parse_num(const char *flag, const char *v, double *out) {
  if (!v) return usage_error("%s needs a value", flag);
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (errno || end == v || *end) {
    fprintf(stderr, "ditrun: error: %s %s: expected a number\n", flag, v);
    return 2;
  }
  *out = d;
  return 0;
}

static int parse_int(const char *flag, const char *v, int64_t *out) {
  double d;
  int rc = parse_num(flag, v, &d);
  if (rc) return rc;
  if (d < 0 || d != (double)(int64_t)d) {
    fprintf(stderr, "ditrun: error: %s %s: expected a non-negative integer\n", flag, v);
    return 2;
  }
  *out = (int64_t)d;
  return 0;
}

static int parse_run_args(int argc, char **argv, run_args_t *a) {
  memset(a, 0, sizeof *a);
  a->steps = 50;
  a->guidance = 5.0;
  a->shift = 3.0;
  a->sampler = "unipc";
  for (int i = 0; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    const char **str = NULL;
    int rc = 0;
    if (!strcmp(f, "--inputs")) str = &a->inputs;
    else if (!strcmp(f, "--out")) str = &a->out;
    else if (!strcmp(f, "--prompt-embeds")) str = &a->prompt;
    else if (!strcmp(f, "--negative-embeds")) str = &a->negative;
    else if (!strcmp(f, "--init-latents")) str = &a->init;
    else if (!strcmp(f, "--sampler")) str = &a->sampler;
    else if (!strcmp(f, "--backend")) str = &a->backend;
    else if (!strcmp(f, "--steps")) rc = parse_int(f, v, &a->steps), i++;
    else if (!strcmp(f, "--seed")) rc = parse_int(f, v, &a->seed), a->have_seed = 1, i++;
    else if (!strcmp(f, "--threads")) rc = parse_int(f, v, &a->threads), i++;
    else if (!strcmp(f, "--guidance")) rc = parse_num(f, v, &a->guidance), i++;
    else if (!strcmp(f, "--shift")) rc = parse_num(f, v, &a->shift), i++;
    else if (f[0] == '-') return usage_error("unknown option %s", f);
    else if (!a->bundle) a->bundle = f;
    else return usage_error("unexpected argument %s", f);
    if (rc) return rc;
    if (str) {
      if (!v) return usage_error("%s needs a value", f);
      *str = v;
      i++;
    }
  }
  if (!a->bundle) return usage_error("%s", "missing BUNDLE");
  if (!a->out) return usage_error("%s", "missing --out");
  return 0;
}

static dit_status_t load(const run_args_t *a, dit_runtime_t **rt) {
  dit_runtime_options_t o = {a->backend, (int)a->threads};
  double t0 = now_s();
  DIT_RETURN_IF(dit_runtime_load(a->bundle, &o, rt));
  fprintf(stderr, "ditrun: loaded and verified %s in %.2fs\n", dit_runtime_manifest(*rt)->identity, now_s() - t0);
  return DIT_OK;
}

static int cmd_forward(int argc, char **argv) {
  run_args_t a;
  int rc = parse_run_args(argc, argv, &a);
  if (rc) return rc;
  if (!a.inputs) return usage_error("%s", "forward needs --inputs IN.safetensors");
  dit_runtime_t *rt = NULL;
  dit_status_t s = load(&a, &rt);
  const dit_manifest_t *m = rt ? dit_runtime_manifest(rt) : NULL;
  for (size_t i = 0; !s && i < m->n_inputs; i++) {
    dit_tensor_t t = {0};
    s = read_tensor(a.inputs, m->io_inputs[i].name, "--inputs", &t);
    if (!s) s = dit_status_annotate(dit_runtime_set_input(rt, m->io_inputs[i].name, &t), "--inputs %s", a.inputs);
    free(t.data);
  }
  double t0 = now_s();
  if (!s) s = dit_runtime_forward(rt);
  if (!s) fprintf(stderr, "ditrun: forward %.3fs\n", now_s() - t0);
  for (size_t i = 0; !s && i < m->n_outputs; i++) {
    dit_tensor_t y;
    s = dit_runtime_output(rt, m->io_outputs[i].name, &y);
    if (!s) s = write_tensor(a.out, m->io_outputs[i].name, &y);
  }
  if (!s) printf("wrote %s\n", a.out);
  dit_runtime_destroy(rt);
  return dit_status_report(s, "ditrun");
}

static void on_step(void *ctx, int step, int steps, double t, double seconds) {
  (void)ctx;
  fprintf(stderr, "ditrun: step %d/%d  t=%g  %.3fs\n", step + 1, steps, t, seconds);
}

static int cmd_generate(int argc, char **argv) {
  run_args_t a;
  int rc = parse_run_args(argc, argv, &a);
  if (rc) return rc;
  if (!a.prompt) return usage_error("%s", "generate needs --prompt-embeds P.safetensors");
  if (!!a.init == !!a.have_seed) return usage_error("%s", "generate needs exactly one of --init-latents and --seed");
  dit_generate_options_t g = {0};
  if (dit_sampler_kind_parse(a.sampler, &g.sampler)) return usage_error("--sampler %s: expected unipc or euler", a.sampler);
  if (a.steps < 1 || a.steps > 10000) return usage_error("%s", "--steps: expected 1..10000");
  g.steps = (int)a.steps;
  g.guidance = a.guidance;
  g.shift = a.shift;
  g.on_step = on_step;

  dit_tensor_t prompt = {0}, neg = {0}, lat = {0};
  dit_runtime_t *rt = NULL;
  dit_status_t s = load(&a, &rt);
  const dit_manifest_io_t *hs = NULL;
  if (!s) {
    const dit_manifest_t *m = dit_runtime_manifest(rt);
    for (size_t i = 0; i < m->n_inputs; i++)
      if (!strcmp(m->io_inputs[i].name, "hidden_states")) hs = &m->io_inputs[i];
    if (!hs) s = DIT_ERR(NOT_FOUND, "the bundle has no 'hidden_states' input");
  }
  if (!s) s = read_tensor(a.prompt, "prompt_embeds", "--prompt-embeds", &prompt);
  if (!s && a.negative) s = read_tensor(a.negative, "negative_prompt_embeds", "--negative-embeds", &neg);
  if (!s && a.negative && g.guidance <= 1.0)
    fprintf(stderr, "ditrun: note: --guidance %g <= 1: no classifier-free guidance, negative embeddings unused\n", g.guidance);
  size_t n = 0;
  float *latents = NULL;
  if (!s) {
    lat.dtype = DIT_F32;
    lat.rank = hs->rank;
    memcpy(lat.dims, hs->dims, sizeof lat.dims);
    n = (size_t)dit_tensor_numel(&lat);
    latents = malloc(n * sizeof *latents + 1);
    if (!latents) s = DIT_ERR(RESOURCE_EXHAUSTED, "latents: out of memory");
  }
  if (!s && a.init) {
    dit_tensor_t x = {0};
    s = read_tensor(a.init, "init_latents", "--init-latents", &x);
    int same = !s && x.rank == lat.rank;
    for (int i = 0; same && i < x.rank; i++) same = x.dims[i] == lat.dims[i];
    if (!s && !same) s = DIT_ERR(INVALID_ARGUMENT, "--init-latents %s: tensor 'init_latents' has a different shape than the bundle's latents", a.init);
    if (!s && dit_convert(latents, DIT_F32, x.data, x.dtype, n))
      s = DIT_ERR(INVALID_ARGUMENT, "--init-latents %s: 'init_latents' is not a float tensor", a.init);
    free(x.data);
  } else if (!s) {
    dit_rng_normal((uint64_t)a.seed, 0, latents, n);
  }
  double t0 = now_s();
  if (!s) s = dit_runtime_generate(rt, &g, &prompt, a.negative ? &neg : NULL, latents);
  if (!s) {
    fprintf(stderr, "ditrun: generate %d steps in %.3fs\n", g.steps, now_s() - t0);
    lat.data = latents;
    s = write_tensor(a.out, "latents", &lat);
  }
  if (!s) printf("wrote %s\n", a.out);
  free(latents);
  free(prompt.data);
  free(neg.data);
  dit_runtime_destroy(rt);
  return dit_status_report(s, "ditrun");
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "verify") || !strcmp(cmd, "info")) {
    if (argc != 3) return usage_error("%s needs exactly one BUNDLE", cmd);
    return !strcmp(cmd, "verify") ? cmd_verify(argv[2]) : cmd_info(argv[2]);
  }
  if (!strcmp(cmd, "forward")) return cmd_forward(argc - 2, argv + 2);
  if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
  return usage_error("unknown command '%s'", cmd);
}
