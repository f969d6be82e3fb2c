/* The Qwen-Image frontend: QwenImageTransformer2DModel as diffusers defines it, built from the
 * shared blocks: RMS-normed text projected in, then double-stream blocks only (image and text
 * streams with their own modulation, projections, q/k norms and MLPs, one joint attention),
 * then the image tokens' continuous adaptive norm and projection. The model takes packed
 * latents [B, (h/2)(w/2), 4C] and returns them packed, as QwenImagePipeline passes them; the
 * rotary table follows from img_shapes and the text length, both fixed by the shape, so it is
 * a compile-time constant. The joint sequence is [image, text] (diffusers orders it [text,
 * image]; attention does not depend on the keys' order), so a text mask's padding is the keys'
 * tail. Tensor parallelism splits the heads and MLPs (modulation, embedders and the text's input
 * norm replicated); context parallelism shares the image tokens among the group, the text whole
 * on every rank (dit_blocks_joint_attention). */
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

static const dit_config_field_t kQwenFields[] = {
    {"patch_size", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"in_channels", DIT_CF_INT, 0, 1, 4096, 0, NULL},
    {"out_channels", DIT_CF_INT, 1, 1, 4096, 0, NULL},
    {"num_layers", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"attention_head_dim", DIT_CF_INT, 0, 2, 1024, 0, NULL},
    {"num_attention_heads", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"joint_attention_dim", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"guidance_embeds", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"axes_dims_rope", DIT_CF_INTS, 0, 0, 1024, 3, "[frame, rows, columns]"},
    {"zero_cond_t", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"use_additional_t_cond", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"use_layer3d_rope", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
};

static const char kQwenDefaults[] =
    "{\"patch_size\":2,\"in_channels\":64,\"out_channels\":16,\"num_layers\":60,\"attention_head_dim\":128,"
    "\"num_attention_heads\":24,\"joint_attention_dim\":3584,\"guidance_embeds\":false,\"axes_dims_rope\":[16,56,56],"
    "\"zero_cond_t\":false,\"use_additional_t_cond\":false,\"use_layer3d_rope\":false}";

#define QWEN_FREQ_DIM 256     /* Timesteps(num_channels=256) of the time embedding */
#define QWEN_TIME_SCALE 1000. /* Timesteps(scale=1000): the model sees t / 1000 */
#define QWEN_MLP_RATIO 4      /* FeedForward's inner width over the model's */
#define QWEN_EPS 1e-6         /* every LayerNorm, the text RMSNorm and the q/k RMS norms */
#define QWEN_ROPE_THETA 10000.f
#define QWEN_ROPE_POSITIONS 4096 /* QwenEmbedRope's table: positions -4096..4095 */

/* Options diffusers offers that this build does not: the field and why it is refused. */
static const struct {
  const char *key, *why;
} kQwenRefused[] = {
    {"guidance_embeds", "the class's time embedding takes no guidance (its forward fails with one)"},
    {"zero_cond_t", "the zero-timestep modulation of reference-image tokens (Qwen-Image-Edit-2511) is not built"},
    {"use_additional_t_cond", "the additional timestep condition embedding is not built"},
    {"use_layer3d_rope", "the layered 3D rotary embedding (Qwen-Image-Layered) is not built"},
};

static dit_status_t qwen_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read(kQwenFields, sizeof kQwenFields / sizeof kQwenFields[0], kQwenDefaults,
                                "QwenImageTransformer2DModel", raw, &m->config));
  const cJSON *cfg = m->config;
  dit_qwen_config_t *q = &m->qwen;
  for (size_t i = 0; i < sizeof kQwenRefused / sizeof kQwenRefused[0]; i++)
    if (dit_config_bool(cfg, kQwenRefused[i].key))
      return DIT_ERR(UNIMPLEMENTED, "%s: field '%s' = true: %s; expected false", raw->what, kQwenRefused[i].key, kQwenRefused[i].why);
  q->patch = dit_config_int(cfg, "patch_size");
  q->in_channels = dit_config_int(cfg, "in_channels");
  q->out_channels = dit_config_int(cfg, "out_channels");
  if (!q->out_channels) q->out_channels = q->in_channels; /* out_channels or in_channels, as diffusers resolves it */
  q->layers = dit_config_int(cfg, "num_layers");
  q->heads = dit_config_int(cfg, "num_attention_heads");
  q->head_dim = dit_config_int(cfg, "attention_head_dim");
  q->joint_dim = dit_config_int(cfg, "joint_attention_dim");
  return dit_config_rope_axes(cfg, "axes_dims_rope", q->head_dim, raw->what, q->axes);
}

/* ---- checkpoint ---- */

static void qwen_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_qwen_config_t *q = &m->qwen;
  const int64_t D = q->heads * q->head_dim, M = QWEN_MLP_RATIO * D, hd[1] = {q->head_dim}, jd[1] = {q->joint_dim};
  dit_expected_linear(l, D, q->in_channels, 1, "img_in");
  dit_expected_linear(l, D, q->joint_dim, 1, "txt_in");
  dit_expected_add(l, 1, jd, "txt_norm.weight");
  dit_expected_embedder(l, D, QWEN_FREQ_DIM, "time_text_embed.timestep_embedder");
  for (int64_t i = 0; i < q->layers; i++) {
    static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"};
    static const char *const norms[] = {"norm_q", "norm_k", "norm_added_q", "norm_added_k"};
    static const char *const stream[] = {"img", "txt"};
    for (int s = 0; s < 2; s++) {
      dit_expected_linear(l, 6 * D, D, 1, "transformer_blocks.%" PRId64 ".%s_mod.1", i, stream[s]);
      dit_expected_linear(l, M, D, 1, "transformer_blocks.%" PRId64 ".%s_mlp.net.0.proj", i, stream[s]);
      dit_expected_linear(l, D, M, 1, "transformer_blocks.%" PRId64 ".%s_mlp.net.2", i, stream[s]);
    }
    for (int k = 0; k < 8; k++) dit_expected_linear(l, D, D, 1, "transformer_blocks.%" PRId64 ".attn.%s", i, proj[k]);
    for (int k = 0; k < 4; k++) dit_expected_add(l, 1, hd, "transformer_blocks.%" PRId64 ".attn.%s.weight", i, norms[k]);
  }
  dit_expected_linear(l, 2 * D, D, 1, "norm_out.linear");
  dit_expected_linear(l, q->patch * q->patch * q->out_channels, D, 1, "proj_out");
}

/* ---- variant, pipeline, shape ---- */

static dit_status_t qwen_pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  (void)vae_what;
  if (want && strcmp(want, "qwen-image"))
    return DIT_ERR(INVALID_ARGUMENT, "--variant %s: unknown Qwen-Image variant (qwen-image)", want);
  snprintf(m->variant, sizeof m->variant, "qwen-image");
  dit_image_vae_factors(m);
  return DIT_OK;
}

static dit_status_t qwen_check_compilable(const dit_model_t *m) {
  const dit_qwen_config_t *q = &m->qwen;
  const char *cls = m->pipeline.index.class_name;
  if (cls[0] && strcmp(cls, "QwenImagePipeline"))
    return DIT_ERR(UNIMPLEMENTED, "%s/model_index.json: field '_class_name' = \"%s\": a QwenImageTransformer2DModel runs in "
                   "QwenImagePipeline",
                   m->pipeline.dir, cls);
  if (m->pipeline.n_experts > 1)
    return DIT_ERR(UNIMPLEMENTED, "%s/model_index.json: field 'transformer_2': Qwen-Image pipelines have one transformer", m->pipeline.dir);
  if (q->in_channels % 4)
    return DIT_ERR(INVALID_ARGUMENT, "%s/config.json: field 'in_channels' = %" PRId64 ": packed latents hold 4 (2x2) latent pixels "
                   "per token, so it must be a multiple of 4",
                   m->model_dir, q->in_channels);
  if (q->patch * q->patch * q->out_channels != q->in_channels)
    return DIT_ERR(INVALID_ARGUMENT, "%s/config.json: fields 'patch_size' = %" PRId64 " and 'out_channels' = %" PRId64 ": the "
                   "prediction (patch_size^2 x out_channels = %" PRId64 " per token) must be as wide as the packed latents "
                   "(in_channels = %" PRId64 ") the pipeline steps with it",
                   m->model_dir, q->patch, q->out_channels, q->patch * q->patch * q->out_channels, q->in_channels);
  return DIT_OK;
}

static dit_status_t qwen_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  DIT_RETURN_IF(dit_packed_latent_shape(m, r, m->qwen.in_channels, out));
  const int64_t gh = out->height / 2, gw = out->width / 2, first_txt = (gh > gw ? gh : gw) / 2;
  /* QwenEmbedRope's table holds positions -4096..4095: image rows and columns are centred on 0,
   * text positions follow the image's largest index. */
  if (gh - gh / 2 > QWEN_ROPE_POSITIONS || gw - gw / 2 > QWEN_ROPE_POSITIONS)
    return DIT_ERR(INVALID_ARGUMENT, "--height %" PRId64 " --width %" PRId64 ": %" PRId64 "x%" PRId64 " tokens exceed the rotary "
                   "table's %d positions either side of the centre",
                   r->height, r->width, gh, gw, QWEN_ROPE_POSITIONS);
  if (first_txt + r->text_len > QWEN_ROPE_POSITIONS)
    return DIT_ERR(INVALID_ARGUMENT, "--text-len %" PRId64 ": text positions start at %" PRId64 " (after the %" PRId64 "x%" PRId64
                   " image's half size) and the rotary table ends at %d: at most %" PRId64 " text tokens at this size",
                   r->text_len, first_txt, gh, gw, QWEN_ROPE_POSITIONS, QWEN_ROPE_POSITIONS - first_txt);
  return DIT_OK;
}

/* ---- graph ---- */

/* The rotary pairs of one axis of dim at position pos, as QwenEmbedRope.rope_params makes them in
 * float32: frequency 1 / theta^(2i/dim), angle pos * frequency, cos and sin of that angle. */
static void rope_axis(float *pairs, int64_t pos, int64_t dim) {
  for (int64_t i = 0; i < dim / 2; i++) {
    const float freq = 1.0f / powf(QWEN_ROPE_THETA, (float)(2 * i) / (float)dim);
    const float ang = (float)pos * freq;
    pairs[2 * i] = (float)cos((double)ang);
    pairs[2 * i + 1] = (float)sin((double)ang);
  }
}

/* The rotary table of [image (gh x gw), text (L)], cs [gh*gw + L, head_dim] of (cos, sin) pairs:
 * an image token at (row, column) has positions (0, row - ceil(gh/2), column - ceil(gw/2))
 * (scale_rope centring), text token j has max(gh/2, gw/2) + j on all three axes. */
static float *qwen_rope_table(const dit_qwen_config_t *q, int64_t gh, int64_t gw, int64_t L) {
  const int64_t hd = q->head_dim, T = gh * gw, first_txt = (gh > gw ? gh : gw) / 2;
  float *cs = malloc((size_t)((T + L) * hd) * sizeof *cs);
  if (!cs) return NULL;
  for (int64_t t = 0; t < T + L; t++) {
    const int64_t pos[3] = {t < T ? 0 : first_txt + t - T, t < T ? t / gw - (gh - gh / 2) : first_txt + t - T,
                            t < T ? t % gw - (gw - gw / 2) : first_txt + t - T};
    float *row = cs + t * hd;
    for (int a = 0; a < 3; row += q->axes[a], a++) rope_axis(row, pos[a], q->axes[a]);
  }
  return cs;
}

/* A double-stream block's per-stream names: checkpoint keys under transformer_blocks.i and op names. */
typedef struct stream_keys {
  char mod[160], q[160], k[160], v[160], nq[160], nk[160], out[160], up[160], down[160];
} stream_keys_t;

static void stream_keys(stream_keys_t *s, int64_t i, int txt) {
  const char *st = txt ? "txt" : "img";
#define K(field, fmt, ...) snprintf(s->field, sizeof s->field, "transformer_blocks.%" PRId64 "." fmt, i, __VA_ARGS__)
  K(mod, "%s_mod.1", st);
  K(q, "attn.%s", txt ? "add_q_proj" : "to_q");
  K(k, "attn.%s", txt ? "add_k_proj" : "to_k");
  K(v, "attn.%s", txt ? "add_v_proj" : "to_v");
  K(nq, "attn.%s.weight", txt ? "norm_added_q" : "norm_q");
  K(nk, "attn.%s.weight", txt ? "norm_added_k" : "norm_k");
  K(out, "attn.%s", txt ? "to_add_out" : "to_out.0");
  K(up, "%s_mlp.net.0.proj", st);
  K(down, "%s_mlp.net.2", st);
#undef K
}

/* One stream's half of a block after the joint attention: the gated attention output, then
 * norm2 and the gated MLP. */
static dit_vid_t stream_finish(dit_blocks_t *b, dit_vid_t x, dit_vid_t a, dit_blocks_mod_t mod, const stream_keys_t *k,
                               const char *name, dit_dtype_t dt) {
  char n[192], nu[192], na[192], nd[192];
#define N(s) (snprintf(n, sizeof n, "%s.%s", name, s), n)
  x = dit_blocks_gated_add(b, x, dit_blocks_linear_row(b, a, k->out, N("attn_out")), mod, 2, N("attn_residual"));
  dit_vid_t n2 = dit_blocks_adaln(b, x, mod, 3, 4, N("norm2"));
  snprintf(nu, sizeof nu, "%s.mlp.up", name);
  snprintf(na, sizeof na, "%s.mlp.gelu", name);
  snprintf(nd, sizeof nd, "%s.mlp.down", name);
  const dit_blocks_mlp_t ff = {k->up, k->down, DIT_OP_GELU_TANH, nu, na, nd, 1, dt};
  x = dit_blocks_gated_add(b, x, dit_blocks_mlp(b, n2, &ff), mod, 5, N("mlp_residual"));
#undef N
  return x;
}

/* Block i over this rank's image tokens hs and the text tokens ctx (whole on every rank), rotated
 * by their tables' rows cs_img and cs_txt, one joint attention whose text keys stop at each item's
 * valid prefix of mask; updates both. */
static void qwen_block(dit_blocks_t *b, int64_t i, dit_vid_t tsilu, dit_vid_t cs_img, dit_vid_t cs_txt, dit_vid_t mask,
                       dit_vid_t *hs, dit_vid_t *ctx, dit_dtype_t dt) {
  stream_keys_t ki, kc;
  stream_keys(&ki, i, 0);
  stream_keys(&kc, i, 1);
  char n[192], ni_[160], nc_[160], nb[160];
  snprintf(ni_, sizeof ni_, "transformer_blocks.%" PRId64 ".img", i);
  snprintf(nc_, sizeof nc_, "transformer_blocks.%" PRId64 ".txt", i);
  snprintf(nb, sizeof nb, "transformer_blocks.%" PRId64 ".attn", i);
#define N(base, s) (snprintf(n, sizeof n, "%s.%s", base, s), n)
  const dit_blocks_mod_t modi = dit_blocks_mod_rows(b, tsilu, ki.mod, 6, N(ni_, "mod"));
  const dit_blocks_mod_t modc = dit_blocks_mod_rows(b, tsilu, kc.mod, 6, N(nc_, "mod"));
  dit_vid_t xi = dit_blocks_adaln(b, *hs, modi, 0, 1, N(ni_, "norm1"));
  dit_vid_t xc = dit_blocks_adaln(b, *ctx, modc, 0, 1, N(nc_, "norm1"));
  const dit_blocks_attn_keys_t aki = {ki.q, ki.k, ki.v, ki.nq, ki.nk, 1}, akc = {kc.q, kc.k, kc.v, kc.nq, kc.nk, 1};
  dit_blocks_qkv_t ai = dit_blocks_attn_project(b, xi, xi, &aki, N(ni_, "attn"));
  dit_blocks_qkv_t ac = dit_blocks_attn_project(b, xc, xc, &akc, N(nc_, "attn"));
  ai.q = dit_blocks_rope_table(b, ai.q, cs_img, N(ni_, "attn.rope_q"));
  ai.k = dit_blocks_rope_table(b, ai.k, cs_img, N(ni_, "attn.rope_k"));
  ac.q = dit_blocks_rope_table(b, ac.q, cs_txt, N(nc_, "attn.rope_q"));
  ac.k = dit_blocks_rope_table(b, ac.k, cs_txt, N(nc_, "attn.rope_k"));
#undef N
  dit_vid_t a_img, a_txt;
  dit_blocks_joint_attention(b, ai.q, ai.k, ai.v, ac.q, ac.k, ac.v, mask, nb, &a_img, &a_txt);
  *hs = stream_finish(b, *hs, a_img, modi, &ki, ni_, dt);
  *ctx = stream_finish(b, *ctx, a_txt, modc, &kc, nc_, dt);
}

static dit_status_t qwen_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_qwen_config_t *q = &m->qwen;
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, L = req->text_len, T = ls.tokens, gh = ls.height / 2, gw = ls.width / 2;
  DIT_RETURN_IF(dit_joint_parallel_check(m, req, q->heads, T));
  const int cp = req->cp > 1 ? req->cp : 1;
  /* This rank's image tokens: its share of the context-parallel group's; the text is whole on every rank. */
  const int64_t Tl = T / cp, t0 = (cp > 1 ? req->cp_rank : 0) * Tl;
  const dit_dtype_t dt = req->dtype;
  float *cs_data = qwen_rope_table(q, gh, gw, L);
  if (!cs_data) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the rotary table");
  dit_graph_t *g;
  dit_blocks_t *b;
  dit_status_t s = dit_joint_builder(m, req, q->heads, q->head_dim, QWEN_EPS, &g, &b);
  if (s) {
    free(cs_data);
    return s;
  }
  const int64_t xs[3] = {B, T, q->in_channels}, es[3] = {B, L, q->joint_dim}, ts[1] = {B}, ms[2] = {B, L};
  dit_vid_t x = dit_graph_input(g, "hidden_states", dt, 3, xs);
  dit_vid_t ehs = dit_graph_input(g, "encoder_hidden_states", dt, 3, es);
  /* The mask as the pipeline passes it (i64, nonzero = valid): a valid prefix, then padding. */
  dit_vid_t mask = dit_graph_input(g, "encoder_hidden_states_mask", DIT_I64, 2, ms);
  dit_vid_t t = dit_graph_input(g, "timestep", DIT_F32, 1, ts);
  /* The rotary table of [image, text], every rank's the same; each rotates its image tokens' rows and the text's. */
  dit_vid_t cs_img, cs_txt;
  dit_blocks_rope_rows(b, cs_data, T, L, "rope", NULL, &cs_img, &cs_txt);
  free(cs_data);

  if (cp > 1) x = dit_blocks_slice_tokens(b, x, t0, Tl, dt, "image_tokens.local");
  dit_vid_t hs = dit_blocks_linear(b, x, "img_in", dt, "img_in");
  /* The time embedding of timestep.to(dtype): Timesteps(256, scale 1000), TimestepEmbedding. */
  dit_vid_t temb = dit_blocks_sinusoid_rounded(b, t, QWEN_FREQ_DIM, 1, 0.0, QWEN_TIME_SCALE, dt, "time.sinusoid");
  temb = dit_blocks_timestep_mlp(b, temb, "time_text_embed.timestep_embedder", "time");
  dit_vid_t tsilu = dit_blocks_unary(b, DIT_OP_SILU, temb, dt, "temb.silu"); /* every modulation's SiLU(temb), once */
  dit_vid_t ctx = dit_blocks_rmsnorm(b, ehs, "txt_norm.weight", "txt_norm");
  ctx = dit_blocks_linear(b, ctx, "txt_in", dt, "txt_in");
  for (int64_t i = 0; i < q->layers; i++) {
    dit_graph_set_block(g, (int32_t)i);
    qwen_block(b, i, tsilu, cs_img, cs_txt, mask, &hs, &ctx, dt);
  }
  dit_graph_set_block(g, -1);
  dit_vid_t y = dit_blocks_flux_out(b, hs, tsilu);
  dit_graph_mark_output(g, y, "sample");
  return dit_blocks_finish(b, g, "Qwen-Image", out);
}

/* QwenImagePipeline's loop: packed latents into hidden_states, t / 1000 as the timestep, no
 * guidance input, prompt_embeds and prompt_embeds_mask as the text (an all-valid prompt takes a
 * mask of ones, which the pipeline passes as None), true CFG rescaled to the conditional prediction's
 * norm, the flow-match Euler schedule of the pipeline's scheduler config with mu from the image
 * tokens (its shift_terminal included). */
static dit_status_t qwen_generate(const dit_model_t *m, const dit_latent_shape_t *ls, dit_manifest_generate_t *g) {
  static const dit_generate_condition_t cond[] = {{"prompt_embeds", "encoder_hidden_states"},
                                                  {"prompt_embeds_mask", "encoder_hidden_states_mask"}};
  DIT_RETURN_IF(dit_flow_generate(m, "QwenImagePipeline", 50 /* its num_inference_steps */, 1000.0, cond, 2, g));
  if (!g->present) return DIT_OK;
  g->true_cfg_norm = 1;
  return dit_flow_schedule_from(&m->pipeline.scheduler, ls->tokens, 0, g);
}

/* QwenImagePipeline's _get_qwen_prompt_embeds: Qwen2.5-VL (text_encoder, tokenizer/) encodes the
 * prompt in its template with the tokenizer's mask; its last hidden state without the template's
 * 34 rows is prompt_embeds, the prompt's rows kept and the rest zero, their mask
 * prompt_embeds_mask. */
static const dit_stage_feed_t kQwenTextStages[] = {
    {"text_encoder", "tokenizer", "prompt_embeds", "hidden_states_selected", DIT_PADDING_ZEROED, 0,
     "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial relationships of "
     "the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
     34, "prompt_embeds_mask"},
};

const dit_family_t dit_family_qwen = {
    .name = "qwen",
    .model_class = "QwenImageTransformer2DModel",
    .parse_config = qwen_parse_config,
    .expected = qwen_expected,
    .pick_variant = qwen_pick_variant,
    .check_compilable = qwen_check_compilable,
    .pipeline_identity = dit_pipeline_identity_spatial,
    .latent_shape = qwen_latent_shape,
    .build_graph = qwen_build_graph,
    .generate = qwen_generate,
    .text_stages = kQwenTextStages,
    .n_text_stages = sizeof kQwenTextStages / sizeof kQwenTextStages[0],
    .image_decoder = 1, /* QwenImagePipeline decodes its one latent frame as an image (AutoencoderKLQwenImage) */
};
