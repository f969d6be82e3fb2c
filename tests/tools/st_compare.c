/* Compares one tensor of two safetensors files: max relative error = max|a - b| / max|b|,
 * plus cosine similarity; exits 1 when shapes differ, the error exceeds the limit or the
 * cosine falls below the optional minimum. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/safetensors.h"

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
  double maxdiff = 0, maxref = 0, dot = 0, na = 0, nb = 0;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) bad = 1;
    double d = fabs((double)a[i] - b[i]);
    if (d > maxdiff) maxdiff = d;
    if (fabs(b[i]) > maxref) maxref = fabs(b[i]);
    dot += (double)a[i] * b[i];
    na += (double)a[i] * a[i];
    nb += (double)b[i] * b[i];
  }
  double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
  double cos = na > 0 && nb > 0 ? dot / sqrt(na * nb) : 0;
  double l2 = 0;
  for (size_t i = 0; i < n; i++) l2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  l2 = nb > 0 ? sqrt(l2 / nb) : sqrt(l2);
  int ok = !bad && rel <= limit && cos >= min_cos;
  printf("%s: %s max_rel_err=%.3e rel_l2=%.3e cosine=%.9f elements=%zu limit=%.1e %s\n", argv[1], argv[3], rel, l2, cos, n,
         limit, ok ? "ok" : "FAIL");
  free(a);
  free(b);
  dit_safetensors_close(sa);
  dit_safetensors_close(sb);
  return ok ? 0 : 1;
}
