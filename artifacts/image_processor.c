/* preprocessor_config.json: see image_processor.h. */
#include "artifacts/image_processor.h"

#include <string.h>

#include "base/json.h"

/* A {"height", "width"} member of the root into *h, *w. */
static dit_status_t hw(const dit_json_t *root, const char *key, int *h, int *w) {
  dit_json_t o;
  DIT_RETURN_IF(dit_json_object(root, key, &o));
  DIT_RETURN_IF(dit_json_i32(&o, "height", 1, 16384, h));
  return dit_json_i32(&o, "width", 1, 16384, w);
}

/* The optional boolean `key` (default def). */
static dit_status_t flag(const dit_json_t *root, const char *key, int def, int *out) {
  *out = def;
  if (!dit_json_has(root, key)) return DIT_OK;
  bool b = false;
  DIT_RETURN_IF(dit_json_bool(root, key, &b));
  *out = b;
  return DIT_OK;
}

/* Three numbers of `key` in [lo, hi]. */
static dit_status_t three(const dit_json_t *root, const char *key, double lo, double hi, double out[3]) {
  dit_json_t a, e;
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(root, key, 3, &a, &n));
  if (n != 3) return dit_json_error(&a, DIT_CODE_INVALID_ARGUMENT, "expected 3 numbers (one per RGB channel), found %zu", n);
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  for (int i = 0; dit_json_iter_next(&it, &e); i++) DIT_RETURN_IF(dit_json_as_num(&e, lo, hi, &out[i]));
  return DIT_OK;
}

static dit_status_t parse(const dit_json_t *root, dit_image_processor_t *p) {
  memset(p, 0, sizeof *p);
  DIT_RETURN_IF(flag(root, "do_resize", 1, &p->do_resize));
  DIT_RETURN_IF(flag(root, "do_center_crop", 1, &p->do_center_crop));
  DIT_RETURN_IF(flag(root, "do_rescale", 1, &p->do_rescale));
  DIT_RETURN_IF(flag(root, "do_normalize", 1, &p->do_normalize));
  if (p->do_resize) {
    dit_json_t size;
    DIT_RETURN_IF(dit_json_object(root, "size", &size));
    if (dit_json_has(&size, "shortest_edge")) DIT_RETURN_IF(dit_json_i32(&size, "shortest_edge", 1, 16384, &p->shortest_edge));
    else DIT_RETURN_IF(hw(root, "size", &p->resize_h, &p->resize_w));
    DIT_RETURN_IF(dit_json_i32(root, "resample", 0, 5, &p->resample));
    if (p->resample != 1 && p->resample != 3) {
      dit_json_t v;
      DIT_RETURN_IF(dit_json_get(root, "resample", &v));
      return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "expected 1 (LANCZOS) or 3 (BICUBIC), the PIL filters this build resizes with, found %d",
                            p->resample);
    }
  }
  if (p->do_center_crop) DIT_RETURN_IF(hw(root, "crop_size", &p->crop_h, &p->crop_w));
  p->rescale_factor = 1.0;
  if (p->do_rescale) DIT_RETURN_IF(dit_json_num(root, "rescale_factor", 1e-9, 1e9, &p->rescale_factor));
  if (p->do_normalize) {
    DIT_RETURN_IF(three(root, "image_mean", -1e9, 1e9, p->mean));
    DIT_RETURN_IF(three(root, "image_std", 1e-9, 1e9, p->std));
  }
  return DIT_OK;
}

dit_status_t dit_image_processor_parse(const char *text, size_t len, const char *what, dit_image_processor_t *out) {
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_json_t root;
  dit_status_t s = dit_json_root(doc, &root);
  if (!s) s = parse(&root, out);
  dit_json_doc_free(doc);
  return s;
}
