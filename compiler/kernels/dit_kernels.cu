// CUDA C kernel templates for the GPU targets. ditc prepends a specialization (the op as
// DIT_K_<OP>, shapes and dtypes as constants) and compiles the result with NVRTC, one module
// per distinct specialization. Every kernel is `extern "C" __global__ void dit_kernel(...)`
// taking output pointers first, then input pointers, in plan order.
//
// Op codes, modes and launch constants come from dit_abi.h (generated from dit_abi.def, the
// same header the code generator includes); T_<NAME> macros pick a storage type per operand
// (DIT_ABI_DT_F32 or DIT_ABI_DT_BF16). ditc's specializations also state the launch they were
// planned with (DIT_LAUNCH_THREADS, DIT_LAUNCH_SMEM), checked against the kernel at the end.

#include "dit_abi.h"
#include "dit_device.cuh"

__device__ __forceinline__ float ld(const float *p, long long i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16_t *p, long long i) { return bf2f(p[i]); }
__device__ __forceinline__ void st(float *p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16_t *p, long long i, float v) { p[i] = f2bf(v); }

// The per-token forms' row of e for token row b of [BATCH * TOK_T] (MOD_TOK): its own, or with
// TOK_GROUP the row its run of tokens shares, (t + TOK_OFF) / TOK_GROUP of the item's TOK_R.
#if defined(TOK_GROUP)
#define E_ROW(b) ((b) / TOK_T * TOK_R + ((b) % TOK_T + TOK_OFF) / TOK_GROUP)
#else
#define E_ROW(b) (b)
#endif
// A stored per-token table's row for token row b: its own, or with MOD_GROUPED (R_MOD_GROUPED
// for a folded residual's gate) its run's, as E_ROW picks e's.
#if defined(MOD_GROUPED)
#define MOD_ROW(b) E_ROW(b)
#else
#define MOD_ROW(b) (b)
#endif
#if defined(R_MOD_GROUPED)
#define R_MOD_ROW(b) E_ROW(b)
#else
#define R_MOD_ROW(b) (b)
#endif

// Eight contiguous elements through one or two 16-byte accesses (i a multiple of 8).
__device__ __forceinline__ void ld8(const bf16_t *p, long long i, float *v) {
  uint4 u = *(const uint4 *)(p + i);
  const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    v[2 * k] = __uint_as_float(w[k] << 16);
    v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ void ld8(const float *p, long long i, float *v) {
  float4 a = *(const float4 *)(p + i), b = *(const float4 *)(p + i + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
// Two floats as packed bf16 (lo in the low half): one cvt.rn.bf16x2, which rounds every non-NaN
// value to nearest even exactly as f2bf; a NaN keeps f2bf's quieted payload (the CPU
// reference's). The conversion was a dozen integer operations an element, which kept row kernels
// that store two rows (a norm with its residual folded in) from their bandwidth.
__device__ __forceinline__ u32 bf16x2(float lo, float hi) {
  if (lo != lo || hi != hi) return (u32)f2bf(lo) | ((u32)f2bf(hi) << 16);
  return pack_bf16(lo, hi);
}
__device__ __forceinline__ void st8(bf16_t *p, long long i, const float *v) {
  uint4 u;
  u.x = bf16x2(v[0], v[1]);
  u.y = bf16x2(v[2], v[3]);
  u.z = bf16x2(v[4], v[5]);
  u.w = bf16x2(v[6], v[7]);
  *(uint4 *)(p + i) = u;
}
__device__ __forceinline__ void st8(float *p, long long i, const float *v) {
  *(float4 *)(p + i) = make_float4(v[0], v[1], v[2], v[3]);
  *(float4 *)(p + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

static_assert(DIT_ABI_VEC == 8, "ld8 and st8 move eight elements");

// v as storage of type T holds it: rounded to nearest even into bf16, unchanged in fp32.
template <typename T> __device__ __forceinline__ float as_stored(float v);
template <> __device__ __forceinline__ float as_stored<float>(float v) { return v; }
template <> __device__ __forceinline__ float as_stored<bf16_t>(float v) { return __uint_as_float(bf16x2(v, 0.f) << 16); }

template <int DT> struct storage;
template <> struct storage<DIT_ABI_DT_F32> { typedef float t; };
template <> struct storage<DIT_ABI_DT_BF16> { typedef bf16_t t; };
#define TY(name) typename storage<T_##name>::t

__device__ __forceinline__ float gelu_tanh(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * x * (1.f + tanhf(k0 * (x + k1 * x * x * x)));
}

struct red_add {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct red_max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
// A warp's butterfly reduction by op; every lane gets the result.
template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// The block's reduction by op from 0 (blockDim.x == BLOCK, a multiple of 32): the warps' results
// in warp order; every thread gets it, and scratch is free again when it returns.
template <int BLOCK, typename Op>
__device__ __forceinline__ float block_reduce(float v, float *scratch, Op op) {
  v = warp_reduce(v, op);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = 0.f;
#pragma unroll
  for (int i = 0; i < BLOCK / 32; i++) r = op(r, scratch[i]);
  __syncthreads();
  return r;
}
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, red_add()); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, red_max()); }
// Sum over the block; the largest of the block's v (v >= 0).
template <int BLOCK>
__device__ __forceinline__ float block_sum(float v, float *scratch) { return block_reduce<BLOCK>(v, scratch, red_add()); }
template <int BLOCK>
__device__ __forceinline__ float block_max(float v, float *scratch) { return block_reduce<BLOCK>(v, scratch, red_max()); }

#if defined(DIT_K_ELEMENTWISE)
// Unary and binary elementwise ops over N elements: OPCODE DIT_ABI_EW_SILU, _GELU_TANH, _GELU, _ADD,
// _MUL, _CAST, _CLAMP (bounds LO and HI; NaN stays NaN as the CPU reference keeps it) or _QUICK_GELU.
// With VEC8 (N a multiple of 8) each thread takes 8 contiguous elements.
__device__ __forceinline__ float ew_apply(float x, float y) {
#if OPCODE == DIT_ABI_EW_SILU
  return x / (1.f + expf(-x));
#elif OPCODE == DIT_ABI_EW_GELU_TANH
  return gelu_tanh(x);
#elif OPCODE == DIT_ABI_EW_GELU
  return 0.5f * x * erfcf(-x * 0.70710678118654752f);
#elif OPCODE == DIT_ABI_EW_ADD
  return x + y;
#elif OPCODE == DIT_ABI_EW_MUL
  return x * y;
#elif OPCODE == DIT_ABI_EW_CAST
  return x;  // the conversion is st's or st8's (round to nearest even into bf16)
#elif OPCODE == DIT_ABI_EW_CLAMP
  return x < LO ? LO : x > HI ? HI : x;
#elif OPCODE == DIT_ABI_EW_QUICK_GELU
  return x * (1.f / (1.f + expf(-1.702f * x)));
#else
#error "DIT_K_ELEMENTWISE: unknown OPCODE"
#endif
}
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(A) *a
#if OPCODE == DIT_ABI_EW_ADD || OPCODE == DIT_ABI_EW_MUL
                                                             , const TY(B) *b
#endif
) {
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
#if VEC8
  if (i >= N / DIT_ABI_VEC) return;
  float va[DIT_ABI_VEC], vb[DIT_ABI_VEC] = {0, 0, 0, 0, 0, 0, 0, 0};
  ld8(a, i * DIT_ABI_VEC, va);
#if OPCODE == DIT_ABI_EW_ADD || OPCODE == DIT_ABI_EW_MUL
  ld8(b, i * DIT_ABI_VEC, vb);
#endif
#pragma unroll
  for (int k = 0; k < DIT_ABI_VEC; k++) va[k] = ew_apply(va[k], vb[k]);
  st8(y, i * DIT_ABI_VEC, va);
#else
  if (i >= N) return;
#if OPCODE == DIT_ABI_EW_ADD || OPCODE == DIT_ABI_EW_MUL
  st(y, i, ew_apply(ld(a, i), ld(b, i)));
#else
  st(y, i, ew_apply(ld(a, i), 0.f));
#endif
#endif
}
#endif

#if defined(DIT_K_GATED_ADD) && defined(MOD_TOK)
// The per-token gate unstored (TOKENS 1, a batch row per token): out[b, d] = x + y * g with
// g = table[GATE, d] + e[b, (ROWS_E == 1 ? 0 : GATE), d] in fp32, mod_table's sum.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *out, const TY(X) *x, const TY(Y) *y,
                                                             const TY(TABLE) *table, const TY(E) *e) {
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  const int ge = ROWS_E == 1 ? 0 : GATE;
#if VEC8  // D a multiple of 8: 8 contiguous elements share one batch row of the gate
  if (i >= (long long)BATCH * TOKENS * D / DIT_ABI_VEC) return;
  i *= DIT_ABI_VEC;
  const int d = (int)(i % D);
  const long long b = i / ((long long)TOKENS * D);
  float vx[DIT_ABI_VEC], vy[DIT_ABI_VEC], vt[DIT_ABI_VEC], ve[DIT_ABI_VEC];
  ld8(x, i, vx);
  ld8(y, i, vy);
  ld8(table, (long long)GATE * D + d, vt);
  ld8(e, (E_ROW(b) * ROWS_E + ge) * D + d, ve);
#pragma unroll
  for (int k = 0; k < DIT_ABI_VEC; k++) {
    const float g = vt[k] + ve[k];
    vx[k] = vx[k] + vy[k] * g;
  }
  st8(out, i, vx);
#else
  if (i >= (long long)BATCH * TOKENS * D) return;
  const int d = (int)(i % D);
  const long long b = i / ((long long)TOKENS * D);
  const float g = ld(table, (long long)GATE * D + d) + ld(e, (E_ROW(b) * ROWS_E + ge) * D + d);
  st(out, i, ld(x, i) + ld(y, i) * g);
#endif
}
#elif defined(DIT_K_GATED_ADD)
// out[b, t, d] = x + y * mod[b, GATE, d]
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *out, const TY(X) *x, const TY(Y) *y,
                                                             const TY(MOD) *mod) {
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
#if VEC8  // D a multiple of 8: 8 contiguous elements share one batch row of the gate
  if (i >= (long long)BATCH * TOKENS * D / DIT_ABI_VEC) return;
  i *= DIT_ABI_VEC;
  const int d = (int)(i % D);
  const long long b = i / ((long long)TOKENS * D);
  float vx[DIT_ABI_VEC], vy[DIT_ABI_VEC], vg[DIT_ABI_VEC];
  ld8(x, i, vx);
  ld8(y, i, vy);
  ld8(mod, (MOD_ROW(b) * NROWS + GATE) * D + d, vg);
#pragma unroll
  for (int k = 0; k < DIT_ABI_VEC; k++) vx[k] = vx[k] + vy[k] * vg[k];
  st8(out, i, vx);
#else
  if (i >= (long long)BATCH * TOKENS * D) return;
  const int d = (int)(i % D);
  const long long b = i / ((long long)TOKENS * D);
  st(out, i, ld(x, i) + ld(y, i) * ld(mod, (MOD_ROW(b) * NROWS + GATE) * D + d));
#endif
}
#endif

#if defined(DIT_K_MOD_TABLE)
// out[b, j, d] = table[j, d] + e[b, (ROWS_E == 1 ? 0 : j), d]
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *out, const TY(TABLE) *table, const TY(E) *e) {
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= (long long)BATCH * NROWS * D) return;
  const int d = (int)(i % D), j = (int)((i / D) % NROWS);
  const long long b = i / ((long long)NROWS * D);
  const int je = ROWS_E == 1 ? 0 : j;
  st(out, i, ld(table, (long long)j * D + d) + ld(e, (b * ROWS_E + je) * D + d));
}
#endif

#if defined(DIT_K_TIMESTEP_EMBED)
// diffusers' sinusoidal embedding in fp32: freq_j = exp(-ln(max_period) * j / (half - shift)), of
// t * PREMUL (as `t.to(dtype) * premul`: with ROUND, t and the product rounded to bf16).
__device__ __forceinline__ float round_bf(float v) { return ROUND ? bf2f(f2bf(v)) : v; }
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *out, const TY(T) *t) {
  int i = blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= BATCH * DIM) return;
  const int b = i / DIM, c = i % DIM, half = DIM / 2;
  const int j = c < half ? c : c - half;
  float expo = -logf(MAX_PERIOD) * (float)j;
  expo = expo / ((float)half - SHIFT);
  const float tv = round_bf(round_bf(ld(t, b)) * PREMUL);
  float arg = SCALE * (tv * expf(expo));
  float v;
  if (FLIP) v = c < half ? cosf(arg) : sinf(arg);
  else v = c < half ? sinf(arg) : cosf(arg);
  st(out, i, v);
}
#endif

#if defined(DIT_K_PATCHIFY)
// x [B, C, F, H, W] -> y [B, f*h*w, C*PT*PH*PW], row order (c, it, ih, iw)
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x) {
  const long long ROW = (long long)C * PT * PH * PW, NT = (long long)(F / PT) * (H / PH) * (W / PW);
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= BATCH * NT * ROW) return;
  long long r = i % ROW, tok = (i / ROW) % NT, b = i / (ROW * NT);
  const int iw = (int)(r % PW), ih = (int)((r / PW) % PH), it = (int)((r / (PW * PH)) % PT), c = (int)(r / (PW * PH * PT));
  const int w_ = (int)(tok % (W / PW)), h_ = (int)((tok / (W / PW)) % (H / PH)), f_ = (int)(tok / ((W / PW) * (H / PH)));
  long long src = ((((b * C + c) * F + f_ * PT + it) * H + h_ * PH + ih) * (long long)W) + w_ * PW + iw;
  st(y, i, ld(x, src));
}
#endif

#if defined(DIT_K_UNPATCHIFY)
// y [B, f*h*w, C*PT*PH*PW] with row order (it, ih, iw, c) -> out [B, C, f*PT, h*PH, w*PW]
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *out, const TY(Y) *y) {
  const long long FF = GF * PT, HH = GH * PH, WW = GW * PW;
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= BATCH * C * FF * HH * WW) return;
  const int xw = (int)(i % WW), yh = (int)((i / WW) % HH), fr = (int)((i / (WW * HH)) % FF);
  const int c = (int)((i / (WW * HH * FF)) % C);
  const long long b = i / (WW * HH * FF * C);
  const int ft = fr / PT, it = fr % PT, hi = yh / PH, ih = yh % PH, wi = xw / PW, iw = xw % PW;
  const long long tok = ((long long)ft * GH + hi) * GW + wi;
  const long long col = ((long long)(it * PH + ih) * PW + iw) * C + c;
  st(out, i, ld(y, (b * GF * GH * GW + tok) * ((long long)C * PT * PH * PW) + col));
}
#endif

#if defined(DIT_K_ROPE) || (defined(DIT_K_ROWNORM) && NORM_ROPE == 1)
// Wan's 3-D rotary embedding. ditc computes the (cos, sin) of every (part, position, pair) in
// double, rounded to float as the CPU reference does, into ROPE_TABLE: t part first (GF
// positions x TD/2 pairs), then h (GH x HDIM/2), then w (GW x WD/2).
__device__ const float2 rope_tab[] = {ROPE_TABLE};
// The (cos, sin) of pair p of a head at token tok of the GF x GH x GW grid.
__device__ __forceinline__ float2 wan_rope_cs(long long tok, int p) {
  const int it = (int)(tok / (GH * GW)), ih = (int)((tok / GW) % GH), iw = (int)(tok % GW);
  int t;
  if (p < TD / 2) t = it * (TD / 2) + p;
  else if (p < (TD + HDIM) / 2) t = GF * (TD / 2) + ih * (HDIM / 2) + (p - TD / 2);
  else t = GF * (TD / 2) + GH * (HDIM / 2) + iw * (WD / 2) + (p - (TD + HDIM) / 2);
  return rope_tab[t];
}
#endif

#if defined(DIT_K_QUANT_FP8) || defined(DIT_K_ATTN_QUANT) || defined(DIT_K_ATTN_QUANT_VT) || (defined(DIT_K_ROWNORM) && defined(QUANT))
// The e4m3 codes of two floats, lo in the low byte, as base/dtype.c's dit_f32_to_e4m3 (the CPU
// reference) makes them: rounded to nearest even and saturated to +-448; a NaN becomes a NaN code.
// From sm_89 the hardware conversion (the same codes on every finite float and infinity: checked
// over all 2^32 of them on an H200), before it the same rule in integer arithmetic. Callers scale
// by inv = 448 / amax in one IEEE fp32 product (no fast math), as dit_e4m3_quantize_row does.
#if __CUDA_ARCH__ >= 890
__device__ __forceinline__ u32 e4m3x2(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned char e4m3_encode(float f) { return (unsigned char)e4m3x2(f, 0.f); }
#else
__device__ __forceinline__ unsigned char e4m3_encode(float f) {
  const u32 u = __float_as_uint(f), a = u & 0x7fffffffu;
  const unsigned char sign = (unsigned char)((u >> 24) & 0x80u);
  if (a > 0x7f800000u) return sign | 0x7fu;
  if (a >= 0x43e00000u) return sign | 0x7eu;
  if (a < 0x3c800000u) return sign | (unsigned char)rintf(__uint_as_float(a) * 512.f);
  const u32 r = a + 0x7ffffu + ((a >> 20) & 1u);
  return sign | (unsigned char)((((r >> 23) - 120u) << 3) | ((r >> 20) & 7u));
}
__device__ __forceinline__ u32 e4m3x2(float lo, float hi) { return (u32)e4m3_encode(lo) | (u32)e4m3_encode(hi) << 8; }
#endif

// Eight values times inv as e4m3 codes, the first in the lowest byte.
__device__ __forceinline__ uint2 e4m3_encode8(const float *v, float inv) {
  return make_uint2(e4m3x2(v[0] * inv, v[1] * inv) | e4m3x2(v[2] * inv, v[3] * inv) << 16,
                    e4m3x2(v[4] * inv, v[5] * inv) | e4m3x2(v[6] * inv, v[7] * inv) << 16);
}

// The largest |v| of N (eight by default), NaN never counting (it never compares greater, as on the CPU).
template <int N = 8>
__device__ __forceinline__ float amax_of(const float *v, float amax) {
#pragma unroll
  for (int k = 0; k < N; k++) {
    const float a = fabsf(v[k]);
    if (a > amax) amax = a;
  }
  return amax;
}


#endif

#if defined(DIT_K_ROWNORM)
// One block per row of D elements, held in registers (8 contiguous per chunk with VEC8).
// MODE (DIT_ABI_NORM_*) LAYERNORM (AFFINE 0/1), ADALN (layernorm, then *(1 + mod[b, SCALE_ROW])
// + mod[b, SHIFT_ROW]), RMSNORM (of every GROUP-wide chunk alone when GROUP is defined); for
// rows split across tensor-parallel ranks, ROWSUMSQ the row's sum of squares (y has one value per
// row) and RMSNORM_SLICE the RMSNorm of a row slice given the whole row's (all-reduced) sum of
// squares ss over DIM elements. With SEG (a power of two up to 32), a block holds DIT_ABI_BLOCK /
// SEG rows of ROWS, SEG lanes of a warp each, its sums warp butterflies: a short row (a VAE's 96
// channels, one chunk a lane) no longer leaves most of a block idle, and a layernorm's token rows
// (SEG 32, a warp a row, several chunks a lane) need no shared memory or block barrier.
// With NORM_ROPE (RMSNORM; the IR's rope or rope_table with the Q/K norm folded in) the normalized
// values are rounded to y's type, as storing them did, and rotated before the one store: pairs
// (2j, 2j+1) of every ROPE_HD-wide head of x's ROPE_C-wide token rows, by Wan's table (NORM_ROPE 1:
// COUNT tokens from T0 of the grid) or by the cs input, fp32 [RT_TOKENS, ROPE_HD] (NORM_ROPE 2).
// A pair never straddles two threads' chunks with VEC8 (chunks start at multiples of 8); without
// it a thread reads its partner element of x again and normalizes it alike (GROUP, when it is a
// row, is even, so both share the RMS).
// With QUANT (LAYERNORM or ADALN, a block a row: the row quantizer of fp8 linears folded in) the
// normalized row, rounded to T_OUT (x's type) as storing it would, stays in registers: its largest
// magnitude over the block gives the scale s = amax / 448 (1 for a zero row), y gets the e4m3 codes
// of row * (448 / amax) and ys[row] = s (attn_quant with heads 1 and rows 1 of the stored row, bit for bit).
#define M_LN DIT_ABI_NORM_LAYERNORM
#define M_ADALN DIT_ABI_NORM_ADALN
#define M_RMS DIT_ABI_NORM_RMSNORM
#define M_SUMSQ DIT_ABI_NORM_ROWSUMSQ
#define M_RMS_SLICE DIT_ABI_NORM_RMSNORM_SLICE
#if MODE != M_LN && MODE != M_ADALN && MODE != M_RMS && MODE != M_SUMSQ && MODE != M_RMS_SLICE
#error "DIT_K_ROWNORM: unknown MODE"
#endif
#if VEC8
#define CW DIT_ABI_VEC
#else
#define CW 1
#endif
// ROW_BLOCK (optional, a multiple of 32 up to DIT_ABI_BLOCK): the block of a row, chosen so that
// its threads divide the row's chunks and none idles in the last one.
#ifndef ROW_BLOCK
#define ROW_BLOCK DIT_ABI_BLOCK
#endif
static_assert(ROW_BLOCK % 32 == 0 && ROW_BLOCK <= DIT_ABI_BLOCK, "DIT_K_ROWNORM: ROW_BLOCK is whole warps, at most a block");
#if defined(SEG)
static_assert(SEG <= 32 && (SEG & (SEG - 1)) == 0 && MODE != M_SUMSQ && MODE != M_RMS_SLICE && ROW_BLOCK == DIT_ABI_BLOCK,
              "DIT_K_ROWNORM: SEG lanes of a warp a row (not ROWSUMSQ or RMSNORM_SLICE)");
#define CHUNKS ((D / CW + SEG - 1) / SEG)
#define ROW_THREADS SEG
#else
#define CHUNKS ((D / CW + ROW_BLOCK - 1) / ROW_BLOCK)
#define ROW_THREADS ROW_BLOCK
#endif
// A row's sum: over its SEG lanes (a butterfly inside the segment), or over the block.
__device__ __forceinline__ float row_sum(float v, float *scratch) {
#if defined(SEG)
  (void)scratch;
#pragma unroll
  for (int o = SEG / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
#else
  return block_sum<ROW_BLOCK>(v, scratch);
#endif
}
// A row's largest value, likewise.
__device__ __forceinline__ float row_max(float v, float *scratch) {
#if defined(SEG)
  (void)scratch;
#pragma unroll
  for (int o = SEG / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
#else
  return block_max<ROW_BLOCK>(v, scratch);
#endif
}
#if CHUNKS > DIT_ABI_ROWNORM_MAX_CHUNKS
#error "DIT_K_ROWNORM: row too long for the registers of one block"
#endif
__device__ __forceinline__ void ldc(const float *p, long long i, float *v) {
#if VEC8
  ld8(p, i, v);
#else
  v[0] = p[i];
#endif
}
__device__ __forceinline__ void ldc(const bf16_t *p, long long i, float *v) {
#if VEC8
  ld8(p, i, v);
#else
  v[0] = bf2f(p[i]);
#endif
}
__device__ __forceinline__ void stc(float *p, long long i, const float *v) {
#if VEC8
  st8(p, i, v);
#else
  p[i] = v[0];
#endif
}
__device__ __forceinline__ void stc(bf16_t *p, long long i, const float *v) {
#if VEC8
  st8(p, i, v);
#else
  p[i] = f2bf(v[0]);
#endif
}
#if defined(NORM_ROPE)
static_assert(MODE == M_RMS && ROPE_HD % 2 == 0 && ROPE_C % ROPE_HD == 0 && D % 2 == 0 && ROPE_C % D == 0,
              "DIT_K_ROWNORM: NORM_ROPE rotates even-wide heads of an RMSNORM's rows, a token's row or a part of it");
// A row's rotation, found once a row (a row is one token's, or with GROUP a part of it from column
// c0): the rows of Wan's table parts at its grid position (NORM_ROPE 1) or its row of cs
// (NORM_ROPE 2), as (cos, sin) pairs.
// With one token a block (NORM_ROPE 1 without SEG) the block first stages the token's ROPE_HD / 2
// pairs in shared memory, so each thread reads its pairs with a few wide loads there instead of one
// scattered global load a pair over the table's three parts.
#if NORM_ROPE == 1 && !defined(SEG)
#define ROPE_STAGED 1
#else
#define ROPE_STAGED 0
#endif
struct rope_row {
  int c0;
#if NORM_ROPE == 1
  const float2 *t, *h, *w;
#if ROPE_STAGED
  const float2 *sh;
#endif
#else
  const float2 *cs;
#endif
};
__device__ __forceinline__ rope_row rope_row_at(long long row, const float *cs) {
  rope_row r;
  const long long tokrow = row / (ROPE_C / D);
  r.c0 = (int)(row % (ROPE_C / D)) * D;
#if NORM_ROPE == 1
  (void)cs;
  const long long tok = T0 + tokrow % COUNT;
  const int it = (int)(tok / (GH * GW)), ih = (int)((tok / GW) % GH), iw = (int)(tok % GW);
  r.t = rope_tab + it * (TD / 2);
  r.h = rope_tab + GF * (TD / 2) + ih * (HDIM / 2);
  r.w = rope_tab + GF * (TD / 2) + GH * (HDIM / 2) + iw * (WD / 2);
#else
  r.cs = (const float2 *)(cs + tokrow % RT_TOKENS * ROPE_HD);
#endif
  return r;
}
#if NORM_ROPE == 1
// The (cos, sin) of pair p of a head at the row's grid position, from the table's parts.
__device__ __forceinline__ float2 rope_lookup(const rope_row &rr, int p) {
  return p < TD / 2 ? rr.t[p] : p < (TD + HDIM) / 2 ? rr.h[p - TD / 2] : rr.w[p - (TD + HDIM) / 2];
}
#endif
// The pair (x0, x1) at column d (even) of the row rotated by its (cos, sin), as rope_table does.
__device__ __forceinline__ void rope_pair(float x0, float x1, int d, const rope_row &rr, float *y0, float *y1) {
  const int p = (rr.c0 + d) % ROPE_HD / 2;  // the pair within its head
#if ROPE_STAGED
  const float2 t = rr.sh[p];
#elif NORM_ROPE == 1
  const float2 t = rope_lookup(rr, p);
#else
  const float2 t = rr.cs[p];
#endif
  *y0 = x0 * t.x - x1 * t.y;
  *y1 = x1 * t.x + x0 * t.y;
}
// The CW normalized values o (columns d.. of the row xr, normalized by rk) rounded as y stores
// them, then rotated.
__device__ __forceinline__ void rope_normed(float *o, const TY(X) *xr, const TY(W) *w, float rk, int d, const rope_row &rr) {
#if VEC8
  (void)xr, (void)w, (void)rk;
#pragma unroll
  for (int e = 0; e < CW; e += 2) rope_pair(as_stored<TY(OUT)>(o[e]), as_stored<TY(OUT)>(o[e + 1]), d + e, rr, &o[e], &o[e + 1]);
#else
  // The partner element d ^ 1, normalized as the thread holding it does.
  const int dp = d ^ 1;
#if defined(GROUP)
  const float wp = ld(w, dp % GROUP);
#else
  const float wp = ld(w, dp);
#endif
  const float a = as_stored<TY(OUT)>(o[0]), b = as_stored<TY(OUT)>(ld(xr, dp) * rk * wp);
  float y0, y1;
  if (d & 1) {
    rope_pair(b, a, d - 1, rr, &y0, &y1);
    o[0] = y1;
  } else {
    rope_pair(a, b, d, rr, &y0, &y1);
    o[0] = y0;
  }
#endif
}
#endif
#if !defined(RES)
#define RES 0
#endif
#if RES && MODE != M_LN && MODE != M_ADALN
#error "DIT_K_ROWNORM: RES folds a residual into layernorm or adaln"
#endif
#if !defined(QUANT)
#define QUANT 0
#endif
#if QUANT && MODE != M_LN && MODE != M_ADALN
#error "DIT_K_ROWNORM: QUANT folds the row quantizer into layernorm or adaln"
#endif
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(
#if QUANT
                                                             unsigned char *y,
#else
                                                             TY(OUT) *y,
#endif
#if RES
                                                             TY(X) *sum,
#endif
#if QUANT
                                                             float *ys,
#endif
                                                             const TY(X) *x
#if MODE == M_LN && AFFINE
                                                             , const TY(W) *w, const TY(BIAS) *bias
#elif MODE == M_ADALN && defined(MOD_TOK)
                                                             , const TY(TABLE) *table, const TY(E) *emb
#elif MODE == M_ADALN
                                                             , const TY(MOD) *mod
#elif MODE == M_RMS && NORM_ROPE == 2
                                                             , const float *cs, const TY(W) *w
#elif MODE == M_RMS
                                                             , const TY(W) *w
#elif MODE == M_RMS_SLICE
                                                             , const TY(SS) *ss, const TY(W) *w
#endif
#if RES
                                                             , const TY(RY) *ry
#endif
#if RES == 2
                                                             , const TY(RMOD) *rmod
#elif RES == 3
                                                             , const TY(RTABLE) *rtab, const TY(RE) *re
#endif
) {
  __shared__ float scratch[DIT_ABI_BLOCK / 32];
#if NORM_ROPE == 1
  const float *cs = nullptr;  // Wan's rotation comes from rope_tab
#endif
#if defined(SEG)
  // Lanes of a row past ROWS (the last block's) hold zeros and stay for the warp's shuffles.
  const long long row0 = (long long)blockIdx.x * (DIT_ABI_BLOCK / SEG) + threadIdx.x / SEG;
  const bool live = row0 < ROWS;
  const long long row = live ? row0 : 0;
  const int tid = live ? (int)(threadIdx.x % SEG) : D;
#else
  const long long row = blockIdx.x;
  const int tid = (int)threadIdx.x;
#endif
  const TY(X) *xr = x + row * D;
#if defined(NORM_ROPE) && !ROPE_STAGED
  const rope_row rr = rope_row_at(row, cs);
#endif
  float v[CHUNKS][CW];
#pragma unroll
  for (int k = 0; k < CHUNKS; k++) {
    const int d = (tid + k * ROW_THREADS) * CW;
    if (d < D) ldc(xr, d, v[k]);
    else
#pragma unroll
      for (int e = 0; e < CW; e++) v[k][e] = 0.f;
  }
  // What else the row needs is loaded while the row's own loads are in flight, before the sums
  // wait on them: the rotation's pairs, and the norm's weight and bias into ca and cb (measured
  // on Wan2.2-TI2V: layernorm 5.1 -> 4.7 ms, rmsnorm + rope 11.4 -> 10.6). The modulation's shift
  // and scale stay loaded after the sums: loaded early (four rows of e and table per token) they
  // made adaln 9.2 -> 13.0 ms.
#if ROPE_STAGED
  __shared__ float2 rope_sh[ROPE_HD / 2];
  rope_row rr = rope_row_at(row, cs);
  for (int p = (int)threadIdx.x; p < ROPE_HD / 2; p += ROW_THREADS) rope_sh[p] = rope_lookup(rr, p);
  __syncthreads();
  rr.sh = rope_sh;
#endif
  // A warp a row (SEG with several chunks a lane) loads the weight and bias where they are used
  // instead: held for every chunk they would cost the registers that keep more rows in flight.
#if defined(SEG) && CHUNKS > 1
#define W_AT_USE 1
#define W_CHUNKS 1
#define W_CHUNK(k) 0
#else
#define W_AT_USE 0
#define W_CHUNKS CHUNKS
#define W_CHUNK(k) (k)
#endif
#if MODE == M_RMS || MODE == M_RMS_SLICE || (MODE == M_LN && AFFINE)
  float ca[W_CHUNKS][CW];
#endif
#if MODE == M_LN && AFFINE
  float cb[W_CHUNKS][CW];
#endif
#pragma unroll
  for (int k = 0; k < CHUNKS; k++) {
    const int d = (tid + k * ROW_THREADS) * CW;
    if (d >= D || W_AT_USE) continue;
#if (MODE == M_RMS || MODE == M_RMS_SLICE) && defined(GROUP)
    ldc(w, d % GROUP, ca[W_CHUNK(k)]);
#elif MODE == M_RMS || MODE == M_RMS_SLICE
    ldc(w, d, ca[W_CHUNK(k)]);
#elif MODE == M_LN && AFFINE
    ldc(w, d, ca[W_CHUNK(k)]);
    ldc(bias, d, cb[W_CHUNK(k)]);
#endif
  }
#if RES
  // The folded residual (RES 1: x + y; 2: x + y * mod's GATE row; 3: x + y * (table's GATE row +
  // e's, per token)), rounded to x's type as the residual op stored it, stored, and normalized.
  {
#if RES == 2
    const TY(RMOD) *gm = rmod + (R_MOD_ROW(row / R_TOKENS) * R_NROWS + GATE) * D;
#elif RES == 3
    const TY(RTABLE) *gt = rtab + (long long)GATE * D;
    const TY(RE) *ge = re + (E_ROW(row) * R_ROWS_E + (R_ROWS_E == 1 ? 0 : GATE)) * D;
#endif
    float vy[CHUNKS][CW];
#pragma unroll
    for (int k = 0; k < CHUNKS; k++) {
      const int d = (tid + k * ROW_THREADS) * CW;
      if (d < D) ldc(ry + row * D, d, vy[k]);
    }
#pragma unroll
    for (int k = 0; k < CHUNKS; k++) {
      const int d = (tid + k * ROW_THREADS) * CW;
      if (d >= D) continue;
#if RES == 1
#pragma unroll
      for (int e = 0; e < CW; e++) v[k][e] = as_stored<TY(X)>(v[k][e] + vy[k][e]);
#else
      float g[CW];
#if RES == 2
      ldc(gm, d, g);
#else
      float t[CW];
      ldc(gt, d, g);
      ldc(ge, d, t);
#pragma unroll
      for (int e = 0; e < CW; e++) g[e] = g[e] + t[e];
#endif
#pragma unroll
      for (int e = 0; e < CW; e++) v[k][e] = as_stored<TY(X)>(v[k][e] + vy[k][e] * g[e]);
#endif
      stc(sum + row * D, d, v[k]);
    }
  }
#endif
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < CHUNKS; k++)
#pragma unroll
    for (int e = 0; e < CW; e++) s += v[k][e];
#if MODE == M_RMS && defined(GROUP)
  // Per head: every GROUP-wide chunk of the row has its own RMS and shares the weight [GROUP]. The
  // GROUP / CW threads holding a chunk are consecutive lanes of one warp, so a butterfly over them
  // sums it; lanes past D hold zeros and only take part in the shuffles.
  static_assert(GROUP % CW == 0 && GROUP / CW <= 32 && GROUP / CW <= ROW_THREADS && ((GROUP / CW) & (GROUP / CW - 1)) == 0 && D % GROUP == 0,
                "DIT_K_ROWNORM: GROUP must divide D and span a power of two of lanes up to a warp");
  float r[CHUNKS];
#pragma unroll
  for (int k = 0; k < CHUNKS; k++) {
    float q = 0.f;
#pragma unroll
    for (int e = 0; e < CW; e++) q += v[k][e] * v[k][e];
#pragma unroll
    for (int o = GROUP / CW / 2; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    r[k] = rsqrtf(q / (float)GROUP + EPS);
  }
  const float mean = 0.f;
  (void)s;
#elif MODE == M_RMS || MODE == M_SUMSQ
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < CHUNKS; k++)
#pragma unroll
    for (int e = 0; e < CW; e++) ss += v[k][e] * v[k][e];
  ss = row_sum(ss, scratch);
#if MODE == M_SUMSQ
  if (threadIdx.x == 0) st(y, row, ss);
  (void)s;
  return;
#endif
  const float r = rsqrtf(ss / (float)D + EPS);
  const float mean = 0.f;
  (void)s;
#elif MODE == M_RMS_SLICE
  const float r = rsqrtf(ld(ss, row) / (float)DIM + EPS);
  const float mean = 0.f;
  (void)s;
#else
  const float mean = row_sum(s, scratch) / (float)D;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < CHUNKS; k++) {
    const int d = (tid + k * ROW_THREADS) * CW;
#pragma unroll
    for (int e = 0; e < CW; e++) {
      float c = d < D ? v[k][e] - mean : 0.f;
      ss += c * c;
    }
  }
  const float r = rsqrtf(row_sum(ss, scratch) / (float)D + EPS);
#endif
#if MODE == M_ADALN && defined(MOD_TOK)
  // The per-token rows unstored (TOKENS 1): table rows plus this token's rows of e, summed in
  // fp32 as mod_table stores them.
  const long long b = E_ROW(row / TOKENS);
  const TY(TABLE) *tsh = table + (long long)SHIFT_ROW * D, *tsc = table + (long long)SCALE_ROW * D;
  const TY(E) *esh = emb + (b * ROWS_E + (ROWS_E == 1 ? 0 : SHIFT_ROW)) * D, *esc = emb + (b * ROWS_E + (ROWS_E == 1 ? 0 : SCALE_ROW)) * D;
#elif MODE == M_ADALN
  const long long b = MOD_ROW(row / TOKENS);
  const TY(MOD) *sh = mod + (b * NROWS + SHIFT_ROW) * D, *sc = mod + (b * NROWS + SCALE_ROW) * D;
#endif
#pragma unroll
  for (int k = 0; k < CHUNKS; k++) {
    const int d = (tid + k * ROW_THREADS) * CW;
    if (d >= D) continue;
    float o[CW];
#if MODE == M_RMS || MODE == M_RMS_SLICE
#if defined(GROUP)
    const float rk = r[k];
#else
    const float rk = r;
#endif
#if W_AT_USE
#if defined(GROUP)
    ldc(w, d % GROUP, ca[0]);
#else
    ldc(w, d, ca[0]);
#endif
#endif
#pragma unroll
    for (int e = 0; e < CW; e++) o[e] = v[k][e] * rk * ca[W_CHUNK(k)][e];
#if defined(NORM_ROPE)
    rope_normed(o, xr, w, rk, d, rr);
#endif
#else
#pragma unroll
    for (int e = 0; e < CW; e++) o[e] = (v[k][e] - mean) * r;
#if MODE == M_LN && AFFINE
#if W_AT_USE
    ldc(w, d, ca[0]);
    ldc(bias, d, cb[0]);
#endif
#pragma unroll
    for (int e = 0; e < CW; e++) o[e] = o[e] * ca[W_CHUNK(k)][e] + cb[W_CHUNK(k)][e];
#elif MODE == M_ADALN && defined(MOD_TOK)
    float shv[CW], scv[CW], etv[CW];
    ldc(tsh, d, shv);
    ldc(esh, d, etv);
#pragma unroll
    for (int e = 0; e < CW; e++) shv[e] = shv[e] + etv[e];
    ldc(tsc, d, scv);
    ldc(esc, d, etv);
#pragma unroll
    for (int e = 0; e < CW; e++) scv[e] = scv[e] + etv[e];
#pragma unroll
    for (int e = 0; e < CW; e++) o[e] = o[e] * (1.f + scv[e]) + shv[e];
#elif MODE == M_ADALN
    float shv[CW], scv[CW];
    ldc(sh, d, shv);
    ldc(sc, d, scv);
#pragma unroll
    for (int e = 0; e < CW; e++) o[e] = o[e] * (1.f + scv[e]) + shv[e];
#endif
#endif
#if QUANT
#pragma unroll
    for (int e = 0; e < CW; e++) v[k][e] = as_stored<TY(OUT)>(o[e]);  // x's chunk is no longer needed
#else
    stc(y + row * D, d, o);
#endif
  }
#if QUANT
  float amax = 0.f;
#pragma unroll
  for (int k = 0; k < CHUNKS; k++) amax = amax_of<CW>(v[k], amax);  // chunks past D hold zeros
  amax = row_max(amax, scratch);
  const float qs = amax > 0.f ? amax / 448.f : 1.f, qi = amax > 0.f ? 448.f / amax : 1.f;
#pragma unroll
  for (int k = 0; k < CHUNKS; k++) {
    const int d = (tid + k * ROW_THREADS) * CW;
    if (d >= D) continue;
#if VEC8
    *(uint2 *)(y + row * D + d) = e4m3_encode8(v[k], qi);
#else
    y[row * D + d] = e4m3_encode(v[k][0] * qi);
#endif
  }
  if (tid == 0) ys[row] = qs;
#endif
}
#endif

#if defined(DIT_K_ROPE)
// Wan's 3-D rotary embedding by rope_tab (above). x holds COUNT tokens starting at token T0 of
// the grid (a context-parallel rank's share; all of them otherwise). One thread rotates one pair;
// consecutive threads take consecutive pairs of a head, so loads and stores coalesce.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x) {
  const int HD = TD + HDIM + WD, PAIRS = HD / 2;
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  const long long total = (long long)BATCH * COUNT * HEADS * PAIRS;
  if (i >= total) return;
  const int p = (int)(i % PAIRS);
  const float2 cs = wan_rope_cs(T0 + (i / ((long long)PAIRS * HEADS)) % COUNT, p);
  const long long e = (i / PAIRS) * HD + 2 * p;
  const float x0 = ld(x, e), x1 = ld(x, e + 1);
  st(y, e, x0 * cs.x - x1 * cs.y);
  st(y, e + 1, x0 * cs.y + x1 * cs.x);
}
#endif

#if defined(DIT_K_KEY_BOUND)
// y i32 [BATCH] = OFFSET + the valid prefix length of each row of mask [BATCH, MASK_LEN]: elements of
// MASK_T, valid while MASK_NZ(v); one thread a row, reading up to its first zero.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(int *y, const MASK_T *mask) {
  const long long b = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (b >= BATCH) return;
  const MASK_T *row = mask + b * MASK_LEN;
  int n = 0;
  while (n < MASK_LEN && MASK_NZ(row[n])) n++;
  y[b] = OFFSET + n;
}
#endif

#if defined(DIT_K_TOKEN_ROWS)
// The first of every run of GROUP tokens: y [ROWS] = x[r * GROUP] (x [B, T] flat, GROUP divides T).
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x) {
  const long long r = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (r < ROWS) st(y, r, ld(x, r * GROUP));
}
#endif

#if defined(DIT_K_SLICE_TOKENS)
// Tokens [T0, T0 + COUNT) of x [BATCH, TOKENS, C]: a context-parallel rank's share.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x) {
  const long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= (long long)BATCH * COUNT * C) return;
  const long long c = i % C, t = (i / C) % COUNT, b = i / ((long long)C * COUNT);
  st(y, i, ld(x, (b * TOKENS + T0 + t) * C + c));
}
#endif

#if defined(DIT_K_CONCAT)
// a [OUTER, IA] ++ b [OUTER, IB] -> y [OUTER, IA + IB], IA and IB the concatenated dim times the
// dims after it. With VEC8 (IA and IB multiples of 8) a thread moves 8 elements of one side.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *a, const TY(X) *b) {
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
#if VEC8
  if (i >= OUTER * (IA + IB) / DIT_ABI_VEC) return;
  i *= DIT_ABI_VEC;
  const long long o = i / (IA + IB), c = i % (IA + IB);
  float v[DIT_ABI_VEC];
  if (c < IA) ld8(a, o * IA + c, v);
  else ld8(b, o * IB + c - IA, v);
  st8(y, i, v);
#else
  if (i >= OUTER * (IA + IB)) return;
  const long long o = i / (IA + IB), c = i % (IA + IB);
  st(y, i, c < IA ? ld(a, o * IA + c) : ld(b, o * IB + c - IA));
#endif
}
#endif

#if defined(DIT_K_ROPE_TABLE)
// Rotary embedding from a table: x [B, TOKENS, C = heads * HD] (N elements), cs fp32 [TOKENS, HD]
// of (cos, sin) pairs; y[2j] = x[2j] cos - x[2j+1] sin, y[2j+1] = x[2j+1] cos + x[2j] sin in fp32,
// rounded once on store. With VEC8 (HD a multiple of 8) a thread rotates four pairs through
// 16-byte accesses, else one pair.
#if VEC8
#define RT_W DIT_ABI_VEC
#else
#define RT_W 2
#endif
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x, const float *cs) {
  long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= N / RT_W) return;
  i *= RT_W;
  const long long ci = (i / C) % TOKENS * HD + i % C % HD;
  float v[RT_W], t[RT_W], o[RT_W];
#if VEC8
  ld8(x, i, v);
  ld8(cs, ci, t);
#else
  v[0] = ld(x, i), v[1] = ld(x, i + 1);
  t[0] = cs[ci], t[1] = cs[ci + 1];
#endif
#pragma unroll
  for (int p = 0; p < RT_W; p += 2) {
    o[p] = v[p] * t[p] - v[p + 1] * t[p + 1];
    o[p + 1] = v[p + 1] * t[p] + v[p] * t[p + 1];
  }
#if VEC8
  st8(y, i, o);
#else
  st(y, i, o[0]);
  st(y, i + 1, o[1]);
#endif
}
#endif

#if defined(DIT_K_ATTN_MERGE)
// Two attention states of the same queries over disjoint keys: o [BATCH, SQ, HEADS*HD],
// lse [BATCH, HEADS, SQ] (natural log). Each output element weighs its two partials by
// e^(lse - max); the thread holding a head's first element also writes the merged lse.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *o, TY(LSE) *lse, const TY(OA) *oa, const TY(LA) *la,
                                                             const TY(OA) *ob, const TY(LA) *lb) {
  const long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= (long long)BATCH * SQ * HEADS * HD) return;
  const long long d = i % HD, h = (i / HD) % HEADS, s = (i / ((long long)HD * HEADS)) % SQ, b = i / ((long long)HD * HEADS * SQ);
  const long long li = (b * HEADS + h) * SQ + s;
  const float a = ld(la, li), c = ld(lb, li), m = fmaxf(a, c);
  const float wa = expf(a - m), wb = expf(c - m), sum = wa + wb;
  st(o, i, (wa * ld(oa, i) + wb * ld(ob, i)) / sum);
  if (d == 0) st(lse, li, m + logf(sum));
}
#endif

#if defined(DIT_K_LINEAR_SMALL)
// y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) (+ c[m, n]) for tiny M (a modulation's or an
// embedding's rows; and dtype mixes the matrix library does not take). Bound by reading w: a warp
// takes one row n of w for up to LS_MB rows of x at once, so w is read once for them; with VEC8 (K
// a multiple of 8) as 16-byte vectors, LS_CH of them in flight a lane before the first is used (x,
// small and read by every warp, comes from the caches).
#define LS_MB (M < 8 ? M : 8)
#define LS_MCH ((M + LS_MB - 1) / LS_MB)
#define LS_CH 8
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x, const TY(W) *w
#if HAS_BIAS
                                                             , const TY(BIAS) *bias
#endif
#if HAS_ACC
                                                             , const TY(ACC) *c
#endif
) {
  const long long o = ((long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (o >= (long long)N * LS_MCH) return;
  const long long n = o % N, m0 = o / N * LS_MB;
  float acc[LS_MB];
#pragma unroll
  for (int i = 0; i < LS_MB; i++) acc[i] = 0.f;
#if VEC8
  for (long long k0 = 8 * lane; k0 < K; k0 += 8 * 32 * LS_CH) {
    float wv[LS_CH][8];
#pragma unroll
    for (int u = 0; u < LS_CH; u++)
      if (k0 + 256 * u < K) ld8(w, n * K + k0 + 256 * u, wv[u]);
#pragma unroll
    for (int i = 0; i < LS_MB; i++) {
      if (m0 + i >= M) break;
#pragma unroll
      for (int u = 0; u < LS_CH; u++) {
        if (k0 + 256 * u >= K) break;
        float xv[8];
        ld8(x, (m0 + i) * K + k0 + 256 * u, xv);
#pragma unroll
        for (int e = 0; e < 8; e++) acc[i] = fmaf(xv[e], wv[u][e], acc[i]);
      }
    }
  }
#else
  for (int k = lane; k < K; k += 32) {
    const float wk = ld(w, n * K + k);
#pragma unroll
    for (int i = 0; i < LS_MB; i++)
      if (m0 + i < M) acc[i] = fmaf(ld(x, (m0 + i) * K + k), wk, acc[i]);
  }
#endif
#pragma unroll
  for (int i = 0; i < LS_MB; i++) {
    if (m0 + i >= M) break;
    float v = warp_sum(acc[i]);
    const long long out = (m0 + i) * N + n;
#if HAS_BIAS
    v += ld(bias, n);
#endif
#if HAS_ACC
    v += ld(c, out);
#endif
#if ACT == DIT_ABI_ACT_GELU_TANH
    v = gelu_tanh(v);
#endif
    if (lane == 0) st(y, out, v);
  }
}
#endif


#if defined(DIT_K_QUANT_FP8)
// attn_quant with heads 1 and rows 1: the rows of fp8 linears' x [M, K], quantized for the fp8
// matmul that follows (where no norm makes them with the quantizer folded in): s[m] = amax / 448
// (1 for an all-zero row), q[m, k] = e4m3(x * (448 / amax)). QT threads a row (a warp, or with
// QT = DIT_ABI_BLOCK a block for long rows: the FFN's 8960 channels), each holding its QV vectors
// of eight in registers: every load of the row is issued before the first is needed, and the row is
// read once (16 bytes of bf16 in, 8 bytes of codes out an access).
#ifndef QT
#define QT 32
#endif
#define QV ((K / 8 + QT - 1) / QT)
#if defined(ACT) || defined(T_BIAS)
// act(x + bias) of a linear whose epilogue moved here (base/ops.def: attn_quant's act and bias).
// GELU as h + h tanh(u), h = x / 2, with the multi-function unit's tanh (relative error about
// 2^-11, under the e4m3 codes' 2^-4): one of its operations an element, where the exponential and
// the division of the CPU's x / (1 + e^(-2u)) take two, which bound the pass by that unit
// (Wan2.1-1.3B's FFN rows at 32760 tokens: 89 us more a block than without the activation, on an H200).
__device__ __forceinline__ float quant_act(float v) {
#if defined(ACT) && ACT == DIT_ABI_ACT_GELU_TANH
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(v * (0.7978845608028654f + 0.035677408136300125f * v * v)));
  const float h = 0.5f * v;
  return fmaf(h, t, h);
#else
  return v;
#endif
}
#endif
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(unsigned char *q, float *s, const TY(X) *x
#if defined(T_BIAS)
                                                                      , const TY(BIAS) *bias
#endif
) {
  static_assert(K % 8 == 0, "quant_fp8: rows of whole 8-element vectors (ditc asks K % 16 == 0)");
  static_assert(QT == 32 || QT == DIT_ABI_BLOCK, "quant_fp8: a warp or a block a row");
  const int t = threadIdx.x % QT;
  const long long row = (long long)blockIdx.x * (DIT_ABI_BLOCK / QT) + threadIdx.x / QT, base = row * K;
#if QT == 32
  if (row >= M) return;  // the whole warp
#else
  __shared__ float scratch[DIT_ABI_BLOCK / 32];
#endif
  float v[QV][8], amax = 0.f;
#pragma unroll
  for (int i = 0; i < QV; i++) {
    const int k = 8 * (t + i * QT);
    if (k < K) ld8(x, base + k, v[i]);
    else
#pragma unroll
      for (int e = 0; e < 8; e++) v[i][e] = 0.f;
  }
#if defined(ACT) || defined(T_BIAS)
#pragma unroll
  for (int i = 0; i < QV; i++) {
    const int k = 8 * (t + i * QT);
    if (k >= K) continue;
#if defined(T_BIAS)
    float b[8];
    ld8(bias, k, b);
#pragma unroll
    for (int e = 0; e < 8; e++) v[i][e] += b[e];
#endif
#pragma unroll
    for (int e = 0; e < 8; e++) v[i][e] = quant_act(v[i][e]);
  }
#endif
#pragma unroll
  for (int i = 0; i < QV; i++) amax = amax_of(v[i], amax);
#if QT == 32
  amax = warp_max(amax);
#else
  amax = block_max<DIT_ABI_BLOCK>(amax, scratch);
#endif
  const float inv = amax > 0.f ? 448.f / amax : 1.f;
#pragma unroll
  for (int i = 0; i < QV; i++) {
    const int k = 8 * (t + i * QT);
    if (k < K) *(uint2 *)(q + base + k) = e4m3_encode8(v[i], inv);
  }
  if (t == 0) s[row] = amax > 0.f ? amax / 448.f : 1.f;
}
#endif

#if defined(DIT_K_ATTN_QUANT)
// attn_quant (base/ops.def): x [B, TOKENS, HEADS*HD] -> q (e4m3, or int8 with CODES_I8; x's
// layout), s [B, HEADS, NBLK] with one scale a head and block of ROWS rows. One block a (b, h, row
// block), its rows' HD channels read contiguously eight at a time: amax, then the codes (the
// second pass from the cache). e4m3 maps amax to CODE_MAX (dit_attn_quant_e4m3_max: 16 for
// attention's Q and K); int8 is dit_i8_quantize_row's rule: rint(x / s) clamped to +-127
// (NaN 0: cvt.rni gives 0).
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(unsigned char *q, float *s, const TY(X) *x) {
  static_assert(HD % 8 == 0, "attn_quant: heads of whole 8-element vectors");
  __shared__ float scratch[DIT_ABI_BLOCK / 32];
  const long long blk = blockIdx.x, r = blk % NBLK, bh = blk / NBLK, h = bh % HEADS, b = bh / HEADS;
  const long long r0 = r * ROWS, n = (TOKENS - r0 < ROWS ? TOKENS - r0 : ROWS) * HD;
  const long long base = (b * TOKENS + r0) * (HEADS * HD) + h * HD;
  float amax = 0.f, v[8];
  for (long long e = 8 * threadIdx.x; e < n; e += 8 * DIT_ABI_BLOCK) {
    ld8(x, base + e / HD * (HEADS * HD) + e % HD, v);
    amax = amax_of(v, amax);
  }
  amax = block_max<DIT_ABI_BLOCK>(amax, scratch);
  const float scale = amax > 0.f ? amax / (CODES_I8 ? 127.f : CODE_MAX) : 1.f;
#if !CODES_I8
  const float inv = amax > 0.f ? CODE_MAX / amax : 1.f;
#endif
  for (long long e = 8 * threadIdx.x; e < n; e += 8 * DIT_ABI_BLOCK) {
    const long long i = base + e / HD * (HEADS * HD) + e % HD;
    ld8(x, i, v);
#if CODES_I8
    u32 w[2] = {0u, 0u};
#pragma unroll
    for (int k = 0; k < 8; k++) w[k >> 2] |= (u32)(unsigned char)(signed char)max(-127, min(127, __float2int_rn(v[k] / scale))) << (8 * (k & 3));
    *(uint2 *)(q + i) = make_uint2(w[0], w[1]);
#else
    *(uint2 *)(q + i) = e4m3_encode8(v, inv);
#endif
  }
  if (threadIdx.x == 0) s[blk] = scale;
}
#endif

#if defined(DIT_K_ATTN_VMAX)
// attn_vmax (base/ops.def): m [B, HEADS, SPLITS, 3, HD], the channels' largest and smallest v and
// their sums (finite values) over each split of SPLIT_KEYS keys. One block a (b, h, 32 channels,
// split), 8 x 32 threads: consecutive threads on consecutive channels of a key row (coalesced),
// the 8 rows on 8 keys; VMAX_UNROLL loads in flight a thread.
#define VT_CH 32
#define VT_ROWS (DIT_ABI_BLOCK / VT_CH)
#define VMAX_UNROLL 4
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(float *m, const TY(X) *v) {
  static_assert(DIT_ABI_BLOCK == VT_ROWS * VT_CH && HD % VT_CH == 0, "attn_vmax: 8 x 32 threads, whole groups");
  __shared__ float part[3][VT_ROWS][VT_CH];
  const int tx = threadIdx.x % VT_CH, ty = threadIdx.x / VT_CH;
  const long long sp = blockIdx.x % SPLITS, blk = blockIdx.x / SPLITS, g = blk % (HD / VT_CH), bh = blk / (HD / VT_CH);
  const long long h = bh % HEADS, b = bh / HEADS, c = g * VT_CH + tx;
  const long long k0 = sp * SPLIT_KEYS, k1 = k0 + SPLIT_KEYS < KEYS ? k0 + SPLIT_KEYS : KEYS;
  const TY(X) *col = v + (b * KEYS) * (HEADS * HD) + h * HD + c;
  float mx = -DIT_INF, mn = DIT_INF, sum = 0.f;
  auto take = [&](float x) {
    if (x > mx) mx = x; // NaN never counts, as on the CPU
    if (x < mn) mn = x;
    if (isfinite(x)) sum += x;
  };
  long long key = k0 + ty;
  for (; key + (VMAX_UNROLL - 1) * VT_ROWS < k1; key += VMAX_UNROLL * VT_ROWS) {
    float a[VMAX_UNROLL];
#pragma unroll
    for (int u = 0; u < VMAX_UNROLL; u++) a[u] = ld(col, (key + u * VT_ROWS) * (HEADS * HD));
#pragma unroll
    for (int u = 0; u < VMAX_UNROLL; u++) take(a[u]);
  }
  for (; key < k1; key += VT_ROWS) take(ld(col, key * (HEADS * HD)));
  part[0][ty][tx] = mx, part[1][ty][tx] = mn, part[2][ty][tx] = sum;
  __syncthreads();
  if (ty == 0) {
#pragma unroll
    for (int i = 1; i < VT_ROWS; i++) mx = fmaxf(mx, part[0][i][tx]), mn = fminf(mn, part[1][i][tx]), sum += part[2][i][tx];
    float *o = m + (bh * SPLITS + sp) * 3 * HD + c;
    o[0] = mx, o[HD] = mn, o[2 * HD] = sum;
  }
}
#endif

#if defined(DIT_K_ATTN_QUANT_VT)
// attn_quant_vt (base/ops.def): v [B, KEYS, HEADS*HD] and its statistics m [B, HEADS, SPLITS, 3,
// HD] -> vt [B, HEADS, HD, KEYS_PAD] (e4m3 of v less its channel mean, V transposed, keys permuted
// within groups of 16 columns for the wgmma fp8 operand) and s [B, HEADS, 2, HD] (the scales, then
// the means). One block a (b, h, 128-key column tile) over the head's channels: the channels'
// means and scales from the splits' statistics (merged in split order, as the CPU) into shared
// memory; the tile read as 16-byte vectors of eight channels, a thread one key (consecutive
// threads on consecutive keys: each code byte of a warp's store lands in one row of words, no
// bank conflict), its codes gathered by column into shared memory (rows padded a word), then
// written as 128-byte rows; the blocks of tile 0 write the scales and means. (A block a 32-channel
// group with a 2-byte load an element ran at a quarter of the bandwidth.)
#define VT_TILES (KEYS_PAD > 0 ? KEYS_PAD / 128 : 1) // no keys: no blocks, but a valid modulus
#define VT_VECS (HD / 8)                             // 8-channel vectors of a key row
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(unsigned char *vt, float *s, const TY(X) *v, const float *m) {
  static_assert(DIT_ABI_BLOCK % 128 == 0 && HD % 8 == 0 && HD <= DIT_ABI_BLOCK && KEYS_PAD % 128 == 0,
                "attn_quant_vt: a thread a key of 128, whole 8-channel vectors, a thread a channel's statistics");
  __shared__ __align__(16) unsigned char codes[HD][128 + 4];
  __shared__ float c_mean[HD], c_inv[HD];
  const int tid = threadIdx.x;
  const long long t = blockIdx.x % VT_TILES, bh = blockIdx.x / VT_TILES, h = bh % HEADS, b = bh / HEADS, t0 = t * 128;
  if (tid < HD) {
    float mx = -DIT_INF, mn = DIT_INF, sum = 0.f;
    for (int sp = 0; sp < SPLITS; sp++) {
      const float *st = m + (bh * SPLITS + sp) * 3 * HD + tid;
      mx = fmaxf(mx, st[0]), mn = fminf(mn, st[HD]), sum += st[2 * HD];
    }
    const float mean = KEYS > 0 ? sum / (float)KEYS : 0.f, amax = fmaxf(mx - mean, mean - mn);
    c_mean[tid] = mean, c_inv[tid] = amax > 0.f ? 448.f / amax : 1.f;
    if (t == 0) s[bh * 2 * HD + tid] = amax > 0.f ? amax / 448.f : 1.f, s[bh * 2 * HD + HD + tid] = mean;
  }
  __syncthreads();
  const int kk = tid % 128;                                                            // this thread's key in the tile
  const int col = (kk & ~15) | ((kk & 7) >> 1) << 2 | ((kk >> 3) & 1) << 1 | (kk & 1); // its column: key 16g + pi(p) at 16g + p
  const long long key = t0 + kk;
  const TY(X) *row = v + (b * KEYS + key) * (HEADS * HD) + h * HD;
  for (int q = tid / 128; q < VT_VECS; q += DIT_ABI_BLOCK / 128) {
    float x[8] = {0.f};
    if (key < KEYS) ld8(row, 8 * q, x);
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int c = 8 * q + j;
      codes[c][col] = key < KEYS ? e4m3_encode((x[j] - c_mean[c]) * c_inv[c]) : (unsigned char)0;
    }
  }
  __syncthreads();
  unsigned char *out = vt + bh * HD * KEYS_PAD + t0;
  for (int w = tid; w < HD * 32; w += DIT_ABI_BLOCK) {
    const int ch = w / 32, word = w % 32;
    reinterpret_cast<u32 *>(out + ch * KEYS_PAD)[word] = reinterpret_cast<const u32 *>(codes[ch])[word];
  }
}
#endif

#if defined(DIT_K_EMBEDDING)
// Rows of a table by index: y [N / D rows, D] = table[ids[r]] (T_IDS int or long long); an id
// outside [0, ROWS) writes a zero row (the CPU reference refuses it).
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const T_IDS *ids, const TY(TABLE) *table) {
  const long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= N) return;
  const long long r = (long long)ids[i / D];
  st(y, i, r >= 0 && r < ROWS ? ld(table, r * D + i % D) : 0.f);
}
#endif

#if defined(DIT_K_TOKEN_SELECT)
// One token row per batch item: y [N / C, C] = x [., TOKENS, C] at the item's first position of
// its largest id (EOS < 0) or of the id EOS (0 when absent); T_IDS int or long long.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x, const T_IDS *ids) {
  const long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= N) return;
  const long long b = i / C;
  const T_IDS *row = ids + b * TOKENS;
  long long pick = 0;
#if EOS < 0
  for (long long t = 1; t < TOKENS; t++)
    if (row[t] > row[pick]) pick = t;
#else
  for (long long t = 0; t < TOKENS; t++)
    if ((long long)row[t] == EOS) {
      pick = t;
      break;
    }
#endif
  st(y, i, ld(x, (b * TOKENS + pick) * C + i % C));
}
#endif

#if defined(DIT_K_ATTENTION) || defined(DIT_K_CONV3D_MMA)
// Tensor-core helpers of the flash attention and the tiled convolution: mma.sync m16n8k16 (bf16
// in, fp32 accumulation), ldmatrix fragment loads and cp.async copies.
__device__ __forceinline__ void mma16816(float *c, const u32 *a, const u32 *b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ u32 smem_addr(const void *p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldsm_x4(u32 *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2(u32 *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(u32 *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2_t(u32 *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(p)));
}
// 16-byte global -> shared copy; src_bytes 0 fills zeros.
__device__ __forceinline__ void cp16(void *dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
#endif

#if defined(DIT_K_ATTENTION)
// Flash attention forward, bf16 in and out, fp32 accumulation, online softmax, optional LSE.
// A block of NW warps takes 16*NW query rows of one (batch, head); each warp owns 16 rows and
// runs mma.sync m16n8k16 for S = Q K^T and O += P V, keeping P in registers between the two.
// K/V tiles of BK keys stream through two shared-memory buffers with cp.async (the next tile
// loads while this one computes); fragments come from shared memory through ldmatrix (.trans
// for V). Head dims are padded to DP (a multiple of 16) with zeros; keys past LK are masked.
// Q [B, SQ, H*HD], K/V [B, LK, H*HD]; VEC (16-byte copies) needs HD and H*HD multiples of 8.
// HAS_BOUND 1 adds an input bound i32 [B] after v: batch item b's keys end at bound[b] (tiles
// past it are not loaded, the tile holding it is masked; bound <= 0: zero output, lse -inf).
// HAS_TILES 1 (with TILES_W, SPARSE_TILE) adds instead an input tiles i32 [ceil(SQ/BQ), TILES_W]
// after v: block x's row lists its count, then the key tiles of SPARSE_TILE keys it attends,
// ascending; only their BK-key parts are loaded and computed, in order (all tiles listed: the
// dense kernel's order).
// HAS_BIAS 1 adds a last input bias f32 [SQ, LK, HEADS] (after the bound, if any), added to the
// scaled scores of every batch item (T5's relative position bias).
// CAUSAL_BLOCK n > 0 (self-attention, SQ = LK) masks frame-causally: query i attends key j iff
// j / n <= i / n. Tiles wholly past the block's last query's limit are not loaded; the tiles
// straddling a row's limit are masked per key (tile 0 holds key 0, which every row sees).
#ifndef CAUSAL_BLOCK
#define CAUSAL_BLOCK 0
#endif
#ifndef HAS_BIAS
#define HAS_BIAS 0
#endif
#ifndef HAS_BOUND
#define HAS_BOUND 0
#endif
#ifndef HAS_TILES
#define HAS_TILES 0
#endif
#define DP (((HD) + 15) / 16 * 16)
// Up to ATTN_WIDE_HD a warp keeps its Q fragments in registers; wider heads (the VAE's single
// head of 384) leave them in shared memory, which also holds fewer warps and keys a tile so the
// output accumulators fit the registers and the tiles the shared memory. Above ATTN_MAX_HD (the
// Wan2.2 VAE's head of 1024) the output columns split into slices of ATTN_SPLIT_DV, a block each
// (grid y: head * NSPLIT + slice): every block computes the whole scores and softmax, and P V for
// its slice of V alone, so its accumulators are a slice's.
#if HD > DIT_ABI_ATTN_SPLIT_MAX_HD
#error "attention: head dim above ATTN_SPLIT_MAX_HD"
#endif
#if HD > DIT_ABI_ATTN_MAX_HD
#if HD % DIT_ABI_ATTN_SPLIT_DV
#error "attention: a split head dim must be a multiple of ATTN_SPLIT_DV"
#endif
#define DV DIT_ABI_ATTN_SPLIT_DV
#else
#define DV DP
#endif
#define NSPLIT (DP / DV)
#define KSV (DV + 8)  // V tiles hold the block's slice of columns
#define QREG (HD <= DIT_ABI_ATTN_WIDE_HD)
#if QREG
#define NW DIT_ABI_ATTN_WARPS
#define BK DIT_ABI_ATTN_BK
#else
#define NW DIT_ABI_ATTN_WARPS_WIDE
#define BK DIT_ABI_ATTN_BK_WIDE
#endif
#define BQ (16 * NW)
#define KS (DP + 8)  // row stride in bf16: 16-byte aligned rows that fall on distinct banks
#define VEC ((HD % 8) == 0 && ((HEADS * HD) % 8) == 0)
#if HAS_TILES && (BQ != SPARSE_TILE || SPARSE_TILE % BK != 0 || HAS_BOUND)
#error "attention: a tile schedule needs a query block of one tile, whole key blocks per tile and no bound"
#endif

// Copies rows [r0, r0 + ROWS) of a [rows_total, CH] head slice, its COLS columns from column c0
// (COLS = DP: all), into a [ROWS][COLS + 8] tile.
template <int ROWS, int COLS>
__device__ __forceinline__ void load_rows(bf16_t *dst, const bf16_t *src, int r0, int rows_total, long long CH, int c0) {
#if VEC
  for (int c = threadIdx.x; c < ROWS * (COLS / 8); c += 32 * NW) {
    const int r = c / (COLS / 8), d = (c % (COLS / 8)) * 8;
    const bool in = r0 + r < rows_total && c0 + d < HD;
    cp16(&dst[r * (COLS + 8) + d], in ? (const void *)&src[(long long)(r0 + r) * CH + c0 + d] : (const void *)src, in ? 16 : 0);
  }
#else
  for (int e = threadIdx.x; e < ROWS * COLS; e += 32 * NW) {
    const int r = e / COLS, d = e % COLS;
    dst[r * (COLS + 8) + d] = (r0 + r < rows_total && c0 + d < HD) ? src[(long long)(r0 + r) * CH + c0 + d] : (bf16_t)0;
  }
#endif
}

extern "C" __global__ void __launch_bounds__(32 * NW) dit_kernel(bf16_t *out,
#if HAS_LSE
                                                                 float *lse,
#endif
                                                                 const bf16_t *q, const bf16_t *k, const bf16_t *v
#if HAS_BOUND
                                                                 , const int *bound
#endif
#if HAS_TILES
                                                                 , const int *tiles
#endif
#if HAS_BIAS
                                                                 , const float *bias
#endif
) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16_t *sQ = (bf16_t *)smem_raw;  // [BQ][KS]
  bf16_t *sK = sQ + BQ * KS;        // [2][BK][KS]
  bf16_t *sV = sK + 2 * BK * KS;    // [2][BK][KSV]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int q0 = blockIdx.x * BQ, h = blockIdx.y / NSPLIT, c0 = (blockIdx.y % NSPLIT) * DV, b = blockIdx.z;
  const long long CH = (long long)HEADS * HD;
  const bf16_t *qb = q + ((long long)b * SQ) * CH + (long long)h * HD;
  const bf16_t *kb = k + ((long long)b * LK) * CH + (long long)h * HD;
  const bf16_t *vb = v + ((long long)b * LK) * CH + (long long)h * HD;
#if HAS_BOUND
  const int lk = min(max(bound[b], 0), LK);  // this item's keys
#else
  const int lk = LK;
#endif
#if CAUSAL_BLOCK
  const int climit = (int)min((long long)lk, ((long long)min(q0 + BQ, SQ) - 1) / CAUSAL_BLOCK * CAUSAL_BLOCK + CAUSAL_BLOCK);
#define KEYS_END climit
#else
#define KEYS_END lk
#endif
#if HAS_TILES
  const int *trow = tiles + (long long)blockIdx.x * TILES_W;  // this query tile's key tiles
  const int ntiles = trow[0] * (SPARSE_TILE / BK);
#define KEY0(j) ((trow[1 + (j) / (SPARSE_TILE / BK)] * (SPARSE_TILE / BK) + (j) % (SPARSE_TILE / BK)) * BK)
#else
  const int ntiles = (KEYS_END + BK - 1) / BK;
#define KEY0(j) ((j) * BK)
#endif

  load_rows<BQ, DP>(sQ, qb, q0, SQ, CH, 0);
  load_rows<BK, DP>(sK, kb, KEY0(0), lk, CH, 0);
  load_rows<BK, DV>(sV, vb, KEY0(0), lk, CH, c0);
  cp_commit();

#if QREG
  u32 qa[DP / 16][4];
#endif
  float o[DV / 8][4];
#pragma unroll
  for (int n = 0; n < DV / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m_a = -DIT_INF, m_b = -DIT_INF, l_a = 0.f, l_b = 0.f;  // rows g and g+8
  const float sl2 = SCALE * 1.4426950408889634f;                 // scale * log2(e)

  for (int j = 0; j < ntiles; j++) {
    const int buf = j & 1, k0 = KEY0(j);
    if (j + 1 < ntiles) {
      load_rows<BK, DP>(sK + (buf ^ 1) * BK * KS, kb, KEY0(j + 1), lk, CH, 0);
      load_rows<BK, DV>(sV + (buf ^ 1) * BK * KSV, vb, KEY0(j + 1), lk, CH, c0);
      cp_commit();
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    __syncthreads();
#if QREG
    if (j == 0) {
#pragma unroll
      for (int ks = 0; ks < DP / 16; ks++)
        ldsm_x4(qa[ks], &sQ[(warp * 16 + (lane & 15)) * KS + ks * 16 + (lane >> 4) * 8]);
    }
#endif
    const bf16_t *tK = sK + buf * BK * KS, *tV = sV + buf * BK * KSV;
    float s[BK / 8][4];
#if !QREG
    // One Q fragment at a time from shared memory, each against every key column tile.
#pragma unroll
    for (int n = 0; n < BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < DP / 16; ks++) {
      u32 qf[4];
      ldsm_x4(qf, &sQ[(warp * 16 + (lane & 15)) * KS + ks * 16 + (lane >> 4) * 8]);
#pragma unroll
      for (int n = 0; n < BK / 8; n++) {
        u32 bb[2];
        ldsm_x2(bb, &tK[(n * 8 + (lane & 7)) * KS + ks * 16 + ((lane >> 3) & 1) * 8]);
        mma16816(s[n], qf, bb);
      }
    }
#else
#pragma unroll
    for (int n = 0; n < BK / 8; n++) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks + 1 < DP / 16; ks += 2) {
        u32 bb[4];  // k steps ks and ks + 1: lanes 0-7, 8-15, 16-23, 24-31 address d + 0, 8, 16, 24
        ldsm_x4(bb, &tK[(n * 8 + (lane & 7)) * KS + ks * 16 + (lane >> 3) * 8]);
        mma16816(s[n], qa[ks], bb);
        mma16816(s[n], qa[ks + 1], bb + 2);
      }
      if ((DP / 16) & 1) {
        u32 bb[2];
        ldsm_x2(bb, &tK[(n * 8 + (lane & 7)) * KS + (DP / 16 - 1) * 16 + ((lane >> 3) & 1) * 8]);
        mma16816(s[n], qa[DP / 16 - 1], bb);
      }
    }
#endif
    // Online softmax over this tile (in log2 units); masked keys get -inf.
    float mx_a = m_a, mx_b = m_b;
#if CAUSAL_BLOCK
    const bool tail = true;  // any tile may straddle a row's limit
#elif HAS_BOUND
    const bool tail = k0 + BK > lk;
#else
    const bool tail = LK % BK != 0 && k0 + BK > LK;  // only the last tile has keys to mask
#endif
#pragma unroll
    for (int n = 0; n < BK / 8; n++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = k0 + n * 8 + t4 * 2 + (e & 1);
#if HAS_BIAS
        const int row = q0 + warp * 16 + g + (e >> 1) * 8;
        const float bv = row < SQ && key < LK ? bias[((long long)row * LK + key) * HEADS + h] * 1.4426950408889634f : 0.f;
        s[n][e] = (!tail || key < lk) ? s[n][e] * sl2 + bv : -DIT_INF;
#elif CAUSAL_BLOCK
        const int row = q0 + warp * 16 + g + (e >> 1) * 8;
        s[n][e] = key < lk && key / CAUSAL_BLOCK <= row / CAUSAL_BLOCK ? s[n][e] * sl2 : -DIT_INF;
#else
        s[n][e] = (!tail || key < lk) ? s[n][e] * sl2 : -DIT_INF;
#endif
      }
      mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const float al_a = ex2(m_a - mx_a), al_b = ex2(m_b - mx_b);
    m_a = mx_a;
    m_b = mx_b;
    float ps_a = 0.f, ps_b = 0.f;
#pragma unroll
    for (int n = 0; n < BK / 8; n++) {
      s[n][0] = ex2(s[n][0] - m_a);
      s[n][1] = ex2(s[n][1] - m_a);
      s[n][2] = ex2(s[n][2] - m_b);
      s[n][3] = ex2(s[n][3] - m_b);
      ps_a += s[n][0] + s[n][1];
      ps_b += s[n][2] + s[n][3];
    }
    l_a = l_a * al_a + ps_a;
    l_b = l_b * al_b + ps_b;
#pragma unroll
    for (int n = 0; n < DV / 8; n++) {
      o[n][0] *= al_a;
      o[n][1] *= al_a;
      o[n][2] *= al_b;
      o[n][3] *= al_b;
    }
    // O += P V: the S accumulators of key columns 16kk..16kk+15 are exactly the A fragment.
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
      u32 pa[4];
      pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int n = 0; n < DV / 8; n += 2) {
        u32 bb[4];  // n tiles n and n + 1: lanes 16-31 address the columns 8 further on
        ldsm_x4_t(bb, &tV[(kk * 16 + (lane & 15)) * KSV + n * 8 + (lane >> 4) * 8]);
        mma16816(o[n], pa, bb);
        mma16816(o[n + 1], pa, bb + 2);
      }
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
#if HAS_BOUND
  if (ntiles == 0) cp_wait<0>();  // a bound of 0: the first tiles' (zero-filling) copies
#endif
#undef KEY0
#undef KEYS_END
  // Row sums are spread over the 4 lanes of a row group.
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const int ra = q0 + warp * 16 + g, rb = ra + 8;
#if HAS_BOUND
  const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;  // no keys: zeros
#else
  const float inv_a = 1.f / l_a, inv_b = 1.f / l_b;
#endif
  bf16_t *ob = out + ((long long)b * SQ) * CH + (long long)h * HD;
#pragma unroll
  for (int n = 0; n < DV / 8; n++) {
    const int d = c0 + n * 8 + t4 * 2;
    if (d >= HD) continue;
    if (VEC) {
      if (ra < SQ) *(u32 *)&ob[(long long)ra * CH + d] = pack_bf16(o[n][0] * inv_a, o[n][1] * inv_a);
      if (rb < SQ) *(u32 *)&ob[(long long)rb * CH + d] = pack_bf16(o[n][2] * inv_b, o[n][3] * inv_b);
    } else {
#pragma unroll
      for (int e = 0; e < 2; e++) {
        if (d + e >= HD) continue;
        if (ra < SQ) ob[(long long)ra * CH + d + e] = f2bf(o[n][e] * inv_a);
        if (rb < SQ) ob[(long long)rb * CH + d + e] = f2bf(o[n][2 + e] * inv_b);
      }
    }
  }
#if HAS_LSE
  if (t4 == 0 && c0 == 0) {
    const float ln2 = 0.6931471805599453f;
    if (ra < SQ) lse[((long long)b * HEADS + h) * SQ + ra] = (m_a + log2f(l_a)) * ln2;
    if (rb < SQ) lse[((long long)b * HEADS + h) * SQ + rb] = (m_b + log2f(l_b)) * ln2;
  }
#endif
}
#endif

// The launch the code generator planned (block threads, dynamic shared memory) must be the one
// the kernel was written for.
#if defined(DIT_K_ATTENTION)
#define DIT_KERNEL_THREADS (32 * NW)
#define DIT_KERNEL_SMEM (((BQ + 2 * BK) * KS + 2 * BK * KSV) * 2)
#elif defined(DIT_K_ROWNORM)
#define DIT_KERNEL_THREADS ROW_BLOCK
#define DIT_KERNEL_SMEM 0
#else
#define DIT_KERNEL_THREADS DIT_ABI_BLOCK
#define DIT_KERNEL_SMEM 0
#endif
#if defined(DIT_LAUNCH_THREADS) && defined(DIT_LAUNCH_SMEM)
static_assert(DIT_LAUNCH_THREADS == DIT_KERNEL_THREADS, "planned block size differs from the kernel's");
static_assert(DIT_LAUNCH_SMEM == DIT_KERNEL_SMEM, "planned dynamic shared memory differs from the kernel's");
#endif

#if defined(DIT_K_CONV3D) || defined(DIT_K_CONV3D_MMA)
// Strides along frames, rows and columns (a downsampling convolution); absent: 1.
#ifndef ST
#define ST 1
#endif
#ifndef SH
#define SH 1
#endif
#ifndef SW
#define SW 1
#endif
#endif

#if defined(DIT_K_CONV3D)
// Direct convolution over channel-last video: x [BATCH, F, H, W, CIN], channel-last weights
// w [COUT, KT, KH, KW, CIN] (a Conv2d's is KT = 1), optional bias [COUT] -> y [BATCH, FO, HO, WO, COUT].
// Zeros pad PT frames before the first and PH, PW pixels before the first row and column (after
// the last: whatever FO, HO, WO reach); strides ST, SH, SW. One thread per output element,
// consecutive threads consecutive output channels of one pixel; fp32 sums.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x, const TY(W) *w
#if HAS_BIAS
                                                             , const TY(BIAS) *bias
#endif
) {
  const long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= BATCH * FO * HO * WO * COUT) return;
  const int co = (int)(i % COUT);
  long long p = i / COUT;
  const int wo = (int)(p % WO);
  p /= WO;
  const int ho = (int)(p % HO);
  p /= HO;
  const int fo = (int)(p % FO);
  const long long b = p / FO;
#if HAS_BIAS
  float acc = ld(bias, co);
#else
  float acc = 0.f;
#endif
  for (int it = 0; it < KT; it++) {
    const int fi = fo * ST + it - PT;
    if (fi < 0 || fi >= F) continue;
    for (int ih = 0; ih < KH; ih++) {
      const int hi = ho * SH + ih - PH;
      if (hi < 0 || hi >= H) continue;
      for (int iw = 0; iw < KW; iw++) {
        const int wi = wo * SW + iw - PW;
        if (wi < 0 || wi >= W) continue;
        const long long xo = (((b * F + fi) * H + hi) * (long long)W + wi) * CIN;
        const long long wb = ((((long long)co * KT + it) * KH + ih) * KW + iw) * CIN;
        for (int ci = 0; ci < CIN; ci++) acc += ld(x, xo + ci) * ld(w, wb + ci);
      }
    }
  }
  st(y, i, acc);
}
#endif

#if defined(DIT_K_CONV3D_MMA)
// The direct convolution's contract (layouts, zero padding, strides) as an implicit GEMM on tensor
// cores, bf16 x and w: y [M = BATCH*FO*HO*WO pixels, COUT] = A [M, TAPS*CIN] B^T, where pixel m's
// row of A at tap (it, ih, iw) is x's channel row at (fo ST + it - PT, ho SH + ih - PH, wo SW + iw - PW),
// zeros outside the video, and B [COUT, TAPS*CIN] is w [COUT, TAPS, CIN] itself. A block computes
// CONV_BM pixels x CONV_BN channels. Each step stages CONV_BK input channels of one tap of both
// operands in shared memory by cp.async (zero-filled outside the video and past COUT),
// double-buffered: the next step's copies run while this one computes. Steps run taps fastest,
// so a channel chunk's pixels are reread from cache. 8 warps, 4 along pixels and 2 along
// channels, each accumulate 32 x 64 outputs in fp32 with mma.sync m16n8k16, their fragments
// taken by ldmatrix as the attention kernel takes Q and K.
#define CBM DIT_ABI_CONV_BM
#define CBN DIT_ABI_CONV_BN
#define CBK DIT_ABI_CONV_BK
#define CS (CBK + 8)  // row stride in bf16: 80 bytes, so 8 ldmatrix rows fall on distinct banks
#define TAPS (KT * KH * KW)
#define MPIX ((long long)BATCH * FO * HO * WO)
#define NSTEPS (TAPS * (CIN / CBK))
#if T_X != DIT_ABI_DT_BF16 || T_W != DIT_ABI_DT_BF16 || CIN % CBK != 0
#error "conv3d mma: bf16 x and w, CIN a multiple of CONV_BK"
#endif
#if CBM != 128 || CBN != 128 || CBK != 32 || DIT_ABI_BLOCK != 256
#error "conv3d mma: written for 128 x 128 tiles, 32-channel steps and 8 warps"
#endif

// Two blocks a multiprocessor (at most 128 registers a thread): one block's loads overlap the other's mma.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK, 2) dit_kernel(TY(OUT) *y, const bf16_t *x, const bf16_t *w
#if HAS_BIAS
                                                             , const TY(BIAS) *bias
#endif
) {
  __shared__ __align__(128) bf16_t sA[2][CBM * CS];
  __shared__ __align__(128) bf16_t sB[2][CBN * CS];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int wm = warp & 3, wn = warp >> 2;
  const long long m0 = (long long)blockIdx.x * CBM;
  const int n0 = blockIdx.y * CBN;
  // A: this thread copies 16-byte segment seg of tile rows ar and ar + 64; their pixels decoded
  // once, a row past the last pixel given a frame no tap reaches (its row stays zero).
  const int seg = tid & 3, ar = tid >> 2;
  int pb[2], pf[2], ph[2], pw[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const long long m = m0 + ar + 64 * r;
    long long p = m < MPIX ? m : 0;
    pw[r] = (int)(p % WO);
    p /= WO;
    ph[r] = (int)(p % HO);
    p /= HO;
    pf[r] = m < MPIX ? (int)(p % FO) : -(1 << 30) / ST;
    pb[r] = (int)(p / FO);
  }
  // B: this thread copies 16 channels ((tid & 1) * 16 on) of output channel row br.
  const int br = tid >> 1, bc = (tid & 1) * 16;
  const int co_b = n0 + br;

  float acc[2][8][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < 8; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;

  // Step s: tap s % TAPS, input channels (s / TAPS) * CBK on.
#define STEP_TAP(s) ((s) % TAPS)
#define STEP_CI(s) (((s) / TAPS) * CBK)
  auto load = [&](int buf, int step) {
    const int tap = STEP_TAP(step), ci0 = STEP_CI(step);
    const int it = tap / (KH * KW), ih = (tap / KW) % KH, iw = tap % KW;
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int fi = pf[r] * ST + it - PT, hi = ph[r] * SH + ih - PH, wi = pw[r] * SW + iw - PW;
      const bool in = fi >= 0 && fi < F && hi >= 0 && hi < H && wi >= 0 && wi < W;
      const bf16_t *src = in ? x + ((((long long)pb[r] * F + fi) * H + hi) * (long long)W + wi) * CIN + ci0 + seg * 8 : x;
      cp16(&sA[buf][(ar + 64 * r) * CS + seg * 8], src, in ? 16 : 0);
    }
    const bool has = co_b < COUT;
    const bf16_t *wp = has ? w + ((long long)co_b * TAPS + tap) * CIN + ci0 + bc : w;
    cp16(&sB[buf][br * CS + bc], wp, has ? 16 : 0);
    cp16(&sB[buf][br * CS + bc + 8], has ? wp + 8 : w, has ? 16 : 0);
  };

  load(0, 0);
  cp_commit();
  cp_wait<0>();
  __syncthreads();
  for (int step = 0; step < NSTEPS; step++) {
    const int buf = step & 1;
    const bool more = step + 1 < NSTEPS;
    if (more) {  // the next step's operands load into the other buffer while this one computes
      load(buf ^ 1, step + 1);
      cp_commit();
    }
    const bf16_t *tA = sA[buf], *tB = sB[buf];
    u32 af[2][2][4];  // [k16 half][m tile]
#pragma unroll
    for (int ks = 0; ks < 2; ks++)
#pragma unroll
      for (int mt = 0; mt < 2; mt++) ldsm_x4(af[ks][mt], &tA[(wm * 32 + mt * 16 + (lane & 15)) * CS + ks * 16 + (lane >> 4) * 8]);
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
      u32 bb[4];  // both k16 halves: lanes 0-7, 8-15, 16-23, 24-31 address channels 0, 8, 16, 24
      ldsm_x4(bb, &tB[(wn * 64 + nt * 8 + (lane & 7)) * CS + (lane >> 3) * 8]);
#pragma unroll
      for (int mt = 0; mt < 2; mt++) {
        mma16816(acc[mt][nt], af[0][mt], bb);
        mma16816(acc[mt][nt], af[1][mt], bb + 2);
      }
    }
    if (more) cp_wait<0>();
    __syncthreads();  // the other buffer is complete, and every warp is done with this one
  }
#undef STEP_TAP
#undef STEP_CI
  // Accumulator e of tile (mt, nt): row g (+8 for e >= 2), column 2 * t4 + (e & 1).
#pragma unroll
  for (int mt = 0; mt < 2; mt++) {
    const long long ra = m0 + wm * 32 + mt * 16 + g, rbw = ra + 8;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int co = n0 + wn * 64 + nt * 8 + t4 * 2 + e;
        if (co >= COUT) continue;
#if HAS_BIAS
        const float bv = ld(bias, co);
#else
        const float bv = 0.f;
#endif
        if (ra < MPIX) st(y, ra * COUT + co, acc[mt][nt][e] + bv);
        if (rbw < MPIX) st(y, rbw * COUT + co, acc[mt][nt][2 + e] + bv);
      }
  }
}
#endif

#if defined(DIT_K_GROUPNORM)
// GroupNorm of channel-last x [B, P pixels, C]: block (g, b) normalizes group g (channels
// [g*CG, (g+1)*CG)) of batch item b over its P*CG elements in two passes over x (the mean, then
// the variance about it), fp32 sums; the third pass writes (x - mean) * rstd * w[c] + bias[c].
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x, const TY(W) *w,
                                                                       const TY(BIAS) *bias) {
  __shared__ float scratch[DIT_ABI_BLOCK / 32];
  const long long n = P * CG, base = (long long)blockIdx.y * P * C + (long long)blockIdx.x * CG;
  float s = 0.f;
  for (long long e = threadIdx.x; e < n; e += DIT_ABI_BLOCK) s += ld(x, base + (e / CG) * C + e % CG);
  const float mean = block_sum<DIT_ABI_BLOCK>(s, scratch) / (float)n;
  float q = 0.f;
  for (long long e = threadIdx.x; e < n; e += DIT_ABI_BLOCK) {
    const float d = ld(x, base + (e / CG) * C + e % CG) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(block_sum<DIT_ABI_BLOCK>(q, scratch) / (float)n + EPS);
  for (long long e = threadIdx.x; e < n; e += DIT_ABI_BLOCK) {
    const long long i = base + (e / CG) * C + e % CG;
    const int c = (int)(blockIdx.x * CG + e % CG);
    st(y, i, (ld(x, i) - mean) * rstd * ld(w, c) + ld(bias, c));
  }
}
#endif

#if defined(DIT_K_GROUPNORM_STATS) || defined(DIT_K_GROUPNORM_APPLY)
// The sliced GroupNorm of channel-last x [B, P pixels, C] (groupnorm_stats, then groupnorm_apply),
// both launched on a grid (SLICES, B): block (s, b) takes the pixel rows [s*P/SLICES,
// (s+1)*P/SLICES) of item b, which lie together in memory. GN_LANES threads cover a row, each 8
// channels (16-byte accesses, a warp reading whole rows), GN_ROWS rows a step, GN_UNROLL steps of
// loads in flight before they are used. A thread's channels stay the same over the slice.
#define GN_LANES (C / DIT_ABI_VEC)
#define GN_ROWS (DIT_ABI_BLOCK / GN_LANES)
#define GN_UNROLL 8
static_assert(C % DIT_ABI_VEC == 0 && GN_LANES <= DIT_ABI_BLOCK, "a pixel row is whole 8-channel chunks, at most one per thread");
static_assert(GROUPS <= DIT_ABI_BLOCK && C % GROUPS == 0, "the groups divide the channels, at most one per thread");
#define CG (C / GROUPS)

__device__ __forceinline__ long long gn_slice_start(long long s) { return s * P / SLICES; }

// Calls f(row, v) for each of this thread's rows in [p0, p1) of x (item base xb), v its 8 channels
// from c0, GN_UNROLL rows' loads issued before the first is used.
template <typename T, typename F>
__device__ __forceinline__ void gn_rows(const T *xb, long long p0, long long p1, int c0, F f) {
  long long p = p0 + threadIdx.x / GN_LANES;
  for (; p + (GN_UNROLL - 1) * GN_ROWS < p1; p += GN_UNROLL * GN_ROWS) {
    float v[GN_UNROLL][DIT_ABI_VEC];
#pragma unroll
    for (int u = 0; u < GN_UNROLL; u++) ld8(xb, (p + u * GN_ROWS) * C + c0, v[u]);
#pragma unroll
    for (int u = 0; u < GN_UNROLL; u++) f(p + u * GN_ROWS, v[u]);
  }
  for (; p < p1; p += GN_ROWS) {
    float v[DIT_ABI_VEC];
    ld8(xb, p * C + c0, v);
    f(p, v);
  }
}
#endif

#if defined(DIT_K_GROUPNORM_STATS)
// stats f32 [B, SLICES, GROUPS, 2]: per slice and group the mean and M2 (the sum of squared
// deviations from it). Each thread sums d = x - shift and d^2 in fp32 for its channels, the
// shift being the slice's first value of the channel's group: one of the values, so d stays
// within the spread and the squares do not cancel against the mean's. The block then adds the
// threads' sums per group in a fixed order (deterministic): mean = shift + sum d / n,
// M2 = sum d^2 - (sum d)^2 / n.
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(float *stats, const TY(X) *x) {
  __shared__ float red[2][GN_ROWS * C];
  const int lane = threadIdx.x % GN_LANES, row = threadIdx.x / GN_LANES, c0 = lane * DIT_ABI_VEC;
  const long long s = blockIdx.x, b = blockIdx.y, p0 = gn_slice_start(s), p1 = gn_slice_start(s + 1);
  const TY(X) *xb = x + b * P * C;
  float shift[DIT_ABI_VEC], s1[DIT_ABI_VEC], s2[DIT_ABI_VEC];
#pragma unroll
  for (int k = 0; k < DIT_ABI_VEC; k++) shift[k] = ld(xb, p0 * C + (c0 + k) / CG * CG), s1[k] = s2[k] = 0.f;
  if (row < GN_ROWS) {
    gn_rows(xb, p0, p1, c0, [&](long long, const float *v) {
#pragma unroll
      for (int k = 0; k < DIT_ABI_VEC; k++) {
        const float d = v[k] - shift[k];
        s1[k] += d;
        s2[k] = fmaf(d, d, s2[k]);
      }
    });
#pragma unroll
    for (int k = 0; k < DIT_ABI_VEC; k++) red[0][row * C + c0 + k] = s1[k], red[1][row * C + c0 + k] = s2[k];
  }
  __syncthreads();
  // A warp a group: its GN_ROWS x CG sums, lane-strided, then across the warp.
  const int warp = threadIdx.x / 32, wl = threadIdx.x % 32;
  for (int g = warp; g < GROUPS; g += DIT_ABI_BLOCK / 32) {
    float a = 0.f, q = 0.f;
    for (int e = wl; e < GN_ROWS * CG; e += 32) {
      const int i = e / CG * C + g * CG + e % CG;
      a += red[0][i];
      q += red[1][i];
    }
    a = warp_sum(a);
    q = warp_sum(q);
    if (wl == 0) {
      const float md = a / (float)((p1 - p0) * CG);
      float *o = stats + ((b * SLICES + s) * GROUPS + g) * 2;
      o[0] = ld(xb, p0 * C + g * CG) + md;
      o[1] = fmaxf(q - a * md, 0.f);
    }
  }
}
#endif

#if defined(DIT_K_GROUPNORM_APPLY)
// y = (x - mean) * rstd * w[c] + bias[c] from groupnorm_stats' slices. Each block first merges
// its item's SLICES x GROUPS statistics (read from L2), GN_TPG threads a group, in a fixed order:
// the count-weighted mean (of the slices' deviations from slice 0's mean, which keeps the terms
// small), then M2 = sum of M2_s + n_s (mean_s - mean)^2; then it normalizes its slice's rows.
#define GN_TPG (DIT_ABI_BLOCK / GROUPS)
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x, const float *stats, const TY(W) *w,
                                                                       const TY(BIAS) *bias) {
  __shared__ float part[DIT_ABI_BLOCK], gmean[GROUPS], grstd[GROUPS];
  const long long b = blockIdx.y;
  const float *st = stats + b * SLICES * GROUPS * 2;
  const int g = threadIdx.x % GROUPS, j = threadIdx.x / GROUPS;
  const float n = (float)(P * CG), ref = st[g * 2];
  float a = 0.f;
  if (j < GN_TPG)
    for (long long s = j; s < SLICES; s += GN_TPG) a += (float)((gn_slice_start(s + 1) - gn_slice_start(s)) * CG) * (st[(s * GROUPS + g) * 2] - ref);
  part[threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.x < GROUPS) {
    float t = 0.f;
    for (int i = 0; i < GN_TPG; i++) t += part[i * GROUPS + threadIdx.x];
    gmean[threadIdx.x] = ref + t / n;
  }
  __syncthreads();
  const float mean = gmean[g];
  float q = 0.f;
  if (j < GN_TPG)
    for (long long s = j; s < SLICES; s += GN_TPG) {
      const float d = st[(s * GROUPS + g) * 2] - mean;
      q += st[(s * GROUPS + g) * 2 + 1] + (float)((gn_slice_start(s + 1) - gn_slice_start(s)) * CG) * d * d;
    }
  part[threadIdx.x] = q;
  __syncthreads();
  if (threadIdx.x < GROUPS) {
    float t = 0.f;
    for (int i = 0; i < GN_TPG; i++) t += part[i * GROUPS + threadIdx.x];
    grstd[threadIdx.x] = rsqrtf(t / n + EPS);
  }
  __syncthreads();
  if (threadIdx.x / GN_LANES >= GN_ROWS) return;
  const int c0 = threadIdx.x % GN_LANES * DIT_ABI_VEC;
  float m[DIT_ABI_VEC], r[DIT_ABI_VEC], wv[DIT_ABI_VEC], bv[DIT_ABI_VEC];
#pragma unroll
  for (int k = 0; k < DIT_ABI_VEC; k++)
    m[k] = gmean[(c0 + k) / CG], r[k] = grstd[(c0 + k) / CG], wv[k] = ld(w, c0 + k), bv[k] = ld(bias, c0 + k);
  const long long s = blockIdx.x, base = b * P * C;
  gn_rows(x + base, gn_slice_start(s), gn_slice_start(s + 1), c0, [&](long long p, float *v) {
#pragma unroll
    for (int k = 0; k < DIT_ABI_VEC; k++) v[k] = (v[k] - m[k]) * r[k] * wv[k] + bv[k];
    st8(y, base + p * C + c0, v);
  });
}
#endif

#if defined(DIT_K_UPSAMPLE)
// Nearest upsampling of channel-last x [BF, H, W, C] (BF = batch x frames) by S: y [BF, S*H, S*W, C].
extern "C" __global__ void __launch_bounds__(DIT_ABI_BLOCK) dit_kernel(TY(OUT) *y, const TY(X) *x) {
  const long long i = (long long)blockIdx.x * DIT_ABI_BLOCK + threadIdx.x;
  if (i >= BF * (S * H) * (S * W) * C) return;
  const long long c = i % C, p = i / C, wo = p % (S * W), ho = (p / (S * W)) % (S * H), bf = p / ((S * W) * (S * H));
  st(y, i, ld(x, ((bf * H + ho / S) * W + wo / S) * C + c));
}
#endif
