/* A human-readable summary of a manifest, shared by `ditc inspect` and `ditrun info`. */
#include <inttypes.h>
#include <stdio.h>

#include "artifacts/manifest.h"

static void print_dims(FILE *f, const int64_t *d, int rank) {
  fputc('[', f);
  for (int i = 0; i < rank; i++) fprintf(f, "%s%" PRId64, i ? "," : "", d[i]);
  fputc(']', f);
}

void dit_manifest_print(const dit_manifest_t *m, FILE *f) {
  fprintf(f, "bundle     %s\n", m->identity);
  fprintf(f, "schema     %d.%d\n", m->schema_major, m->schema_minor);
  fprintf(f, "model      %s (%s, family %s)\n", m->model_class, m->variant, m->family);
  fprintf(f, "target     %s\n", m->arch);
  fprintf(f, "topology   world %d = tp %d x cp %d (%s) x cfg %d\n", m->topology.world, m->topology.tp, m->topology.cp,
         m->topology.cp_mode, m->topology.cfg);
  fprintf(f, "shape      batch %" PRId64 ", %" PRId64 " frames %" PRId64 "x%" PRId64 ", text %" PRId64 "; latent ",
         m->shape.batch, m->shape.frames, m->shape.height, m->shape.width, m->shape.text_len);
  print_dims(f, m->shape.latent, 4);
  fprintf(f, "\ndtype      %s\n", dit_dtype_name(m->dtype));
  for (size_t i = 0; i < m->n_inputs; i++) {
    fprintf(f, "input      %-22s %s", m->io_inputs[i].name, dit_dtype_name(m->io_inputs[i].dtype));
    print_dims(f, m->io_inputs[i].dims, m->io_inputs[i].rank);
    fputc('\n', f);
  }
  for (size_t i = 0; i < m->n_outputs; i++) {
    fprintf(f, "output     %-22s %s", m->io_outputs[i].name, dit_dtype_name(m->io_outputs[i].dtype));
    print_dims(f, m->io_outputs[i].dims, m->io_outputs[i].rank);
    fputc('\n', f);
  }
  for (size_t i = 0; i < m->n_blobs; i++)
    fprintf(f, "blob       %-8s %s %12" PRIu64 " bytes\n", m->blobs[i].role, m->blobs[i].hash, m->blobs[i].size);
  for (size_t i = 0; i < m->n_weights; i++)
    fprintf(f, "weights    %s: tp rank %d/%d, %zu tensors\n", m->weights[i].blob, m->weights[i].tp_rank, m->weights[i].tp_size,
           m->weights[i].n_tensors);
  fprintf(f, "memory     arena %.2f MiB, weights %.2f MiB, predicted peak %.2f MiB\n", (double)m->arena_bytes / (1 << 20),
         (double)m->weight_bytes / (1 << 20), (double)m->peak_bytes / (1 << 20));
  const cJSON *of = m->summary ? cJSON_GetObjectItem(m->summary, "offload") : NULL;
  if (cJSON_IsObject(of)) {
    const cJSON *mode = cJSON_GetObjectItem(of, "mode"), *step = cJSON_GetObjectItem(of, "predicted_step_ms"),
                *rstep = cJSON_GetObjectItem(of, "resident_step_ms"), *peak = cJSON_GetObjectItem(of, "predicted_peak_bytes"),
                *rpeak = cJSON_GetObjectItem(of, "resident_peak_bytes"), *chunk = cJSON_GetObjectItem(of, "chunk_bytes"),
                *blocks = cJSON_GetObjectItem(of, "blocks");
    if (cJSON_IsString(mode) && cJSON_IsNumber(step) && cJSON_IsNumber(rstep) && cJSON_IsNumber(peak) && cJSON_IsNumber(rpeak) &&
        cJSON_IsNumber(chunk)) {
      fprintf(f, "offload    %s, chunks of %.3g MiB: predicted step %.3f ms (%.3f resident), peak %.2f MiB (%.2f resident)\n",
              mode->valuestring, chunk->valuedouble / (1 << 20), step->valuedouble, rstep->valuedouble,
              peak->valuedouble / (1 << 20), rpeak->valuedouble / (1 << 20));
      const cJSON *hp = cJSON_GetObjectItem(of, "profile");
      const cJSON *hn = cJSON_GetObjectItem(hp, "name"), *pp = cJSON_GetObjectItem(hp, "p_peak_tflops"), *bw = cJSON_GetObjectItem(hp, "bw_h2d_gbs"),
                  *ec = cJSON_GetObjectItem(hp, "eta_comp"), *ep = cJSON_GetObjectItem(hp, "eta_pref");
      if (cJSON_IsString(hn) && cJSON_IsNumber(pp) && cJSON_IsNumber(bw) && cJSON_IsNumber(ec) && cJSON_IsNumber(ep))
      {
        fprintf(f, "profile    %s: %.3g TFLOP/s x %.3g, host-to-device %.3g GB/s x %.3g", hn->valuestring, pp->valuedouble,
                ec->valuedouble, bw->valuedouble, ep->valuedouble);
        const cJSON *so = cJSON_GetObjectItem(hp, "step_overhead_us"), *cl = cJSON_GetObjectItem(hp, "coll_latency_us"),
                    *cg = cJSON_GetObjectItem(hp, "coll_gbs");
        if (cJSON_IsNumber(so) && so->valuedouble > 0) fprintf(f, ", %.3g us a step", so->valuedouble);
        if (cJSON_IsNumber(cl) && cJSON_IsNumber(cg) && cg->valuedouble > 0)
          fprintf(f, ", collectives %.3g us + bytes at %.3g GB/s", cl->valuedouble, cg->valuedouble);
        fputc('\n', f);
      }
      fprintf(f, "           block  GFLOP    F* GFLOP  T_comp ms  T_pref ms  resident  chunks  next block's chunks per window\n");
      int i = 0;
      const cJSON *b;
      cJSON_ArrayForEach(b, blocks) {
        const cJSON *fl = cJSON_GetObjectItem(b, "flops"), *fs = cJSON_GetObjectItem(b, "f_star"),
                    *tc = cJSON_GetObjectItem(b, "t_comp_ms"), *tp = cJSON_GetObjectItem(b, "t_pref_ms"),
                    *rs = cJSON_GetObjectItem(b, "resident"), *ch = cJSON_GetObjectItem(b, "chunks"),
                    *rc = cJSON_GetObjectItem(b, "resident_chunks");
        if (cJSON_IsNumber(fl) && cJSON_IsNumber(fs) && cJSON_IsNumber(tc) && cJSON_IsNumber(tp) && cJSON_IsNumber(rs) &&
            cJSON_IsNumber(ch) && cJSON_IsNumber(rc))
        {
          fprintf(f, "           %5d %7.3g %10.3g %10.4f %10.4f %8.2f  %.0f/%.0f", i, fl->valuedouble / 1e9, fs->valuedouble / 1e9,
                  tc->valuedouble, tp->valuedouble, rs->valuedouble, rc->valuedouble, ch->valuedouble);
          /* chunked: the windows between collectives and how many chunks hide behind each */
          const cJSON *w, *ws = cJSON_GetObjectItem(b, "window_chunks");
          const char *sep = "  ";
          cJSON_ArrayForEach(w, ws) {
            if (cJSON_IsNumber(w)) fprintf(f, "%s%.0f", sep, w->valuedouble);
            sep = " | ";
          }
          fputc('\n', f);
        }
        i++;
      }
    }
  }
  if (m->summary) {
    const cJSON *fl = cJSON_GetObjectItem(m->summary, "flops");
    const cJSON *fb = cJSON_GetObjectItem(m->summary, "flops_per_block");
    const cJSON *st = cJSON_GetObjectItem(m->summary, "steps");
    const cJSON *tk = cJSON_GetObjectItem(m->summary, "tokens");
    if (cJSON_IsNumber(fl) && cJSON_IsNumber(fb) && cJSON_IsNumber(st))
      fprintf(f, "plan       %.0f steps, %.4g GFLOP per forward, %.4g GFLOP per block, %.0f tokens\n", st->valuedouble,
             fl->valuedouble / 1e9, fb->valuedouble / 1e9, cJSON_IsNumber(tk) ? tk->valuedouble : 0.0);
  }
}
