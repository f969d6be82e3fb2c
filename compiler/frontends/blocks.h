/* The DiT building blocks every family frontend builds its graph from: weights by checkpoint
 * key, linears (plain, column- and row-parallel), adaptive-norm modulation, q/k RMS norms,
 * attention with its context-parallel forms, MLPs, patch embedding and the token sharding of
 * tp/cp/sp. A family file names its checkpoint keys and op names; these blocks add the ops.
 *
 * A builder holds one graph and its parallel layout. Blocks take and return value ids;
 * an op that fails is recorded by the graph (or by the builder for two-output ops) and
 * building goes on, so a family builds its whole graph and asks once (dit_blocks_finish).
 *
 * Multi-stream models (FLUX's double-stream blocks) call the per-stream pieces once per
 * stream with that stream's keys: dit_blocks_attn_project per stream, then one
 * dit_blocks_attention_tokens over their tokens joined, then each stream's own output
 * projection (dit_blocks_linear_row) and modulation. The FLUX-style double- and single-stream
 * blocks, whose checkpoint layout more than one family shares, are whole blocks here (the last
 * section). */
#ifndef DIT_COMPILER_FRONTENDS_BLOCKS_H
#define DIT_COMPILER_FRONTENDS_BLOCKS_H

#include <stdint.h>

#include "artifacts/safetensors.h"
#include "base/dtype.h"
#include "base/status.h"
#include "ir/graph.h"

typedef struct dit_blocks dit_blocks_t;

/* The model-wide facts and parallel layout a builder needs. */
typedef struct dit_blocks_options {
  dit_dtype_t dtype;             /* activation storage dtype (f32 or bf16) */
  int64_t heads, head_dim;       /* the whole model's attention heads (before tp) and head width */
  double eps;                    /* of the modulated norms and the q/k RMS norms */
  /* Checkpoint keys containing one of these substrings (NULL-terminated list; NULL: none)
   * stay fp32 in a half-precision graph, as diffusers keeps those modules. */
  const char *const *f32_keys;
  int tp, tp_rank;               /* tensor-parallel degree (1: none) and rank */
  int cp, cp_rank, cp_mode;      /* context-parallel degree (1: none), rank, DIT_CP_* */
  int ulysses;                   /* the Ulysses degree of DIT_CP_USP */
  int sp;                        /* sequence parallelism inside the tensor-parallel group */
  /* Attention-state reuse (DiTango) under DIT_CP_RING or DIT_CP_USP: G ring members per reuse group
   * (ranks under ring; under usp the cp / ulysses ring positions; 0: none), the
   * copies of the state cache (one per branch that runs through the plan: 1 or 2), and the remote
   * groups per cached state (0 or 1: one each). */
  int reuse_group, reuse_copies, reuse_merge;
} dit_blocks_options_t;

/* A builder over g (not owned) and weights (not owned; every key a block reads must be there:
 * the family checks its checkpoint before building). */
dit_status_t dit_blocks_create(dit_graph_t *g, const dit_safetensors_t *weights, const dit_blocks_options_t *opts,
                               dit_blocks_t **out);
void dit_blocks_destroy(dit_blocks_t *b);
/* A new graph and its builder (the graph destroyed again if the builder is refused). */
dit_status_t dit_blocks_begin(const dit_safetensors_t *weights, const dit_blocks_options_t *opts, dit_graph_t **g, dit_blocks_t **b);
dit_graph_t *dit_blocks_graph(const dit_blocks_t *b);
/* The first error while building, the builder's own or the graph's; the caller owns it. */
dit_status_t dit_blocks_status(dit_blocks_t *b);
/* The end of a family's build: b destroyed; on the first error while building, g destroyed too
 * and that error returned as "building the <model> graph: <message>"; else *out = g. */
dit_status_t dit_blocks_finish(dit_blocks_t *b, dit_graph_t *g, const char *model, dit_graph_t **out);

/* ---- weights and linears ---- */

/* The checkpoint tensor at key (printf-style), in the builder's dtype or fp32 per f32_keys. */
dit_vid_t dit_blocks_weight(dit_blocks_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* This tensor-parallel rank's 1/tp of the tensor at key along dim. */
dit_vid_t dit_blocks_weight_shard(dit_blocks_t *b, const char *key, int dim);
/* x @ prefix.weight^T + prefix.bias, written as out_dtype. */
dit_vid_t dit_blocks_linear(dit_blocks_t *b, dit_vid_t x, const char *prefix, dit_dtype_t out_dtype, const char *name);
/* Column-parallel: this rank's output features (a plain linear without tp). */
dit_vid_t dit_blocks_linear_col(dit_blocks_t *b, dit_vid_t x, const char *prefix, dit_dtype_t out_dtype,
                                const char *name);
/* Row-parallel: this rank's input features, the fp32 partial products summed over the
 * group (reduce-scattered over tokens with sp), the bias added once by rank 0. */
dit_vid_t dit_blocks_linear_row(dit_blocks_t *b, dit_vid_t x, const char *prefix, const char *name);
/* The linear at prefix over the features [x1 | x2] joined along channels, x1 holding the first
 * `split` input features and x2 the rest (FLUX's single-stream output projection over the
 * attention and MLP features). Without tp: the join and one linear, written in the builder's
 * dtype; with tp: x1 and x2 are this rank's column shards of each part, and the two partial
 * products (each part's weight columns, a second slice of one checkpoint tensor) are summed
 * over the group as dit_blocks_linear_row does. */
dit_vid_t dit_blocks_linear_row2(dit_blocks_t *b, dit_vid_t x1, dit_vid_t x2, const char *prefix, int64_t split, const char *name);
/* A one-input op without attributes (activations, casts). */
dit_vid_t dit_blocks_unary(dit_blocks_t *b, dit_op_kind_t kind, dit_vid_t x, dit_dtype_t out_dtype, const char *name);
/* LayerNorm with prefix.weight and prefix.bias, written in the builder's dtype. */
dit_vid_t dit_blocks_layernorm(dit_blocks_t *b, dit_vid_t x, const char *prefix, double eps, const char *name);
/* GroupNorm of channel-last x [B, ..., C] in `groups` groups with prefix.weight and prefix.bias,
 * written in the builder's dtype. */
dit_vid_t dit_blocks_groupnorm(dit_blocks_t *b, dit_vid_t x, const char *prefix, int64_t groups, double eps, const char *name);

/* Two linears around an activation: up (column-parallel when parallel), act, down
 * (row-parallel when parallel, else written as out_dtype). */
typedef struct dit_blocks_mlp {
  const char *up, *down;                  /* linear prefixes */
  dit_op_kind_t act;                      /* e.g. DIT_OP_GELU_TANH */
  const char *up_name, *act_name, *down_name;
  int parallel;                           /* 1: split over the tensor-parallel group */
  dit_dtype_t out_dtype;                  /* of a non-parallel down projection */
} dit_blocks_mlp_t;
dit_vid_t dit_blocks_mlp(dit_blocks_t *b, dit_vid_t x, const dit_blocks_mlp_t *m);

/* ---- modulation ---- */

/* Adaptive-norm modulation of one stream: a table summed from the stored table and the
 * conditioning projection (e < 0), [B, n, D] per batch item or [B, R, n, D] with R rows that runs
 * of tokens share as rows says; or, with a row per token (rows.group 1), the two unsummed operands
 * that adaln and gated_add add where they read a row. */
typedef struct dit_blocks_mod {
  dit_vid_t table, e;
  dit_token_group_t rows;
} dit_blocks_mod_t;
/* rows NULL: per batch item; else per token, e [B, R, r*D] with R = dit_token_group_rows(*rows, T). */
dit_blocks_mod_t dit_blocks_modulation(dit_blocks_t *b, dit_vid_t table, dit_vid_t e, const dit_token_group_t *rows,
                                       const char *name);
/* LayerNorm without affine, then x * (1 + row scale) + row shift of the modulation. */
dit_vid_t dit_blocks_adaln(dit_blocks_t *b, dit_vid_t x, dit_blocks_mod_t mod, int shift, int scale, const char *name);
/* x + y * row gate of the modulation. */
dit_vid_t dit_blocks_gated_add(dit_blocks_t *b, dit_vid_t x, dit_vid_t y, dit_blocks_mod_t mod, int gate,
                               const char *name);
/* One norm's modulation from the conditioning, per batch item: the linear at prefix of temb_silu
 * (SiLU(temb), op name.linear) viewed as the [B, n, D] rows adaln and gated_add read (op name). */
dit_blocks_mod_t dit_blocks_mod_rows(dit_blocks_t *b, dit_vid_t temb_silu, const char *prefix, int64_t n, const char *name);

/* ---- attention ---- */

/* RMSNorm of each row of x whole on every rank (not a tensor-parallel shard), weight key wkey of
 * x's width: an input norm every rank runs alike (Qwen-Image's txt_norm). */
dit_vid_t dit_blocks_rmsnorm(dit_blocks_t *b, dit_vid_t x, const char *wkey, const char *name);

/* RMSNorm across all heads of q or k with weight key wkey. Split over tensor-parallel ranks,
 * the rows' sums of squares are all-reduced first so the scale is the whole row's. */
dit_vid_t dit_blocks_qk_rmsnorm(dit_blocks_t *b, dit_vid_t x, const char *wkey, const char *name);

/* RMSNorm of each head of q or k alone, weight key wkey of [head_dim] (no cross-rank sum:
 * a head lives on one tensor-parallel rank). */
dit_vid_t dit_blocks_head_rmsnorm(dit_blocks_t *b, dit_vid_t x, const char *wkey, const char *name);

/* One stream's attention inputs: checkpoint keys of its projections and norms. */
typedef struct dit_blocks_attn_keys {
  const char *q, *k, *v;        /* linear prefixes */
  const char *norm_q, *norm_k;  /* RMSNorm weight keys; NULL: not normalized */
  int norm_per_head;            /* 1: each head normalized alone (weight [head_dim]); 0: across heads */
} dit_blocks_attn_keys_t;
typedef struct dit_blocks_qkv {
  dit_vid_t q, k, v;
} dit_blocks_qkv_t;
/* Q from xq and K, V from xkv (the same value for self-attention), column-parallel, then the
 * q/k norms. Ops are named name.q, name.k, name.v, name.norm_q, name.norm_k. */
dit_blocks_qkv_t dit_blocks_attn_project(dit_blocks_t *b, dit_vid_t xq, dit_vid_t xkv, const dit_blocks_attn_keys_t *keys,
                                         const char *name);
/* Scaled dot-product attention over this rank's heads, all of q's and k's tokens local. */
dit_vid_t dit_blocks_attention(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, const char *name);

/* Text masks (nonzero = valid, a valid prefix then padding) are never materialized: the joint
 * sequence puts the padded text tokens last among the keys, and attention takes a per-batch-item
 * key bound. A mask that is not a prefix is refused when it is set as an input. */

/* i32 [B]: offset + each item's valid prefix length of mask [B, L]. */
dit_vid_t dit_blocks_key_bound(dit_blocks_t *b, dit_vid_t mask, int64_t offset, const char *name);
/* dit_blocks_attention with keys at or past bound[b] excluded (bound < 0: none). */
dit_vid_t dit_blocks_attention_bounded(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t bound, const char *name);
/* dit_blocks_attention_bounded over all the model's heads, q, k and v whole on every rank: a
 * module the tensor-parallel group runs replicated (HunyuanVideo's token refiner). */
dit_vid_t dit_blocks_attention_replicated(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t bound,
                                          const char *name);
/* Self-attention over a sparse tile schedule (i32 [query tiles, W], see base/ops.def: the
 * attention's attr tiles), op prefix.sdpa; not under context parallelism. */
dit_vid_t dit_blocks_attention_tiled(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t tiles, const char *prefix);
/* Attention over the sequence the context-parallel group shares: q, k and v hold this rank's
 * tokens; K/V are all-gathered, heads exchanged (Ulysses), rotated (ring) or both (USP) as
 * the builder's cp_mode says. Without cp it is dit_blocks_attention. Ops are named
 * prefix.sdpa (the result), prefix.k_all, prefix.q_heads, prefix.ring<i>, ... */
dit_vid_t dit_blocks_attention_tokens(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, const char *prefix);
/* The same with a key bound (bound < 0: none) over the keys as the context-parallel group gathers
 * them (rank order): without cp, with gather or with Ulysses (all keys on every rank); a bound
 * under ring or usp is refused (recorded as the builder's error, -1 returned). */
dit_vid_t dit_blocks_attention_tokens_bounded(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t bound,
                                              const char *prefix);

/* Joint attention of an image stream whose tokens the context-parallel group shares (qi, ki, vi:
 * this rank's image tokens) and a text stream every rank holds whole (qt, kt, vt), all heads of
 * this tensor-parallel rank, as xDiT's USP runs MMDiTs: every query attends over all image keys
 * and the text keys once, keys ordered [image, text] so a text mask (txt_mask [B, L], or -1)
 * becomes a key bound past the image keys. Without cp: one attention over the joined streams;
 * gather: the image K/V all-gathered; ulysses: image tokens exchanged for heads and the text's
 * heads of this rank taken, its output gathered over the heads afterwards; ring: the image K/V
 * rotate, the text K/V are attended in the first hop only. *img: this rank's image tokens' output,
 * *txt: the text tokens' (the same on every rank). Ops named prefix.* */
void dit_blocks_joint_attention(dit_blocks_t *b, dit_vid_t qi, dit_vid_t ki, dit_vid_t vi, dit_vid_t qt, dit_vid_t kt, dit_vid_t vt,
                                dit_vid_t txt_mask, const char *prefix, dit_vid_t *img, dit_vid_t *txt);

/* ---- embeddings and tokens ---- */

/* a and b joined along dim (1: tokens, 2: channels), in a's dtype. */
dit_vid_t dit_blocks_concat(dit_blocks_t *b, dit_vid_t a, dit_vid_t c, int dim, const char *name);
/* x with new dims (the same elements, in order). */
dit_vid_t dit_blocks_reshape(dit_blocks_t *b, dit_vid_t x, int rank, const int64_t *dims, const char *name);
/* x viewed as [B, n, D] with n*D its per-sample elements: a [B, n*D] modulation projection as
 * the [B, n, D] rows adaln and gated_add read. */
dit_vid_t dit_blocks_rows(dit_blocks_t *b, dit_vid_t x, int64_t n, const char *name);
/* The rotary embedding of x [B, T, H*Dh] by a table cs f32 [T, Dh] of (cos, sin) pairs. */
dit_vid_t dit_blocks_rope_table(dit_blocks_t *b, dit_vid_t x, dit_vid_t cs, const char *name);
/* A rotary table table f32 [T + L, Dh] of T image tokens then L text tokens, the family's to free,
 * as the constant name.cos_sin [1, T + L, Dh] (the same on every rank: the ranks of a
 * context-parallel group share their weights), and the rows this context-parallel rank reads
 * of it: *joined [Tl + L, Dh] of this rank's Tl = T / cp image tokens then the text, *image
 * [Tl, Dh] of those image tokens alone, *text [L, Dh] of the text alone; each may be NULL (not
 * built). Ops named name.*. */
void dit_blocks_rope_rows(dit_blocks_t *b, const float *table, int64_t T, int64_t L, const char *name, dit_vid_t *joined,
                          dit_vid_t *image, dit_vid_t *text);
/* A sum of two activations of one shape. */
dit_vid_t dit_blocks_add(dit_blocks_t *b, dit_vid_t x, dit_vid_t y, const char *name);

/* The sinusoidal embedding of timesteps t (fp32, dim wide, max period 10000): cos first when
 * flip_sin_to_cos, frequencies exp(-ln(10000) i / (dim/2 - freq_shift)). */
dit_vid_t dit_blocks_sinusoid(dit_blocks_t *b, dit_vid_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                              const char *name);

/* The same of t' = t * premul computed as diffusers' `t.to(dtype) * premul` does: t and the
 * product rounded to dtype (bf16: attr round = 1; f32: exact fp32 arithmetic). */
dit_vid_t dit_blocks_sinusoid_scaled(dit_blocks_t *b, dit_vid_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                                     double premul, dit_dtype_t dtype, const char *name);

/* diffusers' Timesteps(scale) of `t.to(dtype)`: t rounded to dtype (bf16: attr round = 1), then
 * scale * (t * freq) in fp32 (Qwen-Image's time projection, scale 1000). */
dit_vid_t dit_blocks_sinusoid_rounded(dit_blocks_t *b, dit_vid_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                                      double scale, dit_dtype_t dtype, const char *name);

/* TimestepEmbedding of a sinusoid emb: cast to the builder's dtype, prefix.linear_1, SiLU,
 * prefix.linear_2 (ops name.in, name.linear_1, name.silu and name). */
dit_vid_t dit_blocks_timestep_mlp(dit_blocks_t *b, dit_vid_t emb, const char *prefix, const char *name);

/* Patchify with patch (t, h, w), then the patch embedding linear at key (op named key). */
dit_vid_t dit_blocks_patch_embed(dit_blocks_t *b, dit_vid_t x, const int64_t patch[3], const char *key);
/* Tokens [t0, t0 + count) of x (in its dtype's storage dtype). */
dit_vid_t dit_blocks_slice_tokens(dit_blocks_t *b, dit_vid_t x, int64_t t0, int64_t count, dit_dtype_t dtype,
                                  const char *name);
/* Sequence parallelism: a token-sharded activation gathered over the tensor-parallel group
 * (x itself without sp). */
dit_vid_t dit_blocks_sp_gather(dit_blocks_t *b, dit_vid_t x, const char *name);
/* A context-parallel all-gather of tokens (x itself without cp). */
dit_vid_t dit_blocks_cp_gather(dit_blocks_t *b, dit_vid_t x, const char *name);
/* The mean of each batch item's first bound[b] tokens of x [B, L, C] -> [B, C] (bound < 0: all
 * L), in x's dtype: a masked mean pooling of text. It is attention of one all-zero query, whose
 * equal scores weigh every key below the bound alike. */
dit_vid_t dit_blocks_token_mean(dit_blocks_t *b, dit_vid_t x, dit_vid_t bound, const char *name);
/* Unpatchify tokens into [B, C, f*pt, h*ph, w*pw] for the token grid (f, h, w). */
dit_vid_t dit_blocks_unpatchify(dit_blocks_t *b, dit_vid_t y, const int64_t patch[3], int64_t f, int64_t h, int64_t w,
                                const char *name);
/* The same for token rows ordered (c, it, ih, iw) (HunyuanVideo's proj_out) instead of
 * (it, ih, iw, c): the rows are first reordered by a constant permutation matrix (exact: one
 * product by 1 per output), ops named name.order and name. */
dit_vid_t dit_blocks_unpatchify_channels_first(dit_blocks_t *b, dit_vid_t y, const int64_t patch[3], int64_t f, int64_t h,
                                               int64_t w, const char *name);
/* The same with every element times mul plus add on the way (one linear: the permutation's ones
 * are mul, its bias add; none when add is 0): a pipeline's de-normalization of packed latents,
 * x / scaling_factor + shift_factor as x * (1 / scaling_factor) + shift_factor. */
dit_vid_t dit_blocks_unpatchify_channels_first_affine(dit_blocks_t *b, dit_vid_t y, const int64_t patch[3], int64_t f, int64_t h,
                                                      int64_t w, double mul, double add, const char *name);

/* ---- convolutions ---- */

/* Output channels [o0, o0 + n) of checkpoint convolution weight key (Conv3d [O, I, kt, kh, kw] or
 * Conv2d [O, I, kh, kw]), or with rows the checkpoint's channels rows[0..n), as conv3d takes them,
 * channel-last ([n, kt, kh, kw, I] or [n, kh, kw, I]): a graph constant named name, in the
 * builder's dtype (converted once, as the weights writer converts a checkpoint weight). */
dit_vid_t dit_blocks_conv_weight(dit_blocks_t *b, const char *key, int64_t o0, int64_t n, const int64_t *rows, const char *name);

/* Rows rows[0..n) (along dim 0) of checkpoint tensor key: a vector's entries, a linear weight's
 * output features reordered; a graph constant named name, in the builder's dtype. */
dit_vid_t dit_blocks_weight_rows(dit_blocks_t *b, const char *key, const int64_t *rows, int64_t n, const char *name);
/* The checkpoint convolution at prefix (prefix.weight made channel-last, prefix.bias) over
 * channel-last x [B, F, H, W, C], stride 1, pad_t zero frames before the first and pad_s pixels
 * on every side; written in the builder's dtype. */
dit_vid_t dit_blocks_conv(dit_blocks_t *b, dit_vid_t x, const char *prefix, int64_t pad_t, int64_t pad_s, const char *name);
/* The same with its output channels the checkpoint's rows[0..) (weight and bias; NULL: as stored). */
dit_vid_t dit_blocks_conv_rows(dit_blocks_t *b, dit_vid_t x, const char *prefix, int64_t pad_t, int64_t pad_s, const int64_t *rows,
                               const char *name);

/* ---- FLUX-style blocks ---- */

/* diffusers' FluxTransformerBlock and FluxSingleTransformerBlock, whose checkpoint keys
 * HunyuanVideo's blocks share (transformer_blocks.<i>.* and single_transformer_blocks.<i>.*,
 * ops named after them; family.h's dit_expected_flux_blocks lists the tensors). Every norm is
 * modulated by rows of tsilu = SiLU(temb); q and k are RMS-normed per head and rotated by a
 * rotary table; the MLPs are GELU(tanh). */

/* Double-stream block i over this rank's image tokens *hs (rotated by cs_img; the text's rows of
 * the table are the identity, so the text is not rotated) and the text tokens *ctx, whole on
 * every rank: each stream its own modulation, projections, norms and MLP, one joint attention
 * (dit_blocks_joint_attention) whose text keys stop at each item's valid prefix of mask (-1:
 * all valid). Updates *hs and *ctx. */
void dit_blocks_flux_double(dit_blocks_t *b, int64_t i, dit_vid_t tsilu, dit_vid_t cs_img, dit_vid_t mask, dit_vid_t *hs,
                            dit_vid_t *ctx);
/* Single-stream block i over x, the joined [Tl image tokens of this rank, L text tokens], rotated
 * by cs: attention and MLP side by side from one modulated norm, one output projection over
 * both, the gated residual. Without cp one attention whose keys stop at bound (-1: none); with
 * cp the image and text rows attend jointly across the group, the text's keys stopping at each
 * item's valid prefix of mask (-1: all valid). */
dit_vid_t dit_blocks_flux_single(dit_blocks_t *b, int64_t i, dit_vid_t tsilu, dit_vid_t cs, dit_vid_t bound, dit_vid_t mask,
                                 int64_t Tl, int64_t L, dit_vid_t x);
/* The output of these models (and of Qwen-Image): AdaLayerNormContinuous norm_out of this rank's
 * image tokens x by rows of tsilu (the projection's halves are (scale, shift)), the linear
 * proj_out, the tokens gathered over the context-parallel group. Ops norm_out.mod(.linear),
 * norm_out, proj_out and proj_out.all_tokens. */
dit_vid_t dit_blocks_flux_out(dit_blocks_t *b, dit_vid_t x, dit_vid_t tsilu);

#endif
