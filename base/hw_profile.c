/* Hardware profiles: presets, normalization, and the profile file's writer and parser. */
#include "base/hw_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"

static const dit_hw_profile_t kPresets[] = {
    /* Datasheet dense bf16 rates; host links as measured with pinned 1 GiB copies (PCIe Gen5
     * x16 on the SXM parts); the efficiencies are placeholders until calibration measures them. */
    {"h100-pcie", 756, 50, 0.6, 0.9, 0, 0, 0, 0},
    {"h100-sxm", 989, 55, 0.6, 0.9, 0, 0, 0, 0},
    {"h200-sxm", 989, 55.3, 0.6, 0.9, 0, 0, 0, 0},
};

const dit_hw_profile_t *dit_hw_profile_preset(const char *name) {
  for (size_t i = 0; i < sizeof kPresets / sizeof kPresets[0]; i++)
    if (!strcmp(kPresets[i].name, name)) return &kPresets[i];
  return NULL;
}

static double sig3(double v) {
  if (!(v > 0)) return v;
  char buf[32];
  snprintf(buf, sizeof buf, "%.3g", v);
  double r;
  sscanf(buf, "%lf", &r);
  return r;
}

void dit_hw_profile_normalize(dit_hw_profile_t *p) {
  p->p_peak_tflops = sig3(p->p_peak_tflops);
  p->bw_h2d_gbs = sig3(p->bw_h2d_gbs);
  p->eta_comp = sig3(p->eta_comp);
  p->eta_pref = sig3(p->eta_pref);
  p->overhead_mib = sig3(p->overhead_mib);
  p->step_overhead_us = sig3(p->step_overhead_us);
  p->coll_latency_us = sig3(p->coll_latency_us);
  p->coll_gbs = sig3(p->coll_gbs);
}

/* ---- parser ---- */

static dit_status_t opt_num(const dit_json_t *o, const char *key, double hi, double *out) {
  *out = 0;
  DIT_RETURN_IF(dit_json_has(o, key) ? dit_json_num(o, key, 0, hi, out) : DIT_OK);
  *out += 0.0; /* -0 reads as 0: "not modeled", and written back the same */
  return DIT_OK;
}

/* A rate or efficiency: a number in (0, hi]. */
static dit_status_t pos_num(const dit_json_t *o, const char *key, double hi, double *out) {
  DIT_RETURN_IF(dit_json_num(o, key, 0, hi, out));
  if (*out > 0) return DIT_OK;
  dit_json_t v;
  dit_json_get(o, key, &v);
  char h[40];
  dit_json_fmt_num(hi, h);
  return dit_json_error(&v, DIT_CODE_OUT_OF_RANGE, "expected a number in (0, %s], found 0", h);
}

static dit_status_t parse_measured(const dit_json_t *obj, dit_hw_measured_t *out) {
  static const char *const keys[] = {"bundle", "forward_ms_median", "collectives_ms", "forwards", "chunk_mb", "h2d_bytes",
                                     "second", "second_forward_ms_median", "second_collectives_ms", NULL};
  dit_json_t m;
  DIT_RETURN_IF(dit_json_object(obj, "measured", &m));
  DIT_RETURN_IF(dit_json_check_keys(&m, keys));
  dit_hw_measured_t x;
  memset(&x, 0, sizeof x);
  DIT_RETURN_IF(dit_json_str_copy(&m, "bundle", x.bundle, sizeof x.bundle, false));
  DIT_RETURN_IF(dit_json_num(&m, "forward_ms_median", 0, 1e12, &x.forward_ms_median));
  DIT_RETURN_IF(opt_num(&m, "collectives_ms", 1e12, &x.collectives_ms));
  DIT_RETURN_IF(dit_json_i32(&m, "forwards", 1, 1000000, &x.forwards));
  DIT_RETURN_IF(dit_json_num(&m, "chunk_mb", 0, 1e9, &x.chunk_mb));
  DIT_RETURN_IF(dit_json_num(&m, "h2d_bytes", 0, DIT_JSON_MAX_SAFE, &x.h2d_bytes));
  if (dit_json_has(&m, "second")) {
    DIT_RETURN_IF(dit_json_str_copy(&m, "second", x.second, sizeof x.second, false));
    DIT_RETURN_IF(dit_json_num(&m, "second_forward_ms_median", 0, 1e12, &x.second_forward_ms_median));
    DIT_RETURN_IF(opt_num(&m, "second_collectives_ms", 1e12, &x.second_collectives_ms));
  } else if (dit_json_has(&m, "second_forward_ms_median") || dit_json_has(&m, "second_collectives_ms")) {
    return dit_json_error(&m, DIT_CODE_INVALID_ARGUMENT, "second shape's figures without 'second'");
  }
  if (out) *out = x;
  return DIT_OK;
}

dit_status_t dit_hw_profile_from_json(const dit_json_t *obj, int allow_measured, dit_hw_profile_t *out,
                                      dit_hw_measured_t *measured) {
  static const char *const keys[] = {"name", "p_peak_tflops", "bw_h2d_gbs", "eta_comp", "eta_pref", "overhead_mib",
                                     "step_overhead_us", "coll_latency_us", "coll_gbs", "measured", NULL};
  static const char *const keys_plain[] = {"name", "p_peak_tflops", "bw_h2d_gbs", "eta_comp", "eta_pref", "overhead_mib",
                                           "step_overhead_us", "coll_latency_us", "coll_gbs", NULL};
  DIT_RETURN_IF(dit_json_expect_object(obj));
  DIT_RETURN_IF(dit_json_check_keys(obj, allow_measured ? keys : keys_plain));
  dit_hw_profile_t p;
  memset(&p, 0, sizeof p);
  if (dit_json_has(obj, "name")) DIT_RETURN_IF(dit_json_str_copy(obj, "name", p.name, sizeof p.name, false));
  else snprintf(p.name, sizeof p.name, "file");
  DIT_RETURN_IF(pos_num(obj, "p_peak_tflops", DIT_HW_MAX_TFLOPS, &p.p_peak_tflops));
  DIT_RETURN_IF(pos_num(obj, "bw_h2d_gbs", DIT_HW_MAX_GBS, &p.bw_h2d_gbs));
  DIT_RETURN_IF(pos_num(obj, "eta_comp", DIT_HW_MAX_ETA, &p.eta_comp));
  DIT_RETURN_IF(pos_num(obj, "eta_pref", DIT_HW_MAX_ETA, &p.eta_pref));
  /* Optional, as calibrated (0 where absent: not modeled). */
  DIT_RETURN_IF(opt_num(obj, "overhead_mib", DIT_HW_MAX_MIB, &p.overhead_mib));
  DIT_RETURN_IF(opt_num(obj, "step_overhead_us", DIT_HW_MAX_US, &p.step_overhead_us));
  DIT_RETURN_IF(opt_num(obj, "coll_latency_us", DIT_HW_MAX_US, &p.coll_latency_us));
  DIT_RETURN_IF(opt_num(obj, "coll_gbs", DIT_HW_MAX_GBS, &p.coll_gbs));
  if (dit_json_has(obj, "coll_latency_us") && !(p.coll_gbs > 0))
    return dit_json_error(obj, DIT_CODE_INVALID_ARGUMENT, "'coll_latency_us' given without a positive 'coll_gbs'");
  if (allow_measured && dit_json_has(obj, "measured")) DIT_RETURN_IF(parse_measured(obj, measured));
  else if (measured) memset(measured, 0, sizeof *measured);
  *out = p;
  return DIT_OK;
}

dit_status_t dit_hw_profile_parse(const char *text, size_t len, const char *what, dit_hw_profile_t *out,
                                  dit_hw_measured_t *measured) {
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_json_t root;
  dit_status_t s = dit_json_root(doc, &root);
  if (!s) s = dit_hw_profile_from_json(&root, 1, out, measured);
  dit_json_doc_free(doc);
  return s;
}

dit_status_t dit_hw_profile_load(const char *spec, dit_hw_profile_t *out) {
  const char *name = spec ? spec : "h200-sxm";
  const dit_hw_profile_t *pre = dit_hw_profile_preset(name);
  if (pre) {
    *out = *pre;
  } else {
    char *text = NULL;
    size_t len = 0;
    DIT_RETURN_IF_ERROR(dit_file_read(name, 1 << 20, &text, &len),
                        "--profile %s: not a preset (h100-pcie, h100-sxm, h200-sxm) nor a readable profile file", name);
    dit_status_t s = dit_hw_profile_parse(text, len, name, out, NULL);
    free(text);
    DIT_RETURN_IF(s);
  }
  dit_hw_profile_normalize(out);
  return DIT_OK;
}

/* ---- writer ---- */

/* The shortest text that reads back as exactly v (cJSON's own printing may drop the last bit,
 * and a profile written then read must keep its values). */
static cJSON *add_exact(cJSON *o, const char *key, double v) {
  char buf[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  return cJSON_AddRawToObject(o, key, buf);
}

/* A number as cJSON prints it (into trees others serialize), or exactly (into a file). */
static cJSON *add_num(cJSON *o, const char *key, double v, int exact) {
  return exact ? add_exact(o, key, v) : cJSON_AddNumberToObject(o, key, v);
}

static dit_status_t add_fields(const dit_hw_profile_t *p, unsigned with, cJSON *o, int exact) {
  int ok = cJSON_AddStringToObject(o, "name", p->name) && add_num(o, "p_peak_tflops", p->p_peak_tflops, exact) &&
           add_num(o, "bw_h2d_gbs", p->bw_h2d_gbs, exact) && add_num(o, "eta_comp", p->eta_comp, exact) &&
           add_num(o, "eta_pref", p->eta_pref, exact);
  if (ok && (with & DIT_HW_WITH_OVERHEAD)) ok = add_num(o, "overhead_mib", p->overhead_mib, exact) != NULL;
  if (ok && (with & DIT_HW_WITH_STEP_OVERHEAD)) ok = add_num(o, "step_overhead_us", p->step_overhead_us, exact) != NULL;
  if (ok && (with & DIT_HW_WITH_COLLECTIVES))
    ok = add_num(o, "coll_latency_us", p->coll_latency_us, exact) && add_num(o, "coll_gbs", p->coll_gbs, exact);
  return ok ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "hardware profile: out of memory");
}

dit_status_t dit_hw_profile_add_json(const dit_hw_profile_t *p, unsigned with, cJSON *o) {
  return add_fields(p, with, o, 0);
}

dit_status_t dit_hw_profile_to_json(const dit_hw_profile_t *p, unsigned with, const dit_hw_measured_t *ms, char **out_text) {
  *out_text = NULL;
  cJSON *o = cJSON_CreateObject();
  if (!o) return DIT_ERR(RESOURCE_EXHAUSTED, "hardware profile: out of memory");
  const int exact = 1;
  dit_status_t s = add_fields(p, with, o, exact);
  if (!s && ms) {
    cJSON *m = cJSON_AddObjectToObject(o, "measured");
    int ok = m && cJSON_AddStringToObject(m, "bundle", ms->bundle) &&
             add_num(m, "forward_ms_median", ms->forward_ms_median, exact) &&
             add_num(m, "collectives_ms", ms->collectives_ms, exact) && add_num(m, "forwards", ms->forwards, exact) &&
             add_num(m, "chunk_mb", ms->chunk_mb, exact) && add_num(m, "h2d_bytes", ms->h2d_bytes, exact);
    if (ok && ms->second[0])
      ok = cJSON_AddStringToObject(m, "second", ms->second) &&
           add_num(m, "second_forward_ms_median", ms->second_forward_ms_median, exact) &&
           add_num(m, "second_collectives_ms", ms->second_collectives_ms, exact);
    if (!ok) s = DIT_ERR(RESOURCE_EXHAUSTED, "hardware profile: out of memory");
  }
  char *text = s ? NULL : cJSON_Print(o);
  cJSON_Delete(o);
  if (!s && !text) s = DIT_ERR(RESOURCE_EXHAUSTED, "hardware profile: out of memory while printing");
  if (s) return s;
  /* A file ends with a newline. */
  size_t n = strlen(text);
  char *t = realloc(text, n + 2);
  if (!t) {
    free(text);
    return DIT_ERR(RESOURCE_EXHAUSTED, "hardware profile: out of memory");
  }
  t[n] = '\n', t[n + 1] = 0;
  *out_text = t;
  return DIT_OK;
}
