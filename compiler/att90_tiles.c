#include "compiler/att90_tiles.h"

#include "dit_abi.h"

/* The bf16 form at head dim 128 over long keys takes a wide tile, 176 or 192 keys, whichever pads
 * the keys less (176 on a tie): fewer tiles carry less of the per-tile softmax and barrier work.
 * Timed back to back on an H200 against 128: 27280 keys 635 -> 655 TFLOP/s at 176, 75600 keys
 * 633 -> 649 at 192, 32760 keys 633 -> 638 at 192. The 8-bit forms, tile schedules (a sparse tile
 * is 128 keys), head dim 64 and the persistent short-key form keep 128; the persistent form's
 * second Q buffer leaves no room for wider K and V stages. */
int dit_cuda_att90_keys_per_tile(int64_t hd, int64_t lk, int fp8, int tiled, int persist) {
  if (fp8 || tiled || persist || hd != 128) return DIT_ABI_ATT90_BN;
  const int64_t pad176 = (lk + 175) / 176 * 176 - lk, pad192 = (lk + 191) / 192 * 192 - lk;
  return pad192 < pad176 ? 192 : 176;
}

/* The fp8 form's wide tiles: 64 x 192 S accumulators a warpgroup leave no registers for a second
 * O, so P V^T accumulates in place (the kernel's ATT_PROMOTE 0) with the row sums' product apart;
 * timed back to back on an H200 against 128 keys with promotion (fp32 scores): 1x12x32760 keys
 * 8.24-8.29 -> 7.48-7.52 ms, 1x24x4608 0.384-0.389 -> 0.353-0.356 ms (224: 7.49 and 0.376; 160:
 * 7.76 and 0.360). With e4m3 Q K^T in f16 (half the registers) 256 keys, 3 stages: 1x12x32760x128
 * 5.09-5.23 -> 4.82-5.02 ms, x64 3.59-3.60 -> 3.23-3.29, 1x24x4608 0.254-0.259 -> 0.252-0.262
 * (bench/results/attn_fp8_s16.txt); int8 Q K^T's int32 sums keep 192. */
int dit_cuda_att90_fp8_key_tile(int pv8, int tiled, int qk_e4m3) { return pv8 && !tiled ? (qk_e4m3 ? 256 : 192) : DIT_ABI_ATT90_BN; }

int dit_cuda_att90_vt_block(int bn) { return bn % 128 == 0 ? 128 : bn % 64 == 0 ? 64 : 32; }

/* `tiles` work tiles run one a multiprocessor at a time over `sms`, so a last wave of
 * rem = tiles % sms leaves the rest idle. Splitting those rem tiles' keys into k parts (merged by
 * the last part to finish) runs them as ceil(rem k / sms) waves of 1/k: the k in 1..4 (each part
 * at least two key tiles) with the shortest tail, counting each split a twentieth of a wave for
 * its merge and its extra prologues. 1 when no split pays.
 * The fp8 form's split form costs more than that model says: timed on an H200 (192 keys a tile)
 * it was 1.6-1.9% slower where it saved under 1% of the launch (2x12x32760, 40x75600) and 2%
 * slower where its parts were 8 key tiles (24x4608), and 2% faster at 1x12x32760 (2.6% saved,
 * parts of 57 key tiles). So it splits only when the tail saves at least FP8_SPLIT_MIN_SAVED of
 * the whole launch with parts of at least FP8_SPLIT_MIN_PART key tiles. */
#define ATT90_SPLIT_MAX 4
#define FP8_SPLIT_MIN_SAVED 0.015
#define FP8_SPLIT_MIN_PART 32
int dit_cuda_att90_split(int64_t tiles, int64_t key_tiles, int sms, int fp8, int64_t *tail) {
  const int64_t rem = tiles % sms;
  int best = 1;
  double best_t = rem ? 1.0 : 0.0;
  for (int kk = 2; rem && kk <= ATT90_SPLIT_MAX && key_tiles >= 2 * kk; kk++) {
    const double t = (double)((rem * kk + sms - 1) / sms) / kk + 0.05;
    if (t < best_t - 1e-9) best = kk, best_t = t;
  }
  const double waves = (double)((tiles + sms - 1) / sms);
  if (fp8 && best > 1 && ((1.0 - best_t) / waves < FP8_SPLIT_MIN_SAVED || key_tiles / best < FP8_SPLIT_MIN_PART)) best = 1;
  *tail = best > 1 ? rem : 0;
  return best;
}
