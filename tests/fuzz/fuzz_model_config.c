/* libFuzzer target for the model directory's JSON readers: the first byte picks config.json
 * (dit_model_config_parse), model_index.json (dit_pipeline_index_parse),
 * scheduler_config.json (dit_scheduler_config_parse), vae/config.json (dit_vae_config_parse)
 * or a second expert's config.json checked against the first's (dit_expert_configs_match);
 * the rest is the file's text. A refusal must carry a code and name the file; what is
 * accepted must hold the ranges promised. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "compiler/frontend.h"
#include "compiler/frontends/family.h"

static void expect(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "fuzz_model_config: accepted, but %s\n", what);
    abort();
  }
}

static int refused(dit_status_t s, const char *name) {
  if (!s) return 0;
  /* Out of memory may come without the file's name; every other refusal names it. */
  if (dit_status_code(s) == DIT_CODE_OK ||
      (dit_status_code(s) != DIT_CODE_RESOURCE_EXHAUSTED && !strstr(dit_status_message(s), name))) {
    fprintf(stderr, "fuzz_model_config: refusal without the file's name: %s\n", dit_status_message(s));
    abort();
  }
  dit_status_free(s);
  return 1;
}

static int terminated(const char *s, size_t cap) { return memchr(s, 0, cap) != NULL; }

static void model_config(const char *text, size_t len) {
  dit_model_t *m = calloc(1, sizeof *m);
  if (!m) return;
  const int accepted = !refused(dit_model_config_parse(text, len, "config.json", m), "config.json");
  if (accepted && strcmp(m->family, "wan")) {
    /* The other families (the MMDiTs and the stages' encoders and VAEs): the registered one the
     * class names, whose normalized config always canonicalizes. */
    expect(m->fam && !strcmp(m->family, m->fam->name), "a family other than the class's");
    int ok = !strcmp(m->model_class, m->fam->model_class);
    for (const char *const *o = m->fam->other_classes; o && *o; o++) ok |= !strcmp(m->model_class, *o);
    expect(ok, "a class its family does not name");
    char hex[33];
    expect(!dit_identity_compute(m->config, hex), "the normalized config has no identity");
  } else if (accepted) {
    expect(!strcmp(m->model_class, "WanTransformer3DModel"), "the Wan family under another class");
    expect(m->wan.heads >= 1 && m->wan.heads <= 1024 && m->wan.head_dim >= 1 && m->wan.head_dim <= 1024,
           "attention sizes outside their ranges");
    expect(m->wan.in_channels >= 1 && m->wan.out_channels >= 1 && m->wan.out_channels <= 4096, "channels outside their ranges");
    expect(m->wan.layers >= 1 && m->wan.layers <= 1024 && m->wan.ffn_dim >= 1 && m->wan.freq_dim % 2 == 0,
           "layers, ffn_dim or freq_dim outside their ranges");
    for (int i = 0; i < 3; i++) expect(m->wan.patch[i] >= 1 && m->wan.patch[i] <= 64, "a patch size outside [1, 64]");
    expect(m->wan.eps >= 0 && m->wan.eps <= 1, "eps outside [0, 1]");
    expect(m->wan.image_dim >= 0 && m->wan.image_dim <= (1 << 20) && m->wan.added_kv_proj_dim >= 0 &&
               m->wan.added_kv_proj_dim <= (1 << 20) && m->wan.pos_embed_seq_len >= 0 && m->wan.pos_embed_seq_len <= (1 << 20),
           "an image-conditioning field outside its range");
    expect(m->wan.rope_max_seq_len >= 1 && m->wan.rope_max_seq_len <= (1 << 20), "rope_max_seq_len outside its range");
    /* The normalized config feeds the compile identity: it must always canonicalize. */
    char hex[33];
    dit_status_t s = dit_identity_compute(m->config, hex);
    expect(!s, "the normalized config has no identity");
  }
  dit_model_free(m);
}

static void pipeline_index(const char *text, size_t len) {
  dit_pipeline_index_t p;
  if (refused(dit_pipeline_index_parse(text, len, "model_index.json", &p), "model_index.json")) return;
  static const char *const known[] = {"WanPipeline", "WanImageToVideoPipeline", "FluxPipeline", "HunyuanVideoPipeline",
                                      "QwenImagePipeline"};
  int ok = 0;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= !strcmp(p.class_name, known[i]);
  expect(ok, "an unknown pipeline class");
  expect(terminated(p.transformer_class, sizeof p.transformer_class) && p.transformer_class[0], "no transformer class");
  expect(terminated(p.transformer_2_class, sizeof p.transformer_2_class), "an unterminated transformer_2 class");
  expect(terminated(p.scheduler_class, sizeof p.scheduler_class), "an unterminated scheduler class");
  /* Two experts always come with the ratio that switches them, and the ratio only with them. */
  expect(p.has_boundary_ratio == (p.transformer_2_class[0] != 0), "boundary_ratio without two experts, or two without it");
  expect(!p.has_boundary_ratio || (p.boundary_ratio > 0 && p.boundary_ratio <= 1), "boundary_ratio outside (0, 1]");
  expect(p.expand_timesteps == 0 || p.expand_timesteps == 1, "expand_timesteps not a boolean");
}

static void vae_config(const char *text, size_t len) {
  dit_vae_factors_t v;
  if (refused(dit_vae_config_parse(text, len, "vae/config.json", &v), "vae/config.json")) return;
  expect(v.spatial >= 1 && v.spatial <= 64 && v.temporal >= 1 && v.temporal <= 64, "a VAE factor outside [1, 64]");
  expect(v.z_dim >= 1 && v.z_dim <= 4096, "z_dim outside [1, 4096]");
  expect(!strcmp(v.source, "vae/config.json"), "the factors' source not named");
}

/* The input as a second expert's config, against the Wan2.1-1.3B defaults as the first's:
 * equal configs must match, any accepted difference be refused naming both files. */
static void second_expert(const char *text, size_t len) {
  static const char kFirst[] = "{\"_class_name\": \"WanTransformer3DModel\"}";
  dit_model_t *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
  if (a && b && !dit_model_config_parse(kFirst, strlen(kFirst), "transformer/config.json", a) &&
      !refused(dit_model_config_parse(text, len, "transformer_2/config.json", b), "transformer_2/config.json")) {
    dit_status_t s = dit_expert_configs_match(a->config, "transformer/config.json", b->config, "transformer_2/config.json");
    int same = cJSON_Compare(a->config, b->config, 1) ? 1 : 0;
    expect((s == DIT_OK) == same, same ? "equal experts refused" : "different experts matched");
    if (s) expect(strstr(dit_status_message(s), "transformer/config.json") != NULL, "a mismatch without the first file");
    refused(s, "transformer_2/config.json");
  }
  dit_model_free(a);
  dit_model_free(b);
}

static void scheduler_config(const char *text, size_t len) {
  dit_scheduler_defaults_t d;
  if (refused(dit_scheduler_config_parse(text, len, "scheduler_config.json", &d), "scheduler_config.json")) return;
  expect(d.present && terminated(d.class_name, sizeof d.class_name) && d.class_name[0], "no class name");
  expect(d.num_train_timesteps >= 1 && d.num_train_timesteps <= 1000000, "num_train_timesteps outside its range");
  expect(d.shift >= 1e-3 && d.shift <= 1e3, "a shift outside its range");
  expect(!strcmp(d.prediction_type, "epsilon") || !strcmp(d.prediction_type, "v_prediction") ||
             !strcmp(d.prediction_type, "sample") || !strcmp(d.prediction_type, "flow_prediction"),
         "an unknown prediction type");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  /* Not NUL-terminated: the readers must keep to len. */
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  switch (data[0] % 5) {
    case 0: model_config(text, len); break;
    case 1: pipeline_index(text, len); break;
    case 2: scheduler_config(text, len); break;
    case 3: vae_config(text, len); break;
    default: second_expert(text, len); break;
  }
  return 0;
}
