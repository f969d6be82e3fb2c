/* The hardware profile of the F* model (DESIGN.md section 6): its type, the built-in presets,
 * normalization, and the one format of a profile file, written by `ditrun calibrate` and read
 * by `ditc compile --profile` (and, as a sub-object, by the plan's offload section). The parser
 * refuses unknown fields and range-checks every number, naming the file and field. */
#ifndef DIT_BASE_HW_PROFILE_H
#define DIT_BASE_HW_PROFILE_H

#include <stddef.h>

#include "base/json.h"
#include "base/status.h"

/* Peak matrix rate, host-to-device bandwidth and the efficiencies that turn them into
 * achieved rates. */
typedef struct dit_hw_profile {
  char name[32];
  double p_peak_tflops; /* dense bf16 */
  double bw_h2d_gbs;    /* pinned host-to-device, GB/s */
  double eta_comp, eta_pref;
  double overhead_mib;  /* device memory the runtime holds beyond the plan's (the driver's
                           context, libraries' workspaces), as calibrated; 0 in the presets */
  /* Optional (0: not modeled), as calibrated: a fixed cost per plan step (kernel launch and
   * small-kernel inefficiency: what makes a one-frame forward slower than its FLOPs say), and
   * the collectives' cost, a latency per collective plus the bytes each rank hands it at
   * coll_gbs (the path they take on this host: NVLink, or host memory without peer access). */
  double step_overhead_us;
  double coll_latency_us, coll_gbs;
} dit_hw_profile_t;

/* What a calibration measured (diagnostics carried in the file's "measured" object; the
 * planner reads none of it). */
typedef struct dit_hw_measured {
  char bundle[33];            /* the identity of the bundle measured */
  double forward_ms_median, collectives_ms;
  int forwards;
  double chunk_mb, h2d_bytes;
  char second[33];            /* "" without a second shape */
  double second_forward_ms_median, second_collectives_ms;
} dit_hw_measured_t;

/* Which optional fields a written profile carries (absent ones read back as 0). */
enum {
  DIT_HW_WITH_OVERHEAD = 1,
  DIT_HW_WITH_STEP_OVERHEAD = 2,
  DIT_HW_WITH_COLLECTIVES = 4,
};

/* Ranges every profile value must lie in (the rates and efficiencies above 0). */
#define DIT_HW_MAX_TFLOPS 1e6
#define DIT_HW_MAX_GBS 1e6
#define DIT_HW_MAX_ETA 1.0
#define DIT_HW_MAX_MIB 1e9
#define DIT_HW_MAX_US 1e9

/* Built-in presets by name (h100-pcie, h100-sxm, h200-sxm); NULL if unknown. */
const dit_hw_profile_t *dit_hw_profile_preset(const char *name);
/* Rounds every value to 3 significant digits, so two calibrations of equivalent hosts agree. */
void dit_hw_profile_normalize(dit_hw_profile_t *p);

/* Reads a profile object: name (optional, "file" when absent), the four required rates and
 * efficiencies, the optional calibrated values, and (only where allow_measured) a "measured"
 * object. Unknown fields are refused; every number is range-checked. measured may be NULL. */
dit_status_t dit_hw_profile_from_json(const dit_json_t *obj, int allow_measured, dit_hw_profile_t *out,
                                      dit_hw_measured_t *measured);
/* Parses a profile file's text; `what` names it in messages. */
dit_status_t dit_hw_profile_parse(const char *text, size_t len, const char *what, dit_hw_profile_t *out,
                                  dit_hw_measured_t *measured);
/* A preset name or a profile file, normalized (what --profile takes; NULL: h200-sxm). */
dit_status_t dit_hw_profile_load(const char *spec, dit_hw_profile_t *out);

/* Adds the profile's fields to a JSON object (the optional ones per `with`). */
dit_status_t dit_hw_profile_add_json(const dit_hw_profile_t *p, unsigned with, cJSON *obj);
/* A profile file's text (caller frees): the profile, its optional fields per `with`, and
 * `measured` when not NULL. */
dit_status_t dit_hw_profile_to_json(const dit_hw_profile_t *p, unsigned with, const dit_hw_measured_t *measured,
                                    char **out_text);

#endif
