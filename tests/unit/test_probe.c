/* The step cache's probe kernel: the CPU backend's probe_change on synthetic f32, bf16 and f16 data
 * (with and without a base; prev kept or not) against the sums written out here in double; reuse's
 * statistics (sum_sq_diff: against an fp32 anchor refreshed or not, against a reference of x's
 * dtype, against none) likewise, bit for bit in element order; and the CUDA backend's PTX (both
 * kernels) assembled by ptxas for sm_90 where ptxas is present (skipped, saying so, where it is not). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runtime/backend.h"

static float rounded(float x, dit_dtype_t dt) {
  return dt == DIT_BF16 ? dit_bf16_to_f32(dit_f32_to_bf16(x)) : dt == DIT_F16 ? dit_f16_to_f32(dit_f32_to_f16(x)) : x;
}

static void store(void *p, dit_dtype_t dt, size_t j, float v) {
  if (dt == DIT_F32) ((float *)p)[j] = v;
  else ((uint16_t *)p)[j] = dt == DIT_BF16 ? dit_f32_to_bf16(v) : dit_f32_to_f16(v);
}

static void test_cpu(dit_dtype_t dt) {
  const dit_backend_vtable_t *be = dit_backend_cpu();
  void *st = NULL;
  const dit_backend_config_t cfg = {.threads = 1};
  CHECK_OK(be->create(&cfg, &st));
  enum { N = 10007 }; /* several runs of fp32 sums, and a partial one */
  const size_t es = dit_dtype_size(dt);
  char *x = malloc(N * es), *base = malloc(N * es), *prev = malloc(N * es);
  float *pv = malloc(N * sizeof *pv), *r = malloc(N * sizeof *r);
  for (size_t j = 0; j < N; j++) {
    store(x, dt, j, sinf((float)j * 0.37f) * 3.0f);
    store(base, dt, j, cosf((float)j * 0.11f));
    store(prev, dt, j, sinf((float)j * 0.37f + 0.2f) * 2.5f);
    pv[j] = rounded(sinf((float)j * 0.37f + 0.2f) * 2.5f, dt);
  }
  for (int with_base = 0; with_base <= 1; with_base++) {
    double d = 0, m = 0;
    for (size_t j = 0; j < N; j++) {
      const float xv = rounded(sinf((float)j * 0.37f) * 3.0f, dt), bv = rounded(cosf((float)j * 0.11f), dt);
      r[j] = rounded(with_base ? xv - bv : xv, dt);
      d += fabs((double)r[j] - pv[j]), m += fabs((double)pv[j]);
    }
    double sums[2] = {0, 0};
    CHECK_OK(be->probe_change(st, x, with_base ? base : NULL, prev, dt, N, 0, sums));
    CHECK(fabs(sums[0] - d) <= 1e-5 * d && fabs(sums[1] - m) <= 1e-5 * m);
    if (!(fabs(sums[0] - d) <= 1e-5 * d)) fprintf(stderr, "  %s: sum|r - prev| %.9g, expected %.9g\n", dit_dtype_name(dt), sums[0], d);
    CHECK_OK(be->probe_change(st, x, with_base ? base : NULL, prev, dt, N, 1, sums)); /* kept: prev = r */
    int same = 1;
    for (size_t j = 0; j < N; j++) {
      const float got = dt == DIT_F32 ? ((float *)prev)[j] : (dt == DIT_BF16 ? dit_bf16_to_f32(((uint16_t *)prev)[j]) : dit_f16_to_f32(((uint16_t *)prev)[j]));
      same &= got == r[j];
    }
    CHECK(same);
    CHECK_OK(be->probe_change(st, x, with_base ? base : NULL, prev, dt, N, 0, sums));
    CHECK(sums[0] == 0);
    memcpy(pv, r, N * sizeof *r);
  }
  CHECK_ERR(be->probe_change(st, x, NULL, prev, DIT_I32, N, 0, (double[2]){0, 0}), INVALID_ARGUMENT, "expected a value of dtype f32, bf16 or f16, found i32");
  free(x), free(base), free(prev), free(pv), free(r);
  be->destroy(st);
}

static double value(const void *p, dit_dtype_t dt, size_t j) {
  if (dt == DIT_F32) return ((const float *)p)[j];
  const uint16_t h = ((const uint16_t *)p)[j];
  return dt == DIT_BF16 ? dit_bf16_to_f32(h) : dit_f16_to_f32(h);
}

static void test_sum_sq_diff(dit_dtype_t dt) {
  const dit_backend_vtable_t *be = dit_backend_cpu();
  void *st = NULL;
  const dit_backend_config_t cfg = {.threads = 1};
  CHECK_OK(be->create(&cfg, &st));
  enum { N = 5003 };
  const size_t es = dit_dtype_size(dt);
  char *x = malloc(N * es), *same = malloc(N * es);
  float *anchor = malloc(N * sizeof *anchor);
  for (size_t j = 0; j < N; j++) {
    store(x, dt, j, sinf((float)j * 0.37f) * 3.0f);
    store(same, dt, j, sinf((float)j * 0.37f + 0.05f) * 3.0f);
    anchor[j] = cosf((float)j * 0.11f);
  }
  /* Against the fp32 anchor: the sums in element order, then the anchor refreshed to x exactly. */
  double d = 0, m = 0;
  for (size_t j = 0; j < N; j++) {
    const double v = value(x, dt, j), e = v - anchor[j];
    d += e * e, m += v * v;
  }
  double sums[2] = {0, 0};
  CHECK_OK(be->sum_sq_diff(st, x, dt, anchor, DIT_F32, N, 0, sums));
  CHECK(sums[0] == d && sums[1] == m);
  CHECK(anchor[7] == cosf(7 * 0.11f)); /* not refreshed */
  CHECK_OK(be->sum_sq_diff(st, x, dt, anchor, DIT_F32, N, 1, sums));
  CHECK(sums[0] == d && sums[1] == m);
  int refreshed = 1;
  for (size_t j = 0; j < N; j++) refreshed &= anchor[j] == (float)value(x, dt, j);
  CHECK(refreshed);
  CHECK_OK(be->sum_sq_diff(st, x, dt, anchor, DIT_F32, N, 0, sums));
  CHECK(sums[0] == 0 && sums[1] == m);
  /* Against a reference of x's dtype (a cached state), and against none (a norm). */
  d = 0;
  for (size_t j = 0; j < N; j++) {
    const double e = value(x, dt, j) - value(same, dt, j);
    d += e * e;
  }
  CHECK_OK(be->sum_sq_diff(st, x, dt, same, dt, N, 0, sums));
  CHECK(sums[0] == d && sums[1] == m && d > 0);
  CHECK_OK(be->sum_sq_diff(st, x, dt, NULL, DIT_F32, N, 0, sums));
  CHECK(sums[0] == m && sums[1] == m);
  CHECK_ERR(be->sum_sq_diff(st, x, DIT_I32, NULL, DIT_F32, N, 0, sums), INVALID_ARGUMENT,
            "expected x of dtype f32, bf16 or f16, found i32");
  if (dt != DIT_F32)
    CHECK_ERR(be->sum_sq_diff(st, x, dt, same, dt == DIT_BF16 ? DIT_F16 : DIT_BF16, N, 0, sums), INVALID_ARGUMENT,
              "expected a reference of dtype f32 or");
  free(x), free(same), free(anchor);
  be->destroy(st);
}

/* ptxas accepts the CUDA probe module (the probe and the statistics kernels) for sm_90. */
static void test_ptx(void) {
  const char *ptxas = "/usr/local/cuda/bin/ptxas";
  if (access(ptxas, X_OK)) {
    printf("test_probe: SKIPPED the PTX check: %s not found\n", ptxas);
    return;
  }
  const char *tmp = getenv("DIT_TEST_TMP");
  char dir[512], src[600], cmd[2048];
  snprintf(dir, sizeof dir, "%s", tmp ? tmp : "/tmp");
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  CHECK(system(cmd) == 0);
  snprintf(src, sizeof src, "%s/probe_%d.ptx", dir, (int)getpid());
  FILE *f = fopen(src, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(dit_cuda_probe_ptx(), f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s -arch=sm_90 '%s' -o '%s.cubin'", ptxas, src, src);
  CHECK(system(cmd) == 0);
  snprintf(cmd, sizeof cmd, "rm -f '%s' '%s.cubin'", src, src);
  CHECK(system(cmd) == 0);
}

int main(void) {
  test_cpu(DIT_F32);
  test_cpu(DIT_BF16);
  test_cpu(DIT_F16);
  test_sum_sq_diff(DIT_F32);
  test_sum_sq_diff(DIT_BF16);
  test_sum_sq_diff(DIT_F16);
  test_ptx();
  return check_summary("test_probe");
}
