/* A small test harness: CHECK macros that report file:line and the values, and a summary
 * line. Each test binary is one ctest test. */
#ifndef DIT_TESTS_CHECK_H
#define DIT_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static int check_failures_ = 0;
static int check_count_ = 0;

#define CHECK(cond)                                                             \
  do {                                                                          \
    check_count_++;                                                             \
    if (!(cond)) {                                                              \
      check_failures_++;                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
    }                                                                           \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                      \
  do {                                                                          \
    long long a_ = (long long)(a), b_ = (long long)(b);                         \
    check_count_++;                                                             \
    if (a_ != b_) {                                                             \
      check_failures_++;                                                        \
      fprintf(stderr, "%s:%d: CHECK_EQ_INT failed: %s = %lld, %s = %lld\n",     \
              __FILE__, __LINE__, #a, a_, #b, b_);                              \
    }                                                                           \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                   \
  do {                                                                          \
    double a_ = (double)(a), b_ = (double)(b);                                  \
    check_count_++;                                                             \
    if (!(fabs(a_ - b_) <= (tol))) {                                            \
      check_failures_++;                                                        \
      fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g (tol %g)\n", \
              __FILE__, __LINE__, #a, a_, #b, b_, (double)(tol));               \
    }                                                                           \
  } while (0)

/* The expression must succeed; prints the status message otherwise. */
#define CHECK_OK(expr)                                                          \
  do {                                                                          \
    dit_status_t s_ = (expr);                                                   \
    check_count_++;                                                             \
    if (s_) {                                                                   \
      check_failures_++;                                                        \
      fprintf(stderr, "%s:%d: CHECK_OK failed: %s: %s: %s\n", __FILE__, __LINE__, \
              #expr, dit_code_name(dit_status_code(s_)), dit_status_message(s_)); \
      dit_status_free(s_);                                                      \
    }                                                                           \
  } while (0)

/* The expression must fail with the given code and a message containing `needle`. */
#define CHECK_ERR(expr, code, needle)                                           \
  do {                                                                          \
    dit_status_t s_ = (expr);                                                   \
    check_count_++;                                                             \
    if (!s_) {                                                                  \
      check_failures_++;                                                        \
      fprintf(stderr, "%s:%d: CHECK_ERR failed: %s succeeded\n", __FILE__, __LINE__, #expr); \
    } else {                                                                    \
      if (dit_status_code(s_) != DIT_CODE_##code ||                             \
          !strstr(dit_status_message(s_), (needle))) {                          \
        check_failures_++;                                                      \
        fprintf(stderr, "%s:%d: CHECK_ERR failed: %s: expected %s containing '%s', got %s: %s\n", \
                __FILE__, __LINE__, #expr, #code, (needle),                     \
                dit_code_name(dit_status_code(s_)), dit_status_message(s_));    \
      }                                                                         \
      dit_status_free(s_);                                                      \
    }                                                                           \
  } while (0)

static inline int check_summary(const char *name) {
  printf("%s: %d checks, %d failed\n", name, check_count_, check_failures_);
  return check_failures_ ? 1 : 0;
}

/* Scratch paths: formatted into buffers of CHECK_PATH_MAX bytes (cut to fit). */
#define CHECK_PATH_MAX 8192
static inline void check_pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void check_pathf(char *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, CHECK_PATH_MAX, fmt, ap);
  va_end(ap);
}

/* A per-test scratch directory under DIT_TEST_TMP (or /tmp), created fresh. */
static inline const char *check_tmpdir(const char *name) {
  static char buf[4096];
  const char *root = getenv("DIT_TEST_TMP");
  snprintf(buf, sizeof buf, "%s/%s", root ? root : "/tmp/dit-test", name);
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
  if (system(cmd) != 0) {
    fprintf(stderr, "cannot create %s\n", buf);
    exit(2);
  }
  return buf;
}

#endif
