/* Growable text buffer and JSON string escaping. */
#include "base/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dit_strbuf_put(dit_strbuf_t *b, const void *s, size_t n) {
  if (b->oom) return;
  if (n > SIZE_MAX / 4 - b->len) {
    b->oom = 1;
    return;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

void dit_strbuf_puts(dit_strbuf_t *b, const char *s) { dit_strbuf_put(b, s, strlen(s)); }

void dit_strbuf_printf(dit_strbuf_t *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    dit_strbuf_put(b, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    b->oom = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  dit_strbuf_put(b, big, (size_t)n);
  free(big);
}

void dit_strbuf_json_string(dit_strbuf_t *b, const char *s) {
  dit_strbuf_put(b, "\"", 1);
  const unsigned char *u = (const unsigned char *)s;
  size_t run = 0, i = 0;
  for (; u[i]; i++) {
    const char *esc = NULL;
    char tmp[8];
    switch (u[i]) {
      case '"': esc = "\\\""; break;
      case '\\': esc = "\\\\"; break;
      case '\b': esc = "\\b"; break;
      case '\f': esc = "\\f"; break;
      case '\n': esc = "\\n"; break;
      case '\r': esc = "\\r"; break;
      case '\t': esc = "\\t"; break;
      default:
        if (u[i] < 0x20) {
          snprintf(tmp, sizeof tmp, "\\u%04x", u[i]);
          esc = tmp;
        }
    }
    if (esc) {
      dit_strbuf_put(b, u + run, i - run);
      dit_strbuf_puts(b, esc);
      run = i + 1;
    }
  }
  dit_strbuf_put(b, u + run, i - run);
  dit_strbuf_put(b, "\"", 1);
}

void dit_strbuf_base64(dit_strbuf_t *b, const void *p, size_t n) {
  static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const uint8_t *c = p;
  char group[4];
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t)c[i] << 16 | (i + 1 < n ? (uint32_t)c[i + 1] << 8 : 0) | (i + 2 < n ? c[i + 2] : 0);
    group[0] = k[v >> 18 & 63], group[1] = k[v >> 12 & 63];
    group[2] = i + 1 < n ? k[v >> 6 & 63] : '=', group[3] = i + 2 < n ? k[v & 63] : '=';
    dit_strbuf_put(b, group, 4);
  }
}

void dit_strbuf_free(dit_strbuf_t *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
  b->oom = 0;
}
