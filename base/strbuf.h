/* A growable NUL-terminated text buffer for the writers and code generators. Allocation
 * failure is sticky (oom) so callers check once, at the end. */
#ifndef DIT_BASE_STRBUF_H
#define DIT_BASE_STRBUF_H

#include <stddef.h>

typedef struct dit_strbuf {
  char *p; /* NUL-terminated once anything was added; owned, release with dit_strbuf_free */
  size_t len, cap;
  int oom;
} dit_strbuf_t;

void dit_strbuf_put(dit_strbuf_t *b, const void *s, size_t n);
void dit_strbuf_puts(dit_strbuf_t *b, const char *s);
void dit_strbuf_printf(dit_strbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal with the escapes cJSON's and serde_json's printers share: quote,
 * backslash, \b \f \n \r \t, \u00XX for other control bytes, every other byte verbatim. */
void dit_strbuf_json_string(dit_strbuf_t *b, const char *s);
/* n bytes as RFC 4648 base64 (padded, no line breaks). */
void dit_strbuf_base64(dit_strbuf_t *b, const void *p, size_t n);
void dit_strbuf_free(dit_strbuf_t *b);

#endif
