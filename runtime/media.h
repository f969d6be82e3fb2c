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

/* ---- input images ----
 * An image given to image-to-video goes into the pipeline as diffusers makes it: load_image (PIL:
 * the EXIF orientation applied, then .convert("RGB")), then Image.resize with LANCZOS to the
 * video's size (VaeImageProcessor); CLIP's image processor resizes the shortest edge with
 * BICUBIC and crops the centre. The functions below do each step on 8-bit RGB with the same
 * bytes as Pillow and transformers. */

/* 8-bit RGB: height rows of width * 3 bytes, top first. */
typedef struct dit_image {
  int width, height;
  uint8_t *rgb;
} dit_image_t;

/* Pillow's resampling filters (Image.Resampling), as its Image.resize applies them. */
typedef enum dit_resample { DIT_RESAMPLE_BICUBIC = 1, DIT_RESAMPLE_LANCZOS } dit_resample_t;

#define DIT_MEDIA_MAX_PNG_BYTES ((size_t)1 << 30)

/* A PNG from memory into 8-bit RGB as PIL's Image.open, ImageOps.exif_transpose and
 * .convert("RGB") make it: gray replicated, palette looked up (an index past the palette is
 * black), alpha and tRNS dropped (not composited), 16-bit samples by their high byte except
 * 16-bit gray, which PIL clips to 255; the orientation of an eXIf chunk, or else of a "Raw profile
 * type exif" text or an XMP tiff:Orientation, applied. Sides above DIT_MEDIA_MAX_SIDE are
 * refused. `what` names the image in errors; out is zeroed on failure. */
dit_status_t dit_image_decode_png(const void *png, size_t len, const char *what, dit_image_t *out);

/* The PNG file at PATH (at most DIT_MEDIA_MAX_PNG_BYTES), as above. */
dit_status_t dit_image_read(const char *path, dit_image_t *out);

void dit_image_free(dit_image_t *im);

/* PIL's Image.resize((width, height), filter) of an RGB image, byte for byte as Pillow 13 makes
 * it: two separable passes with 8-bit results between them, the vertical one first when the
 * height shrinks by more than twice what the width does (Pillow 12 and earlier always ran the
 * horizontal pass first: their bytes differ from these in that case), a pass skipped where its
 * side keeps its size (so the same size is a copy). Sides 1..DIT_MEDIA_MAX_SIDE. */
dit_status_t dit_image_resize(const dit_image_t *in, int width, int height, dit_resample_t filter, dit_image_t *out);

/* transformers' center_crop to width x height: the window starts at floor((side - crop) / 2);
 * a crop larger than the image is padded with black (the image then starts at
 * ceil((crop - side) / 2)). */
dit_status_t dit_image_center_crop(const dit_image_t *in, int width, int height, dit_image_t *out);

/* The size transformers' get_resize_output_image_size gives for {"shortest_edge": edge}: the
 * shorter side (the width when both are equal) becomes edge, the other int(edge * long / short). */
void dit_image_shortest_edge_size(int width, int height, int edge, int *out_width, int *out_height);

#endif
