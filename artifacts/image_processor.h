/* An image encoder's preprocessing, from the pipeline's image_processor/preprocessor_config.json
 * (transformers' CLIPImageProcessor), which the image encoder's bundle carries: resize (the
 * shortest edge to a size, or to height x width) with a PIL filter, center crop, rescale,
 * normalize. The compiler validates the file before it carries it; the runtime applies it. */
#ifndef DIT_ARTIFACTS_IMAGE_PROCESSOR_H
#define DIT_ARTIFACTS_IMAGE_PROCESSOR_H

#include <stddef.h>

#include "base/status.h"

#define DIT_IMAGE_PROCESSOR_FILE "preprocessor_config.json"

typedef struct dit_image_processor {
  int do_resize, do_center_crop, do_rescale, do_normalize;
  int shortest_edge;         /* resize the shortest edge to it (the other by the aspect); 0: to height x width */
  int resize_h, resize_w;    /* with shortest_edge 0 */
  int resample;              /* PIL's code: 1 LANCZOS or 3 BICUBIC (the two this reads) */
  int crop_h, crop_w;
  double rescale_factor;
  double mean[3], std[3];
} dit_image_processor_t;

/* Parses the file's `len` bytes (`what` names it in messages); fields it does not use are
 * ignored, those it uses are checked (types, ranges, a resample filter it has). */
dit_status_t dit_image_processor_parse(const char *text, size_t len, const char *what, dit_image_processor_t *out);

#endif
