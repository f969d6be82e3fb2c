/* attn_bench: correctness and speed of the sm_90a attention kernel (compiler/kernels/dit_attn_sm90.cu)
 * and of the portable one (the DIT_K_ATTENTION section of compiler/kernels/dit_kernels.cu).
 *
 *   attn_bench [--repo DIR] [--cache DIR] [--compile-only] [--iters N] [--warmup N] [--no-old]
 *              [--seed S] [--samples N] [--link nvrtc|nvjitlink|lto] [--fp8] [--sustained N]
 *              [--define NAME=VALUE]... [--fp8-cfg NCW,BN,ST] [--fp8-split] [--fp8-persist] [--forms LIST] [--v-offset X] [--no-v-center] SHAPE...
 *   SHAPE = BxHxSQxLKxHD[:NCW,BN,ST[,PERSIST[,SCHED[,SPLIT]]]]   e.g. 1x12x32760x32760x128 or 1x12x32760x512x128:2,128,2,1
 *   (SCHED 0: the consumer warpgroups issue to the tensor cores as they are ready, not in turns;
 *   SPLIT k: the tiles of the last partial wave over 132 multiprocessors in k key parts, as ditc
 *   plans with ATT_SPLIT)
 *
 * Kernels are compiled by NVRTC straight to an sm_90a cubin (--link nvrtc, the default), or to PTX that
 * nvJitLink turns into a cubin (--link nvjitlink, the path ditc takes today) or through LTO IR (--link lto); cubins are cached in --cache keyed by a hash of source and options, so that
 * --compile-only can build them ahead of time on a machine without a GPU. Inputs are uniform random
 * (a hash of index and a per-run seed); the output is poisoned with NaN before every timed launch;
 * sampled query rows are compared with an fp32 reference. One JSON line per shape goes to stdout.
 * --fp8 also runs the kernel's fp8 form (ATT_FP8, head dim 64 or 128) on the same inputs quantized as
 * attn_quant / attn_quant_vt do (attn_ref.cu), against the same fp32 reference of the bf16 inputs:
 * fp8_ms, fp8_err_out, fp8_cosine and fp8_speedup (over the bf16 kernel); then the same with int8 Q
 * and K (ATT_QK_I8, --attn-quant int8fp8: int8fp8_ms, ...) and with int8 Q K^T and bf16 P V over v
 * itself (ATT_PV_BF16, --attn-quant int8: int8_ms, int8_cosine, int8_speedup and so on).
 * --define NAME=VALUE (repeatable) adds #define NAME VALUE to every form of our Hopper kernel (not to
 * the portable one or the reference), to time a variant such as ATT_SCHED=0 against a run without.
 * --fp8-cfg NCW,BN,ST gives the 8-bit forms NCW consumer warpgroups (64 query rows each), key tiles
 * of BN and ST stages where the shape names no configuration (the bf16 kernel keeps its own);
 * --forms picks some of them (comma-separated names: fp8, int8fp8, int8; default all).
 * --fp8-split launches the 8-bit forms with the split of a last partial wave by the bf16 kernel's rule
 * (dit_cuda_att90_split over their own work and key tiles; ditc splits them by a stricter one), to time it;
 * --fp8-persist launches them persistent (ATT_PERSIST: a block a multiprocessor, Q double-buffered).
 * --v-offset X adds X * ((c % 5) - 1) to V's channel c (channel means of -X to 3X; default 0), for
 * the accuracy of the 8-bit forms' P V over values that do not average to zero; --no-v-center
 * quantizes V itself (means of 0) instead of V less its channel means, as attn_quant_vt does.
 * --sustained N also times N launches of the bf16 kernel back to back (sustained_ms: no pause between
 * them, the clock a model's forward holds) beside the median of separately started ones. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <nvJitLink.h>
#include <nvrtc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "compiler/att90_tiles.h"
#include "dit_abi.h"

#define CK(x)                                                                        \
  do {                                                                               \
    CUresult r_ = (x);                                                               \
    if (r_ != CUDA_SUCCESS) {                                                        \
      const char *e_ = "?";                                                          \
      p_cuGetErrorString(r_, &e_);                                                     \
      fprintf(stderr, "attn_bench: %s failed: %s (%s:%d)\n", #x, e_, __FILE__, __LINE__); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* The driver is loaded at run time, so --compile-only runs where there is none. */
#define STR2(x) #x
#define STR(x) STR2(x)
#define CU_FUNCS(X) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain) X(cuEventCreate) X(cuEventDestroy) X(cuEventElapsedTime) X(cuEventRecord) X(cuEventSynchronize) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuGetErrorString) X(cuInit) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyDtoH) X(cuMemcpyHtoD) X(cuMemsetD16Async) X(cuModuleGetFunction) X(cuModuleLoadData) X(cuModuleUnload) X(cuTensorMapEncodeTiled)
#define DECL(n) static __typeof__(&n) p_##n;
CU_FUNCS(DECL)
static void load_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    fprintf(stderr, "attn_bench: cannot load libcuda.so.1: %s\n", dlerror());
    exit(1);
  }
#define LOAD(n)                                                  \
  p_##n = (__typeof__(&n))dlsym(h, STR(n));                      \
  if (!p_##n) {                                                  \
    fprintf(stderr, "attn_bench: libcuda lacks %s\n", STR(n));  \
    exit(1);                                                     \
  }
  CU_FUNCS(LOAD)
}

static const char *g_repo = ".", *g_cache = "build-attn/cubin";
static int g_compile_only = 0, g_iters = 10, g_warmup = 2, g_old = 1, g_samples = 512, g_sustained = 0;
static unsigned long long g_seed = 0;
static const char *g_link = "nvrtc";
static int g_fp8 = 0;
static float g_v_offset = 0.f; /* --v-offset X: V's channel c offset by X * ((c % 5) - 1) */
static int g_v_center = 1;     /* --no-v-center: V^T of v itself (means of 0), not of v less its means */
#define MAX_DEFINES 16
static const char *g_defines[MAX_DEFINES]; /* NAME=VALUE, from --define */
static int g_ndefines = 0;
static int g_fp8_ncw = 0, g_fp8_bn = 0, g_fp8_st = 0; /* --fp8-cfg (0: the kernel's defaults) */
static int g_fp8_split = 0, g_fp8_persist = 0;       /* --fp8-split, --fp8-persist */
static unsigned g_forms = ~0u;                        /* --forms: bit f selects kForms[f] */

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "attn_bench: cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (fread(b, 1, (size_t)n, f) != (size_t)n) exit(1);
  b[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return b;
}

/* The headers the kernel templates include (dit_abi.h generated from dit_abi.def by build.sh). */
static const char *g_hdr_names[] = {"dit_abi.h", "dit_device.cuh", "dit_sm90.cuh"};
static const char *g_hdr_texts[3] = {"", "", ""};
#define N_HDRS 3

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* Compiles src for arch ("90a"/"90") to a cubin, through the cache. */
static char *compile(const char *src, const char *arch, const char *tag, size_t *out_len) {
  char opt_arch[64], link_arch[64];
  snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=compute_%s", arch);
  snprintf(link_arch, sizeof link_arch, "-arch=sm_%s", arch);
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  char ver[192];
  snprintf(ver, sizeof ver, "nvrtc %d.%d|%s|%s|%s", major, minor, opt_arch, link_arch, g_link);
  uint64_t h = fnv1a(14695981039346656037ull, src, strlen(src));
  h = fnv1a(h, ver, strlen(ver));
  for (int i = 0; i < N_HDRS; i++) h = fnv1a(h, g_hdr_texts[i], strlen(g_hdr_texts[i]));
  char path[1024];
  snprintf(path, sizeof path, "%s/%s-%016llx.cubin", g_cache, tag, (unsigned long long)h);
  FILE *f = fopen(path, "rb");
  if (f) {
    fclose(f);
    return read_file(path, out_len);
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src, "kernel.cu", N_HDRS, g_hdr_texts, g_hdr_names) != NVRTC_SUCCESS) exit(1);
  /* nvrtc: NVRTC emits the sm_ cubin itself (ptxas in whole-program mode).
   * nvjitlink: compute_ PTX, then nvJitLink to sm_ (ptxas in relocatable mode, which ignores
   * setmaxnreg and serializes wgmma).
   * lto: NVRTC LTO IR (-dlto), nvJitLink -lto. */
  char opt_sm[64];
  snprintf(opt_sm, sizeof opt_sm, "--gpu-architecture=sm_%s", arch);
  const int direct = !strcmp(g_link, "nvrtc"), lto = !strcmp(g_link, "lto");
  const char *opts[] = {direct ? opt_sm : opt_arch, "--std=c++17", "-default-device", direct ? "--ptxas-options=-v" : "-dlto"};
  nvrtcResult r = nvrtcCompileProgram(prog, direct || lto ? 4 : 3, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  if (n > 1) {
    char *log = malloc(n + 1);
    nvrtcGetProgramLog(prog, log);
    fprintf(stderr, "[%s] nvrtc log:\n%s\n", tag, log);
    free(log);
  }
  if (r != NVRTC_SUCCESS) {
    fprintf(stderr, "attn_bench: NVRTC failed for %s\n", tag);
    exit(1);
  }
  char *cubin;
  if (direct) {
    nvrtcGetCUBINSize(prog, &n);
    cubin = malloc(n);
    nvrtcGetCUBIN(prog, cubin);
    nvrtcDestroyProgram(&prog);
  } else {
    char *ir;
    size_t irn = 0;
    if (lto) {
      nvrtcGetLTOIRSize(prog, &irn);
      ir = malloc(irn);
      nvrtcGetLTOIR(prog, ir);
    } else {
      nvrtcGetPTXSize(prog, &irn);
      ir = malloc(irn + 1);
      nvrtcGetPTX(prog, ir);
      irn = strlen(ir);
    }
    nvrtcDestroyProgram(&prog);
    nvJitLinkHandle lh;
    const char *lopts[] = {link_arch, "-O3", "-Xptxas=-v", "-lto"};
    if (nvJitLinkCreate(&lh, lto ? 4 : 3, lopts) != NVJITLINK_SUCCESS) exit(1);
    nvJitLinkResult lr = nvJitLinkAddData(lh, lto ? NVJITLINK_INPUT_LTOIR : NVJITLINK_INPUT_PTX, ir, irn, "kernel");
    if (lr == NVJITLINK_SUCCESS) lr = nvJitLinkComplete(lh);
    size_t ln = 0;
    nvJitLinkGetInfoLogSize(lh, &ln);
    if (ln > 1) {
      char *log = malloc(ln + 1);
      nvJitLinkGetInfoLog(lh, log);
      fprintf(stderr, "[%s] nvJitLink info:\n%s\n", tag, log);
      free(log);
    }
    if (lr != NVJITLINK_SUCCESS) {
      nvJitLinkGetErrorLogSize(lh, &ln);
      char *log = malloc(ln + 1);
      nvJitLinkGetErrorLog(lh, log);
      fprintf(stderr, "attn_bench: nvJitLink failed for %s: %s\n", tag, log);
      exit(1);
    }
    nvJitLinkGetLinkedCubinSize(lh, &n);
    cubin = malloc(n);
    nvJitLinkGetLinkedCubin(lh, cubin);
    nvJitLinkDestroy(&lh);
    free(ir);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  fprintf(stderr, "[%s] compiled in %.2f s\n", tag, (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
  mkdir(g_cache, 0755);
  f = fopen(path, "wb");
  if (f) {
    fwrite(cubin, 1, n, f);
    fclose(f);
  }
  *out_len = n;
  return cubin;
}

typedef struct {
  int B, H, SQ, LK, HD, ncw, bn, st, persist, sched, split, tail, cfg_given; /* tail: the split's work tiles */
} shape_t;

#define SPLIT_SMS DIT_ATT90_SMS /* the multiprocessors ditc plans the tail split for */

static int parse_shape(const char *s, shape_t *sh) {
  memset(sh, 0, sizeof *sh);
  if (sscanf(s, "%dx%dx%dx%dx%d", &sh->B, &sh->H, &sh->SQ, &sh->LK, &sh->HD) != 5) return -1;
  sh->ncw = sh->HD == 64 ? 3 : 2;
  sh->st = sh->HD == 64 ? 4 : 2;
  sh->sched = 1;
  const char *c = strchr(s, ':');
  if (c) {
    if (sscanf(c + 1, "%d,%d,%d,%d,%d,%d", &sh->ncw, &sh->bn, &sh->st, &sh->persist, &sh->sched, &sh->split) < 3) return -1;
    sh->cfg_given = 1;
  }
  const int64_t tiles = (int64_t)(sh->SQ + 64 * sh->ncw - 1) / (64 * sh->ncw) * sh->H * sh->B;
  if (!c) { /* what ditc plans for the bf16 kernel: its key tiles and its split of a last partial wave */
    int64_t tail = 0;
    sh->bn = dit_cuda_att90_keys_per_tile(sh->HD, sh->LK, 0, 0, 0);
    sh->split = dit_cuda_att90_split(tiles, (sh->LK + sh->bn - 1) / sh->bn, SPLIT_SMS, 0, &tail);
  }
  /* A split the shape names takes the last partial wave, or the last whole one. */
  if (sh->split > 1) sh->tail = (int)(tiles % SPLIT_SMS ? tiles % SPLIT_SMS : SPLIT_SMS);
  return 0;
}

/* Dynamic shared memory of the sm_90a kernel (mirrors ATT_SMEM in the kernel). */
static unsigned ours_smem(const shape_t *s) {
  const unsigned nh = (unsigned)s->HD / 64, bm = 64u * (unsigned)s->ncw;
  return 1024u + (s->persist ? 2u : 1u) * nh * bm * 128u + 2u * (unsigned)s->st * nh * (unsigned)s->bn * 128u +
         8u * (4u + 4u * (unsigned)s->st);
}

/* The fp8 form's stages (the kernel's default, DIT_ABI_ATT90_ST_FP8, unless the shape names them). */
#define FP8_STAGES DIT_ABI_ATT90_ST_FP8
/* The integer value --define gives NAME, else dflt. */
static int define_value(const char *name, int dflt) {
  const size_t n = strlen(name);
  for (int d = 0; d < g_ndefines; d++)
    if (!strncmp(g_defines[d], name, n) && g_defines[d][n] == '=') return atoi(g_defines[d] + n + 1);
  return dflt;
}
static unsigned fp8_smem(int hd, int ncw, int bn, int st, int pv_bf16) {
  /* Q, then per stage a K tile and a V tile (bf16 V: 64-channel boxes; fp8 V^T with its rows of
   * ones unless --define ATT_LSUM_MMA=0), then the barriers; Q and K rows of hd bytes. */
  const unsigned ones = !pv_bf16 && define_value("ATT_LSUM_MMA", 1) ? DIT_ABI_ATT90_FP8_ONES_ROWS * (unsigned)bn : 0u;
  const unsigned v = pv_bf16 ? (unsigned)hd / 64u * (unsigned)bn * 128u : (unsigned)hd * (unsigned)bn;
  return 1024u + 64u * (unsigned)ncw * (unsigned)hd + (unsigned)st * ((unsigned)bn * (unsigned)hd + v + ones) + 8u * (4u + 4u * (unsigned)st);
}
/* The 8-bit forms' consumer warpgroups, key tiles and stages: the shape's configuration, else
 * --fp8-cfg's, else ditc's: two warpgroups (at either head dim) with the key tiles it gives
 * attention_fp8 and the kernel's stages for them. */
static void fp8_cfg(const shape_t *s, int i8, int pv_bf16, int *ncw, int *bn, int *st) {
  const int named = !s->cfg_given && g_fp8_ncw;
  *ncw = named ? g_fp8_ncw : s->cfg_given ? s->ncw : DIT_ABI_ATT90_NCW_HD128;
  *bn = named ? g_fp8_bn : s->cfg_given ? s->bn : dit_cuda_att90_fp8_key_tile(!pv_bf16, 0, !i8);
  *st = s->cfg_given ? s->st : named ? g_fp8_st : *bn > DIT_ABI_ATT90_BN ? DIT_ABI_ATT90_ST_FP8_WIDE : FP8_STAGES;
}
/* The 8-bit forms: e4m3 Q K; int8 Q K, e4m3 P V; int8 Q K, bf16 P V. */
#define N_FORMS 3
static const struct {
  const char *name, *defines;
  int i8, pv_bf16;
} kForms[N_FORMS] = {
    {"fp8", "#define ATT_FP8 1\n", 0, 0},
    {"int8fp8", "#define ATT_FP8 1\n#define ATT_QK_I8 1\n", 1, 0},
    {"int8", "#define ATT_FP8 1\n#define ATT_QK_I8 1\n#define ATT_PV_BF16 1\n", 1, 1},
};

/* How a kernel form is launched: persistent, or its last partial wave split into `split` key parts
 * (the last `tail` work tiles), or neither. */
typedef struct {
  int persist, split, tail;
} launch_t;

/* fp8: 0 the bf16 kernel, 1 + f the 8-bit form kForms[f]; l: its launch (ignored for the old kernel). */
static char *specialize(const shape_t *s, const char *body, int old, int fp8, const launch_t *l) {
  size_t n = strlen(body) + 1024;
  for (int d = 0; d < g_ndefines; d++) n += strlen(g_defines[d]) + 16;
  char *src = malloc(n);
  int k = snprintf(src, n,
                   "%s%s#define HD %d\n#define HEADS %d\n#define SQ %d\n#define LK %d\n#define SCALE ((float)%.17g)\n#define HAS_LSE 1\n",
                   old ? "#define DIT_K_ATTENTION 1\n" : "",
                   fp8 ? kForms[fp8 - 1].defines : "", s->HD, s->H, s->SQ, s->LK,
                   1.0 / sqrt((double)s->HD));
  if (!old && s->cfg_given)
    k += snprintf(src + k, n - k, "#define ATT_NCW %d\n#define ATT_BN %d\n#define ATT_ST %d\n", s->ncw, s->bn, s->st);
  else if (!old && fp8) {
    int ncw, bn, st;
    fp8_cfg(s, kForms[fp8 - 1].i8, kForms[fp8 - 1].pv_bf16, &ncw, &bn, &st);
    k += snprintf(src + k, n - k, "#define ATT_NCW %d\n#define ATT_BN %d\n#define ATT_ST %d\n", ncw, bn, st);
  }
  else if (!old && !fp8 && s->bn != DIT_ABI_ATT90_BN) /* (the 8-bit forms: fp8_cfg above) */
    k += snprintf(src + k, n - k, "#define ATT_BN %d\n", s->bn);
  for (int d = 0; !old && d < g_ndefines; d++) {
    const char *eq = strchr(g_defines[d], '=');
    k += snprintf(src + k, n - k, "#define %.*s %s\n", (int)(eq - g_defines[d]), g_defines[d], eq + 1);
  }
  if (!old && l->persist) k += snprintf(src + k, n - k, "#define ATT_PERSIST 1\n#define BATCH %d\n", s->B);
  if (!old && !s->sched) k += snprintf(src + k, n - k, "#define ATT_SCHED 0\n");
  if (!old && l->split > 1)
    k += snprintf(src + k, n - k, "#define ATT_SPLIT %d\n#define ATT_TAIL %d\n#define BATCH %d\n", l->split, l->tail, s->B);
  memcpy(src + k, body, strlen(body) + 1);
  return src;
}

/* The bf16 kernel's launch: the shape's (ditc's split unless it names a configuration). */
static launch_t bf16_launch(const shape_t *s) { return (launch_t){s->persist, s->split, s->tail}; }

/* An 8-bit form's launch: as ditc plans it (its split rule), or --fp8-persist's, or --fp8-split's: the
 * bf16 form's split rule over its own work and key tiles. */
static launch_t fp8_launch(const shape_t *s, int i8, int pv_bf16) {
  int ncw, bn, st;
  fp8_cfg(s, i8, pv_bf16, &ncw, &bn, &st);
  launch_t l = {g_fp8_persist, 1, 0};
  if (!g_fp8_persist) {
    const int64_t tiles = (int64_t)(s->SQ + 64 * ncw - 1) / (64 * ncw) * s->H * s->B;
    int64_t tail = 0;
    l.split = dit_cuda_att90_split(tiles, (s->LK + bn - 1) / bn, SPLIT_SMS, !g_fp8_split, &tail);
    l.tail = (int)tail;
  }
  return l;
}

/* The grid of a launch over mblk x heads x batch work tiles: persistent, one block a multiprocessor
 * (at most one a tile); split, a 1-D grid of the whole tiles, then the tail's tiles in parts. */
static void launch_grid(const launch_t *l, unsigned mblk, unsigned heads, unsigned batch, int nsm, unsigned g[3]) {
  const unsigned tiles = mblk * heads * batch;
  if (l->persist) g[0] = (unsigned)nsm < tiles ? (unsigned)nsm : tiles, g[1] = g[2] = 1;
  else if (l->split > 1) g[0] = tiles + (unsigned)(l->tail * (l->split - 1)), g[1] = g[2] = 1;
  else g[0] = mblk, g[1] = heads, g[2] = batch;
}

static CUmodule load_module(const char *cubin) {
  CUmodule m;
  CK(p_cuModuleLoadData(&m, cubin));
  return m;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* A 2-D map of rows x ch elements (bf16, or bytes with u8), boxes of box_bytes bytes (their
 * swizzle) by box_rows rows. */
static void encode_map_box(CUtensorMap *m, CUdeviceptr base, int rows, int ch, int box_rows, int u8, int box_bytes) {
  cuuint64_t dims[2] = {(cuuint64_t)ch, (cuuint64_t)rows};
  cuuint64_t strides[1] = {(cuuint64_t)ch * (u8 ? 1 : 2)};
  cuuint32_t box[2] = {(cuuint32_t)(u8 ? box_bytes : box_bytes / 2), (cuuint32_t)box_rows};
  cuuint32_t estr[2] = {1, 1};
  const CUtensorMapSwizzle sw = box_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : box_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B;
  CK(p_cuTensorMapEncodeTiled(m, u8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}
/* bf16 in boxes of 64 channels (128 bytes). */
static void encode_map(CUtensorMap *m, CUdeviceptr base, int rows, int ch, int box_rows) { encode_map_box(m, base, rows, ch, box_rows, 0, 128); }

typedef struct {
  CUfunction fill, ref, gather, nonfinite, quant_blocks, quant_vt;
} helpers_t;

typedef struct {
  double err_out, err_lse, cosine;
  unsigned long long nonfinite;
} check_t;

/* Compares the sampled rows of (out, lse) with the reference in (ref, ref_lse) (device, fp32). */
static check_t check(helpers_t *hp, const shape_t *s, CUdeviceptr out, CUdeviceptr lse, CUdeviceptr samples, int ns,
                     const float *ref, const float *ref_lse, CUdeviceptr scratch_rows, CUdeviceptr scratch_lse,
                     CUdeviceptr counter) {
  check_t c = {0, 0, 0, 0};
  int H = s->H, SQ = s->SQ, HD = s->HD;
  void *ga[] = {&scratch_rows, &scratch_lse, &out, &lse, &samples, &H, &SQ, &HD};
  CK(p_cuLaunchKernel(hp->gather, ns, 1, 1, 128, 1, 1, 0, 0, ga, NULL));
  float *got = malloc(sizeof(float) * ns * HD), *got_lse = malloc(sizeof(float) * ns);
  CK(p_cuMemcpyDtoH(got, scratch_rows, sizeof(float) * ns * HD));
  CK(p_cuMemcpyDtoH(got_lse, scratch_lse, sizeof(float) * ns));
  double maxref = 0, maxdiff = 0, maxl = 0, dot = 0, gg = 0, rr = 0;
  for (long i = 0; i < (long)ns * HD; i++) {
    dot += (double)got[i] * ref[i], gg += (double)got[i] * got[i], rr += (double)ref[i] * ref[i];
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= maxdiff)) maxdiff = isnan(d) ? INFINITY : d;
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
  }
  for (int i = 0; i < ns; i++) {
    double d = fabs((double)got_lse[i] - ref_lse[i]);
    if (!(d <= maxl)) maxl = isnan(d) ? INFINITY : d;
  }
  c.err_out = maxref > 0 ? maxdiff / maxref : maxdiff;
  c.err_lse = maxl;
  c.cosine = gg > 0 && rr > 0 ? dot / sqrt(gg * rr) : 0;
  unsigned long long n = (unsigned long long)s->B * s->SQ * s->H * s->HD, zero = 0;
  CK(p_cuMemcpyHtoD(counter, &zero, 8));
  void *na[] = {&out, &n, &counter};
  CK(p_cuLaunchKernel(hp->nonfinite, 1024, 1, 1, 256, 1, 1, 0, 0, na, NULL));
  CK(p_cuMemcpyDtoH(&c.nonfinite, counter, 8));
  free(got);
  free(got_lse);
  return c;
}

/* Times a launch: the output poisoned with NaN before each; median ms. */
static double time_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem, void **args,
                          CUdeviceptr out, size_t out_elems) {
  CUevent e0, e1;
  CK(p_cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(p_cuEventCreate(&e1, CU_EVENT_DEFAULT));
  float *ms = malloc(sizeof(float) * (g_iters + g_warmup));
  for (int it = 0; it < g_warmup + g_iters; it++) {
    CK(p_cuMemsetD16Async(out, 0xFFFF, out_elems, 0));
    CK(p_cuEventRecord(e0, 0));
    CK(p_cuLaunchKernel(f, gx, gy, gz, block, 1, 1, smem, 0, args, NULL));
    CK(p_cuEventRecord(e1, 0));
    CK(p_cuEventSynchronize(e1));
    CK(p_cuEventElapsedTime(&ms[it], e0, e1));
  }
  qsort(ms + g_warmup, g_iters, sizeof(float), cmp_float);
  double med = g_iters % 2 ? ms[g_warmup + g_iters / 2] : 0.5 * (ms[g_warmup + g_iters / 2 - 1] + ms[g_warmup + g_iters / 2]);
  free(ms);
  p_cuEventDestroy(e0);
  p_cuEventDestroy(e1);
  return med;
}

/* The mean time of n launches back to back (no memset or host wait between them): the clock the
 * chip holds under sustained load, as inside a model's forward, rather than after a pause. */
static double time_sustained(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem, void **args, int n) {
  CUevent e0, e1;
  float ms = 0.f;
  CK(p_cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(p_cuEventCreate(&e1, CU_EVENT_DEFAULT));
  CK(p_cuEventRecord(e0, 0));
  for (int it = 0; it < n; it++) CK(p_cuLaunchKernel(f, gx, gy, gz, block, 1, 1, smem, 0, args, NULL));
  CK(p_cuEventRecord(e1, 0));
  CK(p_cuEventSynchronize(e1));
  CK(p_cuEventElapsedTime(&ms, e0, e1));
  p_cuEventDestroy(e0);
  p_cuEventDestroy(e1);
  return ms / n;
}

int main(int argc, char **argv) {
  shape_t shapes[64];
  int nshapes = 0;
  g_seed = (unsigned long long)time(NULL) * 2654435761ull ^ (unsigned long long)clock();
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--repo") && i + 1 < argc) g_repo = argv[++i];
    else if (!strcmp(argv[i], "--cache") && i + 1 < argc) g_cache = argv[++i];
    else if (!strcmp(argv[i], "--compile-only")) g_compile_only = 1;
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) g_iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) g_warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--samples") && i + 1 < argc) g_samples = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--no-old")) g_old = 0;
    else if (!strcmp(argv[i], "--link") && i + 1 < argc) g_link = argv[++i];
    else if (!strcmp(argv[i], "--fp8")) g_fp8 = 1;
    else if (!strcmp(argv[i], "--v-offset") && i + 1 < argc) g_v_offset = (float)atof(argv[++i]);
    else if (!strcmp(argv[i], "--no-v-center")) g_v_center = 0;
    else if (!strcmp(argv[i], "--define") && i + 1 < argc) {
      const char *d = argv[++i], *eq = strchr(d, '=');
      if (!eq || eq == d || strspn(d, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != (size_t)(eq - d) ||
          g_ndefines == MAX_DEFINES) {
        fprintf(stderr, "attn_bench: --define %s: expected NAME=VALUE (at most %d)\n", d, MAX_DEFINES);
        return 2;
      }
      g_defines[g_ndefines++] = d;
    }
    else if (!strcmp(argv[i], "--sustained") && i + 1 < argc) g_sustained = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fp8-split")) g_fp8_split = 1;
    else if (!strcmp(argv[i], "--fp8-persist")) g_fp8_persist = 1;
    else if (!strcmp(argv[i], "--fp8-cfg") && i + 1 < argc) {
      if (sscanf(argv[++i], "%d,%d,%d", &g_fp8_ncw, &g_fp8_bn, &g_fp8_st) != 3 || g_fp8_ncw < 1 || g_fp8_bn < 16 || g_fp8_st < 1) {
        fprintf(stderr, "attn_bench: --fp8-cfg %s: expected NCW,BN,ST (positive; BN at least 16)\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--forms") && i + 1 < argc) {
      g_forms = 0;
      char *list = strdup(argv[++i]);
      for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        int f = 0;
        while (f < N_FORMS && strcmp(t, kForms[f].name)) f++;
        if (f == N_FORMS) {
          fprintf(stderr, "attn_bench: --forms: unknown form '%s' (expected fp8, int8fp8 or int8)\n", t);
          return 2;
        }
        g_forms |= 1u << f;
      }
      free(list);
    }
    else if (nshapes < 64 && parse_shape(argv[i], &shapes[nshapes]) == 0) nshapes++;
    else {
      fprintf(stderr, "usage: attn_bench [--repo DIR] [--cache DIR] [--compile-only] [--iters N] [--warmup N] [--no-old] "
                      "[--seed S] [--samples N] [--fp8] [--sustained N] [--define NAME=VALUE]... [--fp8-cfg NCW,BN,ST] [--fp8-split] [--fp8-persist] [--forms LIST] [--v-offset X] [--no-v-center] BxHxSQxLKxHD[:NCW,BN,ST[,PERSIST]]...\n");
      return 2;
    }
  }
  if (g_iters < 1) g_iters = 1;
  char path[1024];
  snprintf(path, sizeof path, "%s/build-attn/dit_abi.h", g_repo);
  g_hdr_texts[0] = read_file(path, NULL);
  snprintf(path, sizeof path, "%s/compiler/kernels/dit_device.cuh", g_repo);
  g_hdr_texts[1] = read_file(path, NULL);
  snprintf(path, sizeof path, "%s/compiler/kernels/dit_sm90.cuh", g_repo);
  g_hdr_texts[2] = read_file(path, NULL);
  snprintf(path, sizeof path, "%s/compiler/kernels/dit_attn_sm90.cu", g_repo);
  char *ours_src = read_file(path, NULL);
  snprintf(path, sizeof path, "%s/compiler/kernels/dit_kernels.cu", g_repo);
  char *old_src = read_file(path, NULL);
  snprintf(path, sizeof path, "%s/bench/attention/attn_ref.cu", g_repo);
  char *ref_src = read_file(path, NULL);
  size_t len;
  char *ref_cubin = compile(ref_src, "90", "ref", &len);
  for (int i = 0; i < nshapes; i++) {
    const launch_t bl = bf16_launch(&shapes[i]);
    char *a = specialize(&shapes[i], ours_src, 0, 0, &bl);
    char *c = compile(a, "90a", "ours", &len);
    free(a);
    free(c);
    if (g_fp8 && (shapes[i].HD == 64 || shapes[i].HD == 128) && !shapes[i].persist && (!shapes[i].cfg_given || shapes[i].bn == 128)) {
      for (int form = 0; form < N_FORMS; form++) {
        if (!(g_forms >> form & 1)) continue;
        const launch_t fl = fp8_launch(&shapes[i], kForms[form].i8, kForms[form].pv_bf16);
        a = specialize(&shapes[i], ours_src, 0, 1 + form, &fl);
        free(compile(a, "90a", kForms[form].name, &len));
        free(a);
      }
    }
    if (g_old) {
      a = specialize(&shapes[i], old_src, 1, 0, &bl);
      c = compile(a, "90a", "old", &len);
      free(a);
      free(c);
    }
  }
  if (g_compile_only) return 0;

  load_driver();
  CK(p_cuInit(0));
  CUdevice dev;
  CK(p_cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(p_cuCtxSetCurrent(ctx));
  char devname[256];
  CK(p_cuDeviceGetName(devname, sizeof devname, dev));
  int nsm = 0;
  CK(p_cuDeviceGetAttribute(&nsm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  helpers_t hp;
  CUmodule hm = load_module(ref_cubin);
  CK(p_cuModuleGetFunction(&hp.fill, hm, "fill_bf16"));
  CK(p_cuModuleGetFunction(&hp.ref, hm, "ref_attn"));
  CK(p_cuModuleGetFunction(&hp.gather, hm, "gather_rows"));
  CK(p_cuModuleGetFunction(&hp.nonfinite, hm, "count_nonfinite"));
  CK(p_cuModuleGetFunction(&hp.quant_blocks, hm, "quant_blocks"));
  CK(p_cuModuleGetFunction(&hp.quant_vt, hm, "quant_vt"));

  for (int si = 0; si < nshapes; si++) {
    const shape_t *s = &shapes[si];
    const int B = s->B, H = s->H, SQ = s->SQ, LK = s->LK, HD = s->HD, CH = H * HD;
    const size_t nq = (size_t)B * SQ * CH, nk = (size_t)B * LK * CH, nl = (size_t)B * H * SQ;
    CUdeviceptr q, k, v, out, lse, oout = 0, olse = 0;
    CK(p_cuMemAlloc(&q, nq * 2));
    CK(p_cuMemAlloc(&k, nk * 2));
    CK(p_cuMemAlloc(&v, nk * 2));
    CK(p_cuMemAlloc(&out, nq * 2));
    CK(p_cuMemAlloc(&lse, nl * 4));
    if (g_old) {
      CK(p_cuMemAlloc(&oout, nq * 2));
      CK(p_cuMemAlloc(&olse, nl * 4));
    }
    const unsigned long long seed = g_seed + 0x1234567ull * (unsigned long long)(si + 1);
    {
      float amp_qk = 2.0f, amp_v = 1.0f, off0 = 0.f, off_v = g_v_offset;
      int ch = H * HD;
      unsigned long long sq = seed, sk = seed ^ 0xabcdefull, sv = seed ^ 0x5555aaaaull;
      void *a1[] = {&q, (void *)&nq, &sq, &amp_qk, &off0, &ch};
      void *a2[] = {&k, (void *)&nk, &sk, &amp_qk, &off0, &ch};
      void *a3[] = {&v, (void *)&nk, &sv, &amp_v, &off_v, &ch};
      CK(p_cuLaunchKernel(hp.fill, 2048, 1, 1, 256, 1, 1, 0, 0, a1, NULL));
      CK(p_cuLaunchKernel(hp.fill, 2048, 1, 1, 256, 1, 1, 0, 0, a2, NULL));
      CK(p_cuLaunchKernel(hp.fill, 2048, 1, 1, 256, 1, 1, 0, 0, a3, NULL));
    }
    /* Samples: evenly spread over (b, h, r), plus the last row of every (b, h). */
    const long total = (long)B * H * SQ;
    int ns0 = g_samples < total ? g_samples : (int)total, nbh = B * H < 256 ? B * H : 256;
    int ns = ns0 + nbh;
    int *samp = malloc(sizeof(int) * 3 * ns);
    for (int i = 0; i < ns0; i++) {
      long idx = ns0 > 1 ? (long)((double)i * (double)(total - 1) / (double)(ns0 - 1)) : 0;
      samp[3 * i] = (int)(idx / ((long)H * SQ));
      samp[3 * i + 1] = (int)((idx / SQ) % H);
      samp[3 * i + 2] = (int)(idx % SQ);
    }
    for (int i = 0; i < nbh; i++) {
      samp[3 * (ns0 + i)] = i / H;
      samp[3 * (ns0 + i) + 1] = i % H;
      samp[3 * (ns0 + i) + 2] = SQ - 1;
    }
    CUdeviceptr dsamp, ref_out, ref_lse, scratch, rows, rows_lse, counter;
    CK(p_cuMemAlloc(&dsamp, sizeof(int) * 3 * ns));
    CK(p_cuMemcpyHtoD(dsamp, samp, sizeof(int) * 3 * ns));
    CK(p_cuMemAlloc(&ref_out, sizeof(float) * ns * HD));
    CK(p_cuMemAlloc(&ref_lse, sizeof(float) * ns));
    CK(p_cuMemAlloc(&scratch, sizeof(float) * (size_t)ns * LK));
    CK(p_cuMemAlloc(&rows, sizeof(float) * ns * HD));
    CK(p_cuMemAlloc(&rows_lse, sizeof(float) * ns));
    CK(p_cuMemAlloc(&counter, 8));
    {
      float scale = (float)(1.0 / sqrt((double)HD));
      int h_ = H, sq_ = SQ, lk_ = LK, hd_ = HD;
      void *ra[] = {&ref_out, &ref_lse, &scratch, &q, &k, &v, &dsamp, &h_, &sq_, &lk_, &hd_, &scale};
      CK(p_cuLaunchKernel(hp.ref, ns, 1, 1, 256, 1, 1, 0, 0, ra, NULL));
    }
    float *ref = malloc(sizeof(float) * ns * HD), *rlse = malloc(sizeof(float) * ns);
    CK(p_cuCtxSynchronize());
    CK(p_cuMemcpyDtoH(ref, ref_out, sizeof(float) * ns * HD));
    CK(p_cuMemcpyDtoH(rlse, ref_lse, sizeof(float) * ns));
    CK(p_cuMemFree(scratch));

    /* Ours. */
    const launch_t bl = bf16_launch(s);
    char *src = specialize(s, ours_src, 0, 0, &bl);
    char *cubin = compile(src, "90a", "ours", &len);
    free(src);
    CUmodule mod = load_module(cubin);
    free(cubin);
    CUfunction f;
    CK(p_cuModuleGetFunction(&f, mod, "dit_kernel"));
    int regs = 0, lmem = 0, smem_static = 0, maxthr = 0;
    CK(p_cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    CK(p_cuFuncGetAttribute(&lmem, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
    CK(p_cuFuncGetAttribute(&smem_static, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
    CK(p_cuFuncGetAttribute(&maxthr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    const unsigned smem = ours_smem(s), bm = 64u * (unsigned)s->ncw, threads = 128u * (unsigned)(s->ncw + 1);
    CK(p_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
    CUtensorMap tq, tk, tv;
    encode_map(&tq, q, B * SQ, CH, (int)bm);
    encode_map(&tk, k, B * LK, CH, s->bn);
    encode_map(&tv, v, B * LK, CH, s->bn);
    void *args[] = {&out, &lse, &q, &k, &v, &tq, &tk, &tv};
    unsigned grid[3];
    launch_grid(&bl, (unsigned)((SQ + bm - 1) / bm), (unsigned)H, (unsigned)B, nsm, grid);
    const unsigned gx = grid[0], gy = grid[1], gz = grid[2];
    double ms = time_kernel(f, gx, gy, gz, threads, smem, args, out, nq);
    const double sus_ms = g_sustained > 0 ? time_sustained(f, gx, gy, gz, threads, smem, args, g_sustained) : 0.0;
    CK(p_cuCtxSynchronize());
    check_t c = check(&hp, s, out, lse, dsamp, ns, ref, rlse, rows, rows_lse, counter);
    const double flop = 4.0 * B * H * (double)SQ * LK * HD;
    int ok = c.err_out <= 1e-2 && c.err_lse <= 1e-3 && c.nonfinite == 0;

    /* The 8-bit forms on the same inputs, quantized on the device: e4m3 Q, K (fp8), int8 Q, K with
     * the int8 Q K^T (int8fp8, ATT_QK_I8), V^T and P e4m3 in both; then int8 Q K^T with bf16 P V
     * over v itself (int8, ATT_PV_BF16). */
    double fms[N_FORMS] = {0};
    int fsplit[N_FORMS] = {0};
    check_t fc[N_FORMS] = {{0, 0, 0, 0}};
    /* the 8-bit forms beside the bf16 kernel as ditc plans it (a shape naming its tiles: 128 keys only) */
    const int fp8 = g_fp8 && (HD == 64 || HD == 128) && !s->persist && (!s->cfg_given || s->bn == 128);
    for (int form = 0; fp8 && form < N_FORMS; form++) {
      if (!(g_forms >> form & 1)) continue;
      int i8 = kForms[form].i8;
      const int pv_bf16 = kForms[form].pv_bf16;
      int fncw, fbn, st;
      fp8_cfg(s, i8, pv_bf16, &fncw, &fbn, &st);
      /* K's scales a key tile; V^T's tiles in column blocks of vb keys (the kernel's VB) */
      const int LP = (LK + 127) / 128 * 128, nqs = (SQ + 63) / 64, nks = (LK + fbn - 1) / fbn;
      const int vb = dit_cuda_att90_vt_block(fbn);
      CUdeviceptr q8, qs, k8, ks, vt, vs;
      CK(p_cuMemAlloc(&q8, nq));
      CK(p_cuMemAlloc(&k8, nk));
      CK(p_cuMemAlloc(&vt, (size_t)B * H * HD * LP));
      CK(p_cuMemAlloc(&qs, sizeof(float) * B * H * nqs));
      CK(p_cuMemAlloc(&ks, sizeof(float) * B * H * nks));
      CK(p_cuMemAlloc(&vs, sizeof(float) * B * H * HD * 2)); /* scales, then means */
      int sq_ = SQ, lk_ = LK, lp_ = LP, h_ = H, hd_ = HD, r64 = 64, rk = fbn;
      void *qa[] = {&q8, &qs, &q, &sq_, &h_, &hd_, &r64, &i8};
      void *ka[] = {&k8, &ks, &k, &lk_, &h_, &hd_, &rk, &i8};
      int center_ = g_v_center;
      void *va[] = {&vt, &vs, &v, &lk_, &lp_, &h_, &hd_, &center_};
      CK(p_cuLaunchKernel(hp.quant_blocks, (unsigned)nqs, H, B, 256, 1, 1, 0, 0, qa, NULL));
      CK(p_cuLaunchKernel(hp.quant_blocks, (unsigned)nks, H, B, 256, 1, 1, 0, 0, ka, NULL));
      if (!pv_bf16) CK(p_cuLaunchKernel(hp.quant_vt, HD, H, B, 256, 1, 1, 0, 0, va, NULL));
      const launch_t fl = fp8_launch(s, i8, pv_bf16);
      fsplit[form] = fl.split;
      src = specialize(s, ours_src, 0, 1 + form, &fl);
      cubin = compile(src, "90a", kForms[form].name, &len);
      free(src);
      CUmodule fm = load_module(cubin);
      free(cubin);
      CUfunction ff;
      CK(p_cuModuleGetFunction(&ff, fm, "dit_kernel"));
      const unsigned fbm = 64u * (unsigned)fncw, fsmem = fp8_smem(HD, fncw, fbn, st, pv_bf16) + (fl.persist ? fbm * (unsigned)HD : 0u);
      CK(p_cuFuncSetAttribute(ff, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)fsmem));
      CUtensorMap fq, fk, fv;
      encode_map_box(&fq, q8, B * SQ, CH, (int)fbm, 1, HD); /* a head's codes a box row, swizzled by its bytes */
      encode_map_box(&fk, k8, B * LK, CH, fbn, 1, HD);
      if (pv_bf16) encode_map(&fv, v, B * LK, CH, fbn);
      else encode_map_box(&fv, vt, B * H * HD, LP, HD, 1, vb);
      void *fargs8[] = {&out, &lse, &q8, &qs, &k8, &ks, &vt, &vs, &fq, &fk, &fv}, *fargs16[] = {&out, &lse, &q8, &qs, &k8, &ks, &v, &fq, &fk, &fv};
      void **fargs = pv_bf16 ? fargs16 : fargs8;
      unsigned fgrid[3];
      launch_grid(&fl, (unsigned)((SQ + fbm - 1) / fbm), (unsigned)H, (unsigned)B, nsm, fgrid);
      fms[form] = time_kernel(ff, fgrid[0], fgrid[1], fgrid[2], 128u * (unsigned)(fncw + 1), fsmem, fargs, out, nq);
      CK(p_cuCtxSynchronize());
      fc[form] = check(&hp, s, out, lse, dsamp, ns, ref, rlse, rows, rows_lse, counter);
      CK(p_cuModuleUnload(fm));
      p_cuMemFree(q8), p_cuMemFree(k8), p_cuMemFree(vt), p_cuMemFree(qs), p_cuMemFree(ks), p_cuMemFree(vs);
    }

    double oms = 0;
    check_t oc = {0, 0, 0, 0};
    if (g_old) {
      src = specialize(s, old_src, 1, 0, &bl);
      cubin = compile(src, "90a", "old", &len);
      free(src);
      CUmodule om = load_module(cubin);
      free(cubin);
      CUfunction of;
      CK(p_cuModuleGetFunction(&of, om, "dit_kernel"));
      const int dp = (HD + 15) / 16 * 16;
      const unsigned osmem = (unsigned)((128 + 4 * 64) * (dp + 8) * 2);
      CK(p_cuFuncSetAttribute(of, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)osmem));
      void *oargs[] = {&oout, &olse, &q, &k, &v};
      oms = time_kernel(of, (unsigned)((SQ + 127) / 128), H, B, 256, osmem, oargs, oout, nq);
      CK(p_cuCtxSynchronize());
      oc = check(&hp, s, oout, olse, dsamp, ns, ref, rlse, rows, rows_lse, counter);
      CK(p_cuModuleUnload(om));
    }
    printf("{\"device\":\"%s\",\"B\":%d,\"H\":%d,\"SQ\":%d,\"LK\":%d,\"HD\":%d,\"cfg\":{\"ncw\":%d,\"bm\":%u,\"bn\":%d,\"st\":%d,\"persist\":%d,\"sched\":%d,\"split\":%d,"
           "\"threads\":%u,\"smem\":%u,\"grid\":[%u,%u,%u]},\"regs\":%d,\"local_bytes\":%d,\"static_smem\":%d,\"ms\":%.4f,\"tflops\":%.1f,"
           "\"err_out\":%.3e,\"err_lse\":%.3e,\"nonfinite\":%llu,\"samples\":%d,\"ok\":%s",
           devname, B, H, SQ, LK, HD, s->ncw, bm, s->bn, s->st, s->persist, s->sched, s->split, threads, smem, gx, gy, gz, regs, lmem, smem_static, ms,
           flop / (ms * 1e-3) / 1e12, c.err_out, c.err_lse, c.nonfinite, ns, ok ? "true" : "false");
    for (int form = 0; fp8 && form < N_FORMS; form++) {
      if (!(g_forms >> form & 1)) continue;
      const char *p = kForms[form].name;
      printf(",\"%s_ms\":%.4f,\"%s_tflops\":%.1f,\"%s_speedup\":%.3f,\"%s_err_out\":%.3e,\"%s_err_lse\":%.3e,\"%s_cosine\":%.6f,"
             "\"%s_nonfinite\":%llu,\"%s_split\":%d,\"%s_ok\":%s",
             p, fms[form], p, flop / (fms[form] * 1e-3) / 1e12, p, ms / fms[form], p, fc[form].err_out, p, fc[form].err_lse, p,
             fc[form].cosine, p, fc[form].nonfinite, p, fsplit[form], p, fc[form].cosine >= 0.995 && fc[form].nonfinite == 0 ? "true" : "false");
    }
    if (sus_ms > 0) printf(",\"sustained_ms\":%.4f,\"sustained_tflops\":%.1f", sus_ms, flop / (sus_ms * 1e-3) / 1e12);
    if (g_old)
      printf(",\"old_ms\":%.4f,\"old_tflops\":%.1f,\"old_err_out\":%.3e,\"old_err_lse\":%.3e,\"old_nonfinite\":%llu", oms,
             flop / (oms * 1e-3) / 1e12, oc.err_out, oc.err_lse, oc.nonfinite);
    printf("}\n");
    fflush(stdout);
    CK(p_cuModuleUnload(mod));
    p_cuMemFree(q), p_cuMemFree(k), p_cuMemFree(v), p_cuMemFree(out), p_cuMemFree(lse);
    if (g_old) p_cuMemFree(oout), p_cuMemFree(olse);
    p_cuMemFree(dsamp), p_cuMemFree(ref_out), p_cuMemFree(ref_lse), p_cuMemFree(rows), p_cuMemFree(rows_lse), p_cuMemFree(counter);
    free(samp), free(ref), free(rlse);
  }
  return 0;
}
