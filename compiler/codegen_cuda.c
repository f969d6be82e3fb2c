/* CUDA code generation through NVRTC and nvJitLink, with a content-keyed kernel cache. */
#include "compiler/codegen_cuda.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "artifacts/identity.h"
#include "base/clock.h"
#include "base/fileio.h"
#include "base/strbuf.h"
#include "compiler/att90_tiles.h"
#include "compiler/codegen_mlir.h"
#include "dit_abi.h"
#include "dit_abi_source.h"
#include "dit_attn_sm90_source.h"
#include "dit_conv_sm90_source.h"
#include "dit_device_source.h"
#include "dit_sm90_source.h"
#include "dit_kernel_sources.h"
#include "dit_sources_hash.h"

/* The MLIR release the project pins (Debian's libmlir-19-dev). A ditc built without MLIR
 * (a GPU host) names it in cache keys and identities, so it finds the kernels a ditc with MLIR
 * generated and carried over in the codegen cache, and compiles identical bundles. */
#define DIT_MLIR_PINNED_VERSION "19.1.7"

#if DIT_HAVE_NVRTC
#include <cuda.h> /* CUDA_VERSION only: ditc never calls the driver */
#include <nvJitLink.h>
#include <nvrtc.h>
#endif

struct dit_cuda_codegen {
  char arch[16];      /* "90" */
  char mlir_version[32];
  char cache[PATH_MAX];
  char *cubin, *ptx;  /* last module */
  size_t cubin_size, ptx_size;
  dit_cuda_codegen_stats_t stats;
  cJSON *nvrtc_because; /* op -> why an elementwise op stayed on the NVRTC path */
};

int dit_cuda_target_supported(const char *t) {
  static const char *const ok[] = {"sm_80", "sm_86", "sm_89", "sm_90"};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (!strcmp(t, ok[i])) return 1;
  return 0;
}

dit_status_t dit_cuda_codegen_create(const char *target, const char *cache_dir, dit_cuda_codegen_t **out) {
  *out = NULL;
#if !DIT_HAVE_NVRTC
  (void)cache_dir;
  return DIT_ERR(UNAVAILABLE, "--target %s: this ditc was built without NVRTC (DIT_CUDA=OFF)", target);
#else
  if (!dit_cuda_target_supported(target))
    return DIT_ERR(INVALID_ARGUMENT, "--target %s: supported targets: cpu, sm_80, sm_86, sm_89, sm_90", target);
  dit_cuda_codegen_t *cg = calloc(1, sizeof *cg);
  if (!cg) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  snprintf(cg->arch, sizeof cg->arch, "%s", target + 3);
  const char *env = getenv("DITC_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (cache_dir) snprintf(cg->cache, sizeof cg->cache, "%s/kernels", cache_dir);
  else if (env && *env) snprintf(cg->cache, sizeof cg->cache, "%s/kernels", env);
  else if (xdg && *xdg) snprintf(cg->cache, sizeof cg->cache, "%s/ditc/kernels", xdg);
  else snprintf(cg->cache, sizeof cg->cache, "%s/.cache/ditc/kernels", home && *home ? home : "/tmp");
  dit_status_t s = dit_mkdirs(cg->cache, 0755);
  if (s) {
    free(cg);
    return dit_status_annotate(s, "kernel cache");
  }
  snprintf(cg->mlir_version, sizeof cg->mlir_version, "%s", DIT_MLIR_PINNED_VERSION);
  cJSON *tc = cJSON_CreateObject();
  if (tc) {
    dit_status_t ms = dit_mlir_toolchain(tc);
    const cJSON *v = cJSON_GetObjectItem(tc, "mlir");
    if (!ms && cJSON_IsString(v)) snprintf(cg->mlir_version, sizeof cg->mlir_version, "%s", v->valuestring);
    dit_status_free(ms);
    cJSON_Delete(tc);
  }
  *out = cg;
  return DIT_OK;
#endif
}

void dit_cuda_codegen_destroy(dit_cuda_codegen_t *cg) {
  if (!cg) return;
  cJSON_Delete(cg->nvrtc_because);
  free(cg->cubin);
  free(cg->ptx);
  free(cg);
}

dit_cuda_codegen_stats_t dit_cuda_codegen_stats(const dit_cuda_codegen_t *cg) { return cg->stats; }

/* ---- specialization ---- */

/* The rotary (cos, sin) table of a ROPE op, computed exactly as the CPU reference does:
 * frequencies, angles, cos and sin in double, each rounded once to float. */
static void rope_table(dit_strbuf_t *s, int64_t f, int64_t h, int64_t w, int64_t td, int64_t hd, int64_t wd, double theta) {
  const int64_t count[3] = {f, h, w}, dims[3] = {td, hd, wd};
  dit_strbuf_printf(s, "#define ROPE_TABLE ");
  for (int part = 0; part < 3; part++)
    for (int64_t pos = 0; pos < count[part]; pos++)
      for (int64_t q = 0; q < dims[part] / 2; q++) {
        const double freq = 1.0 / pow(theta, (double)(2 * q) / (double)dims[part]);
        const double ang = (double)pos * freq;
        dit_strbuf_printf(s, "{%a,%a},", (double)(float)cos(ang), (double)(float)sin(ang));
      }
  dit_strbuf_printf(s, "\n");
}

static int dt_code(dit_dtype_t t) { return t == DIT_BF16 ? DIT_ABI_DT_BF16 : DIT_ABI_DT_F32; }

static const dit_value_t *V(const dit_graph_t *g, dit_vid_t v) { return dit_graph_cvalue(g, v); }

static int64_t geti(const dit_op_t *op, const char *k) {
  const dit_attr_t *a = dit_attrs_find(&op->attrs, k);
  return a ? (a->is_float ? (int64_t)a->f : a->i) : 0;
}
static double getf(const dit_op_t *op, const char *k) {
  const dit_attr_t *a = dit_attrs_find(&op->attrs, k);
  return a ? a->f : 0;
}

/* A per-token form whose e has fewer rows than x has tokens: the rows runs of tokens share
 * (the kernels' E_ROW; the attrs were checked with the shapes). */
static void token_group_defines(dit_strbuf_t *s, const dit_op_t *op, const dit_value_t *x, const dit_value_t *e) {
  if (e->dims[1] == x->dims[1]) return;
  dit_strbuf_printf(s, "#define TOK_T %" PRId64 "LL\n#define TOK_R %" PRId64 "LL\n#define TOK_GROUP %" PRId64 "LL\n#define TOK_OFF %" PRId64 "LL\n",
                    x->dims[1], e->dims[1], geti(op, "token_group"), geti(op, "token_offset"));
}

/* A stored per-token table [B, R, n, D] whose R rows runs of tokens share: the kernels read its
 * rows through E_ROW when `flag` is defined. */
static void mod_group_defines(dit_strbuf_t *s, const dit_op_t *op, const dit_value_t *x, const dit_value_t *mod, const char *flag) {
  if (mod->rank != 4 || mod->dims[1] == x->dims[1]) return;
  token_group_defines(s, op, x, mod);
  dit_strbuf_printf(s, "#define %s 1\n", flag);
}

static void set_launch(dit_plan_kernel_t *k, uint64_t gx, uint32_t gy, uint32_t gz, uint32_t block, uint32_t smem) {
  k->grid[0] = (uint32_t)(gx ? gx : 1);
  k->grid[1] = gy;
  k->grid[2] = gz;
  k->block[0] = block;
  k->block[1] = k->block[2] = 1;
  k->smem = smem;
  snprintf(k->entry, sizeof k->entry, "dit_kernel");
}

static uint64_t blocks_of(uint64_t n) { return (n + DIT_ABI_BLOCK - 1) / DIT_ABI_BLOCK; }

/* The sliced groupnorm kernels: a pixel row in whole 8-channel chunks, at most one a thread, and
 * at most one group a thread for the merge. */
static int groupnorm_sliced_fits(int64_t channels, int64_t groups) {
  return channels > 0 && channels % DIT_ABI_VEC == 0 && channels / DIT_ABI_VEC <= DIT_ABI_BLOCK && groups >= 1 && groups <= DIT_ABI_BLOCK;
}

/* Blocks that fill the largest parts (132 multiprocessors) twice over: with 8 rows of 16-byte
 * loads in flight a thread (the kernels' GN_UNROLL), two blocks a multiprocessor keep enough bytes
 * in flight to stream at memory bandwidth. */
#define GROUPNORM_TARGET_BLOCKS 264

int64_t dit_cuda_groupnorm_slices(int64_t batch, int64_t pixels, int64_t channels, int64_t groups) {
  if (!groupnorm_sliced_fits(channels, groups) || batch < 1 || batch > 65535 || pixels < 1) return 0;
  /* Every apply block merges its item's S x G statistics (8 bytes each) from L2 before its
   * (P / S) x C elements: S^2 <= P C / (16 G) keeps that under an eighth of its bf16 traffic. */
  int64_t s = (GROUPNORM_TARGET_BLOCKS + batch - 1) / batch;
  const int64_t cap = (int64_t)sqrt((double)pixels * (double)channels / (16.0 * (double)groups));
  if (s > cap) s = cap;
  if (s > pixels) s = pixels;
  return s < 1 ? 1 : s;
}

/* Fills the specialization defines and launch shape; 0 in *has when the runtime runs it. */
/* Which kernel template a specialization completes. */
typedef enum { TEMPLATE_COMMON = 0, TEMPLATE_ATTN_SM90 = 1, TEMPLATE_CONV_SM90 = 2 } kernel_template_t;

/* Multiprocessors of the Hopper parts (H100 SXM, H200): the persistent grid's size. Any size is
 * correct; fewer multiprocessors only queue the extra blocks. */
#define SM90_PERSISTENT_CTAS 132

/* The Hopper attention kernel (compiler/kernels/dit_attn_sm90.cu): TMA, wgmma, warp
 * specialization, for head dims 64 and 128; with fp8 its attention_fp8 form (head dim 64 or 128:
 * e4m3 Q, K and V^T, whose tensor maps are the step's inputs 0, 2 and 4). Its launch follows the
 * kernel's own formulas; its Q, K and V are read through tensor maps the runtime encodes at load. */
static void specialize_attention_sm90(dit_strbuf_t *s, dit_plan_kernel_t *k, int64_t batch, int64_t heads, int64_t hd, int64_t sq,
                                      int64_t lk, int n_out, int fp8, int pv_bf16, int tiled, int bounded, int key_tile) {
  /* fp8 keeps two consumer warpgroups at either head dim (their S, P and O fill the registers) */
  const int ncw = hd == 64 && !fp8 ? DIT_ABI_ATT90_NCW_HD64 : DIT_ABI_ATT90_NCW_HD128;
  /* Short keys (cross-attention): a persistent grid overlaps each tile's stores with the next
   * tile's loads; measured 1.16x on 32760 queries x 512 keys, and no gain on long keys. */
  const int persist = !fp8 && hd == 128 && lk <= 1024;
  /* fp8: the op's own key tiles (its k scales' rows) */
  const int bn = fp8 ? key_tile : dit_cuda_att90_keys_per_tile(hd, lk, fp8, tiled, persist), bm = DIT_ABI_ATT90_WG_ROWS * ncw;
  const int st = fp8 ? (bn > DIT_ABI_ATT90_BN ? DIT_ABI_ATT90_ST_FP8_WIDE : DIT_ABI_ATT90_ST_FP8) : hd == 64 ? DIT_ABI_ATT90_ST_HD64
                                                                                                             : DIT_ABI_ATT90_ST_HD128;
  /* Q and K tiles are rows of boxes, each row its swizzle: 64 bf16 channels (128 bytes), or all
   * the head's 8-bit codes (hd bytes: 128 or 64). */
  const int box = fp8 ? (int)hd : DIT_ABI_ATT90_BOX_COLS, nh = (int)(hd / box), row_bytes = fp8 ? (int)hd : 128;
  /* V's tile: fp8's V^T (hd rows of bn keys), or bf16 V in 64-channel boxes (ATT_PV_BF16). */
  const int v_bytes = fp8 && !pv_bf16 ? (int)hd * bn : (int)(hd / DIT_ABI_ATT90_BOX_COLS) * bn * 128;
  const int64_t tiles = (sq + bm - 1) / bm;
  if (bn != DIT_ABI_ATT90_BN) dit_strbuf_printf(s, "#define ATT_BN %d\n", bn);
  /* The split of a last partial wave (the fp8 form's only where it saves much: att90_tiles.c). */
  int64_t tail = 0;
  const int split = tiled || bounded || persist ? 1 : dit_cuda_att90_split(tiles * heads * batch, (lk + bn - 1) / bn, DIT_ATT90_SMS, fp8, &tail);
  if (split > 1)
    dit_strbuf_printf(s, "#define ATT_SPLIT %d\n#define ATT_TAIL %" PRId64 "\n#define BATCH %" PRId64 "\n", split, tail, batch);
  /* e4m3 Q K^T accumulates in f16 (the kernel's S16), safe for the Q and K codes attn_quant makes */
  _Static_assert(DIT_ABI_ATT_QK_E4M3_MAX == (int)DIT_ATTN_QK_E4M3_MAX, "attention's Q/K code bound differs between the ABI table and base");
  if (fp8) dit_strbuf_printf(s, "#define ATT_FP8 1\n");
  if (pv_bf16) dit_strbuf_printf(s, "#define ATT_PV_BF16 1\n");
  if (persist) dit_strbuf_printf(s, "#define ATT_PERSIST 1\n#define BATCH %" PRId64 "\n", batch);
  /* Alignment slack, Q (twice when persistent), the K and V rings (e4m3 V^T stages each with its
   * rows of ones), and 8-byte mbarriers: two full and two empty for Q, and per stage full and empty
   * for K and V (the kernel's ATT_SMEM). */
  const int ones = fp8 && !pv_bf16 ? DIT_ABI_ATT90_FP8_ONES_ROWS * bn : 0;
  const uint32_t smem = (uint32_t)(DIT_ABI_ATT90_SMEM_ALIGN + (persist ? 2 : 1) * nh * bm * row_bytes +
                                   st * (nh * bn * row_bytes + v_bytes + ones) + 8 * (4 + 4 * st));
  if (persist) {
    const int64_t all = tiles * heads * batch;
    k->grid[0] = (uint32_t)(all < SM90_PERSISTENT_CTAS ? all : SM90_PERSISTENT_CTAS), k->grid[1] = 1, k->grid[2] = 1;
  } else if (split > 1) {
    k->grid[0] = (uint32_t)(tiles * heads * batch + tail * (split - 1)), k->grid[1] = 1, k->grid[2] = 1;
  } else {
    k->grid[0] = (uint32_t)tiles, k->grid[1] = (uint32_t)heads, k->grid[2] = (uint32_t)batch;
  }
  k->block[0] = (uint32_t)(DIT_ABI_ATT90_WG_THREADS * (ncw + 1)), k->block[1] = k->block[2] = 1;
  k->smem = smem;
  snprintf(k->entry, sizeof k->entry, "dit_kernel");
  /* q, k, v follow the outputs among the pointer arguments (fp8: each with its scales after it). */
  const uint32_t a = (uint32_t)n_out, vstep = fp8 ? 2 : 1;
  k->n_tmaps = 3;
  k->tmaps[0] = (dit_plan_tmap_t){a, {(uint32_t)box, (uint32_t)bm}, (uint32_t)row_bytes, 2};
  k->tmaps[1] = (dit_plan_tmap_t){a + vstep, {(uint32_t)box, (uint32_t)bn}, (uint32_t)row_bytes, 2};
  /* fp8's V^T tile in column blocks of vb keys, each its own box swizzled by its width (the kernel's VB) */
  const uint32_t vb = (uint32_t)dit_cuda_att90_vt_block(bn);
  k->tmaps[2] = fp8 && !pv_bf16 ? (dit_plan_tmap_t){a + 2 * vstep, {vb, (uint32_t)hd}, vb, 2}
                                : (dit_plan_tmap_t){a + 2 * vstep, {DIT_ABI_ATT90_BOX_COLS, (uint32_t)bn}, DIT_ABI_ATT90_SWIZZLE, 2};
}

/* The Hopper convolution (compiler/kernels/dit_conv_sm90.cu): bf16 x, w and y, input channels a
 * multiple of 16. Its x and w are read through tensor maps over their own dims, so the padding
 * is the copy engine's zero fill. 0 when the op does not fit it (the portable kernels take it). */
static const int kConv90N[] = {8, 16, 32, 64, 96, 128, 160, 176, 192}; /* the wgmma widths it is built for */

static int specialize_conv_sm90(dit_strbuf_t *s, dit_plan_kernel_t *k, const dit_value_t *x, const dit_value_t *w, const dit_value_t *y,
                                const dit_value_t *bias) {
  const int64_t cin = x->dims[4], cout = y->dims[4];
  if (x->dtype != DIT_BF16 || w->dtype != DIT_BF16 || y->dtype != DIT_BF16 || cin % 16 != 0 || y->dims[0] * y->dims[1] > 65535)
    return 0;
  for (int d = 0; d < 5; d++)
    if (x->dims[d] > INT32_MAX / 2 || y->dims[d] > INT32_MAX / 2) return 0;
  int bn = 192;
  const int nn = (int)(sizeof kConv90N / sizeof kConv90N[0]);
  if (cout <= 192) {
    for (int i = nn - 1; i >= 0; i--)
      if (kConv90N[i] >= cout) bn = kConv90N[i];
  } else {
    for (int i = nn - 1; i >= 0 && cout % bn != 0; i--)
      if (cout % kConv90N[i] == 0 && kConv90N[i] >= 64) bn = kConv90N[i];
    if (cout % bn != 0) bn = 192; /* the last block's channels past COUT are masked */
  }
  const int bk = cin % 64 == 0 ? 64 : cin % 32 == 0 ? 32 : 16;
  const int pixels = DIT_ABI_CONV90_TILE_W * DIT_ABI_CONV90_TILE_H;
  const uint32_t stage = (uint32_t)((pixels + bn) * bk * 2);
  uint32_t st = DIT_ABI_CONV90_SMEM_BUDGET / stage;
  if (st > DIT_ABI_CONV90_MAX_STAGES) st = DIT_ABI_CONV90_MAX_STAGES;
  const uint64_t tiles = (uint64_t)((y->dims[3] + DIT_ABI_CONV90_TILE_W - 1) / DIT_ABI_CONV90_TILE_W) *
                         (uint64_t)((y->dims[2] + DIT_ABI_CONV90_TILE_H - 1) / DIT_ABI_CONV90_TILE_H);
  if (tiles > INT32_MAX) return 0;
  dit_strbuf_printf(s, "#define WRANK %d\n#define CBN %d\n#define CBK %d\n#define CST %u\n", w->rank, bn, bk, st);
  if (bias) dit_strbuf_printf(s, "#define T_BIAS %d\n", dt_code(bias->dtype));
  k->grid[0] = (uint32_t)tiles, k->grid[1] = (uint32_t)((cout + bn - 1) / bn), k->grid[2] = (uint32_t)(y->dims[0] * y->dims[1]);
  k->block[0] = 3 * 128, k->block[1] = k->block[2] = 1;
  k->smem = DIT_ABI_CONV90_SMEM_ALIGN + st * stage + 16 * st;
  snprintf(k->entry, sizeof k->entry, "dit_kernel");
  /* x and w follow the one output among the pointer arguments. */
  k->n_tmaps = 2;
  k->tmaps[0] = (dit_plan_tmap_t){1, {(uint32_t)bk, DIT_ABI_CONV90_TILE_W, DIT_ABI_CONV90_TILE_H, 1, 1}, (uint32_t)bk * 2, 5};
  k->tmaps[1] = w->rank == 5 ? (dit_plan_tmap_t){2, {(uint32_t)bk, 1, 1, 1, (uint32_t)bn}, (uint32_t)bk * 2, 5}
                             : (dit_plan_tmap_t){2, {(uint32_t)bk, 1, 1, (uint32_t)bn}, (uint32_t)bk * 2, 4};
  return 1;
}

/* The most dynamic shared memory a block may opt into on an architecture ("80", "86", ...). */
static uint32_t smem_optin_max(const char *arch) {
  return !strcmp(arch, "90") ? 227u * 1024 : !strcmp(arch, "80") ? 163u * 1024 : 99u * 1024;
}

/* Wan's rope grid and (cos, sin) table (the kernels' wan_rope_cs): x holds COUNT tokens from T0. */
static void wan_rope_defines(dit_strbuf_t *s, const dit_op_t *op, const dit_value_t *x) {
  const int64_t f = geti(op, "f"), h = geti(op, "h"), w = geti(op, "w"), td = geti(op, "t_dim"), hd = geti(op, "h_dim"), wd = geti(op, "w_dim");
  dit_strbuf_printf(s, "#define GF %" PRId64 "\n#define GH %" PRId64 "\n#define GW %" PRId64 "\n#define TD %" PRId64 "\n#define HDIM %" PRId64
                    "\n#define WD %" PRId64 "\n#define T0 %" PRId64 "LL\n#define COUNT %" PRId64 "LL\n",
                    f, h, w, td, hd, wd, geti(op, "t0"), x->dims[1]);
  rope_table(s, f, h, w, td, hd, wd, getf(op, "theta"));
}

/* rope and rope_table on their own: a pair a thread (Wan's), or four pairs a thread through
 * 16-byte accesses when the head dim allows (the table's). */
static dit_status_t specialize_rope(const dit_graph_t *g, const dit_op_t *op, dit_strbuf_t *s, dit_plan_kernel_t *k) {
  const dit_value_t *x = V(g, op->in[0]);
  const uint64_t n = (uint64_t)dit_value_numel(V(g, op->out[0]));
  if (op->kind == DIT_OP_ROPE) {
    dit_strbuf_printf(s, "#define DIT_K_ROPE 1\n#define T_X %d\n#define BATCH %" PRId64 "\n#define HEADS %" PRId64 "\n", dt_code(x->dtype),
                      x->dims[0], geti(op, "heads"));
    wan_rope_defines(s, op, x);
    set_launch(k, blocks_of(n / 2), 1, 1, DIT_ABI_BLOCK, 0);
    return DIT_OK;
  }
  const int64_t heads = geti(op, "heads"), hd = x->dims[2] / heads;
  const int vec = hd % DIT_ABI_VEC == 0;
  dit_strbuf_printf(s, "#define DIT_K_ROPE_TABLE 1\n#define T_X %d\n#define N %" PRIu64 "LL\n#define TOKENS %" PRId64
                    "LL\n#define C %" PRId64 "LL\n#define HD %" PRId64 "LL\n#define VEC8 %d\n", dt_code(x->dtype), n, x->dims[1], x->dims[2],
                    hd, vec);
  set_launch(k, blocks_of(n / (vec ? DIT_ABI_VEC : 2)), 1, 1, DIT_ABI_BLOCK, 0);
  return DIT_OK;
}

/* The residual add folded into a layernorm or adaln (DIT_K_ROWNORM's RES): y at res_at, then
 * gated_add's gate, a mod [B, n, D] or [B, T, n, D] (RES 2) or a table and e (RES 3). */
static dit_status_t residual_defines(const dit_graph_t *g, const dit_op_t *op, int res_at, dit_strbuf_t *s) {
  const dit_value_t *x = V(g, op->in[0]), *ry = V(g, op->in[res_at]);
  const int gates = op->n_in - res_at - 1;
  dit_strbuf_printf(s, "#define RES %d\n#define T_RY %d\n", gates + 1, dt_code(ry->dtype));
  if (gates == 0) return DIT_OK;
  const dit_value_t *m = V(g, op->in[res_at + 1]);
  dit_strbuf_printf(s, "#define GATE %" PRId64 "\n", geti(op, "gate"));
  if (gates == 1) {
    /* A per-token table [B, R, n, D]: every row its own batch row, or its run's. */
    dit_strbuf_printf(s, "#define T_RMOD %d\n#define R_TOKENS %" PRId64 "LL\n#define R_NROWS %" PRId64 "LL\n", dt_code(m->dtype),
                      m->rank == 4 ? (int64_t)1 : x->dims[1], m->dims[m->rank - 2]);
    mod_group_defines(s, op, x, m, "R_MOD_GROUPED");
    return DIT_OK;
  }
  const dit_value_t *e = V(g, op->in[res_at + 2]);
  dit_strbuf_printf(s, "#define T_RTABLE %d\n#define T_RE %d\n#define R_ROWS_E %" PRId64 "LL\n", dt_code(m->dtype), dt_code(e->dtype),
                    e->dims[2] / x->dims[2]);
  token_group_defines(s, op, x, e);
  return DIT_OK;
}

/* A rope's rotation defines for the row norm that folds it in (DIT_K_ROWNORM's NORM_ROPE): x's
 * token rows of ROPE_C channels in heads of ROPE_HD; Wan's table (NORM_ROPE 1) or the cs input's
 * RT_TOKENS rows (NORM_ROPE 2). */
static void rope_defines(dit_strbuf_t *s, const dit_graph_t *g, const dit_op_t *op) {
  const dit_value_t *x = V(g, op->in[0]);
  if (op->kind == DIT_OP_ROPE) {
    const int64_t td = geti(op, "t_dim"), hd = geti(op, "h_dim"), wd = geti(op, "w_dim");
    dit_strbuf_printf(s, "#define NORM_ROPE 1\n#define ROPE_C %" PRId64 "LL\n#define ROPE_HD %" PRId64 "\n", x->dims[2], td + hd + wd);
    wan_rope_defines(s, op, x);
  } else {
    dit_strbuf_printf(s, "#define NORM_ROPE 2\n#define ROPE_C %" PRId64 "LL\n#define ROPE_HD %" PRId64 "\n#define RT_TOKENS %" PRId64 "LL\n",
                      x->dims[2], x->dims[2] / geti(op, "heads"), x->dims[1]);
  }
}

static dit_status_t specialize(const dit_graph_t *g, const dit_op_t *op, dit_strbuf_t *s, int *has,
                               dit_plan_kernel_t *k, const char *arch, kernel_template_t *tmpl) {
  const int sm90 = !strcmp(arch, "90");
  const uint32_t smem_max = smem_optin_max(arch);
  const dit_value_t *x = V(g, op->in[0]), *y = V(g, op->out[0]);
  const char *name = dit_op_info(op->kind)->name;
  *has = 1;
  /* A norm with the row quantizer folded in rounds its rows to x's type before quantizing them. */
  const int norm_quant = dit_norm_quant(op->kind, &op->attrs) == 1;
  dit_strbuf_printf(s, "#define T_OUT %d\n", dt_code(norm_quant ? x->dtype : y->dtype));
  /* Float operands are f32 or bf16; key_bound's mask may be any dtype, attention's bound is i32. */
  for (int i = 0; i < op->n_in; i++)
    if (op->kind != DIT_OP_KEY_BOUND && op->kind != DIT_OP_ATTENTION_FP8 && !(op->kind == DIT_OP_ATTENTION && i == 3) &&
        op->kind != DIT_OP_LINEAR_FP8 &&
        !(op->kind == DIT_OP_EMBEDDING && i == 0) && !(op->kind == DIT_OP_TOKEN_SELECT && i == 1) &&
        V(g, op->in[i])->dtype != DIT_F32 &&
        V(g, op->in[i])->dtype != DIT_BF16)
      return DIT_ERR(UNIMPLEMENTED, "op %s '%s': operand dtype %s has no GPU kernel", name, y->name,
                     dit_dtype_name(V(g, op->in[i])->dtype));
  uint64_t n = (uint64_t)dit_value_numel(y);
  switch (op->kind) {
    case DIT_OP_SILU:
    case DIT_OP_GELU_TANH:
    case DIT_OP_GELU:
    case DIT_OP_QUICK_GELU:
    case DIT_OP_ADD:
    case DIT_OP_MUL:
    case DIT_OP_CAST:
    case DIT_OP_RESHAPE: /* a device copy: the cast kernel between equal types (the IR keeps x's) */
      dit_strbuf_printf(s, "#define DIT_K_ELEMENTWISE 1\n#define OPCODE %d\n#define N %" PRIu64 "LL\n#define T_A %d\n#define VEC8 %d\n",
          op->kind == DIT_OP_SILU ? DIT_ABI_EW_SILU : op->kind == DIT_OP_GELU_TANH ? DIT_ABI_EW_GELU_TANH
          : op->kind == DIT_OP_GELU ? DIT_ABI_EW_GELU : op->kind == DIT_OP_QUICK_GELU ? DIT_ABI_EW_QUICK_GELU
          : op->kind == DIT_OP_CAST || op->kind == DIT_OP_RESHAPE ? DIT_ABI_EW_CAST
          : op->kind == DIT_OP_MUL ? DIT_ABI_EW_MUL : DIT_ABI_EW_ADD, n,
          dt_code(x->dtype), n % DIT_ABI_VEC == 0);
      if (op->kind == DIT_OP_ADD || op->kind == DIT_OP_MUL) dit_strbuf_printf(s, "#define T_B %d\n", dt_code(V(g, op->in[1])->dtype));
      set_launch(k, blocks_of(n % DIT_ABI_VEC == 0 ? n / DIT_ABI_VEC : n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    case DIT_OP_GATED_ADD: {
      const dit_value_t *mod = V(g, op->in[2]);
      int vec = x->dims[2] % DIT_ABI_VEC == 0;
      if (op->n_in == 4) {
        /* The per-token gate unstored: table [1, n, D] + e [B, T, r*D], one batch row per token. */
        const dit_value_t *e = V(g, op->in[3]);
        dit_strbuf_printf(s, "#define DIT_K_GATED_ADD 1\n#define MOD_TOK 1\n#define T_X %d\n#define T_Y %d\n#define T_TABLE %d\n"
               "#define T_E %d\n#define ROWS_E %" PRId64 "\n", dt_code(x->dtype), dt_code(V(g, op->in[1])->dtype), dt_code(mod->dtype),
            dt_code(e->dtype), e->dims[2] / x->dims[2]);
        dit_strbuf_printf(s, "#define BATCH %" PRId64 "\n#define TOKENS 1\n#define D %" PRId64 "\n#define NROWS %" PRId64
               "\n#define GATE %" PRId64 "\n#define VEC8 %d\n", x->dims[0] * x->dims[1], x->dims[2], mod->dims[1], geti(op, "gate"), vec);
        token_group_defines(s, op, x, e);
        set_launch(k, blocks_of(vec ? n / DIT_ABI_VEC : n), 1, 1, DIT_ABI_BLOCK, 0);
        return DIT_OK;
      }
      dit_strbuf_printf(s, "#define DIT_K_GATED_ADD 1\n#define T_X %d\n#define T_Y %d\n#define T_MOD %d\n", dt_code(x->dtype),
          dt_code(V(g, op->in[1])->dtype), dt_code(mod->dtype));
      /* A per-token table [B, T, n, D] is the per-batch form with B*T batch rows of one token
       * (each reading its run's row of [B, R, n, D]). */
      const int per_token = mod->rank == 4;
      dit_strbuf_printf(s, "#define BATCH %" PRId64 "\n#define TOKENS %" PRId64 "\n#define D %" PRId64 "\n#define NROWS %" PRId64
             "\n#define GATE %" PRId64 "\n#define VEC8 %d\n", per_token ? x->dims[0] * x->dims[1] : x->dims[0],
             per_token ? (int64_t)1 : x->dims[1], x->dims[2], mod->dims[mod->rank - 2], geti(op, "gate"), vec);
      mod_group_defines(s, op, x, mod, "MOD_GROUPED");
      set_launch(k, blocks_of(vec ? n / DIT_ABI_VEC : n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_MOD_TABLE: {
      const dit_value_t *e = V(g, op->in[1]);
      /* Per token (y [B, T, n, D]): B*T batch rows. */
      const int64_t d = y->dims[y->rank - 1], nrows = y->dims[y->rank - 2], batch = dit_value_numel(y) / (nrows * d);
      int64_t rows_e = dit_value_numel(e) / batch / d;
      dit_strbuf_printf(s, "#define DIT_K_MOD_TABLE 1\n#define T_TABLE %d\n#define T_E %d\n#define BATCH %" PRId64 "\n#define NROWS %" PRId64
             "\n#define D %" PRId64 "\n#define ROWS_E %" PRId64 "\n",
          dt_code(x->dtype), dt_code(e->dtype), batch, nrows, d, rows_e);
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_TIMESTEP_EMBED:
      /* The kernel indexes in int; per-token timesteps make BATCH = B*T. */
      if (n > INT32_MAX) return DIT_ERR(UNIMPLEMENTED, "op %s '%s': %" PRIu64 " elements exceed the kernel's int index", name, y->name, n);
      dit_strbuf_printf(s, "#define DIT_K_TIMESTEP_EMBED 1\n#define T_T %d\n#define BATCH %" PRId64 "\n#define DIM %" PRId64
             "\n#define FLIP %d\n#define SHIFT ((float)%.17g)\n#define MAX_PERIOD ((float)%.17g)\n#define SCALE ((float)%.17g)\n"
             "#define PREMUL ((float)%.17g)\n#define ROUND %d\n",
          dt_code(x->dtype), dit_value_numel(x), y->dims[y->rank - 1], (int)geti(op, "flip"), getf(op, "shift"), getf(op, "max_period"),
          getf(op, "scale"), dit_attrs_find(&op->attrs, "premul") ? getf(op, "premul") : 1.0, (int)geti(op, "round"));
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    case DIT_OP_PATCHIFY:
      dit_strbuf_printf(s, "#define DIT_K_PATCHIFY 1\n#define T_X %d\n#define BATCH %" PRId64 "LL\n#define C %" PRId64 "\n#define F %" PRId64
             "\n#define H %" PRId64 "\n#define W %" PRId64 "\n#define PT %" PRId64 "\n#define PH %" PRId64 "\n#define PW %" PRId64 "\n",
          dt_code(x->dtype), x->dims[0], x->dims[1], x->dims[2], x->dims[3], x->dims[4], geti(op, "pt"), geti(op, "ph"),
          geti(op, "pw"));
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    case DIT_OP_UNPATCHIFY:
      dit_strbuf_printf(s, "#define DIT_K_UNPATCHIFY 1\n#define T_Y %d\n#define BATCH %" PRId64 "LL\n#define C %" PRId64 "\n#define GF %" PRId64
             "\n#define GH %" PRId64 "\n#define GW %" PRId64 "\n#define PT %" PRId64 "\n#define PH %" PRId64 "\n#define PW %" PRId64 "\n",
          dt_code(x->dtype), y->dims[0], y->dims[1], geti(op, "f"), geti(op, "h"), geti(op, "w"), geti(op, "pt"),
          geti(op, "ph"), geti(op, "pw"));
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    case DIT_OP_ROPE:
    case DIT_OP_ROPE_TABLE:
      /* With the Q/K norm folded in, the RMSNorm kernel rotates what it stores. */
      if (op->n_in == (op->kind == DIT_OP_ROPE ? 1 : 2)) return specialize_rope(g, op, s, k);
      /* fall through */
    case DIT_OP_LAYERNORM:
    case DIT_OP_ADALN:
    case DIT_OP_RMSNORM:
    case DIT_OP_ROWSUMSQ:
    case DIT_OP_RMSNORM_SLICE: {
      int64_t D = x->dims[x->rank - 1], rows = dit_value_numel(x) / D;
      const int rope = op->kind == DIT_OP_ROPE || op->kind == DIT_OP_ROPE_TABLE;
      int mode = op->kind == DIT_OP_LAYERNORM ? DIT_ABI_NORM_LAYERNORM : op->kind == DIT_OP_ADALN ? DIT_ABI_NORM_ADALN
                 : op->kind == DIT_OP_RMSNORM || rope ? DIT_ABI_NORM_RMSNORM : op->kind == DIT_OP_ROWSUMSQ ? DIT_ABI_NORM_ROWSUMSQ
                 : DIT_ABI_NORM_RMSNORM_SLICE;
      const char *group_key = rope ? "norm_group" : "group";
      const int64_t group = mode == DIT_ABI_NORM_RMSNORM && dit_attrs_find(&op->attrs, group_key) ? geti(op, group_key) : D;
      /* A pair to rotate must lie in one normalized chunk (it shares its RMS). */
      if (rope && group % 2)
        return DIT_ERR(UNIMPLEMENTED, "op %s '%s': norm_group %" PRId64 " is odd; the GPU kernel rotates pairs of one group", name, y->name,
                       group);
      if (group != D) {
        /* Per head: a block normalizes a whole row when the threads holding one group are a
         * power of two of consecutive lanes (a warp butterfly sums it); else each group is a row. */
        const int cw = D % DIT_ABI_VEC == 0 ? DIT_ABI_VEC : 1;
        const int64_t lanes = group / cw;
        if (group % cw == 0 && lanes <= 32 && !(lanes & (lanes - 1))) {
          dit_strbuf_printf(s, "#define GROUP %" PRId64 "\n", group);
        } else {
          D = group;
          rows = dit_value_numel(x) / D;
        }
      }
      dit_strbuf_printf(s, "#define DIT_K_ROWNORM 1\n#define MODE %d\n#define T_X %d\n#define D %" PRId64 "\n#define EPS ((float)%.17g)\n"
             "#define VEC8 %d\n", mode, dt_code(x->dtype), D, getf(op, rope ? "norm_eps" : "eps"), D % DIT_ABI_VEC == 0);
      if (norm_quant) {
        if (group != D) return DIT_ERR(UNIMPLEMENTED, "op %s '%s': a folded row quantizer takes whole rows", name, y->name);
        dit_strbuf_printf(s, "#define QUANT 1\n");
      }
      if (rope) rope_defines(s, g, op);
      /* A folded residual add (res_at): the norm's own operands end where the residual's begin. */
      const int res_at = dit_norm_residual(op->kind, &op->attrs, op->n_in, NULL), own = res_at > 0 ? res_at : op->n_in;
      if (res_at > 0) DIT_RETURN_IF(residual_defines(g, op, res_at, s));
      if (mode == DIT_ABI_NORM_LAYERNORM) {
        dit_strbuf_printf(s, "#define AFFINE %d\n", own == 3);
        if (own == 3)
          dit_strbuf_printf(s, "#define T_W %d\n#define T_BIAS %d\n", dt_code(V(g, op->in[1])->dtype), dt_code(V(g, op->in[2])->dtype));
      } else if (mode == DIT_ABI_NORM_ADALN && own == 3) {
        /* The per-token rows unstored: table [1, n, D] + e [B, T, r*D], one batch row per token. */
        const dit_value_t *tab = V(g, op->in[1]), *e = V(g, op->in[2]);
        dit_strbuf_printf(s, "#define MOD_TOK 1\n#define T_TABLE %d\n#define T_E %d\n#define ROWS_E %" PRId64 "\n#define TOKENS 1\n"
               "#define NROWS %" PRId64 "\n#define SHIFT_ROW %" PRId64 "\n#define SCALE_ROW %" PRId64 "\n",
            dt_code(tab->dtype), dt_code(e->dtype), e->dims[2] / D, tab->dims[1], geti(op, "shift"), geti(op, "scale"));
        if (res_at <= 0 || op->n_in - res_at != 3) token_group_defines(s, op, x, e); /* else the residual's, the same */
      } else if (mode == DIT_ABI_NORM_ADALN) {
        const dit_value_t *mod = V(g, op->in[1]);
        /* A per-token table [B, R, n, D]: every row its own batch row (TOKENS 1), or its run's. */
        const int per_token = mod->rank == 4;
        dit_strbuf_printf(s, "#define T_MOD %d\n#define TOKENS %" PRId64 "\n#define NROWS %" PRId64 "\n#define SHIFT_ROW %" PRId64
               "\n#define SCALE_ROW %" PRId64 "\n",
            dt_code(mod->dtype), per_token ? (int64_t)1 : x->dims[1], mod->dims[mod->rank - 2], geti(op, "shift"), geti(op, "scale"));
        mod_group_defines(s, op, x, mod, "MOD_GROUPED");
      } else if (mode == DIT_ABI_NORM_RMSNORM) {
        dit_strbuf_printf(s, "#define T_W %d\n", dt_code(V(g, op->in[op->n_in - 1])->dtype)); /* a rope's: its last input */
      } else if (mode == DIT_ABI_NORM_RMSNORM_SLICE) {
        dit_strbuf_printf(s, "#define T_SS %d\n#define T_W %d\n#define DIM %" PRId64 "\n", dt_code(V(g, op->in[1])->dtype),
                          dt_code(V(g, op->in[2])->dtype), geti(op, "dim"));
      }
      if (D > DIT_ABI_BLOCK * DIT_ABI_ROWNORM_MAX_CHUNKS)
        return DIT_ERR(UNIMPLEMENTED, "op %s '%s': rows of %" PRId64 " exceed the GPU kernel's %d", name, y->name, D,
                       DIT_ABI_BLOCK * DIT_ABI_ROWNORM_MAX_CHUNKS);
      /* Short rows (a warp's lanes or fewer) share a block, a power of two of lanes each. */
      const int64_t lanes = D % DIT_ABI_VEC == 0 ? D / DIT_ABI_VEC : D;
      if ((mode == DIT_ABI_NORM_RMSNORM || mode == DIT_ABI_NORM_LAYERNORM) && group == D && lanes <= 32 && res_at <= 0 && !norm_quant) {
        int seg = 1;
        while (seg < lanes) seg *= 2;
        const int64_t per_block = DIT_ABI_BLOCK / seg;
        dit_strbuf_printf(s, "#define SEG %d\n#define ROWS %" PRId64 "LL\n", seg, rows);
        set_launch(k, (uint64_t)((rows + per_block - 1) / per_block), 1, 1, DIT_ABI_BLOCK, 0);
        return DIT_OK;
      }
      /* layernorm's token rows of whole warps of chunks: a warp a row (SEG 32, its three sums
       * butterflies, no block barrier) while the row's chunks held at once (x's, and the folded
       * residual's y) stay within 16 of eight a lane. Measured on an H200, Wan2.1-1.3B 480p
       * (32760 rows of 1536): layernorm with the residual folded in 4.69 -> 4.56 ms a forward, with
       * the row quantizer too 5.26 -> 4.24; adaln (its shift and scale rows loaded after the sums)
       * 5.78 -> 6.60 and rmsnorm + rope 5.89 -> 7.17, so they keep a block a row. */
      const int arrays = 1 + (res_at > 0);
      if (mode == DIT_ABI_NORM_LAYERNORM && D % DIT_ABI_VEC == 0 && lanes > 32 && lanes % 32 == 0 && arrays * (lanes / 32) <= 16) {
        const int64_t per_block = DIT_ABI_BLOCK / 32;
        dit_strbuf_printf(s, "#define SEG 32\n#define ROWS %" PRId64 "LL\n", rows);
        set_launch(k, (uint64_t)((rows + per_block - 1) / per_block), 1, 1, DIT_ABI_BLOCK, 0);
        return DIT_OK;
      }
      /* A block a row: the most whole warps up to a block that divide the row's chunks, so that no
       * thread idles in the last (3072 channels: 384 chunks of 8, 192 threads twice, not 256 and
       * then half of them); else a full block. adaln and rmsnorm take at most 128 threads,
       * more chunks each, so more of the loads that follow the sums (the modulation's rows, the
       * rotation's pairs) are in flight at once (H200, 27280 x 3072 bf16: per-token adaln 137 ->
       * 128 us, with the attention's residual folded in 218 -> 197 us; rmsnorm + rope 144 ->
       * 135 us; layernorm is fastest at 192). */
      int rb = DIT_ABI_BLOCK;
      const int most = mode == DIT_ABI_NORM_ADALN || mode == DIT_ABI_NORM_RMSNORM ? 128 : DIT_ABI_BLOCK;
      for (int t = most; t >= 64; t -= 32)
        if (lanes % t == 0 && lanes / t <= DIT_ABI_ROWNORM_MAX_CHUNKS) {
          rb = t;
          break;
        }
      if (rb != DIT_ABI_BLOCK) dit_strbuf_printf(s, "#define ROW_BLOCK %d\n", rb);
      set_launch(k, (uint64_t)rows, 1, 1, (uint32_t)rb, 0);
      return DIT_OK;
    }
    case DIT_OP_LINEAR: {
      const dit_value_t *w = V(g, op->in[1]);
      int64_t K = x->dims[x->rank - 1], M = dit_value_numel(x) / K, N = w->dims[0];
      /* bf16 products through cuBLASLt: the bias (its epilogue) in the output's dtype: bf16, or
       * fp32 for the partial sums of row-parallel layers, all-reduced in fp32. fp32 products with
       * many rows (an fp32 layer over many tokens) too, in true fp32 (no TF32), fp32 out: cuBLASLt
       * has no fp32 x fp32 -> bf16, so such a layer writes fp32 and a cast op follows. */
      int bi, ai;
      if (dit_linear_operands(op->kind, &op->attrs, op->n_in, &bi, &ai))
        return DIT_ERR(INVALID_ARGUMENT, "op linear '%s': %d operands do not fit attribute acc", y->name, op->n_in);
      const int bf16_lib = x->dtype == DIT_BF16 && w->dtype == DIT_BF16 && (y->dtype == DIT_BF16 || y->dtype == DIT_F32);
      const int f32_lib = x->dtype == DIT_F32 && w->dtype == DIT_F32 && y->dtype == DIT_F32;
      int lib = M >= 64 && (bf16_lib || f32_lib) && (bi < 0 || V(g, op->in[bi])->dtype == y->dtype) &&
                (ai < 0 || V(g, op->in[ai])->dtype == y->dtype);
      if (lib) {
        *has = 0; /* cuBLASLt at run time, with the bias as its epilogue and c as its C (beta = 1) */
        return DIT_OK;
      }
      /* The IR's act attribute: absent, or 1 for gelu_tanh (passes/fuse.c). */
      const int64_t act = geti(op, "act");
      if (act != 0 && act != 1) return DIT_ERR(UNIMPLEMENTED, "op linear '%s': activation %" PRId64 " (known: 1 = gelu_tanh)", y->name, act);
      /* A warp a row of w for up to 8 rows of x (the kernel's LS_MB), 16-byte vectors when K allows. */
      const int64_t mb = M < 8 ? M : 8, chunks = (M + mb - 1) / mb;
      dit_strbuf_printf(s, "#define DIT_K_LINEAR_SMALL 1\n#define T_X %d\n#define T_W %d\n#define M %" PRId64 "LL\n#define N %" PRId64
             "LL\n#define K %" PRId64 "LL\n#define HAS_BIAS %d\n#define HAS_ACC %d\n#define ACT %d\n#define VEC8 %d\n",
          dt_code(x->dtype), dt_code(w->dtype), M, N, K, bi >= 0, ai >= 0, act ? DIT_ABI_ACT_GELU_TANH : DIT_ABI_ACT_NONE, K % DIT_ABI_VEC == 0);
      if (bi >= 0) dit_strbuf_printf(s, "#define T_BIAS %d\n", dt_code(V(g, op->in[bi])->dtype));
      if (ai >= 0) dit_strbuf_printf(s, "#define T_ACC %d\n", dt_code(V(g, op->in[ai])->dtype));
      set_launch(k, blocks_of((uint64_t)(N * chunks) * 32), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_LINEAR_FP8: {
      /* cuBLASLt multiplies the e4m3 rows (attn_quant's codes, or a norm's with the quantizer
       * folded in) by the e4m3 weight in fp32 with outer-vector scaling (row scales of x, channel
       * scales of w) and the bias/GELU epilogue, writing bf16: no kernel of ours. */
      const dit_value_t *w = V(g, op->in[2]);
      const int64_t K = x->dims[x->rank - 1], N = w->dims[0];
      if (y->dtype != DIT_BF16 || (op->n_in == 5 && V(g, op->in[4])->dtype != DIT_BF16))
        return DIT_ERR(UNIMPLEMENTED, "op linear_fp8 '%s': the GPU path takes bf16 bias and output, found y %s", y->name,
                       dit_dtype_name(y->dtype));
      if (K % 16 || N % 16)
        return DIT_ERR(UNIMPLEMENTED, "op linear_fp8 '%s': K = %" PRId64 " and N = %" PRId64 " must be multiples of 16 (fp8 matmul)", y->name,
                       K, N);
      const int64_t act = geti(op, "act");
      if (act != 0 && act != 1) return DIT_ERR(UNIMPLEMENTED, "op linear_fp8 '%s': activation %" PRId64 " (known: 1 = gelu_tanh)", y->name, act);
      *has = 0;
      return DIT_OK;
    }
    case DIT_OP_ATTN_QUANT:
    case DIT_OP_ATTN_QUANT_VT:
    case DIT_OP_ATTN_VMAX: {
      /* attention_fp8's operands: e4m3 codes and fp32 scales of q, k (row blocks) and v (channels,
       * transposed); one block a (b, h, row block), for v's maxima one a (b, h, 32 channels, split)
       * and for its codes one a (b, h, 128-key column tile). */
      const int64_t heads = geti(op, "heads"), hd = x->dims[2] / heads, T = x->dims[1], B = x->dims[0];
      if (dit_attn_quant_rows(op->kind, &op->attrs) && y->dtype == DIT_F8E4M3) {
        /* Token rows (an fp8 linear's quantizer), held in registers: a warp a row up to 2048
         * channels (at most 8 vectors of eight a lane), a block a row beyond (the FFN's 8960: 5 a
         * thread). Rows of whole 8-element vectors. */
        const int64_t M = B * T;
        if (hd % 8) return DIT_ERR(UNIMPLEMENTED, "op attn_quant '%s': rows of %" PRId64 " channels, not whole 8-element vectors", y->name, hd);
        if (M > INT32_MAX) return DIT_ERR(UNIMPLEMENTED, "op attn_quant '%s': %" PRId64 " rows, more than a grid holds", y->name, M);
        if (hd > 8 * DIT_ABI_BLOCK * 8)
          return DIT_ERR(UNIMPLEMENTED, "op attn_quant '%s': rows of %" PRId64 " channels exceed the kernel's %d", y->name, hd, 8 * DIT_ABI_BLOCK * 8);
        const int qt = hd <= 2048 ? 32 : DIT_ABI_BLOCK;
        dit_strbuf_printf(s, "#define DIT_K_QUANT_FP8 1\n#define T_X %d\n#define M %" PRId64 "LL\n#define K %" PRId64 "\n#define QT %d\n",
                          dt_code(x->dtype), M, hd, qt);
        /* act(x + bias): a linear's epilogue moved into its rows' quantizer */
        const int64_t act = geti(op, "act");
        if (act != 0 && act != 1) return DIT_ERR(UNIMPLEMENTED, "op attn_quant '%s': activation %" PRId64 " (known: 1 = gelu_tanh)", y->name, act);
        if (act) dit_strbuf_printf(s, "#define ACT DIT_ABI_ACT_GELU_TANH\n");
        if (op->n_in > 1) {
          const dit_value_t *b = V(g, op->in[1]);
          if (b->dtype != DIT_BF16 && b->dtype != DIT_F32)
            return DIT_ERR(UNIMPLEMENTED, "op attn_quant '%s': bias '%s' is %s, the kernel takes bf16 or f32", y->name, b->name,
                           dit_dtype_name(b->dtype));
          dit_strbuf_printf(s, "#define T_BIAS %d\n", dt_code(b->dtype));
        }
        set_launch(k, (uint64_t)(M + DIT_ABI_BLOCK / qt - 1) / (DIT_ABI_BLOCK / qt), 1, 1, DIT_ABI_BLOCK, 0);
        return DIT_OK;
      }
      if (op->kind == DIT_OP_ATTN_QUANT) {
        const int64_t rows = geti(op, "rows"), nblk = (T + rows - 1) / rows;
        dit_strbuf_printf(s, "#define DIT_K_ATTN_QUANT 1\n#define T_X %d\n#define TOKENS %" PRId64 "LL\n#define HEADS %" PRId64
               "LL\n#define HD %" PRId64 "LL\n#define ROWS %" PRId64 "LL\n#define NBLK %" PRId64 "LL\n#define CODES_I8 %d\n#define CODE_MAX %.1ff\n",
               dt_code(x->dtype), T, heads, hd, rows, nblk, y->dtype == DIT_I8, (double)dit_attn_quant_e4m3_max(heads, rows));
        set_launch(k, (uint64_t)(x->dims[0] * heads * nblk), 1, 1, DIT_ABI_BLOCK, 0);
        return DIT_OK;
      }
      if (hd % 32)
        return DIT_ERR(UNIMPLEMENTED, "op %s '%s': head dim %" PRId64 " is not a multiple of 32 (the kernel's channel group)", name,
                       y->name, hd);
      /* The splits: attn_vmax's output [B, H, S, Dh], attn_quant_vt's second input. */
      const int vmax = op->kind == DIT_OP_ATTN_VMAX;
      const int64_t splits = (vmax ? y : V(g, op->in[1]))->dims[2], parts = vmax ? splits : y->dims[3] / DIT_SPARSE_TILE;
      /* attn_quant_vt: a thread a channel's statistics. */
      if (!vmax && hd > DIT_ABI_BLOCK)
        return DIT_ERR(UNIMPLEMENTED, "op %s '%s': head dim %" PRId64 " exceeds the kernel's %d", name, y->name, hd, DIT_ABI_BLOCK);
      const int64_t blocks = B * heads * (vmax ? hd / 32 : 1) * parts;
      if (blocks > INT32_MAX)
        return DIT_ERR(UNIMPLEMENTED, "op %s '%s': %" PRId64 " blocks, more than a grid holds", name, y->name, blocks);
      dit_strbuf_printf(s, "#define DIT_K_%s 1\n#define T_X %d\n#define KEYS %" PRId64 "LL\n#define HEADS %" PRId64
             "LL\n#define HD %" PRId64 "LL\n#define SPLITS %" PRId64 "LL\n", vmax ? "ATTN_VMAX" : "ATTN_QUANT_VT", dt_code(x->dtype),
             T, heads, hd, splits);
      if (vmax) dit_strbuf_printf(s, "#define SPLIT_KEYS %" PRId64 "LL\n", (T + splits - 1) / splits);
      else dit_strbuf_printf(s, "#define KEYS_PAD %" PRId64 "LL\n", y->dims[3]);
      set_launch(k, (uint64_t)blocks, 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_ATTENTION_FP8: {
      /* The Hopper kernel's fp8 form (ditc takes --attn-quant fp8 for sm_90 alone). */
      const dit_value_t *kk = V(g, op->in[2]);
      const int64_t heads = geti(op, "heads"), hd = x->dims[2] / heads;
      if (!sm90 || (hd != 64 && hd != 128) || y->dtype != DIT_BF16 || x->dims[0] * x->dims[1] >= INT32_MAX || x->dims[0] * kk->dims[1] >= INT32_MAX)
        return DIT_ERR(UNIMPLEMENTED, "op attention_fp8 '%s': the sm_90a kernel takes head dim 64 or 128 and a bf16 output (found sm_%s, head dim %" PRId64
                       ", %s output)", y->name, arch, hd, dit_dtype_name(y->dtype));
      dit_strbuf_printf(s, "#define HD %" PRId64 "\n#define HEADS %" PRId64 "\n#define SQ %" PRId64 "\n#define LK %" PRId64
             "\n#define SCALE ((float)%.17g)\n#define HAS_LSE %d\n", hd, heads, x->dims[1], kk->dims[1], getf(op, "scale"), op->n_out == 2);
      const int tiled = dit_attrs_find(&op->attrs, "tiles") != NULL;
      if (tiled)
        dit_strbuf_printf(s, "#define HAS_TILES 1\n#define TILES_W %" PRId64 "\n#define SPARSE_TILE %d\n", V(g, op->in[op->n_in - 1])->dims[1],
                          DIT_SPARSE_TILE);
      if (x->dtype == DIT_I8) dit_strbuf_printf(s, "#define ATT_QK_I8 1\n"); /* int8 Q K^T */
      /* v itself (bf16) rather than e4m3 V^T: P V in bf16 (--attn-quant int8). */
      const dit_value_t *v4 = V(g, op->in[4]);
      const int pv_bf16 = v4->dtype != DIT_F8E4M3;
      if (pv_bf16 && v4->dtype != DIT_BF16)
        return DIT_ERR(UNIMPLEMENTED, "op attention_fp8 '%s': v is %s, the sm_90a kernel takes bf16", y->name, dit_dtype_name(v4->dtype));
      /* A key bound (a text mask) after V's operands, where no tile schedule is. */
      const int bounded = !tiled && op->n_in == (pv_bf16 ? 6 : 7);
      if (bounded) dit_strbuf_printf(s, "#define HAS_BOUND 1\n");
      const dit_attr_t *kta = dit_attrs_find(&op->attrs, "key_tile");
      const int key_tile = kta ? (int)kta->i : DIT_SPARSE_TILE;
      if (key_tile != 128 && key_tile != 160 && key_tile != 192 && key_tile != 224 && (key_tile != 256 || x->dtype == DIT_I8))
        return DIT_ERR(UNIMPLEMENTED, "op attention_fp8 '%s': key_tile %d, the sm_90a kernel takes 128, 160, 192 or 224 (or 256 over e4m3 Q and K)",
                       y->name, key_tile);
      specialize_attention_sm90(s, k, x->dims[0], heads, hd, x->dims[1], kk->dims[1], op->n_out, 1, pv_bf16, tiled, bounded, key_tile);
      *tmpl = TEMPLATE_ATTN_SM90;
      return DIT_OK;
    }
    case DIT_OP_ATTENTION: {
      const dit_value_t *kk = V(g, op->in[1]);
      int64_t heads = geti(op, "heads"), hd = x->dims[2] / heads;
      if (x->dtype != DIT_BF16 || kk->dtype != DIT_BF16 || V(g, op->in[2])->dtype != DIT_BF16 || y->dtype != DIT_BF16)
        return DIT_ERR(UNIMPLEMENTED, "op attention '%s': the GPU kernel takes bf16 q, k, v and output", y->name);
      /* Above ATTN_MAX_HD the output columns split into blocks of ATTN_SPLIT_DV (see the kernel). */
      const int split = hd > DIT_ABI_ATTN_MAX_HD;
      if (hd > DIT_ABI_ATTN_SPLIT_MAX_HD || (split && hd % DIT_ABI_ATTN_SPLIT_DV))
        return DIT_ERR(UNIMPLEMENTED, "op attention '%s': head dim %" PRId64 ": expected at most %d, or a multiple of %d up to %d", y->name, hd,
                       DIT_ABI_ATTN_MAX_HD, DIT_ABI_ATTN_SPLIT_DV, DIT_ABI_ATTN_SPLIT_MAX_HD);
      /* A tile schedule (attr tiles): both kernels walk only the listed key tiles. Its query tile is
       * the portable kernel's block and, at head dim 128, the Hopper kernel's work tile. */
      const int tiled = dit_attrs_find(&op->attrs, "tiles") != NULL, biased = dit_attrs_find(&op->attrs, "bias") != NULL;
      /* With a score bias the key bound, if any, is the fourth input of five. */
      const int bounded = biased ? op->n_in == 5 : op->n_in == 4 && !tiled;
      char tiles_def[96] = "";
      if (tiled)
        snprintf(tiles_def, sizeof tiles_def, "#define HAS_TILES 1\n#define TILES_W %" PRId64 "\n#define SPARSE_TILE %d\n",
                 V(g, op->in[op->n_in - 1])->dims[1], DIT_SPARSE_TILE);
      /* A score bias (T5's relative positions) runs on the portable kernel, and so does a frame-causal
       * mask (the Hopper kernel has no per-query key limit yet). */
      const int64_t causal = geti(op, "causal_block");
      if (sm90 && !biased && !causal && (tiled ? hd == 128 : hd == 64 || hd == 128) && x->dims[0] * x->dims[1] < INT32_MAX &&
          x->dims[0] * kk->dims[1] < INT32_MAX) {
        dit_strbuf_printf(s, "#define HD %" PRId64 "\n#define HEADS %" PRId64 "\n#define SQ %" PRId64 "\n#define LK %" PRId64
               "\n#define SCALE ((float)%.17g)\n#define HAS_LSE %d\n%s",
            hd, heads, x->dims[1], kk->dims[1], getf(op, "scale"), op->n_out == 2, tiles_def);
        if (bounded) dit_strbuf_printf(s, "#define HAS_BOUND 1\n");
        specialize_attention_sm90(s, k, x->dims[0], heads, hd, x->dims[1], kk->dims[1], op->n_out, 0, 0, tiled, bounded, 0);
        *tmpl = TEMPLATE_ATTN_SM90;
        return DIT_OK;
      }
      int64_t dp = (hd + 15) / 16 * 16;
      /* Wide heads (the VAE's one head of 384) take fewer warps and keys a tile (see the kernel). */
      const int wide = hd > DIT_ABI_ATTN_WIDE_HD;
      if ((wide || split) && tiled)
        return DIT_ERR(UNIMPLEMENTED, "op attention '%s': a tile schedule at head dim %" PRId64 " (tile schedules take head dims up to %d)",
                       y->name, hd, DIT_ABI_ATTN_WIDE_HD);
      const int nw = wide ? DIT_ABI_ATTN_WARPS_WIDE : DIT_ABI_ATTN_WARPS, bk = wide ? DIT_ABI_ATTN_BK_WIDE : DIT_ABI_ATTN_BK;
      /* A Q tile of 16 rows per warp, and two buffers each of K and V tiles (V's of the block's
       * columns; see the kernel). */
      const int bq = 16 * nw;
      const int64_t dv = split ? DIT_ABI_ATTN_SPLIT_DV : dp, nsplit = dp / dv;
      uint32_t smem = (uint32_t)(((bq + 2 * bk) * (dp + 8) + 2 * bk * (dv + 8)) * 2);
      if (smem > smem_max)
        return DIT_ERR(UNIMPLEMENTED, "op attention '%s': head dim %" PRId64 " needs %u bytes of shared memory, sm_%s allows %u", y->name, hd,
                       smem, arch, smem_max);
      dit_strbuf_printf(s, "#define DIT_K_ATTENTION 1\n#define HD %" PRId64 "\n#define HEADS %" PRId64 "\n#define SQ %" PRId64 "\n#define LK %" PRId64
             "\n#define SCALE ((float)%.17g)\n#define HAS_LSE %d\n%s",
          hd, heads, x->dims[1], kk->dims[1], getf(op, "scale"), op->n_out == 2, tiles_def);
      if (bounded) dit_strbuf_printf(s, "#define HAS_BOUND 1\n");
      if (biased) dit_strbuf_printf(s, "#define HAS_BIAS 1\n");
      if (causal) dit_strbuf_printf(s, "#define CAUSAL_BLOCK %" PRId64 "\n", causal);
      if (x->dims[0] > 65535 || heads * nsplit > 65535) return DIT_ERR(UNIMPLEMENTED, "op attention '%s': grid too large", y->name);
      set_launch(k, (uint64_t)((x->dims[1] + bq - 1) / bq), (uint32_t)(heads * nsplit), (uint32_t)x->dims[0], (uint32_t)(32 * nw), smem);
      return DIT_OK;
    }
    case DIT_OP_KEY_BOUND: {
      /* The mask's elements as stored; a float is nonzero unless its bits are +-0. */
      static const char *const kMask[DIT_DTYPE_COUNT][2] = {
          [DIT_F32] = {"unsigned int", "(((v) & 0x7fffffffu) != 0)"}, [DIT_BF16] = {"unsigned short", "(((v) & 0x7fffu) != 0)"},
          [DIT_F16] = {"unsigned short", "(((v) & 0x7fffu) != 0)"},   [DIT_I64] = {"long long", "((v) != 0)"},
          [DIT_I32] = {"int", "((v) != 0)"},                              [DIT_U8] = {"unsigned char", "((v) != 0)"},
          [DIT_F8E4M3] = {"unsigned char", "(((v) & 0x7fu) != 0)"},    [DIT_I8] = {"signed char", "((v) != 0)"},
      };
      if (y->dtype != DIT_I32) return DIT_ERR(UNIMPLEMENTED, "op key_bound '%s': output dtype %s, expected i32", y->name, dit_dtype_name(y->dtype));
      dit_strbuf_printf(s, "#define DIT_K_KEY_BOUND 1\n#define MASK_T %s\n#define MASK_NZ(v) %s\n#define BATCH %" PRId64 "LL\n#define MASK_LEN %" PRId64
             "\n#define OFFSET %" PRId64 "\n", kMask[x->dtype][0], kMask[x->dtype][1], x->dims[0], x->dims[1], geti(op, "offset"));
      set_launch(k, blocks_of((uint64_t)x->dims[0]), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_EMBEDDING: {
      const dit_value_t *t = V(g, op->in[1]);
      dit_strbuf_printf(s, "#define DIT_K_EMBEDDING 1\n#define T_IDS %s\n#define T_TABLE %d\n#define N %" PRIu64 "LL\n#define ROWS %" PRId64
             "LL\n#define D %" PRId64 "LL\n", x->dtype == DIT_I64 ? "long long" : "int", dt_code(t->dtype), n, t->dims[0], t->dims[1]);
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_TOKEN_SELECT: {
      /* One thread an output element; each scans its item's ids (T is a text length). */
      const dit_value_t *ids = V(g, op->in[1]);
      dit_strbuf_printf(s, "#define DIT_K_TOKEN_SELECT 1\n#define T_X %d\n#define T_IDS %s\n#define N %" PRIu64 "LL\n#define TOKENS %" PRId64
             "LL\n#define C %" PRId64 "LL\n#define EOS %" PRId64 "\n", dt_code(x->dtype), ids->dtype == DIT_I64 ? "long long" : "int", n,
          x->dims[1], x->dims[2], geti(op, "eos"));
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_TOKEN_ROWS:
      dit_strbuf_printf(s, "#define DIT_K_TOKEN_ROWS 1\n#define T_X %d\n#define ROWS %" PRIu64 "LL\n#define GROUP %" PRId64 "LL\n",
          dt_code(x->dtype), n, geti(op, "group"));
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    case DIT_OP_SLICE_TOKENS:
      dit_strbuf_printf(s, "#define DIT_K_SLICE_TOKENS 1\n#define T_X %d\n#define BATCH %" PRId64 "LL\n#define TOKENS %" PRId64
             "LL\n#define C %" PRId64 "LL\n#define T0 %" PRId64 "LL\n#define COUNT %" PRId64 "LL\n",
          dt_code(x->dtype), x->dims[0], x->dims[1], x->dims[2], geti(op, "t0"), y->dims[1]);
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    case DIT_OP_CONCAT: {
      /* a [OUTER, IA] ++ b [OUTER, IB] with IA, IB the concatenated dim times the dims after it. */
      const dit_value_t *b = V(g, op->in[1]);
      const int64_t dim = geti(op, "dim");
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < dim; i++) outer *= x->dims[i];
      for (int i = (int)dim + 1; i < x->rank; i++) inner *= x->dims[i];
      const int64_t ia = x->dims[dim] * inner, ib = b->dims[dim] * inner;
      const int vec = ia % DIT_ABI_VEC == 0 && ib % DIT_ABI_VEC == 0;
      dit_strbuf_printf(s, "#define DIT_K_CONCAT 1\n#define T_X %d\n#define OUTER %" PRId64 "LL\n#define IA %" PRId64
             "LL\n#define IB %" PRId64 "LL\n#define VEC8 %d\n", dt_code(x->dtype), outer, ia, ib, vec);
      set_launch(k, blocks_of(vec ? n / DIT_ABI_VEC : n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_CLAMP:
      dit_strbuf_printf(s, "#define DIT_K_ELEMENTWISE 1\n#define OPCODE %d\n#define N %" PRIu64 "LL\n#define T_A %d\n#define VEC8 %d\n"
             "#define LO ((float)%.17g)\n#define HI ((float)%.17g)\n", DIT_ABI_EW_CLAMP, n, dt_code(x->dtype), n % DIT_ABI_VEC == 0,
          getf(op, "lo"), getf(op, "hi"));
      set_launch(k, blocks_of(n % DIT_ABI_VEC == 0 ? n / DIT_ABI_VEC : n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    case DIT_OP_CONV3D: {
      const dit_value_t *w = V(g, op->in[1]);
      const int64_t kt = w->rank == 5 ? w->dims[1] : 1;
      /* The kernels index frames, rows, columns and channels in int. */
      for (int d = 1; d < 5; d++)
        if (x->dims[d] > INT32_MAX / 2 || y->dims[d] > INT32_MAX / 2)
          return DIT_ERR(UNIMPLEMENTED, "op conv3d '%s': dim %d exceeds the kernel's int index", y->name, d);
      dit_strbuf_printf(s, "#define HAS_BIAS %d\n#define BATCH %" PRId64 "LL\n#define F %" PRId64 "\n#define H %" PRId64 "\n#define W %" PRId64
             "\n#define CIN %" PRId64 "\n#define FO %" PRId64 "\n#define HO %" PRId64 "\n#define WO %" PRId64 "\n#define COUT %" PRId64
             "\n#define KT %" PRId64 "\n#define KH %" PRId64 "\n#define KW %" PRId64 "\n#define PT %" PRId64 "\n#define PH %" PRId64
             "\n#define PW %" PRId64 "\n",
          op->n_in == 3, x->dims[0], x->dims[1], x->dims[2], x->dims[3], x->dims[4], y->dims[1], y->dims[2], y->dims[3], y->dims[4], kt,
          w->dims[w->rank - 3], w->dims[w->rank - 2], geti(op, "pad_t"), geti(op, "pad_h"), geti(op, "pad_w"));
      /* Strides (a downsampling conv) only where given: the stride-1 kernels' source stays as it was.
       * The padding after the last row or column needs no define: it only sizes y. */
      const int64_t st = geti(op, "stride_t"), sh = geti(op, "stride_h"), sw = geti(op, "stride_w");
      const int strided = st > 1 || sh > 1 || sw > 1;
      if (strided) dit_strbuf_printf(s, "#define ST %" PRId64 "\n#define SH %" PRId64 "\n#define SW %" PRId64 "\n", st > 1 ? st : 1,
                                     sh > 1 ? sh : 1, sw > 1 ? sw : 1);
      /* The Hopper kernel's tensor maps walk unit-stride boxes: strided convolutions take the portable kernels. */
      if (sm90 && !strided && specialize_conv_sm90(s, k, x, w, y, op->n_in == 3 ? V(g, op->in[2]) : NULL)) {
        *tmpl = TEMPLATE_CONV_SM90;
        return DIT_OK;
      }
      /* bf16 operands with whole 32-channel steps take the tensor-core implicit GEMM; the rest (f32,
       * the latents' few channels) the direct kernel, one thread an output. */
      const int mma = x->dtype == DIT_BF16 && w->dtype == DIT_BF16 && x->dims[4] % DIT_ABI_CONV_BK == 0;
      const int64_t pixels = y->dims[0] * y->dims[1] * y->dims[2] * y->dims[3];
      if (mma && ((pixels + DIT_ABI_CONV_BM - 1) / DIT_ABI_CONV_BM > INT32_MAX || (y->dims[4] + DIT_ABI_CONV_BN - 1) / DIT_ABI_CONV_BN > 65535))
        return DIT_ERR(UNIMPLEMENTED, "op conv3d '%s': %" PRId64 " pixels x %" PRId64 " channels exceed the grid", y->name, pixels, y->dims[4]);
      dit_strbuf_printf(s, "#define DIT_K_CONV3D%s 1\n#define T_X %d\n#define T_W %d\n", mma ? "_MMA" : "", dt_code(x->dtype), dt_code(w->dtype));
      if (op->n_in == 3) dit_strbuf_printf(s, "#define T_BIAS %d\n", dt_code(V(g, op->in[2])->dtype));
      if (mma)
        set_launch(k, (uint64_t)((pixels + DIT_ABI_CONV_BM - 1) / DIT_ABI_CONV_BM), (uint32_t)((y->dims[4] + DIT_ABI_CONV_BN - 1) / DIT_ABI_CONV_BN), 1,
                   DIT_ABI_BLOCK, 0);
      else
        set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_GROUPNORM: {
      const int64_t C = x->dims[x->rank - 1], B = x->dims[0], groups = geti(op, "groups");
      if (B > 65535) return DIT_ERR(UNIMPLEMENTED, "op groupnorm '%s': batch %" PRId64 " exceeds the grid", y->name, B);
      dit_strbuf_printf(s, "#define DIT_K_GROUPNORM 1\n#define T_X %d\n#define T_W %d\n#define T_BIAS %d\n#define P %" PRId64
             "LL\n#define C %" PRId64 "LL\n#define CG %" PRId64 "LL\n#define EPS ((float)%.17g)\n", dt_code(x->dtype),
          dt_code(V(g, op->in[1])->dtype), dt_code(V(g, op->in[2])->dtype), dit_value_numel(x) / (B * C), C, C / groups, getf(op, "eps"));
      set_launch(k, (uint64_t)groups, (uint32_t)B, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_GROUPNORM_STATS:
    case DIT_OP_GROUPNORM_APPLY: {
      /* Both on the slices' grid (S, B); stats [B, S, G, 2] is the stats op's output, the apply's input. */
      const int apply = op->kind == DIT_OP_GROUPNORM_APPLY;
      const dit_value_t *st = apply ? V(g, op->in[1]) : y;
      const int64_t B = x->dims[0], C = x->dims[x->rank - 1], S = st->dims[1], groups = st->dims[2];
      if (!groupnorm_sliced_fits(C, groups) || B < 1 || B > 65535)
        return DIT_ERR(UNIMPLEMENTED, "op %s '%s': batch %" PRId64 ", %" PRId64 " channels in %" PRId64 " groups: the kernel needs a batch of "
                       "1..65535, whole 8-channel chunks up to %d channels and at most %d groups", name, y->name, B, C, groups,
                       DIT_ABI_BLOCK * DIT_ABI_VEC, DIT_ABI_BLOCK);
      dit_strbuf_printf(s, "#define DIT_K_GROUPNORM_%s 1\n#define T_X %d\n#define P %" PRId64 "LL\n#define C %" PRId64 "LL\n#define GROUPS %" PRId64
             "LL\n#define SLICES %" PRId64 "LL\n", apply ? "APPLY" : "STATS", dt_code(x->dtype), dit_value_numel(x) / (B * C), C, groups, S);
      if (apply)
        dit_strbuf_printf(s, "#define T_W %d\n#define T_BIAS %d\n#define EPS ((float)%.17g)\n", dt_code(V(g, op->in[2])->dtype),
                          dt_code(V(g, op->in[3])->dtype), getf(op, "eps"));
      set_launch(k, (uint64_t)S, (uint32_t)B, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_UPSAMPLE:
      dit_strbuf_printf(s, "#define DIT_K_UPSAMPLE 1\n#define T_X %d\n#define BF %" PRId64 "LL\n#define H %" PRId64 "LL\n#define W %" PRId64
             "LL\n#define C %" PRId64 "LL\n#define S %" PRId64 "LL\n", dt_code(x->dtype), x->dims[0] * x->dims[1], x->dims[2], x->dims[3],
          x->dims[4], geti(op, "scale"));
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    case DIT_OP_ATTN_MERGE: {
      int64_t heads = geti(op, "heads");
      const dit_value_t *la = V(g, op->in[1]), *lse = V(g, op->out[1]);
      if (V(g, op->in[2])->dtype != x->dtype || V(g, op->in[3])->dtype != la->dtype)
        return DIT_ERR(UNIMPLEMENTED, "op attn_merge '%s': the two partial states differ in dtype", y->name);
      dit_strbuf_printf(s, "#define DIT_K_ATTN_MERGE 1\n#define T_OA %d\n#define T_LA %d\n#define T_LSE %d\n#define BATCH %" PRId64
             "LL\n#define SQ %" PRId64 "LL\n#define HEADS %" PRId64 "LL\n#define HD %" PRId64 "LL\n",
          dt_code(x->dtype), dt_code(la->dtype), dt_code(lse->dtype), x->dims[0], x->dims[1], heads, x->dims[2] / heads);
      set_launch(k, blocks_of(n), 1, 1, DIT_ABI_BLOCK, 0);
      return DIT_OK;
    }
    case DIT_OP_STATE_CACHE: /* device copies the executor makes (or skips) */
      *has = 0;
      return DIT_OK;
    default:
      if (dit_op_is_collective(op->kind)) {
        *has = 0; /* collectives: the runtime's communicator */
        return DIT_OK;
      }
      break;
  }
  return DIT_ERR(UNIMPLEMENTED, "op %s has no GPU kernel yet", name);
}

/* ---- compile with cache ---- */

/* What NVRTC compiles every kernel template against: the ABI generated from dit_abi.def (the
 * dit_abi.h this file includes, byte for byte) and the shared device helpers. */
static const char *const kHeaderNames[] = {"dit_abi.h", "dit_device.cuh", "dit_sm90.cuh"};
static const char *const kHeaderTexts[] = {dit_abi_source, dit_device_source, dit_sm90_source};
#define N_HEADERS ((int)(sizeof kHeaderNames / sizeof kHeaderNames[0]))

int dit_cuda_kernel_headers(const char *const **out_names, const char *const **out_texts) {
  *out_names = kHeaderNames;
  *out_texts = kHeaderTexts;
  return N_HEADERS;
}

#if DIT_HAVE_NVRTC
static dit_status_t nvrtc_error(nvrtcResult r, const char *what) {
  return DIT_ERR(INTERNAL, "%s: %s", what, nvrtcGetErrorString(r));
}

/* NVRTC: PTX for a virtual architecture ("compute_90"), or a cubin for a real one ("sm_90a":
 * arch-specific instructions such as wgmma and setmaxnreg need whole-program compilation to
 * machine code, which the PTX-then-link path does not give them). */
static dit_status_t nvrtc_compile(const char *src, const char *gpu_arch, int cubin, char **out, size_t *out_size) {
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, src, "dit_kernels.cu", N_HEADERS, kHeaderTexts, kHeaderNames);
  if (r != NVRTC_SUCCESS) return nvrtc_error(r, "nvrtcCreateProgram");
  char arch[64];
  snprintf(arch, sizeof arch, "--gpu-architecture=%s", gpu_arch);
  const char *opts[] = {arch, "--std=c++17", "-default-device"};
  r = nvrtcCompileProgram(prog, 3, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    char *log = malloc(n + 1);
    if (log) {
      nvrtcGetProgramLog(prog, log);
      log[n] = 0;
    }
    dit_status_t s = DIT_ERR(INTERNAL, "NVRTC failed to compile a kernel:\n%s\n--- specialization ---\n%.1500s", log ? log : "",
                             src);
    free(log);
    nvrtcDestroyProgram(&prog);
    return s;
  }
  size_t n = 0;
  if (cubin) nvrtcGetCUBINSize(prog, &n);
  else nvrtcGetPTXSize(prog, &n);
  char *code = malloc(n + 1);
  if (!code) {
    nvrtcDestroyProgram(&prog);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (cubin) nvrtcGetCUBIN(prog, code);
  else nvrtcGetPTX(prog, code);
  nvrtcDestroyProgram(&prog);
  *out = code;
  *out_size = cubin ? n : strlen(code);
  return DIT_OK;
}

static dit_status_t link_cubin(dit_cuda_codegen_t *cg, const char *ptx, size_t ptx_size, char **out, size_t *out_size) {
  nvJitLinkHandle h;
  char arch[64];
  snprintf(arch, sizeof arch, "-arch=sm_%s", cg->arch);
  const char *opts[] = {arch, "-O3"};
  nvJitLinkResult r = nvJitLinkCreate(&h, 2, opts);
  if (r != NVJITLINK_SUCCESS) return DIT_ERR(INTERNAL, "nvJitLinkCreate failed (%d)", (int)r);
  r = nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx, ptx_size, "dit_kernels.ptx");
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(h);
  if (r != NVJITLINK_SUCCESS) {
    size_t n = 0;
    nvJitLinkGetErrorLogSize(h, &n);
    char *log = malloc(n + 1);
    if (log) nvJitLinkGetErrorLog(h, log), log[n] = 0;
    dit_status_t s = DIT_ERR(INTERNAL, "nvJitLink failed (%d): %s", (int)r, log ? log : "");
    free(log);
    nvJitLinkDestroy(&h);
    return s;
  }
  size_t n = 0;
  nvJitLinkGetLinkedCubinSize(h, &n);
  char *cubin = malloc(n + 1);
  if (!cubin) {
    nvJitLinkDestroy(&h);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  nvJitLinkGetLinkedCubin(h, cubin);
  nvJitLinkDestroy(&h);
  *out = cubin;
  *out_size = n;
  return DIT_OK;
}
#endif

/* ---- the MLIR path for pure elementwise ops ---- */

/* Which elementwise ops the MLIR path generates, from measurements on an H200 (per kernel,
 * against a device-to-device copy): add and the gated residual reach 98-101% of copy
 * bandwidth, fp32 silu/gelu 98%. bf16 silu (70%) and gelu (58%) are bound by the exact tanh
 * and exp arithmetic, not memory: they stay on NVRTC, whose kernels are no slower. Returns 1
 * and fills spec when the op goes to MLIR; otherwise *reason may say why not. */
static int mlir_spec(const dit_graph_t *g, const dit_op_t *op, dit_mlir_ew_spec_t *e, const char **reason) {
  const dit_value_t *x = V(g, op->in[0]), *y = V(g, op->out[0]);
  *reason = NULL;
  memset(e, 0, sizeof *e);
  /* The per-token gate unstored (four operands) or with rows that runs of tokens share stays on
   * the NVRTC kernel, as does every op with more operands than an elementwise spec holds (a norm
   * with its residual folded in). */
  if (op->kind == DIT_OP_GATED_ADD && (op->n_in == 4 || (V(g, op->in[2])->rank == 4 && V(g, op->in[2])->dims[1] != x->dims[1])))
    return 0;
  if (op->n_in > DIT_MLIR_EW_MAX_IN) return 0;
  e->n = dit_value_numel(y);
  e->out_dtype = y->dtype;
  for (int i = 0; i < op->n_in; i++) {
    e->in[i].dtype = V(g, op->in[i])->dtype;
    if (e->in[i].dtype != DIT_F32 && e->in[i].dtype != DIT_BF16) return 0;
  }
  if (y->dtype != DIT_F32 && y->dtype != DIT_BF16) return 0;
  switch (op->kind) {
    case DIT_OP_SILU:
    case DIT_OP_GELU_TANH:
      if (x->dtype == DIT_BF16 || y->dtype == DIT_BF16) {
        *reason = op->kind == DIT_OP_SILU
                      ? "bf16 silu: the MLIR kernel reached 70% of device-to-device bandwidth on H200 (arithmetic-bound); NVRTC kernel used"
                      : "bf16 gelu_tanh: the MLIR kernel reached 58% of device-to-device bandwidth on H200 (arithmetic-bound); NVRTC kernel used";
        return 0;
      }
      e->n_in = 1;
      e->n_steps = 1;
      e->steps[0].op = op->kind == DIT_OP_SILU ? DIT_MLIR_EW_SILU : DIT_MLIR_EW_GELU_TANH;
      return 1;
    case DIT_OP_ADD:
      e->n_in = 2;
      e->n_steps = 1;
      e->steps[0] = (dit_mlir_ew_step_t){DIT_MLIR_EW_ADD, 1, 0};
      return 1;
    case DIT_OP_GATED_ADD: {
      const dit_value_t *mod = V(g, op->in[2]);
      e->n_in = 3;
      e->in[2].bcast = DIT_MLIR_EW_MOD;
      e->d = x->dims[2];
      /* Per token (mod [B, T, n, D]): each token is a batch row of its own. */
      e->t = mod->rank == 4 ? 1 : x->dims[1];
      e->rows = mod->dims[mod->rank - 2];
      e->row = geti(op, "gate");
      e->n_steps = 1;
      e->steps[0] = (dit_mlir_ew_step_t){DIT_MLIR_EW_GATED_ADD, 1, 2};
      return 1;
    }
    default:
      return 0;
  }
}

#if DIT_HAVE_NVRTC /* the kernel cache serves the code generators only */
/* A cache read: 1 on a hit. A miss is not an error (the kernel is generated instead). */
static int cache_read(const char *path, size_t max, char **data, size_t *size) {
  dit_status_t s = dit_file_read(path, max, data, size);
  if (!s) return 1;
  dit_status_free(s);
  return 0;
}

static void spec_key_text(const dit_mlir_ew_spec_t *e, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "mlir-ew n=%lld d=%lld t=%lld rows=%lld row=%lld out=%d in=", (long long)e->n,
                              (long long)e->d, (long long)e->t, (long long)e->rows, (long long)e->row, (int)e->out_dtype);
  for (int i = 0; i < e->n_in && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%d/%d,", (int)e->in[i].dtype, (int)e->in[i].bcast);
  for (int i = 0; i < e->n_steps && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, " step=%d/%d/%d", (int)e->steps[i].op, e->steps[i].a, e->steps[i].b);
}

static dit_status_t link_cubin(dit_cuda_codegen_t *cg, const char *ptx, size_t ptx_size, char **out, size_t *out_size);

/* The last module's code: dropped before the next is made, lent to the caller once made. */
static void drop_module(dit_cuda_codegen_t *cg) {
  free(cg->cubin);
  free(cg->ptx);
  cg->cubin = cg->ptx = NULL;
}

static void hand_out(const dit_cuda_codegen_t *cg, dit_cuda_module_t *module) {
  module->cubin = cg->cubin;
  module->cubin_size = cg->cubin_size;
  module->ptx = cg->ptx;
  module->ptx_size = cg->ptx_size;
}
#endif

/* MLIR kernels are cached under a key of their spec, the target, the MLIR and nvJitLink
 * versions and ditc's own sources (which generate the MLIR text): a ditc without MLIR finds
 * them there, and only there. */
static dit_status_t codegen_mlir(dit_cuda_codegen_t *cg, const dit_graph_t *g, const dit_op_t *op,
                                 const dit_mlir_ew_spec_t *e, dit_plan_kernel_t *k, dit_cuda_module_t *module) {
#if !DIT_HAVE_NVRTC
  (void)cg, (void)g, (void)op, (void)e, (void)k, (void)module;
  return DIT_ERR(UNAVAILABLE, "this ditc was built without NVRTC/nvJitLink");
#else
  char text[1024], key[33];
  spec_key_text(e, text, sizeof text);
  char tag[256];
  snprintf(tag, sizeof tag, "|sm_%s|mlir %s|nvjitlink %d|ditc %s", cg->arch, cg->mlir_version, CUDA_VERSION, DIT_SOURCES_HASH);
  dit_hasher_t *h;
  DIT_RETURN_IF(dit_hasher_create(&h));
  dit_hasher_update(h, text, strlen(text));
  dit_hasher_update(h, tag, strlen(tag));
  dit_hasher_hex(h, key);
  dit_hasher_destroy(h);
  char cpath[PATH_MAX + 64], ppath[PATH_MAX + 64], lpath[PATH_MAX + 64];
  snprintf(cpath, sizeof cpath, "%s/%s.cubin", cg->cache, key);
  snprintf(ppath, sizeof ppath, "%s/%s.ptx", cg->cache, key);
  snprintf(lpath, sizeof lpath, "%s/%s.launch", cg->cache, key);
  drop_module(cg);
  char *launch = NULL;
  size_t llen = 0;
  dit_status_t s = DIT_OK;
  if (cache_read(cpath, 64u << 20, &cg->cubin, &cg->cubin_size) && cache_read(ppath, 64u << 20, &cg->ptx, &cg->ptx_size) &&
      cache_read(lpath, 4096, &launch, &llen) &&
      sscanf(launch, "%31s %u %u %u %u %u %u %u", k->entry, &k->grid[0], &k->grid[1], &k->grid[2], &k->block[0], &k->block[1],
             &k->block[2], &k->smem) == 8) {
    cg->stats.cache_hits++;
  } else {
    drop_module(cg);
    double t0 = dit_now_s();
    dit_mlir_kernel_t mk;
    s = dit_mlir_elementwise_ptx(e, (char[]){'s', 'm', '_', cg->arch[0], cg->arch[1], 0}, &mk, &cg->ptx, &cg->ptx_size, NULL);
    if (s && dit_status_code(s) == DIT_CODE_UNAVAILABLE)
      s = dit_status_annotate(s, "MLIR kernel %s is not in the codegen cache %s; compile on a host with MLIR (libmlir-19-dev) and carry its cache (DITC_CACHE_DIR)",
                              key, cg->cache);
    if (!s) s = link_cubin(cg, cg->ptx, cg->ptx_size, &cg->cubin, &cg->cubin_size);
    if (!s) {
      snprintf(k->entry, sizeof k->entry, "%s", mk.entry);
      memcpy(k->grid, mk.grid, sizeof k->grid);
      memcpy(k->block, mk.block, sizeof k->block);
      k->smem = mk.smem;
      char line[160];
      int n = snprintf(line, sizeof line, "%s %u %u %u %u %u %u %u\n", k->entry, k->grid[0], k->grid[1], k->grid[2], k->block[0],
                       k->block[1], k->block[2], k->smem);
      dit_status_free(dit_file_write_atomic(ppath, cg->ptx, cg->ptx_size));
      dit_status_free(dit_file_write_atomic(cpath, cg->cubin, cg->cubin_size));
      dit_status_free(dit_file_write_atomic(lpath, line, (size_t)n));
    }
    cg->stats.compiled++;
    cg->stats.compile_seconds += dit_now_s() - t0;
  }
  free(launch);
  if (s) return dit_status_annotate(s, "op %s '%s' (MLIR path)", dit_op_info(op->kind)->name, V(g, op->out[0])->name);
  snprintf(k->source, sizeof k->source, "mlir");
  cg->stats.mlir++;
  hand_out(cg, module);
  return DIT_OK;
#endif
}

dit_status_t dit_cuda_codegen_op(dit_cuda_codegen_t *cg, const dit_graph_t *g, const dit_op_t *op,
                                 int *out_has_kernel, dit_plan_kernel_t *launch, dit_cuda_module_t *module) {
  memset(launch, 0, sizeof *launch);
  dit_mlir_ew_spec_t ew;
  const char *reason = NULL;
  if (mlir_spec(g, op, &ew, &reason)) {
    *out_has_kernel = 1;
    return codegen_mlir(cg, g, op, &ew, launch, module);
  }
  if (reason) {
    if (!cg->nvrtc_because) cg->nvrtc_because = cJSON_CreateObject();
    if (cg->nvrtc_because && !cJSON_GetObjectItem(cg->nvrtc_because, dit_op_info(op->kind)->name))
      cJSON_AddStringToObject(cg->nvrtc_because, dit_op_info(op->kind)->name, reason);
  }
  dit_strbuf_t s;
  memset(&s, 0, sizeof s);
  kernel_template_t tmpl = TEMPLATE_COMMON;
  dit_status_t sp = specialize(g, op, &s, out_has_kernel, launch, cg->arch, &tmpl);
  if (!sp && s.oom) sp = DIT_ERR(RESOURCE_EXHAUSTED, "codegen: out of memory");
  if (sp || !*out_has_kernel) {
    free(s.p);
    return sp;
  }
  /* The launch as planned, for the kernel to check against its own (static_assert). */
  dit_strbuf_printf(&s, "#define DIT_LAUNCH_THREADS %u\n#define DIT_LAUNCH_SMEM %u\n",
                    launch->block[0] * launch->block[1] * launch->block[2], launch->smem);
  if (s.oom) {
    free(s.p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "codegen: out of memory");
  }
#if !DIT_HAVE_NVRTC
  (void)module;
  free(s.p);
  return DIT_ERR(UNAVAILABLE, "this ditc was built without NVRTC");
#else
  const char *body = tmpl == TEMPLATE_ATTN_SM90 ? dit_attn_sm90_source : tmpl == TEMPLATE_CONV_SM90 ? dit_conv_sm90_source : dit_kernel_source;
  const size_t body_size = tmpl == TEMPLATE_ATTN_SM90   ? sizeof dit_attn_sm90_source
                           : tmpl == TEMPLATE_CONV_SM90 ? sizeof dit_conv_sm90_source
                                                        : sizeof dit_kernel_source;
  const int arch_specific = tmpl != TEMPLATE_COMMON; /* sm_90a: a cubin and no PTX */
  char *src = malloc(s.len + body_size + 1);
  if (!src) {
    free(s.p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(src, s.p, s.len);
  free(s.p);
  memcpy(src + s.len, body, body_size);
  /* Cache key: the full source, the headers it includes, the target and the code generators'
   * versions. */
  int maj = 0, min = 0;
  nvrtcVersion(&maj, &min);
  char tag[96], key[33];
  snprintf(tag, sizeof tag, "\n//sm_%s%s nvrtc %d.%d nvjitlink %d", cg->arch, arch_specific ? "a" : "", maj, min, CUDA_VERSION);
  dit_hasher_t *h;
  dit_status_t st = dit_hasher_create(&h);
  if (st) {
    free(src);
    return st;
  }
  dit_hasher_update(h, src, strlen(src));
  for (int i = 0; i < N_HEADERS; i++) {
    dit_hasher_update(h, "\n//header ", 10);
    dit_hasher_update(h, kHeaderNames[i], strlen(kHeaderNames[i]) + 1);
    dit_hasher_update(h, kHeaderTexts[i], strlen(kHeaderTexts[i]));
  }
  dit_hasher_update(h, tag, strlen(tag));
  dit_hasher_hex(h, key);
  dit_hasher_destroy(h);
  char cpath[PATH_MAX + 64], ppath[PATH_MAX + 64];
  snprintf(cpath, sizeof cpath, "%s/%s.cubin", cg->cache, key);
  snprintf(ppath, sizeof ppath, "%s/%s.ptx", cg->cache, key);
  drop_module(cg);
  if (cache_read(cpath, 64u << 20, &cg->cubin, &cg->cubin_size) &&
      (arch_specific || cache_read(ppath, 64u << 20, &cg->ptx, &cg->ptx_size))) {
    cg->stats.cache_hits++;
  } else {
    drop_module(cg);
    double t0 = dit_now_s();
    char arch[32];
    snprintf(arch, sizeof arch, arch_specific ? "sm_%sa" : "compute_%s", cg->arch);
    if (arch_specific) {
      st = nvrtc_compile(src, arch, 1, &cg->cubin, &cg->cubin_size);
    } else {
      st = nvrtc_compile(src, arch, 0, &cg->ptx, &cg->ptx_size);
      if (!st) st = link_cubin(cg, cg->ptx, cg->ptx_size, &cg->cubin, &cg->cubin_size);
    }
    /* The cache is an optimization: a failed write only costs a recompile next time. */
    if (!st && cg->ptx) dit_status_free(dit_file_write_atomic(ppath, cg->ptx, cg->ptx_size));
    if (!st) dit_status_free(dit_file_write_atomic(cpath, cg->cubin, cg->cubin_size));
    cg->stats.compiled++;
    cg->stats.compile_seconds += dit_now_s() - t0;
  }
  free(src);
  if (st) return dit_status_annotate(st, "op %s '%s'", dit_op_info(op->kind)->name, V(g, op->out[0])->name);
  snprintf(launch->source, sizeof launch->source, "nvrtc");
  cg->stats.nvrtc++;
  hand_out(cg, module);
  return DIT_OK;
#endif
}

const cJSON *dit_cuda_codegen_nvrtc_because(const dit_cuda_codegen_t *cg) { return cg->nvrtc_because; }

dit_status_t dit_cuda_toolchain(cJSON *tc) {
#if DIT_HAVE_NVRTC
  cJSON *m = cJSON_CreateObject();
  dit_status_t ms = m ? dit_mlir_toolchain(m) : DIT_OK;
  const cJSON *mv = m ? cJSON_GetObjectItem(m, "mlir") : NULL;
  cJSON_AddStringToObject(tc, "mlir", !ms && cJSON_IsString(mv) ? mv->valuestring : DIT_MLIR_PINNED_VERSION);
  dit_status_free(ms);
  cJSON_Delete(m);
  int maj = 0, min = 0;
  nvrtcVersion(&maj, &min);
  char v[32];
  snprintf(v, sizeof v, "%d.%d", maj, min);
  cJSON_AddStringToObject(tc, "nvrtc", v);
  snprintf(v, sizeof v, "%d", CUDA_VERSION);
  cJSON_AddStringToObject(tc, "nvjitlink", v);
  return DIT_OK;
#else
  (void)tc;
  return DIT_ERR(UNAVAILABLE, "this ditc was built without NVRTC");
#endif
}

int dit_cuda_min_driver(void) {
#if DIT_HAVE_NVRTC
  /* PTX and cubin from this toolkit need a driver of at least its version. */
  int maj = 0, min = 0;
  nvrtcVersion(&maj, &min);
  return maj * 1000 + min * 10;
#else
  return 0;
#endif
}
