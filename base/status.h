/* The one status type of the project: a NULL pointer is success, anything else carries a
 * canonical code and a message that names the file or field and the values involved. */
#ifndef DIT_BASE_STATUS_H
#define DIT_BASE_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes are pinned: they only grow at the end, with explicit values. */
typedef enum dit_code {
  DIT_CODE_OK = 0,
  DIT_CODE_INVALID_ARGUMENT = 1,  /* the caller's input is malformed */
  DIT_CODE_NOT_FOUND = 2,         /* a named file, tensor, field or blob is missing */
  DIT_CODE_ALREADY_EXISTS = 3,
  DIT_CODE_OUT_OF_RANGE = 4,      /* a count, offset or length outside its bounds */
  DIT_CODE_DATA_LOSS = 5,         /* bytes do not match their recorded size or hash */
  DIT_CODE_FAILED_PRECONDITION = 6, /* well-formed, but not for this machine or version */
  DIT_CODE_UNIMPLEMENTED = 7,     /* a valid request this build does not support */
  DIT_CODE_RESOURCE_EXHAUSTED = 8,/* memory, disk or a device limit */
  DIT_CODE_UNAVAILABLE = 9,       /* a backend or library that is not present here */
  DIT_CODE_INTERNAL = 10,
  DIT_CODE_IO = 11,               /* the operating system refused a read or write */
  DIT_CODE_DEADLINE_EXCEEDED = 12,
  DIT_CODE_ABORTED = 13,
} dit_code_t;

typedef struct dit_status_s *dit_status_t;
#define DIT_OK ((dit_status_t)0)

/* Makes a status; the caller owns it (dit_status_free). Never returns NULL for a non-OK
 * code: if memory runs out, a static out-of-memory status is returned instead. */
dit_status_t dit_status_make(dit_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
dit_status_t dit_status_makev(dit_code_t code, const char *fmt, va_list ap);

/* Prefixes "context: " to the message of s and returns s (ownership passes through).
 * OK stays OK. */
dit_status_t dit_status_annotate(dit_status_t s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

dit_code_t dit_status_code(dit_status_t s);
/* Borrowed; valid until the status is freed. "OK" for DIT_OK. */
const char *dit_status_message(dit_status_t s);
const char *dit_code_name(dit_code_t code);
void dit_status_free(dit_status_t s);

/* Prints "error: <code name>: <message>" to stderr, frees s and returns the process exit code
 * (1 for OK is never used: OK returns 0). */
int dit_status_report(dit_status_t s, const char *prog);

#define DIT_RETURN_IF_ERROR(expr, ...)                                   \
  do {                                                                   \
    dit_status_t dit_s_ = (expr);                                        \
    if (dit_s_) return dit_status_annotate(dit_s_, __VA_ARGS__);         \
  } while (0)

/* Return without adding context. */
#define DIT_RETURN_IF(expr)                                              \
  do {                                                                   \
    dit_status_t dit_s_ = (expr);                                        \
    if (dit_s_) return dit_s_;                                           \
  } while (0)

#define DIT_ERR(code, ...) dit_status_make(DIT_CODE_##code, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
