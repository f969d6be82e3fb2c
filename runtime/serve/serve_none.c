/* `ditrun serve` in a build without libmicrohttpd: says so instead of pretending. */
#include <stdio.h>

#include "runtime/serve/serve.h"

int dit_serve_main(int argc, char **argv) {
  (void)argc, (void)argv;
  fprintf(stderr, "ditrun serve: error: this ditrun was built without the HTTP library (install libmicrohttpd-dev, "
                  "scripts/setup.sh does, and configure again)\n");
  return 1;
}

int dit_serve_worker_main(int argc, char **argv) {
  (void)argc, (void)argv;
  return 2;
}

int dit_serve_take_token_file(int *argc, char **argv) {
  (void)argc, (void)argv;
  return 0;
}
