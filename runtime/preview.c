/* Latent previews (preview.h). */
#include "runtime/preview.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/fileio.h"
#include "runtime/media.h"

dit_status_t dit_preview_check(const dit_preview_map_t *map, int rank, const int64_t *dims) {
  if (rank != 4 && rank != 5)
    return DIT_ERR(UNIMPLEMENTED, "--preview: the latents have rank %d; a preview needs [B, C, F, h, w] or [B, C, h, w] (packed token "
                   "latents are not shown yet)", rank);
  for (int i = 0; i < rank; i++)
    if (dims[i] < 1) return DIT_ERR(INVALID_ARGUMENT, "--preview: latents dimension %d is %lld", i, (long long)dims[i]);
  if (map && map->channels != dims[1])
    return DIT_ERR(INVALID_ARGUMENT, "--preview: the bundle's latent-to-RGB map takes %d channels, the latents have %lld", map->channels,
                   (long long)dims[1]);
  const int up = map ? map->upsample : DIT_PREVIEW_FALLBACK_UPSAMPLE;
  const int64_t shown = rank == 5 && dims[2] < DIT_PREVIEW_MAX_FRAMES ? dims[2] : rank == 5 ? DIT_PREVIEW_MAX_FRAMES : 1;
  if (up < 1 || dims[rank - 2] * up > DIT_MEDIA_MAX_SIDE || dims[rank - 1] * up * shown > DIT_MEDIA_MAX_SIDE)
    return DIT_ERR(OUT_OF_RANGE, "--preview: %lld x %lld latents upsampled %d times (%lld frames wide) exceed %d pixels a side",
                   (long long)dims[rank - 2], (long long)dims[rank - 1], up, (long long)shown, DIT_MEDIA_MAX_SIDE);
  return DIT_OK;
}

dit_status_t dit_preview_image(const dit_preview_map_t *map, const float *latents, int rank, const int64_t *dims, uint8_t **rgb,
                               int *width, int *height) {
  DIT_RETURN_IF(dit_preview_check(map, rank, dims));
  const int64_t C = dims[1], F = rank == 5 ? dims[2] : 1, h = dims[rank - 2], w = dims[rank - 1];
  const int n = F < DIT_PREVIEW_MAX_FRAMES ? (int)F : DIT_PREVIEW_MAX_FRAMES;
  const int up = map ? map->upsample : DIT_PREVIEW_FALLBACK_UPSAMPLE;
  int64_t frame[DIT_PREVIEW_MAX_FRAMES];
  for (int i = 0; i < n; i++) frame[i] = n > 1 ? (i * (F - 1) + (n - 1) / 2) / (n - 1) : 0;
  const size_t plane = (size_t)(h * w), cstride = (size_t)F * plane; /* batch item 0 */
  /* The fallback's per-channel range over the shown frames. */
  float lo[3] = {FLT_MAX, FLT_MAX, FLT_MAX}, hi[3] = {-FLT_MAX, -FLT_MAX, -FLT_MAX};
  const int64_t src_c[3] = {0, C > 1 ? 1 : 0, C > 2 ? 2 : 0};
  for (int k = 0; !map && k < 3; k++)
    for (int i = 0; i < n; i++)
      for (size_t p = 0; p < plane; p++) {
        const float z = latents[(size_t)src_c[k] * cstride + (size_t)frame[i] * plane + p];
        if (z < lo[k]) lo[k] = z;
        if (z > hi[k]) hi[k] = z;
      }
  *width = (int)(w * up * n), *height = (int)(h * up);
  uint8_t *out = *rgb = malloc((size_t)*width * (size_t)*height * 3);
  if (!out) return DIT_ERR(RESOURCE_EXHAUSTED, "--preview: out of memory for a %d x %d image", *width, *height);
  for (int i = 0; i < n; i++)
    for (int64_t y = 0; y < h; y++)
      for (int64_t x = 0; x < w; x++) {
        const size_t at = (size_t)frame[i] * plane + (size_t)(y * w + x);
        uint8_t px[3];
        for (int k = 0; k < 3; k++) {
          float v;
          if (map) {
            v = map->bias[k];
            for (int64_t c = 0; c < C; c++) v += map->matrix[k * C + c] * latents[(size_t)c * cstride + at];
          } else {
            const float z = latents[(size_t)src_c[k] * cstride + at];
            v = hi[k] > lo[k] ? 2.0f * (z - lo[k]) / (hi[k] - lo[k]) - 1.0f : 0.0f;
          }
          px[k] = dit_media_to_u8(v);
        }
        for (int dy = 0; dy < up; dy++)
          for (int dx = 0; dx < up; dx++) {
            uint8_t *o = out + (((size_t)(y * up + dy) * (size_t)*width) + (size_t)((i * w + x) * up + dx)) * 3;
            o[0] = px[0], o[1] = px[1], o[2] = px[2];
          }
      }
  return DIT_OK;
}

dit_status_t dit_preview_png(const dit_preview_map_t *map, const float *latents, int rank, const int64_t *dims, void **png, size_t *len) {
  *png = NULL, *len = 0;
  uint8_t *rgb = NULL;
  int width, height;
  dit_status_t s = dit_preview_image(map, latents, rank, dims, &rgb, &width, &height);
  if (!s) s = dit_media_encode_png_rgb8("preview", rgb, width, height, png, len);
  free(rgb);
  return s;
}

dit_status_t dit_preview_write(const char *dir, int step, const dit_preview_map_t *map, const float *latents, int rank,
                               const int64_t *dims) {
  char name[32], path[4096];
  snprintf(name, sizeof name, "step_%03d.png", step);
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, name));
  uint8_t *rgb = NULL;
  int width, height;
  dit_status_t s = dit_preview_image(map, latents, rank, dims, &rgb, &width, &height);
  if (!s) s = dit_media_write_png_rgb8(path, rgb, width, height);
  free(rgb);
  return s;
}
