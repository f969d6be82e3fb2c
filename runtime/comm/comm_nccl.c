/* NCCL through dlopen: the few entry points the collectives need, declared here with NCCL 2's
 * ABI (stable since 2.0: the id is 128 bytes, the enums below are fixed numbers), so building
 * needs no NCCL headers. */
#include "runtime/comm/comm_nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nccl_comm *nccl_comm_t;
typedef struct { char internal[DIT_NCCL_ID_BYTES]; } nccl_id_t;
typedef int nccl_result_t; /* 0 success, 7 in progress */
enum { NCCL_UINT8 = 1, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9, NCCL_FLOAT16 = 6, NCCL_SUM = 0 };

static struct {
  void *lib;
  int version;
  nccl_result_t (*get_version)(int *);
  nccl_result_t (*get_unique_id)(nccl_id_t *);
  nccl_result_t (*init_rank)(nccl_comm_t *, int, nccl_id_t, int);
  nccl_result_t (*split)(nccl_comm_t, int, int, nccl_comm_t *, void *);
  nccl_result_t (*count)(nccl_comm_t, int *);
  nccl_result_t (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, void *);
  nccl_result_t (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, void *);
  nccl_result_t (*send)(const void *, size_t, int, int, nccl_comm_t, void *);
  nccl_result_t (*recv)(void *, size_t, int, int, nccl_comm_t, void *);
  nccl_result_t (*group_start)(void);
  nccl_result_t (*group_end)(void);
  nccl_result_t (*async_error)(nccl_comm_t, nccl_result_t *);
  nccl_result_t (*abort)(nccl_comm_t);
  nccl_result_t (*destroy)(nccl_comm_t);
  const char *(*error_string)(nccl_result_t);
  const char *(*last_error)(nccl_comm_t);
} N;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512];

struct dit_ncomm {
  nccl_comm_t comm;
  int size;
};

static void load_library(void) {
  const char *path = getenv("DIT_NCCL_LIBRARY");
  N.lib = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!N.lib) {
    snprintf(load_error, sizeof load_error, "NCCL is not available (%s): install NCCL 2 or name libnccl.so.2 in DIT_NCCL_LIBRARY",
             dlerror());
    return;
  }
  struct { void **fn; const char *name; } syms[] = {
      {(void **)&N.get_version, "ncclGetVersion"},   {(void **)&N.get_unique_id, "ncclGetUniqueId"},
      {(void **)&N.init_rank, "ncclCommInitRank"},   {(void **)&N.split, "ncclCommSplit"},
      {(void **)&N.count, "ncclCommCount"},          {(void **)&N.all_reduce, "ncclAllReduce"},
      {(void **)&N.all_gather, "ncclAllGather"},     {(void **)&N.send, "ncclSend"},
      {(void **)&N.recv, "ncclRecv"},                {(void **)&N.group_start, "ncclGroupStart"},
      {(void **)&N.group_end, "ncclGroupEnd"},       {(void **)&N.async_error, "ncclCommGetAsyncError"},
      {(void **)&N.abort, "ncclCommAbort"},          {(void **)&N.destroy, "ncclCommDestroy"},
      {(void **)&N.error_string, "ncclGetErrorString"}, {(void **)&N.last_error, "ncclGetLastError"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    if (!(*syms[i].fn = dlsym(N.lib, syms[i].name))) {
      snprintf(load_error, sizeof load_error, "NCCL library has no %s (ncclCommSplit needs NCCL 2.18 or later)", syms[i].name);
      dlclose(N.lib);
      N.lib = NULL;
      return;
    }
  }
  if (N.get_version(&N.version) != 0) N.version = 0;
}

dit_status_t dit_nccl_load(int *version) {
  pthread_once(&load_once, load_library);
  if (!N.lib) return DIT_ERR(UNAVAILABLE, "%s", load_error);
  if (version) *version = N.version;
  return DIT_OK;
}

static dit_status_t check(nccl_result_t r, nccl_comm_t c, const char *what) {
  if (r == 0) return DIT_OK;
  const char *last = c && N.last_error ? N.last_error(c) : NULL;
  return DIT_ERR(UNAVAILABLE, "%s: %s%s%s", what, N.error_string(r), last && *last ? ": " : "", last ? last : "");
}

dit_status_t dit_nccl_unique_id(unsigned char id[DIT_NCCL_ID_BYTES]) {
  DIT_RETURN_IF(dit_nccl_load(NULL));
  nccl_id_t u;
  DIT_RETURN_IF(check(N.get_unique_id(&u), NULL, "ncclGetUniqueId"));
  memcpy(id, u.internal, DIT_NCCL_ID_BYTES);
  return DIT_OK;
}

static dit_status_t wrap(nccl_comm_t comm, dit_ncomm_t **out) {
  dit_ncomm_t *c = calloc(1, sizeof *c);
  if (!c) {
    N.destroy(comm);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  c->comm = comm;
  if (N.count(comm, &c->size) != 0) c->size = 0;
  *out = c;
  return DIT_OK;
}

dit_status_t dit_ncomm_create(const unsigned char id[DIT_NCCL_ID_BYTES], int world, int rank, dit_ncomm_t **out) {
  *out = NULL;
  DIT_RETURN_IF(dit_nccl_load(NULL));
  nccl_id_t u;
  memcpy(u.internal, id, DIT_NCCL_ID_BYTES);
  nccl_comm_t comm = NULL;
  DIT_RETURN_IF_ERROR(check(N.init_rank(&comm, world, u, rank), NULL, "ncclCommInitRank"), "rank %d of %d", rank, world);
  return wrap(comm, out);
}

dit_status_t dit_ncomm_split(dit_ncomm_t *c, int color, int key, dit_ncomm_t **out) {
  *out = NULL;
  nccl_comm_t comm = NULL;
  DIT_RETURN_IF(check(N.split(c->comm, color, key, &comm, NULL), c->comm, "ncclCommSplit"));
  if (!comm) return DIT_ERR(INTERNAL, "ncclCommSplit gave no communicator for color %d", color);
  return wrap(comm, out);
}

int dit_ncomm_size(const dit_ncomm_t *c) { return c->size; }

static int nccl_type(dit_dtype_t t) {
  return t == DIT_F32 ? NCCL_FLOAT32 : t == DIT_BF16 ? NCCL_BFLOAT16 : t == DIT_F16 ? NCCL_FLOAT16 : -1;
}

dit_status_t dit_ncomm_allreduce_sum(dit_ncomm_t *c, void *buf, size_t count, dit_dtype_t dtype, void *stream) {
  const int t = nccl_type(dtype);
  if (t < 0) return DIT_ERR(UNIMPLEMENTED, "NCCL all-reduce of %s", dit_dtype_name(dtype));
  return check(N.all_reduce(buf, buf, count, t, NCCL_SUM, c->comm, stream), c->comm, "ncclAllReduce");
}

dit_status_t dit_ncomm_allgather(dit_ncomm_t *c, const void *send, void *recv, size_t bytes, void *stream) {
  return check(N.all_gather(send, recv, bytes, NCCL_UINT8, c->comm, stream), c->comm, "ncclAllGather");
}

dit_status_t dit_ncomm_alltoall(dit_ncomm_t *c, const void *send, void *recv, size_t chunk_bytes, int skip, void *stream) {
  DIT_RETURN_IF(check(N.group_start(), c->comm, "ncclGroupStart"));
  dit_status_t s = DIT_OK;
  for (int p = 0; p < c->size && !s; p++) {
    if (p == skip) continue;
    s = check(N.send((const char *)send + (size_t)p * chunk_bytes, chunk_bytes, NCCL_UINT8, p, c->comm, stream), c->comm, "ncclSend");
    if (!s) s = check(N.recv((char *)recv + (size_t)p * chunk_bytes, chunk_bytes, NCCL_UINT8, p, c->comm, stream), c->comm, "ncclRecv");
  }
  dit_status_t e = check(N.group_end(), c->comm, "ncclGroupEnd");
  if (s) {
    dit_status_free(e);
    return s;
  }
  return e;
}

dit_status_t dit_ncomm_shift(dit_ncomm_t *c, const void *send, void *recv, size_t bytes, int me, int distance, void *stream) {
  const int n = c->size;
  if (n < 1 || me < 0 || me >= n || distance < 0 || distance >= n)
    return DIT_ERR(INVALID_ARGUMENT, "NCCL shift: rank %d, distance %d in a communicator of %d (expected 0..%d)", me, distance, n, n - 1);
  /* One send and one receive in one group, also when both go to one peer (2 * distance == n):
   * NCCL matches them by direction, so neither waits for the other. */
  DIT_RETURN_IF(check(N.group_start(), c->comm, "ncclGroupStart"));
  dit_status_t s = check(N.send(send, bytes, NCCL_UINT8, (me + distance) % n, c->comm, stream), c->comm, "ncclSend");
  if (!s) s = check(N.recv(recv, bytes, NCCL_UINT8, (me + n - distance) % n, c->comm, stream), c->comm, "ncclRecv");
  dit_status_t e = check(N.group_end(), c->comm, "ncclGroupEnd");
  if (s) {
    dit_status_free(e);
    return s;
  }
  return e;
}

dit_status_t dit_ncomm_async_error(dit_ncomm_t *c) {
  nccl_result_t r = 0;
  DIT_RETURN_IF(check(N.async_error(c->comm, &r), c->comm, "ncclCommGetAsyncError"));
  return r == 0 || r == 7 ? DIT_OK : check(r, c->comm, "NCCL asynchronous error");
}

void dit_ncomm_abort(dit_ncomm_t *c) {
  if (!c) return;
  N.abort(c->comm);
  free(c);
}

void dit_ncomm_destroy(dit_ncomm_t *c) {
  if (!c) return;
  N.destroy(c->comm);
  free(c);
}
