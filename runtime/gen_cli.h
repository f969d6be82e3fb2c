/* generate's command-line job, shared by `ditrun generate` and the resident server's worker
 * (runtime/serve/worker.c), so a served job runs exactly the command line's code path: the same
 * option parsing and defaults, the same input checks, the same loop and the same output writer.
 * Defined in ditrun_main.c (the executable's own code, not libditrun's). */
#ifndef DIT_RUNTIME_GEN_CLI_H
#define DIT_RUNTIME_GEN_CLI_H

#include <stdint.h>

#include "artifacts/safetensors.h"
#include "runtime/cache_profile.h"
#include "runtime/ditrun.h"

typedef struct run_args {
  const char *bundle, *inputs, *out, *prompt, *negative, *init, *sampler, *backend, *reference, *expert;
  const char *image, *image_latents, *image_embeds, *step_cache, *cache_profile, *cache_reuse, *reuse_report;
  const char *preview; /* --preview DIR: generate's latent previews (runtime/preview.h) */
  /* --prompt TEXT, --negative-prompt TEXT: through the bundle's text-encoder stage; --out is then
   * the decoded frames (the VAE stage) and --out-latents the latents (runtime/gen_stages.h);
   * --out-frames FILE.safetensors the same frames as a float tensor, beside an --out MP4 or PNG. */
  const char *text, *negative_text, *out_latents, *out_frames;
  double fps;
  int64_t preview_every;
  double reuse_ratio, reuse_eps_local;
  int64_t reuse_warmup;
  int reuse_on, reuse_diagnostic;
  int64_t steps, seed, threads, device, devices, warmup, cache_warmup, cache_cooldown;
  double guidance, guidance_2, shift, max_rel, true_cfg;
  int have_guidance, have_shift, have_sampler, have_true_cfg, have_steps;
  int have_guidance_2, have_seed, have_cache_warmup, have_cache_cooldown, accumulate, verbose, need_out, graph, stage, overlap,
      pace_host, no_split, split_in_flight, generate; /* generate: 1 generate, 2 calibrate-cache */
  /* A served job's tensors (the request's safetensors): read in place of the files that
   * --prompt-embeds, --negative-embeds, --image-latents and --image-embeds name. */
  const dit_safetensors_t *request;
} run_args_t;

/* What generate and calibrate-cache run: the loaded bundle, the loop's options and inputs, and
 * the latents. */
typedef struct gen_job {
  dit_runtime_t *rt;
  dit_generate_options_t g;
  dit_tensor_t prompt, neg, lat;
  float *latents; /* the latents the loop steps */
  float *init;    /* --init-latents' noise; NULL: --seed's */
  size_t n;
  int *used, *skipped;
  int hidden_reuse; /* generate's report: skipped steps reused the block stack's residual */
  int64_t reuse_counts[2]; /* attention-state reuse: remote states computed and decided after warm-up */
  dit_cache_profile_t profile; /* --cache-profile's, for --step-cache auto */
  dit_named_tensor_t args[2 * DIT_GEN_MAX_CONDITIONS];
  char arg_names[2 * DIT_GEN_MAX_CONDITIONS][96];
  char il_what[1100], ie_what[1100];
} gen_job_t;

/* argv holds the options after the command's name; an exit status (0 when they parse). */
int parse_run_args(int argc, char **argv, run_args_t *a, int need_out, const char *cmd);
/* The checks that need no bundle (an exit status, 0 when they pass). */
int gen_usage(const run_args_t *a, gen_job_t *j);
/* The message of the latest refusal of parse_run_args or gen_usage (empty before any). */
const char *gen_usage_message(void);
/* Loads the bundle into j->rt (every expert of a two-expert one). */
dit_status_t gen_load(const run_args_t *a, gen_job_t *j);
/* Reads the loop's inputs for the loaded j->rt. */
dit_status_t gen_inputs(const run_args_t *a, gen_job_t *j);
/* The initial noise: --init-latents', else seed's. */
void gen_noise(const gen_job_t *j, uint64_t seed);
dit_status_t gen_run(gen_job_t *j, const run_args_t *a);
/* Builds the latents file generate --out writes: into a writer the caller destroys. */
dit_status_t gen_output(gen_job_t *j, dit_st_writer_t **out);
/* --prompt's output after gen_run: the latents through the VAE decoder stage to the file --out
 * names (FILE.mp4, FILE.png, or FILE.safetensors: tensor frames), --out-frames and --out-latents. */
dit_status_t gen_frames_output(const run_args_t *a, gen_job_t *j);
/* Frees what gen_inputs read; j->rt stays loaded. */
void gen_release_inputs(gen_job_t *j);
/* A bundle named on the command line (a directory, or an identity in --store) as a directory,
 * kept until the process ends. */
dit_status_t gen_resolve_bundle(const char *what, const char **out_dir);

#endif
