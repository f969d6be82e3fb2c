/* The Hopper attention kernel's (compiler/kernels/dit_attn_sm90.cu) tiling choices that follow
 * from the shape alone: keys per K/V tile, and the split of a last partial wave. Plain C over the
 * kernel ABI, shared by the code generator and bench/attention's attn_bench, so that the
 * benchmark times the kernels ditc plans. */
#ifndef DIT_COMPILER_ATT90_TILES_H
#define DIT_COMPILER_ATT90_TILES_H

#include <stdint.h>

/* The multiprocessors the split is planned for (H100 SXM, H200). */
#define DIT_ATT90_SMS 132

/* Keys per K/V tile at head dim hd over lk keys: 128, or for the bf16 form at head dim 128 over
 * long keys 176 or 192, whichever pads lk less. fp8 is the 8-bit forms, tiled a tile schedule,
 * persist the persistent short-key form. */
int dit_cuda_att90_keys_per_tile(int64_t hd, int64_t lk, int fp8, int tiled, int persist);

/* Keys per tile of attention_fp8 (its attribute key_tile: the k scales' rows too): with e4m3
 * P V^T (pv8) and no tile schedule 256 over e4m3 Q and K (qk_e4m3: scores in f16), 192 over int8
 * ones; else 128 (a schedule's tiles; bf16 P V keeps the 8-bit forms' tiles of 128). */
int dit_cuda_att90_fp8_key_tile(int pv8, int tiled, int qk_e4m3);

/* Keys a column block of the fp8 form's V^T tile of bn keys (the kernel's VB): the widest of 128,
 * 64 and 32 dividing bn; one tensor-map box each, swizzled by its width in bytes. */
int dit_cuda_att90_vt_block(int bn);

/* The number of key parts (1: none) the last partial wave's work tiles are split into, of
 * `tiles` work tiles over `sms` multiprocessors with key_tiles key tiles each, and in *tail how
 * many tiles that is. fp8: the 8-bit forms' stricter rule (a split only where it saves much). */
int dit_cuda_att90_split(int64_t tiles, int64_t key_tiles, int sms, int fp8, int64_t *tail);

#endif
