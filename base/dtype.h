/* Element types shared by every module, with exact fp32 <-> bf16/f16 conversions. */
#ifndef DIT_BASE_DTYPE_H
#define DIT_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define DIT_MAX_RANK 8

/* Values are stored on disk: only grow at the end. */
typedef enum dit_dtype {
  DIT_F32 = 0,
  DIT_BF16 = 1,
  DIT_F16 = 2,
  DIT_I64 = 3,
  DIT_I32 = 4,
  DIT_U8 = 5, /* bytes: bool and uint8 masks as they arrive in input files; no op computes in it */
  /* OCP FP8 E4M3 (bias 7, no infinities, S.1111.111 is NaN, largest finite +-448): weights of the
   * fp8 linears, each row with an fp32 scale beside it; only linear_fp8 reads it. */
  DIT_F8E4M3 = 6,
  /* Signed bytes: the int8 codes of attention's Q and K under --attn-quant int8, each block of
   * rows with an fp32 scale beside it; only attention_fp8 reads them. */
  DIT_I8 = 7,
  DIT_DTYPE_COUNT
} dit_dtype_t;

/* 0 for an unknown dtype. */
size_t dit_dtype_size(dit_dtype_t t);
/* Our short names: "f32", "bf16", "f16", "i64", "i32", "u8", "f8e4m3", "i8". */
const char *dit_dtype_name(dit_dtype_t t);
/* Accepts our short names; returns 0 on success, -1 if unknown. */
int dit_dtype_parse(const char *name, dit_dtype_t *out);

static inline float dit_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Round to nearest even; NaN stays a quiet NaN. */
static inline uint16_t dit_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float dit_f16_to_f32(uint16_t h);
uint16_t dit_f32_to_f16(float f);

/* E4M3: exact decode of all 256 codes (0x7f and 0xff are NaN); encode rounds to nearest even,
 * saturates finite values and infinities beyond 448 to +-448 and maps NaN to 0x7f (sign kept). */
#define DIT_E4M3_MAX 448.0f
float dit_e4m3_to_f32(uint8_t q);
uint8_t dit_f32_to_e4m3(float f);
/* e4m3's code of 2^x (x <= 8.75) without an exponential, as the fp8 attention makes its
 * probabilities: the code of 2^x is 8 (x + 7) read as exponent and mantissa, so rounding that to an
 * integer interpolates 2^x linearly between powers of two (0 to 0.086 octaves high, most at an
 * octave's middle). The code is 8 (x + 7) + DIT_E4M3_LIN_SHIFT, which centres that, rounded to
 * nearest even; 0 under x = -7 (and for NaN). Computed as y = (x + 7 + shift / 8) / 16 clamped to
 * [0, 1], code = 128 y: the kernel's two fmas. */
#define DIT_E4M3_LIN_SHIFT (-0.34f)
uint8_t dit_e4m3_exp2_lin(float x);

/* The fp8 quantization of one row of n values, shared by the weights writer (per output
 * channel), the CPU reference and the CUDA kernels (per token): scale = amax / 448 (1 for an
 * all-zero row), q[i] = e4m3(x[i] * inv) with inv = 448 / amax (1 for an all-zero row), one IEEE
 * fp32 product a value (a multiply where a division would cost a kernel several instructions an
 * element). Returns the scale. */
float dit_e4m3_quantize_row(const float *x, int64_t n, uint8_t *q);
/* The same with amax mapped to the code magnitude max instead of 448: scale = amax / max, q[i] =
 * e4m3(x[i] * (max / amax)) (attention's Q and K blocks: DIT_ATTN_QK_E4M3_MAX). */
float dit_e4m3_quantize_to(const float *x, int64_t n, uint8_t *q, float max);
/* The code magnitude attention's e4m3 Q and K blocks map their amax to (attn_quant, base/ops.def):
 * small enough that Q K^T's every partial sum fits in f16 (head dim <= 128: 128 * 16^2 = 32768 <
 * 65504), where the Hopper kernel accumulates it; values under amax / 1024 become subnormal codes,
 * whose absolute step (amax / 8192) is far below the large values' own rounding. */
#define DIT_ATTN_QK_E4M3_MAX 16.0f
/* The scale of that quantization for values whose largest magnitude is amax: amax / 448, 1 when
 * amax is 0 (an all-zero row); and the factor that makes the codes: 448 / amax, 1 likewise. */
float dit_e4m3_scale(float amax);
float dit_e4m3_inv(float amax);
/* The int8 quantization of n values (one block of attention_fp8's Q or K under --attn-quant int8):
 * scale = amax / 127 (1 for an all-zero block), q[i] = x[i] / scale in IEEE fp32 rounded to the
 * nearest integer, ties to even, clamped to [-127, 127]; NaN becomes 0. Returns the scale. */
#define DIT_I8_MAX 127.0f
float dit_i8_quantize_row(const float *x, int64_t n, int8_t *q);
/* Converts n elements between any two float dtypes (f32, bf16, f16). Returns -1 if either
 * dtype is not a float type. src and dst must not overlap unless the dtypes are equal. */
int dit_convert(void *dst, dit_dtype_t dt, const void *src, dit_dtype_t st, size_t n);

/* Masks (nonzero = valid) read in any dtype: whether element i of data is nonzero (-0 is zero,
 * NaN is not), and the length of the valid prefix of n elements (the index of the first zero,
 * n if none). With stray non-NULL the rest is read too: *stray is the index of the first nonzero
 * after that zero, or -1 (a valid prefix then padding). */
int dit_dtype_nonzero(const void *data, dit_dtype_t t, size_t i);
int64_t dit_mask_prefix(const void *data, dit_dtype_t t, int64_t n, int64_t *stray);

#endif
