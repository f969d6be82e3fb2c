/* compiler/codegen_cuda and the kernel ABI: the constants NVRTC compiles the kernels against
 * are the ones the code generator uses (both from compiler/kernels/dit_abi.def), the device
 * helpers live in one header, and, where NVRTC is present (no GPU needed), real specializations
 * compile with the launch the code generator planned, and a kernel refuses a different one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "check.h"
#include "compiler/att90_tiles.h"
#include "compiler/codegen_cuda.h"
#include "dit_abi.h"
#include "dit_attn_sm90_source.h"
#include "dit_kernel_sources.h"

#if DIT_HAVE_NVRTC
#include <nvrtc.h>
#endif

typedef struct abi_entry {
  const char *name;
  long long value;
} abi_entry_t;

/* The table as C sees it when it includes the definition file itself. */
static const abi_entry_t kTable[] = {
#define DIT_ABI(name, value, text) {#name, value},
#include "compiler/kernels/dit_abi.def"
#undef DIT_ABI
};
#define N_TABLE (sizeof kTable / sizeof kTable[0])

static const char *header(const char *name) {
  const char *const *names, *const *texts;
  int n = dit_cuda_kernel_headers(&names, &texts);
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], name)) return texts[i];
  return NULL;
}

/* The generated header's macros (what codegen_cuda.c compiles with) equal the table. */
static void test_macros_match_table(void) {
#define DIT_ABI(name, value, text) CHECK_EQ_INT(DIT_ABI_##name, value);
#include "compiler/kernels/dit_abi.def"
#undef DIT_ABI
  CHECK_EQ_INT(DIT_ABI_COUNT, N_TABLE);
}

/* The text NVRTC gets as "dit_abi.h" defines exactly the table's constants with its values. */
static void test_nvrtc_text_matches_table(void) {
  const char *t = header("dit_abi.h");
  CHECK(t != NULL);
  if (!t) return;
  size_t defs = 0;
  for (const char *p = t; (p = strstr(p, "#define DIT_ABI_")); p++) defs++;
  CHECK_EQ_INT(defs, N_TABLE + 2); /* the guard DIT_ABI_H and DIT_ABI_COUNT besides the table */
  for (size_t i = 0; i < N_TABLE; i++) {
    char line[128];
    snprintf(line, sizeof line, "\n#define DIT_ABI_%s %lld ", kTable[i].name, kTable[i].value);
    if (!strstr(t, line)) {
      fprintf(stderr, "dit_abi.h for NVRTC lacks '%s'\n", line + 1);
      CHECK(!"every table entry in the NVRTC header");
    }
  }
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
  return n;
}

/* The bf16 conversions and exp2 are defined once, in the shared header both kernels include. */
static void test_device_helpers_shared(void) {
  const char *dev = header("dit_device.cuh");
  CHECK(dev != NULL);
  if (!dev) return;
  static const char *const defs[] = {"float bf2f(", "bf16_t f2bf(", "u32 pack_bf16(", "float ex2(", "typedef unsigned short bf16_t"};
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    CHECK_EQ_INT(count(dev, defs[i]), 1);
    CHECK_EQ_INT(count(dit_kernel_source, defs[i]), 0);
    CHECK_EQ_INT(count(dit_attn_sm90_source, defs[i]), 0);
  }
  CHECK_EQ_INT(count(dit_kernel_source, "ex2.approx"), 0);
  CHECK_EQ_INT(count(dit_attn_sm90_source, "ex2.approx"), 0);
  CHECK_EQ_INT(count(dit_attn_sm90_source, "cvt.rn.bf16x2"), 0);
  CHECK(strstr(dit_kernel_source, "#include \"dit_abi.h\"") && strstr(dit_kernel_source, "#include \"dit_device.cuh\""));
  CHECK(strstr(dit_attn_sm90_source, "#include \"dit_abi.h\"") && strstr(dit_attn_sm90_source, "#include \"dit_device.cuh\""));
  /* The fp8 kernel's probability codes centre their interpolation as the CPU reference does. */
#define STR_(x) #x
#define STR(x) STR_(x)
  CHECK_EQ_INT(count(dit_attn_sm90_source, "#define LIN_SHIFT " STR(DIT_E4M3_LIN_SHIFT) "\n"), 1);
}

#if DIT_HAVE_NVRTC
/* Compiles src with the kernel headers to PTX for compute_80; 0 on success, else the log. */
static int nvrtc_ptx(const char *src, char *log, size_t cap) {
  const char *const *names, *const *texts;
  int nh = dit_cuda_kernel_headers(&names, &texts);
  nvrtcProgram prog;
  log[0] = 0;
  if (nvrtcCreateProgram(&prog, src, "probe.cu", nh, texts, names) != NVRTC_SUCCESS) return -1;
  const char *opts[] = {"--gpu-architecture=compute_80", "--std=c++17", "-default-device"};
  nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  char *full = malloc(n + 1);
  if (full) {
    nvrtcGetProgramLog(prog, full);
    full[n] = 0;
    snprintf(log, cap, "%s", full);
    free(full);
  }
  nvrtcDestroyProgram(&prog);
  return r == NVRTC_SUCCESS ? 0 : 1;
}

/* NVRTC, through the same headers, sees every table value: a static_assert per entry holds, and
 * the same probe with one value changed fails naming it. */
static void test_nvrtc_sees_table(void) {
  char *src = malloc(N_TABLE * 160 + 64), log[4096];
  for (int perturb = 0; perturb < 2; perturb++) {
    size_t n = (size_t)sprintf(src, "#include \"dit_abi.h\"\n");
    for (size_t i = 0; i < N_TABLE; i++)
      n += (size_t)sprintf(src + n, "static_assert(DIT_ABI_%s == %lld, \"ABI %s\");\n", kTable[i].name,
                           kTable[i].value + (perturb && i == 3), kTable[i].name);
    int rc = nvrtc_ptx(src, log, sizeof log);
    if (!perturb) {
      if (rc) fprintf(stderr, "probe: %s\n", log);
      CHECK_EQ_INT(rc, 0);
    } else {
      char want[64];
      snprintf(want, sizeof want, "ABI %s", kTable[3].name);
      CHECK(rc != 0 && strstr(log, want) != NULL);
    }
  }
  free(src);
}

/* The common kernel template refuses a launch it was not written for. */
static void test_kernel_checks_launch(void) {
  static const char spec[] = "#define DIT_K_ELEMENTWISE 1\n#define OPCODE DIT_ABI_EW_SILU\n#define N 4096LL\n#define T_A 1\n#define T_OUT 1\n"
                             "#define VEC8 1\n#define DIT_LAUNCH_SMEM 0\n";
  char *src = malloc(sizeof spec + sizeof dit_kernel_source + 64), log[4096];
  for (int threads = 128; threads <= 256; threads += 128) {
    int n = sprintf(src, "%s#define DIT_LAUNCH_THREADS %d\n", spec, threads);
    memcpy(src + n, dit_kernel_source, sizeof dit_kernel_source);
    int rc = nvrtc_ptx(src, log, sizeof log);
    if (threads == DIT_ABI_BLOCK) {
      if (rc) fprintf(stderr, "elementwise: %s\n", log);
      CHECK_EQ_INT(rc, 0);
    } else {
      CHECK(rc != 0 && strstr(log, "planned block size differs"));
    }
  }
  /* An opcode outside the ABI is an error, not a silent add. */
  int n = sprintf(src, "#define DIT_K_ELEMENTWISE 1\n#define OPCODE 9\n#define N 4096LL\n#define T_A 1\n#define T_OUT 1\n#define VEC8 1\n"
                       "#define DIT_LAUNCH_SMEM 0\n#define DIT_LAUNCH_THREADS %d\n", DIT_ABI_BLOCK);
  memcpy(src + n, dit_kernel_source, sizeof dit_kernel_source);
  CHECK(nvrtc_ptx(src, log, sizeof log) != 0 && strstr(log, "unknown OPCODE"));
  free(src);
}
#endif

/* Real ops through the code generator: each specialization compiles (so its planned launch
 * passed the kernel's static_asserts) and carries the launch the ABI implies. */
static dit_vid_t in3(dit_graph_t *g, const char *name, dit_dtype_t t, int64_t a, int64_t b, int64_t c) {
  int64_t d[3] = {a, b, c};
  return dit_graph_input(g, name, t, 3, d);
}

/* The code generator refuses g's last op (UNIMPLEMENTED), saying msg. */
static void check_refused(dit_cuda_codegen_t *cg, dit_graph_t *g, const char *msg) {
  int has = 0;
  dit_plan_kernel_t k;
  dit_cuda_module_t m;
  memset(&m, 0, sizeof m);
  CHECK_ERR(dit_cuda_codegen_op(cg, g, dit_graph_cop_at(g, dit_graph_num_ops(g) - 1), &has, &k, &m), UNIMPLEMENTED, msg);
}

/* Returns the planned grid's x extent (0 when the op did not compile); the launch in *out if given. */
static uint32_t check_op_k(dit_cuda_codegen_t *cg, dit_graph_t *g, const char *what, uint32_t block, uint32_t smem, int cubin_only,
                           dit_plan_kernel_t *out) {
  const dit_op_t *op = dit_graph_cop_at(g, dit_graph_num_ops(g) - 1);
  int has = 0;
  dit_plan_kernel_t k;
  if (out) memset(out, 0, sizeof *out);
  dit_cuda_module_t m;
  memset(&m, 0, sizeof m);
  dit_status_t s = dit_cuda_codegen_op(cg, g, op, &has, &k, &m);
  if (s) fprintf(stderr, "%s: %s\n", what, dit_status_message(s));
  CHECK(s == DIT_OK);
  dit_status_free(s);
  if (s) return 0;
  CHECK_EQ_INT(has, 1);
  if (k.block[0] != block || k.smem != smem) fprintf(stderr, "%s: block %u smem %u\n", what, k.block[0], k.smem);
  CHECK_EQ_INT(k.block[0], block);
  CHECK_EQ_INT(k.smem, smem);
  CHECK(m.cubin && m.cubin_size > 0);
  CHECK(cubin_only ? m.ptx == NULL : (m.ptx && m.ptx_size > 0));
  if (out) *out = k;
  return k.grid[0];
}

static uint32_t check_op(dit_cuda_codegen_t *cg, dit_graph_t *g, const char *what, uint32_t block, uint32_t smem, int cubin_only) {
  return check_op_k(cg, g, what, block, smem, cubin_only, NULL);
}

/* The Hopper convolution's launch for bn output and bk input channels a step: 3 warpgroups and
 * as many stages of 128 pixels and bn weight rows as the budget holds (at most 8). */
static uint32_t conv90_smem(int bn, int bk) {
  const uint32_t stage = (uint32_t)((128 + bn) * bk * 2);
  uint32_t st = DIT_ABI_CONV90_SMEM_BUDGET / stage;
  if (st > DIT_ABI_CONV90_MAX_STAGES) st = DIT_ABI_CONV90_MAX_STAGES;
  return DIT_ABI_CONV90_SMEM_ALIGN + st * stage + 16 * st;
}

/* groupnorm_stats then groupnorm_apply of x (C channels in `groups`, f32 affine parameters) with
 * the slices the lowering picks, which must be `slices`: both compile with a block of DIT_ABI_BLOCK
 * threads on the grid (slices, batch). */
static void check_groupnorm_sliced(dit_cuda_codegen_t *cg, dit_graph_t *g, dit_vid_t x, int64_t groups, int64_t slices, uint32_t batch,
                                   const char *what) {
  const dit_value_t *xv = dit_graph_cvalue(g, x);
  const int64_t C = xv->dims[xv->rank - 1], pixels = dit_value_numel(xv) / (xv->dims[0] * C), cd[1] = {C};
  CHECK_EQ_INT(dit_cuda_groupnorm_slices(xv->dims[0], pixels, C, groups), slices);
  char name[160];
  dit_attrs_t sa = {0}, ea = {0};
  dit_attrs_set_int(&sa, "groups", groups);
  dit_attrs_set_int(&sa, "slices", slices);
  dit_attrs_set_float(&ea, "eps", 1e-6);
  snprintf(name, sizeof name, "groupnorm_stats %s", what);
  dit_vid_t ins[4] = {x, dit_graph_op(g, DIT_OP_GROUPNORM_STATS, &x, 1, &sa, DIT_F32, name)};
  dit_plan_kernel_t k;
  CHECK_EQ_INT(check_op_k(cg, g, name, DIT_ABI_BLOCK, 0, 0, &k), slices);
  CHECK_EQ_INT(k.grid[1], batch);
  snprintf(name, sizeof name, "%s.weight", what);
  ins[2] = dit_graph_weight(g, name, DIT_F32, 1, cd);
  snprintf(name, sizeof name, "%s.bias", what);
  ins[3] = dit_graph_weight(g, name, DIT_F32, 1, cd);
  snprintf(name, sizeof name, "groupnorm_apply %s", what);
  dit_graph_op(g, DIT_OP_GROUPNORM_APPLY, ins, 4, &ea, DIT_BF16, name);
  CHECK_EQ_INT(check_op_k(cg, g, name, DIT_ABI_BLOCK, 0, 0, &k), slices);
  CHECK_EQ_INT(k.grid[1], batch);
}

/* The ropes with the Q/K norm folded in: the RMSNorm kernel rotating what it stores, at Wan's
 * whole-row norm (a block a row of 40 heads; short rows sharing a block, 8-wide and odd; a
 * context-parallel share of the tokens) and the MMDiTs' per-head norm (heads of 128 in a row; of
 * 512 each a row; of 6 in odd rows). Column 6: the blocks. An odd group has no kernel. */
static void test_norm_rope_ops(dit_cuda_codegen_t *cg) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const uint32_t B = DIT_ABI_BLOCK;
  /* Wan: batch, heads, head dim (t, h, w parts), t0 (-1: all 24 tokens of the 2x3x4 grid), dtype */
  /* ... the grid, and the block: a row of 5120 (640 chunks of 8) takes 128 threads (a norm's
   * most), 5 chunks each; rows of a warp or less share a full block. */
  static const struct { int64_t batch, heads, td, hd, wd, t0; dit_dtype_t dt; uint32_t blocks, block; } wan[] = {
      {1, 40, 44, 42, 42, -1, DIT_BF16, 24, 128}, {2, 2, 44, 42, 42, -1, DIT_BF16, 6, B}, {1, 3, 2, 2, 2, -1, DIT_F32, 3, B},
      {1, 2, 44, 42, 42, 6, DIT_BF16, 2, B}};
  for (size_t i = 0; i < sizeof wan / sizeof wan[0]; i++) {
    const int64_t C = wan[i].heads * (wan[i].td + wan[i].hd + wan[i].wd), wd[1] = {C};
    dit_vid_t x = in3(g, "wq", wan[i].dt, wan[i].batch, wan[i].t0 < 0 ? 24 : 12, C);
    dit_vid_t xw[2] = {x, dit_graph_weight(g, "attn1.norm_q.weight", wan[i].dt, 1, wd)};
    dit_attrs_t ra = {0};
    static const char *const keys[] = {"f", "h", "w"};
    static const int64_t grid[] = {2, 3, 4};
    for (int k = 0; k < 3; k++) dit_attrs_set_int(&ra, keys[k], grid[k]);
    dit_attrs_set_int(&ra, "heads", wan[i].heads);
    dit_attrs_set_int(&ra, "t_dim", wan[i].td);
    dit_attrs_set_int(&ra, "h_dim", wan[i].hd);
    dit_attrs_set_int(&ra, "w_dim", wan[i].wd);
    if (wan[i].t0 >= 0) dit_attrs_set_int(&ra, "t0", wan[i].t0);
    dit_attrs_set_float(&ra, "theta", 10000);
    dit_attrs_set_float(&ra, "norm_eps", 1e-6);
    dit_graph_op(g, DIT_OP_ROPE, xw, 2, &ra, wan[i].dt, "wq_rot");
    char what[96];
    snprintf(what, sizeof what, "rope with its norm, %lld heads of %lld, %s", (long long)wan[i].heads, (long long)(C / wan[i].heads),
             dit_dtype_name(wan[i].dt));
    CHECK_EQ_INT(check_op(cg, g, what, wan[i].block, 0, 0), wan[i].blocks);
  }
  /* MMDiT: batch, tokens, channels, heads, group, dtype, the grid and the block (rows of 3072: 128
   * threads three times; heads of 512 as rows of their own: 64 threads) */
  static const struct { int64_t batch, tokens, C, heads, group; dit_dtype_t dt; uint32_t blocks, block; } mm[] = {
      {1, 377, 3072, 24, 128, DIT_BF16, 377, 128}, {2, 33, 2048, 4, 512, DIT_BF16, 2 * 33 * 4, 64}, {2, 5, 12, 2, 6, DIT_F32, 1, B},
      {1, 9, 256, 2, 0, DIT_BF16, 2, B}};
  for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
    const int64_t G = mm[i].group ? mm[i].group : mm[i].C, wd[1] = {G}, cd[2] = {mm[i].tokens, mm[i].C / mm[i].heads};
    dit_vid_t xcw[3] = {in3(g, "fq", mm[i].dt, mm[i].batch, mm[i].tokens, mm[i].C), dit_graph_input(g, "pe", DIT_F32, 2, cd),
                        dit_graph_weight(g, "norm_q.weight", mm[i].dt, 1, wd)};
    dit_attrs_t ta = {0};
    dit_attrs_set_int(&ta, "heads", mm[i].heads);
    if (mm[i].group) dit_attrs_set_int(&ta, "norm_group", G);
    dit_attrs_set_float(&ta, "norm_eps", 1e-6);
    dit_graph_op(g, DIT_OP_ROPE_TABLE, xcw, 3, &ta, mm[i].dt, "fq_rot");
    char what[96];
    snprintf(what, sizeof what, "rope_table with its norm, group %lld of %lld, %s", (long long)G, (long long)mm[i].C, dit_dtype_name(mm[i].dt));
    CHECK_EQ_INT(check_op(cg, g, what, mm[i].block, 0, 0), mm[i].blocks);
  }
  int64_t wd3[1] = {3}, cd6[2] = {5, 6};
  dit_vid_t xc3[3] = {in3(g, "oq", DIT_F32, 1, 5, 12), dit_graph_input(g, "pe6", DIT_F32, 2, cd6), dit_graph_weight(g, "w3", DIT_F32, 1, wd3)};
  dit_attrs_t t3 = {0};
  dit_attrs_set_int(&t3, "heads", 2);
  dit_attrs_set_int(&t3, "norm_group", 3);
  dit_attrs_set_float(&t3, "norm_eps", 1e-6);
  dit_graph_op(g, DIT_OP_ROPE_TABLE, xc3, 3, &t3, DIT_F32, "odd_group");
  check_refused(cg, g, "op rope_table 'odd_group': norm_group 3 is odd");
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
}

/* The video ops of the VAE decoder: conv3d (causal 3x3x3 with bias, a per-frame Conv2d without,
 * bf16 and f32), nearest upsampling and clamp, one thread an output element (clamp 8 when the
 * count allows). */
static void test_video_ops(dit_cuda_codegen_t *cg, int sm90) {
  const uint32_t B = DIT_ABI_BLOCK;
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t xd[5] = {1, 3, 12, 10, 16}, w3[5] = {24, 3, 3, 3, 16}, w2[4] = {8, 3, 3, 16}, bd[1] = {24};
  dit_vid_t x = dit_graph_input(g, "x", DIT_BF16, 5, xd);
  dit_vid_t xw[3] = {x, dit_graph_weight(g, "conv.weight", DIT_BF16, 5, w3), dit_graph_weight(g, "conv.bias", DIT_BF16, 1, bd)};
  dit_attrs_t ca = {0};
  dit_attrs_set_int(&ca, "pad_t", 2);
  dit_attrs_set_int(&ca, "pad_h", 1);
  dit_attrs_set_int(&ca, "pad_w", 1);
  dit_graph_op(g, DIT_OP_CONV3D, xw, 3, &ca, DIT_BF16, "conv");
  /* On sm_90 bf16 in and out take the Hopper kernel: 24 channels in one 32-wide block, 16-channel
   * steps; 2 pixel tiles (10 columns in one 16-wide tile, 12 rows in two of 8) a frame. */
  if (sm90) {
    dit_plan_kernel_t k;
    CHECK_EQ_INT(check_op_k(cg, g, "conv3d bf16 3x3x3 causal (Hopper)", 384, conv90_smem(32, 16), 1, &k), 2);
    CHECK_EQ_INT(k.grid[1], 1);
    CHECK_EQ_INT(k.grid[2], 3);
    CHECK_EQ_INT(k.n_tmaps, 2);
    CHECK(k.tmaps[0].arg == 1 && k.tmaps[0].rank == 5 && k.tmaps[0].box[0] == 16 && k.tmaps[0].box[1] == 16 && k.tmaps[0].box[2] == 8 &&
          k.tmaps[0].box[3] == 1 && k.tmaps[0].box[4] == 1 && k.tmaps[0].swizzle == 32);
    CHECK(k.tmaps[1].arg == 2 && k.tmaps[1].rank == 5 && k.tmaps[1].box[0] == 16 && k.tmaps[1].box[4] == 32 && k.tmaps[1].swizzle == 32);
  } else {
    CHECK_EQ_INT(check_op(cg, g, "conv3d bf16 3x3x3 causal", B, 0, 0), (3 * 12 * 10 * 24 + B - 1) / B);
  }
  dit_vid_t xf = dit_graph_input(g, "xf", DIT_F32, 5, xd), xw2[2] = {xf, dit_graph_weight(g, "conv2d.weight", DIT_F32, 4, w2)};
  dit_attrs_set_int(&ca, "pad_t", 0);
  dit_graph_op(g, DIT_OP_CONV3D, xw2, 2, &ca, DIT_F32, "conv2d");
  CHECK_EQ_INT(check_op(cg, g, "conv3d f32 per-frame 3x3, no bias", B, 0, 0), (3 * 12 * 10 * 8 + B - 1) / B);
  /* 32 input channels: the tensor-core implicit GEMM, a block 128 pixels x 128 channels. */
  const int64_t x32d[5] = {1, 3, 12, 10, 32}, w32[5] = {24, 3, 3, 3, 32};
  dit_vid_t x32 = dit_graph_input(g, "x32", DIT_BF16, 5, x32d);
  dit_vid_t xw32[3] = {x32, dit_graph_weight(g, "conv32.weight", DIT_BF16, 5, w32), dit_graph_weight(g, "conv32.bias", DIT_BF16, 1, bd)};
  dit_attrs_set_int(&ca, "pad_t", 2);
  dit_graph_op(g, DIT_OP_CONV3D, xw32, 3, &ca, DIT_F32, "conv32");
  CHECK_EQ_INT(check_op(cg, g, "conv3d bf16 32 channels (implicit GEMM), f32 out", B, 0, 0), (3 * 12 * 10 + 127) / 128);
  /* Strided (downsampling): a per-frame 3x3 after ZeroPad2d((0, 1, 0, 1)) at stride 2 (12x10 ->
   * 6x5) takes the direct kernel on sm_90 too (the Hopper kernel's boxes are unit-stride); with 32
   * channels and strides (2, 2, 2) the implicit GEMM (3 causal frames -> 2, 60 pixels a block). */
  dit_attrs_t da = {0};
  dit_attrs_set_int(&da, "pad_t", 0);
  dit_attrs_set_int(&da, "pad_h", 0);
  dit_attrs_set_int(&da, "pad_w", 0);
  dit_attrs_set_int(&da, "pad_h_after", 1);
  dit_attrs_set_int(&da, "pad_w_after", 1);
  dit_attrs_set_int(&da, "stride_h", 2);
  dit_attrs_set_int(&da, "stride_w", 2);
  const int64_t wd[4] = {24, 3, 3, 16};
  dit_vid_t xwd[3] = {x, dit_graph_weight(g, "down.weight", DIT_BF16, 4, wd), xw[2]};
  dit_graph_op(g, DIT_OP_CONV3D, xwd, 3, &da, DIT_BF16, "down");
  CHECK_EQ_INT(check_op(cg, g, "conv3d bf16 3x3 stride 2 (direct)", B, 0, 0), (3 * 6 * 5 * 24 + B - 1) / B);
  dit_attrs_set_int(&da, "pad_t", 2);
  dit_attrs_set_int(&da, "stride_t", 2);
  dit_vid_t xwd32[3] = {x32, xw32[1], xw32[2]};
  dit_graph_op(g, DIT_OP_CONV3D, xwd32, 3, &da, DIT_BF16, "down32");
  CHECK_EQ_INT(check_op(cg, g, "conv3d bf16 32 channels stride 2 (implicit GEMM)", B, 0, 0), 1);
  dit_attrs_t ua = {0};
  dit_attrs_set_int(&ua, "scale", 2);
  dit_graph_op(g, DIT_OP_UPSAMPLE, &x, 1, &ua, DIT_BF16, "up");
  CHECK_EQ_INT(check_op(cg, g, "upsample bf16 2x", B, 0, 0), (3 * 24 * 20 * 16 + B - 1) / B);
  dit_attrs_t la = {0};
  dit_attrs_set_float(&la, "lo", -1.0);
  dit_attrs_set_float(&la, "hi", 1.0);
  dit_graph_op(g, DIT_OP_CLAMP, &x, 1, &la, DIT_BF16, "clamp");
  CHECK_EQ_INT(check_op(cg, g, "clamp bf16 (8 a thread)", B, 0, 0), (3 * 12 * 10 * 16 / 8 + B - 1) / B);
  const int64_t od[5] = {1, 1, 3, 3, 3};
  dit_vid_t xo = dit_graph_input(g, "xo", DIT_F32, 5, od);
  dit_graph_op(g, DIT_OP_CLAMP, &xo, 1, &la, DIT_F32, "clamp_odd");
  CHECK_EQ_INT(check_op(cg, g, "clamp f32 (27 elements)", B, 0, 0), 1);
  /* groupnorm: a block per (group, batch item), bf16 x with f32 affine parameters and f32 with
   * bf16 out; 4 groups of 4 channels over 3 x 12 x 10 pixels. */
  const int64_t cd[1] = {16};
  dit_attrs_t ga = {0};
  dit_attrs_set_int(&ga, "groups", 4);
  dit_attrs_set_float(&ga, "eps", 1e-6);
  dit_vid_t gx[3] = {x, dit_graph_weight(g, "norm.weight", DIT_F32, 1, cd), dit_graph_weight(g, "norm.bias", DIT_F32, 1, cd)};
  dit_graph_op(g, DIT_OP_GROUPNORM, gx, 3, &ga, DIT_BF16, "groupnorm");
  dit_plan_kernel_t gk;
  CHECK_EQ_INT(check_op_k(cg, g, "groupnorm bf16", B, 0, 0, &gk), 4);
  CHECK_EQ_INT(gk.grid[1], 1);
  const int64_t xfd[3] = {2, 77, 16};
  dit_vid_t gf[3] = {dit_graph_input(g, "xg", DIT_F32, 3, xfd), gx[1], gx[2]};
  dit_graph_op(g, DIT_OP_GROUPNORM, gf, 3, &ga, DIT_BF16, "groupnorm_f32");
  CHECK_EQ_INT(check_op_k(cg, g, "groupnorm f32 tokens, batch 2", B, 0, 0, &gk), 4);
  CHECK_EQ_INT(gk.grid[1], 2);
  /* Its sliced form on the grid (slices, batch): the 360 pixels of x above in 9 slices (the
   * sqrt(P C / 16 G) cap on the merge), f32 tokens, 2048 channels (one row a block step), and 24
   * groups of 2 channels (10 merging threads a group). */
  const int64_t wide[3] = {1, 64, 2048}, odd[3] = {2, 40, 48};
  check_groupnorm_sliced(cg, g, x, 4, 9, 1, "bf16 video");
  check_groupnorm_sliced(cg, g, gf[0], 4, 4, 2, "f32 tokens, batch 2");
  check_groupnorm_sliced(cg, g, dit_graph_input(g, "xw", DIT_BF16, 3, wide), 32, 16, 1, "2048 channels");
  check_groupnorm_sliced(cg, g, dit_graph_input(g, "xo24", DIT_BF16, 3, odd), 24, 2, 2, "24 groups");
  /* FLUX.1's decoder at 1024x1024: its last stage (128 channels, 2^20 pixels) fills the device
   * with 264 slices, the 128x128 mid block (512 channels) stops at the merge cap. */
  const int64_t flux[5] = {1, 1, 1024, 1024, 128};
  check_groupnorm_sliced(cg, g, dit_graph_input(g, "xflux", DIT_BF16, 5, flux), 32, 264, 1, "FLUX.1 1024x1024 last stage");
  CHECK_EQ_INT(dit_cuda_groupnorm_slices(1, 128 * 128, 512, 32), 128);
  CHECK_EQ_INT(dit_cuda_groupnorm_slices(2, 512 * 512, 256, 32), 132);
  /* Shapes the sliced kernels do not take keep the one-kernel form (0 slices), and a sliced op of
   * such a shape is refused by name. */
  CHECK_EQ_INT(dit_cuda_groupnorm_slices(1, 4096, 12, 4), 0);
  CHECK_EQ_INT(dit_cuda_groupnorm_slices(1, 4096, 4096, 32), 0);
  CHECK_EQ_INT(dit_cuda_groupnorm_slices(1, 4096, 1024, 512), 0);
  CHECK_EQ_INT(dit_cuda_groupnorm_slices(70000, 4096, 128, 32), 0);
  const int64_t d12[3] = {1, 30, 12};
  dit_attrs_t sa = {0};
  dit_attrs_set_int(&sa, "groups", 4);
  dit_attrs_set_int(&sa, "slices", 2);
  dit_vid_t x12 = dit_graph_input(g, "x12", DIT_BF16, 3, d12);
  dit_graph_op(g, DIT_OP_GROUPNORM_STATS, &x12, 1, &sa, DIT_F32, "stats12");
  check_refused(cg, g, "op groupnorm_stats 'stats12': batch 1, 12 channels in 4 groups");
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
}

/* The Wan2.1 VAE decoder at 480x832 and 81 frames (latents 21 x 60 x 104, 16 channels; decoder
 * widths 384, 192, 96): every convolution form compiles, the 32-channel multiples on the implicit
 * GEMM (grid: 128-pixel tiles x 128-channel tiles), the latents' 16 on the direct kernel; and the
 * mid block's attention, one head of 384 over each frame's pixels (also 720x1280's 90 x 160). */
static void test_vae_shapes(dit_cuda_codegen_t *cg, const char *target) {
  /* bn, bk: the Hopper kernel's output channels a block and input channels a step. */
  static const struct {
    int64_t f, h, w, cin, cout, kt, kh, pad_t, pad_s;
    int bn, bk;
    const char *what;
  } convs[] = {
      {21, 60, 104, 16, 384, 3, 3, 2, 1, 192, 16, "conv_in"},
      {21, 60, 104, 384, 384, 3, 3, 2, 1, 192, 64, "mid block conv"},
      {20, 60, 104, 384, 384, 3, 1, 2, 0, 192, 64, "time_conv half"},
      {41, 120, 208, 192, 384, 3, 3, 2, 1, 192, 64, "up block 1 first conv"},
      {81, 240, 416, 384, 192, 0, 3, 0, 1, 192, 64, "resample Conv2d"},
      {81, 480, 832, 96, 96, 3, 3, 2, 1, 96, 32, "full-resolution conv"},
      {81, 480, 832, 96, 3, 3, 3, 2, 1, 8, 32, "conv_out"},
  };
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
    const int64_t xd[5] = {1, convs[i].f, convs[i].h, convs[i].w, convs[i].cin}, bd[1] = {convs[i].cout};
    const int64_t w5[5] = {convs[i].cout, convs[i].kt, convs[i].kh, convs[i].kh, convs[i].cin}, w4[4] = {convs[i].cout, 3, 3, convs[i].cin};
    char name[64], what[128];
    snprintf(name, sizeof name, "vae.conv%zu", i);
    dit_vid_t x = dit_graph_input(g, name, DIT_BF16, 5, xd);
    snprintf(name, sizeof name, "vae.conv%zu.weight", i);
    dit_vid_t w = convs[i].kt ? dit_graph_weight(g, name, DIT_BF16, 5, w5) : dit_graph_weight(g, name, DIT_BF16, 4, w4);
    snprintf(name, sizeof name, "vae.conv%zu.bias", i);
    dit_vid_t ins[3] = {x, w, dit_graph_weight(g, name, DIT_BF16, 1, bd)};
    dit_attrs_t a = {0};
    dit_attrs_set_int(&a, "pad_t", convs[i].pad_t);
    dit_attrs_set_int(&a, "pad_h", convs[i].pad_s);
    dit_attrs_set_int(&a, "pad_w", convs[i].pad_s);
    snprintf(name, sizeof name, "vae.conv%zu.out", i);
    dit_graph_op(g, DIT_OP_CONV3D, ins, 3, &a, DIT_BF16, name);
    snprintf(what, sizeof what, "VAE %s %lld -> %lld on %s", convs[i].what, (long long)convs[i].cin, (long long)convs[i].cout, target);
    dit_plan_kernel_t k;
    CHECK_EQ_INT(check_op_k(cg, g, what, 384, conv90_smem(convs[i].bn, convs[i].bk), 1, &k), ((convs[i].w + 15) / 16) * ((convs[i].h + 7) / 8));
    CHECK_EQ_INT(k.grid[1], (convs[i].cout + convs[i].bn - 1) / convs[i].bn);
    CHECK_EQ_INT(k.grid[2], convs[i].f);
    CHECK_EQ_INT(k.tmaps[1].rank, convs[i].kt ? 5 : 4);
    CHECK_EQ_INT(k.tmaps[1].box[k.tmaps[1].rank - 1], convs[i].bn);
  }
  const int64_t frames[2][2] = {{60, 104}, {90, 160}};
  for (int r = 0; r < 2; r++) {
    const int64_t sq = frames[r][0] * frames[r][1];
    dit_vid_t q = in3(g, "vae.q", DIT_BF16, 21, sq, 384), qkv[3] = {q, q, q};
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", 1);
    dit_attrs_set_float(&at, "scale", 0.05103103630798288);
    dit_graph_op(g, DIT_OP_ATTENTION, qkv, 3, &at, DIT_BF16, "vae.attn");
    char what[96];
    snprintf(what, sizeof what, "VAE attention hd 384 over %lld pixels on %s", (long long)sq, target);
    const int bq = 16 * DIT_ABI_ATTN_WARPS_WIDE;
    CHECK_EQ_INT(check_op(cg, g, what, 32 * DIT_ABI_ATTN_WARPS_WIDE, (uint32_t)((bq + 4 * DIT_ABI_ATTN_BK_WIDE) * (384 + 8) * 2), 0),
                 (sq + bq - 1) / bq);
  }
  /* The Wan2.2 VAE's head of 1024 (704x1280: 44 x 80 latent pixels a frame): its output columns
   * in four blocks of 256, each with the whole scores; 1000 is refused (not a multiple of 256). */
  const int64_t sq = 44 * 80;
  dit_vid_t q = in3(g, "vae22.q", DIT_BF16, 31, sq, 1024), qkv[3] = {q, q, q};
  dit_attrs_t at = {0};
  dit_attrs_set_int(&at, "heads", 1);
  dit_attrs_set_float(&at, "scale", 0.03125);
  dit_graph_op(g, DIT_OP_ATTENTION, qkv, 3, &at, DIT_BF16, "vae22.attn");
  const int bq = 16 * DIT_ABI_ATTN_WARPS_WIDE, bk = DIT_ABI_ATTN_BK_WIDE, dv = DIT_ABI_ATTN_SPLIT_DV;
  dit_plan_kernel_t k;
  char what[96];
  snprintf(what, sizeof what, "VAE attention hd 1024 over %lld pixels on %s", (long long)sq, target);
  CHECK_EQ_INT(check_op_k(cg, g, what, 32 * DIT_ABI_ATTN_WARPS_WIDE, (uint32_t)(((bq + 2 * bk) * (1024 + 8) + 2 * bk * (dv + 8)) * 2), 0, &k),
               (sq + bq - 1) / bq);
  CHECK_EQ_INT(k.grid[1], 1024 / dv);
  dit_vid_t r = in3(g, "vae22.r", DIT_BF16, 1, 64, 1000), rrr[3] = {r, r, r};
  dit_graph_op(g, DIT_OP_ATTENTION, rrr, 3, &at, DIT_BF16, "vae22.attn1000");
  check_refused(cg, g, "head dim 1000: expected at most 512, or a multiple of 256 up to 1024");
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
}

/* reshape, concat, rope_table and per-head rmsnorm: each form compiles, with the grid its
 * vector width implies. */
static void test_mmdit_ops(dit_cuda_codegen_t *cg) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const uint32_t B = DIT_ABI_BLOCK;
  /* reshape: the cast kernel between equal types, 8 elements a thread when they divide */
  int64_t md[2] = {2, 6 * 3072};
  dit_vid_t m = dit_graph_input(g, "mod", DIT_BF16, 2, md);
  dit_attrs_t ra = {0};
  dit_attrs_set_int(&ra, "rank", 3);
  dit_attrs_set_int(&ra, "d0", 2);
  dit_attrs_set_int(&ra, "d1", 6);
  dit_attrs_set_int(&ra, "d2", 3072);
  dit_graph_op(g, DIT_OP_RESHAPE, &m, 1, &ra, DIT_BF16, "mod3");
  CHECK_EQ_INT(check_op(cg, g, "reshape bf16", B, 0, 0), (2 * 6 * 3072 / 8 + B - 1) / B);
  dit_vid_t odd = in3(g, "odd", DIT_F32, 1, 3, 7);
  dit_attrs_t r2 = {0};
  dit_attrs_set_int(&r2, "rank", 2);
  dit_attrs_set_int(&r2, "d0", 7);
  dit_attrs_set_int(&r2, "d1", 3);
  dit_graph_op(g, DIT_OP_RESHAPE, &odd, 1, &r2, DIT_F32, "odd2");
  CHECK_EQ_INT(check_op(cg, g, "reshape f32 (21 elements)", B, 0, 0), 1);
  /* concat: joint tokens (dim 1), [attn | mlp] features (dim 2), and an odd split */
  dit_vid_t txt = in3(g, "txt", DIT_BF16, 1, 77, 256), img = in3(g, "img", DIT_BF16, 1, 300, 256), ti[2] = {txt, img};
  dit_attrs_t c1 = {0};
  dit_attrs_set_int(&c1, "dim", 1);
  dit_vid_t joint = dit_graph_op(g, DIT_OP_CONCAT, ti, 2, &c1, DIT_BF16, "joint");
  CHECK_EQ_INT(check_op(cg, g, "concat tokens", B, 0, 0), (377 * 256 / 8 + B - 1) / B);
  dit_vid_t mlp = in3(g, "mlp", DIT_BF16, 1, 377, 1024), jm[2] = {joint, mlp};
  dit_attrs_t c2 = {0};
  dit_attrs_set_int(&c2, "dim", 2);
  dit_graph_op(g, DIT_OP_CONCAT, jm, 2, &c2, DIT_BF16, "feat");
  CHECK_EQ_INT(check_op(cg, g, "concat features", B, 0, 0), (377 * 1280 / 8 + B - 1) / B);
  dit_vid_t a3 = in3(g, "a3", DIT_F32, 2, 5, 3), b3 = in3(g, "b3", DIT_F32, 2, 5, 5), ab[2] = {a3, b3};
  dit_graph_op(g, DIT_OP_CONCAT, ab, 2, &c2, DIT_F32, "odd_feat");
  CHECK_EQ_INT(check_op(cg, g, "concat f32 (rows of 3 and 5)", B, 0, 0), 1);
  /* rope_table: four pairs a thread at head dim 128, one pair at head dim 6 */
  int64_t cd[2] = {377, 128}, cd6[2] = {5, 6};
  dit_vid_t cs = dit_graph_input(g, "cs", DIT_F32, 2, cd), xc[2] = {joint, cs};
  dit_attrs_t h2 = {0};
  dit_attrs_set_int(&h2, "heads", 2);
  dit_graph_op(g, DIT_OP_ROPE_TABLE, xc, 2, &h2, DIT_BF16, "rot");
  CHECK_EQ_INT(check_op(cg, g, "rope_table bf16 hd 128", B, 0, 0), (377 * 256 / 8 + B - 1) / B);
  dit_vid_t x6 = in3(g, "x6", DIT_F32, 2, 5, 12), cs6 = dit_graph_input(g, "cs6", DIT_F32, 2, cd6), xc6[2] = {x6, cs6};
  dit_graph_op(g, DIT_OP_ROPE_TABLE, xc6, 2, &h2, DIT_F32, "rot6");
  CHECK_EQ_INT(check_op(cg, g, "rope_table f32 hd 6", B, 0, 0), (2 * 5 * 12 / 2 + B - 1) / B);
  /* rmsnorm per head: a block a row when a head spans a power of two of lanes (heads of 128 in
   * rows of 3072, of 8 in rows of 24), else each head a row of its own (heads of 512: a block
   * each; heads of 4 in 8-wide vectors and of 6 in odd rows: short rows, 4 and 8 lanes each,
   * 64 and 32 to a block); column 2: the blocks, 3: their threads (rows of 3072: 128, three times; of 512: 64) */
  static const int64_t shapes[][4] = {{3072, 128, 66, 128}, {24, 8, 66, B}, {2048, 512, 66 * 4, 64}, {32, 4, (66 * 8 + 63) / 64, B},
                                      {18, 6, (66 * 3 + 31) / 32, B}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t D = shapes[i][0], G = shapes[i][1];
    dit_vid_t q = in3(g, "q", DIT_BF16, 2, 33, D);
    int64_t wd[1] = {G};
    dit_vid_t w = dit_graph_weight(g, "norm_q.weight", DIT_BF16, 1, wd), qw[2] = {q, w};
    dit_attrs_t na = {0};
    dit_attrs_set_float(&na, "eps", 1e-6);
    dit_attrs_set_int(&na, "group", G);
    dit_graph_op(g, DIT_OP_RMSNORM, qw, 2, &na, DIT_BF16, "qn");
    char what[64];
    snprintf(what, sizeof what, "rmsnorm group %lld of %lld", (long long)G, (long long)D);
    CHECK_EQ_INT(check_op(cg, g, what, (uint32_t)shapes[i][3], 0, 0), shapes[i][2]);
  }
  /* Short rows share a block: a VAE's channel norm over 96 (12 lanes of 8: 16 rows a block) and
   * 384 channels (48 lanes: a block a row), a layernorm of 64 (8 lanes: 32 rows a block). */
  static const int64_t shorts[][3] = {{96, 1000, (1000 + 15) / 16}, {384, 1000, 1000}, {64, 1000, (1000 + 31) / 32}};
  for (size_t i = 0; i < sizeof shorts / sizeof shorts[0]; i++) {
    const int64_t D = shorts[i][0];
    dit_vid_t q = in3(g, "rows", DIT_BF16, 1, shorts[i][1], D);
    int64_t wd[1] = {D};
    dit_vid_t w = dit_graph_weight(g, "gamma", DIT_BF16, 1, wd), qw[2] = {q, w};
    dit_attrs_t na = {0};
    dit_attrs_set_float(&na, "eps", 1e-6);
    dit_graph_op(g, i == 2 ? DIT_OP_LAYERNORM : DIT_OP_RMSNORM, qw, i == 2 ? 1 : 2, &na, DIT_BF16, "short");
    char what[64];
    snprintf(what, sizeof what, "%s of rows of %lld", i == 2 ? "layernorm" : "rmsnorm", (long long)D);
    CHECK_EQ_INT(check_op(cg, g, what, B, 0, 0), shorts[i][2]);
  }
  /* timestep_embed of `t.to(bf16) * 1000` (premul, round) and of Timesteps(scale 1000) */
  int64_t td[1] = {2};
  dit_vid_t tt = dit_graph_input(g, "t", DIT_F32, 1, td);
  for (int pm = 0; pm < 2; pm++) {
    dit_attrs_t ta = {0};
    dit_attrs_set_int(&ta, "dim", 256);
    dit_attrs_set_int(&ta, "flip", 1);
    dit_attrs_set_float(&ta, "shift", 0);
    dit_attrs_set_float(&ta, "max_period", 10000);
    dit_attrs_set_float(&ta, "scale", pm ? 1.0 : 1000.0);
    dit_attrs_set_float(&ta, "premul", pm ? 1000.0 : 1.0);
    dit_attrs_set_int(&ta, "round", 1);
    dit_graph_op(g, DIT_OP_TIMESTEP_EMBED, &tt, 1, &ta, DIT_F32, "temb");
    CHECK_EQ_INT(check_op(cg, g, pm ? "timestep_embed premul 1000, round" : "timestep_embed scale 1000, round", B, 0, 0),
                 (2 * 256 + B - 1) / B);
  }
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
}

/* The last op's module, copied (the code generator keeps only its last one); NULL on failure. */
static char *module_copy(dit_cuda_codegen_t *cg, dit_graph_t *g, size_t *size) {
  int has = 0;
  dit_plan_kernel_t k;
  dit_cuda_module_t m;
  memset(&m, 0, sizeof m);
  dit_status_t s = dit_cuda_codegen_op(cg, g, dit_graph_cop_at(g, dit_graph_num_ops(g) - 1), &has, &k, &m);
  dit_status_free(s);
  if (s || !m.cubin) return NULL;
  char *c = malloc(m.cubin_size);
  if (c) memcpy(c, m.cubin, m.cubin_size);
  *size = m.cubin_size;
  return c;
}

/* Text masks: key_bound on every mask dtype, and attention with a key bound (HAS_BOUND) in the
 * Hopper kernel's forms (head dims 64 and 128, persistent or not) and the portable kernel's; a
 * bounded module differs from the unbounded one of the same shape. */
static void test_mask_ops(dit_cuda_codegen_t *cg, const char *target) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t md[2] = {3, 77};
  dit_attrs_t off = {0};
  dit_attrs_set_int(&off, "offset", 4096);
  dit_vid_t bound = -1;
  for (int dt = 0; dt < DIT_DTYPE_COUNT; dt++) {
    dit_vid_t m = dit_graph_input(g, "mask", (dit_dtype_t)dt, 2, md);
    bound = dit_graph_op(g, DIT_OP_KEY_BOUND, &m, 1, &off, DIT_I32, "bound");
    char what[64];
    snprintf(what, sizeof what, "key_bound of a %s mask on %s", dit_dtype_name((dit_dtype_t)dt), target);
    CHECK_EQ_INT(check_op(cg, g, what, DIT_ABI_BLOCK, 0, 0), 1);
  }
  const int sm90 = !strcmp(target, "sm_90");
  static const int64_t shapes[][2] = {{64, 77}, {128, 77}, {128, 1100}, {96, 300}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t hd = shapes[i][0], lk = shapes[i][1];
    dit_vid_t q = in3(g, "q", DIT_BF16, 3, 300, 2 * hd), kv = in3(g, "kv", DIT_BF16, 3, lk, 2 * hd), ins[4] = {q, kv, kv, bound};
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", 2);
    dit_attrs_set_float(&at, "scale", 0.125);
    dit_graph_op(g, DIT_OP_ATTENTION, ins, 3, &at, DIT_BF16, "att");
    size_t n_plain = 0, n_bounded = 0;
    char *plain = module_copy(cg, g, &n_plain);
    dit_graph_op(g, DIT_OP_ATTENTION, ins, 4, &at, DIT_BF16, "att_bounded");
    char what[80];
    snprintf(what, sizeof what, "bounded attention hd %lld keys %lld on %s", (long long)hd, (long long)lk, target);
    const int hopper = sm90 && hd != 96;
    if (hopper) {
      const int ncw = hd == 64 ? DIT_ABI_ATT90_NCW_HD64 : DIT_ABI_ATT90_NCW_HD128;
      const int st = hd == 64 ? DIT_ABI_ATT90_ST_HD64 : DIT_ABI_ATT90_ST_HD128, nh = (int)hd / 64, bm = 64 * ncw;
      const int persist = hd == 128 && lk <= 1024, bn = hd == 128 && !persist ? 192 : 128; /* 1100 keys: 192 pads 52, 176 pads 132 */
      check_op(cg, g, what, (uint32_t)(128 * (ncw + 1)),
               (uint32_t)(1024 + (persist ? 2 : 1) * nh * bm * 128 + 2 * st * nh * bn * 128 + 8 * (4 + 4 * st)), 1);
    } else {
      check_op(cg, g, what, 32 * DIT_ABI_ATTN_WARPS, (uint32_t)((16 * DIT_ABI_ATTN_WARPS + 4 * DIT_ABI_ATTN_BK) * (hd + 8) * 2), 0);
    }
    char *bounded = module_copy(cg, g, &n_bounded);
    CHECK(plain && bounded && (n_plain != n_bounded || memcmp(plain, bounded, n_plain)));
    free(plain);
    free(bounded);
    if (!sm90 && i == 0) i = 2; /* the portable kernel: hd 64 and 96 are enough */
  }
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
}

/* Sparse attention (HAS_TILES): the Hopper kernel at head dim 128 (persistent and not), the
 * portable kernel otherwise; each compiles, launches one block per query tile (the portable and
 * the non-persistent Hopper forms) and differs from the dense module of the same shape. */
static void test_sparse_ops(dit_cuda_codegen_t *cg, const char *target) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int sm90 = !strcmp(target, "sm_90");
  static const int64_t shapes[][2] = {{128, 320}, {128, 2000}, {64, 320}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t hd = shapes[i][0], S = shapes[i][1], nt = (S + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE, td[2] = {nt, 3};
    dit_vid_t x = in3(g, "x", DIT_BF16, 1, S, 2 * hd), t = dit_graph_input(g, "tiles", DIT_I32, 2, td), ins[4] = {x, x, x, t};
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", 2);
    dit_attrs_set_float(&at, "scale", 0.125);
    dit_graph_op(g, DIT_OP_ATTENTION, ins, 3, &at, DIT_BF16, "att");
    size_t n_dense = 0, n_tiled = 0;
    char *dense = module_copy(cg, g, &n_dense);
    dit_attrs_set_int(&at, "tiles", 1);
    dit_graph_op(g, DIT_OP_ATTENTION, ins, 4, &at, DIT_BF16, "att_tiled");
    char what[80];
    snprintf(what, sizeof what, "tiled attention hd %lld tokens %lld on %s", (long long)hd, (long long)S, target);
    uint32_t grid;
    if (sm90 && hd == 128) {
      const int ncw = DIT_ABI_ATT90_NCW_HD128, st = DIT_ABI_ATT90_ST_HD128, persist = S <= 1024;
      grid = check_op(cg, g, what, (uint32_t)(128 * (ncw + 1)), (uint32_t)(1024 + (persist ? 2 : 1) * 2 * 128 * 128 + 2 * st * 2 * 128 * 128 + 8 * (4 + 4 * st)), 1);
      if (!persist) CHECK_EQ_INT(grid, nt);
    } else {
      grid = check_op(cg, g, what, 32 * DIT_ABI_ATTN_WARPS, (uint32_t)((16 * DIT_ABI_ATTN_WARPS + 4 * DIT_ABI_ATTN_BK) * (hd + 8) * 2), 0);
      CHECK_EQ_INT(grid, nt);
    }
    char *tiled = module_copy(cg, g, &n_tiled);
    CHECK(dense && tiled && (n_dense != n_tiled || memcmp(dense, tiled, n_dense)));
    free(dense);
    free(tiled);
  }
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
}

/* UMT5's ops: the embedding gather (i32 and i64 ids, token rows and position-bias rows), the
 * gated product, and attention with a score bias, with and without a key bound, on the portable
 * kernel on every target (head dim 64 too, which sm_90 would otherwise run on the Hopper kernel);
 * the biased module differs from the plain one. */
static void test_umt5_ops(dit_cuda_codegen_t *cg, const char *target) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const uint32_t B = DIT_ABI_BLOCK;
  int64_t idd[2] = {2, 16}, td[2] = {96, 32}, bd[2] = {16, 16}, rd[2] = {32, 4};
  for (int w = 0; w < 2; w++) {
    dit_vid_t ids = dit_graph_input(g, "ids", w ? DIT_I64 : DIT_I32, 2, idd), tab = dit_graph_input(g, "table", DIT_BF16, 2, td);
    dit_vid_t in[2] = {ids, tab};
    dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, DIT_BF16, "embed");
    CHECK_EQ_INT(check_op(cg, g, w ? "embedding i64 ids" : "embedding i32 ids", B, 0, 0), (2 * 16 * 32 + B - 1) / B);
  }
  dit_vid_t pos = dit_graph_input(g, "buckets", DIT_I32, 2, bd), rel = dit_graph_input(g, "rel", DIT_BF16, 2, rd), pr[2] = {pos, rel};
  dit_vid_t bias = dit_graph_op(g, DIT_OP_EMBEDDING, pr, 2, NULL, DIT_F32, "position_bias");
  CHECK_EQ_INT(check_op(cg, g, "embedding of position buckets", B, 0, 0), (16 * 16 * 4 + B - 1) / B);
  dit_vid_t ga = in3(g, "ga", DIT_BF16, 2, 16, 48), gb = in3(g, "gb", DIT_BF16, 2, 16, 48), gg[2] = {ga, gb};
  dit_graph_op(g, DIT_OP_MUL, gg, 2, NULL, DIT_BF16, "gated");
  CHECK_EQ_INT(check_op(cg, g, "mul", B, 0, 0), (2 * 16 * 48 / 8 + B - 1) / B);
  int64_t md[2] = {2, 16};
  dit_vid_t mask = dit_graph_input(g, "mask", DIT_I32, 2, md);
  dit_attrs_t off = {0};
  dit_attrs_set_int(&off, "offset", 0);
  dit_vid_t bound = dit_graph_op(g, DIT_OP_KEY_BOUND, &mask, 1, &off, DIT_I32, "bound");
  for (int hd = 8; hd <= 64; hd *= 8) {
    int64_t bsd[3] = {16, 16, 4};
    dit_vid_t q = in3(g, "q", DIT_BF16, 2, 16, 4 * hd), kv = in3(g, "kv", DIT_BF16, 2, 16, 4 * hd);
    dit_vid_t bb = hd == 8 ? bias : dit_graph_input(g, "bias64", DIT_F32, 3, bsd);
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", 4);
    dit_attrs_set_float(&at, "scale", 1.0);
    dit_vid_t plain_in[3] = {q, kv, kv};
    dit_graph_op(g, DIT_OP_ATTENTION, plain_in, 3, &at, DIT_BF16, "att");
    size_t n_plain = 0, n_biased = 0;
    char *plain = module_copy(cg, g, &n_plain);
    dit_attrs_set_int(&at, "bias", 1);
    const uint32_t smem = (uint32_t)((16 * DIT_ABI_ATTN_WARPS + 4 * DIT_ABI_ATTN_BK) * ((hd + 15) / 16 * 16 + 8) * 2);
    for (int bounded = 0; bounded < 2; bounded++) {
      dit_vid_t ins[5] = {q, kv, kv, bounded ? bound : bb, bb};
      dit_graph_op(g, DIT_OP_ATTENTION, ins, 4 + bounded, &at, DIT_BF16, "att_biased");
      char what[96];
      snprintf(what, sizeof what, "biased attention hd %d%s on %s", hd, bounded ? " with a bound" : "", target);
      check_op(cg, g, what, 32 * DIT_ABI_ATTN_WARPS, smem, 0);
    }
    char *biased = module_copy(cg, g, &n_biased);
    CHECK(plain && biased && (n_plain != n_biased || memcmp(plain, biased, n_plain)));
    free(plain);
    free(biased);
  }
  /* A bias of the wrong shape is refused by name. */
  dit_vid_t q = in3(g, "q2", DIT_BF16, 2, 16, 32), kv = in3(g, "kv2", DIT_BF16, 2, 12, 32), ins[4] = {q, kv, kv, bias};
  dit_attrs_t at = {0};
  dit_attrs_set_int(&at, "heads", 4);
  dit_attrs_set_float(&at, "scale", 1.0);
  dit_attrs_set_int(&at, "bias", 1);
  CHECK_EQ_INT(dit_graph_op(g, DIT_OP_ATTENTION, ins, 4, &at, DIT_BF16, "att_bad"), -1);
  CHECK(strstr(dit_status_message(dit_graph_status(g)), "bias 'position_bias' is f32 [16,16,4], expected f32 [16,12,4]") != NULL);
  dit_graph_destroy(g);
}

/* Frame-causal attention (attr causal_block) on the portable kernel on every target: head dim 64
 * (which sm_90 would otherwise run on the Hopper kernel) and the VAE's single head of 512 (wide);
 * the causal module differs from the plain one. A block over cross-attention is refused by name. */
static void test_causal_attention_ops(dit_cuda_codegen_t *cg, const char *target) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  static const int hds[2] = {64, 512};
  for (int i = 0; i < 2; i++) {
    const int hd = hds[i], wide = hd > DIT_ABI_ATTN_WIDE_HD, heads = wide ? 1 : 4;
    const int nw = wide ? DIT_ABI_ATTN_WARPS_WIDE : DIT_ABI_ATTN_WARPS, bk = wide ? DIT_ABI_ATTN_BK_WIDE : DIT_ABI_ATTN_BK;
    dit_vid_t q = in3(g, "q", DIT_BF16, 1, 300, heads * hd), kv = in3(g, "kv", DIT_BF16, 1, 300, heads * hd), ins[3] = {q, kv, kv};
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", heads);
    dit_attrs_set_float(&at, "scale", 0.125);
    dit_graph_op(g, DIT_OP_ATTENTION, ins, 3, &at, DIT_BF16, "att");
    size_t n_plain = 0, n_causal = 0;
    char *plain = module_copy(cg, g, &n_plain);
    dit_attrs_set_int(&at, "causal_block", 48);
    dit_graph_op(g, DIT_OP_ATTENTION, ins, 3, &at, DIT_BF16, "att_causal");
    char what[96];
    snprintf(what, sizeof what, "causal attention hd %d on %s", hd, target);
    const uint32_t smem = (uint32_t)((16 * nw + 2 * bk) * (hd + 8) * 2 + 2 * bk * (hd + 8) * 2);
    CHECK_EQ_INT(check_op(cg, g, what, 32 * nw, smem, 0), (300 + 16 * nw - 1) / (16 * nw));
    char *causal = module_copy(cg, g, &n_causal);
    CHECK(plain && causal && (n_plain != n_causal || memcmp(plain, causal, n_plain)));
    free(plain);
    free(causal);
  }
  dit_vid_t q = in3(g, "q2", DIT_BF16, 1, 16, 32), kv = in3(g, "kv2", DIT_BF16, 1, 12, 32), ins[3] = {q, kv, kv};
  dit_attrs_t at = {0};
  dit_attrs_set_int(&at, "heads", 1);
  dit_attrs_set_float(&at, "scale", 1.0);
  dit_attrs_set_int(&at, "causal_block", 4);
  CHECK_EQ_INT(dit_graph_op(g, DIT_OP_ATTENTION, ins, 3, &at, DIT_BF16, "att_bad"), -1);
  CHECK(strstr(dit_status_message(dit_graph_status(g)), "causal_block = 4 needs self-attention") != NULL);
  dit_graph_destroy(g);
}

/* CLIP's ops: quick_gelu (8 elements a thread when the count allows, f32 and bf16), token_select
 * (one thread an output element, i32 and i64 ids, both pooling rules), and the causal score bias
 * at CLIP-L's 77 tokens and 12 heads of 64 on the portable kernel on every target. */
static void test_clip_ops(dit_cuda_codegen_t *cg, const char *target) {
  const uint32_t B = DIT_ABI_BLOCK;
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  dit_vid_t x = in3(g, "x", DIT_BF16, 2, 77, 3072), xo = in3(g, "xo", DIT_F32, 1, 3, 7);
  dit_graph_op(g, DIT_OP_QUICK_GELU, &x, 1, NULL, DIT_BF16, "quick_gelu");
  CHECK_EQ_INT(check_op(cg, g, "quick_gelu bf16 (8 a thread)", B, 0, 0), (2 * 77 * 3072 / 8 + B - 1) / B);
  dit_graph_op(g, DIT_OP_QUICK_GELU, &xo, 1, NULL, DIT_F32, "quick_gelu_odd");
  CHECK_EQ_INT(check_op(cg, g, "quick_gelu f32 (21 elements)", B, 0, 0), 1);
  const int64_t idd[2] = {2, 77};
  dit_vid_t h = in3(g, "h", DIT_BF16, 2, 77, 768);
  for (int w = 0; w < 4; w++) {
    dit_vid_t in[2] = {h, dit_graph_input(g, "ids", w & 1 ? DIT_I64 : DIT_I32, 2, idd)};
    dit_attrs_t ea = {0};
    dit_attrs_set_int(&ea, "eos", w < 2 ? -1 : 49407);
    dit_graph_op(g, DIT_OP_TOKEN_SELECT, in, 2, &ea, DIT_BF16, "pooled");
    char what[64];
    snprintf(what, sizeof what, "token_select %s ids, eos %s", w & 1 ? "i64" : "i32", w < 2 ? "-1" : "49407");
    CHECK_EQ_INT(check_op(cg, g, what, B, 0, 0), (2 * 768 + B - 1) / B);
  }
  const int64_t cd[3] = {77, 77, 12};
  dit_vid_t q = in3(g, "q", DIT_BF16, 2, 77, 768), mask = dit_graph_input(g, "causal", DIT_F32, 3, cd), ins[4] = {q, q, q, mask};
  dit_attrs_t at = {0};
  dit_attrs_set_int(&at, "heads", 12);
  dit_attrs_set_float(&at, "scale", 0.125);
  dit_attrs_set_int(&at, "bias", 1);
  dit_graph_op(g, DIT_OP_ATTENTION, ins, 4, &at, DIT_BF16, "causal_sdpa");
  char what[64];
  snprintf(what, sizeof what, "causal attention 12 heads of 64 on %s", target);
  CHECK_EQ_INT(check_op(cg, g, what, 32 * DIT_ABI_ATTN_WARPS, (uint32_t)((16 * DIT_ABI_ATTN_WARPS + 4 * DIT_ABI_ATTN_BK) * (64 + 8) * 2), 0),
               (77 + 16 * DIT_ABI_ATTN_WARPS - 1) / (16 * DIT_ABI_ATTN_WARPS));
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
}

/* The fp8 attention's dynamic shared memory as the kernel lays it out: alignment slack, Q (bm rows
 * of 128 bytes), st stages of K and V^T (bn keys of 128 bytes each) with V^T's rows of ones, and
 * the mbarriers. */
static uint32_t att90_fp8_smem_hd(int hd, int bm, int bn, int st) {
  return (uint32_t)(1024 + bm * hd + st * (2 * bn * hd + DIT_ABI_ATT90_FP8_ONES_ROWS * bn) + 8 * (4 + 4 * st));
}
static uint32_t att90_fp8_smem(int bm, int bn, int st) { return att90_fp8_smem_hd(128, bm, bn, st); }

static void test_codegen_ops(const char *target, const char *cache) {
  dit_cuda_codegen_t *cg = NULL;
  dit_status_t s = dit_cuda_codegen_create(target, cache, &cg);
#if !DIT_HAVE_NVRTC
  CHECK(s != DIT_OK);
  dit_status_free(s);
  return;
#endif
  CHECK_OK(s);
  if (!cg) return;
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  dit_vid_t x = in3(g, "x", DIT_BF16, 2, 100, 64);
  dit_graph_op(g, DIT_OP_SILU, &x, 1, NULL, DIT_BF16, "silu");
  check_op(cg, g, "silu", DIT_ABI_BLOCK, 0, 0);
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", 1e-6);
  dit_graph_op(g, DIT_OP_LAYERNORM, &x, 1, &a, DIT_BF16, "ln");
  check_op(cg, g, "layernorm", DIT_ABI_BLOCK, 0, 0);
  int64_t wd[1] = {64}, ld[2] = {32, 64};
  dit_vid_t w = dit_graph_weight(g, "w", DIT_BF16, 1, wd), rw[2] = {x, w};
  dit_graph_op(g, DIT_OP_RMSNORM, rw, 2, &a, DIT_F32, "rms");
  check_op(cg, g, "rmsnorm", DIT_ABI_BLOCK, 0, 0);
  dit_vid_t small = in3(g, "small", DIT_BF16, 1, 3, 64), lw = dit_graph_weight(g, "lw", DIT_BF16, 2, ld), li[2] = {small, lw};
  dit_attrs_t act = {0};
  dit_attrs_set_int(&act, "act", 1);
  dit_graph_op(g, DIT_OP_LINEAR, li, 2, &act, DIT_BF16, "lin");
  /* a warp a row of w for all 3 rows of x: 32 warps */
  CHECK_EQ_INT(check_op(cg, g, "linear (small, gelu)", DIT_ABI_BLOCK, 0, 0), 32 * 32 / DIT_ABI_BLOCK);
  { /* 10 rows of x: two chunks of up to 8 (80 warps); K of 24 in 16-byte vectors, K of 20 by elements */
    for (int64_t kk = 24; kk >= 20; kk -= 4) {
      int64_t wd2[2] = {40, kk};
      dit_vid_t x10 = in3(g, kk == 24 ? "x10" : "x10s", DIT_BF16, 2, 5, kk), w10 = dit_graph_weight(g, kk == 24 ? "w10" : "w10s", DIT_BF16, 2, wd2);
      dit_vid_t xi[2] = {x10, w10};
      dit_graph_op(g, DIT_OP_LINEAR, xi, 2, NULL, DIT_BF16, kk == 24 ? "lin10" : "lin10s");
      CHECK_EQ_INT(check_op(cg, g, kk == 24 ? "linear (small, 10 rows)" : "linear (small, K 20)", DIT_ABI_BLOCK, 0, 0), 80 * 32 / DIT_ABI_BLOCK);
    }
  }
  /* The small kernel with an accumulated input (acc: a bias and then c [1, 3, 32]). */
  {
    int64_t bd[1] = {32};
    dit_attrs_t acc = {0};
    dit_attrs_set_int(&acc, "acc", 1);
    dit_vid_t c = in3(g, "c", DIT_BF16, 1, 3, 32), la[4] = {small, lw, dit_graph_weight(g, "lb", DIT_F32, 1, bd), c};
    dit_graph_op(g, DIT_OP_LINEAR, la, 4, &acc, DIT_BF16, "lin_acc");
    check_op(cg, g, "linear (small, bias and acc)", DIT_ABI_BLOCK, 0, 0);
  }
  dit_attrs_set_int(&act, "act", 7);
  dit_graph_op(g, DIT_OP_LINEAR, li, 2, &act, DIT_BF16, "lin7");
  check_refused(cg, g, "activation 7");
  /* fp8 linears: their rows' quantizer, attn_quant with heads 1 and rows 1, one warp a row of x
   * ([2, 100, 64]: 200 rows); the same folded into a layernorm (a block a row, codes and row
   * scales out); linear_fp8 over the codes, a cuBLASLt GEMM (no kernel); N not a multiple of 16
   * refused. */
  {
    const dit_dtype_t qdt[2] = {DIT_F8E4M3, DIT_F32};
    dit_attrs_t ra = {0}, lq = {0};
    dit_attrs_set_int(&ra, "heads", 1), dit_attrs_set_int(&ra, "rows", 1);
    dit_vid_t xr[2], lr[2];
    CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &x, 1, &ra, qdt, "x_rows8", xr));
    CHECK_EQ_INT(check_op(cg, g, "attn_quant (token rows)", DIT_ABI_BLOCK, 0, 0), (200 + DIT_ABI_BLOCK / 32 - 1) / (DIT_ABI_BLOCK / 32));
    /* The same over gelu(x + bias): a linear's epilogue moved into its rows' quantizer. */
    {
      const int64_t xbd[1] = {64};
      dit_attrs_t rga = {0};
      dit_attrs_set_int(&rga, "heads", 1), dit_attrs_set_int(&rga, "rows", 1), dit_attrs_set_int(&rga, "act", 1);
      dit_vid_t xg[2], xgi[2] = {x, dit_graph_weight(g, "x_bias", DIT_BF16, 1, xbd)};
      CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, xgi, 2, &rga, qdt, "x_gelu_rows8", xg));
      CHECK_EQ_INT(check_op(cg, g, "attn_quant (token rows of gelu(x + bias))", DIT_ABI_BLOCK, 0, 0),
                   (200 + DIT_ABI_BLOCK / 32 - 1) / (DIT_ABI_BLOCK / 32));
    }
    dit_attrs_set_float(&lq, "eps", 1e-6), dit_attrs_set_int(&lq, "quant", 1);
    CHECK_OK(dit_graph_op2(g, DIT_OP_LAYERNORM, &x, 1, &lq, qdt, "ln_rows8", lr));
    CHECK_EQ_INT(dit_graph_cvalue(g, lr[1])->rank, 3);
    CHECK_EQ_INT(dit_graph_cvalue(g, lr[1])->dims[2], 100);
    CHECK_EQ_INT(check_op(cg, g, "layernorm with the row quantizer", DIT_ABI_BLOCK, 0, 0), 200);
    /* Token rows of 1536 (192 lanes of 8): a warp a row, 8 rows a block, with and without the
     * quantizer; rows of 8192 (32 chunks a lane) keep a block a row. */
    dit_vid_t wide = in3(g, "wide", DIT_BF16, 2, 33, 1536), wr[2], huge = in3(g, "huge", DIT_BF16, 1, 5, 8192);
    dit_graph_op(g, DIT_OP_LAYERNORM, &wide, 1, &a, DIT_BF16, "ln_wide");
    CHECK_EQ_INT(check_op(cg, g, "layernorm of 1536", DIT_ABI_BLOCK, 0, 0), (66 + 7) / 8);
    CHECK_OK(dit_graph_op2(g, DIT_OP_LAYERNORM, &wide, 1, &lq, qdt, "ln_wide8", wr));
    CHECK_EQ_INT(check_op(cg, g, "layernorm of 1536 with the row quantizer", DIT_ABI_BLOCK, 0, 0), (66 + 7) / 8);
    dit_graph_op(g, DIT_OP_LAYERNORM, &huge, 1, &a, DIT_BF16, "ln_huge");
    CHECK_EQ_INT(check_op(cg, g, "layernorm of 8192", DIT_ABI_BLOCK, 0, 0), 5);
    int64_t w8d[2] = {48, 64}, nd[1] = {48};
    dit_vid_t w8 = dit_graph_weight(g, "w8", DIT_F8E4M3, 2, w8d), ws = dit_graph_weight(g, "w8.scale", DIT_F32, 1, nd),
              b8 = dit_graph_weight(g, "b8", DIT_BF16, 1, nd), l8[5] = {xr[0], xr[1], w8, ws, b8};
    dit_attrs_set_int(&act, "act", 1);
    dit_graph_op(g, DIT_OP_LINEAR_FP8, l8, 5, &act, DIT_BF16, "lin8");
    {
      int has = 1;
      dit_plan_kernel_t k;
      dit_cuda_module_t m;
      memset(&m, 0, sizeof m);
      CHECK_OK(dit_cuda_codegen_op(cg, g, dit_graph_cop_at(g, dit_graph_num_ops(g) - 1), &has, &k, &m));
      CHECK_EQ_INT(has, 0);
    }
    int64_t odd[2] = {40, 64}, od[1] = {40};
    dit_vid_t wo = dit_graph_weight(g, "wo", DIT_F8E4M3, 2, odd), so = dit_graph_weight(g, "wo.scale", DIT_F32, 1, od),
              lo[4] = {lr[0], lr[1], wo, so};
    dit_graph_op(g, DIT_OP_LINEAR_FP8, lo, 4, NULL, DIT_BF16, "lin8_odd");
    check_refused(cg, g, "op linear_fp8 'lin8_odd': K = 64 and N = 40 must be multiples of 16");
  }
  /* FP8 attention's operands ([2, 200, 2 x 128]): attn_quant one block a (b, h, row block) (q:
   * 64 rows, 4 blocks; k: 128 rows, 2), attn_vmax one a (b, h, 32 channels, split) (3 splits of 67
   * keys: 2 x 2 x 4 x 3), attn_quant_vt one a (b, h, 128-key column tile) (2 tiles, the second
   * partial: 2 x 2 x 2); attention_fp8 the Hopper kernel's fp8 form on sm_90, refused on
   * other targets. */
  {
    const dit_vid_t xq = in3(g, "xq", DIT_BF16, 2, 200, 256);
    const dit_dtype_t qdt[2] = {DIT_F8E4M3, DIT_F32};
    dit_vid_t q8[2], k8[2], v8[2], o[2];
    dit_attrs_t qa = {0}, ka = {0}, va = {0}, ma = {0}, fa = {0};
    dit_attrs_set_int(&qa, "heads", 2), dit_attrs_set_int(&qa, "rows", 64);
    dit_attrs_set_int(&ka, "heads", 2), dit_attrs_set_int(&ka, "rows", 128);
    dit_attrs_set_int(&va, "heads", 2);
    dit_attrs_set_int(&ma, "heads", 2), dit_attrs_set_int(&ma, "splits", 3);
    dit_attrs_set_int(&fa, "heads", 2), dit_attrs_set_float(&fa, "scale", 0.088);
    CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xq, 1, &qa, qdt, "xq8", q8));
    CHECK_EQ_INT(check_op(cg, g, "attn_quant (q)", DIT_ABI_BLOCK, 0, 0), 16);
    CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xq, 1, &ka, qdt, "xk8", k8));
    CHECK_EQ_INT(check_op(cg, g, "attn_quant (k)", DIT_ABI_BLOCK, 0, 0), 8);
    const dit_vid_t vin[2] = {xq, dit_graph_op(g, DIT_OP_ATTN_VMAX, &xq, 1, &ma, DIT_F32, "xvmax")};
    CHECK_EQ_INT(check_op(cg, g, "attn_vmax", DIT_ABI_BLOCK, 0, 0), 48);
    CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT_VT, vin, 2, &va, qdt, "xvt8", v8));
    CHECK_EQ_INT(check_op(cg, g, "attn_quant_vt", DIT_ABI_BLOCK, 0, 0), 8);
    { /* a thread a channel's statistics: one head of 512 channels is refused, its maxima still built */
      const dit_vid_t xw = in3(g, "xw", DIT_BF16, 1, 200, 512);
      dit_attrs_t wa = {0}, wm = {0};
      dit_attrs_set_int(&wa, "heads", 1);
      dit_attrs_set_int(&wm, "heads", 1), dit_attrs_set_int(&wm, "splits", 2);
      dit_vid_t w8[2];
      const dit_vid_t win[2] = {xw, dit_graph_op(g, DIT_OP_ATTN_VMAX, &xw, 1, &wm, DIT_F32, "xwvmax")};
      CHECK_EQ_INT(check_op(cg, g, "attn_vmax (512 channels)", DIT_ABI_BLOCK, 0, 0), 32);
      CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT_VT, win, 2, &wa, qdt, "xwvt8", w8));
      check_refused(cg, g, "op attn_quant_vt 'xwvt8': head dim 512 exceeds the kernel's 256");
    }
    const dit_vid_t fi[6] = {q8[0], q8[1], k8[0], k8[1], v8[0], v8[1]};
    const dit_dtype_t odt[2] = {DIT_BF16, DIT_F32};
    CHECK_OK(dit_graph_op2(g, DIT_OP_ATTENTION_FP8, fi, 6, &fa, odt, "attn8", o));
    if (!strcmp(target, "sm_90")) { /* the Hopper kernel's fp8 form: ceil(200 / bm) work tiles a (head, item);
                                      * each V^T stage with its rows of ones */
      const int ncw = DIT_ABI_ATT90_NCW_HD128, st = DIT_ABI_ATT90_ST_FP8, bm = 64 * ncw;
      CHECK_EQ_INT(check_op(cg, g, "attention_fp8", (uint32_t)(128 * (ncw + 1)),
                            att90_fp8_smem(bm, 128, st), 1),
                   (200 + bm - 1) / bm);
      /* key tiles of 192 (k's scales a tile): fewer, wider stages, V^T in blocks of 64 keys with
       * their rows of ones; 160 is built too, 100 refused */
      dit_attrs_set_int(&ka, "rows", 192);
      CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xq, 1, &ka, qdt, "xk8w", k8));
      const dit_vid_t fw[6] = {q8[0], q8[1], k8[0], k8[1], v8[0], v8[1]};
      dit_attrs_set_int(&fa, "key_tile", 192);
      CHECK_OK(dit_graph_op2(g, DIT_OP_ATTENTION_FP8, fw, 6, &fa, odt, "attn8w", o));
      const int sw = DIT_ABI_ATT90_ST_FP8_WIDE;
      CHECK_EQ_INT(check_op(cg, g, "attention_fp8 (192 keys a tile)", (uint32_t)(128 * (ncw + 1)),
                            att90_fp8_smem(bm, 192, sw), 1),
                   (200 + bm - 1) / bm);
      { /* 1100 keys, 6 key tiles of 192: where the bf16 form splits its last wave's 8 work tiles in 3
         * parts (a 1-D grid of 24), the fp8 form keeps its grid of whole tiles (2 a head and item) */
        const dit_vid_t xl = in3(g, "xl", DIT_BF16, 2, 1100, 256);
        dit_vid_t l8[2], lv8[2];
        CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xl, 1, &ka, qdt, "xl8", l8));
        const dit_vid_t lvin[2] = {xl, dit_graph_op(g, DIT_OP_ATTN_VMAX, &xl, 1, &ma, DIT_F32, "xlvmax")};
        CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT_VT, lvin, 2, &va, qdt, "xlvt8", lv8));
        const dit_vid_t fl[6] = {q8[0], q8[1], l8[0], l8[1], lv8[0], lv8[1]};
        CHECK_OK(dit_graph_op2(g, DIT_OP_ATTENTION_FP8, fl, 6, &fa, odt, "attn8l", o));
        dit_plan_kernel_t lk;
        check_op_k(cg, g, "attention_fp8 (1100 keys)", (uint32_t)(128 * (ncw + 1)),
                   att90_fp8_smem(bm, 192, sw), 1, &lk);
        CHECK_EQ_INT(lk.grid[0], (200 + bm - 1) / bm);
        CHECK_EQ_INT(lk.grid[1], 2);
        CHECK_EQ_INT(lk.grid[2], 2);
      }
      { /* key tiles of 224 (a plan may carry them; ditc's own choice is 192): the same three
         * stages, V^T in blocks of 32 keys (a box and swizzle of 32 bytes) with their rows of ones */
        dit_vid_t k224[2];
        dit_attrs_set_int(&ka, "rows", 224);
        CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xq, 1, &ka, qdt, "xk8x", k224));
        const dit_vid_t fx[6] = {q8[0], q8[1], k224[0], k224[1], v8[0], v8[1]};
        dit_attrs_set_int(&fa, "key_tile", 224);
        CHECK_OK(dit_graph_op2(g, DIT_OP_ATTENTION_FP8, fx, 6, &fa, odt, "attn8x", o));
        dit_plan_kernel_t xk;
        check_op_k(cg, g, "attention_fp8 (224 keys a tile)", (uint32_t)(128 * (ncw + 1)),
                   att90_fp8_smem(bm, 224, sw), 1, &xk);
        CHECK_EQ_INT(xk.tmaps[2].box[0], 32);
        CHECK_EQ_INT(xk.tmaps[2].box[1], 128);
        CHECK_EQ_INT(xk.tmaps[2].swizzle, 32);
        CHECK_EQ_INT(xk.tmaps[1].box[1], 224);
      }
      { /* head dim 64 (two heads of 64 in 128 channels): the same two consumer warpgroups, Q and K
         * tiles of 64-byte rows in the 64-byte swizzle, V^T tiles of 64 rows; key tiles of 128 (P
         * V^T as 64 x 72 with the sums) and of 192 (in place, the sums apart) */
        const dit_vid_t xh = in3(g, "xh", DIT_BF16, 2, 200, 128);
        dit_vid_t h8[2], hk8[2], hv8[2];
        CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xh, 1, &qa, qdt, "xh8", h8));
        const dit_vid_t hvin[2] = {xh, dit_graph_op(g, DIT_OP_ATTN_VMAX, &xh, 1, &ma, DIT_F32, "xhvmax")};
        CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT_VT, hvin, 2, &va, qdt, "xhvt8", hv8));
        for (int bn = 128; bn <= 192; bn += 64) {
          char name[32];
          dit_attrs_set_int(&ka, "rows", bn), dit_attrs_set_int(&fa, "key_tile", bn);
          snprintf(name, sizeof name, "xhk8_%d", bn);
          CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xh, 1, &ka, qdt, name, hk8));
          const dit_vid_t fh[6] = {h8[0], h8[1], hk8[0], hk8[1], hv8[0], hv8[1]};
          snprintf(name, sizeof name, "attn8h_%d", bn);
          CHECK_OK(dit_graph_op2(g, DIT_OP_ATTENTION_FP8, fh, 6, &fa, odt, name, o));
          dit_plan_kernel_t hk;
          check_op_k(cg, g, bn == 128 ? "attention_fp8 (head dim 64)" : "attention_fp8 (head dim 64, 192 keys a tile)",
                     (uint32_t)(128 * (ncw + 1)), att90_fp8_smem_hd(64, bm, bn, bn == 128 ? st : sw), 1, &hk);
          CHECK_EQ_INT(hk.grid[0], (200 + bm - 1) / bm);
          CHECK_EQ_INT(hk.tmaps[0].box[0], 64);
          CHECK_EQ_INT(hk.tmaps[0].swizzle, 64);
          CHECK_EQ_INT(hk.tmaps[1].box[0], 64);
          CHECK_EQ_INT(hk.tmaps[1].box[1], bn);
          CHECK_EQ_INT(hk.tmaps[1].swizzle, 64);
          CHECK_EQ_INT(hk.tmaps[2].box[1], 64);
        }
      }
      dit_attrs_set_int(&ka, "rows", 96), dit_attrs_set_int(&fa, "key_tile", 96);
      CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xq, 1, &ka, qdt, "xk8n", k8));
      const dit_vid_t fn[6] = {q8[0], q8[1], k8[0], k8[1], v8[0], v8[1]};
      CHECK_OK(dit_graph_op2(g, DIT_OP_ATTENTION_FP8, fn, 6, &fa, odt, "attn8n", o));
      check_refused(cg, g, "op attention_fp8 'attn8n': key_tile 96, the sm_90a kernel takes 128, 160, 192 or 224");
    } else {
      check_refused(cg, g, "op attention_fp8 'attn8': the sm_90a kernel takes head dim 64 or 128 and a bf16 output (found sm_");
    }
  }
  /* Attention: at head dims 64 and 128 on sm_90 the Hopper kernel, else the portable one. */
  const int sm90 = !strcmp(target, "sm_90");
  for (int hd = 64; hd <= 128; hd += 64) {
    for (int64_t lk = 77; lk <= 1100; lk += 1023) {
      dit_vid_t q = in3(g, "q", DIT_BF16, 2, 300, 2 * hd), kv = in3(g, "kv", DIT_BF16, 2, lk, 2 * hd), qkv[3] = {q, kv, kv};
      dit_attrs_t at = {0};
      dit_attrs_set_int(&at, "heads", 2);
      dit_attrs_set_float(&at, "scale", 0.125);
      dit_graph_op(g, DIT_OP_ATTENTION, qkv, 3, &at, DIT_BF16, "att");
      char what[64];
      snprintf(what, sizeof what, "attention hd %d keys %lld on %s", hd, (long long)lk, target);
      if (sm90) {
        const int ncw = hd == 64 ? DIT_ABI_ATT90_NCW_HD64 : DIT_ABI_ATT90_NCW_HD128;
        const int st = hd == 64 ? DIT_ABI_ATT90_ST_HD64 : DIT_ABI_ATT90_ST_HD128, nh = hd / 64, bm = 64 * ncw;
        const int persist = hd == 128 && lk <= 1024, bn = hd == 128 && !persist ? 192 : 128; /* 1100 keys: 192 pads 52 */
        const uint32_t grid = check_op(cg, g, what, (uint32_t)(128 * (ncw + 1)),
                                       (uint32_t)(1024 + (persist ? 2 : 1) * nh * bm * 128 + 2 * st * nh * bn * 128 + 8 * (4 + 4 * st)), 1);
        /* 1100 keys: every work tile split (hd 128: 12 tiles, 6 key tiles, 3 parts; hd 64: 8 tiles
         * of 192 queries, 9 key tiles, 4 parts) on a 1-D grid; 77 keys: one key tile, no split (hd
         * 128: the persistent grid of all 12 tiles). */
        CHECK_EQ_INT(grid, lk == 77 ? (hd == 64 ? 2u : 12u) : hd == 128 ? 12u * 3u : 8u * 4u);
      } else {
        check_op(cg, g, what, 32 * DIT_ABI_ATTN_WARPS, (uint32_t)((16 * DIT_ABI_ATTN_WARPS + 4 * DIT_ABI_ATTN_BK) * (hd + 8) * 2), 0);
      }
      if (!sm90) break; /* one shape is enough for the portable kernel */
    }
  }
  /* Wide heads: 512 compiles (with the row remainder of 300 queries); past 512, and where the
   * shared memory a head dim needs exceeds the target's (256 on sm_80), the code generator refuses. */
  for (int hd = 512; hd <= 520; hd += 8) {
    dit_vid_t q = in3(g, "qw", DIT_BF16, 2, 300, hd), qkv[3] = {q, q, q};
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", 1);
    dit_attrs_set_float(&at, "scale", 0.125);
    dit_graph_op(g, DIT_OP_ATTENTION, qkv, 3, &at, DIT_BF16, "att_wide");
    if (hd == 512) {
      const int bq = 16 * DIT_ABI_ATTN_WARPS_WIDE;
      CHECK_EQ_INT(check_op(cg, g, "attention hd 512", 32 * DIT_ABI_ATTN_WARPS_WIDE, (uint32_t)((bq + 4 * DIT_ABI_ATTN_BK_WIDE) * (512 + 8) * 2), 0),
                   (300 + bq - 1) / bq);
    } else {
      check_refused(cg, g, "op attention 'att_wide': head dim 520: expected at most 512, or a multiple of 256 up to 1024");
    }
  }
  if (!sm90) {
    dit_vid_t q = in3(g, "q256", DIT_BF16, 2, 300, 256), qkv[3] = {q, q, q};
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", 1);
    dit_attrs_set_float(&at, "scale", 0.125);
    dit_graph_op(g, DIT_OP_ATTENTION, qkv, 3, &at, DIT_BF16, "att256");
    check_refused(cg, g, "op attention 'att256': head dim 256 needs 202752 bytes of shared memory, sm_80 allows 166912");
  }
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
  test_mmdit_ops(cg);
  test_norm_rope_ops(cg);
  test_video_ops(cg, sm90);
  if (sm90) test_vae_shapes(cg, target);
  test_mask_ops(cg, target);
  test_sparse_ops(cg, target);
  test_umt5_ops(cg, target);
  test_causal_attention_ops(cg, target);
  test_clip_ops(cg, target);
  dit_cuda_codegen_destroy(cg);
}

/* The Hopper attention's keys per tile: the bf16 form at head dim 128 over long keys takes 176 or
 * 192, whichever pads the keys less (176 on a tie); every other form keeps the ABI's 128. */
static void test_att90_keys_per_tile(void) {
  static const int64_t lk_bn[][2] = {{27280, 176}, {75600, 192}, {32760, 192}, {4608, 192}, {1100, 192}, {3168, 176}, {1056, 176}};
  for (size_t i = 0; i < sizeof lk_bn / sizeof lk_bn[0]; i++) CHECK_EQ_INT(dit_cuda_att90_keys_per_tile(128, lk_bn[i][0], 0, 0, 0), lk_bn[i][1]);
  CHECK_EQ_INT(dit_cuda_att90_keys_per_tile(64, 27280, 0, 0, 0), DIT_ABI_ATT90_BN);
  CHECK_EQ_INT(dit_cuda_att90_keys_per_tile(128, 27280, 1, 0, 0), DIT_ABI_ATT90_BN);
  CHECK_EQ_INT(dit_cuda_att90_keys_per_tile(128, 27280, 0, 1, 0), DIT_ABI_ATT90_BN);
  CHECK_EQ_INT(dit_cuda_att90_keys_per_tile(128, 512, 0, 0, 1), DIT_ABI_ATT90_BN);
  /* attention_fp8's: 192 with e4m3 P V^T, 128 with a tile schedule or bf16 P V */
  CHECK_EQ_INT(dit_cuda_att90_fp8_key_tile(1, 0, 1), 256);
  CHECK_EQ_INT(dit_cuda_att90_fp8_key_tile(1, 0, 0), 192);
  CHECK_EQ_INT(dit_cuda_att90_fp8_key_tile(1, 1, 1), DIT_ABI_ATT90_BN);
  CHECK_EQ_INT(dit_cuda_att90_fp8_key_tile(0, 0, 0), DIT_ABI_ATT90_BN);
}

/* The Hopper attention's tail split: the last partial wave's tiles (tiles % 132) split into the
 * key parts that shorten it most, each part two key tiles or more; none when the wave is full,
 * nearly full, or the keys are few. The fp8 form's (192 keys a tile) only where the split saves
 * 1.5% of the launch with parts of 32 key tiles or more: Wan2.1-1.3B 480p at batch 1 alone of
 * bench/attention's shapes. */
static void test_att90_split(void) {
  /* tiles, key tiles, fp8, parts, tail: Wan2.1-1.3B 480p, FLUX.1 1024^2, TI2V-5B 704p, A14B 720p, ...; then
   * the fp8 form at 1x12x32760, 2x12x32760, 1x40x75600 and 1x24x4608 */
  static const int64_t cases[][5] = {{3072, 187, 0, 3, 36}, {864, 24, 0, 3, 72}, {5136, 155, 0, 1, 0}, {23640, 394, 0, 4, 12},
                                     {264, 50, 0, 1, 0},    {20, 8, 0, 4, 20},   {20, 3, 0, 1, 0},     {36, 5, 0, 2, 36},
                                     {3072, 171, 1, 3, 36}, {6144, 171, 1, 1, 0}, {23640, 394, 1, 1, 0}, {864, 24, 1, 1, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t tail = -1;
    CHECK_EQ_INT(dit_cuda_att90_split(cases[i][0], cases[i][1], 132, (int)cases[i][2], &tail), cases[i][3]);
    CHECK_EQ_INT(tail, cases[i][4]);
  }
}

int main(void) {
  test_macros_match_table();
  test_att90_keys_per_tile();
  test_att90_split();
  test_nvrtc_text_matches_table();
  test_device_helpers_shared();
#if DIT_HAVE_NVRTC
  test_nvrtc_sees_table();
  test_kernel_checks_launch();
#endif
  const char *tmp = check_tmpdir("codegen_cuda");
  test_codegen_ops("sm_80", tmp);
  test_codegen_ops("sm_90", tmp);
  return check_summary("test_codegen_cuda");
}
