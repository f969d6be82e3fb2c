/* A human-readable summary of a manifest and of rank 0's offload schedule (read from its typed
 * plan section), shared by `ditc inspect` and `ditrun info`. */
#include <inttypes.h>
#include <stdio.h>

#include "artifacts/bundle.h"
#include "artifacts/manifest.h"
#include "artifacts/plan.h"

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
  if (m->topology.reuse_group) {
    /* Under usp the groups are of ring members (each U ranks after the all-to-all). */
    const int u = m->topology.reuse_ulysses > 1 ? m->topology.reuse_ulysses : 1;
    char members[48];
    if (u > 1) snprintf(members, sizeof members, "ring members (x ulysses %d)", u);
    else snprintf(members, sizeof members, "ranks");
    fprintf(f, "reuse      ditango: %d groups of %d %s, a state cache per layer (%d) and ", m->topology.cp / u / m->topology.reuse_group,
            m->topology.reuse_group, members, m->topology.reuse_layers);
    if (m->topology.reuse_merge > 1) fprintf(f, "%d adjacent remote groups", m->topology.reuse_merge);
    else fprintf(f, "remote group");
    fprintf(f, ", %d cop%s, %" PRIu64 " bytes\n", m->topology.reuse_copies, m->topology.reuse_copies == 1 ? "y" : "ies",
            m->topology.reuse_cache_bytes);
  }
  fprintf(f, "shape      batch %" PRId64 ", %" PRId64 " frames %" PRId64 "x%" PRId64 ", text %" PRId64 "; latent ",
         m->shape.batch, m->shape.frames, m->shape.height, m->shape.width, m->shape.text_len);
  print_dims(f, m->shape.latent, 4);
  if (m->shape.tile_count)
    fprintf(f, "\ntile       %" PRId64 " window%s %" PRId64 " wide over %" PRId64 " columns, halo %" PRId64, m->shape.tile_count,
            m->shape.tile_count == 1 ? "" : "s", m->shape.latent[3], m->shape.tile_full, m->shape.tile_halo);
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
    fprintf(f, "blob       %-8s %s %12" PRIu64 " bytes%s%s\n", m->blobs[i].role, m->blobs[i].hash, m->blobs[i].size,
            m->blobs[i].name[0] ? "  " : "", m->blobs[i].name);
  for (size_t i = 0; i < m->n_stages; i++) {
    const dit_manifest_stage_t *st = &m->stages[i];
    fprintf(f, "stage      %-12s %s (%s, %s)", st->role, st->identity, st->family, st->model_class);
    if (st->argument[0]) fprintf(f, " -> %s from %s, padding %s", st->argument, st->output, dit_padding_names[st->padding]);
    if (st->mask_argument[0]) fprintf(f, ", its mask %s", st->mask_argument);
    if (st->prompt_template[0]) fprintf(f, ", a prompt template whose first %lld tokens go", (long long)st->drop);
    if (st->window_stride) fprintf(f, ", in windows every %lld latent frames", (long long)st->window_stride);
    fputc('\n', f);
  }
  for (size_t i = 0; i < m->n_weights; i++)
    fprintf(f, "weights    %s: tp rank %d/%d, %zu tensors\n", m->weights[i].blob, m->weights[i].tp_rank, m->weights[i].tp_size,
           m->weights[i].n_tensors);
  if (m->n_experts) fprintf(f, "experts    %zu, switched below timestep %g\n", m->n_experts, m->boundary_timestep);
  for (size_t e = 0; e < m->n_experts; e++)
    for (size_t i = 0; i < m->experts[e].n_ranks; i++)
      fprintf(f, "expert     %-13s rank %d: plan %s, weights %s\n", m->experts[e].name, m->experts[e].ranks[i].rank,
              m->experts[e].ranks[i].plan, m->experts[e].ranks[i].weights);
  fprintf(f, "memory     arena %.2f MiB, weights %.2f MiB, predicted peak %.2f MiB\n", (double)m->arena_bytes / (1 << 20),
         (double)m->weight_bytes / (1 << 20), (double)m->peak_bytes / (1 << 20));
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

void dit_plan_offload_print(const dit_plan_offload_t *o, FILE *f) {
  if (o->mode == DIT_PLAN_OFFLOAD_NONE) return;
  fprintf(f, "offload    %s, chunks of %.3g MiB: predicted step %.3f ms (%.3f resident), peak %.2f MiB (%.2f resident)\n",
          dit_plan_offload_mode_name(o->mode), (double)o->chunk_bytes / (1 << 20), o->predicted_step_ms, o->resident_step_ms,
          (double)o->predicted_peak_bytes / (1 << 20), (double)o->resident_peak_bytes / (1 << 20));
  const dit_hw_profile_t *hp = &o->profile;
  fprintf(f, "profile    %s: %.3g TFLOP/s x %.3g, host-to-device %.3g GB/s x %.3g", hp->name, hp->p_peak_tflops, hp->eta_comp,
          hp->bw_h2d_gbs, hp->eta_pref);
  if (hp->step_overhead_us > 0) fprintf(f, ", %.3g us a step", hp->step_overhead_us);
  if (hp->coll_gbs > 0) fprintf(f, ", collectives %.3g us + bytes at %.3g GB/s", hp->coll_latency_us, hp->coll_gbs);
  fputc('\n', f);
  fprintf(f, "           block  GFLOP    F* GFLOP  T_comp ms  T_pref ms  resident  chunks  next block's chunks per window\n");
  for (size_t i = 0; i < o->n_blocks; i++) {
    const dit_plan_offload_block_t *b = &o->blocks[i];
    fprintf(f, "           %5u %7.3g %10.3g %10.4f %10.4f %8.2f  %u/%u", b->index, b->flops / 1e9, b->f_star / 1e9, b->t_comp_ms,
            b->t_pref_ms, b->resident, b->resident_chunks, b->chunks);
    /* the windows between collectives and how many chunks hide behind each */
    for (uint32_t k = 0; b->window_chunks && k <= b->n_yields; k++) fprintf(f, "%s%u", k ? " | " : "  ", b->window_chunks[k]);
    fputc('\n', f);
  }
  if (o->swap.present) {
    const dit_plan_swap_t *w = &o->swap;
    fprintf(f, "swap       %.2f MiB to move (%u chunks of %.3g MiB) into the device over the last %u forwards before the boundary, "
            "%u chunks after each block; predicted stall %.3f ms, predicted peak %.2f MiB\n",
            (double)w->bytes / (1 << 20), w->chunks, (double)w->chunk_bytes / (1 << 20), w->forwards, w->chunks_per_block,
            w->predicted_stall_ms, (double)w->predicted_peak_bytes / (1 << 20));
  }
}

/* Rank 0's plan of one expert (its `ranks` entry), offload section printed. */
static void print_rank0_offload(dit_bundle_t *b, const dit_manifest_rank_t *r0, const char *expert, FILE *f) {
  dit_mapping_t pm;
  dit_plan_t *p = NULL;
  char what[120];
  snprintf(what, sizeof what, "blobs/%.32s (plan of rank 0%s%s)", r0->plan, expert ? ", " : "", expert ? expert : "");
  dit_status_t s = dit_bundle_map_blob(b, r0->plan, &pm);
  if (!s) {
    s = dit_plan_parse((const char *)pm.data, pm.size, what, &p);
    dit_file_unmap(&pm);
  }
  if (!s && expert && p->offload.mode != DIT_PLAN_OFFLOAD_NONE) fprintf(f, "expert     %s:\n", expert);
  if (s) fprintf(f, "offload    unknown: %s\n", dit_status_message(s));
  else dit_plan_offload_print(&p->offload, f);
  dit_status_free(s);
  dit_plan_free(p);
}

void dit_bundle_print_offload(dit_bundle_t *b, FILE *f) {
  const dit_manifest_t *m = dit_bundle_manifest(b);
  if (!m->n_ranks) return;
  /* A two-expert bundle: each expert's schedule, the second's with the swap into it. */
  for (size_t e = 0; e < (m->n_experts ? m->n_experts : 1); e++) {
    const dit_manifest_rank_t *r0 = e ? dit_manifest_expert_rank(m, m->experts[e].name, 0) : &m->ranks[0];
    if (r0) print_rank0_offload(b, r0, m->n_experts ? m->experts[e].name : NULL, f);
  }
}
