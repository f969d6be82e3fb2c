/* generate's pipeline stages (the stages section of a bundle's manifest): from a prompt to the
 * embeddings the loop reads (the text encoder's bundle, its tokenizer files and WanPipeline's
 * post-processing), and from the final latents to frames (the VAE decoder's bundle). Part of the
 * ditrun executable beside gen_cli.h. */
#ifndef DIT_RUNTIME_GEN_STAGES_H
#define DIT_RUNTIME_GEN_STAGES_H

#include "artifacts/manifest.h"
#include "runtime/ditrun.h"

/* The directory of the bundle's stage of role `role`: beside the bundle's own directory (stage
 * bundles are published in the same place), else the identity through the bundle sources
 * (--store). Refused, naming the compile flag that adds it, when the manifest lists none. */
dit_status_t gen_stage_dir(const char *bundle_dir, const dit_manifest_t *m, const char *role, const char *why,
                           const char **out_dir);

/* The text encoder stages --prompt runs on bundle m: with a generate section, the stage making each
 * condition's argument (its manifest entry st[i], its directory dirs[i], for condition i), refused
 * naming the argument when none does; else the text_encoder stage (st[0], dirs[0]). `why` leads
 * the messages. */
dit_status_t gen_text_stages(const char *bundle_dir, const dit_manifest_t *m, const char *why, const dit_manifest_stage_t **st,
                             const char **dirs);

/* One prompt through the text encoder stage at te_dir as its manifest entry st says (NULL: the
 * defaults, WanPipeline's _get_t5_prompt_embeds: output last_hidden_state, padding "zeroed").
 * The prompt goes into st's template (if any; else "zeroed" cleans it: runs of white space to one
 * space, trimmed), is tokenized to the stage's text length with padding and truncation and
 * encoded with the tokenizer's mask as attention_mask ("attended", FluxPipeline's: a mask of ones
 * where the stage takes one); the template's first st->drop rows go; "zeroed" zeroes the rows past
 * the prompt's tokens. The output (f32 [1, L - drop, D] or pooled [1, D]) replicated to `batch`
 * items: out is f32 [batch, L - drop, D] or [batch, D]; mask_out (if not NULL) f32 [batch, L -
 * drop], 1 on the prompt's rows (data malloc'ed). *tokens: the templated prompt's token count. */
dit_status_t gen_encode_prompt(const char *te_dir, const dit_manifest_stage_t *st, const dit_runtime_options_t *o, const char *text,
                               int64_t batch, dit_tensor_t *out, dit_tensor_t *mask_out, int *tokens);

/* Decodes latents (f32 [B, C, f, h, w], any B: one item at a time through the batch-1 decoder)
 * into frames, f32 [B, 3, F, H, W] in [-1, 1] (data malloc'ed). Latents of another rank (an image
 * family's, e.g. packed [B, T, C]) go through vae_dir's bundle alone, whose input 'latents' is one
 * item of them and whose output 'sample' an image [1, 3, H, W]: frames are [B, 3, H, W] (no
 * first_dir or head_dir). first_dir NULL: vae_dir's bundle
 * decodes the whole video in one forward; else first_dir's decodes latent frame 0 and vae_dir's
 * the later frames chunk by chunk, each forward's causal caches (outputs cache.NAME.next) fed to
 * the next (inputs cache.NAME, zeros before the first). head_dir (with first_dir): a decoder split
 * for tiles: head_dir's bundle runs over whole frames, one latent frame a forward, its output kept
 * in host memory, then the two tails run window by window (their manifests' shape.tile), every
 * chunk of one window before the next, each window giving the columns it computes exactly.
 * stride > 0 (the vae_decoder stage's window_stride): a framewise decode as diffusers'
 * AutoencoderKLHunyuanVideo's default: vae_dir's bundle decodes a window of its n latent frames
 * starting every stride latent frames, last_dir's a shorter last window, one after another; each
 * window's first frame but the first window's is dropped, its first frames blended with the
 * previous window's last ones, stride * temporal frames kept of each (the first window one more).
 * *stats (if not NULL): where the time went and the most the decoders held at once (latent frame
 * 0's runs beside the later chunks'; the head before them; the last window in the others' arena). */
typedef struct gen_decode_stats {
  double load_s;  /* loading the decoder bundles */
  double run_s;   /* their forwards, the latents' upload included */
  double carry_s; /* carrying each forward's caches to the next */
  double out_s;   /* taking each chunk's sample to host memory */
  double store_s; /* converting them into the video, on a thread beside the next forward */
  uint64_t peak_bytes;
} gen_decode_stats_t;
/* A pipeline bundle's VAE decoder stages, as gen_decode_latents takes them: vae_dir always, the
 * others NULL where the bundle has none (stride 0: no windows). */
typedef struct gen_decoders {
  const char *vae_dir, *first_dir, *head_dir, *last_dir;
  int64_t stride;
} gen_decoders_t;
/* The decoder stages of the bundle at bundle_dir (manifest m): vae_decoder (refused, naming `why`,
 * when absent) and the vae_decoder_first, _head and _last it has. */
dit_status_t gen_decoder_stages(const char *bundle_dir, const dit_manifest_t *m, const char *why, gen_decoders_t *out);
dit_status_t gen_decode_latents(const gen_decoders_t *dec, const dit_runtime_options_t *o, const dit_tensor_t *latents, dit_tensor_t *frames,
                                gen_decode_stats_t *stats);
/* The line decode and generate print: "ditrun: vae decode T s (loading L s, M MiB allocated; forwards
 * F s, caches C s, frames O s, S s of it beside the forwards)". */
void gen_decode_report(double seconds, const gen_decode_stats_t *stats);

/* Image-to-video's VAE encoding of its image: frame0 (f32 [3, H, W] in [-1, 1], the encoder's
 * size) followed by frames - 1 zero frames through the VAE encoder stage at enc_dir (input 'video'
 * [1, 3, n, H, W], output 'latents' [1, C, k, h, w], normalized), as the pipeline encodes its
 * video condition: first_dir NULL, enc_dir's bundle takes the whole video (frames = n; one frame
 * for Wan2.2 TI2V); else first_dir's encodes frame 0 and enc_dir's the later frames n at a time,
 * the causal caches carried as the decoder's. latents: f32 [1, C, f, h, w] (data malloc'ed);
 * *load_s (if not NULL): the seconds spent loading the encoders. */
dit_status_t gen_encode_video(const char *enc_dir, const char *first_dir, const dit_runtime_options_t *o, int64_t frames,
                              const float *frame0, dit_tensor_t *latents, double *load_s);

/* --image of an image-to-video bundle m (its stages vae_encoder, optionally vae_encoder_first and
 * image_encoder): the image resized to the video's size (PIL's LANCZOS) and encoded by
 * gen_encode_video (one frame, or the image and zero frames) into latents, the normalized
 * image_latents [1, C, f, h, w]; with an image_encoder stage, embeds: its penultimate hidden
 * states [1, n, D] of the image as its carried preprocessor configuration prepares it (resize,
 * center crop, rescale, normalize). Both f32, data malloc'ed; embeds empty without the stage. */
struct dit_image;
dit_status_t gen_encode_image(const char *bundle_dir, const dit_manifest_t *m, const dit_runtime_options_t *o, const struct dit_image *im,
                              dit_tensor_t *latents, dit_tensor_t *embeds);

/* The bundle's latent-to-RGB map for previews (preview.h): fitted by least squares on its VAE
 * decoder stage (a few decodes of standard normal latents of latent frame 0: each latent pixel's
 * channels against the mean of the pixels it decodes to), once per stage for the process; NULL
 * (the preview's fallback, with a note on stderr) without a VAE stage or when the fit fails. */
struct dit_preview_map;
const struct dit_preview_map *gen_preview_map(const char *bundle_dir, const dit_manifest_t *m, const dit_runtime_options_t *o);

#endif
