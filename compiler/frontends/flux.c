/* The FLUX.1 frontend: FluxTransformer2DModel as diffusers defines it (dev with the guidance
 * embedding, schnell without), built from the shared blocks: double-stream blocks (text and
 * image streams with their own modulation, projections and norms, one joint attention over
 * their tokens, keys ordered [image, text] where diffusers joins [text, image]: the same
 * attention), then single-stream blocks over the joined tokens (attention and MLP side by side,
 * one output projection over both). The model takes packed latents
 * [B, (h/2)(w/2), 4C] and returns them packed, as the pipeline passes them; the position ids
 * (txt_ids, img_ids) follow from the shape, so their rotary table is a compile-time constant. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"
#include "compiler/frontends/family.h"
#include "compiler/frontends/pipeline.h"

/* ---- config ---- */

static const dit_config_field_t kFluxFields[] = {
    {"patch_size", DIT_CF_INT, 0, 1, 64, 0, NULL},           {"in_channels", DIT_CF_INT, 0, 1, 4096, 0, NULL},
    {"out_channels", DIT_CF_INT, 1, 1, 4096, 0, NULL},       {"num_layers", DIT_CF_INT, 0, 0, 1024, 0, NULL},
    {"num_single_layers", DIT_CF_INT, 0, 0, 1024, 0, NULL},  {"attention_head_dim", DIT_CF_INT, 0, 2, 1024, 0, NULL},
    {"num_attention_heads", DIT_CF_INT, 0, 1, 1024, 0, NULL}, {"joint_attention_dim", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"pooled_projection_dim", DIT_CF_INT, 0, 1, 65536, 0, NULL}, {"guidance_embeds", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"axes_dims_rope", DIT_CF_INTS, 0, 0, 1024, 3, "[ids, rows, columns]"},
};

static const char kFluxDefaults[] =
    "{\"patch_size\":1,\"in_channels\":64,\"out_channels\":null,\"num_layers\":19,\"num_single_layers\":38,"
    "\"attention_head_dim\":128,\"num_attention_heads\":24,\"joint_attention_dim\":4096,"
    "\"pooled_projection_dim\":768,\"guidance_embeds\":false,\"axes_dims_rope\":[16,56,56]}";

#define FLUX_FREQ_DIM 256 /* Timesteps(num_channels=256) of the time, guidance embedders */
#define FLUX_MLP_RATIO 4  /* the feed-forwards' and single blocks' MLP width over the model's */
#define FLUX_EPS 1e-6     /* every LayerNorm and the q/k RMS norms */

static dit_status_t flux_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read(kFluxFields, sizeof kFluxFields / sizeof kFluxFields[0], kFluxDefaults, "FluxTransformer2DModel",
                                raw, &m->config));
  const cJSON *cfg = m->config;
  dit_flux_config_t *f = &m->flux;
  f->patch = dit_config_int(cfg, "patch_size");
  f->in_channels = dit_config_int(cfg, "in_channels");
  f->out_channels = dit_config_int(cfg, "out_channels");
  if (!f->out_channels) f->out_channels = f->in_channels; /* out_channels or in_channels, as diffusers resolves it */
  f->layers = dit_config_int(cfg, "num_layers");
  f->single_layers = dit_config_int(cfg, "num_single_layers");
  f->heads = dit_config_int(cfg, "num_attention_heads");
  f->head_dim = dit_config_int(cfg, "attention_head_dim");
  f->joint_dim = dit_config_int(cfg, "joint_attention_dim");
  f->pooled_dim = dit_config_int(cfg, "pooled_projection_dim");
  f->guidance_embeds = dit_config_bool(cfg, "guidance_embeds");
  if (f->patch != 1)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'patch_size' = %" PRId64 ": only 1 is supported (the pipeline packs 2x2 latents itself)",
                   raw->what, f->patch);
  if (f->layers + f->single_layers < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: fields 'num_layers' and 'num_single_layers' are both 0: the model has no blocks", raw->what);
  return dit_config_rope_axes(cfg, "axes_dims_rope", f->head_dim, raw->what, f->axes);
}

/* ---- checkpoint ---- */

static void flux_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_flux_config_t *f = &m->flux;
  const int64_t D = f->heads * f->head_dim;
  dit_expected_linear(l, D, f->in_channels, 1, "x_embedder");
  dit_expected_linear(l, D, f->joint_dim, 1, "context_embedder");
  dit_expected_embedder(l, D, FLUX_FREQ_DIM, "time_text_embed.timestep_embedder");
  dit_expected_embedder(l, D, f->pooled_dim, "time_text_embed.text_embedder");
  if (f->guidance_embeds) {
    dit_expected_why(l, "field 'guidance_embeds' = true");
    dit_expected_embedder(l, D, FLUX_FREQ_DIM, "time_text_embed.guidance_embedder");
    dit_expected_why(l, NULL);
  }
  dit_expected_flux_blocks(l, f->layers, f->single_layers, D, FLUX_MLP_RATIO * D, f->head_dim);
  dit_expected_linear(l, 2 * D, D, 1, "norm_out.linear");
  dit_expected_linear(l, f->patch * f->patch * f->out_channels, D, 1, "proj_out");
}

/* ---- variant, pipeline, shape ---- */

static dit_status_t flux_pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  (void)vae_what;
  if (want && strcmp(want, "flux.1"))
    return DIT_ERR(INVALID_ARGUMENT, "--variant %s: unknown FLUX variant (flux.1; dev and schnell differ by config.json's guidance_embeds)",
                   want);
  snprintf(m->variant, sizeof m->variant, "flux.1");
  dit_image_vae_factors(m);
  return DIT_OK;
}

static dit_status_t flux_check_compilable(const dit_model_t *m) {
  const char *cls = m->pipeline.index.class_name;
  if (cls[0] && strcmp(cls, "FluxPipeline"))
    return DIT_ERR(UNIMPLEMENTED, "%s/model_index.json: field '_class_name' = \"%s\": a FluxTransformer2DModel runs in FluxPipeline",
                   m->pipeline.dir, cls);
  if (m->pipeline.n_experts > 1)
    return DIT_ERR(UNIMPLEMENTED, "%s/model_index.json: field 'transformer_2': FLUX pipelines have one transformer", m->pipeline.dir);
  if (m->flux.in_channels % 4)
    return DIT_ERR(INVALID_ARGUMENT, "%s/config.json: field 'in_channels' = %" PRId64 ": packed latents hold 4 (2x2) latent pixels "
                   "per token, so it must be a multiple of 4",
                   m->model_dir, m->flux.in_channels);
  return DIT_OK;
}

static dit_status_t flux_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  return dit_packed_latent_shape(m, r, m->flux.in_channels, out);
}

/* ---- graph ---- */

/* The rotary table of image tokens [t0, t0 + n) followed by `text` text tokens: img_ids are
 * (0, row, column) and txt_ids zeros, as the pipeline prepares them (so text rows are the
 * identity); per axis a the pairs of get_1d_rotary_pos_embed (frequencies theta^(-2j/dim_a) in
 * float64, cos and sin rounded to float32 once), the axes' pairs one after another.
 * cs [n + text, head_dim]: (cos, sin) per pair. */
static float *flux_rope_table(const dit_flux_config_t *f, int64_t gw, int64_t t0, int64_t n, int64_t text) {
  const int64_t hd = f->head_dim;
  float *cs = malloc((size_t)((n + text) * hd) * sizeof *cs);
  if (!cs) return NULL;
  for (int64_t t = 0; t < n + text; t++) {
    const int64_t img = t < n ? t0 + t : -1;
    const double pos[3] = {0, img < 0 ? 0 : (double)(img / gw), img < 0 ? 0 : (double)(img % gw)};
    float *row = cs + t * hd;
    int64_t j = 0;
    for (int a = 0; a < 3; a++) {
      for (int64_t i = 0; i < f->axes[a] / 2; i++, j++) {
        const double freq = 1.0 / pow(10000.0, (double)(2 * i) / (double)f->axes[a]);
        const double ang = (double)(float)pos[a] * freq;
        row[2 * j] = (float)cos(ang);
        row[2 * j + 1] = (float)sin(ang);
      }
    }
  }
  return cs;
}

/* TimestepEmbedding(256 -> D) of a scalar per sample: the sinusoid of value * 1000 in fp32
 * (flip_sin_to_cos, shift 0), cast to the model dtype, linear, SiLU, linear. */
static dit_vid_t embed_scalar(dit_blocks_t *b, dit_vid_t v, const char *prefix, const char *name, dit_dtype_t dt) {
  char n1[256];
  snprintf(n1, sizeof n1, "%s.sinusoid", name);
  return dit_blocks_timestep_mlp(b, dit_blocks_sinusoid_scaled(b, v, FLUX_FREQ_DIM, 1, 0.0, 1000.0, dt, n1), prefix, name);
}

static dit_status_t flux_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_flux_config_t *f = &m->flux;
  const int cp = req->cp > 1 ? req->cp : 1;
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, L = req->text_len, T = ls.tokens, gw = ls.width / 2;
  DIT_RETURN_IF(dit_joint_parallel_check(m, req, f->heads, T));
  /* This rank's image tokens: its share of the context-parallel group's; the text is whole on every rank. */
  const int64_t Tl = T / cp, t0 = (cp > 1 ? req->cp_rank : 0) * Tl;
  const dit_dtype_t dt = req->dtype;
  float *cs_data = flux_rope_table(f, gw, 0, T, L);
  if (!cs_data) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the rotary table");
  dit_graph_t *g;
  dit_blocks_t *b;
  dit_status_t s = dit_joint_builder(m, req, f->heads, f->head_dim, FLUX_EPS, &g, &b);
  if (s) {
    free(cs_data);
    return s;
  }
  const int64_t xs[3] = {B, T, f->in_channels}, es[3] = {B, L, f->joint_dim}, ps[2] = {B, f->pooled_dim}, ts[1] = {B};
  dit_vid_t x = dit_graph_input(g, "hidden_states", dt, 3, xs);
  dit_vid_t ehs = dit_graph_input(g, "encoder_hidden_states", dt, 3, es);
  dit_vid_t pooled = dit_graph_input(g, "pooled_projections", dt, 2, ps);
  dit_vid_t t = dit_graph_input(g, "timestep", DIT_F32, 1, ts);
  dit_vid_t guid = f->guidance_embeds ? dit_graph_input(g, "guidance", DIT_F32, 1, ts) : -1;
  /* The rotary table of [image, text], every rank's the same: the rows of this rank's image tokens
   * then the text's for the single-stream blocks, of its image tokens alone for the double-stream
   * ones (the text's rows are the identity). */
  dit_vid_t cs, cs_img;
  dit_blocks_rope_rows(b, cs_data, T, L, "rope", &cs, &cs_img, NULL);
  free(cs_data);

  if (cp > 1) x = dit_blocks_slice_tokens(b, x, t0, Tl, dt, "image_tokens.local");
  dit_vid_t hs = dit_blocks_linear(b, x, "x_embedder", dt, "x_embedder");
  /* temb = timestep embedding (+ guidance embedding) + pooled text projection. */
  dit_vid_t temb = embed_scalar(b, t, "time_text_embed.timestep_embedder", "time", dt);
  if (guid >= 0)
    temb = dit_blocks_add(b, temb, embed_scalar(b, guid, "time_text_embed.guidance_embedder", "guidance", dt), "time_guidance");
  const dit_blocks_mlp_t text = {"time_text_embed.text_embedder.linear_1", "time_text_embed.text_embedder.linear_2", DIT_OP_SILU,
                                 "pooled.linear_1", "pooled.silu", "pooled", 0, dt};
  temb = dit_blocks_add(b, temb, dit_blocks_mlp(b, pooled, &text), "temb");
  dit_vid_t tsilu = dit_blocks_unary(b, DIT_OP_SILU, temb, dt, "temb.silu"); /* every norm's SiLU(temb), once */
  dit_vid_t ctx = dit_blocks_linear(b, ehs, "context_embedder", dt, "context_embedder");

  for (int64_t i = 0; i < f->layers; i++) {
    dit_graph_set_block(g, (int32_t)i);
    dit_blocks_flux_double(b, i, tsilu, cs_img, -1, &hs, &ctx);
  }
  /* Single-stream blocks over [image, text] (diffusers joins them as [text, image]: the same
   * attention, keys in another order). */
  dit_vid_t xj = dit_blocks_concat(b, hs, ctx, 1, "single.tokens");
  for (int64_t i = 0; i < f->single_layers; i++) {
    dit_graph_set_block(g, (int32_t)(f->layers + i));
    xj = dit_blocks_flux_single(b, i, tsilu, cs, -1, -1, Tl, L, xj);
  }
  dit_graph_set_block(g, -1);
  hs = dit_blocks_slice_tokens(b, xj, 0, Tl, dt, "image_tokens");
  dit_vid_t y = dit_blocks_flux_out(b, hs, tsilu);
  dit_graph_mark_output(g, y, "sample");
  return dit_blocks_finish(b, g, "FLUX", out);
}

/* FluxPipeline's loop: packed latents into hidden_states, t / 1000 as the timestep, the raw
 * guidance scale for dev, prompt_embeds and pooled_prompt_embeds as the text inputs, the
 * flow-match Euler schedule of the pipeline's scheduler config with mu from the image tokens. */
static dit_status_t flux_generate(const dit_model_t *m, const dit_latent_shape_t *ls, dit_manifest_generate_t *g) {
  static const dit_generate_condition_t cond[] = {{"prompt_embeds", "encoder_hidden_states"},
                                                  {"pooled_prompt_embeds", "pooled_projections"}};
  DIT_RETURN_IF(dit_flow_generate(m, "FluxPipeline", 28 /* its num_inference_steps */, 1000.0, cond, 2, g));
  if (!g->present) return DIT_OK;
  if (m->flux.guidance_embeds) {
    snprintf(g->guidance_input, sizeof g->guidance_input, "guidance");
    g->guidance_scale = 1.0;
    g->guidance_default = 3.5; /* FluxPipeline's guidance_scale */
  }
  return dit_flow_schedule_from(&m->pipeline.scheduler, ls->tokens, 0, g);
}

/* FluxPipeline's encode_prompt: CLIP (text_encoder, tokenizer/, at its tokenizer's 77) gives its
 * pooled output, T5 (text_encoder_2, tokenizer_2/, at max_sequence_length: --text-len) its last
 * hidden state; neither is given an attention mask and no row is zeroed. */
static const dit_stage_feed_t kFluxTextStages[] = {
    {"text_encoder", "tokenizer", "pooled_prompt_embeds", "pooler_output", DIT_PADDING_ATTENDED, 1, NULL, 0, NULL},
    {"text_encoder_2", "tokenizer_2", "prompt_embeds", "last_hidden_state", DIT_PADDING_ATTENDED, 0, NULL, 0, NULL},
};

const dit_family_t dit_family_flux = {
    .name = "flux",
    .model_class = "FluxTransformer2DModel",
    .parse_config = flux_parse_config,
    .expected = flux_expected,
    .pick_variant = flux_pick_variant,
    .check_compilable = flux_check_compilable,
    .pipeline_identity = dit_pipeline_identity_spatial,
    .latent_shape = flux_latent_shape,
    .build_graph = flux_build_graph,
    .generate = flux_generate,
    .text_stages = kFluxTextStages,
    .n_text_stages = sizeof kFluxTextStages / sizeof kFluxTextStages[0],
    .image_decoder = 1,
};
