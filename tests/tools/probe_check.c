/* Checks the step cache's probe (dit_runtime_probe_change) on a backend against a host computation
 * from the values read back (dit_runtime_read_value), in double:
 *  - the first probe has no previous signal (NaN);
 *  - q, the output of block 0's first adaln step, after forwards over perturbed latents: the change
 *    is sum|q_2 - q_1| / sum|q_1|;
 *  - with a held base h (that step's first input, copied before the step): r = q - h rounded to the
 *    value's dtype, compared with the previous signal without keeping it (twice the same), then kept
 *    (the next change against it is 0), and a reset forgets it (NaN).
 * usage: probe_check BUNDLE INPUTS.safetensors [cpu|cuda]   (the bundle's forward inputs) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/plan.h"
#include "artifacts/safetensors.h"
#include "runtime/ditrun.h"

static int fails;

static void expect(int ok, const char *what, double got, double want) {
  if (ok) return;
  fprintf(stderr, "probe_check: FAIL: %s: %.9g, expected %.9g\n", what, got, want);
  fails++;
}

static void expect_close(const char *what, double got, double want) {
  expect(fabs(got - want) <= 1e-5 * fabs(want) + 1e-12, what, got, want);
}

/* Value v as fp32 on the host. */
static float *read_f32(dit_runtime_t *rt, size_t v) {
  const dit_plan_value_t *pv = &dit_runtime_plan(rt)->values[v];
  const size_t n = pv->nbytes / dit_dtype_size(pv->dtype);
  void *raw = malloc(pv->nbytes + 1);
  float *f = malloc(n * sizeof *f + 1);
  if (!raw || !f || dit_runtime_read_value(rt, v, raw) || dit_convert(f, DIT_F32, raw, pv->dtype, n)) exit(2);
  free(raw);
  return f;
}

/* x rounded to dt. */
static float round_to(float x, dit_dtype_t dt) {
  return dt == DIT_BF16 ? dit_bf16_to_f32(dit_f32_to_bf16(x)) : dt == DIT_F16 ? dit_f16_to_f32(dit_f32_to_f16(x)) : x;
}

static double rel(const float *prev, const float *cur, size_t n) {
  double d = 0, m = 0;
  for (size_t j = 0; j < n; j++) d += fabs((double)cur[j] - prev[j]), m += fabs((double)prev[j]);
  return d / m;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: probe_check BUNDLE INPUTS.safetensors [cpu|cuda]\n");
    return 2;
  }
  dit_runtime_options_t ro = {.backend = argc > 3 ? argv[3] : "cpu", .threads = 2};
  dit_runtime_t *rt = NULL;
  dit_status_t s = dit_runtime_load(argv[1], &ro, &rt);
  if (s) return dit_status_report(s, "probe_check");
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  dit_safetensors_t *st = NULL;
  s = dit_safetensors_open(argv[2], &st);
  if (s) return dit_status_report(s, "probe_check");
  const struct dit_plan *p = dit_runtime_plan(rt);
  size_t k = 0;
  while (k < p->n_steps && !(p->steps[k].kind == DIT_OP_ADALN && p->steps[k].block == 0)) k++;
  if (k == p->n_steps) return fprintf(stderr, "probe_check: no adaln step in block 0\n"), 2;
  const size_t q = (size_t)p->steps[k].out[0], h = (size_t)p->steps[k].in[0];
  const dit_plan_value_t *pq = &p->values[q];
  const size_t n = pq->nbytes / dit_dtype_size(pq->dtype);
  if (p->values[h].nbytes != pq->nbytes) return fprintf(stderr, "probe_check: the adaln's input and output differ in size\n"), 2;

  float *qs[4], *hs[4];
  double change;
  for (int f = 0; f < 4; f++) {
    /* The inputs, the latents scaled a little more each forward. */
    for (size_t i = 0; i < m->n_inputs; i++) {
      const dit_st_tensor_t *e = dit_safetensors_find(st, m->io_inputs[i].name);
      if (!e) return fprintf(stderr, "probe_check: inputs lack '%s'\n", m->io_inputs[i].name), 2;
      const size_t ne = e->nbytes / dit_dtype_size(e->dtype);
      float *x = malloc(ne * sizeof *x + 1);
      dit_tensor_t t = {(void *)e->data, e->dtype, e->rank, {0}};
      memcpy(t.dims, e->dims, sizeof t.dims);
      if (x && i == 0 && !dit_convert(x, DIT_F32, e->data, e->dtype, ne)) {
        for (size_t j = 0; j < ne; j++) x[j] *= 1.0f + 0.05f * (float)f;
        t.data = x, t.dtype = DIT_F32;
      }
      s = dit_runtime_set_input(rt, m->io_inputs[i].name, &t);
      free(x);
      if (s) return dit_status_report(s, "probe_check");
    }
    for (size_t j = 0; !s && j < k; j++) s = dit_runtime_step(rt, j);
    if (!s) s = dit_runtime_probe_hold(rt, h);
    if (!s) hs[f] = read_f32(rt, h);
    if (!s) s = dit_runtime_step(rt, k);
    if (s) return dit_status_report(s, "probe_check");
    qs[f] = read_f32(rt, q);
    if (f == 0) { /* no previous signal: NaN, then q_0 kept */
      s = dit_runtime_probe_change(rt, q, SIZE_MAX, 0, &change);
      expect(!s && isnan(change), "the first probe (not kept)", change, NAN);
      s = dit_runtime_probe_change(rt, q, SIZE_MAX, 1, &change);
      expect(!s && isnan(change), "the first probe", change, NAN);
    } else if (f == 1) {
      s = dit_runtime_probe_change(rt, q, SIZE_MAX, 1, &change);
      expect_close("change of q", s ? NAN : change, rel(qs[0], qs[1], n));
    } else if (f == 2) { /* r = q - h against q_1, not kept (twice), then kept */
      float *r = malloc(n * sizeof *r + 1);
      for (size_t j = 0; j < n; j++) r[j] = round_to(qs[2][j] - hs[2][j], pq->dtype);
      const double want = rel(qs[1], r, n);
      for (int rep = 0; rep < 2; rep++) {
        s = dit_runtime_probe_change(rt, q, DIT_PROBE_HELD, 0, &change);
        expect_close("change of q - held base (not kept)", s ? NAN : change, want);
      }
      s = dit_runtime_probe_change(rt, q, DIT_PROBE_HELD, 1, &change);
      expect_close("change of q - held base", s ? NAN : change, want);
      s = dit_runtime_probe_change(rt, q, DIT_PROBE_HELD, 0, &change);
      expect(!s && change == 0, "the same residual against the one kept", change, 0);
      free(r);
    } else {
      dit_runtime_probe_reset(rt);
      s = dit_runtime_probe_change(rt, q, SIZE_MAX, 1, &change);
      expect(!s && isnan(change), "after a reset", change, NAN);
    }
    if (s) return dit_status_report(s, "probe_check");
  }
  printf("probe_check: %s backend, %s value '%s' (%zu elements): changes as the host computes them%s\n", ro.backend,
         dit_dtype_name(pq->dtype), pq->name, n, fails ? " -- FAILED" : "");
  for (int f = 0; f < 4; f++) free(qs[f]), free(hs[f]);
  dit_safetensors_close(st);
  dit_runtime_destroy(rt);
  return fails ? 1 : 0;
}
