/* dtype table and the half-precision conversions. */
#include "base/dtype.h"

#include <math.h>

static const struct {
  const char *name;
  size_t size;
} kDtypes[DIT_DTYPE_COUNT] = {
    [DIT_F32] = {"f32", 4}, [DIT_BF16] = {"bf16", 2}, [DIT_F16] = {"f16", 2},
    [DIT_I64] = {"i64", 8}, [DIT_I32] = {"i32", 4}, [DIT_U8] = {"u8", 1}, [DIT_F8E4M3] = {"f8e4m3", 1},
    [DIT_I8] = {"i8", 1},
};

size_t dit_dtype_size(dit_dtype_t t) {
  return (unsigned)t < DIT_DTYPE_COUNT ? kDtypes[t].size : 0;
}

const char *dit_dtype_name(dit_dtype_t t) {
  return (unsigned)t < DIT_DTYPE_COUNT ? kDtypes[t].name : "?";
}

int dit_dtype_parse(const char *name, dit_dtype_t *out) {
  for (int i = 0; i < DIT_DTYPE_COUNT; i++) {
    if (strcmp(name, kDtypes[i].name) == 0) {
      *out = (dit_dtype_t)i;
      return 0;
    }
  }
  return -1;
}

float dit_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: renormalize */
      float f = ldexpf((float)man, -24);
      memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t dit_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
  if (a < 0x38800000u) {                                  /* subnormal or zero */
    float af;
    memcpy(&af, &a, 4);
    /* Scale so the subnormal unit (2^-24) becomes 1, then round to nearest even. */
    float r = nearbyintf(af * 16777216.0f);
    return (uint16_t)(sign | (uint32_t)r);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float dit_e4m3_to_f32(uint8_t q) {
  const unsigned exp = (q >> 3) & 15u, man = q & 7u;
  float a;
  if (exp == 15 && man == 7) a = NAN;
  else if (exp == 0) a = ldexpf((float)man, -9); /* subnormal: man/8 * 2^-6 */
  else a = ldexpf((float)(8 + man), (int)exp - 10);
  return q & 0x80u ? -a : a;
}

uint8_t dit_f32_to_e4m3(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;
  if (a >= 0x43e00000u) return sign | 0x7eu; /* >= 448, infinity included: saturate */
  if (a < 0x3c800000u) {                     /* below 2^-6: a multiple of the subnormal unit 2^-9 */
    float af;
    memcpy(&af, &a, 4);
    return sign | (uint8_t)nearbyintf(af * 512.0f); /* 8 (= 2^-6, the least normal) is its own code */
  }
  /* Normal: keep 3 mantissa bits, round to nearest even; a carry moves into the exponent, and
   * nothing below 448 rounds past it (the next code up would be 480). */
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  return sign | (uint8_t)((((r >> 23) - 120u) << 3) | ((r >> 20) & 7u));
}

uint8_t dit_e4m3_exp2_lin(float x) {
  float y = (x + (7.0f + DIT_E4M3_LIN_SHIFT / 8)) * (1.0f / 16);
  if (!(y > 0.0f)) y = 0.0f; /* NaN too */
  if (y > 1.0f) y = 1.0f;
  return (uint8_t)nearbyintf(y * 128.0f);
}

float dit_e4m3_quantize_to(const float *x, int64_t n, uint8_t *q, float max) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    const float a = fabsf(x[i]);
    if (a > amax) amax = a; /* NaN never compares greater: it stays NaN in its own code */
  }
  const float inv = amax > 0.0f ? max / amax : 1.0f;
  for (int64_t i = 0; i < n; i++) q[i] = dit_f32_to_e4m3(x[i] * inv);
  return amax > 0.0f ? amax / max : 1.0f;
}

float dit_e4m3_quantize_row(const float *x, int64_t n, uint8_t *q) { return dit_e4m3_quantize_to(x, n, q, DIT_E4M3_MAX); }

float dit_e4m3_scale(float amax) { return amax > 0.0f ? amax / DIT_E4M3_MAX : 1.0f; }
float dit_e4m3_inv(float amax) { return amax > 0.0f ? DIT_E4M3_MAX / amax : 1.0f; }

float dit_i8_quantize_row(const float *x, int64_t n, int8_t *q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    const float a = fabsf(x[i]);
    if (a > amax) amax = a; /* NaN never compares greater */
  }
  const float scale = amax > 0.0f ? amax / DIT_I8_MAX : 1.0f;
  for (int64_t i = 0; i < n; i++) {
    const float r = rintf(x[i] / scale); /* the current rounding mode: to nearest, ties to even */
    q[i] = (int8_t)(r != r ? 0.0f : r > DIT_I8_MAX ? DIT_I8_MAX : r < -DIT_I8_MAX ? -DIT_I8_MAX : r);
  }
  return scale;
}

int dit_convert(void *dst, dit_dtype_t dt, const void *src, dit_dtype_t st, size_t n) {
  if (dt > DIT_F16 || st > DIT_F16) return -1;
  if (dt == st) {
    memmove(dst, src, n * dit_dtype_size(dt));
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    float v;
    switch (st) {
      case DIT_F32: v = ((const float *)src)[i]; break;
      case DIT_BF16: v = dit_bf16_to_f32(((const uint16_t *)src)[i]); break;
      default: v = dit_f16_to_f32(((const uint16_t *)src)[i]); break;
    }
    switch (dt) {
      case DIT_F32: ((float *)dst)[i] = v; break;
      case DIT_BF16: ((uint16_t *)dst)[i] = dit_f32_to_bf16(v); break;
      default: ((uint16_t *)dst)[i] = dit_f32_to_f16(v); break;
    }
  }
  return 0;
}

int dit_dtype_nonzero(const void *data, dit_dtype_t t, size_t i) {
  switch (t) {
    case DIT_F32: {
      uint32_t u;
      memcpy(&u, (const char *)data + 4 * i, 4);
      return (u & 0x7fffffffu) != 0; /* the bits, so -0 is zero and NaN is not */
    }
    case DIT_BF16:
    case DIT_F16: {
      uint16_t h;
      memcpy(&h, (const char *)data + 2 * i, 2);
      return (h & 0x7fffu) != 0;
    }
    case DIT_I64: {
      int64_t v;
      memcpy(&v, (const char *)data + 8 * i, 8);
      return v != 0;
    }
    case DIT_I32: {
      int32_t v;
      memcpy(&v, (const char *)data + 4 * i, 4);
      return v != 0;
    }
    case DIT_U8:
    case DIT_I8:
      return ((const uint8_t *)data)[i] != 0;
    case DIT_F8E4M3:
      return (((const uint8_t *)data)[i] & 0x7fu) != 0;
    default:
      return 0;
  }
}

int64_t dit_mask_prefix(const void *data, dit_dtype_t t, int64_t n, int64_t *stray) {
  int64_t len = 0;
  while (len < n && dit_dtype_nonzero(data, t, (size_t)len)) len++;
  if (stray) {
    *stray = -1;
    for (int64_t i = len + 1; i < n && *stray < 0; i++)
      if (dit_dtype_nonzero(data, t, (size_t)i)) *stray = i;
  }
  return len;
}
