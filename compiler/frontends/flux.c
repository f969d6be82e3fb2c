/* The FLUX.1 frontend: FluxTransformer2DModel as diffusers defines it (dev with the guidance
 * embedding, schnell without), built from the shared blocks: double-stream blocks (text and
 * image streams with their own modulation, projections and norms, one joint attention over
 * [text, image] tokens), then single-stream blocks over the joined tokens (attention and MLP
 * side by side, one output projection over both). The model takes packed latents
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
  const cJSON *ax = cJSON_GetObjectItemCaseSensitive(cfg, "axes_dims_rope");
  for (int i = 0; i < 3; i++) f->axes[i] = (int64_t)cJSON_GetArrayItem(ax, i)->valuedouble;
  if (f->patch != 1)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'patch_size' = %" PRId64 ": only 1 is supported (the pipeline packs 2x2 latents itself)",
                   raw->what, f->patch);
  if (f->layers + f->single_layers < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: fields 'num_layers' and 'num_single_layers' are both 0: the model has no blocks", raw->what);
  if (f->axes[0] % 2 || f->axes[1] % 2 || f->axes[2] % 2 || f->axes[0] + f->axes[1] + f->axes[2] != f->head_dim)
    return DIT_ERR(INVALID_ARGUMENT,
                   "%s: field 'axes_dims_rope' = [%" PRId64 ", %" PRId64 ", %" PRId64 "]: expected even parts summing to "
                   "attention_head_dim = %" PRId64,
                   raw->what, f->axes[0], f->axes[1], f->axes[2], f->head_dim);
  return DIT_OK;
}

/* ---- checkpoint ---- */

static void flux_expected(const dit_flux_config_t *f, dit_expected_t *l) {
  const int64_t D = f->heads * f->head_dim, M = FLUX_MLP_RATIO * D, hd[1] = {f->head_dim};
  dit_expected_linear(l, D, f->in_channels, 1, "x_embedder");
  dit_expected_linear(l, D, f->joint_dim, 1, "context_embedder");
  dit_expected_linear(l, D, FLUX_FREQ_DIM, 1, "time_text_embed.timestep_embedder.linear_1");
  dit_expected_linear(l, D, D, 1, "time_text_embed.timestep_embedder.linear_2");
  dit_expected_linear(l, D, f->pooled_dim, 1, "time_text_embed.text_embedder.linear_1");
  dit_expected_linear(l, D, D, 1, "time_text_embed.text_embedder.linear_2");
  if (f->guidance_embeds) {
    dit_expected_why(l, "field 'guidance_embeds' = true");
    dit_expected_linear(l, D, FLUX_FREQ_DIM, 1, "time_text_embed.guidance_embedder.linear_1");
    dit_expected_linear(l, D, D, 1, "time_text_embed.guidance_embedder.linear_2");
    dit_expected_why(l, NULL);
  }
  for (int64_t i = 0; i < f->layers; i++) {
    static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"};
    static const char *const norms[] = {"norm_q", "norm_k", "norm_added_q", "norm_added_k"};
    dit_expected_linear(l, 6 * D, D, 1, "transformer_blocks.%" PRId64 ".norm1.linear", i);
    dit_expected_linear(l, 6 * D, D, 1, "transformer_blocks.%" PRId64 ".norm1_context.linear", i);
    for (int k = 0; k < 8; k++) dit_expected_linear(l, D, D, 1, "transformer_blocks.%" PRId64 ".attn.%s", i, proj[k]);
    for (int k = 0; k < 4; k++) dit_expected_add(l, 1, hd, "transformer_blocks.%" PRId64 ".attn.%s.weight", i, norms[k]);
    dit_expected_linear(l, M, D, 1, "transformer_blocks.%" PRId64 ".ff.net.0.proj", i);
    dit_expected_linear(l, D, M, 1, "transformer_blocks.%" PRId64 ".ff.net.2", i);
    dit_expected_linear(l, M, D, 1, "transformer_blocks.%" PRId64 ".ff_context.net.0.proj", i);
    dit_expected_linear(l, D, M, 1, "transformer_blocks.%" PRId64 ".ff_context.net.2", i);
  }
  for (int64_t i = 0; i < f->single_layers; i++) {
    dit_expected_linear(l, 3 * D, D, 1, "single_transformer_blocks.%" PRId64 ".norm.linear", i);
    dit_expected_linear(l, M, D, 1, "single_transformer_blocks.%" PRId64 ".proj_mlp", i);
    dit_expected_linear(l, D, D + M, 1, "single_transformer_blocks.%" PRId64 ".proj_out", i);
    dit_expected_linear(l, D, D, 1, "single_transformer_blocks.%" PRId64 ".attn.to_q", i);
    dit_expected_linear(l, D, D, 1, "single_transformer_blocks.%" PRId64 ".attn.to_k", i);
    dit_expected_linear(l, D, D, 1, "single_transformer_blocks.%" PRId64 ".attn.to_v", i);
    dit_expected_add(l, 1, hd, "single_transformer_blocks.%" PRId64 ".attn.norm_q.weight", i);
    dit_expected_add(l, 1, hd, "single_transformer_blocks.%" PRId64 ".attn.norm_k.weight", i);
  }
  dit_expected_linear(l, 2 * D, D, 1, "norm_out.linear");
  dit_expected_linear(l, f->patch * f->patch * f->out_channels, D, 1, "proj_out");
}

static dit_status_t flux_check_weights(const dit_model_t *m, const dit_safetensors_t *weights, const char *dir) {
  dit_expected_t *l;
  DIT_RETURN_IF(dit_expected_create(&l));
  flux_expected(&m->flux, l);
  dit_status_t s = dit_expected_check(l, weights, dir, NULL);
  dit_expected_destroy(l);
  return s;
}

/* ---- variant, pipeline, shape ---- */

static dit_status_t flux_pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  (void)vae_what;
  if (want && strcmp(want, "flux.1"))
    return DIT_ERR(INVALID_ARGUMENT, "--variant %s: unknown FLUX variant (flux.1; dev and schnell differ by config.json's guidance_embeds)",
                   want);
  snprintf(m->variant, sizeof m->variant, "flux.1");
  dit_vae_factors_t *vae = &m->pipeline.vae;
  if (!vae->source[0]) {
    /* diffusers' default when a pipeline has no VAE: 8x spatial. */
    vae->spatial = 8;
    snprintf(vae->source, sizeof vae->source, "variant");
  }
  vae->temporal = 1;
  m->vae_spatial = vae->spatial;
  m->vae_temporal = 1;
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
  const int64_t q = 2 * m->vae_spatial; /* a packed token covers 2x2 latent pixels */
  if (r->frames > 1 || r->frames == 0)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %s makes images: leave --frames out", r->frames, m->model_class);
  if (r->height < 1 || r->height % q)
    return DIT_ERR(INVALID_ARGUMENT, "--height %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x 2x2 packing)",
                   r->height, q, m->vae_spatial);
  if (r->width < 1 || r->width % q)
    return DIT_ERR(INVALID_ARGUMENT, "--width %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x 2x2 packing)",
                   r->width, q, m->vae_spatial);
  if (r->image_len)
    return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": %s takes no image tokens", r->image_len, m->model_class);
  out->channels = m->flux.in_channels / 4;
  out->frames = 1;
  out->height = r->height / m->vae_spatial;
  out->width = r->width / m->vae_spatial;
  out->tokens = (out->height / 2) * (out->width / 2);
  out->image_len = 0;
  return DIT_OK;
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

/* The modulation rows of one norm: linear(silu(temb)) viewed [B, n, D]. */
static dit_vid_t modulation(dit_blocks_t *b, dit_vid_t temb_silu, const char *prefix, int64_t n, const char *name,
                            dit_dtype_t dt) {
  char nm[256];
  snprintf(nm, sizeof nm, "%s.linear", name);
  dit_vid_t e = dit_blocks_linear(b, temb_silu, prefix, dt, nm);
  return dit_blocks_rows(b, e, n, name);
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
  const int tp = req->tp > 1 ? req->tp : 1, cp = req->cp > 1 ? req->cp : 1;
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, L = req->text_len, T = ls.tokens, gw = ls.width / 2, D = f->heads * f->head_dim;
  DIT_RETURN_IF(dit_joint_parallel_check(m, req, f->heads, T));
  /* This rank's image tokens: its share of the context-parallel group's; the text is whole on every rank. */
  const int64_t Tl = T / cp, t0 = (cp > 1 ? req->cp_rank : 0) * Tl;
  const dit_dtype_t dt = req->dtype;
  float *cs_data = flux_rope_table(f, gw, 0, T, L);
  if (!cs_data) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the rotary table");
  dit_graph_t *g;
  dit_status_t s = dit_graph_create(&g);
  if (s) {
    free(cs_data);
    return s;
  }
  const dit_blocks_options_t bo = {.dtype = dt, .heads = f->heads, .head_dim = f->head_dim, .eps = FLUX_EPS, .tp = tp,
                                   .tp_rank = req->tp_rank, .cp = cp, .cp_rank = cp > 1 ? req->cp_rank : 0,
                                   .cp_mode = cp > 1 ? req->cp_mode : 0};
  dit_blocks_t *b = NULL;
  s = dit_blocks_create(g, m->weights, &bo, &b);
  if (s) {
    free(cs_data);
    dit_graph_destroy(g);
    return s;
  }
  const int64_t xs[3] = {B, T, f->in_channels}, es[3] = {B, L, f->joint_dim}, ps[2] = {B, f->pooled_dim}, ts[1] = {B},
                css[3] = {1, T + L, f->head_dim};
  dit_vid_t x = dit_graph_input(g, "hidden_states", dt, 3, xs);
  dit_vid_t ehs = dit_graph_input(g, "encoder_hidden_states", dt, 3, es);
  dit_vid_t pooled = dit_graph_input(g, "pooled_projections", dt, 2, ps);
  dit_vid_t t = dit_graph_input(g, "timestep", DIT_F32, 1, ts);
  dit_vid_t guid = f->guidance_embeds ? dit_graph_input(g, "guidance", DIT_F32, 1, ts) : -1;
  /* The rotary table of [image, text] (every rank's the same: the ranks of a context-parallel
   * group share their weights), and from it the tables of [this rank's image tokens, text] and
   * of those image tokens alone (the text rows are the identity: double blocks leave it as is). */
  dit_vid_t full = dit_graph_constant(g, "rope.cos_sin", DIT_F32, 3, css, cs_data);
  free(cs_data);
  dit_vid_t mine = cp > 1 ? dit_blocks_concat(b, dit_blocks_slice_tokens(b, full, t0, Tl, DIT_F32, "rope.image_rows"),
                                              dit_blocks_slice_tokens(b, full, T, L, DIT_F32, "rope.text_rows"), 1, "rope.rows")
                          : full;
  const int64_t d_all[2] = {Tl + L, f->head_dim}, d_img[2] = {Tl, f->head_dim};
  dit_vid_t cs = dit_blocks_reshape(b, mine, 2, d_all, "rope.table");
  dit_vid_t csi_v = dit_blocks_reshape(b, dit_blocks_slice_tokens(b, mine, 0, Tl, DIT_F32, "rope.image"), 2, d_img, "rope.table_image");

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

  char n[192], k[192], kq[192], kk[192], kv[192], knq[192], knk[192], nu[192], na[192], nd[192];
  for (int64_t i = 0; i < f->layers; i++) {
    dit_graph_set_block(g, (int32_t)i);
#define NAME(s) (snprintf(n, sizeof n, "transformer_blocks.%" PRId64 ".%s", i, s), n)
#define KEY(buf, s) (snprintf(buf, sizeof buf, "transformer_blocks.%" PRId64 ".%s", i, s), buf)
    dit_vid_t mi = modulation(b, tsilu, KEY(k, "norm1.linear"), 6, NAME("norm1.mod"), dt);
    dit_vid_t mc = modulation(b, tsilu, KEY(k, "norm1_context.linear"), 6, NAME("norm1_context.mod"), dt);
    const dit_blocks_mod_t modi = {mi, -1}, modc = {mc, -1};
    dit_vid_t ni = dit_blocks_adaln(b, hs, modi, 0, 1, NAME("norm1"));
    dit_vid_t nc = dit_blocks_adaln(b, ctx, modc, 0, 1, NAME("norm1_context"));
    const dit_blocks_attn_keys_t ki = {KEY(kq, "attn.to_q"), KEY(kk, "attn.to_k"), KEY(kv, "attn.to_v"), KEY(knq, "attn.norm_q.weight"),
                                       KEY(knk, "attn.norm_k.weight"), 1};
    dit_blocks_qkv_t ai = dit_blocks_attn_project(b, ni, ni, &ki, NAME("attn.img"));
    const dit_blocks_attn_keys_t kc = {KEY(kq, "attn.add_q_proj"), KEY(kk, "attn.add_k_proj"), KEY(kv, "attn.add_v_proj"),
                                       KEY(knq, "attn.norm_added_q.weight"), KEY(knk, "attn.norm_added_k.weight"), 1};
    dit_blocks_qkv_t ac = dit_blocks_attn_project(b, nc, nc, &kc, NAME("attn.txt"));
    ai.q = dit_blocks_rope_table(b, ai.q, csi_v, NAME("attn.rope_q"));
    ai.k = dit_blocks_rope_table(b, ai.k, csi_v, NAME("attn.rope_k"));
    dit_vid_t a_img, a_txt;
    dit_blocks_joint_attention(b, ai.q, ai.k, ai.v, ac.q, ac.k, ac.v, -1, NAME("attn"), &a_img, &a_txt);
    a_img = dit_blocks_linear_row(b, a_img, KEY(k, "attn.to_out.0"), NAME("attn.to_out"));
    a_txt = dit_blocks_linear_row(b, a_txt, KEY(k, "attn.to_add_out"), NAME("attn.to_add_out"));

    hs = dit_blocks_gated_add(b, hs, a_img, modi, 2, NAME("attn.residual"));
    dit_vid_t n2 = dit_blocks_adaln(b, hs, modi, 3, 4, NAME("norm2"));
    const dit_blocks_mlp_t ff = {KEY(kq, "ff.net.0.proj"), KEY(kk, "ff.net.2"), DIT_OP_GELU_TANH,
                                 (snprintf(nu, sizeof nu, "transformer_blocks.%" PRId64 ".ff.up", i), nu),
                                 (snprintf(na, sizeof na, "transformer_blocks.%" PRId64 ".ff.gelu", i), na),
                                 (snprintf(nd, sizeof nd, "transformer_blocks.%" PRId64 ".ff.down", i), nd), 1, dt};
    hs = dit_blocks_gated_add(b, hs, dit_blocks_mlp(b, n2, &ff), modi, 5, NAME("ff.residual"));

    ctx = dit_blocks_gated_add(b, ctx, a_txt, modc, 2, NAME("attn.context_residual"));
    dit_vid_t n2c = dit_blocks_adaln(b, ctx, modc, 3, 4, NAME("norm2_context"));
    const dit_blocks_mlp_t ffc = {KEY(kq, "ff_context.net.0.proj"), KEY(kk, "ff_context.net.2"), DIT_OP_GELU_TANH,
                                  (snprintf(nu, sizeof nu, "transformer_blocks.%" PRId64 ".ff_context.up", i), nu),
                                  (snprintf(na, sizeof na, "transformer_blocks.%" PRId64 ".ff_context.gelu", i), na),
                                  (snprintf(nd, sizeof nd, "transformer_blocks.%" PRId64 ".ff_context.down", i), nd), 1, dt};
    ctx = dit_blocks_gated_add(b, ctx, dit_blocks_mlp(b, n2c, &ffc), modc, 5, NAME("ff_context.residual"));
#undef NAME
#undef KEY
  }

  /* Single-stream blocks over [image, text] (diffusers joins them as [text, image]: the same
   * attention, keys in another order). */
  dit_vid_t xs2 = dit_blocks_concat(b, hs, ctx, 1, "single.tokens");
  for (int64_t i = 0; i < f->single_layers; i++) {
    dit_graph_set_block(g, (int32_t)(f->layers + i));
#define NAME(s) (snprintf(n, sizeof n, "single_transformer_blocks.%" PRId64 ".%s", i, s), n)
#define KEY(buf, s) (snprintf(buf, sizeof buf, "single_transformer_blocks.%" PRId64 ".%s", i, s), buf)
    const dit_blocks_mod_t mod = {modulation(b, tsilu, KEY(k, "norm.linear"), 3, NAME("norm.mod"), dt), -1};
    dit_vid_t nx = dit_blocks_adaln(b, xs2, mod, 0, 1, NAME("norm"));
    dit_vid_t mlp = dit_blocks_linear_col(b, nx, KEY(k, "proj_mlp"), dt, NAME("proj_mlp"));
    mlp = dit_blocks_unary(b, DIT_OP_GELU_TANH, mlp, dt, NAME("act_mlp"));
    const dit_blocks_attn_keys_t ka = {KEY(kq, "attn.to_q"), KEY(kk, "attn.to_k"), KEY(kv, "attn.to_v"), KEY(knq, "attn.norm_q.weight"),
                                       KEY(knk, "attn.norm_k.weight"), 1};
    dit_blocks_qkv_t at = dit_blocks_attn_project(b, nx, nx, &ka, NAME("attn"));
    at.q = dit_blocks_rope_table(b, at.q, cs, NAME("attn.rope_q"));
    at.k = dit_blocks_rope_table(b, at.k, cs, NAME("attn.rope_k"));
    dit_vid_t a;
    if (cp == 1) {
      a = dit_blocks_attention(b, at.q, at.k, at.v, NAME("attn.sdpa"));
    } else {
      /* The rows of this rank's image tokens and of the text, attended jointly across the group. */
      dit_vid_t p[6], *src[3] = {&at.q, &at.k, &at.v}, ai2, at2;
      static const char *const rows[3][2] = {{"attn.q_img", "attn.q_txt"}, {"attn.k_img", "attn.k_txt"}, {"attn.v_img", "attn.v_txt"}};
      for (int j = 0; j < 3; j++) {
        p[j] = dit_blocks_slice_tokens(b, *src[j], 0, Tl, dt, NAME(rows[j][0]));
        p[3 + j] = dit_blocks_slice_tokens(b, *src[j], Tl, L, dt, NAME(rows[j][1]));
      }
      dit_blocks_joint_attention(b, p[0], p[1], p[2], p[3], p[4], p[5], -1, NAME("attn"), &ai2, &at2);
      a = dit_blocks_concat(b, ai2, at2, 1, NAME("attn.rows"));
    }
    dit_vid_t y = dit_blocks_linear_row2(b, a, mlp, KEY(k, "proj_out"), D, NAME("proj_out"));
    xs2 = dit_blocks_gated_add(b, xs2, y, mod, 2, NAME("residual"));
#undef NAME
#undef KEY
  }
  dit_graph_set_block(g, -1);
  hs = dit_blocks_slice_tokens(b, xs2, 0, Tl, dt, "image_tokens");
  /* AdaLayerNormContinuous: the projection's halves are (scale, shift). */
  const dit_blocks_mod_t mo = {modulation(b, tsilu, "norm_out.linear", 2, "norm_out.mod", dt), -1};
  dit_vid_t y = dit_blocks_linear(b, dit_blocks_adaln(b, hs, mo, 1, 0, "norm_out"), "proj_out", dt, "proj_out");
  y = dit_blocks_cp_gather(b, y, "proj_out.all_tokens");
  dit_graph_mark_output(g, y, "sample");

  s = dit_blocks_status(b);
  dit_blocks_destroy(b);
  if (s) {
    dit_status_t wrapped = dit_status_make(dit_status_code(s), "building the FLUX graph: %s", dit_status_message(s));
    dit_status_free(s);
    dit_graph_destroy(g);
    return wrapped;
  }
  *out = g;
  return DIT_OK;
}

/* FluxPipeline's loop: packed latents into hidden_states, t / 1000 as the timestep, the raw
 * guidance scale for dev, prompt_embeds and pooled_prompt_embeds as the text inputs, the
 * flow-match Euler schedule of the pipeline's scheduler config with mu from the image tokens. */
static dit_status_t flux_generate(const dit_model_t *m, const dit_latent_shape_t *ls, dit_manifest_generate_t *g) {
  const dit_scheduler_defaults_t *sc = &m->pipeline.scheduler;
  if (!sc->present) return DIT_OK; /* the schedule comes only from a pipeline's scheduler config */
  if (strcmp(sc->class_name, "FlowMatchEulerDiscreteScheduler"))
    return DIT_ERR(UNIMPLEMENTED, "%s/scheduler/scheduler_config.json: class \"%s\": FLUX pipelines sample with "
                   "FlowMatchEulerDiscreteScheduler",
                   m->pipeline.dir, sc->class_name);
  g->present = 1;
  snprintf(g->latents, sizeof g->latents, "hidden_states");
  g->default_steps = 28; /* FluxPipeline's num_inference_steps */
  snprintf(g->timestep_input, sizeof g->timestep_input, "timestep");
  g->timestep_divisor = 1000.0;
  if (m->flux.guidance_embeds) {
    snprintf(g->guidance_input, sizeof g->guidance_input, "guidance");
    g->guidance_scale = 1.0;
    g->guidance_default = 3.5; /* FluxPipeline's guidance_scale */
  }
  static const char *const cond[][2] = {{"prompt_embeds", "encoder_hidden_states"}, {"pooled_prompt_embeds", "pooled_projections"}};
  g->n_conditions = 2;
  for (int i = 0; i < 2; i++) {
    snprintf(g->conditions[i].argument, sizeof g->conditions[i].argument, "%s", cond[i][0]);
    snprintf(g->conditions[i].input, sizeof g->conditions[i].input, "%s", cond[i][1]);
  }
  return dit_flow_schedule_from(sc, ls->tokens, 0, g);
}

const dit_family_t dit_family_flux = {
    .name = "flux",
    .model_class = "FluxTransformer2DModel",
    .parse_config = flux_parse_config,
    .check_weights = flux_check_weights,
    .pick_variant = flux_pick_variant,
    .check_compilable = flux_check_compilable,
    .pipeline_identity = dit_pipeline_identity_spatial,
    .latent_shape = flux_latent_shape,
    .build_graph = flux_build_graph,
    .generate = flux_generate,
};
