// Helpers for attn_bench: random fill, an fp32 reference attention on sampled query rows, a
// gather of the kernel's rows at those samples, and a count of non-finite outputs.

// The kernels' own storage type and bf16 conversions, so the reference rounds as they do.
#include "dit_abi.h"
#include "dit_device.cuh"

// Uniform values in [-amp, amp) from a hash of (index, seed).
// Uniform in [-amp, amp), plus off * ((c % 5) - 1) in channel c = i % ch (channel means of -off to 3 off).
extern "C" __global__ void fill_bf16(bf16_t *p, unsigned long long n, unsigned long long seed, float amp, float off, int ch) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    const float u = (float)(x >> 40) * (1.f / 16777216.f);
    p[i] = f2bf((2.f * u - 1.f) * amp + off * (float)((int)(i % (unsigned long long)ch) % 5 - 1));
  }
}

__device__ float block_reduce(float v, bool is_max, float *red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int i = 1; i < nw; i++) r = is_max ? fmaxf(r, red[i]) : r + red[i];
  return r;
}

// One block (256 threads) per sample (b, h, r): scores in fp32 into scratch, softmax, P V.
extern "C" __global__ void ref_attn(float *ref_out, float *ref_lse, float *scratch, const bf16_t *q, const bf16_t *k,
                                    const bf16_t *v, const int *samples, int H, int SQ, int LK, int HD, float scale) {
  __shared__ float qs[256];
  __shared__ float red[32];
  __shared__ float part[256];
  const int si = blockIdx.x, b = samples[3 * si], h = samples[3 * si + 1], r = samples[3 * si + 2];
  const long long CH = (long long)H * HD;
  const bf16_t *qr = q + ((long long)b * SQ + r) * CH + (long long)h * HD;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) qs[d] = bf2f(qr[d]);
  __syncthreads();
  float *sc = scratch + (long long)si * LK;
  const bf16_t *kb = k + (long long)b * LK * CH + (long long)h * HD;
  const bf16_t *vb = v + (long long)b * LK * CH + (long long)h * HD;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  float mx = __int_as_float(0xff800000);
  for (int key = warp; key < LK; key += nw) {
    float acc = 0.f;
    for (int d = lane; d < HD; d += 32) acc += qs[d] * bf2f(kb[(long long)key * CH + d]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    acc *= scale;
    if (lane == 0) sc[key] = acc;
    mx = fmaxf(mx, acc);
  }
  mx = block_reduce(mx, true, red);  // its __syncthreads also publishes sc to the block
  float sum = 0.f;
  for (int key = threadIdx.x; key < LK; key += blockDim.x) sum += expf(sc[key] - mx);
  sum = block_reduce(sum, false, red);
  const int groups = blockDim.x / HD, grp = threadIdx.x / HD, d = threadIdx.x % HD;
  float acc = 0.f;
  if (grp < groups)
    for (int key = grp; key < LK; key += groups) acc += expf(sc[key] - mx) * bf2f(vb[(long long)key * CH + d]);
  part[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x < HD) {
    float t = 0.f;
    for (int g2 = 0; g2 < groups; g2++) t += part[g2 * HD + threadIdx.x];
    ref_out[(long long)si * HD + threadIdx.x] = t / sum;
  }
  if (threadIdx.x == 0) ref_lse[si] = mx + logf(sum);
}

extern "C" __global__ void gather_rows(float *dst, float *dst_lse, const bf16_t *out, const float *lse, const int *samples,
                                       int H, int SQ, int HD) {
  const int si = blockIdx.x, b = samples[3 * si], h = samples[3 * si + 1], r = samples[3 * si + 2];
  const long long CH = (long long)H * HD;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) dst[(long long)si * HD + d] = bf2f(out[((long long)b * SQ + r) * CH + h * HD + d]);
  if (threadIdx.x == 0) dst_lse[si] = lse[((long long)b * H + h) * SQ + r];
}

extern "C" __global__ void count_nonfinite(const bf16_t *p, unsigned long long n, unsigned long long *count) {
  unsigned long long c = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    c += (p[i] & 0x7f80u) == 0x7f80u;
  for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
  if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}

// ---- the fp8 kernel's inputs (ATT_FP8; the scheme of attn_quant and attn_quant_vt) ----
__device__ unsigned char e4m3(float x) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(0.f), "f"(x));
  return (unsigned char)(r & 0xff);
}

// Blocks of `rows` rows x HD channels of one head, grid (ceil(S/rows), H, B), 256 threads:
// s = amax / DIT_ABI_ATT_QK_E4M3_MAX (16; 1 if zero), codes e4m3(x / s); with i8, s = amax / 127 and codes rint(x / s)
// (the int8 Q K^T form); x and x8 [B, S, H*HD], xs [B, H, ceil(S/rows)].
extern "C" __global__ void quant_blocks(unsigned char *x8, float *xs, const bf16_t *x, int S, int H, int HD, int rows, int i8) {
  __shared__ float red[32];
  const int r0 = blockIdx.x * rows, h = blockIdx.y, b = blockIdx.z, n = min(rows, S - r0) * HD;
  const long long CH = (long long)H * HD, base = ((long long)b * S + r0) * CH + (long long)h * HD;
  float m = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(bf2f(x[base + (i / HD) * CH + i % HD])));
  m = block_reduce(m, true, red);
  const float s = m > 0.f ? m / (i8 ? 127.f : (float)DIT_ABI_ATT_QK_E4M3_MAX) : 1.f;
  if (threadIdx.x == 0) xs[((long long)b * H + h) * gridDim.x + blockIdx.x] = s;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const long long at = base + (i / HD) * CH + i % HD;
    x8[at] = i8 ? (unsigned char)(signed char)max(-127, min(127, __float2int_rn(bf2f(x[at]) / s))) : e4m3(bf2f(x[at]) / s);
  }
}

// V transposed with its keys permuted in 16s as the kernel's P fragments need (pi below), one
// scale a channel: grid (HD, H, B), 256 threads; v [B, L, H*HD], vt [B, H, HD, LP], vs [B, H, HD].
// V less its channel mean (as attn_quant_vt; center 0: means of 0): vs [B, H, 2, HD], the scales
// then the means.
extern "C" __global__ void quant_vt(unsigned char *vt, float *vs, const bf16_t *v, int L, int LP, int H, int HD, int center) {
  __shared__ float red[32];
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const long long CH = (long long)H * HD, base = (long long)b * L * CH + (long long)h * HD + c;
  float mu = 0.f;
  if (center) {
    for (int i = threadIdx.x; i < L; i += blockDim.x) mu += bf2f(v[base + i * CH]);
    mu = block_reduce(mu, false, red) / (float)L;
  }
  float m = 0.f;
  for (int i = threadIdx.x; i < L; i += blockDim.x) m = fmaxf(m, fabsf(bf2f(v[base + i * CH]) - mu));
  m = block_reduce(m, true, red);
  const float s = m > 0.f ? m / 448.f : 1.f;
  const long long row = (((long long)b * H + h) * HD + c) * LP;
  if (threadIdx.x == 0) vs[((long long)b * H + h) * HD * 2 + c] = s, vs[((long long)b * H + h) * HD * 2 + HD + c] = mu;
  for (int col = threadIdx.x; col < LP; col += blockDim.x) {
    const int p = col & 15, t = p >> 2, j = p & 3, key = (col & ~15) + (j < 2 ? 2 * t + j : 6 + 2 * t + j);
    vt[row + col] = key < L ? e4m3((bf2f(v[base + key * CH]) - mu) / s) : 0;
  }
}
