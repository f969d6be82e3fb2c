/* base/: status objects, dtype conversions, the op catalog and attributes, file helpers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/fileio.h"
#include "base/ops.h"
#include "check.h"

static void test_status(void) {
  CHECK(dit_status_code(DIT_OK) == DIT_CODE_OK);
  CHECK(strcmp(dit_status_message(DIT_OK), "OK") == 0);
  dit_status_t s = dit_status_make(DIT_CODE_NOT_FOUND, "tensor '%s' missing", "w");
  s = dit_status_annotate(s, "file %s", "a.safetensors");
  CHECK(dit_status_code(s) == DIT_CODE_NOT_FOUND);
  CHECK(strcmp(dit_status_message(s), "file a.safetensors: tensor 'w' missing") == 0);
  CHECK(strcmp(dit_code_name(DIT_CODE_DATA_LOSS), "DATA_LOSS") == 0);
  dit_status_free(s);
  CHECK(dit_status_make(DIT_CODE_OK, "x") == DIT_OK);
  CHECK(dit_status_annotate(DIT_OK, "ctx") == DIT_OK);
}

static void test_dtype(void) {
  CHECK_EQ_INT(dit_dtype_size(DIT_BF16), 2);
  CHECK_EQ_INT(dit_dtype_size(DIT_I64), 8);
  CHECK_EQ_INT(dit_dtype_size((dit_dtype_t)99), 0);
  dit_dtype_t t;
  CHECK(dit_dtype_parse("bf16", &t) == 0 && t == DIT_BF16);
  CHECK(dit_dtype_parse("f64", &t) == -1);
  /* bf16: exact values survive, ties round to even, NaN stays NaN */
  CHECK(dit_bf16_to_f32(dit_f32_to_bf16(1.5f)) == 1.5f);
  CHECK_EQ_INT(dit_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);        /* tie -> even (down) */
  CHECK_EQ_INT(dit_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);        /* tie -> even (up) */
  CHECK(isnan(dit_bf16_to_f32(dit_f32_to_bf16(NAN))));
  CHECK(isinf(dit_bf16_to_f32(dit_f32_to_bf16(INFINITY))));
  /* f16: every finite half round-trips exactly through f32 */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00) continue;
    if (dit_f32_to_f16(dit_f16_to_f32((uint16_t)h)) != h) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(dit_f16_to_f32(dit_f32_to_f16(65520.0f)) == INFINITY);
  CHECK(dit_f16_to_f32(dit_f32_to_f16(5.9604645e-08f)) == 5.9604645e-08f); /* smallest subnormal */
  float src[3] = {1.0f, -2.5f, 3.25f}, back[3];
  uint16_t mid[3];
  CHECK(dit_convert(mid, DIT_BF16, src, DIT_F32, 3) == 0);
  CHECK(dit_convert(back, DIT_F32, mid, DIT_BF16, 3) == 0);
  CHECK(memcmp(src, back, sizeof src) == 0);
  CHECK(dit_convert(back, DIT_F32, mid, DIT_I64, 3) == -1);
}

/* The fp8 attention's probability codes: powers of two exact (their codes centred by the shift
 * round back), the interpolation within 7.5% of 2^x over the normal range, never decreasing,
 * 0 below 2^-7, for -inf and NaN. */
static void test_e4m3_exp2_lin(void) {
  for (int k = -6; k <= 8; k++) CHECK_EQ_INT(dit_e4m3_exp2_lin((float)k), 8 * (k + 7));
  CHECK_EQ_INT(dit_e4m3_exp2_lin(0.5f), 60); /* 1.5 for sqrt(2): the interpolation's most */
  CHECK_EQ_INT(dit_e4m3_exp2_lin(-7.01f), 0);
  CHECK_EQ_INT(dit_e4m3_exp2_lin(-INFINITY), 0);
  CHECK_EQ_INT(dit_e4m3_exp2_lin(NAN), 0);
  CHECK_EQ_INT(dit_e4m3_exp2_lin(8.75f), 0x7e);
  int bad_ratio = 0, bad_order = 0, prev = 0;
  for (int i = 0; i <= 148000; i++) {
    const float x = -6.0f + (float)i * 1e-4f;
    const int c = dit_e4m3_exp2_lin(x);
    const double r = dit_e4m3_to_f32((uint8_t)c) / exp2((double)x);
    bad_ratio += r < 0.925 || r > 1.08;
    bad_order += c < prev;
    prev = c;
  }
  CHECK_EQ_INT(bad_ratio, 0);
  CHECK_EQ_INT(bad_order, 0);
}

/* E4M3, checked against values computed independently in double: every code decodes to
 * (-1)^s * 2^(e-7) * (1 + m/8) (e = 0: 2^-6 * m/8), 0x7f/0xff are NaN, every other code encodes
 * back to itself, and each midpoint between neighbours rounds to the even code. */
static void test_e4m3(void) {
  CHECK_EQ_INT(dit_dtype_size(DIT_F8E4M3), 1);
  dit_dtype_t t;
  CHECK(dit_dtype_parse("f8e4m3", &t) == 0 && t == DIT_F8E4M3);
  int bad_decode = 0, bad_round_trip = 0, bad_mid = 0;
  for (int c = 0; c < 256; c++) {
    const int e = (c >> 3) & 15, m = c & 7;
    const float v = dit_e4m3_to_f32((uint8_t)c);
    if (e == 15 && m == 7) {
      bad_decode += !isnan(v);
      bad_round_trip += dit_f32_to_e4m3(v) != c; /* NaN keeps its sign */
      continue;
    }
    double want = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    if (c & 0x80) want = -want;
    bad_decode += (double)v != want || (signbit(v) != 0) != ((c & 0x80) != 0);
    bad_round_trip += dit_f32_to_e4m3(v) != c;
  }
  for (int c = 0; c < 0x7e; c++) { /* positive neighbours c, c + 1 and their negatives */
    const float lo = dit_e4m3_to_f32((uint8_t)c), hi = dit_e4m3_to_f32((uint8_t)(c + 1));
    const float mid = (float)(((double)lo + (double)hi) / 2); /* exact in f32 */
    const int even = c & 1 ? c + 1 : c;
    bad_mid += dit_f32_to_e4m3(mid) != even || dit_f32_to_e4m3(-mid) != (even | 0x80);
    bad_mid += dit_f32_to_e4m3(nextafterf(mid, 0.0f)) != c || dit_f32_to_e4m3(nextafterf(mid, 1e9f)) != c + 1;
  }
  CHECK_EQ_INT(bad_decode, 0);
  CHECK_EQ_INT(bad_round_trip, 0);
  CHECK_EQ_INT(bad_mid, 0);
  CHECK(dit_e4m3_to_f32(0x7e) == 448.0f && dit_e4m3_to_f32(0x01) == 0x1p-9f && dit_e4m3_to_f32(0x08) == 0x1p-6f);
  /* Saturation: beyond 448 (the tie with a would-be 480 too) and infinities; tiny values to +-0. */
  CHECK_EQ_INT(dit_f32_to_e4m3(449.0f), 0x7e);
  CHECK_EQ_INT(dit_f32_to_e4m3(464.0f), 0x7e);
  CHECK_EQ_INT(dit_f32_to_e4m3(1e30f), 0x7e);
  CHECK_EQ_INT(dit_f32_to_e4m3(INFINITY), 0x7e);
  CHECK_EQ_INT(dit_f32_to_e4m3(-INFINITY), 0xfe);
  CHECK_EQ_INT(dit_f32_to_e4m3(NAN), 0x7f);
  CHECK_EQ_INT(dit_f32_to_e4m3(-NAN), 0xff);
  CHECK_EQ_INT(dit_f32_to_e4m3(0x1p-10f), 0x00); /* half the least subnormal: tie to even 0 */
  CHECK_EQ_INT(dit_f32_to_e4m3(0x1.8p-9f), 0x02); /* 1.5 units: tie to even 2 */
  CHECK_EQ_INT(dit_f32_to_e4m3(-1e-30f), 0x80);
  CHECK_EQ_INT(dit_f32_to_e4m3(0x1.fp-7f), 0x08); /* rounds up into the least normal */
  /* Row quantization: scale amax / 448, the largest magnitude lands on +-448. */
  const float row[4] = {0.0f, -3.0f, 1.5f, 0.75f};
  uint8_t q[4];
  CHECK(dit_e4m3_quantize_row(row, 4, q) == 3.0f / 448.0f);
  CHECK_EQ_INT(q[0], 0x00);
  CHECK_EQ_INT(q[1], 0xfe);
  CHECK(dit_e4m3_to_f32(q[2]) == 224.0f && dit_e4m3_to_f32(q[3]) == 112.0f);
  /* Mapped to 16 (attention's Q and K blocks): the largest on +-16 (0xd8), the rest in proportion. */
  CHECK(dit_e4m3_quantize_to(row, 4, q, 16.0f) == 3.0f / 16.0f);
  CHECK_EQ_INT(q[1], 0xd8);
  CHECK(dit_e4m3_to_f32(q[2]) == 8.0f && dit_e4m3_to_f32(q[3]) == 4.0f);
  const float zeros[2] = {0.0f, -0.0f};
  CHECK(dit_e4m3_quantize_row(zeros, 2, q) == 1.0f);
  CHECK_EQ_INT(q[0], 0x00);
  CHECK_EQ_INT(q[1], 0x80);
  /* int8: scale amax / 127, ties to even, NaN to 0; the largest magnitude lands on +-127. */
  const float xi[7] = {-127.0f, 2.5f, 3.5f, -2.5f, NAN, 0.49f, 126.5f};
  int8_t qi[7];
  CHECK(dit_i8_quantize_row(xi, 7, qi) == 1.0f);
  const int8_t want[7] = {-127, 2, 4, -2, 0, 0, 126};
  CHECK(!memcmp(qi, want, sizeof want));
  const float big[3] = {254.0f, -127.0f, 1e30f};
  CHECK(dit_i8_quantize_row(big, 2, qi) == 2.0f);
  CHECK_EQ_INT(qi[0], 127);
  CHECK_EQ_INT(qi[1], -64); /* -63.5: tie to even */
  CHECK(dit_i8_quantize_row(big, 3, qi) == 1e30f / 127.0f && qi[2] == 127 && qi[0] == 0);
  CHECK(dit_i8_quantize_row(zeros, 2, qi) == 1.0f && qi[0] == 0 && qi[1] == 0);
  CHECK(dit_dtype_size(DIT_I8) == 1 && !strcmp(dit_dtype_name(DIT_I8), "i8"));
}

static void test_ops(void) {
  dit_op_kind_t k;
  CHECK(dit_op_kind_parse("attention", &k) == 0 && k == DIT_OP_ATTENTION);
  CHECK(dit_op_kind_parse("conv", &k) == -1);
  CHECK(dit_op_info(DIT_OP_LINEAR)->min_inputs == 2 && dit_op_info(DIT_OP_LINEAR)->max_inputs == 4);
  /* A linear's operands: x, w, [bias], [c with acc = 1]; linear_fp8's: xq, xs, w, w_scale, [bias]. */
  {
    dit_attrs_t la = {0};
    int bi, ai;
    CHECK(dit_linear_operands(DIT_OP_LINEAR, &la, 2, &bi, &ai) == 0 && bi == -1 && ai == -1);
    CHECK(dit_linear_operands(DIT_OP_LINEAR, &la, 3, &bi, &ai) == 0 && bi == 2 && ai == -1);
    CHECK(dit_linear_operands(DIT_OP_LINEAR, &la, 4, &bi, &ai) == -1);
    dit_attrs_set_int(&la, "acc", 1);
    CHECK(dit_linear_operands(DIT_OP_LINEAR, &la, 3, &bi, &ai) == 0 && bi == -1 && ai == 2);
    CHECK(dit_linear_operands(DIT_OP_LINEAR, &la, 4, &bi, &ai) == 0 && bi == 2 && ai == 3);
    CHECK(dit_linear_operands(DIT_OP_LINEAR, &la, 2, &bi, &ai) == -1);
    dit_attrs_set_int(&la, "acc", 2);
    CHECK(dit_linear_operands(DIT_OP_LINEAR, &la, 3, &bi, &ai) == -1);
    CHECK(dit_linear_operands(DIT_OP_LINEAR_FP8, &la, 4, &bi, &ai) == 0 && bi == -1 && ai == -1);
    CHECK(dit_linear_operands(DIT_OP_LINEAR_FP8, &la, 5, &bi, &ai) == 0 && bi == 4 && ai == -1);
    CHECK(dit_linear_operands(DIT_OP_LINEAR_FP8, &la, 3, &bi, &ai) == -1);
    CHECK(dit_linear_operands(DIT_OP_ADD, &la, 2, &bi, &ai) == -1);
  }
  /* A norm's folded row quantizer: attr quant 0 or 1 on layernorm and adaln only. */
  {
    dit_attrs_t qa = {0};
    CHECK(dit_norm_quant(DIT_OP_ADALN, &qa) == 0);
    dit_attrs_set_int(&qa, "quant", 1);
    CHECK(dit_norm_quant(DIT_OP_ADALN, &qa) == 1 && dit_norm_quant(DIT_OP_LAYERNORM, &qa) == 1);
    CHECK(dit_norm_quant(DIT_OP_GATED_ADD, &qa) == 0);
    dit_attrs_set_int(&qa, "quant", 2);
    CHECK(dit_norm_quant(DIT_OP_LAYERNORM, &qa) == -1);
  }
  CHECK(dit_op_info(DIT_OP_COUNT) == NULL);
  dit_attrs_t a = {0};
  CHECK(dit_attrs_set_int(&a, "heads", 12) == 0);
  CHECK(dit_attrs_set_float(&a, "eps", 1e-6) == 0);
  CHECK(dit_attrs_set_int(&a, "heads", 16) == 0); /* replaces */
  CHECK_EQ_INT(a.count, 2);
  CHECK(dit_attrs_set_int(&a, "a_key_that_is_far_too_long", 1) == -1);
  int64_t v;
  double f;
  CHECK_OK(dit_attrs_get_int(&a, "rope", "heads", &v));
  CHECK_EQ_INT(v, 16);
  CHECK_OK(dit_attrs_get_float(&a, "rope", "heads", &f)); /* integers read as floats */
  CHECK_ERR(dit_attrs_get_int(&a, "rmsnorm", "eps", &v), INVALID_ARGUMENT, "attribute 'eps': expected an integer");
  CHECK_ERR(dit_attrs_get_float(&a, "rmsnorm", "theta", &f), INVALID_ARGUMENT, "op rmsnorm: missing float attribute 'theta'");
}

static void test_fileio(void) {
  const char *dir = check_tmpdir("base_fileio");
  char p[8192], q[8192];
  snprintf(p, sizeof p, "%s/a/b/c", dir);
  CHECK_OK(dit_mkdirs(p, 0755));
  CHECK(dit_is_dir(p));
  snprintf(q, sizeof q, "%s/file.txt", p);
  CHECK_OK(dit_file_write_atomic(q, "hello", 5));
  CHECK_ERR(dit_file_write_new(q, "x", 1), ALREADY_EXISTS, "file.txt");
  char *data = NULL;
  size_t n = 0;
  CHECK_OK(dit_file_read(q, 100, &data, &n));
  CHECK(n == 5 && data && strcmp(data, "hello") == 0);
  free(data);
  CHECK_ERR(dit_file_read(q, 4, &data, &n), OUT_OF_RANGE, "more than the 4 allowed");
  dit_mapping_t m;
  CHECK_OK(dit_file_map(q, &m));
  CHECK(m.size == 5 && memcmp(m.data, "hello", 5) == 0);
  dit_file_unmap(&m);
  snprintf(q, sizeof q, "%s/missing", dir);
  CHECK_ERR(dit_file_read(q, 100, &data, &n), NOT_FOUND, "missing: cannot open");
  snprintf(q, sizeof q, "%s/a", dir);
  CHECK_OK(dit_remove_tree(q));
  CHECK(!dit_path_exists(q));
  char small[8];
  CHECK_ERR(dit_path_join(small, sizeof small, "abc", "defgh"), OUT_OF_RANGE, "path too long");
}

int main(void) {
  test_status();
  test_dtype();
  test_e4m3();
  test_e4m3_exp2_lin();
  test_ops();
  test_fileio();
  return check_summary("test_base");
}
