/* A pipeline's other stages (the text encoders, the VAE decoder) compiled beside the transformer,
 * each into a bundle of its own at the shape the transformer's flags imply (batch 1; a text
 * encoder at --text-len or, where its pipeline says so, at its tokenizer's model_max_length; the
 * decoder at --frames/--height/--width), published in the same place,
 * so one stage bundle serves every transformer shape that needs it. The transformer's manifest
 * names them (its stages section) and its identity covers theirs. A text encoder's bundle carries
 * the pipeline's tokenizer files (tokenizer/, tokenizer_2/ for text_encoder_2), so a bundle needs
 * nothing from the pipeline directory at run time; the transformer's family lists which generate
 * argument each text encoder makes (the manifest's argument, output and padding), so the runtime
 * needs no family's knowledge to feed the loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "artifacts/image_processor.h"
#include "artifacts/identity.h"
#include "compiler/compile_internal.h"
#include "compiler/frontends/family.h"
#include "text/tokenizer.h"

/* The stages this build compiles, in the order the manifest lists them: the pipeline folder (the
 * name --stages takes), the manifest role. A video VAE decodes in chunks (--vae-chunk, default 1
 * latent frame as diffusers; 0: one graph over the whole video): its later chunks' graph is the
 * vae_decoder stage, latent frame 0's the vae_decoder_first stage; an image VAE (the transformer
 * family's image_decoder), or a video VAE whose frames attend to each other (its
 * whole_video_decoder), is one vae_decoder graph over the whole image or video. An image-to-video
 * pipeline (the family's image_stages) adds the VAE encoder of its --image: over that frame alone
 * (vae_encoder), or over the image and zero frames in chunks as the decoder (vae_encoder_first
 * frame 0's graph, vae_encoder the later chunks'), and its image encoder (image_encoder, its
 * bundle carrying image_processor/'s preprocessing). A whole-video decoder whose pipeline decodes
 * framewise (the family's decode_window) is, for more latent frames than a window holds, the
 * graph of one window (vae_decoder, its entry's window_stride) and that of the shorter last
 * window (vae_decoder_last), run one after another and blended by the runtime. */
static const struct {
  const char *folder, *role;
} kStages[] = {{"text_encoder", "text_encoder"}, {"text_encoder_2", "text_encoder_2"}, {"vae", "vae_decoder"},
               {"vae", "vae_decoder_last"},  {"vae", "vae_decoder_first"},       {"vae", "vae_decoder_head"},
               {"vae", "vae_encoder"},       {"vae", "vae_encoder_first"},       {"image_encoder", "image_encoder"}};
#define N_STAGES (sizeof kStages / sizeof kStages[0])
#define VAE_STAGE 2 /* kStages' vae_decoder */

/* --stages LIST: which of kStages it names (bit i); the transformer must be among them. */
static dit_status_t parse_list(const char *list, unsigned *mask) {
  *mask = 0;
  int transformer = 0;
  const char *p = list;
  while (*p) {
    size_t n = strcspn(p, ",");
    int known = n == 11 && !strncmp(p, "transformer", n);
    transformer |= known;
    for (size_t i = 0; i < N_STAGES; i++)
      if (strlen(kStages[i].folder) == n && !strncmp(p, kStages[i].folder, n)) *mask |= 1u << i, known = 1;
    if (!known)
      return DIT_ERR(INVALID_ARGUMENT, "--stages %s: unknown stage '%.*s': expected a comma-separated list of transformer, "
                     "text_encoder, text_encoder_2, vae, image_encoder", list, (int)n, p);
    p += n + (p[n] == ',');
  }
  if (!transformer)
    return DIT_ERR(INVALID_ARGUMENT, "--stages %s: the bundle is the transformer's, the stages hang on it: include transformer", list);
  return DIT_OK;
}

/* The VAE's latent frames per chunk: --vae-chunk, else 1 (a whole image or video decoder:
 * --vae-chunk as given, which its family refuses, else 0: whole). */
static int64_t vae_chunk(const dit_compile_options_t *o, int whole) {
  return o->shape.vae_chunk >= 0 ? o->shape.vae_chunk : !whole;
}

/* The options of stage i: its folder, batch 1, the shape it takes, no parallelism or offload; a
 * VAE split for tiles (vae_tiles >= 1) runs its head over whole frames and the chunks' graphs over
 * that many windows; a text encoder at text_len tokens. */
static void stage_options(const dit_compile_options_t *o, size_t i, const char *dir, const char *tokenizer, int64_t vae_tiles, int whole,
                          int64_t text_len, const dit_image_stages_t *is, dit_compile_options_t *so) {
  memset(so, 0, sizeof *so);
  so->model_dir = dir;
  so->target = o->target;
  so->out_dir = o->out_dir;
  so->quiet = o->quiet;
  so->store_dir = o->store_dir;
  so->rehash = o->rehash;
  so->dump = o->dump;
  so->residency = -1;
  so->chunk_mb = o->chunk_mb;
  so->stages = ""; /* a stage has no stages of its own */
  so->tokenizer_dir = tokenizer;
  so->shape.dtype = o->shape.dtype;
  so->shape.batch = 1;
  so->shape.text_len = text_len;
  so->shape.frames = so->shape.height = so->shape.width = -1;
  if (!strncmp(kStages[i].role, "vae_decoder", 11)) {
    so->shape.frames = o->shape.frames;
    so->shape.height = o->shape.height;
    so->shape.width = o->shape.width;
    so->shape.vae_chunk = vae_chunk(o, whole);
    so->shape.vae_first = !strcmp(kStages[i].role, "vae_decoder_first");
    so->shape.vae_part = !vae_tiles ? DIT_VAE_WHOLE : !strcmp(kStages[i].role, "vae_decoder_head") ? DIT_VAE_HEAD : DIT_VAE_TAIL;
    so->shape.vae_tiles = so->shape.vae_part == DIT_VAE_TAIL ? vae_tiles : 0;
    if (so->shape.vae_part == DIT_VAE_HEAD) so->shape.vae_chunk = 1;
  }
  if (!strncmp(kStages[i].role, "vae_encoder", 11)) {
    so->shape.frames = is->vae == DIT_IMAGE_FIRST_FRAME ? 1 : o->shape.frames;
    so->shape.height = o->shape.height;
    so->shape.width = o->shape.width;
    so->shape.vae_part = DIT_VAE_ENCODER;
    so->shape.vae_chunk = is->vae == DIT_IMAGE_FIRST_FRAME ? 0 : vae_chunk(o, 0);
    so->shape.vae_first = !strcmp(kStages[i].role, "vae_encoder_first");
  }
}

/* The windows of the pipeline's VAE decode: --vae-tiles, or the fewest that fit --vae-budget (0
 * when it fits unsplit), or none. */
static dit_status_t vae_tiles_of(const dit_compile_options_t *o, const char *dir, int64_t *tiles) {
  *tiles = o->shape.vae_tiles;
  if (*tiles || !(o->vae_budget_gib > 0)) return DIT_OK;
  dit_compile_options_t so;
  const dit_image_stages_t none = {0};
  stage_options(o, VAE_STAGE, dir, NULL, 0, 0, o->shape.text_len, &none, &so);
  so.vae_budget_gib = o->vae_budget_gib;
  so.variant = NULL;
  uint64_t peak = 0;
  DIT_RETURN_IF_ERROR(dit_compile_vae_tiles(&so, 1, tiles, &peak), "stage vae");
  if (!o->quiet)
    fprintf(stderr, "ditc: --vae-budget %g GiB: the VAE decode %s %lld window%s, a predicted peak of %.1f MiB\n", o->vae_budget_gib,
            *tiles ? "split, its tail in" : "unsplit,", (long long)(*tiles ? *tiles : 1), *tiles > 1 ? "s" : "", (double)peak / (double)(1ull << 20));
  return DIT_OK;
}

/* A framewise decode (the family's decode_window, diffusers' use_framewise_decoding): the latent
 * frames of a window (n), the stride between windows' starts and the last window's frames, or
 * n = 0 when the video decodes whole (a family without windows, or few enough frames). Windows
 * start every stride latent frames and take up to n; one of a single frame after the first gives
 * no frames (its one frame is dropped) and is left out, so the last window has 2..n. */
typedef struct frame_windows {
  int64_t n, stride, last;
} frame_windows_t;

static dit_status_t frame_windows_of(const dit_compile_options_t *o, const dit_model_t *tm, frame_windows_t *w) {
  memset(w, 0, sizeof *w);
  const dit_family_t *fam = tm && tm->fam ? tm->fam : NULL;
  const int64_t vt = tm ? tm->vae_temporal : 0;
  if (!fam || !fam->whole_video_decoder || !fam->decode_window || vt < 1 || o->shape.frames < 1) return DIT_OK;
  const int64_t f = (o->shape.frames - 1) / vt + 1, n = fam->decode_window / vt + 1, stride = fam->decode_stride / vt;
  if (f <= n - 1) return DIT_OK; /* diffusers' rule: more latent frames than decode_window / temporal go framewise */
  /* Every window but the last takes n frames only when it reaches stride + 2 past the last's start;
   * consecutive windows share a frame at least (the later one's dropped first). */
  if (stride < 1 || stride + 2 < n || stride > n - 1)
    return DIT_ERR(UNIMPLEMENTED, "%s: windows of %lld latent frames every %lld: expected a stride of %lld..%lld (only the last window "
                   "shorter, consecutive windows overlapping)", tm->model_class, (long long)n, (long long)stride,
                   (long long)(n - 2 > 1 ? n - 2 : 1), (long long)(n - 1));
  *w = (frame_windows_t){n, stride, f - (f - 2) / stride * stride};
  return DIT_OK;
}

/* The transformer family's entry for text stage `role` (NULL: the family lists none, or not this one). */
static const dit_stage_feed_t *stage_feed(const dit_model_t *m, const char *role) {
  for (size_t i = 0; m && m->fam && i < m->fam->n_text_stages; i++)
    if (!strcmp(m->fam->text_stages[i].role, role)) return &m->fam->text_stages[i];
  return NULL;
}

/* A text stage's token count: --text-len (and the template's rows the pipeline drops after the
 * encoder), or its tokenizer's model_max_length where the pipeline
 * pads to it (FluxPipeline's CLIP). */
static dit_status_t stage_text_len(const dit_compile_options_t *o, const dit_stage_feed_t *feed, const char *tok, int64_t *len) {
  *len = o->shape.text_len + (feed ? feed->drop : 0); /* a template's rows go after the encoder */
  if (!feed || !feed->tokenizer_length) return DIT_OK;
  dit_tokenizer_t *tk = NULL;
  DIT_RETURN_IF_ERROR(dit_tokenizer_open(tok, &tk), "stage %s: its tokenizer %s", feed->role, tok);
  *len = dit_tokenizer_max_length(tk);
  dit_tokenizer_free(tk);
  return DIT_OK;
}

dit_status_t dit_compile_stages(const dit_compile_options_t *o, const dit_model_t *tm, int identity_only, dit_manifest_stage_t *out,
                                size_t *n_out) {
  *n_out = 0;
  if (o->stages && !o->stages[0]) return DIT_OK;
  unsigned wanted = 0;
  if (o->stages) DIT_RETURN_IF(parse_list(o->stages, &wanted));
  char index[4096];
  DIT_RETURN_IF(dit_path_join(index, sizeof index, o->model_dir, "model_index.json"));
  const int pipeline = dit_path_exists(index);
  const int image = tm && tm->fam && tm->fam->image_decoder;
  /* One graph over the whole image or video: no chunks, no first frame's graph, no windows. */
  const int whole = image || (tm && tm->fam && tm->fam->whole_video_decoder);
  const char *what = image ? "images" : "videos";
  dit_image_stages_t is = {0};
  if (tm && tm->fam && tm->fam->image_stages) tm->fam->image_stages(tm, &is);
  int64_t tiles = -1; /* decided with the first VAE stage */
  frame_windows_t fw;
  DIT_RETURN_IF(frame_windows_of(o, tm, &fw));
  for (size_t i = 0; i < N_STAGES; i++) {
    const int named = (wanted >> i) & 1;
    const int text = !strncmp(kStages[i].role, "text_encoder", 12);
    const dit_stage_feed_t *feed = text ? stage_feed(tm, kStages[i].role) : NULL;
    char dir[4096], tok[4096];
    DIT_RETURN_IF(dit_path_join(dir, sizeof dir, o->model_dir, kStages[i].folder));
    DIT_RETURN_IF(dit_path_join(tok, sizeof tok, o->model_dir, feed ? feed->tokenizer : "tokenizer"));
    const int has = pipeline && dit_is_dir(dir);
    if (named && !pipeline)
      return DIT_ERR(NOT_FOUND, "--stages %s: %s is not a pipeline directory (no model_index.json), so it has no %s stage", o->stages,
                     o->model_dir, kStages[i].folder);
    if (named && !has)
      return DIT_ERR(NOT_FOUND, "--stages %s: the pipeline directory %s has no %s/ folder", o->stages, o->model_dir, kStages[i].folder);
    if (!has || (o->stages && !named)) continue;
    /* A family that lists its text encoders compiles those alone; without a list, text_encoder alone
     * (WanPipeline's). */
    if (text && !feed && ((tm && tm->fam && tm->fam->n_text_stages) || strcmp(kStages[i].role, "text_encoder"))) {
      if (named)
        return DIT_ERR(UNIMPLEMENTED, "--stages %s: %s's pipeline feeds no generate argument from a %s stage", o->stages,
                       tm ? tm->model_class : "the transformer", kStages[i].folder);
      continue;
    }
    /* The image stages only where the pipeline encodes an image; frame 0's encoder only in chunks. */
    const int encoder = !strncmp(kStages[i].role, "vae_encoder", 11), image_encoder = !strcmp(kStages[i].role, "image_encoder");
    if (image_encoder && named && !is.image_encoder)
      return DIT_ERR(INVALID_ARGUMENT, "--stages %s: %s's pipeline reads no image embeddings: it has no image_encoder stage", o->stages,
                     tm ? tm->model_class : "the transformer");
    if ((encoder && is.vae == DIT_IMAGE_NONE) || (image_encoder && !is.image_encoder)) continue;
    if (!strcmp(kStages[i].role, "vae_encoder_first") && (is.vae != DIT_IMAGE_VIDEO || !vae_chunk(o, 0))) continue;
    if (whole && (!strcmp(kStages[i].role, "vae_decoder_first") || !strcmp(kStages[i].role, "vae_decoder_head")))
      continue; /* a whole image or video decodes in one graph */
    if (!strcmp(kStages[i].role, "vae_decoder_first") && !vae_chunk(o, whole)) continue; /* the whole video in one graph */
    const int last = !strcmp(kStages[i].role, "vae_decoder_last");
    if (last && (!fw.n || fw.last == fw.n)) continue; /* no window shorter than the others */
    if (!strncmp(kStages[i].role, "vae_decoder", 11) && tiles < 0) {
      if (whole && o->vae_budget_gib > 0)
        return DIT_ERR(INVALID_ARGUMENT, "--vae-budget %g: %s's pipeline decodes whole %s in one graph (no windows to fit a budget)",
                       o->vae_budget_gib, tm->model_class, what);
      if (whole && o->shape.vae_tiles)
        return DIT_ERR(INVALID_ARGUMENT, "--vae-tiles %lld: %s's pipeline decodes whole %s in one graph (no windows)",
                       (long long)o->shape.vae_tiles, tm->model_class, what);
      if (!whole && (o->shape.vae_tiles || o->vae_budget_gib > 0) && !vae_chunk(o, whole))
        return DIT_ERR(INVALID_ARGUMENT, "--vae-chunk 0 with --vae-%s: a decoder in windows runs in chunks", o->shape.vae_tiles ? "tiles" : "budget");
      if (whole) tiles = 0;
      else DIT_RETURN_IF(vae_tiles_of(o, dir, &tiles));
    }
    if (!strcmp(kStages[i].role, "vae_decoder_head") && !tiles) continue; /* unsplit */
    /* By default a stage this build cannot load or compile (a family or a variant it does not know
     * yet, a folder that holds only what the transformer's compile reads, such as a VAE config for
     * its factors) is left out with a note saying why; named in --stages it is an error. */
    dit_model_t *m = NULL;
    dit_status_t s = dit_model_load(dir, NULL, &m);
    if (!s) s = dit_model_check_compilable(m);
    if (s && !named) {
      if (!o->quiet) fprintf(stderr, "ditc: note: stage %s left out: %s\n", kStages[i].folder, dit_status_message(s));
      dit_status_free(s);
      dit_model_free(m);
      continue;
    }
    if (s) {
      dit_model_free(m);
      return dit_status_annotate(s, "stage %s", kStages[i].folder);
    }
    dit_manifest_stage_t *st = &out[(*n_out)++];
    memset(st, 0, sizeof *st);
    snprintf(st->role, sizeof st->role, "%s", kStages[i].role);
    snprintf(st->family, sizeof st->family, "%s", m->family);
    snprintf(st->model_class, sizeof st->model_class, "%s", m->model_class);
    dit_model_free(m);
    if (fw.n && !strcmp(kStages[i].role, "vae_decoder")) st->window_stride = fw.stride;
    if (feed) {
      snprintf(st->argument, sizeof st->argument, "%s", feed->argument);
      snprintf(st->output, sizeof st->output, "%s", feed->output);
      st->padding = feed->padding;
      if (feed->prompt_template) snprintf(st->prompt_template, sizeof st->prompt_template, "%s", feed->prompt_template);
      st->drop = feed->drop;
      if (feed->mask_argument) snprintf(st->mask_argument, sizeof st->mask_argument, "%s", feed->mask_argument);
    }
    if (text && !dit_is_dir(tok))
      return DIT_ERR(NOT_FOUND, "stage %s: %s: missing (the tokenizer of the prompts the text encoder reads)", kStages[i].folder, tok);
    char proc[4096];
    DIT_RETURN_IF(dit_path_join(proc, sizeof proc, o->model_dir, "image_processor"));
    if (image_encoder && !dit_is_dir(proc))
      return DIT_ERR(NOT_FOUND, "stage %s: %s: missing (the preprocessing of the image the image encoder reads)", kStages[i].folder, proc);
    int64_t text_len = o->shape.text_len;
    if (text) DIT_RETURN_IF(stage_text_len(o, feed, tok, &text_len));
    dit_compile_options_t so;
    stage_options(o, i, dir, text ? tok : NULL, tiles > 0 ? tiles : 0, whole, text_len, &is, &so);
    if (image_encoder) so.image_processor_dir = proc;
    /* A window's graph decodes its latent frames alone. */
    if (fw.n && !strncmp(kStages[i].role, "vae_decoder", 11)) so.shape.frames = ((last ? fw.last : fw.n) - 1) * tm->vae_temporal + 1;
    if (fw.n && !last && !o->quiet && !identity_only)
      fprintf(stderr, "ditc: stage vae: %lld latent frames decode framewise, in windows of %lld every %lld (the last of %lld)\n",
              (long long)((o->shape.frames - 1) / tm->vae_temporal + 1), (long long)fw.n, (long long)fw.stride, (long long)fw.last);
    if (identity_only) {
      cJSON *in = NULL;
      s = dit_compile_identity(&so, &in, st->identity);
      cJSON_Delete(in);
    } else {
      dit_compile_result_t r;
      memset(&r, 0, sizeof r);
      s = dit_compile(&so, &r);
      if (!s) memcpy(st->identity, r.identity, DIT_HASH_HEX);
      if (!s && !o->quiet) fprintf(stderr, "ditc: stage %s: bundle %s %s\n", kStages[i].folder, r.identity, r.path);
      free(r.path);
    }
    if (s) return dit_status_annotate(s, "stage %s (%s)", kStages[i].folder, dir);
  }
  return DIT_OK;
}

/* The tokenizer files a text encoder's bundle carries: the ones dit_tokenizer_open reads. */
static const char *const kTokenizerFiles[] = {"spiece.model", "tokenizer_config.json", "vocab.json", "merges.txt",
                                              "tokenizer.json"};
#define N_TOK_FILES (sizeof kTokenizerFiles / sizeof kTokenizerFiles[0])
#define CARRIED_MAX_BYTES ((size_t)256 << 20)

void dit_carried_files_free(dit_carried_files_t *t) {
  for (size_t i = 0; i < t->n; i++) free(t->data[i]);
  memset(t, 0, sizeof *t);
}

dit_status_t dit_carried_files_read(const dit_compile_options_t *o, dit_carried_files_t *t) {
  memset(t, 0, sizeof *t);
  const int tok = o->tokenizer_dir != NULL;
  if (!tok && !o->image_processor_dir) return DIT_OK;
  const char *const *files = tok ? kTokenizerFiles : (const char *const[]){DIT_IMAGE_PROCESSOR_FILE};
  const size_t n_files = tok ? N_TOK_FILES : 1;
  t->role = tok ? "tokenizer" : "image_processor";
  t->dir = tok ? o->tokenizer_dir : o->image_processor_dir;
  /* Opened as the runtime will: a folder it cannot read is refused here, not at run time. */
  if (tok) {
    dit_tokenizer_t *tk = NULL;
    DIT_RETURN_IF_ERROR(dit_tokenizer_open(t->dir, &tk), "tokenizer");
    dit_tokenizer_free(tk);
  }
  for (size_t i = 0; i < n_files; i++) {
    char p[4096];
    DIT_RETURN_IF(dit_path_join(p, sizeof p, t->dir, files[i]));
    if (tok && !dit_path_exists(p)) continue;
    size_t k = t->n;
    dit_status_t s = dit_file_read(p, CARRIED_MAX_BYTES, &t->data[k], &t->size[k]);
    dit_image_processor_t ip;
    if (!s && !tok) s = dit_image_processor_parse(t->data[k], t->size[k], p, &ip);
    if (s) {
      dit_carried_files_free(t);
      return s;
    }
    t->name[k] = files[i];
    dit_hash128_hex(t->data[k], t->size[k], t->hash[k]);
    t->n++;
  }
  return DIT_OK;
}
