/* Byte counts on command lines ("4096", "500M", "1.5G", "2T", "20GiB"), shared by ditc's and
 * ditrun's store options; built into ditrun with or without the store. */
#ifndef DIT_STORE_SIZE_ARG_H
#define DIT_STORE_SIZE_ARG_H

#include <stdint.h>

/* Binary units K, M, G, T (an optional "i" and "B" after them); 1 on success. */
int dit_parse_size(const char *s, uint64_t *out);

#endif
