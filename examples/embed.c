/* Embedding libditrun: open a bundle, print its signature, run one forward on host memory.
 *   embed BUNDLE INPUT=FILE... OUTPUT=FILE   (FILEs: raw little-endian f32, the tensor's shape)
 * Build: cc embed.c $(pkg-config --cflags --libs ditrun), or find_package(ditrun) in CMake. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ditrun_api.h"

static int fail(ditrun_status *s) {
  fprintf(stderr, "embed: %s: %s\n", ditrun_code_name(ditrun_status_code(s)), ditrun_status_message(s));
  ditrun_status_free(s);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) return fprintf(stderr, "usage: embed BUNDLE NAME=FILE... (inputs, then the output)\n"), 2;
  if (ditrun_api_version() / 1000 != DITRUN_API_VERSION_MAJOR) return fprintf(stderr, "embed: libditrun API mismatch\n"), 1;
  ditrun_bundle *b;
  ditrun_status *s = ditrun_bundle_open(argv[1], NULL, &b);
  if (s) return fail(s);
  float *bufs[16] = {0};
  for (int a = 2; !s && a < argc && a - 2 < 16; a++) {
    char *eq = strchr(argv[a], '='), *name = argv[a];
    if (!eq) return fprintf(stderr, "embed: %s: expected NAME=FILE\n", argv[a]), 2;
    *eq = 0;
    ditrun_tensor t = {.dtype = DITRUN_F32, .memory = DITRUN_HOST};
    ditrun_tensor_info info;
    const int output = a == argc - 1;
    size_t i = 0, n = 1, count = output ? ditrun_bundle_num_outputs(b) : ditrun_bundle_num_inputs(b);
    for (; i < count; i++) {
      if ((s = output ? ditrun_bundle_output(b, i, &info) : ditrun_bundle_input(b, i, &info)) || !strcmp(info.name, name)) break;
    }
    if (s || i == count) return s ? fail(s) : (fprintf(stderr, "embed: %s: not in the bundle's signature\n", name), 1);
    t.rank = info.rank;
    for (int d = 0; d < info.rank; d++) n *= (size_t)(t.dims[d] = info.dims[d]);
    printf("%s %s rank %d, %zu elements\n", output ? "output" : "input", name, info.rank, n);
    t.data = bufs[a - 2] = calloc(n, sizeof(float));
    FILE *f = fopen(eq + 1, output ? "wb" : "rb");
    if (!f || !t.data) return fprintf(stderr, "embed: %s: cannot open\n", eq + 1), 1;
    if (output) {
      if (!(s = ditrun_bind_output(b, name, &t)) && !(s = ditrun_forward(b, NULL))) fwrite(t.data, sizeof(float), n, f);
    } else if (fread(t.data, sizeof(float), n, f) != n) {
      return fprintf(stderr, "embed: %s: shorter than %zu floats\n", eq + 1, n), 1;
    } else {
      s = ditrun_bind_input(b, name, &t);
    }
    fclose(f);
  }
  ditrun_bundle_close(b);
  for (int i = 0; i < 16; i++) free(bufs[i]);
  return s ? fail(s) : 0;
}
