/* forward_inputs BUNDLE_DIR OUT.safetensors [--seed S] [--set NAME=VALUE]... [--runs NAME=K]...:
 * writes an input file for the bundle's forward, every input of its manifest at its shape and
 * dtype, filled with deterministic values in [-1, 1) from the seed, or with VALUE everywhere for
 * a --set name (e.g. a timestep); a --runs name repeats each value over runs of K elements (a
 * latent frame's tokens sharing one timestep). For tests that need inputs of a shape no committed
 * file has. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/bundle.h"
#include "artifacts/safetensors.h"
#include "base/dtype.h"

static int fail(dit_status_t s) {
  fprintf(stderr, "forward_inputs: %s\n", dit_status_message(s));
  dit_status_free(s);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: forward_inputs BUNDLE_DIR OUT.safetensors [--seed S] [--set NAME=VALUE]... [--runs NAME=K]...\n");
    return 2;
  }
  uint64_t state = 1;
  for (int i = 3; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--seed")) state = strtoull(argv[i + 1], NULL, 10) + 1;
  dit_bundle_t *b = NULL;
  dit_status_t s = dit_bundle_open(argv[1], 0, &b);
  if (s) return fail(s);
  const dit_manifest_t *m = dit_bundle_manifest(b);
  dit_st_writer_t *w = NULL;
  s = dit_st_writer_create(&w);
  for (size_t k = 0; !s && k < m->n_inputs; k++) {
    const dit_manifest_io_t *io = &m->io_inputs[k];
    size_t n = 1;
    for (int d = 0; d < io->rank; d++) n *= (size_t)io->dims[d];
    const char *set = NULL;
    size_t run = 1;
    for (int i = 3; i + 1 < argc; i += 2)
      if (!strncmp(argv[i + 1], io->name, strlen(io->name)) && argv[i + 1][strlen(io->name)] == '=') {
        if (!strcmp(argv[i], "--set")) set = argv[i + 1] + strlen(io->name) + 1;
        if (!strcmp(argv[i], "--runs")) run = strtoull(argv[i + 1] + strlen(io->name) + 1, NULL, 10);
      }
    if (run < 1) run = 1;
    float *f = malloc((n + 1) * sizeof *f);
    void *out = malloc((n + 1) * 8);
    if (!f || !out) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    for (size_t i = 0; !s && i < n; i++) {
      if (i % run) {
        f[i] = f[i - 1];
        continue;
      }
      state ^= state << 13, state ^= state >> 7, state ^= state << 17; /* xorshift64 */
      f[i] = set ? strtof(set, NULL) : (float)((double)(state >> 11) / 4503599627370496.0 - 1.0);
    }
    if (!s && dit_convert(out, io->dtype, f, DIT_F32, n)) s = DIT_ERR(UNIMPLEMENTED, "input '%s': dtype %s", io->name, dit_dtype_name(io->dtype));
    if (!s) s = dit_st_writer_add(w, io->name, io->dtype, io->rank, io->dims, out);
    free(f);
    free(out);
  }
  if (!s) s = dit_st_writer_write(w, argv[2]);
  dit_st_writer_destroy(w);
  dit_bundle_close(b);
  return s ? fail(s) : 0;
}
