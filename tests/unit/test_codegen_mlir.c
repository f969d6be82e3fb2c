/* compiler/codegen_mlir: every op and dtype mix lowers to PTX with the promised entry,
 * parameters, launch shape and vector accesses, and ptxas (when present) accepts it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compiler/codegen_mlir.h"

#define PTXAS "/usr/local/cuda/bin/ptxas"


static dit_mlir_ew_spec_t unary(dit_mlir_ew_op_t op, int64_t n, dit_dtype_t in, dit_dtype_t out) {
  dit_mlir_ew_spec_t s;
  memset(&s, 0, sizeof s);
  s.n = n;
  s.n_in = 1;
  s.in[0].dtype = in;
  s.out_dtype = out;
  s.n_steps = 1;
  s.steps[0].op = op;
  return s;
}

#if DIT_HAVE_MLIR
static int have_ptxas;
static const char *tmp;

static dit_mlir_ew_spec_t add(int64_t n, dit_dtype_t a, dit_dtype_t b, dit_dtype_t out) {
  dit_mlir_ew_spec_t s = unary(DIT_MLIR_EW_ADD, n, a, out);
  s.n_in = 2;
  s.in[1].dtype = b;
  s.steps[0].a = 1;
  return s;
}

/* x + y * mod[b, row, d] over [B, T, D], mod [B, rows, D]. */
static dit_mlir_ew_spec_t gated(int64_t B, int64_t T, int64_t D, dit_dtype_t x, dit_dtype_t mod, dit_dtype_t out) {
  dit_mlir_ew_spec_t s = add(B * T * D, x, x, out);
  s.n_in = 3;
  s.in[2].dtype = mod;
  s.in[2].bcast = DIT_MLIR_EW_MOD;
  s.d = D;
  s.t = T;
  s.rows = 6;
  s.row = 2;
  s.steps[0].op = DIT_MLIR_EW_GATED_ADD;
  s.steps[0].b = 2;
  return s;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
  return n;
}

static int ptxas_ok(const char *ptx, size_t size, const char *arch) {
  char path[4200], cmd[8800];
  snprintf(path, sizeof path, "%s/k.ptx", tmp);
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  int ok = fwrite(ptx, 1, size, f) == size;
  ok &= fclose(f) == 0;
  snprintf(cmd, sizeof cmd, "%s -arch=%s '%s' -o /dev/null", PTXAS, arch, path);
  return ok && system(cmd) == 0;
}

/* Generates `s` and checks everything a launch relies on; expect_v is the vector width. */
static void check_kernel(const char *what, const dit_mlir_ew_spec_t *s, const char *arch, int expect_v) {
  dit_mlir_kernel_t k;
  char *ptx = NULL, *mlir = NULL;
  size_t size = 0;
  dit_status_t st = dit_mlir_elementwise_ptx(s, arch, &k, &ptx, &size, &mlir);
  if (st) {
    fprintf(stderr, "%s: %s\n", what, dit_status_message(st));
    CHECK(!"elementwise kernel generated");
    dit_status_free(st);
    return;
  }
  int64_t vecs = s->n / expect_v;
  CHECK(ptx && size == strlen(ptx));
  CHECK(strstr(ptx, ".visible .entry dit_kernel(") != NULL);
  CHECK(!strcmp(k.entry, "dit_kernel"));
  CHECK_EQ_INT(k.n_params, 1 + s->n_in);
  CHECK_EQ_INT(count(ptx, ".param .u64 dit_kernel_param_"), 1 + s->n_in);
  CHECK_EQ_INT(k.vector_width, expect_v);
  CHECK_EQ_INT(k.block[0], 256);
  CHECK_EQ_INT(k.block[1], 1);
  CHECK_EQ_INT(k.block[2], 1);
  CHECK_EQ_INT(k.grid[0], (vecs + 255) / 256);
  CHECK_EQ_INT(k.grid[1], 1);
  CHECK_EQ_INT(k.grid[2], 1);
  CHECK_EQ_INT(k.smem, 0);
  CHECK(strstr(ptx, ".maxntid 256, 1, 1") != NULL);
  CHECK(!strstr(ptx, ".extern"));
  CHECK(mlir && strstr(mlir, "linalg.generic") && strstr(mlir, "gpu-module-to-binary"));
  if (expect_v > 1) {
    /* Every input and the output move in vectors: no scalar global access remains. */
    int vld = count(ptx, "ld.global.v4.") + count(ptx, "ld.global.v2.");
    int vst = count(ptx, "st.global.v4.") + count(ptx, "st.global.v2.");
    CHECK(vld >= s->n_in);
    CHECK(vst >= 1);
    CHECK_EQ_INT(count(ptx, "ld.global.f32") + count(ptx, "ld.global.u16") + count(ptx, "ld.global.b16"), 0);
    CHECK_EQ_INT(count(ptx, "st.global.f32") + count(ptx, "st.global.u16") + count(ptx, "st.global.b16"), 0);
    int widest = s->out_dtype == DIT_F32 ? 4 : 2;
    for (int i = 0; i < s->n_in; i++)
      if (s->in[i].dtype == DIT_F32) widest = 4;
    CHECK_EQ_INT(k.align, expect_v * widest < 16 ? expect_v * widest : 16);
  }
  if (have_ptxas && !ptxas_ok(ptx, size, arch)) {
    fprintf(stderr, "%s: ptxas -arch=%s rejected the PTX:\n%s\n", what, arch, ptx);
    CHECK(!"ptxas accepts the PTX");
  }
  free(ptx);
  free(mlir);
}

static void test_ops(void) {
  static const dit_dtype_t mix[][2] = {{DIT_F32, DIT_F32}, {DIT_BF16, DIT_BF16}, {DIT_BF16, DIT_F32}, {DIT_F32, DIT_BF16}};
  for (size_t i = 0; i < sizeof mix / sizeof mix[0]; i++) {
    int v = mix[i][0] == DIT_BF16 || mix[i][1] == DIT_BF16 ? 8 : 4;
    dit_mlir_ew_spec_t s = unary(DIT_MLIR_EW_SILU, 1 << 16, mix[i][0], mix[i][1]);
    check_kernel("silu", &s, "sm_90", v);
    s = unary(DIT_MLIR_EW_GELU_TANH, 1 << 16, mix[i][0], mix[i][1]);
    check_kernel("gelu_tanh", &s, "sm_90", v);
    s = add(1 << 16, mix[i][0], mix[i][1], mix[i][1]);
    check_kernel("add", &s, "sm_90", v);
    s = gated(2, 64, 128, mix[i][0], DIT_F32, mix[i][1]);
    check_kernel("gated_add", &s, "sm_90", v);
  }
  /* Wan's gated residual: bf16 stream, fp32 modulation. */
  dit_mlir_ew_spec_t s = gated(2, 75, 1536, DIT_BF16, DIT_F32, DIT_BF16);
  check_kernel("gated_add wan", &s, "sm_90", 8);
}

static void test_chains_and_broadcasts(void) {
  /* bias (a row vector) then GELU, then a residual add: three steps, three inputs. */
  dit_mlir_ew_spec_t s = add(4096 * 64, DIT_BF16, DIT_F32, DIT_BF16);
  s.in[1].bcast = DIT_MLIR_EW_ROW;
  s.d = 64;
  s.n_in = 3;
  s.in[2].dtype = DIT_BF16;
  s.n_steps = 3;
  s.steps[1].op = DIT_MLIR_EW_GELU_TANH;
  s.steps[2].op = DIT_MLIR_EW_ADD;
  s.steps[2].a = 2;
  check_kernel("bias+gelu+residual", &s, "sm_90", 8);
  /* A row of 12 bf16 elements allows only 4-wide vectors (8-byte accesses). */
  s = add(12 * 1000, DIT_BF16, DIT_BF16, DIT_BF16);
  s.in[1].bcast = DIT_MLIR_EW_ROW;
  s.d = 12;
  check_kernel("add row d=12", &s, "sm_90", 4);
  /* Other targets. */
  s = unary(DIT_MLIR_EW_SILU, 1 << 12, DIT_BF16, DIT_BF16);
  check_kernel("silu sm_80", &s, "sm_80", 8);
  check_kernel("silu sm_86", &s, "sm_86", 8);
  check_kernel("silu sm_89", &s, "sm_89", 8);
}

static void test_tails(void) {
  /* 750 vectors: the last block is partly idle. */
  dit_mlir_ew_spec_t s = unary(DIT_MLIR_EW_SILU, 3000, DIT_F32, DIT_F32);
  check_kernel("silu tail", &s, "sm_90", 4);
  /* An odd count cannot be vectorized at all. */
  s = add(1001, DIT_F32, DIT_BF16, DIT_F32);
  check_kernel("add odd", &s, "sm_90", 1);
  /* Fewer elements than one block. */
  s = unary(DIT_MLIR_EW_GELU_TANH, 40, DIT_BF16, DIT_F32);
  check_kernel("gelu tiny", &s, "sm_90", 8);
}

static void test_errors(void) {
  dit_mlir_kernel_t k;
  char *ptx = NULL;
  size_t size = 0;
  dit_mlir_ew_spec_t s = unary(DIT_MLIR_EW_SILU, 0, DIT_F32, DIT_F32);
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_90", &k, &ptx, &size, NULL), INVALID_ARGUMENT, "n = 0");
  s = unary(DIT_MLIR_EW_SILU, 1024, DIT_F16, DIT_F32);
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_90", &k, &ptx, &size, NULL), UNIMPLEMENTED, "in[0] dtype f16");
  s = unary(DIT_MLIR_EW_SILU, 1024, DIT_F32, DIT_F32);
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_70", &k, &ptx, &size, NULL), INVALID_ARGUMENT, "sm_70");
  s.n_in = 2;
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_90", &k, &ptx, &size, NULL), INVALID_ARGUMENT, "in[1] is read by no step");
  s = add(1024, DIT_F32, DIT_F32, DIT_F32);
  s.steps[0].a = 3;
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_90", &k, &ptx, &size, NULL), INVALID_ARGUMENT, "reads in[3]");
  s = gated(2, 8, 64, DIT_F32, DIT_F32, DIT_F32);
  s.row = 6;
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_90", &k, &ptx, &size, NULL), INVALID_ARGUMENT, "row 6 of 6");
  s = gated(2, 8, 64, DIT_F32, DIT_F32, DIT_F32);
  s.t = 7;
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_90", &k, &ptx, &size, NULL), INVALID_ARGUMENT, "does not divide");
  CHECK(ptx == NULL && size == 0);

  char *old = getenv("DITC_CUDA_ROOT") ? strdup(getenv("DITC_CUDA_ROOT")) : NULL;
  setenv("DITC_CUDA_ROOT", "/nonexistent-cuda", 1);
  s = unary(DIT_MLIR_EW_SILU, 1024, DIT_F32, DIT_F32);
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_90", &k, &ptx, &size, NULL), UNAVAILABLE, "libdevice");
  if (old) setenv("DITC_CUDA_ROOT", old, 1);
  else unsetenv("DITC_CUDA_ROOT");
  free(old);
}

static void test_toolchain(void) {
  cJSON *tc = cJSON_CreateObject();
  CHECK_OK(dit_mlir_toolchain(tc));
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, "mlir");
  CHECK(cJSON_IsString(v) && !strncmp(v->valuestring, "19.", 3));
  cJSON_Delete(tc);
}

#endif

int main(void) {
#if !DIT_HAVE_MLIR
  dit_mlir_kernel_t k;
  char *ptx = NULL;
  size_t size = 0;
  dit_mlir_ew_spec_t s = unary(DIT_MLIR_EW_SILU, 1024, DIT_F32, DIT_F32);
  CHECK_ERR(dit_mlir_elementwise_ptx(&s, "sm_90", &k, &ptx, &size, NULL), UNAVAILABLE, "without MLIR");
  printf("note: built without MLIR (DIT_MLIR=OFF): only the UNAVAILABLE answer is checked\n");
  return check_summary("test_codegen_mlir");
#else
  tmp = check_tmpdir("codegen_mlir");
  have_ptxas = access(PTXAS, X_OK) == 0;
  if (!have_ptxas) printf("note: %s not found: PTX is not assembled, every other check runs\n", PTXAS);
  test_ops();
  test_chains_and_broadcasts();
  test_tails();
  test_errors();
  test_toolchain();
  return check_summary("test_codegen_mlir");
#endif
}
