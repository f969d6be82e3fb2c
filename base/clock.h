/* Monotonic time, for durations and deadlines. */
#ifndef DIT_BASE_CLOCK_H
#define DIT_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double dit_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int64_t dit_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

#endif
