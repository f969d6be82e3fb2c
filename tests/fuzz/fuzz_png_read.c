/* dit_image_decode_png on the raw input (runtime/media.c: PNG to RGB8 as PIL's load_image makes
 * it). A refusal must carry a code, name the image and leave no pixels; an accepted image must
 * have sides in 1..DIT_MEDIA_MAX_SIDE and every byte readable (ASan checks the extent). Small
 * accepted images also go through both resize filters, the same-size copy, the center crop and a
 * second decode, which must give the same bytes. Inputs whose header claims more than 2^22
 * pixels within the side limit are skipped: decoding one is a single large allocation whose
 * refusal (the data ends early) the small ones already reach. Each input is decoded as it is and
 * again with every chunk's CRC recomputed, so that mutations reach the chunks' meaning instead of
 * stopping at their checksums. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/media.h"

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static uint32_t crc32_png(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

/* A copy of the input whose chunks (after the signature) carry correct CRCs; NULL when none changed. */
static uint8_t *fix_crcs(const uint8_t *data, size_t size) {
  if (size < 8) return NULL;
  uint8_t *c = malloc(size);
  memcpy(c, data, size);
  int changed = 0;
  for (size_t at = 8; size - at >= 12;) {
    const uint32_t len = be32(c + at);
    if (len > size - at - 12) break;
    const uint32_t crc = crc32_png(c + at + 4, (size_t)len + 4);
    uint8_t *q = c + at + 8 + len;
    if (be32(q) != crc) {
      for (int i = 0; i < 4; i++) q[i] = (uint8_t)(crc >> (24 - 8 * i));
      changed = 1;
    }
    at += (size_t)len + 12;
  }
  if (!changed) free(c);
  return changed ? c : NULL;
}

static void check_resize(const dit_image_t *im, int w, int h, dit_resample_t f) {
  dit_image_t out;
  dit_status_t s = dit_image_resize(im, w, h, f, &out);
  if (s || !out.rgb || out.width != w || out.height != h) abort();
  dit_image_free(&out);
}

static void one(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  one(data, size);
  uint8_t *fixed = fix_crcs(data, size);
  if (fixed) one(fixed, size);
  free(fixed);
  return 0;
}

static void one(const uint8_t *data, size_t size) {
  if (size >= 24) {
    const uint64_t w = be32(data + 16), h = be32(data + 20);
    if (w <= DIT_MEDIA_MAX_SIDE && h <= DIT_MEDIA_MAX_SIDE && w * h > ((uint64_t)1 << 22)) return;
  }
  dit_image_t im;
  dit_status_t s = dit_image_decode_png(data, size, "input.png", &im);
  if (s) {
    if (dit_status_code(s) == DIT_CODE_OK || !strstr(dit_status_message(s), "input.png")) abort();
    if (im.rgb || im.width || im.height) abort();
    dit_status_free(s);
    return;
  }
  if (!im.rgb || im.width < 1 || im.height < 1 || im.width > DIT_MEDIA_MAX_SIDE || im.height > DIT_MEDIA_MAX_SIDE) abort();
  const size_t n = (size_t)im.width * (size_t)im.height * 3;
  unsigned sum = 0;
  for (size_t i = 0; i < n; i++) sum += im.rgb[i];
  if (im.width * im.height <= 4096) {
    dit_image_t again, copy, crop;
    if (dit_image_decode_png(data, size, "input.png", &again) || again.width != im.width || memcmp(again.rgb, im.rgb, n))
      abort();
    dit_image_free(&again);
    check_resize(&im, 7, 5, DIT_RESAMPLE_LANCZOS);
    check_resize(&im, 2 * im.width, (im.height + 1) / 2, DIT_RESAMPLE_BICUBIC);
    if (dit_image_resize(&im, im.width, im.height, DIT_RESAMPLE_LANCZOS, &copy) || memcmp(copy.rgb, im.rgb, n)) abort();
    dit_image_free(&copy);
    int cw, ch;
    dit_image_shortest_edge_size(im.width, im.height, 3, &cw, &ch);
    if ((cw != 3 && ch != 3) || cw < 1 || ch < 1) abort();
    if (dit_image_center_crop(&im, 3, 3, &crop) || crop.width != 3) abort();
    dit_image_free(&crop);
  }
  dit_image_free(&im);
  if (sum == 0xFFFFFFFFu) abort(); /* never: the sum keeps the reads */
}
