/* Compares one tensor of two safetensors files with base/parity.h's metrics (max relative
 * error = max|a - b| / max|b|, relative L2, cosine similarity); exits 1 when shapes differ, a
 * value mismatches as NaN or infinity, the error exceeds the limit or the cosine falls below the
 * optional minimum. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/safetensors.h"
#include "base/parity.h"

static int load(const char *path, const char *name, dit_safetensors_t **st, const dit_st_tensor_t **t, float **out) {
  dit_status_t s = dit_safetensors_open(path, st);
  if (s) return dit_status_report(s, "st_compare");
  *t = dit_safetensors_find(*st, name);
  if (!*t) {
    fprintf(stderr, "st_compare: %s has no tensor '%s'\n", path, name);
    return 1;
  }
  size_t n = (size_t)((*t)->nbytes / dit_dtype_size((*t)->dtype));
  void *raw = malloc((*t)->nbytes + 1);
  *out = malloc(n * sizeof **out + 1);
  if (!raw || !*out) {
    free(raw);
    fprintf(stderr, "st_compare: %s: out of memory for '%s'\n", path, name);
    return 1;
  }
  memcpy(raw, (*t)->data, (*t)->nbytes);
  int rc = dit_convert(*out, DIT_F32, raw, (*t)->dtype, n);
  free(raw);
  if (rc) {
    fprintf(stderr, "st_compare: %s: '%s' is not a float tensor\n", path, name);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 6) {
    fprintf(stderr, "usage: st_compare OURS.safetensors REF.safetensors TENSOR [MAX_REL_ERR [MIN_COSINE]]\n");
    return 2;
  }
  double limit = argc >= 5 ? atof(argv[4]) : 1e-4;
  double min_cos = argc == 6 ? atof(argv[5]) : -1;
  dit_safetensors_t *sa = NULL, *sb = NULL;
  const dit_st_tensor_t *ta, *tb;
  float *a = NULL, *b = NULL;
  if (load(argv[1], argv[3], &sa, &ta, &a) || load(argv[2], argv[3], &sb, &tb, &b)) return 1;
  int same = ta->rank == tb->rank;
  for (int i = 0; same && i < ta->rank; i++) same = ta->dims[i] == tb->dims[i];
  if (!same) {
    fprintf(stderr, "st_compare: '%s' shapes differ\n", argv[3]);
    return 1;
  }
  size_t n = (size_t)(tb->nbytes / dit_dtype_size(tb->dtype));
  const dit_parity_t p = dit_parity_f32(a, b, n);
  int ok = p.nonfinite == 0 && p.max_rel <= limit && p.cosine >= min_cos;
  printf("%s: %s max_rel_err=%.3e rel_l2=%.3e cosine=%.9f elements=%zu", argv[1], argv[3], p.max_rel, p.rel_l2, p.cosine, n);
  if (p.nonfinite) printf(" nonfinite_mismatches=%zu", p.nonfinite);
  printf(" limit=%.1e %s\n", limit, ok ? "ok" : "FAIL");
  free(a);
  free(b);
  dit_safetensors_close(sa);
  dit_safetensors_close(sb);
  return ok ? 0 : 1;
}
