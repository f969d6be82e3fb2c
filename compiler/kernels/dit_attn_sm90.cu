// Flash attention forward for Hopper (sm_90a): bf16 Q, K, V and output, fp32 accumulation,
// online softmax in base 2, optional log-sum-exp (natural log). Non-causal.
//
// Specialization (prepended as #defines): HD (64 or 128), HEADS, SQ, LK, SCALE, HAS_LSE, HAS_BOUND
// (optional, default 0), and from
// ditc the launch planned (DIT_LAUNCH_THREADS, DIT_LAUNCH_SMEM; checked against ATT_THREADS,
// ATT_SMEM). Headers: dit_abi.h (generated from dit_abi.def) and dit_device.cuh.
// Tuning (optional; defaults and constants from dit_abi.h): ATT_NCW consumer warpgroups (64
// query rows each), ATT_BN keys per tile, ATT_ST shared-memory stages of K and V, ATT_PERSIST
// (with BATCH defined) for a persistent grid.
//
// Layouts: Q and out [B, SQ, HEADS*HD], K and V [B, LK, HEADS*HD] (heads interleaved in the
// channel dim), lse fp32 [B, HEADS, SQ]. Entry:
//   dit_kernel(out, [lse,] q, k, v, [bound,] tmap_q, tmap_k, tmap_v)
// The three tensor maps (CUtensorMap, passed by value) describe the 2-D views [B*SQ, HEADS*HD]
// of Q and [B*LK, HEADS*HD] of K and V: bf16, box {64 channels, rows}, 128-byte swizzle, with
// rows = ATT_BM for Q and ATT_BN for K and V. Grid (ceil(SQ/ATT_BM), HEADS, B), or with
// ATT_PERSIST (x, 1, 1) for any x (best: the multiprocessor count, at most the number of tiles
// ceil(SQ/ATT_BM)*HEADS*BATCH); block ATT_THREADS; dynamic shared memory ATT_SMEM bytes.
//
// Structure (one work tile = ATT_BM query rows of one batch and head; a CTA takes one tile, or
// with ATT_PERSIST tiles blockIdx.x, blockIdx.x + gridDim.x, ... with Q double-buffered so the
// next tile's loads overlap this one's epilogue):
//  - warpgroup 0 is the producer: one thread loads each work tile's Q and streams its K and V
//    tiles through an ATT_ST-deep ring with the bulk tensor copy engine; "full" mbarriers count
//    the bytes in, "empty" mbarriers count the consumer warps that are done with a slot;
//  - warpgroups 1..ATT_NCW are consumers of 64 query rows each: S = Q K^T and O += P V by
//    wgmma (Q, K and V read from shared memory; P from registers), online softmax on the S
//    accumulators. Within a warpgroup the next tile's Q K^T and the current P V run on the
//    tensor cores while the softmax of the tile before runs on the ALUs; across warpgroups,
//    named barriers hand the tensor cores from one warpgroup to the next so one warpgroup's
//    softmax overlaps the others' matrix products.
// Keys past LK (the tail tile, which through the 2-D view reads the next batch's rows or zero
// fill) are masked to -inf; query rows past SQ are computed and not stored.
//
// HAS_BOUND 1 (a text mask as a key bound) adds an input bound i32 [B] after v: batch item b's
// keys end at bound[b], clamped to [0, LK], read once per work tile by the producer and the
// consumers. Key tiles past the bound are neither loaded nor computed; the tile holding it is
// masked like the tail tile. A bound of 0 still runs one tile, wholly masked, so every work tile
// keeps the same pipeline; it stores zeros and lse -inf. Without HAS_BOUND the code is the
// unbounded kernel's, constant for constant.
//
// HAS_TILES 1 (with TILES_W and SPARSE_TILE, which must equal ATT_BM and ATT_BN: head dim 128)
// adds instead an input tiles i32 [MBLK, TILES_W] after v: work tile mblk's row holds its count,
// then the key tiles it attends, ascending; the producer loads and the consumers compute only
// those, in that order (all tiles listed: the dense kernel's order).
//
// ATT_FP8 1 (ATT_BN 128, 160, 192, 224 or 256; a tile schedule (ATT_BN 128) or a bound as
// above) is attention_fp8: e4m3 Q and K with fp32 scales per block of rows (q_scale [B, HEADS,
// ceil(SQ/64)], k_scale [B, HEADS, ceil(LK/ATT_BN)]: a key tile's), and V less its channel means,
// transposed, vt e4m3 [B, HEADS, HD, LKP] (LKP = LK rounded up to 128, zero columns past LK; a wide
// last tile reads past LKP, the copy engine's zero fill) with one scale and one mean a channel
// (v_scale [B, HEADS, 2, HD]); entry
//   dit_kernel(out, [lse,] q, q_scale, k, k_scale, vt, v_scale, [tiles,] tmap_q, tmap_k, tmap_vt)
// with maps over the row views [B*SQ, HEADS*HD] and [B*LK, HEADS*HD] (u8, box {HD, rows}, swizzled HD bytes) and
// [B*HEADS*HD, LKP] (box {VB keys, HD rows}, swizzled VB bytes). S = Q K^T runs on e4m3 wgmma
// (accumulated in f16: S16 below) and is scaled per tile into log2 units in the softmax; P, in
// [0, 1], is scaled by 2^8 (the row
// sums with it) so the small probabilities of long rows stay out of e4m3's subnormals, made e4m3
// codes (EXPLIN below), and each key tile's P V^T runs on e4m3 wgmma with P from registers. The S
// accumulators hold keys 2t, 2t+1, 8+2t, 9+2t (t = lane % 4) of every 16 where the fp8 A fragment
// wants 4t..4t+3, so vt holds its keys permuted to match: column 16g + p is key 16g + pi(p),
// pi(4t + j) = 2t + j for j < 2, else 6 + 2t + j (attn_quant_vt writes it so); P V sums over keys,
// so no shuffle is needed. The row sums are the rounded P's, made by the same products: each V^T
// column block in shared memory is followed by 8 rows of e4m3 ones (written once); the sums the
// output is divided by are those of the weights it was made with (and the ALUs are spared an add a
// probability: the softmax, exposed between the warpgroups' products, is the kernel's critical
// path).
// At 128 keys a tile (PROMOTE) P V^T runs as 64 x (HD + 8) into accumulators of its own (columns
// HD..HD+7: every row's sum, in each lane of the row), added to O in fp32, O and l rescaled one
// tile late in the fma that adds the tile's product: O_j = O_{j-1} * alpha_j + P_j V_j. The wider
// tiles' S accumulators leave no registers for that: P V^T accumulates into O in place (rescaled
// after each product, before the next), which V's centring keeps accurate (its products sum values
// that average to zero: without it an offset channel of a long row loses its late tiles' terms in
// the tensor cores' narrow accumulation, measured 38% off at 32760 keys), and the row sums'
// product runs apart, 64 x 8 into accumulators of their own, added to l in fp32 a tile. The output
// is O * v_scale[0] / l + v_scale[1].
//
// ATT_QK_I8 1 (with ATT_FP8) takes Q and K as int8 codes (--attn-quant int8, SageAttention2's
// split): S = Q K^T runs on s8 wgmma into exact int32 sums, P V stays e4m3. The sums (|S| <=
// 128 * 127^2 < 2^22) become floats by one integer add, S + 0x4B400000 read as a float being
// 1.5 * 2^23 + S exactly; the offset comes out of the tile max exactly and folds into the
// exponent's fma with the tile scale f, rounded once (at most f/2: half a step of S, far below the
// int8 codes' own rounding).
//
// ATT_SPLIT k with ATT_TAIL T (and BATCH; without bound, tile schedule or persistence) splits the
// last T work tiles' keys into k parts: the grid is 1-D, the first MBLK*HEADS*BATCH - T blocks
// take whole tiles (m-block fastest, then head, then batch) and the last T*k blocks a part each,
// the key tiles [part*NTILES/k, (part+1)*NTILES/k). A part stores its unnormalized O, row maxima
// and row sums in a workspace of the module, then counts itself in;
// the last part of a tile to arrive merges them all in part order (the same bits whichever came
// last), stores the tile and resets the count for the next launch. So a last wave that would
// leave most multiprocessors idle (3072 tiles on 132: a 24th wave of 36) runs as k shorter ones.
// The workspace belongs to the loaded module: launches of one module must not overlap (a
// stream's do not).
//
// ATT_PV_BF16 1 (with ATT_FP8: --attn-quant int8, SageAttention's first split) keeps P V in bf16:
// V is the bf16 tensor itself (the bf16 kernel's map and tiles), P is rounded to bf16 unshifted and
// O needs no channel scales; only Q K^T runs on 8-bit operands. Entry
//   dit_kernel(out, [lse,] q, q_scale, k, k_scale, v, [tiles,] tmap_q, tmap_k, tmap_v).

#include "dit_abi.h"
#include "dit_device.cuh"
#include "dit_sm90.cuh"

#if HD != 64 && HD != 128
#error "dit_attn_sm90: HD must be 64 or 128"
#endif

#if DIT_ABI_ATT90_SWIZZLE != 128 || DIT_ABI_ATT90_BOX_COLS != 64 || DIT_ABI_ATT90_WG_ROWS != 64 || DIT_ABI_ATT90_WG_THREADS != 128
#error "dit_attn_sm90: the descriptors and fragments below assume 128-byte swizzled 64-channel boxes and 64-row warpgroups"
#endif
#ifndef ATT_NCW
#if HD == 64 && !(defined(ATT_FP8) && ATT_FP8)  // fp8's registers hold two warpgroups' S, P and O
#define ATT_NCW DIT_ABI_ATT90_NCW_HD64
#else
#define ATT_NCW DIT_ABI_ATT90_NCW_HD128
#endif
#endif
#ifndef ATT_BN
#define ATT_BN DIT_ABI_ATT90_BN
#endif
#ifndef ATT_ST
#if defined(ATT_FP8) && ATT_FP8
#define ATT_ST (ATT_BN > 128 ? DIT_ABI_ATT90_ST_FP8_WIDE : DIT_ABI_ATT90_ST_FP8)
#elif HD == 64
#define ATT_ST DIT_ABI_ATT90_ST_HD64
#else
#define ATT_ST DIT_ABI_ATT90_ST_HD128
#endif
#endif
#ifndef ATT_PERSIST
#define ATT_PERSIST 0
#endif
#ifndef ATT_SCHED
#define ATT_SCHED 1  // consumer warpgroups take turns at the tensor cores (0: they issue as they are ready)
#endif
#ifndef HAS_BOUND
#define HAS_BOUND 0
#endif
#ifndef HAS_TILES
#define HAS_TILES 0
#endif
#ifndef ATT_FP8
#define ATT_FP8 0
#endif
#if ATT_FP8 && (ATT_BN != 128 && ATT_BN != 160 && ATT_BN != 192 && ATT_BN != 224 && ATT_BN != 256)
#error "dit_attn_sm90: fp8 attention takes key tiles of 128, 160, 192, 224 or 256 (f16 scores)"
#endif
#ifndef ATT_QK_I8
#define ATT_QK_I8 0
#endif
#if ATT_QK_I8 && !ATT_FP8
#error "dit_attn_sm90: int8 Q K^T is a form of the fp8 kernel"
#endif
#ifndef ATT_PV_BF16
#define ATT_PV_BF16 0
#endif
#if ATT_PV_BF16 && !ATT_FP8
#error "dit_attn_sm90: bf16 P V is a form of the fp8 kernel"
#endif
#define PV8 (ATT_FP8 && !ATT_PV_BF16)  // P and V^T e4m3, V's channel scales in the epilogue
// With e4m3 P V^T, P's row sums come from the tensor cores (ATT_LSUM_MMA 0: from the ALUs, as in
// the other forms; for comparison).
#ifndef ATT_LSUM_MMA
#define ATT_LSUM_MMA 1
#endif
#define LSUM (PV8 && ATT_LSUM_MMA)
// e4m3 P V^T accumulates each key tile's product in accumulators of its own, added to O in fp32
// (ATT_PROMOTE 1, the default at 128 keys a tile), or into O in place (0: the wider key tiles,
// whose S accumulators leave no registers for a second O).
#ifndef ATT_PROMOTE
#define ATT_PROMOTE (ATT_BN == 128)
#endif
#define PROMOTE (PV8 && ATT_PROMOTE)
// In place, the row sums' product runs apart (64 x 8 over the ones) into accumulators of their
// own, added to l in fp32 a tile: a sum grown over many tiles would lose the late tiles' small
// terms in the tensor cores' accumulation (measured at 32760 keys: 50% of an output row off).
#define LSEP (LSUM && !PROMOTE)
// With e4m3 P and its row sums made by the tensor cores (LSUM), P's codes come without an
// exponential (ATT_EXP_LIN 1, the default, base/dtype.h's dit_e4m3_exp2_lin on the CPU; 0, exact
// exponentials rounded, only to time against): e4m3's code of 2^x is 8 (x + 7) read as exponent
// and mantissa, so the linear interpolation of 2^x between powers of two, whose 3 mantissa bits
// are all e4m3 keeps, is that code rounded to an integer. Two fmas a probability: the first
// saturates y = (8 (x + 7) + LIN_SHIFT) / 128 to [0, 1] (probabilities under 2^-7 become 0, masked
// keys' -inf too), the second adds 128 y to 2^23, whose last place is 1, so the rounded code is the
// float's low byte; four such bytes shifted together are an A fragment quad.
// The interpolation lies 0 to 0.086 octaves above 2^x (most at the middle of an octave);
// LIN_SHIFT (-0.34 of a code) centres that, and the output divides by the same codes' sums, so
// what is left is an error about as large as e4m3's rounding (a few % a probability). The sm_90
// exponential unit (8 cycles a warp's 32 results) was the softmax's bottleneck; it is not used.
#ifndef ATT_EXP_LIN
#define ATT_EXP_LIN 1
#endif
#define EXPLIN (LSUM && ATT_EXP_LIN)
// With EXPLIN (e4m3 Q K^T), S accumulates in f16 (ATT_S16 1, the default; 0: fp32, to time
// against): the softmax runs on f16 pairs, a max, two fmas and a quarter of a byte permute a pair of
// probabilities where fp32 takes a max, two fmas and most of a byte shuffle each, and S takes half
// the registers (measured on an H200: 19% off the kernel at Wan2.1's 32760 tokens, 13% at FLUX.1's
// 4608, 20% at head dim 64). The codes' 2^23 becomes f16's 2^10 (its unit in the last place at
// 1024 is 1, so the code is again the low byte). f16 holds every partial sum: Q's and K's codes
// are at most DIT_ABI_ATT_QK_E4M3_MAX (16) in magnitude (attn_quant), so |S| <= HD * 16^2 = 32768
// < 65504. Rounding S to f16 moves a logit by at most 2^-11 of itself, and the f16 scale and offset
// of the code's fma a code by a few hundredths: both far below e4m3's own rounding of Q, K and P.
#ifndef ATT_S16
#define ATT_S16 1
#endif
#define S16 (EXPLIN && !ATT_QK_I8 && ATT_S16)
#if ATT_FP8 && ATT_BN == 256 && !S16
#error "dit_attn_sm90: fp8 attention's 256-key tiles need f16 scores (their fp32 accumulators leave no registers)"
#endif
#define LIN_SHIFT (-0.34f)
#define I2F_OFFSET 12582912.f  // 1.5 * 2^23: int32 sums below 2^22 in magnitude, as floats, exactly (ATT_QK_I8)
#if ATT_FP8 && !ATT_PV_BF16
#define P_SHIFT 8.f  // log2 of P's scale before its e4m3 rounding
#else
#define P_SHIFT 0.f
#endif
#if ATT_PERSIST && !defined(BATCH)
#error "dit_attn_sm90: ATT_PERSIST needs BATCH"
#endif
#define ATT_BM (DIT_ABI_ATT90_WG_ROWS * ATT_NCW)
#define ATT_THREADS (DIT_ABI_ATT90_WG_THREADS * (ATT_NCW + 1))
#if ATT_FP8
#define BOX_ELTS HD  // one box row of HD bytes: all the e4m3 (or int8) channels of a head
#else
#define BOX_ELTS DIT_ABI_ATT90_BOX_COLS
#endif
// Bytes of a Q or K box row, which are its swizzle: 128 (bf16's 64 channels, or 128 codes), or 64
// (the codes of head dim 64, in the 64-byte swizzle's atoms of 8 rows).
#define QK_ROW (ATT_FP8 ? HD : 128)
#define NHALF (HD / BOX_ELTS)  // column blocks of a Q or K tile
// ... and bf16 V's 64-channel boxes
#define NHALF_V (HD / DIT_ABI_ATT90_BOX_COLS)
#define NQBUF (ATT_PERSIST ? 2 : 1)
#define Q_BYTES (NHALF * ATT_BM * QK_ROW)
#define K_BYTES (NHALF * ATT_BN * QK_ROW)
#define V_BYTES (PV8 ? HD * ATT_BN : NHALF_V * ATT_BN * 128)  // fp8's V^T tile: HD rows of ATT_BN keys
// fp8's V^T stage is column blocks of VB keys (the widest of 128, 64 and 32 that divides ATT_BN),
// each HD rows of VB bytes swizzled by VB bytes; with LSUM each block is followed by
// DIT_ABI_ATT90_FP8_ONES_ROWS rows of e4m3 ones, B rows HD..HD+7 of the P V^T product (or the
// B of a product of their own, LSEP), whose columns HD..HD+7 are then P's row sums.
#if PV8
#define VB (ATT_BN % 128 == 0 ? 128 : ATT_BN % 64 == 0 ? 64 : 32)
#define VROWS (HD + (LSUM ? DIT_ABI_ATT90_FP8_ONES_ROWS : 0))
#define V_STAGE (VROWS * ATT_BN)
#else
#define V_STAGE V_BYTES
#endif
#define BAR_OFF (NQBUF * Q_BYTES + ATT_ST * (K_BYTES + V_STAGE))
#define ATT_SMEM (DIT_ABI_ATT90_SMEM_ALIGN + BAR_OFF + 8 * (4 + 4 * ATT_ST))
#define NTILES ((LK + ATT_BN - 1) / ATT_BN)
#define MBLK ((SQ + ATT_BM - 1) / ATT_BM)
// The keys of batch item b and their tiles (at least one).
#if HAS_BOUND
#define ITEM_KEYS(b) min(max(bound[(b)], 0), LK)
#define ITEM_TILES(keys) max(1, ((keys) + ATT_BN - 1) / ATT_BN)
#else
#define ITEM_KEYS(b) LK
#define ITEM_TILES(keys) NTILES
#endif
#if ATT_NCW == 2
#define CONSUMER_REGS 240
#elif ATT_NCW == 3
#define CONSUMER_REGS 160
#else
#define CONSUMER_REGS 240
#endif
#if ATT_BN % 16 != 0 || ATT_BN > 256 || ATT_BM > 256
#error "dit_attn_sm90: bad tile"
#endif
#if HAS_TILES && (ATT_BM != SPARSE_TILE || ATT_BN != SPARSE_TILE || HAS_BOUND)
#error "dit_attn_sm90: a tile schedule needs work and key tiles of SPARSE_TILE rows and no bound"
#endif
#ifndef ATT_SPLIT
#define ATT_SPLIT 0
#endif
#if ATT_SPLIT && (ATT_SPLIT < 2 || !defined(ATT_TAIL) || !defined(BATCH) || HAS_BOUND || HAS_TILES || ATT_PERSIST || NTILES < ATT_SPLIT || \
                  ATT_TAIL < 1 || ATT_TAIL > MBLK * HEADS * BATCH)
#error "dit_attn_sm90: ATT_SPLIT (at least 2, at most the key tiles) needs ATT_TAIL (1 to all work tiles) and BATCH, without bound, tile schedule or persistence"
#endif
// The key tile a work tile streams j-th: its schedule's j-th entry, or j (from its part's first, j0).
#if HAS_TILES
#define KEY_TILE(j) trow[1 + (j)]
#elif ATT_SPLIT
#define KEY_TILE(j) (j0 + (j))
#else
#define KEY_TILE(j) (j)
#endif
#if defined(DIT_LAUNCH_THREADS) && defined(DIT_LAUNCH_SMEM)
static_assert(DIT_LAUNCH_THREADS == ATT_THREADS, "dit_attn_sm90: planned block size differs from ATT_THREADS");
static_assert(DIT_LAUNCH_SMEM == ATT_SMEM, "dit_attn_sm90: planned dynamic shared memory differs from ATT_SMEM");
#endif

// ---- the kernel ----
#define BAR_FULL_Q(base, i) ((base) + 8u * (i))
#define BAR_EMPTY_Q(base, i) ((base) + 8u * (2u + (i)))
#define BAR_FULL_K(base, s) ((base) + 8u * (4u + (s)))
#define BAR_FULL_V(base, s) ((base) + 8u * (4u + ATT_ST + (s)))
#define BAR_EMPTY_K(base, s) ((base) + 8u * (4u + 2u * ATT_ST + (s)))
#define BAR_EMPTY_V(base, s) ((base) + 8u * (4u + 3u * ATT_ST + (s)))
#define SCHED_BAR(w) (1 + (w))  // named barrier 0 is __syncthreads

// Work tiles: with ATT_PERSIST, tile indices linearized m-block fastest, then head, then batch.
#if ATT_PERSIST
#define TILE_COUNT (MBLK * HEADS * BATCH)
#define TILE_FIRST ((int)blockIdx.x)
#define TILE_STRIDE ((int)gridDim.x)
#else
#define TILE_COUNT 1
#define TILE_FIRST 0
#define TILE_STRIDE 1
#endif
#if ATT_SPLIT
#define WORK_MAIN (MBLK * HEADS * BATCH - ATT_TAIL)  // blocks taking whole tiles
#define NCT (DIT_ABI_ATT90_WG_THREADS * ATT_NCW)       // consumer threads
#define SLOT_ROWS (HD / 2 + 4)                         // a consumer thread's O accumulators, m0, m1, l0, l1
#define MERGE_BAR (1 + ATT_NCW)                        // named barrier of the consumers, past the turns' ones
__device__ float att_part[ATT_TAIL * ATT_SPLIT * SLOT_ROWS * NCT];  // [tail tile][part][row][consumer thread]
__device__ unsigned att_arrived[ATT_TAIL];                          // parts stored, per tail tile
// This block's work tile, and its part (-1: the whole tile).
__device__ __forceinline__ int split_tile() {
  const int x = (int)blockIdx.x;
  return x < WORK_MAIN ? x : WORK_MAIN + (x - WORK_MAIN) / ATT_SPLIT;
}
__device__ __forceinline__ int split_part() {
  const int x = (int)blockIdx.x;
  return x < WORK_MAIN ? -1 : (x - WORK_MAIN) % ATT_SPLIT;
}
#endif
__device__ __forceinline__ void tile_coords(int t, int &mblk, int &head, int &b) {
#if ATT_SPLIT
  (void)t;
  const int w = split_tile();
  mblk = w % MBLK;
  head = (w / MBLK) % HEADS;
  b = w / (MBLK * HEADS);
#elif ATT_PERSIST
  mblk = t % MBLK;
  head = (t / MBLK) % HEADS;
  b = t / (MBLK * HEADS);
#else
  (void)t;
  mblk = blockIdx.x;
  head = blockIdx.y;
  b = blockIdx.z;
#endif
}

extern "C" __global__ void __launch_bounds__(ATT_THREADS, 1) dit_kernel(bf16_t *out,
#if HAS_LSE
                                                                        float *lse,
#endif
#if PV8
                                                                        const unsigned char *q, const float *q_scale, const unsigned char *k,
                                                                        const float *k_scale, const unsigned char *v, const float *v_scale,
#elif ATT_FP8
                                                                        const unsigned char *q, const float *q_scale, const unsigned char *k,
                                                                        const float *k_scale, const bf16_t *v,
#else
                                                                        const bf16_t *q, const bf16_t *k, const bf16_t *v,
#endif
#if HAS_BOUND
                                                                        const int *bound,
#endif
#if HAS_TILES
                                                                        const int *tiles,
#endif
                                                                        const __grid_constant__ tmap_t tmq,
                                                                        const __grid_constant__ tmap_t tmk,
                                                                        const __grid_constant__ tmap_t tmv) {
  (void)q, (void)k, (void)v;
  extern __shared__ unsigned char smem_raw[];
  const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
  const u32 sQ = base, sK = base + NQBUF * Q_BYTES, sV = sK + ATT_ST * K_BYTES, bars = base + BAR_OFF;
#if LSUM
  // The rows of ones (written once, read by the tensor cores: made visible to the async proxy
  // before the barrier).
  constexpr int BLOCK_WORDS = DIT_ABI_ATT90_FP8_ONES_ROWS * VB / 4, ONES_WORDS = BLOCK_WORDS * (ATT_BN / VB);
  for (int i = threadIdx.x; i < ATT_ST * ONES_WORDS; i += ATT_THREADS) {
    const int w = i % ONES_WORDS;
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sV + (i / ONES_WORDS) * V_STAGE + (w / BLOCK_WORDS) * VROWS * VB + HD * VB +
                                                  4 * (w % BLOCK_WORDS)),
                 "r"(0x38383838u)  // four e4m3 1.0
                 : "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif

  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      mbar_init(BAR_FULL_Q(bars, i), 1);
      mbar_init(BAR_EMPTY_Q(bars, i), 4 * ATT_NCW);  // one arrival per consumer warp
    }
#pragma unroll
    for (int s = 0; s < ATT_ST; s++) {
      mbar_init(BAR_FULL_K(bars, s), 1);
      mbar_init(BAR_FULL_V(bars, s), 1);
      mbar_init(BAR_EMPTY_K(bars, s), 4 * ATT_NCW);
      mbar_init(BAR_EMPTY_V(bars, s), 4 * ATT_NCW);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int wg = threadIdx.x >> 7;
  if (wg == 0) {
    // Producer. K/V tiles are numbered across work tiles (g) so the ring runs on unbroken.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == 0) {
      tma_prefetch_desc(&tmq);
      tma_prefetch_desc(&tmk);
      tma_prefetch_desc(&tmv);
      int g = 0;
      for (int t = TILE_FIRST, tc = 0; t < TILE_COUNT; t += TILE_STRIDE, tc++) {
        int mblk, head, b;
        tile_coords(t, mblk, head, b);
        const int qb = tc % NQBUF;
        const u32 qph = (u32)(tc / NQBUF) & 1u;
        mbar_wait(BAR_EMPTY_Q(bars, qb), qph ^ 1u);
        mbar_expect_tx(BAR_FULL_Q(bars, qb), Q_BYTES);
#pragma unroll
        for (int h = 0; h < NHALF; h++)
          tma_load_2d(sQ + qb * Q_BYTES + h * ATT_BM * QK_ROW, &tmq, head * HD + h * BOX_ELTS, b * SQ + mblk * ATT_BM,
                      BAR_FULL_Q(bars, qb));
#if HAS_TILES
        const int *trow = tiles + mblk * TILES_W;
        const int nt = trow[0];
#elif ATT_SPLIT
        const int part = split_part(), j0 = part < 0 ? 0 : part * NTILES / ATT_SPLIT;
        const int nt = part < 0 ? NTILES : (part + 1) * NTILES / ATT_SPLIT - j0;
#else
        const int nt = ITEM_TILES(ITEM_KEYS(b));
#endif
        for (int j = 0; j < nt; j++, g++) {
          const int s = g % ATT_ST;
          const u32 ph = (u32)(g / ATT_ST) & 1u;
          const int row = b * LK + KEY_TILE(j) * ATT_BN;
          mbar_wait(BAR_EMPTY_K(bars, s), ph ^ 1u);
          mbar_expect_tx(BAR_FULL_K(bars, s), K_BYTES);
#pragma unroll
          for (int h = 0; h < NHALF; h++)
            tma_load_2d(sK + s * K_BYTES + h * ATT_BN * QK_ROW, &tmk, head * HD + h * BOX_ELTS, row, BAR_FULL_K(bars, s));
          mbar_wait(BAR_EMPTY_V(bars, s), ph ^ 1u);
          mbar_expect_tx(BAR_FULL_V(bars, s), V_BYTES);
#if PV8
#pragma unroll
          for (int h = 0; h < ATT_BN / VB; h++)
            tma_load_2d(sV + s * V_STAGE + h * VROWS * VB, &tmv, KEY_TILE(j) * ATT_BN + h * VB, (b * HEADS + head) * HD,
                        BAR_FULL_V(bars, s));
#else
#pragma unroll
          for (int h = 0; h < NHALF_V; h++)
            tma_load_2d(sV + s * V_STAGE + h * ATT_BN * 128, &tmv, head * HD + h * 64, row, BAR_FULL_V(bars, s));
#endif
        }
      }
    }
  } else {
    // Consumers.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS) : "memory");
    const int cw = wg - 1;
    const int tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
#if ATT_FP8
    constexpr float sl2 = 1.f;  // fp8: S is scaled into log2 units per tile before the softmax
    constexpr int NQS = (SQ + 63) / 64, NKS = (LK + ATT_BN - 1) / ATT_BN;
    float qk_scale;            // q_scale of this warpgroup's rows * scale * log2(e)
    const float *ks_row;       // k_scale of this work tile's batch item and head
#else
    const float sl2 = (float)(SCALE) * 1.4426950408889634f;  // scale * log2(e)
#endif

#if S16
    u32 s[ATT_BN / 4];  // S accumulators as f16 pairs: s[2i] row g4, s[2i + 1] row g4+8, keys 8i + 2*t4 + {0,1}
#else
    float s[ATT_BN / 2];  // S accumulators: row g4 / g4+8 of this warp's 16, keys 8i + 2*t4 + {0,1}
#endif
#if ATT_QK_I8
    int si[ATT_BN / 2];   // int8 Q K^T's exact sums, same layout
#endif
    float o[HD / 2];      // O accumulators, same layout over the head dim
#if PV8
    u32 p[ATT_BN / 8];    // P as e4m3 quads: the A fragments of P V^T
#if S16
#elif EXPLIN
    u32 pq[ATT_BN / 8];  // the next P's quads but their last codes (lin3), while P V^T reads p
#elif LSUM
    unsigned short pq[ATT_BN / 4];  // the next P as e4m3 pairs, while P V^T reads p
#endif
#if LSEP
    float lt[4];  // one key tile's row sums (in each lane of the row: lt[0] row g4, lt[2] row g4 + 8)
#endif
#if PROMOTE
    float pt[HD / 2 + 4 * LSUM];  // one key tile's P V^T (and row sums), added to o in fp32 (add_pv)
    float pa0, pa1;       // the rescale factors o has not taken yet
#endif
#else
    u32 p[ATT_BN / 4];    // P as bf16 pairs: the A fragments of P V
#endif
#pragma unroll
    for (int i = 0; i < (int)(sizeof s / sizeof s[0]); i++) s[i] = 0;
    float m0, m1, l0, l1;  // raw-score row max, partial row sums (rows g4 and g4+8)
    u64 dq;
#if HAS_BOUND
    int lk, nt;  // this work tile's keys and key tiles
#elif HAS_TILES
    constexpr int lk = LK;
    int nt;              // this work tile's listed key tiles
    const int *trow;     // and its schedule row
#elif ATT_SPLIT
    constexpr int lk = LK;
    const int part = split_part(), j0 = part < 0 ? 0 : part * NTILES / ATT_SPLIT;  // this block's key tiles: j0, j0 + 1, ...
    const int nt = part < 0 ? NTILES : (part + 1) * NTILES / ATT_SPLIT - j0;
#else
    constexpr int lk = LK, nt = NTILES;
#endif

    // S = Q K^T over the head dim: k step kk sits at byte 32*(kk%4) of 64-channel block kk/4.
    auto issue_qk = [&](int st) {
      const u64 dk = desc_kmajor_sw<QK_ROW>(sK + st * K_BYTES);
#if ATT_FP8
      // fp8: k step kk (32 channels) sits at byte 32*kk of the one HD-byte row.
#pragma unroll
      for (int kk = 0; kk < HD / 32; kk++)
#if ATT_QK_I8
        wgmma_ss_s8(si, dq + (u64)((kk * 32) >> 4), dk + (u64)((kk * 32) >> 4), kk > 0);
#elif S16
        wgmma_ss_e4m3_f16(s, dq + (u64)((kk * 32) >> 4), dk + (u64)((kk * 32) >> 4), kk > 0);
#else
        wgmma_ss_e4m3(s, dq + (u64)((kk * 32) >> 4), dk + (u64)((kk * 32) >> 4), kk > 0);
#endif
#else
#pragma unroll
      for (int kk = 0; kk < HD / 16; kk++)
        wgmma_ss(s, dq + (u64)(((kk >> 2) * ATT_BM * 128 + (kk & 3) * 32) >> 4),
                 dk + (u64)(((kk >> 2) * ATT_BN * 128 + (kk & 3) * 32) >> 4), kk > 0);
#endif
    };
    // O += P V over the tile's keys: k step kk is key rows 16kk..16kk+15 (2048 bytes in).
    auto issue_pv = [&](int st) {
#if PV8
      // fp8: V^T is K-major (HD rows of ATT_BN keys in blocks of VB); k step kk is keys
      // 32kk..32kk+31, in block 32kk / VB at byte 32kk % VB.
#pragma unroll
      for (int kk = 0; kk < ATT_BN / 32; kk++) {
        const u64 dvt = desc_kmajor_sw<VB>(sV + st * V_STAGE + (kk * 32 / VB) * VROWS * VB) + (u64)(((kk * 32) % VB) >> 4);
#if PROMOTE
        wgmma_rs_e4m3(pt, &p[4 * kk], dvt, kk > 0);  // HD (+ 8 sums with LSUM) columns
#elif LSEP
        wgmma_rs_e4m3(o, &p[4 * kk], dvt, 1);
        wgmma_rs_e4m3(lt, &p[4 * kk], dvt + (u64)((HD * VB) >> 4), kk > 0);  // the ones after the block's HD rows
#else
        wgmma_rs_e4m3(o, &p[4 * kk], dvt, 1);
#endif
      }
#else
      const u64 dv = desc_mnmajor(sV + st * V_STAGE, ATT_BN * 128);
#pragma unroll
      for (int kk = 0; kk < ATT_BN / 16; kk++) wgmma_rs(o, &p[4 * kk], dv + (u64)((kk * 2048) >> 4));
#endif
    };
    auto fence_s = [&]() {
#pragma unroll
      for (int i = 0; i < (int)(sizeof s / sizeof s[0]); i++) {
#if ATT_QK_I8
        reg_fence(si[i]);
        s[i] = __int_as_float(si[i] + 0x4B400000);  // I2F_OFFSET + S, exactly
#else
        reg_fence(s[i]);
#endif
      }
    };
    auto fence_op = [&]() {
#pragma unroll
      for (int i = 0; i < HD / 2; i++) reg_fence(o[i]);
#if PROMOTE
#pragma unroll
      for (int i = 0; i < (int)(sizeof pt / sizeof pt[0]); i++) reg_fence(pt[i]);
#endif
#if LSEP
#pragma unroll
      for (int i = 0; i < 4; i++) reg_fence(lt[i]);
#endif
#pragma unroll
      for (int i = 0; i < (int)(sizeof p / sizeof p[0]); i++) reg_fence(p[i]);
    };
    // fp8 P V: the tensor cores accumulate e4m3 products with fewer bits than fp32 (about 14), so
    // a product accumulated in place over every key tile of a long row loses its late terms
    // against the grown sum (measured: the error against the CPU reference grew with the keys).
    // Each tile's product (4 steps of 32 keys) gets accumulators of its own and is added here in
    // fp32, as DeepSeek-V3's fp8 GEMMs and SageAttention2's fp8 P V promote theirs.
    // O is rescaled here too, one tile late: o (relative to the max before the last) takes the
    // factor of the last tile's softmax in the fma that adds the product (relative to that max).
    auto add_pv = [&]() {
#if PROMOTE
#pragma unroll
      for (int i = 0; i < HD / 8; i++) {
        o[4 * i + 0] = fmaf(o[4 * i + 0], pa0, pt[4 * i + 0]);
        o[4 * i + 1] = fmaf(o[4 * i + 1], pa0, pt[4 * i + 1]);
        o[4 * i + 2] = fmaf(o[4 * i + 2], pa1, pt[4 * i + 2]);
        o[4 * i + 3] = fmaf(o[4 * i + 3], pa1, pt[4 * i + 3]);
      }
#if LSUM
      l0 = fmaf(l0, pa0, pt[HD / 2]);  // the whole row's sum, in every lane of the row
      l1 = fmaf(l1, pa1, pt[HD / 2 + 2]);
#endif
#endif
    };
    // masked(i, e) for each key 8i + 2*t4 + e of key tile j past the keys (of the partial last tile).
    auto mask_tail = [&](int j, auto &&masked) {
#if HAS_BOUND
      if (j == nt - 1 && lk - j * ATT_BN < ATT_BN) {
#else
      if ((LK % ATT_BN) != 0 && j == NTILES - 1) {
#endif
        const int lim = lk - j * ATT_BN - 2 * t4;  // key 8i + 2*t4 + e is valid iff 8i + e < lim
#pragma unroll
        for (int i = 0; i < ATT_BN / 8; i++)
#pragma unroll
          for (int e = 0; e < 2; e++)
            if (8 * i + e >= lim) masked(i, e);
      }
    };
    // Online softmax of key tile j (its index in the keys, KEY_TILE of its turn) in place in s (probabilities relative to the new running
    // max); returns the factors that rescale the old O and row sums.
#if S16
    // (S16: the same, on f16 pairs; s_e becomes f16 1024 + 128 y, whose low byte is the code.)
    auto softmax = [&](int j, float &al0, float &al1) {
      mask_tail(j, [&](int i, int e) {
        const u32 keep = e ? 0x0000ffffu : 0xffff0000u, ninf = e ? 0xfc000000u : 0x0000fc00u;  // f16 -inf
        s[2 * i] = (s[2 * i] & keep) | ninf;
        s[2 * i + 1] = (s[2 * i + 1] & keep) | ninf;
      });
      const float f = qk_scale * ks_row[j];
      u32 x0 = s[0], x1 = s[1];
#pragma unroll
      for (int i = 1; i < ATT_BN / 8; i++) x0 = hmax2(x0, s[2 * i]), x1 = hmax2(x1, s[2 * i + 1]);
      u32 r = hmax2(__byte_perm(x0, x1, 0x5410), __byte_perm(x0, x1, 0x7632));  // (row g4's max, row g4+8's)
      r = hmax2(r, __shfl_xor_sync(0xffffffffu, r, 1));
      r = hmax2(r, __shfl_xor_sync(0xffffffffu, r, 2));
      float mx0 = h2_lo(r), mx1 = h2_hi(r);
#if HAS_BOUND
      if (mx0 == -DIT_INF) mx0 = 0.f;
      if (mx1 == -DIT_INF) mx1 = 0.f;
#endif
      mx0 = fmaxf(m0, mx0 * f);
      mx1 = fmaxf(m1, mx1 * f);
      al0 = ex2(m0 - mx0);
      al1 = ex2(m1 - mx1);
      const float ms0 = mx0 - P_SHIFT, ms1 = mx1 - P_SHIFT;
      m0 = mx0;
      m1 = mx1;
      const float fl = f * (1.f / 16);
      const u32 fl2 = f2_to_h2(fl, fl), c0 = f2_to_h2((7.f + LIN_SHIFT / 8 - ms0) * (1.f / 16), (7.f + LIN_SHIFT / 8 - ms0) * (1.f / 16)),
                c1 = f2_to_h2((7.f + LIN_SHIFT / 8 - ms1) * (1.f / 16), (7.f + LIN_SHIFT / 8 - ms1) * (1.f / 16));
#pragma unroll
      for (int i = 0; i < ATT_BN / 8; i++) {
        s[2 * i] = hfma2(hfma2_sat(s[2 * i], fl2, c0), 0x58005800u, 0x64006400u);  // f16 (128, 128), (1024, 1024)
        s[2 * i + 1] = hfma2(hfma2_sat(s[2 * i + 1], fl2, c1), 0x58005800u, 0x64006400u);
      }
    };
#else
    auto softmax = [&](int j, float &al0, float &al1) {
      mask_tail(j, [&](int i, int e) { s[4 * i + e] = s[4 * i + 2 + e] = -DIT_INF; });
#if ATT_FP8
      // fp8: the running max is in log2 units (tiles have scales of their own); the tile's raw
      // max is scaled once and the scale folds into the exponent's fma.
      const float f = qk_scale * ks_row[j];
      float mx0 = -DIT_INF, mx1 = -DIT_INF;
#else
      const float f = sl2;
      float mx0 = m0, mx1 = m1;
#endif
#pragma unroll
      for (int i = 0; i < ATT_BN / 8; i++) {
        mx0 = fmaxf(mx0, fmaxf(s[4 * i], s[4 * i + 1]));
        mx1 = fmaxf(mx1, fmaxf(s[4 * i + 2], s[4 * i + 3]));
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
#if HAS_BOUND
      // Only a bound of 0 masks a whole tile: a finite max makes its probabilities 0, not NaN.
      if (mx0 == -DIT_INF) mx0 = 0.f;
      if (mx1 == -DIT_INF) mx1 = 0.f;
#endif
#if ATT_FP8
#if ATT_QK_I8
      mx0 = fmaxf(m0, (mx0 - I2F_OFFSET) * f);  // a valid key, or a bound of 0's max of 0: finite
      mx1 = fmaxf(m1, (mx1 - I2F_OFFSET) * f);
#else
      mx0 = fmaxf(m0, mx0 * f);  // a valid key, or a bound of 0's max of 0: finite
      mx1 = fmaxf(m1, mx1 * f);
#endif
      al0 = ex2(m0 - mx0);  // 0 on the first tile (m = -inf)
      al1 = ex2(m1 - mx1);
      // P is made 2^P_SHIFT times larger (l too, so O / l is unchanged): the small probabilities of
      // long rows stay out of e4m3's subnormals.
#if ATT_QK_I8
      const float ms0 = fmaf(I2F_OFFSET, f, mx0 - P_SHIFT), ms1 = fmaf(I2F_OFFSET, f, mx1 - P_SHIFT);  // the offset out with the max
#else
      const float ms0 = mx0 - P_SHIFT, ms1 = mx1 - P_SHIFT;
#endif
#else
      al0 = ex2((m0 - mx0) * sl2);  // 0 on the first tile (m = -inf)
      al1 = ex2((m1 - mx1) * sl2);
      const float ms0 = mx0 * sl2, ms1 = mx1 * sl2;
#endif
      m0 = mx0;
      m1 = mx1;
#if EXPLIN
      // s_e becomes a float whose low byte is e4m3's code of 2^(s f - ms) (see EXPLIN).
      const float fl = f * (1.f / 16), c0 = (7.f + LIN_SHIFT / 8 - ms0) * (1.f / 16), c1 = (7.f + LIN_SHIFT / 8 - ms1) * (1.f / 16);
#pragma unroll
      for (int e = 0; e < ATT_BN / 2; e++) {
        float y;
        asm("fma.rn.sat.f32 %0, %1, %2, %3;\n" : "=f"(y) : "f"(s[e]), "f"(fl), "f"((e & 2) ? c1 : c0));
        s[e] = fmaf(y, 128.f, 8388608.f);
      }
#else
      float ps0 = 0.f, ps1 = 0.f;  // the row sums (LSUM: made by P V^T instead)
#pragma unroll
      for (int i = 0; i < ATT_BN / 8; i++) {
        s[4 * i + 0] = ex2(fmaf(s[4 * i + 0], f, -ms0));
        s[4 * i + 1] = ex2(fmaf(s[4 * i + 1], f, -ms0));
        s[4 * i + 2] = ex2(fmaf(s[4 * i + 2], f, -ms1));
        s[4 * i + 3] = ex2(fmaf(s[4 * i + 3], f, -ms1));
        if (!LSUM) {
          ps0 += s[4 * i + 0] + s[4 * i + 1];
          ps1 += s[4 * i + 2] + s[4 * i + 3];
        }
      }
      if (!LSUM) {
        l0 = l0 * al0 + ps0;
        l1 = l1 * al1 + ps1;
      }
#endif
    };
#endif
#if EXPLIN
    // The codes softmax left in s as A fragment quads (convert's order), quad i of keys k, k+1, k+4
    // and k+5 (k = lin_key(i), in fp32's numbering of the accumulators).
    auto lin_key = [&](int i) { return 16 * (i >> 2) + 8 * ((i >> 1) & 1) + 2 * (i & 1); };
#if S16
    // f16 pairs k/2 and k/2 + 2: their halves' low bytes.
    auto quad16 = [&](int i) { return __byte_perm(s[lin_key(i) / 2], s[lin_key(i) / 2 + 2], 0x6420); };
#else
    // lin3 puts the low bytes of a quad's first three in bytes 0..2 (byte 3 is 2^23's 0x4b), lin4
    // the fourth's in byte 3.
    auto lin3 = [&](int k) { return __float_as_uint(s[k]) + (__float_as_uint(s[k + 1]) << 8) + (__float_as_uint(s[k + 4]) << 16); };
    auto lin4 = [&](u32 x, int k) { return __byte_perm(x, __float_as_uint(s[k + 5]), 0x4210); };
#endif
#endif
    // The S accumulators of keys 16kk..16kk+15 are exactly the A fragment of k step kk.
    auto convert = [&](u32 *dst) {
#if S16
#pragma unroll
      for (int i = 0; i < ATT_BN / 8; i++) dst[i] = quad16(i);
#elif EXPLIN
#pragma unroll
      for (int i = 0; i < ATT_BN / 8; i++) dst[i] = lin4(lin3(lin_key(i)), lin_key(i));
#elif PV8
      // k step kk (keys 32kk..32kk+31): per row, the accumulators of 8-key groups 4kk..4kk+3 in
      // the order the permuted V^T expects (see the header).
#pragma unroll
      for (int kk = 0; kk < ATT_BN / 32; kk++) {
        dst[4 * kk + 0] = pack_e4m3x4(s[16 * kk + 0], s[16 * kk + 1], s[16 * kk + 4], s[16 * kk + 5]);
        dst[4 * kk + 1] = pack_e4m3x4(s[16 * kk + 2], s[16 * kk + 3], s[16 * kk + 6], s[16 * kk + 7]);
        dst[4 * kk + 2] = pack_e4m3x4(s[16 * kk + 8], s[16 * kk + 9], s[16 * kk + 12], s[16 * kk + 13]);
        dst[4 * kk + 3] = pack_e4m3x4(s[16 * kk + 10], s[16 * kk + 11], s[16 * kk + 14], s[16 * kk + 15]);
      }
#else
#pragma unroll
      for (int kk = 0; kk < ATT_BN / 16; kk++) {
        dst[4 * kk + 0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
        dst[4 * kk + 1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        dst[4 * kk + 2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        dst[4 * kk + 3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
      }
#endif
    };
#if LSUM && !EXPLIN
    // P as e4m3 pairs (convert's, in its order), into pq: P V_{j-1} still reads p while P_j is made,
    // and a register of p written before the wait for it would serialize the products (ptxas
    // orders every wgmma after it), so pq is packed into p after the wait.
    auto convert_halves = [&](unsigned short *h) {
#pragma unroll
      for (int kk = 0; kk < ATT_BN / 32; kk++) {
        h[8 * kk + 0] = e4m3x2(s[16 * kk + 0], s[16 * kk + 1]), h[8 * kk + 1] = e4m3x2(s[16 * kk + 4], s[16 * kk + 5]);
        h[8 * kk + 2] = e4m3x2(s[16 * kk + 2], s[16 * kk + 3]), h[8 * kk + 3] = e4m3x2(s[16 * kk + 6], s[16 * kk + 7]);
        h[8 * kk + 4] = e4m3x2(s[16 * kk + 8], s[16 * kk + 9]), h[8 * kk + 5] = e4m3x2(s[16 * kk + 12], s[16 * kk + 13]);
        h[8 * kk + 6] = e4m3x2(s[16 * kk + 10], s[16 * kk + 11]), h[8 * kk + 7] = e4m3x2(s[16 * kk + 14], s[16 * kk + 15]);
      }
    };
#endif
    // The softmax overlaps the P V product in flight only if the wait for that product stays after
    // it; a scheduler free to hoist the wait (it drags the V slot's release along) serializes the
    // two. A shared store (into the alignment slack past the barriers, never read) of the row sums,
    // or with LSUM of the xor of P's codes, is ordered before the wait and depends on every
    // exponential.
    auto hold_softmax = [&]() {
#if S16
      u32 x = 0;
#pragma unroll
      for (int i = 0; i < ATT_BN / 4; i++) x ^= s[i];
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(bars + 8u * (4u + 4u * ATT_ST)), "r"(x) : "memory");
#elif EXPLIN
      u32 x = 0;
#pragma unroll
      for (int i = 0; i < ATT_BN / 8; i++) x ^= pq[i] ^ __float_as_uint(s[lin_key(i) + 5]);
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(bars + 8u * (4u + 4u * ATT_ST)), "r"(x) : "memory");
#elif LSUM
      unsigned short x = 0;
#pragma unroll
      for (int i = 0; i < ATT_BN / 4; i++) x ^= pq[i];
      asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(bars + 8u * (4u + 4u * ATT_ST)), "h"(x) : "memory");
#else
      asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(bars + 8u * (4u + 4u * ATT_ST)), "f"(l0 + l1) : "memory");
#endif
    };
    // Tensor-core turns: consumer warpgroup cw issues after cw-1 (cyclically) has issued. Every
    // warpgroup has the same number of turns; the very last turn of the last one passes to nobody.
    auto sched_wait = [&]() {
      if (ATT_NCW > 1 && ATT_SCHED) named_sync(SCHED_BAR(cw), 256);
    };
    auto sched_pass = [&]() {
      if (ATT_NCW > 1 && ATT_SCHED) named_arrive(SCHED_BAR((cw + 1) % ATT_NCW), 256);
    };
    if (ATT_NCW > 1 && ATT_SCHED && cw == ATT_NCW - 1 && TILE_FIRST < TILE_COUNT) named_arrive(SCHED_BAR(0), 256);  // warpgroup 0 goes first

    int g = 0;  // K/V tiles consumed so far
    for (int t = TILE_FIRST, tc = 0; t < TILE_COUNT; t += TILE_STRIDE, tc++) {
      int mblk, head, b;
      tile_coords(t, mblk, head, b);
      const bool last_tile = t + TILE_STRIDE >= TILE_COUNT;
      const int qb = tc % NQBUF;
#if HAS_BOUND
      lk = ITEM_KEYS(b);
      nt = ITEM_TILES(lk);
#elif HAS_TILES
      trow = tiles + mblk * TILES_W;
      nt = trow[0];
#endif
      dq = desc_kmajor_sw<QK_ROW>(sQ + qb * Q_BYTES + cw * 64 * QK_ROW);
#if ATT_FP8
      qk_scale = q_scale[((long long)b * HEADS + head) * NQS + min(mblk * ATT_NCW + cw, NQS - 1)] * (float)(SCALE) * 1.4426950408889634f;
      ks_row = k_scale + ((long long)b * HEADS + head) * NKS;
#endif
#pragma unroll
      for (int i = 0; i < HD / 2; i++) o[i] = 0.f;
      m0 = m1 = -DIT_INF;
      l0 = l1 = 0.f;

      mbar_wait(BAR_FULL_Q(bars, qb), (u32)(tc / NQBUF) & 1u);
      {
        const int st = g % ATT_ST;
        mbar_wait(BAR_FULL_K(bars, st), (u32)(g / ATT_ST) & 1u);
        sched_wait();
        wgmma_fence();
        issue_qk(st);
        wgmma_commit();
        sched_pass();
        wgmma_wait<0>();
        fence_s();
        if (lane == 0) {
          mbar_arrive(BAR_EMPTY_K(bars, st));
          if (nt == 1) mbar_arrive(BAR_EMPTY_Q(bars, qb));
        }
        float a0, a1;
        softmax(KEY_TILE(0), a0, a1);
#if PROMOTE
        pa0 = a0, pa1 = a1;  // 0: o is 0 and takes the first product as it is
#endif
        convert(p);
      }
      for (int j = 1; j < nt; j++) {
        const int gj = g + j, st = gj % ATT_ST, pst = (gj - 1) % ATT_ST;
        const u32 ph = (u32)(gj / ATT_ST) & 1u, pph = (u32)((gj - 1) / ATT_ST) & 1u;
        mbar_wait(BAR_FULL_V(bars, pst), pph);  // loaded before K_j
        mbar_wait(BAR_FULL_K(bars, st), ph);
        sched_wait();
        wgmma_fence();
        issue_qk(st);  // S_j = Q K_j^T
        wgmma_commit();
        issue_pv(pst);  // O += P_{j-1} V_{j-1}
        wgmma_commit();
        sched_pass();
        wgmma_wait<1>();  // S_j ready; P V still running
        fence_s();
        if (lane == 0) {
          mbar_arrive(BAR_EMPTY_K(bars, st));
          if (j == nt - 1) mbar_arrive(BAR_EMPTY_Q(bars, qb));  // Q no longer read
        }
        float a0, a1;
        softmax(KEY_TILE(j), a0, a1);
#if S16
#elif EXPLIN
#pragma unroll
        for (int i = 0; i < ATT_BN / 8; i++) pq[i] = lin3(lin_key(i));
#elif LSUM
        convert_halves(pq);
#endif
        hold_softmax();
        wgmma_wait<0>();
        fence_op();
        if (lane == 0) mbar_arrive(BAR_EMPTY_V(bars, pst));
#if PROMOTE
        add_pv();
        pa0 = a0, pa1 = a1;
#else
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
          o[4 * i + 0] *= a0;
          o[4 * i + 1] *= a0;
          o[4 * i + 2] *= a1;
          o[4 * i + 3] *= a1;
        }
#if LSEP
        l0 = (l0 + lt[0]) * a0, l1 = (l1 + lt[2]) * a1;
#endif
#endif
#if S16
#pragma unroll
        for (int i = 0; i < ATT_BN / 8; i++) p[i] = quad16(i);
#elif EXPLIN
#pragma unroll
        for (int i = 0; i < ATT_BN / 8; i++) p[i] = lin4(pq[i], lin_key(i));
#elif LSUM
#pragma unroll
        for (int i = 0; i < ATT_BN / 8; i++) asm("mov.b32 %0, {%1, %2};\n" : "=r"(p[i]) : "h"(pq[2 * i]), "h"(pq[2 * i + 1]));
#else
        convert(p);
#endif
      }
      {
        const int gl = g + nt - 1, st = gl % ATT_ST;
        mbar_wait(BAR_FULL_V(bars, st), (u32)(gl / ATT_ST) & 1u);
        sched_wait();
        wgmma_fence();
        issue_pv(st);
        wgmma_commit();
        if (!(last_tile && cw == ATT_NCW - 1)) sched_pass();
        wgmma_wait<0>();
        fence_op();
        if (lane == 0) mbar_arrive(BAR_EMPTY_V(bars, st));
        add_pv();
      }
      g += nt;
#if LSEP
      l0 += lt[0], l1 += lt[2];
#endif

#if !LSUM
      // Epilogue: row sums are spread over the 4 lanes of a row group.
      l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
      l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#endif
#if ATT_SPLIT
      if (part >= 0) {
        // A part: store its state (each consumer thread its own column of the slot, so every
        // part's thread ct holds the same fragment), count it in, and leave unless it is the last
        // to arrive; the last merges the parts' states (rows g4, g4 + 8: maxima m, sums l
        // relative to them, O likewise) before the usual epilogue.
        __shared__ unsigned arrived;
        const int ct = cw * DIT_ABI_ATT90_WG_THREADS + tid, tile = split_tile() - WORK_MAIN;
        float *mine = att_part + (size_t)(tile * ATT_SPLIT + part) * SLOT_ROWS * NCT + ct;
#pragma unroll
        for (int i = 0; i < HD / 2; i++) mine[i * NCT] = o[i];
        mine[(HD / 2 + 0) * NCT] = m0;
        mine[(HD / 2 + 1) * NCT] = m1;
        mine[(HD / 2 + 2) * NCT] = l0;
        mine[(HD / 2 + 3) * NCT] = l1;
        __threadfence();
        named_sync(MERGE_BAR, NCT);
        if (ct == 0) arrived = atomicAdd(&att_arrived[tile], 1u);
        named_sync(MERGE_BAR, NCT);
        if (arrived != ATT_SPLIT - 1) return;
        __threadfence();
        // Merged in part order from the workspace (its own part too), so the result does not depend
        // on which part came last: the same bits on every run.
        const float *first = att_part + (size_t)(tile * ATT_SPLIT) * SLOT_ROWS * NCT + ct;
#pragma unroll
        for (int i = 0; i < HD / 2; i++) o[i] = __ldcg(first + i * NCT);
        m0 = __ldcg(first + (HD / 2 + 0) * NCT), m1 = __ldcg(first + (HD / 2 + 1) * NCT);
        l0 = __ldcg(first + (HD / 2 + 2) * NCT), l1 = __ldcg(first + (HD / 2 + 3) * NCT);
        for (int pq = 1; pq < ATT_SPLIT; pq++) {
          const float *th = att_part + (size_t)(tile * ATT_SPLIT + pq) * SLOT_ROWS * NCT + ct;
          const float pm0 = __ldcg(th + (HD / 2 + 0) * NCT), pm1 = __ldcg(th + (HD / 2 + 1) * NCT);
          const float pl0 = __ldcg(th + (HD / 2 + 2) * NCT), pl1 = __ldcg(th + (HD / 2 + 3) * NCT);
          const float n0 = fmaxf(m0, pm0), n1 = fmaxf(m1, pm1);
          const float a0 = ex2((m0 - n0) * sl2), b0 = ex2((pm0 - n0) * sl2), a1 = ex2((m1 - n1) * sl2), b1 = ex2((pm1 - n1) * sl2);
#pragma unroll
          for (int i = 0; i < HD / 8; i++) {
            o[4 * i + 0] = o[4 * i + 0] * a0 + __ldcg(th + (4 * i + 0) * NCT) * b0;
            o[4 * i + 1] = o[4 * i + 1] * a0 + __ldcg(th + (4 * i + 1) * NCT) * b0;
            o[4 * i + 2] = o[4 * i + 2] * a1 + __ldcg(th + (4 * i + 2) * NCT) * b1;
            o[4 * i + 3] = o[4 * i + 3] * a1 + __ldcg(th + (4 * i + 3) * NCT) * b1;
          }
          l0 = l0 * a0 + pl0 * b0;
          l1 = l1 * a1 + pl1 * b1;
          m0 = n0;
          m1 = n1;
        }
        if (ct == 0) att_arrived[tile] = 0u;  // every part has arrived: ready for the next launch
      }
#endif
#if HAS_BOUND
      const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;  // no keys: zeros
#else
      const float inv0 = 1.f / l0, inv1 = 1.f / l1;
#endif
      const int r0 = mblk * ATT_BM + cw * 64 + warp * 16 + g4, r1 = r0 + 8;
      const long long CH = (long long)HEADS * HD;
      bf16_t *ob = out + (long long)b * SQ * CH + (long long)head * HD + 2 * t4;
#if PV8
      {
        const float *vs = v_scale + ((long long)b * HEADS + head) * 2 * HD + 2 * t4;  // the scales (then the means)
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
          const float v0 = vs[8 * i], v1 = vs[8 * i + 1];
          o[4 * i + 0] *= v0;
          o[4 * i + 1] *= v1;
          o[4 * i + 2] *= v0;
          o[4 * i + 3] *= v1;
        }
      }
#endif
#if PV8
      {
        // the means back (none where no key was attended: zeros), all loaded before the first store:
        // loads after a store to out wait for it (the compiler cannot tell the two apart), and the
        // means' loads between the stores made the epilogue a chain of cache round trips (about 2 us
        // a work tile on an H200, 5% of FLUX.1's 4608-token attention).
        const float *vm = v_scale + (((long long)b * HEADS + head) * 2 + 1) * HD + 2 * t4;
        const float c0 = l0 > 0.f ? 1.f : 0.f, c1 = l1 > 0.f ? 1.f : 0.f;
        float mv[HD / 4];
#pragma unroll
        for (int i = 0; i < HD / 8; i++) mv[2 * i] = vm[8 * i], mv[2 * i + 1] = vm[8 * i + 1];
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
          const float m0v = mv[2 * i], m1v = mv[2 * i + 1];
          if (r0 < SQ) *(u32 *)&ob[(long long)r0 * CH + 8 * i] = pack_bf16(fmaf(o[4 * i + 0], inv0, m0v * c0), fmaf(o[4 * i + 1], inv0, m1v * c0));
          if (r1 < SQ) *(u32 *)&ob[(long long)r1 * CH + 8 * i] = pack_bf16(fmaf(o[4 * i + 2], inv1, m0v * c1), fmaf(o[4 * i + 3], inv1, m1v * c1));
        }
      }
#else
#pragma unroll
      for (int i = 0; i < HD / 8; i++) {
        if (r0 < SQ) *(u32 *)&ob[(long long)r0 * CH + 8 * i] = pack_bf16(o[4 * i + 0] * inv0, o[4 * i + 1] * inv0);
        if (r1 < SQ) *(u32 *)&ob[(long long)r1 * CH + 8 * i] = pack_bf16(o[4 * i + 2] * inv1, o[4 * i + 3] * inv1);
      }
#endif
#if HAS_LSE
      if (t4 == 0) {
        const float ln2 = 0.6931471805599453f;
        float *lb = lse + ((long long)b * HEADS + head) * SQ;
        if (r0 < SQ) lb[r0] = (m0 * sl2 + __log2f(l0) - P_SHIFT) * ln2;
        if (r1 < SQ) lb[r1] = (m1 * sl2 + __log2f(l1) - P_SHIFT) * ln2;
      }
#endif
    }
  }
}
