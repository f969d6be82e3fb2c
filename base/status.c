/* Status objects: code + heap message, with a static fallback when memory runs out. */
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dit_status_s {
  dit_code_t code;
  char *message;
};

static char dit_oom_text[] = "out of memory while reporting an error";
static struct dit_status_s dit_oom_status = {DIT_CODE_RESOURCE_EXHAUSTED, dit_oom_text};

static char *vformat(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return NULL;
  char *buf = malloc((size_t)n + 1);
  if (!buf) return NULL;
  vsnprintf(buf, (size_t)n + 1, fmt, ap);
  return buf;
}

dit_status_t dit_status_makev(dit_code_t code, const char *fmt, va_list ap) {
  if (code == DIT_CODE_OK) return DIT_OK;
  struct dit_status_s *s = malloc(sizeof *s);
  if (!s) return &dit_oom_status;
  s->code = code;
  s->message = vformat(fmt, ap);
  if (!s->message) {
    free(s);
    return &dit_oom_status;
  }
  return s;
}

dit_status_t dit_status_make(dit_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dit_status_t s = dit_status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

dit_status_t dit_status_annotate(dit_status_t s, const char *fmt, ...) {
  if (!s || s == &dit_oom_status) return s;
  va_list ap;
  va_start(ap, fmt);
  char *ctx = vformat(fmt, ap);
  va_end(ap);
  if (!ctx) return s;
  if (!ctx[0]) {
    free(ctx);
    return s;
  }
  size_t n = strlen(ctx) + 2 + strlen(s->message) + 1;
  char *m = malloc(n);
  if (m) {
    snprintf(m, n, "%s: %s", ctx, s->message);
    free(s->message);
    s->message = m;
  }
  free(ctx);
  return s;
}

dit_code_t dit_status_code(dit_status_t s) { return s ? s->code : DIT_CODE_OK; }

const char *dit_status_message(dit_status_t s) { return s ? s->message : "OK"; }

const char *dit_code_name(dit_code_t code) {
  switch (code) {
    case DIT_CODE_OK: return "OK";
    case DIT_CODE_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case DIT_CODE_NOT_FOUND: return "NOT_FOUND";
    case DIT_CODE_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case DIT_CODE_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case DIT_CODE_DATA_LOSS: return "DATA_LOSS";
    case DIT_CODE_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case DIT_CODE_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case DIT_CODE_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case DIT_CODE_UNAVAILABLE: return "UNAVAILABLE";
    case DIT_CODE_INTERNAL: return "INTERNAL";
    case DIT_CODE_IO: return "IO";
    case DIT_CODE_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case DIT_CODE_ABORTED: return "ABORTED";
  }
  return "UNKNOWN";
}

void dit_status_free(dit_status_t s) {
  if (!s || s == &dit_oom_status) return;
  free(s->message);
  free(s);
}

int dit_status_report(dit_status_t s, const char *prog) {
  if (!s) return 0;
  fprintf(stderr, "%s: error: %s: %s\n", prog, dit_code_name(s->code), s->message);
  dit_status_free(s);
  return 1;
}
