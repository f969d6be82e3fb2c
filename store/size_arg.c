/* Byte counts on command lines (size_arg.h). */
#include "store/size_arg.h"

#include <errno.h>
#include <stdlib.h>

int dit_parse_size(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0)) return 0;
  double mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1024.0, end++; break;
    case 'm': case 'M': mul = 1048576.0, end++; break;
    case 'g': case 'G': mul = 1073741824.0, end++; break;
    case 't': case 'T': mul = 1099511627776.0, end++; break;
    default: break;
  }
  if (mul > 1 && *end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v * mul >= 1.8e19) return 0;
  *out = (uint64_t)(v * mul);
  return 1;
}
