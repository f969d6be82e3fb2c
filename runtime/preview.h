/* Previews of the latents while generate runs: a small PNG made with a linear map from latent
 * channels to RGB, no VAE.
 *
 * The latents are [B, C, F, h, w] (video) or [B, C, h, w] (image); batch item 0 is shown. Each
 * latent pixel z (C values) becomes rgb = M z + bias, read as a decoded value in [-1, 1]
 * (media.h's 8-bit mapping), and is repeated `upsample` times in each direction (nearest), so the
 * preview has the decoded video's size. A video shows up to DIT_PREVIEW_MAX_FRAMES latent frames
 * side by side, evenly spaced from the first to the last.
 *
 * The map is fitted on the bundle's own VAE decoder stage (gen_stages.h gen_preview_map). Without
 * one (map NULL) the preview shows the first three latent channels as red, green and blue, each
 * normalized by its own minimum and maximum over the shown frames (one channel: gray), upsampled
 * by DIT_PREVIEW_FALLBACK_UPSAMPLE. */
#ifndef DIT_RUNTIME_PREVIEW_H
#define DIT_RUNTIME_PREVIEW_H

#include <stdint.h>

#include "artifacts/manifest.h"
#include "base/status.h"

#define DIT_PREVIEW_MAX_FRAMES 4
#define DIT_PREVIEW_FALLBACK_UPSAMPLE 8 /* Wan2.1's and FLUX.1's VAEs' spatial factor */

typedef struct dit_preview_map {
  int channels;         /* C: the latent channels it maps */
  const float *matrix;  /* [3][channels], row-major: rgb[k] = sum_c matrix[k * channels + c] * z[c] + bias[k] */
  float bias[3];
  int upsample;         /* the VAE's spatial factor */
} dit_preview_map_t;

/* Checks that latents of this shape can be previewed with map (NULL: the fallback). */
dit_status_t dit_preview_check(const dit_preview_map_t *map, int rank, const int64_t *dims);

/* The preview of latents (f32, the checked shape) as RGB8 (malloc'ed into *rgb, *width x *height). */
dit_status_t dit_preview_image(const dit_preview_map_t *map, const float *latents, int rank, const int64_t *dims, uint8_t **rgb,
                               int *width, int *height);

/* The preview of latents as PNG bytes in memory (*png malloc'ed, the caller frees it): what the
 * resident server streams, the same bytes dit_preview_write puts in a file. */
dit_status_t dit_preview_png(const dit_preview_map_t *map, const float *latents, int rank, const int64_t *dims, void **png, size_t *len);

/* DIR/step_NNN.png (NNN: step, 1-based, at least three digits) of the latents. */
dit_status_t dit_preview_write(const char *dir, int step, const dit_preview_map_t *map, const float *latents, int rank,
                               const int64_t *dims);

#endif
