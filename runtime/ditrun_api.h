/* ditrun embedding API: open a compiled bundle, bind inputs and outputs, run forwards.
 *
 * The public face of libditrun.so (libditrun.so.<DITRUN_API_VERSION_MAJOR>), for programs and
 * language bindings that embed the runtime; the ditrun command line uses the internal API
 * (runtime/ditrun.h) that this one wraps, so both run the same executor.
 *
 * Versioning: DITRUN_API_VERSION is the version this header declares; ditrun_api_version()
 * the library's. The major version is the library's SONAME: it changes when a declaration
 * below changes incompatibly. A minor version only adds functions or appends fields at the end
 * of structures that carry their own size (ditrun_open_options.size), so a program built
 * against an older minor runs on a newer library.
 *
 * Errors: every call that can fail returns a ditrun_status pointer: NULL on success, else a
 * status the caller owns and frees with ditrun_status_free, carrying a code (ditrun_code, the
 * runtime's canonical codes) and a message that names the input, field or file and the values
 * expected and found. Nothing is printed.
 *
 * Ownership: the caller owns a handle from ditrun_bundle_open until ditrun_bundle_close, and
 * a string from a *_json call until ditrun_free. Names and shapes a query returns are borrowed
 * from the handle and valid until it is closed. There is no global state: handles are
 * independent, and each may be used by one thread at a time.
 *
 * Memory: a tensor is host memory or device memory (a CUDA device pointer of the bundle's
 * device, in its primary context: the one torch and the CUDA runtime use). A forward's kernels
 * read and write the bundle's own buffers, at addresses a captured CUDA graph records, so a
 * caller's tensor is copied into an input buffer (host memory with conversion between float
 * dtypes and from integers; device memory as is, device to device on the caller's stream, never
 * through the host) and outputs are copied out the same way, or read in place as a view.
 */
#ifndef DITRUN_API_H
#define DITRUN_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DITRUN_API_VERSION_MAJOR 1
#define DITRUN_API_VERSION_MINOR 0
#define DITRUN_API_VERSION (DITRUN_API_VERSION_MAJOR * 1000 + DITRUN_API_VERSION_MINOR)

/* The library's DITRUN_API_VERSION (a program checks the major it was built for). */
int ditrun_api_version(void);

/* ---- status ---- */

typedef enum ditrun_code {
  DITRUN_OK = 0,
  DITRUN_INVALID_ARGUMENT = 1,
  DITRUN_NOT_FOUND = 2,
  DITRUN_ALREADY_EXISTS = 3,
  DITRUN_OUT_OF_RANGE = 4,
  DITRUN_DATA_LOSS = 5,
  DITRUN_FAILED_PRECONDITION = 6,
  DITRUN_UNIMPLEMENTED = 7,
  DITRUN_RESOURCE_EXHAUSTED = 8,
  DITRUN_UNAVAILABLE = 9,
  DITRUN_INTERNAL = 10,
  DITRUN_IO = 11,
  DITRUN_DEADLINE_EXCEEDED = 12,
  DITRUN_ABORTED = 13,
} ditrun_code;

typedef struct ditrun_status ditrun_status;
/* DITRUN_OK for NULL. */
ditrun_code ditrun_status_code(const ditrun_status *s);
/* Borrowed, valid until the status is freed; "OK" for NULL. */
const char *ditrun_status_message(const ditrun_status *s);
/* The code's name, e.g. "INVALID_ARGUMENT". */
const char *ditrun_code_name(ditrun_code code);
void ditrun_status_free(ditrun_status *s);

/* Frees a string the library returned. */
void ditrun_free(void *p);

/* ---- tensors ---- */

typedef enum ditrun_dtype {
  DITRUN_F32 = 0,
  DITRUN_BF16 = 1,
  DITRUN_F16 = 2,
  DITRUN_I64 = 3,
  DITRUN_I32 = 4,
  DITRUN_U8 = 5, /* bool and uint8 masks */
} ditrun_dtype;

/* Our short names ("f32", "bf16", "f16", "i64", "i32", "u8") and the frameworks' spellings
 * ("float32", "bfloat16", "float16", "int64", "int32", "uint8", "bool"); INVALID_ARGUMENT
 * naming the accepted ones for anything else (float64, ...). */
ditrun_status *ditrun_dtype_parse(const char *name, ditrun_dtype *out);

typedef enum ditrun_memory {
  DITRUN_HOST = 0,
  DITRUN_DEVICE = 1, /* a device pointer of the bundle's backend (CUDA) */
} ditrun_memory;

#define DITRUN_MAX_RANK 8

/* A caller's tensor: contiguous, row-major. */
typedef struct ditrun_tensor {
  void *data;
  ditrun_dtype dtype;
  ditrun_memory memory;
  int rank;
  int64_t dims[DITRUN_MAX_RANK];
} ditrun_tensor;

/* ---- opening ---- */

typedef struct ditrun_bundle ditrun_bundle;

typedef struct ditrun_open_options {
  size_t size;         /* sizeof(ditrun_open_options): set by ditrun_open_options_init */
  const char *backend; /* "cpu", "cuda", or NULL for the bundle's target */
  int device;          /* GPU ordinal */
  int threads;         /* CPU threads; <= 0: all online CPUs */
  int graph;           /* capture the forward once as a CUDA graph and replay it: 0 auto (the
                          default: where a graph applies, i.e. one rank, a GPU backend, no
                          offload streaming, no attention-state reuse; none elsewhere, without
                          an error), 1 on (an error where a graph cannot be used), -1 off */
  const char *store;   /* a local store directory or remote store URL: path_or_id is then an
                          identity; NULL: path_or_id is a bundle directory or .ditb archive */
  const char *cache;   /* local store receiving pulls and archives (NULL: the runtime's
                          default, $DITC_STORE or ~/.cache/ditc/store) */
  const char *expert;  /* a two-expert bundle: "transformer" or "transformer_2", the expert the
                          forwards run (only that one is loaded); NULL: "transformer" with both
                          loaded (ditrun_bundle_select_expert switches) */
} ditrun_open_options;

/* Defaults: the bundle's backend, device 0, all CPUs, a graph where it applies (graph 0), no store. */
void ditrun_open_options_init(ditrun_open_options *o);

/* Opens and fully verifies a bundle (every blob's size and hash), checks it fits this process,
 * and binds its memory. opts may be NULL (the defaults). Caller owns *out. */
ditrun_status *ditrun_bundle_open(const char *path_or_id, const ditrun_open_options *opts, ditrun_bundle **out);
/* Releases everything the handle holds (NULL: nothing). */
void ditrun_bundle_close(ditrun_bundle *b);

/* ---- signature ---- */

typedef struct ditrun_tensor_info {
  const char *name; /* borrowed from the handle */
  ditrun_dtype dtype;
  int rank;
  int64_t dims[DITRUN_MAX_RANK];
} ditrun_tensor_info;

size_t ditrun_bundle_num_inputs(const ditrun_bundle *b);
size_t ditrun_bundle_num_outputs(const ditrun_bundle *b);
/* Input or output i (OUT_OF_RANGE past the count). */
ditrun_status *ditrun_bundle_input(const ditrun_bundle *b, size_t i, ditrun_tensor_info *out);
ditrun_status *ditrun_bundle_output(const ditrun_bundle *b, size_t i, ditrun_tensor_info *out);
/* The bundle's description as JSON text (caller frees with ditrun_free): {"identity",
 * "family", "class", "variant", "target", "backend" (the one running it), "dtype", "shape",
 * "topology", "experts" (names; [] for one transformer), "expert" (the active one), "config"
 * (the normalized compile inputs: model config, shape, options), "generate" (the pipeline
 * contract, or null), "inputs" and "outputs" (name, dtype, shape)}. */
ditrun_status *ditrun_bundle_describe_json(const ditrun_bundle *b, char **out);

/* A two-expert bundle opened with both experts: the expert the next forwards run. Inputs are
 * per expert: bind them after selecting. */
ditrun_status *ditrun_bundle_select_expert(ditrun_bundle *b, const char *name);

/* ---- running ---- */

/* The input named `name` takes t (NULL: unbound). Host memory is copied in now (converted to the bundle's
 * dtype: float to float, integers to floats or integers in range; a [B] timestep broadcast
 * over the tokens of a per-token timestep) and may be reused at once. Device memory must have
 * the bundle's dtype and is copied at the next ditrun_forward, on its stream: it must stay
 * valid and unchanged until then. Shapes must equal the bundle's; the error names the input,
 * the expected and the found shape. */
ditrun_status *ditrun_bind_input(ditrun_bundle *b, const char *name, const ditrun_tensor *t);
/* The output named `name` is written to t by every following ditrun_forward (host: converted
 * to t's float dtype; device: the bundle's dtype, on the forward's stream), until it is bound
 * again or unbound with t NULL. t's memory must stay valid while bound. */
ditrun_status *ditrun_bind_output(ditrun_bundle *b, const char *name, const ditrun_tensor *t);

/* One forward pass over the bound inputs (every input must be bound: FAILED_PRECONDITION naming
 * the first that is not; a bound input stays bound for the following forwards). stream: a
 * CUstream of the bundle's device, NULL for CUDA's legacy default stream (and on the CPU
 * backend, which takes no stream). Device inputs are copied on it, the forward's work is
 * ordered after everything enqueued on it so far, and the bound device outputs are copied on it
 * after the forward, so a caller that launches on the same stream needs no synchronization.
 * The call returns when the forward finished (the host waits for the bundle's own stream, not
 * for `stream`). Work the caller enqueues on another stream is ordered after the output copies
 * only through `stream`, and so is the next forward: give each forward the same stream, or
 * order the streams yourself. */
ditrun_status *ditrun_forward(ditrun_bundle *b, void *stream);

/* A view of the named output of the latest forward, in the bundle's memory (host memory on the
 * CPU backend, device memory on CUDA; *t says which), valid until the next forward or close. */
ditrun_status *ditrun_output_view(ditrun_bundle *b, const char *name, ditrun_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
