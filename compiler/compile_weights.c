/* The weight layout: each tensor-parallel shard's weights in execution order, aligned for the
 * device, converted and sliced into one blob per shard (or linked from the store's memo). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "compiler/compile_internal.h"
#include "dit_sources_hash.h"

static uint64_t align_up(uint64_t x) { return (x + DIT_WEIGHT_ALIGN - 1) / DIT_WEIGHT_ALIGN * DIT_WEIGHT_ALIGN; }

/* The layout: the weights the plan uses, in order of first use, each in the plan's dtype and
 * aligned to DIT_WEIGHT_ALIGN; values[i] is the plan value of tensor i. `key` names the blob's
 * bytes (the checkpoint's content, every conversion, slice and offset, this ditc), so that a
 * blob written before can be found without writing it again. */
static dit_status_t weights_layout(const dit_model_t *m, const dit_graph_t *g, const dit_plan_t *p, const char *weights_hash,
                                   dit_manifest_weights_t *layout, size_t **values, char key[33]) {
  size_t n = 0;
  for (size_t i = 0; i < p->n_values; i++) n += p->values[i].storage == DIT_STORAGE_WEIGHT;
  layout->tensors = calloc(n + 1, sizeof *layout->tensors);
  *values = calloc(n + 1, sizeof **values);
  if (!layout->tensors || !*values) return DIT_ERR(RESOURCE_EXHAUSTED, "weights: out of memory");
  dit_strbuf_t kb = {0};
  dit_strbuf_printf(&kb, "weights blob 1 (ditc %s) of %s, aligned to %d\n", DIT_SOURCES_HASH, weights_hash, DIT_WEIGHT_ALIGN);
  uint64_t off = 0;
  for (size_t st = 0; st < p->n_steps; st++) {
    for (int k = 0; k < p->steps[st].n_in; k++) {
      const size_t vid = (size_t)p->steps[st].in[k];
      const dit_plan_value_t *v = &p->values[vid];
      const dit_value_t *gv = dit_graph_cvalue(g, (dit_vid_t)vid); /* lowering keeps value ids */
      if (v->storage != DIT_STORAGE_WEIGHT) continue;
      int seen = 0;
      for (size_t j = 0; j < layout->n_tensors && !seen; j++) seen = !strcmp(layout->tensors[j].name, v->ref);
      if (seen) continue;
      const dit_st_tensor_t *t = gv->data ? NULL : dit_safetensors_find(m->weights, gv->src ? gv->src : v->ref);
      if (!gv->data && !t) {
        dit_strbuf_free(&kb);
        return DIT_ERR(INTERNAL, "weights: '%s' vanished from the checkpoint", v->ref);
      }
      dit_manifest_tensor_t *e = &layout->tensors[layout->n_tensors];
      if (!(e->name = strdup(v->ref))) {
        dit_strbuf_free(&kb);
        return DIT_ERR(RESOURCE_EXHAUSTED, "weights: out of memory");
      }
      (*values)[layout->n_tensors++] = vid;
      e->dtype = v->dtype;
      e->rank = v->rank;
      memcpy(e->dims, v->dims, sizeof e->dims);
      e->offset = align_up(off);
      e->nbytes = v->nbytes;
      off = e->offset + v->nbytes;
      if (gv->data) { /* a constant: named by its bytes, which the checkpoint's hash does not cover */
        char h[33];
        dit_hash128_hex(gv->data, (size_t)dit_value_nbytes(gv), h);
        dit_strbuf_printf(&kb, "%s constant %s %s>%s", v->ref, h, dit_dtype_name(gv->dtype), dit_dtype_name(v->dtype));
      } else {
        dit_strbuf_printf(&kb, "%s%s%s %s>%s", v->ref, gv->src ? " of " : "", gv->src ? gv->src : "", dit_dtype_name(t->dtype),
                          dit_dtype_name(v->dtype));
      }
      for (int d = 0; d < v->rank; d++) dit_strbuf_printf(&kb, " %" PRId64, v->dims[d]);
      dit_strbuf_printf(&kb, " slice %d %" PRId64 " at %" PRIu64 "\n", gv->slice_dim, gv->slice_dim < 0 ? 0 : gv->slice_start, e->offset);
    }
  }
  if (kb.oom) {
    dit_strbuf_free(&kb);
    return DIT_ERR(RESOURCE_EXHAUSTED, "weights: out of memory");
  }
  dit_hash128_hex(kb.p, kb.len, key);
  dit_strbuf_free(&kb);
  return DIT_OK;
}

/* Streams the layout's tensors into a blob: each converted to the plan's dtype (a tensor-
 * parallel shard's slice gathered first), zeros up to each offset. */
static dit_status_t write_weights(dit_bundle_writer_t *w, const dit_model_t *m, const dit_graph_t *g, const dit_plan_t *p,
                                  dit_manifest_weights_t *layout, const size_t *values) {
  static const uint8_t zeros[DIT_WEIGHT_ALIGN];
  uint64_t off = 0;
  void *src = NULL, *dst = NULL;
  size_t cap = 0;
  dit_status_t s = dit_bundle_writer_blob_begin(w);
  for (size_t i = 0; !s && i < layout->n_tensors; i++) {
    const dit_manifest_tensor_t *e = &layout->tensors[i];
    const dit_plan_value_t *v = &p->values[values[i]];
    const dit_value_t *gv = dit_graph_cvalue(g, (dit_vid_t)values[i]);
    const dit_st_tensor_t *t = gv->data ? NULL : dit_safetensors_find(m->weights, gv->src ? gv->src : v->ref);
    const dit_dtype_t from = t ? t->dtype : gv->dtype;
    size_t esize = dit_dtype_size(from);
    size_t numel = (size_t)(v->nbytes / dit_dtype_size(v->dtype)); /* of the (sliced) value */
    size_t need = (size_t)((t ? t->nbytes : dit_value_nbytes(gv)) / esize) * 4 + 16;
    if (need > cap) {
      free(src);
      free(dst);
      cap = need;
      src = malloc(cap);
      dst = malloc(cap);
      if (!src || !dst) {
        s = DIT_ERR(RESOURCE_EXHAUSTED, "weights: cannot allocate %zu bytes for '%s'", cap, v->ref);
        break;
      }
    }
    /* Tensors inside a safetensors file need not be aligned: copy before converting. A
     * tensor-parallel shard gathers its slice along slice_dim. */
    if (!t) {
      memcpy(src, gv->data, (size_t)dit_value_nbytes(gv));
    } else if (gv->slice_dim < 0) {
      memcpy(src, t->data, t->nbytes);
    } else {
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < gv->slice_dim; d++) outer *= t->dims[d];
      for (int d = gv->slice_dim + 1; d < t->rank; d++) inner *= t->dims[d];
      const size_t run = (size_t)(v->dims[gv->slice_dim] * inner) * esize;
      for (int64_t r = 0; r < outer; r++)
        memcpy((char *)src + (size_t)r * run,
               (const char *)t->data + ((size_t)(r * t->dims[gv->slice_dim] + gv->slice_start) * (size_t)inner) * esize, run);
    }
    /* e4m3 (a linear_fp8's weight): widened to fp32 in dst, then each output channel quantized
     * into src by the rule its scale constant was computed with (compile_quant.c). The same type
     * otherwise is a copy whatever it is (integer constants such as a tile schedule). */
    const int fp8 = v->dtype == DIT_F8E4M3;
    if (from == v->dtype && !fp8) memcpy(dst, src, (size_t)v->nbytes);
    else if (dit_convert(dst, fp8 ? DIT_F32 : v->dtype, src, from, numel)) {
      s = DIT_ERR(INVALID_ARGUMENT, "weights: cannot convert '%s' from %s to %s", v->ref, dit_dtype_name(from),
                  dit_dtype_name(v->dtype));
      break;
    }
    if (fp8) {
      const int64_t cols = (int64_t)numel / (v->dims[0] > 0 ? v->dims[0] : 1);
      for (int64_t r = 0; r < v->dims[0]; r++)
        dit_e4m3_quantize_row((const float *)dst + r * cols, cols, (uint8_t *)src + r * cols);
    }
    if (e->offset > off) s = dit_bundle_writer_blob_append(w, zeros, e->offset - off);
    if (!s) s = dit_bundle_writer_blob_append(w, fp8 ? src : dst, v->nbytes);
    off = e->offset + v->nbytes;
  }
  free(src);
  free(dst);
  uint64_t size = 0;
  if (!s) s = dit_bundle_writer_blob_end(w, layout->blob, &size);
  return s;
}

/* With a store, a blob written before for the same bytes (another shape of the same checkpoint,
 * another offload plan) is linked from the store instead. */
dit_status_t dit_compile_weights_blob(dit_bundle_writer_t *w, dit_store_t *store, const dit_model_t *m, const dit_graph_t *g,
                                 const dit_plan_t *p, const char *weights_hash, dit_manifest_weights_t *layout, dit_compile_progress_t *pr) {
  size_t *values = NULL;
  char key[33];
  dit_status_t s = weights_layout(m, g, p, weights_hash, layout, &values, key);
  const uint64_t size = layout->n_tensors ? layout->tensors[layout->n_tensors - 1].offset + layout->tensors[layout->n_tensors - 1].nbytes : 0;
  int reused = 0;
  if (!s && store) {
    char *text = NULL, *dst = NULL;
    dit_status_t ms = dit_store_memo_read(store, key, &text, NULL); /* NOT_FOUND: not written before */
    dit_json_doc_t *rec = NULL;
    dit_json_t r;
    const char *hb = NULL;
    uint64_t sz = 0;
    if (!ms) ms = dit_json_parse(text, strlen(text), "weights memo record", &rec);
    if (!ms) ms = dit_json_root(rec, &r);
    if (!ms) ms = dit_json_str(&r, "blob", 32, false, &hb);
    if (!ms) ms = dit_json_u64(&r, "size", &sz);
    const int found = !ms && dit_is_hash_hex(hb) && sz == size; /* anything else: written again */
    dit_status_free(ms);
    if (found && !dit_bundle_writer_blob_dest(w, hb, &dst)) {
      dit_status_t ps = dit_store_blob_place(store, hb, size, dst);
      reused = !ps;
      if (reused) snprintf(layout->blob, sizeof layout->blob, "%s", hb);
      dit_status_free(ps); /* a blob gone from the store is written again */
    }
    free(dst);
    dit_json_doc_free(rec);
    free(text);
  }
  if (!s && !reused) s = write_weights(w, m, g, p, layout, values);
  if (!s && store && !reused) {
    char rec[128];
    snprintf(rec, sizeof rec, "{\"blob\": \"%s\", \"size\": %" PRIu64 "}\n", layout->blob, size);
    dit_status_free(dit_store_memo_write(store, key, rec)); /* only a shortcut: a failure costs a rewrite later */
  }
  free(values);
  if (!s)
    dit_compile_progress(pr, "weights: %zu tensors, %.1f MiB in execution order (blob %.12s%s)", layout->n_tensors, (double)size / (1 << 20),
             layout->blob, reused ? ", linked from the store: not written again" : "");
  return s;
}

