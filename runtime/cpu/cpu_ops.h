/* The CPU reference backend's kernels: fp32 arithmetic (reductions in double), any of
 * f32/bf16/f16 storage for inputs and outputs, multi-threaded over a pool. Each kernel checks
 * the shapes and dtypes it is given and returns INVALID_ARGUMENT naming the op, the operand
 * and expected/found dims; outputs never alias inputs. Semantics are those of base/ops.def. */
#ifndef DIT_RUNTIME_CPU_CPU_OPS_H
#define DIT_RUNTIME_CPU_CPU_OPS_H

#include "base/ops.h"
#include "base/status.h"
#include "runtime/cpu/threadpool.h"
#include "runtime/tensor.h"

typedef struct dit_cpu {
  dit_pool_t *pool;
} dit_cpu_t;

/* y[..., N] = x[..., K] @ w[N, K]^T + bias[N]; w any rank with dims[0] = N and the rest
 * multiplying to K; bias may be NULL. */
dit_status_t dit_cpu_linear(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w,
                            const dit_tensor_t *bias, dit_tensor_t *y);
/* linear plus c (y's dims) added to each fp32 sum after the bias, rounded once: y = x w^T + bias
 * + c, a GEMM with beta = 1. c may not alias y. */
dit_status_t dit_cpu_linear_acc(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *bias,
                                const dit_tensor_t *acc, dit_tensor_t *y);
/* The fp8 linear of base/ops.def over quantized rows: xq e4m3 [B, T, K] and their scales xs f32
 * [B, 1, T] (attn_quant with heads 1 and rows 1), decoded and multiplied with the decoded e4m3 w
 * [N, K] in fp32; y = acc * xs[row] * w_scale[col] (+ bias), then act (1: gelu_tanh). */
dit_status_t dit_cpu_linear_fp8(dit_cpu_t *c, const dit_tensor_t *xq, const dit_tensor_t *xs, const dit_tensor_t *w,
                                const dit_tensor_t *w_scale, const dit_tensor_t *bias, int act, dit_tensor_t *y);
/* x [B, C, F, H, W] -> y [B, (F/pt)(H/ph)(W/pw), C*pt*ph*pw]; row order (c, it, ih, iw). */
dit_status_t dit_cpu_patchify(dit_cpu_t *c, const dit_tensor_t *x, int pt, int ph, int pw,
                              dit_tensor_t *y);
/* y [B, f*h*w, C*pt*ph*pw] with row order (it, ih, iw, c) -> out [B, C, f*pt, h*ph, w*pw]. */
dit_status_t dit_cpu_unpatchify(dit_cpu_t *c, const dit_tensor_t *y, int pt, int ph, int pw,
                                int f, int h, int w, dit_tensor_t *out);
/* t [B] or [B, T] (any numeric dtype, converted to float) -> out [B, dim] or [B, T, dim]:
 * half = dim/2, freq_j = exp(-ln(max_period) * j / (half - shift)), arg = scale * t * freq_j,
 * out = [sin(arg), cos(arg)] or [cos, sin] when flip; computed as diffusers does in fp32. */
dit_status_t dit_cpu_timestep_embed(dit_cpu_t *c, const dit_tensor_t *t, int flip, double shift,
                                    double max_period, double scale, dit_tensor_t *out);
dit_status_t dit_cpu_silu(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y);
dit_status_t dit_cpu_gelu_tanh(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y);
/* The tanh-approximated GELU of one fp32 value, as gelu_tanh computes each element. */
float dit_cpu_gelu_tanh1(float x);
/* Exact GELU: 0.5 x (1 + erf(x / sqrt 2)). */
dit_status_t dit_cpu_gelu(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y);
dit_status_t dit_cpu_add(dit_cpu_t *c, const dit_tensor_t *a, const dit_tensor_t *b,
                         dit_tensor_t *y);
/* y = a * b elementwise (float dtypes, equal dims). */
dit_status_t dit_cpu_mul(dit_cpu_t *c, const dit_tensor_t *a, const dit_tensor_t *b, dit_tensor_t *y);
/* y [..., D] = table [V, D] rows at ids [...] (i32 or i64), converted to y's float dtype; an id
 * outside [0, V) is refused naming its position and value. */
dit_status_t dit_cpu_embedding(dit_cpu_t *c, const dit_tensor_t *ids, const dit_tensor_t *table, dit_tensor_t *y);
/* y = min(max(x, lo), hi) in fp32 (lo <= hi), rounded once to y's dtype. */
/* x * sigmoid(1.702 x) (transformers' quick_gelu). */
dit_status_t dit_cpu_quick_gelu(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y);
/* y [B, C] = x [B, T, C] at one token per item: the first position of the largest id of
 * ids [B, T] (eos = -1) or of the id eos (0 when absent). */
dit_status_t dit_cpu_token_select(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *ids, int64_t eos, dit_tensor_t *y);
dit_status_t dit_cpu_clamp(dit_cpu_t *c, const dit_tensor_t *x, double lo, double hi, dit_tensor_t *y);
/* Convolution (cpu_conv.c) over channel-last x [B, F, H, W, Cin] with w [Cout, Cin, kt, kh, kw] or
 * [Cout, Cin, kh, kw] (kt = 1) and bias [Cout] (may be NULL): zeros pad pad_t frames before the
 * first and pad_h, pad_w pixels on both sides; stride 1; y [B, F', H', W', Cout] of base/ops.def's
 * conv3d. Products accumulate in fp32, rounded once on store. */
dit_status_t dit_cpu_conv3d(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *bias, int64_t pad_t,
                            int64_t pad_h, int64_t pad_w, dit_tensor_t *y);
/* The same with every conv3d attribute: paddings before and after, strides. */
dit_status_t dit_cpu_conv3d_ex(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *bias,
                               const dit_conv3d_attrs_t *a, dit_tensor_t *y);
/* Nearest-neighbour upsampling (cpu_conv.c) of channel-last x [B, F, H, W, C] by scale along H and
 * W: y [B, F, scale*H, scale*W, C], equal dtypes, a copy. */
dit_status_t dit_cpu_upsample(dit_cpu_t *c, const dit_tensor_t *x, int64_t scale, dit_tensor_t *y);
/* y = x converted to y's dtype (f32, bf16 or f16), rounded to nearest even; equal dims. */
dit_status_t dit_cpu_cast(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y);
/* table [1, n, D] + e (viewed as [B, r, D], r = 1 or n) -> out [B, n, D]; or per token,
 * e [B, T, r*D] -> out [B, T, n, D] (the form is out's rank). */
dit_status_t dit_cpu_mod_table(dit_cpu_t *c, const dit_tensor_t *table, const dit_tensor_t *e,
                               dit_tensor_t *out);
/* LayerNorm over the last dim; w and b may be NULL (both or neither). */
dit_status_t dit_cpu_layernorm(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w,
                               const dit_tensor_t *b, double eps, dit_tensor_t *y);
/* x [B, T, D]; mod [B, n, D] or per token [B, R, n, D], token t reading row
 * dit_token_group_row(tg, t) of R = dit_token_group_rows(tg, T) (tg {1, 0}: its own, R = T):
 * y = LN(x) * (1 + mod[:, scale]) + mod[:, shift]. tg is not read for a per-batch mod. */
dit_status_t dit_cpu_adaln(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *mod, dit_token_group_t tg,
                           double eps, int shift, int scale, dit_tensor_t *y);
/* adaln with the per-token table unstored: mod[b, t, i] = table[0, i] + e[b, row, r?i:0] in fp32
 * (mod_table's sums, bit for bit), table [1, n, D], e [B, R, r*D] with r = 1 or n, token t reading
 * row dit_token_group_row(tg, t) of R = dit_token_group_rows(tg, T) (tg {1, 0}: its own). */
dit_status_t dit_cpu_adaln_tok(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *table,
                               const dit_tensor_t *e, dit_token_group_t tg, double eps, int shift, int scale, dit_tensor_t *y);
/* y = x * rsqrt(mean(x^2) + eps) * w over the last dim. */
dit_status_t dit_cpu_rmsnorm(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w,
                             double eps, dit_tensor_t *y);
/* rmsnorm per group: each consecutive group-wide chunk of a row (one head) normalized by its own
 * RMS, w [group] shared by the chunks; group = the last dim is dit_cpu_rmsnorm. */
dit_status_t dit_cpu_rmsnorm_group(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w,
                                   int64_t group, double eps, dit_tensor_t *y);
/* GroupNorm of channel-last x [B, ..., C] (rank >= 3): per batch item and group of C / groups
 * consecutive channels, mean and variance over its pixels and channels in double, then
 * y = (float)((x - mean) * rsqrt(var + eps)) * w[c] + b[c] in fp32, rounded once on store. */
dit_status_t dit_cpu_groupnorm(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *b, int64_t groups,
                               double eps, dit_tensor_t *y);
/* groupnorm's statistics in S slices of the P pixels (slice s: [s*P/S, (s+1)*P/S)): stats f32
 * [B, S, G, 2], per item, slice and group the mean of its elements and their sum of squared
 * deviations from it, each computed in double and rounded once. */
dit_status_t dit_cpu_groupnorm_stats(dit_cpu_t *c, const dit_tensor_t *x, int64_t groups, int64_t slices, dit_tensor_t *stats);
/* groupnorm from groupnorm_stats' slices of x: merged in double (the count-weighted mean, then the
 * slices' M2 plus n_s (mean_s - mean)^2), then normalized as dit_cpu_groupnorm does. */
dit_status_t dit_cpu_groupnorm_apply(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *stats, const dit_tensor_t *w,
                                     const dit_tensor_t *b, double eps, dit_tensor_t *y);
/* Wan's 3-D RoPE on x [B, f*h*w, heads*Dh], Dh = t_dim + h_dim + w_dim, token index
 * (it*h + ih)*w + iw. For head-dim pair p (channels 2p, 2p+1) in part P (t, h or w) with
 * local pair index q and part dim d: freq = 1 / theta^(2q/d) (computed in double), angle =
 * pos_P * freq, cos/sin in double rounded to float; out[2p] = x0*cos - x1*sin,
 * out[2p+1] = x0*sin + x1*cos. */
dit_status_t dit_cpu_rope(dit_cpu_t *c, const dit_tensor_t *x, int heads, int f, int h, int w,
                          int t_dim, int h_dim, int w_dim, double theta, int64_t t0, dit_tensor_t *y);
/* The RMSNorm a rope folds in (base/ops.def): w [group] with group dividing x's last dim (the
 * last dim itself: one RMS per row), eps. */
typedef struct dit_cpu_rope_norm {
  const dit_tensor_t *w;
  int64_t group;
  double eps;
} dit_cpu_rope_norm_t;
/* dit_cpu_rope of round(rmsnorm(x)) when norm is given: each row normalized by dit_cpu_rmsnorm's
 * arithmetic and rounded to y's dtype before it rotates, so the result equals dit_cpu_rmsnorm_group
 * into a tensor of y's dtype followed by dit_cpu_rope, bit for bit; norm NULL: dit_cpu_rope. */
dit_status_t dit_cpu_rope_normed(dit_cpu_t *c, const dit_tensor_t *x, const dit_cpu_rope_norm_t *norm, int heads, int f, int h,
                                 int w, int t_dim, int h_dim, int w_dim, double theta, int64_t t0, dit_tensor_t *y);
/* Rotary embedding from a table: x [B, T, heads*Dh], cs f32 [T, Dh] holding (cos, sin) pairs;
 * per head y[2j] = x[2j]*cos_j - x[2j+1]*sin_j, y[2j+1] = x[2j+1]*cos_j + x[2j]*sin_j in fp32,
 * rounded once on store. */
dit_status_t dit_cpu_rope_table(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *cs, int64_t heads,
                                dit_tensor_t *y);
/* dit_cpu_rope_table with a folded norm, as dit_cpu_rope_normed; norm NULL: dit_cpu_rope_table. */
dit_status_t dit_cpu_rope_table_normed(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *cs, const dit_cpu_rope_norm_t *norm,
                                       int64_t heads, dit_tensor_t *y);
/* y = x's elements in y's dims: equal counts and dtypes (any dtype), a copy. */
dit_status_t dit_cpu_reshape(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y);
/* y = a ++ b along dim: equal ranks and dtypes (any dtype), all other dims equal. */
dit_status_t dit_cpu_concat(dit_cpu_t *c, const dit_tensor_t *a, const dit_tensor_t *b, int64_t dim,
                            dit_tensor_t *y);
/* out i32 [B] = offset + the valid prefix length of each row of mask [B, L] (any dtype; nonzero
 * = valid): the index of its first zero, L if none; the entries after it are not read. */
dit_status_t dit_cpu_key_bound(dit_cpu_t *c, const dit_tensor_t *mask, int64_t offset, dit_tensor_t *out);
/* q [B, S, H*Dh], k and v [B, L, H*Dh] -> out [B, S, H*Dh]; lse [B, H, S] may be NULL. */
dit_status_t dit_cpu_attention(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k,
                               const dit_tensor_t *v, int heads, double scale, dit_tensor_t *out,
                               dit_tensor_t *lse);
/* The same with bound i32 [B] (NULL: none): batch item b attends to its keys below bound[b]
 * only (all of them when bound >= L; none when bound <= 0: zero output, lse -inf). */
dit_status_t dit_cpu_attention_bounded(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k,
                                       const dit_tensor_t *v, const dit_tensor_t *bound, int heads, double scale,
                                       dit_tensor_t *out, dit_tensor_t *lse);
/* The same with a frame-causal mask over self-attention (S = L): query i attends key j iff
 * j / causal_block <= i / causal_block (causal_block >= 1; 1 is ordinary causal attention). */
dit_status_t dit_cpu_attention_causal(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k, const dit_tensor_t *v,
                                      const dit_tensor_t *bound, int64_t causal_block, int heads, double scale, dit_tensor_t *out,
                                      dit_tensor_t *lse);
/* The same with bias f32 [S, L, heads] (NULL: none) added to the scaled scores of every batch
 * item: score(b, h, i, j) = scale * q_i . k_j + bias[i, j, h] (T5's relative position bias). */
dit_status_t dit_cpu_attention_biased(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k,
                                      const dit_tensor_t *v, const dit_tensor_t *bound, const dit_tensor_t *bias, int heads,
                                      double scale, dit_tensor_t *out, dit_tensor_t *lse);
/* Attention over a tile schedule (base/ops.def, attention's attr tiles): i32 [ceil(S/DIT_SPARSE_TILE),
 * W], row i its count (1..W-1) then its key tiles, strictly ascending; query tile i attends only
 * the keys of its listed tiles, exactly a dense attention whose other scores are -inf. */
dit_status_t dit_cpu_attention_tiled(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k,
                                     const dit_tensor_t *v, const dit_tensor_t *tiles, int heads, double scale,
                                     dit_tensor_t *out, dit_tensor_t *lse);
/* FP8 attention (cpu_attention_fp8.c; base/ops.def's attn_quant, attn_quant_vt, attention_fp8).
 * attn_quant: x [B, S, heads*Dh] -> x8 f8e4m3 or i8 (x8's dtype; same dims), xs f32 [B, heads,
 * ceil(S/rows)], one scale per head and block of `rows` rows, as dit_e4m3_quantize_row or
 * dit_i8_quantize_row over the block. */
dit_status_t dit_cpu_attn_quant(dit_cpu_t *c, const dit_tensor_t *x, int heads, int64_t rows, dit_tensor_t *x8, dit_tensor_t *xs);
/* attn_quant of token rows (heads 1, rows 1) over act(x + bias): bias [C] float or NULL, act 0 or
 * 1 (gelu_tanh, as dit_cpu_gelu_tanh1), each element in fp32 before the row is quantized. */
dit_status_t dit_cpu_attn_quant_act(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *bias, int act, dit_tensor_t *x8,
                                    dit_tensor_t *xs);
/* attn_vmax: v [B, L, heads*Dh] -> vmax f32 [B, heads, S, Dh] (S from vmax's dims, 1..max(L, 1)),
 * the channels' largest magnitudes over each split of ceil(L / S) keys. */
dit_status_t dit_cpu_attn_vmax(dit_cpu_t *c, const dit_tensor_t *v, int heads, dit_tensor_t *vmax);
/* attn_quant_vt: v [B, L, heads*Dh] and its attn_vmax maxima (any splits) -> vt8 f8e4m3 [B, heads,
 * Dh, roundup(L, 128)] (keys permuted within groups of 16 as base/ops.def says, padding 0x00), vs
 * f32 [B, heads, Dh]. */
dit_status_t dit_cpu_attn_quant_vt(dit_cpu_t *c, const dit_tensor_t *v, const dit_tensor_t *vmax, int heads, dit_tensor_t *vt8,
                                   dit_tensor_t *vs);
/* attention_fp8 over those operands (tiles NULL: all key tiles; bound NULL: all keys, else i32 [B],
 * not with tiles); lse may be NULL. With vs NULL, vt8 is v itself (float [B, L, heads*Dh]) and P V
 * runs on bf16 P. */
dit_status_t dit_cpu_attention_fp8(dit_cpu_t *c, const dit_tensor_t *q8, const dit_tensor_t *qs, const dit_tensor_t *k8,
                                   const dit_tensor_t *ks, const dit_tensor_t *vt8, const dit_tensor_t *vs, const dit_tensor_t *tiles,
                                   const dit_tensor_t *bound, int heads, double scale, int64_t key_tile, dit_tensor_t *out,
                                   dit_tensor_t *lse);
/* The key that column col of vt8 holds (attn_quant_vt's permutation within groups of 16 columns). */
int64_t dit_attn_vt_key(int64_t col);
/* out = x + y * mod[:, gate]; x, y, out [B, T, D], mod [B, n, D] or per token [B, R, n, D]
 * (rows picked by tg as dit_cpu_adaln picks them). */
dit_status_t dit_cpu_gated_add(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *y,
                               const dit_tensor_t *mod, dit_token_group_t tg, int gate, dit_tensor_t *out);
/* gated_add with the per-token gate table[0, gate] + e[b, row, r?gate:0] formed in fp32 as
 * dit_cpu_adaln_tok forms its rows (and picks them). */
dit_status_t dit_cpu_gated_add_tok(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *y,
                                   const dit_tensor_t *table, const dit_tensor_t *e, dit_token_group_t tg, int gate,
                                   dit_tensor_t *out);
/* The first of every run of `group` tokens: x [B, T] -> y [B, T / group] (group divides T). */
dit_status_t dit_cpu_token_rows(const dit_tensor_t *x, int64_t group, dit_tensor_t *y);

/* Tensor-parallel row pieces (cpu_shard.c): y [..., 1] = sum of x^2 over the last dim (fp32
 * out); y = x * rsqrt(sumsq / dim + eps) * w for a row slice x [..., C] whose whole row of dim
 * elements has sum of squares sumsq [..., 1]. */
dit_status_t dit_cpu_rowsumsq(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y);
/* Two attention states of the same queries over disjoint keys merged by their LSE (cpu_shard.c):
 * o [B, S, H*Dh], lse [B, H, S] fp32. */
dit_status_t dit_cpu_attn_merge(dit_cpu_t *c, const dit_tensor_t *oa, const dit_tensor_t *la, const dit_tensor_t *ob,
                                const dit_tensor_t *lb, int heads, dit_tensor_t *o, dit_tensor_t *lse);
dit_status_t dit_cpu_rmsnorm_slice(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *sumsq,
                                   const dit_tensor_t *w, double eps, int64_t dim, dit_tensor_t *y);

#endif
