// Convolution for Hopper (sm_90a): conv3d's contract (channel-last video x [BATCH, F, H, W, CIN],
// channel-last weights w [COUT, KT, KH, KW, CIN] or, WRANK 4, [COUT, KH, KW, CIN], optional bias
// [COUT], y [BATCH, FO, HO, WO, COUT]; zeros pad PT frames before the first and PH, PW pixels on
// both sides; stride 1) as an implicit GEMM on wgmma, bf16 in and out, fp32 accumulation.
//
// Specialization (prepended as #defines): the dims above, HAS_BIAS (T_BIAS its dtype), CBN output
// channels per block (a wgmma N: 8, 16, 32, 64, 96, 128, 160, 176 or 192), CBK input channels per
// step (64, 32 or 16: 128-, 64- or 32-byte rows, swizzled as wide), CST pipeline stages, and the
// launch ditc planned (DIT_LAUNCH_THREADS, DIT_LAUNCH_SMEM; checked against CONV_THREADS and
// CONV_SMEM). Headers: dit_abi.h, dit_device.cuh, dit_sm90.cuh.
//
// Entry: dit_kernel(y, x, w, [bias,] tmap_x, tmap_w). The tensor maps (CUtensorMap by value) view
// x and w in their own dims, innermost first: x {CIN, W, H, F, BATCH} with box {CBK, TILE_W,
// TILE_H, 1, 1}, w {CIN, KW, KH, KT, COUT} (or {CIN, KW, KH, COUT}) with box {CBK, 1, 1, 1, CBN},
// both with a CBK * 2-byte swizzle. Grid (ceil(WO / TILE_W) * ceil(HO / TILE_H), ceil(COUT /
// CBN), BATCH * FO); block CONV_THREADS; dynamic shared memory CONV_SMEM bytes.
//
// A block computes TILE_H x TILE_W output pixels of one frame (128 GEMM rows, pixel (i, j) row
// i * TILE_W + j) by CBN output channels. The reduction runs over the taps, and within a tap over
// CBK-channel steps. For tap (kt, kh, kw), the A operand is simply x's box at (ci, w0 + kw - PW,
// h0 + kh - PH, f + kt - PT, b): the bulk tensor copy fills what lies outside the video, the
// padding included, with zeros, so the input is never copied or padded; channels past CIN are
// zeros too, and the weight box's rows past COUT. Warpgroup 0 is the producer (one thread streams
// A and B through a CST-deep ring: "full" mbarriers count the bytes in, "empty" ones the consumer
// warps done with a slot); warpgroups 1 and 2 each multiply 64 of the rows by wgmma from shared
// memory, keeping one step's products in flight while the next step's are issued. The epilogue
// adds the bias and stores the pixels inside the output.

#include "dit_abi.h"
#include "dit_device.cuh"
#include "dit_sm90.cuh"

#define TILE_W DIT_ABI_CONV90_TILE_W
#define TILE_H DIT_ABI_CONV90_TILE_H
#define CONV_THREADS (3 * 128)
#define A_BYTES (TILE_W * TILE_H * CBK * 2)
#define B_BYTES (CBN * CBK * 2)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define BAR_OFF (CST * STAGE_BYTES)
#define CONV_SMEM (DIT_ABI_CONV90_SMEM_ALIGN + BAR_OFF + 16 * CST)
#define TAPS (KT * KH * KW)
#define CSTEPS ((CIN + CBK - 1) / CBK)
#define NSTEPS (TAPS * CSTEPS)
#define TILES_W ((WO + TILE_W - 1) / TILE_W)

#if TILE_W * TILE_H != 128
#error "dit_conv_sm90: a block's pixels are two warpgroups' 64 rows"
#endif
#if CBK != 64 && CBK != 32 && CBK != 16
#error "dit_conv_sm90: CBK must be 64, 32 or 16"
#endif
#if WRANK != 4 && WRANK != 5
#error "dit_conv_sm90: WRANK must be 4 or 5"
#endif
#if WRANK == 4 && KT != 1
#error "dit_conv_sm90: a rank-4 weight is one frame's"
#endif
#if T_OUT != DIT_ABI_DT_BF16
#error "dit_conv_sm90: bf16 output"
#endif
#if defined(DIT_LAUNCH_THREADS) && defined(DIT_LAUNCH_SMEM)
static_assert(DIT_LAUNCH_THREADS == CONV_THREADS, "dit_conv_sm90: planned block size differs from CONV_THREADS");
static_assert(DIT_LAUNCH_SMEM == CONV_SMEM, "dit_conv_sm90: planned dynamic shared memory differs from CONV_SMEM");
#endif

#define BAR_FULL(base, s) ((base) + 8u * (s))
#define BAR_EMPTY(base, s) ((base) + 8u * (CST + (s)))

#if HAS_BIAS
#if T_BIAS == DIT_ABI_DT_BF16
#define BIAS_T bf16_t
__device__ __forceinline__ float bias_at(const bf16_t *b, int i) { return bf2f(b[i]); }
#else
#define BIAS_T float
__device__ __forceinline__ float bias_at(const float *b, int i) { return b[i]; }
#endif
#endif

extern "C" __global__ void __launch_bounds__(CONV_THREADS, 1) dit_kernel(bf16_t *y, const bf16_t *x, const bf16_t *w,
#if HAS_BIAS
                                                                         const BIAS_T *bias,
#endif
                                                                         const __grid_constant__ tmap_t tmx,
                                                                         const __grid_constant__ tmap_t tmw) {
  (void)x, (void)w;
  extern __shared__ unsigned char smem_raw[];
  const u32 base = (smem_u32(smem_raw) + (DIT_ABI_CONV90_SMEM_ALIGN - 1)) & ~(u32)(DIT_ABI_CONV90_SMEM_ALIGN - 1);
  const u32 bars = base + BAR_OFF;
  const int w0 = (int)(blockIdx.x % TILES_W) * TILE_W, h0 = (int)(blockIdx.x / TILES_W) * TILE_H;
  const int n0 = (int)blockIdx.y * CBN, f = (int)(blockIdx.z % FO), b = (int)(blockIdx.z / FO);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < CST; s++) {
      mbar_init(BAR_FULL(bars, s), 1);
      mbar_init(BAR_EMPTY(bars, s), 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int wg = threadIdx.x >> 7;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x == 0) {
      tma_prefetch_desc(&tmx);
      tma_prefetch_desc(&tmw);
      for (int step = 0; step < NSTEPS; step++) {
        const int s = step % CST;
        const u32 ph = (u32)(step / CST) & 1u;
        const int tap = step / CSTEPS, ci = (step % CSTEPS) * CBK;
        const int kt = tap / (KH * KW), kh = (tap / KW) % KH, kw = tap % KW;
        mbar_wait(BAR_EMPTY(bars, s), ph ^ 1u);
        mbar_expect_tx(BAR_FULL(bars, s), STAGE_BYTES);
        const u32 sa = base + s * STAGE_BYTES;
        tma_load_5d(sa, &tmx, ci, w0 + kw - PW, h0 + kh - PH, f + kt - PT, b, BAR_FULL(bars, s));
#if WRANK == 5
        tma_load_5d(sa + A_BYTES, &tmw, ci, kw, kh, kt, n0, BAR_FULL(bars, s));
#else
        tma_load_4d(sa + A_BYTES, &tmw, ci, kw, kh, n0, BAR_FULL(bars, s));
#endif
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int cw = wg - 1, tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31;
    float acc[CBN / 2];
#pragma unroll
    for (int i = 0; i < CBN / 2; i++) acc[i] = 0.f;
    for (int step = 0; step < NSTEPS; step++) {
      const int s = step % CST;
      mbar_wait(BAR_FULL(bars, s), (u32)(step / CST) & 1u);
      const u32 sa = base + s * STAGE_BYTES;
      const u64 da = desc_kmajor_sw<CBK * 2>(sa + cw * 64 * CBK * 2), db = desc_kmajor_sw<CBK * 2>(sa + A_BYTES);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < CBK / 16; kk++) wgmma_ss(acc, da + (u64)((kk * 32) >> 4), db + (u64)((kk * 32) >> 4), step > 0 || kk > 0);
      wgmma_commit();
      // The step before is complete: its slot goes back to the producer.
      wgmma_wait<1>();
      if (step > 0 && lane == 0) mbar_arrive(BAR_EMPTY(bars, (step - 1) % CST));
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < CBN / 2; i++) reg_fence(acc[i]);
    // Accumulator 4i + e: row warp * 16 + lane / 4 (+8 for e >= 2), channel 8i + 2 (lane % 4) + (e & 1).
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int r = cw * 64 + warp * 16 + (lane >> 2) + 8 * half;
      const int ho = h0 + r / TILE_W, wo = w0 + r % TILE_W;
      if (ho >= HO || wo >= WO) continue;
      bf16_t *yr = y + ((((long long)b * FO + f) * HO + ho) * WO + wo) * COUT;
#pragma unroll
      for (int i = 0; i < CBN / 8; i++) {
        const int co = n0 + 8 * i + 2 * (lane & 3);
        float v0 = acc[4 * i + 2 * half], v1 = acc[4 * i + 2 * half + 1];
#if HAS_BIAS
        if (co < COUT) v0 += bias_at(bias, co);
        if (co + 1 < COUT) v1 += bias_at(bias, co + 1);
#endif
        if (COUT % 2 == 0 && co + 1 < COUT) *(u32 *)&yr[co] = pack_bf16(v0, v1);
        else {
          if (co < COUT) yr[co] = f2bf(v0);
          if (co + 1 < COUT) yr[co + 1] = f2bf(v1);
        }
      }
    }
  }
}
