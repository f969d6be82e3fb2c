/* Decoded frames to files: PNG through libspng, H.264 MP4 through FFmpeg's libraries.
 *
 * Frames arrive as a VAE decode returns them: [B, 3, F, H, W] (video) or [B, 3, H, W] (image),
 * f32, bf16 or f16, values in [-1, 1]. Each value becomes an 8-bit sample as diffusers'
 * VaeImageProcessor.postprocess and numpy_to_pil make it: (x / 2 + 0.5) clamped to [0, 1], times
 * 255, rounded half to even in fp32 (numpy's round); NaN becomes 0.
 *
 * Files by extension (case-insensitive):
 *   .png  one image per batch item: the image, or frame 0 of a video;
 *   .mp4  one H.264 video per batch item (yuv420p; an odd width or height is padded by one
 *         column or row repeating the last, as 4:2:0 needs even sizes).
 * Batch item 0 is written to PATH itself, item b >= 1 to PATH with "_b" before the extension
 * (out.png, out_1.png, out_2.png, ...). Every file is written under a temporary name beside it
 * and renamed only when all of them are complete: a failure leaves none of them. */
#ifndef DIT_RUNTIME_MEDIA_H
#define DIT_RUNTIME_MEDIA_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "runtime/tensor.h"

#define DIT_MEDIA_DEFAULT_FPS 16.0 /* Wan's pipelines export at 16 */
#define DIT_MEDIA_DEFAULT_CRF 18   /* x264's "visually lossless" end of its range; its own default is 23 */
#define DIT_MEDIA_MAX_SIDE 16384
#define DIT_MEDIA_MAX_BATCH 1024

typedef struct dit_media_options {
  double fps; /* frames per second of a video; 0: DIT_MEDIA_DEFAULT_FPS */
  int crf;    /* H.264 constant rate factor 1..51 (lower is better); 0: DIT_MEDIA_DEFAULT_CRF */
} dit_media_options_t; /* zero: the defaults */

typedef enum dit_media_kind { DIT_MEDIA_UNKNOWN = 0, DIT_MEDIA_PNG, DIT_MEDIA_MP4 } dit_media_kind_t;

/* The kind PATH's extension names (DIT_MEDIA_UNKNOWN for any other). */
dit_media_kind_t dit_media_kind_of(const char *path);

/* Writes the frames to PATH (and PATH_b for batch items b >= 1, see above); o may be NULL for
 * the defaults. Errors name the file and the reason. */
dit_status_t dit_media_write(const char *path, const dit_tensor_t *frames, const dit_media_options_t *o);

/* Batch item b's file name for PATH (the convention above) into out. */
dit_status_t dit_media_item_path(const char *path, int b, char *out, size_t cap);

/* One 8-bit sample from a decoded value, as written to files. */
uint8_t dit_media_to_u8(float x);

/* An 8-bit RGB image (rows of width * 3 bytes, top first) as PNG bytes in memory (*png malloc'ed,
 * the caller frees it); `what` names the image in errors. The bytes are those the writer below puts
 * in its file. */
dit_status_t dit_media_encode_png_rgb8(const char *what, const uint8_t *rgb, int width, int height, void **png, size_t *len);

/* Writes an 8-bit RGB image (rows of width * 3 bytes, top first) as a PNG, atomically. */
dit_status_t dit_media_write_png_rgb8(const char *path, const uint8_t *rgb, int width, int height);

#endif
