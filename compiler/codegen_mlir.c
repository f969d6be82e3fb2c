/* Elementwise chains to PTX through the MLIR C API: writes the chain as a linalg.generic over
 * vectors, runs the GPU lowering in three phases and takes the PTX out of the gpu.binary. */
#include "compiler/codegen_mlir.h"
#include "base/strbuf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"

#if DIT_HAVE_MLIR
#include <pthread.h>

#include <llvm-c/Core.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <mlir-c/Diagnostics.h>
#include <mlir-c/Dialect/GPU.h>
#include <mlir-c/IR.h>
#include <mlir-c/Pass.h>
#include <mlir-c/RegisterEverything.h>
#endif

#ifndef DIT_MLIR_CUDA_ROOT
#define DIT_MLIR_CUDA_ROOT "/usr/local/cuda"
#endif

/* Threads per block: the inner parallel loop's tile, mapped to threadIdx.x. */
#define BLOCK 256
#define STR_(x) #x
#define STR(x) STR_(x)
/* Widest single access the targets have (ld.global.v4.b32). */
#define MAX_ACCESS 16
/* Diagnostics beyond this are dropped: a failing pass may print whole modules as notes. */
#define DIAG_CAP 6000

#if DIT_HAVE_MLIR

/* ---- the spec ---- */

typedef struct geom {
  int v;            /* elements per thread */
  int64_t nv;       /* n / v: iterations of the linalg.generic */
  int64_t dv;       /* d / v */
  int64_t batch;    /* B of a MOD table */
  uint32_t align;   /* pointer alignment the kernel assumes */
  int any_bf16;
} geom_t;

static int dtype_ok(dit_dtype_t t) { return t == DIT_F32 || t == DIT_BF16; }

static const char *op_name(dit_mlir_ew_op_t op) {
  switch (op) {
    case DIT_MLIR_EW_SILU: return "silu";
    case DIT_MLIR_EW_GELU_TANH: return "gelu_tanh";
    case DIT_MLIR_EW_ADD: return "add";
    case DIT_MLIR_EW_GATED_ADD: return "gated_add";
  }
  return NULL;
}

static dit_status_t check_spec(const dit_mlir_ew_spec_t *s, geom_t *g) {
  memset(g, 0, sizeof *g);
  if (s->n <= 0) return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: n = %" PRId64 ", expected > 0", s->n);
  if (s->n_in < 1 || s->n_in > DIT_MLIR_EW_MAX_IN)
    return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: n_in = %d, expected 1..%d", s->n_in, DIT_MLIR_EW_MAX_IN);
  if (s->n_steps < 1 || s->n_steps > DIT_MLIR_EW_MAX_STEPS)
    return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: n_steps = %d, expected 1..%d", s->n_steps, DIT_MLIR_EW_MAX_STEPS);
  if (!dtype_ok(s->out_dtype))
    return DIT_ERR(UNIMPLEMENTED, "elementwise kernel: output dtype %s, expected f32 or bf16", dit_dtype_name(s->out_dtype));
  int used[DIT_MLIR_EW_MAX_IN] = {1, 0, 0, 0};
  int bcast = 0, mod = 0;
  g->any_bf16 = s->out_dtype == DIT_BF16;
  for (int k = 0; k < s->n_in; k++) {
    if (!dtype_ok(s->in[k].dtype))
      return DIT_ERR(UNIMPLEMENTED, "elementwise kernel: in[%d] dtype %s, expected f32 or bf16", k, dit_dtype_name(s->in[k].dtype));
    if (s->in[k].bcast != DIT_MLIR_EW_ELEMENT && s->in[k].bcast != DIT_MLIR_EW_ROW && s->in[k].bcast != DIT_MLIR_EW_MOD)
      return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: in[%d] broadcast %d unknown", k, (int)s->in[k].bcast);
    g->any_bf16 |= s->in[k].dtype == DIT_BF16;
    bcast |= s->in[k].bcast != DIT_MLIR_EW_ELEMENT;
    mod |= s->in[k].bcast == DIT_MLIR_EW_MOD;
  }
  for (int j = 0; j < s->n_steps; j++) {
    const dit_mlir_ew_step_t *st = &s->steps[j];
    const char *name = op_name(st->op);
    if (!name) return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: step %d op %d unknown", j, (int)st->op);
    int reads = st->op == DIT_MLIR_EW_ADD ? 1 : st->op == DIT_MLIR_EW_GATED_ADD ? 2 : 0;
    const int idx[2] = {st->a, st->b};
    for (int r = 0; r < reads; r++) {
      if (idx[r] < 0 || idx[r] >= s->n_in)
        return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: step %d (%s) reads in[%d] of %d inputs", j, name, idx[r], s->n_in);
      used[idx[r]] = 1;
    }
  }
  for (int k = 0; k < s->n_in; k++)
    if (!used[k]) return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: in[%d] is read by no step", k);
  if (bcast && (s->d <= 0 || s->n % s->d))
    return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: broadcast row length d = %" PRId64 " does not divide n = %" PRId64,
                   s->d, s->n);
  if (mod) {
    if (s->t <= 0 || s->rows <= 0 || s->row < 0 || s->row >= s->rows)
      return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: modulation t = %" PRId64 ", row %" PRId64 " of %" PRId64 " rows", s->t,
                     s->row, s->rows);
    if (s->t > INT64_MAX / s->d || s->n % (s->t * s->d))
      return DIT_ERR(INVALID_ARGUMENT, "elementwise kernel: t * d = %" PRId64 " * %" PRId64 " does not divide n = %" PRId64, s->t,
                     s->d, s->n);
    g->batch = s->n / (s->t * s->d);
  }
  /* 16-byte accesses for the narrowest operand; every index of a vector must stay inside one
   * broadcast row, so the width also divides d. */
  int v = g->any_bf16 ? MAX_ACCESS / 2 : MAX_ACCESS / 4;
  while (v > 1 && (s->n % v || (bcast && s->d % v))) v /= 2;
  g->v = v;
  g->nv = s->n / v;
  g->dv = bcast ? s->d / v : 0;
  if ((g->nv + BLOCK - 1) / BLOCK > INT32_MAX)
    return DIT_ERR(OUT_OF_RANGE, "elementwise kernel: n = %" PRId64 " needs more than 2^31-1 blocks", s->n);
  g->align = 1;
  for (int k = -1; k < s->n_in; k++) {
    uint32_t bytes = (uint32_t)(v * (int)dit_dtype_size(k < 0 ? s->out_dtype : s->in[k].dtype));
    if (bytes > MAX_ACCESS) bytes = MAX_ACCESS;
    if (bytes > g->align) g->align = bytes;
  }
  return DIT_OK;
}

static dit_status_t arch_ptx_feature(const char *arch, const char **out) {
  /* The lowest PTX ISA that knows each target, so the widest range of drivers can load it. */
  static const char *const map[][2] = {{"sm_80", "+ptx70"}, {"sm_86", "+ptx71"}, {"sm_89", "+ptx78"}, {"sm_90", "+ptx78"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (arch && !strcmp(arch, map[i][0])) {
      *out = map[i][1];
      return DIT_OK;
    }
  return DIT_ERR(INVALID_ARGUMENT, "MLIR codegen: target '%s' unsupported (sm_80, sm_86, sm_89, sm_90)", arch ? arch : "(null)");
}

/* ---- the input module ---- */

static const char *elem_ir(dit_dtype_t t) { return t == DIT_BF16 ? "i16" : "f32"; }

static void memref_ir(dit_strbuf_t *b, const dit_mlir_ew_spec_t *s, const geom_t *g, int k) {
  dit_dtype_t t = k < 0 ? s->out_dtype : s->in[k].dtype;
  dit_mlir_ew_bcast_t bc = k < 0 ? DIT_MLIR_EW_ELEMENT : s->in[k].bcast;
  if (bc == DIT_MLIR_EW_ROW) dit_strbuf_printf(b, "memref<%" PRId64 "x", g->dv);
  else if (bc == DIT_MLIR_EW_MOD) dit_strbuf_printf(b, "memref<%" PRId64 "x%" PRId64 "x%" PRId64 "x", g->batch, s->rows, g->dv);
  else dit_strbuf_printf(b, "memref<%" PRId64 "x", g->nv);
  dit_strbuf_printf(b, "vector<%dx%s>>", g->v, elem_ir(t));
}

static void map_ir(dit_strbuf_t *b, const dit_mlir_ew_spec_t *s, const geom_t *g, int k) {
  dit_mlir_ew_bcast_t bc = k < 0 ? DIT_MLIR_EW_ELEMENT : s->in[k].bcast;
  if (bc == DIT_MLIR_EW_ROW) dit_strbuf_printf(b, "affine_map<(i) -> (i mod %" PRId64 ")>", g->dv);
  else if (bc == DIT_MLIR_EW_MOD)
    dit_strbuf_printf(b, "affine_map<(i) -> (i floordiv %" PRId64 ", %" PRId64 ", i mod %" PRId64 ")>", s->t * g->dv, s->row, g->dv);
  else dit_strbuf_printf(b, "affine_map<(i) -> (i)>");
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}


/* SSA names of the payload: %aK are its block arguments, %vN the values it computes. */
typedef struct name {
  char s[16];
} name_t;

typedef struct body {
  dit_strbuf_t *b;
  int v, next;
} body_t;

static name_t fresh(body_t *y) {
  name_t n;
  snprintf(n.s, sizeof n.s, "%%v%d", y->next++);
  return n;
}

static name_t fconst(body_t *y, float f) {
  name_t r = fresh(y);
  /* The bit pattern, not a decimal: the constant must be the float the C kernels use. */
  dit_strbuf_printf(y->b, "    %s = arith.constant dense<0x%08" PRIX32 "> : vector<%dxf32>\n", r.s, f32_bits(f), y->v);
  return r;
}

static name_t iconst(body_t *y, uint32_t u) {
  name_t r = fresh(y);
  dit_strbuf_printf(y->b, "    %s = arith.constant dense<%" PRIu32 "> : vector<%dxi32>\n", r.s, u, y->v);
  return r;
}

static name_t op1(body_t *y, const char *op, name_t a) {
  name_t r = fresh(y);
  dit_strbuf_printf(y->b, "    %s = %s %s : vector<%dxf32>\n", r.s, op, a.s, y->v);
  return r;
}

static name_t op2(body_t *y, const char *op, name_t a, name_t c, const char *ty) {
  name_t r = fresh(y);
  /* NVRTC contracts a multiply feeding an add into one fma (its default --fmad=true); the
   * same permission here gives the same roundings as the NVRTC kernels. */
  int contract = !strcmp(op, "arith.addf") || !strcmp(op, "arith.mulf");
  dit_strbuf_printf(y->b, "    %s = %s %s, %s%s : vector<%dx%s>\n", r.s, op, a.s, c.s, contract ? " fastmath<contract>" : "", y->v, ty);
  return r;
}

static name_t cast(body_t *y, const char *op, name_t a, const char *from, const char *to) {
  name_t r = fresh(y);
  dit_strbuf_printf(y->b, "    %s = %s %s : vector<%dx%s> to vector<%dx%s>\n", r.s, op, a.s, y->v, from, y->v, to);
  return r;
}

static name_t from_bf16(body_t *y, name_t h, name_t c16) {
  name_t w = cast(y, "arith.extui", h, "i16", "i32");
  return cast(y, "arith.bitcast", op2(y, "arith.shli", w, c16, "i32"), "i32", "f32");
}

/* Round to nearest even; a NaN keeps its sign and top payload bits and becomes quiet. */
static name_t to_bf16(body_t *y, name_t f, name_t c16) {
  name_t u = cast(y, "arith.bitcast", f, "f32", "i32");
  name_t mag = op2(y, "arith.andi", u, iconst(y, 0x7fffffffu), "i32");
  name_t nan = fresh(y);
  name_t inf = iconst(y, 0x7f800000u);
  dit_strbuf_printf(y->b, "    %s = arith.cmpi ugt, %s, %s : vector<%dxi32>\n", nan.s, mag.s, inf.s, y->v);
  name_t hi = op2(y, "arith.shrui", u, c16, "i32");
  name_t lsb = op2(y, "arith.andi", hi, iconst(y, 1), "i32");
  name_t r = op2(y, "arith.addi", op2(y, "arith.addi", u, iconst(y, 0x7fffu), "i32"), lsb, "i32");
  r = op2(y, "arith.shrui", r, c16, "i32");
  name_t quiet = op2(y, "arith.ori", hi, iconst(y, 0x40u), "i32");
  name_t sel = fresh(y);
  dit_strbuf_printf(y->b, "    %s = arith.select %s, %s, %s : vector<%dxi1>, vector<%dxi32>\n", sel.s, nan.s, quiet.s, r.s, y->v,
          y->v);
  return cast(y, "arith.trunci", sel, "i32", "i16");
}

static void emit_module(dit_strbuf_t *b, const dit_mlir_ew_spec_t *s, const geom_t *g) {
  dit_strbuf_printf(b, "func.func @dit(%%out: ");
  memref_ir(b, s, g, -1);
  for (int k = 0; k < s->n_in; k++) {
    dit_strbuf_printf(b, ", %%in%d: ", k);
    memref_ir(b, s, g, k);
  }
  dit_strbuf_printf(b, ") {\n  linalg.generic {indexing_maps = [");
  for (int k = 0; k < s->n_in; k++) {
    map_ir(b, s, g, k);
    dit_strbuf_printf(b, ", ");
  }
  map_ir(b, s, g, -1);
  dit_strbuf_printf(b, "], iterator_types = [\"parallel\"]}\n      ins(");
  for (int k = 0; k < s->n_in; k++) dit_strbuf_printf(b, "%s%%in%d", k ? ", " : "", k);
  dit_strbuf_printf(b, " : ");
  for (int k = 0; k < s->n_in; k++) {
    if (k) dit_strbuf_printf(b, ", ");
    memref_ir(b, s, g, k);
  }
  dit_strbuf_printf(b, ") outs(%%out : ");
  memref_ir(b, s, g, -1);
  dit_strbuf_printf(b, ") {\n  ^bb0(");
  for (int k = 0; k < s->n_in; k++) dit_strbuf_printf(b, "%%a%d: vector<%dx%s>, ", k, g->v, elem_ir(s->in[k].dtype));
  dit_strbuf_printf(b, "%%o: vector<%dx%s>):\n", g->v, elem_ir(s->out_dtype));

  body_t y = {b, g->v, 0};
  name_t c16 = {{0}};
  if (g->any_bf16) c16 = iconst(&y, 16);
  name_t x[DIT_MLIR_EW_MAX_IN];
  for (int k = 0; k < s->n_in; k++) {
    snprintf(x[k].s, sizeof x[k].s, "%%a%d", k);
    if (s->in[k].dtype == DIT_BF16) x[k] = from_bf16(&y, x[k], c16);
  }
  /* Operation order follows compiler/kernels/dit_kernels.cu, so results can match it. */
  name_t acc = x[0];
  for (int j = 0; j < s->n_steps; j++) {
    const dit_mlir_ew_step_t *st = &s->steps[j];
    switch (st->op) {
      case DIT_MLIR_EW_SILU: {
        name_t e = op1(&y, "math.exp", op1(&y, "arith.negf", acc));
        acc = op2(&y, "arith.divf", acc, op2(&y, "arith.addf", fconst(&y, 1.f), e, "f32"), "f32");
        break;
      }
      case DIT_MLIR_EW_GELU_TANH: {
        name_t c = op2(&y, "arith.mulf", fconst(&y, 0.044715f), acc, "f32");
        c = op2(&y, "arith.mulf", op2(&y, "arith.mulf", c, acc, "f32"), acc, "f32");
        name_t in = op2(&y, "arith.mulf", fconst(&y, 0.7978845608028654f), op2(&y, "arith.addf", acc, c, "f32"), "f32");
        name_t t = op2(&y, "arith.addf", fconst(&y, 1.f), op1(&y, "math.tanh", in), "f32");
        acc = op2(&y, "arith.mulf", op2(&y, "arith.mulf", fconst(&y, 0.5f), acc, "f32"), t, "f32");
        break;
      }
      case DIT_MLIR_EW_ADD: acc = op2(&y, "arith.addf", acc, x[st->a], "f32"); break;
      case DIT_MLIR_EW_GATED_ADD:
        acc = op2(&y, "arith.addf", acc, op2(&y, "arith.mulf", x[st->a], x[st->b], "f32"), "f32");
        break;
    }
  }
  if (s->out_dtype == DIT_BF16) acc = to_bf16(&y, acc, c16);
  dit_strbuf_printf(b, "    linalg.yield %s : vector<%dx%s>\n  }\n  return\n}\n", acc.s, g->v, elem_ir(s->out_dtype));
}

static const char *cuda_root(void) {
  const char *env = getenv("DITC_CUDA_ROOT");
  return env && *env ? env : DIT_MLIR_CUDA_ROOT;
}

/* Phase A: linalg -> parallel loops tiled by BLOCK (outer loop -> blocks, inner -> threads;
 * the tail becomes an if, not a min, so the block size stays a constant) -> gpu.launch. */
static const char PHASE_A[] =
    "builtin.module(func.func(convert-linalg-to-parallel-loops,"
    " scf-parallel-loop-tiling{parallel-loop-tile-sizes=" STR(BLOCK) " no-min-max-bounds=1},"
    " gpu-map-parallel-loops, convert-parallel-loops-to-gpu, canonicalize))";
/* Phase B: constants into the launch body, then outlining into gpu.func @dit_kernel. */
static const char PHASE_B[] = "builtin.module(gpu-launch-sink-index-computations, gpu-kernel-outlining, canonicalize, cse)";
/* Phase C: what gpu-lower-to-nvvm-pipeline does to the device side, spelled out so that
 * gpu-module-to-binary gets the toolkit (libdevice) path explicitly instead of from
 * $CUDA_HOME: without it, MLIR 19 leaves libdevice calls unresolved in the PTX. */
static const char PHASE_C_FMT[] =
    "builtin.module(gpu.module(lower-affine, convert-scf-to-cf, strip-debuginfo,"
    " convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1}, canonicalize, cse, reconcile-unrealized-casts),"
    " nvvm-attach-target{chip=%s features=%s O=3}, gpu-module-to-binary{format=isa toolkit=%s})";

/* ---- MLIR ---- */

static pthread_once_t passes_once = PTHREAD_ONCE_INIT;
static void register_passes(void) { mlirRegisterAllPasses(); }

static void to_buf(MlirStringRef s, void *user) { dit_strbuf_put(user, s.data, s.length); }

static MlirStringRef sref(const char *s) { return mlirStringRefCreateFromCString(s); }

static int op_is(MlirOperation op, const char *name) {
  if (mlirOperationIsNull(op)) return 0;
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(op));
  return n.length == strlen(name) && !memcmp(n.data, name, n.length);
}

static void diag_append(dit_strbuf_t *b, MlirDiagnostic d, int depth) {
  static const char *const sev[] = {"error", "warning", "note", "remark"};
  if (b->len > DIAG_CAP) return;
  unsigned k = (unsigned)mlirDiagnosticGetSeverity(d);
  dit_strbuf_printf(b, "\n%*s%s: ", 2 * depth, "", k < 4 ? sev[k] : "diagnostic");
  dit_strbuf_t loc = {0};
  mlirLocationPrint(mlirDiagnosticGetLocation(d), to_buf, &loc);
  if (loc.p && strcmp(loc.p, "loc(unknown)")) dit_strbuf_printf(b, "%s: ", loc.p);
  free(loc.p);
  mlirDiagnosticPrint(d, to_buf, b);
  for (intptr_t i = 0; i < mlirDiagnosticGetNumNotes(d); i++) diag_append(b, mlirDiagnosticGetNote(d, i), depth + 1);
}

/* Collects every diagnostic instead of letting MLIR print it to stderr. */
static MlirLogicalResult on_diag(MlirDiagnostic d, void *user) {
  diag_append(user, d, 0);
  return mlirLogicalResultSuccess();
}

static dit_status_t run_phase(MlirContext ctx, MlirModule m, const char *pipeline, const char *what, dit_strbuf_t *diag) {
  MlirPassManager pm = mlirPassManagerCreateOnOperation(ctx, sref("builtin.module"));
  dit_strbuf_t perr = {0};
  dit_status_t s = DIT_OK;
  diag->len = 0;
  if (diag->p) diag->p[0] = 0;
  if (mlirLogicalResultIsFailure(mlirParsePassPipeline(mlirPassManagerGetAsOpPassManager(pm), sref(pipeline), to_buf, &perr)))
    s = DIT_ERR(INTERNAL, "MLIR: mlirParsePassPipeline rejected the %s pipeline '%s': %s", what, pipeline, perr.p ? perr.p : "");
  else if (mlirLogicalResultIsFailure(mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(m))))
    s = DIT_ERR(INTERNAL, "MLIR: mlirPassManagerRunOnOp failed in the %s pipeline '%s':%.*s", what, pipeline, DIAG_CAP,
                diag->p && diag->len ? diag->p : " (no diagnostic)");
  free(perr.p);
  mlirPassManagerDestroy(pm);
  return s;
}

typedef struct finder {
  const char *name;
  MlirOperation op;
  int count;
} finder_t;

static MlirWalkResult find_cb(MlirOperation op, void *user) {
  finder_t *f = user;
  if (op_is(op, f->name) && !f->count++) f->op = op;
  return MlirWalkResultAdvance;
}

static dit_status_t find_one(MlirModule m, const char *name, const char *when, MlirOperation *out) {
  finder_t f = {name, {NULL}, 0};
  mlirOperationWalk(mlirModuleGetOperation(m), find_cb, &f, MlirWalkPreOrder);
  if (f.count != 1) return DIT_ERR(INTERNAL, "MLIR: expected one %s %s, found %d", name, when, f.count);
  *out = f.op;
  return DIT_OK;
}

/* The entry block of func @dit, whose arguments are out, in[0], ... */
static dit_status_t host_args(MlirOperation inside, int n_params, MlirBlock *out) {
  MlirOperation func = mlirOperationGetParentOperation(inside);
  if (!op_is(func, "func.func")) return DIT_ERR(INTERNAL, "MLIR: the kernel launch is not directly inside func @dit");
  MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  if (mlirBlockGetNumArguments(b) != n_params)
    return DIT_ERR(INTERNAL, "MLIR: func @dit has %d arguments, expected %d", (int)mlirBlockGetNumArguments(b), n_params);
  *out = b;
  return DIT_OK;
}

/* Outlining orders kernel parameters by first use inside the launch, which puts the output
 * last. Touching every buffer first, output first, gives NVRTC's (out, in...) order; an
 * alignment assumption is the touch that also tells LLVM something true. */
static dit_status_t capture_in_order(MlirContext ctx, MlirModule m, const dit_mlir_ew_spec_t *s, const geom_t *g) {
  MlirOperation launch;
  DIT_RETURN_IF(find_one(m, "gpu.launch", "after mapping the parallel loops to the GPU", &launch));
  int n_params = 1 + s->n_in;
  MlirBlock args;
  DIT_RETURN_IF(host_args(launch, n_params, &args));
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(launch, 0));
  MlirLocation loc = mlirLocationUnknownGet(ctx);
  for (int p = 0; p < n_params; p++) {
    dit_dtype_t t = p ? s->in[p - 1].dtype : s->out_dtype;
    int64_t align = (int64_t)g->v * (int64_t)dit_dtype_size(t);
    if (align > MAX_ACCESS) align = MAX_ACCESS;
    MlirValue arg = mlirBlockGetArgument(args, p);
    MlirOperationState st = mlirOperationStateGet(sref("memref.assume_alignment"), loc);
    mlirOperationStateAddOperands(&st, 1, &arg);
    MlirNamedAttribute attr =
        mlirNamedAttributeGet(mlirIdentifierGet(ctx, sref("alignment")), mlirIntegerAttrGet(mlirIntegerTypeGet(ctx, 32), align));
    mlirOperationStateAddAttributes(&st, 1, &attr);
    MlirOperation op = mlirOperationCreate(&st);
    if (mlirOperationIsNull(op)) return DIT_ERR(INTERNAL, "MLIR: mlirOperationCreate(memref.assume_alignment) failed");
    mlirBlockInsertOwnedOperation(body, p, op);
  }
  return DIT_OK;
}

static int const_index(MlirValue v, int64_t *out) {
  if (!mlirValueIsAOpResult(v)) return 0;
  MlirOperation d = mlirOpResultGetOwner(v);
  if (!op_is(d, "arith.constant")) return 0;
  MlirAttribute a = mlirOperationGetAttributeByName(d, sref("value"));
  if (mlirAttributeIsNull(a) || !mlirAttributeIsAInteger(a)) return 0;
  *out = mlirIntegerAttrGetValueInt(a);
  return 1;
}

/* Reads the launch shape and entry the lowering chose, and checks the parameter order. */
static dit_status_t read_launch(MlirModule m, int n_params, dit_mlir_kernel_t *k) {
  MlirOperation lf;
  DIT_RETURN_IF(find_one(m, "gpu.launch_func", "after kernel outlining", &lf));
  /* Operands: grid x y z, block x y z, then the kernel's; anything more (async tokens,
   * clusters, dynamic shared memory) would change the calling convention. */
  intptr_t nops = mlirOperationGetNumOperands(lf);
  if (nops != 6 + n_params)
    return DIT_ERR(INTERNAL, "MLIR: the kernel launch has %d operands, expected 6 launch sizes + %d pointers", (int)nops, n_params);
  MlirBlock args;
  DIT_RETURN_IF(host_args(lf, n_params, &args));
  for (int p = 0; p < n_params; p++) {
    MlirValue v = mlirOperationGetOperand(lf, 6 + p);
    if (!mlirValueIsABlockArgument(v) || !mlirBlockEqual(mlirBlockArgumentGetOwner(v), args) ||
        mlirBlockArgumentGetArgNumber(v) != p)
      return DIT_ERR(INTERNAL, "MLIR: kernel parameter %d is not buffer %d (out, in...) of func @dit", p, p);
  }
  for (int i = 0; i < 6; i++) {
    int64_t x = 0;
    if (!const_index(mlirOperationGetOperand(lf, i), &x) || x < 1 || x > INT32_MAX)
      return DIT_ERR(INTERNAL, "MLIR: launch %s size %c is not a constant in 1..2^31-1", i < 3 ? "grid" : "block", "xyz"[i % 3]);
    if (i < 3) k->grid[i] = (uint32_t)x;
    else k->block[i - 3] = (uint32_t)x;
  }
  MlirAttribute sym = mlirOperationGetAttributeByName(lf, sref("kernel"));
  if (mlirAttributeIsNull(sym) || !mlirAttributeIsASymbolRef(sym))
    return DIT_ERR(INTERNAL, "MLIR: gpu.launch_func has no kernel symbol");
  MlirStringRef leaf = mlirSymbolRefAttrGetLeafReference(sym);
  if (leaf.length == 0 || leaf.length >= sizeof k->entry)
    return DIT_ERR(INTERNAL, "MLIR: kernel symbol '%.*s' does not fit %zu bytes", (int)leaf.length, leaf.data, sizeof k->entry);
  memcpy(k->entry, leaf.data, leaf.length);
  k->entry[leaf.length] = 0;
  return DIT_OK;
}

static dit_status_t extract_ptx(MlirModule m, char **out, size_t *out_size) {
  MlirOperation bin;
  DIT_RETURN_IF(find_one(m, "gpu.binary", "after gpu-module-to-binary", &bin));
  MlirAttribute objs = mlirOperationGetAttributeByName(bin, sref("objects"));
  if (mlirAttributeIsNull(objs) || !mlirAttributeIsAArray(objs) || mlirArrayAttrGetNumElements(objs) != 1)
    return DIT_ERR(INTERNAL, "MLIR: gpu.binary does not hold exactly one object");
  MlirAttribute obj = mlirArrayAttrGetElement(objs, 0);
  if (!mlirAttributeIsAGPUObjectAttr(obj)) return DIT_ERR(INTERNAL, "MLIR: gpu.binary's object is not a #gpu.object");
  MlirStringRef t = mlirGPUObjectAttrGetObject(obj);
  size_t n = t.length;
  while (n && t.data[n - 1] == 0) n--; /* the serializer keeps the C string's terminator */
  char *p = malloc(n + 1);
  if (!p) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory (%zu bytes of PTX)", n);
  memcpy(p, t.data, n);
  p[n] = 0;
  *out = p;
  *out_size = n;
  return DIT_OK;
}

/* The entry must take exactly n_params pointers and the PTX must be self-contained. */
static dit_status_t check_ptx(const char *ptx, const dit_mlir_kernel_t *k) {
  char head[64];
  snprintf(head, sizeof head, ".visible .entry %s(", k->entry);
  const char *e = strstr(ptx, head);
  if (!e) return DIT_ERR(INTERNAL, "MLIR: the PTX has no '%s'", head);
  const char *close = strchr(e, ')');
  int params = 0;
  for (const char *q = e; close && (q = strstr(q, ".param .u64 ")) && q < close; q++) params++;
  if (params != k->n_params)
    return DIT_ERR(INTERNAL, "MLIR: entry %s takes %d 64-bit parameters, expected %d", k->entry, params, k->n_params);
  const char *ext = strstr(ptx, ".extern .func");
  if (ext) {
    const char *nl = strchr(ext, '\n');
    return DIT_ERR(INTERNAL, "MLIR: the PTX calls an undefined function (is libdevice missing?): %.*s",
                   (int)(nl ? nl - ext : 80), ext);
  }
  return DIT_OK;
}
#endif

dit_status_t dit_mlir_elementwise_ptx(const dit_mlir_ew_spec_t *spec, const char *sm_arch, dit_mlir_kernel_t *out_kernel,
                                      char **out_ptx, size_t *out_size, char **out_mlir_text) {
  *out_ptx = NULL;
  *out_size = 0;
  if (out_mlir_text) *out_mlir_text = NULL;
  memset(out_kernel, 0, sizeof *out_kernel);
#if !DIT_HAVE_MLIR
  (void)spec, (void)sm_arch;
  return DIT_ERR(UNAVAILABLE, "elementwise kernel: this ditc was built without MLIR (DIT_MLIR=OFF)");
#else
  geom_t g;
  const char *feature = NULL;
  DIT_RETURN_IF(check_spec(spec, &g));
  DIT_RETURN_IF(arch_ptx_feature(sm_arch, &feature));
  const char *root = cuda_root();
  char libdevice[4096];
  snprintf(libdevice, sizeof libdevice, "%s/nvvm/libdevice/libdevice.10.bc", root);
  if (!dit_path_exists(libdevice))
    return DIT_ERR(UNAVAILABLE, "elementwise kernel: %s not found: MLIR codegen needs the CUDA toolkit's libdevice (set DITC_CUDA_ROOT)",
                   libdevice);
  dit_strbuf_t text = {0}, diag = {0}, phase_c = {0}, dump = {0};
  emit_module(&text, spec, &g);
  dit_strbuf_printf(&phase_c, PHASE_C_FMT, sm_arch, feature, root);
  if (text.oom || phase_c.oom) {
    free(text.p);
    free(phase_c.p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }

  pthread_once(&passes_once, register_passes);
  MlirDialectRegistry reg = mlirDialectRegistryCreate();
  mlirRegisterAllDialects(reg);
  /* One thread: deterministic diagnostics, and ditc compiles kernels in parallel itself. */
  MlirContext ctx = mlirContextCreateWithRegistry(reg, false);
  mlirDialectRegistryDestroy(reg);
  mlirRegisterAllLLVMTranslations(ctx);
  mlirContextAttachDiagnosticHandler(ctx, on_diag, &diag, NULL);

  dit_status_t s = DIT_OK;
  char *ptx = NULL;
  size_t ptx_size = 0;
  MlirModule m = mlirModuleCreateParse(ctx, mlirStringRefCreate(text.p, text.len));
  if (mlirModuleIsNull(m))
    s = DIT_ERR(INTERNAL, "MLIR: mlirModuleCreateParse rejected the generated module:%.*s\n%s", DIAG_CAP, diag.p ? diag.p : "", text.p);
  if (!s) s = run_phase(ctx, m, PHASE_A, "parallel-loops-to-gpu", &diag);
  if (!s) s = capture_in_order(ctx, m, spec, &g);
  if (!s) s = run_phase(ctx, m, PHASE_B, "outlining", &diag);
  out_kernel->n_params = 1 + spec->n_in;
  if (!s) s = read_launch(m, out_kernel->n_params, out_kernel);
  if (!s) s = run_phase(ctx, m, phase_c.p, "NVVM", &diag);
  if (!s) s = extract_ptx(m, &ptx, &ptx_size);
  if (!s) s = check_ptx(ptx, out_kernel);
  if (!mlirModuleIsNull(m)) mlirModuleDestroy(m);
  mlirContextDestroy(ctx);

  if (!s && out_mlir_text) {
    dit_strbuf_printf(&dump, "// ditc elementwise kernel, %s\n// phase 1: %s\n", sm_arch, PHASE_A);
    dit_strbuf_printf(&dump, "// then memref.assume_alignment of out, in... first in the launch body (parameter order)\n");
    dit_strbuf_printf(&dump, "// phase 2: %s\n// phase 3: %s\n%s", PHASE_B, phase_c.p, text.p);
    if (dump.oom) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  free(text.p);
  free(diag.p);
  free(phase_c.p);
  if (s) {
    free(ptx);
    free(dump.p);
    memset(out_kernel, 0, sizeof *out_kernel);
    return s;
  }
  out_kernel->smem = 0;
  out_kernel->align = g.align;
  out_kernel->vector_width = g.v;
  *out_ptx = ptx;
  *out_size = ptx_size;
  if (out_mlir_text) *out_mlir_text = dump.p;
  return DIT_OK;
#endif
}

dit_status_t dit_mlir_toolchain(cJSON *tc) {
#if DIT_HAVE_MLIR
  unsigned major = 0, minor = 0, patch = 0;
  LLVMGetVersion(&major, &minor, &patch);
  char v[48];
  snprintf(v, sizeof v, "%u.%u.%u", major, minor, patch);
  if (!cJSON_AddStringToObject(tc, "mlir", v)) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  return DIT_OK;
#else
  (void)tc;
  return DIT_ERR(UNAVAILABLE, "this ditc was built without MLIR (DIT_MLIR=OFF)");
#endif
}
