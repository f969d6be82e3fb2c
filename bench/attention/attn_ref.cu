// Helpers for attn_bench: random fill, an fp32 reference attention on sampled query rows, a
// gather of the kernel's rows at those samples, and a count of non-finite outputs.

// The kernels' own storage type and bf16 conversions, so the reference rounds as they do.
#include "dit_device.cuh"

// Uniform values in [-amp, amp) from a hash of (index, seed).
extern "C" __global__ void fill_bf16(bf16_t *p, unsigned long long n, unsigned long long seed, float amp) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    const float u = (float)(x >> 40) * (1.f / 16777216.f);
    p[i] = f2bf((2.f * u - 1.f) * amp);
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
