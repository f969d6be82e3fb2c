/* The family-independent parts of a diffusers pipeline directory the frontends share:
 * model_index.json, the scheduler's and the VAE's configs, and the small-file reader. */
#ifndef DIT_COMPILER_FRONTENDS_PIPELINE_H
#define DIT_COMPILER_FRONTENDS_PIPELINE_H

#include <stddef.h>

#include "compiler/frontend.h"

/* Reads a config file of at most 1 MiB at path; the caller frees *text. */
dit_status_t dit_pipeline_file_read(const char *path, char **text, size_t *len);

/* A diffusers pipeline directory: model_index.json names the transformers (read from
 * transformer/ and transformer_2/) and the scheduler, whose config gives the sampler's
 * defaults; vae/config.json, when present, gives the VAE factors. Fills m->pipeline.index,
 * .scheduler, .vae, .experts[1].dir and m->model_dir (dir/transformer), each folder checked
 * to exist; the transformers themselves are the family's to load. */
dit_status_t dit_pipeline_dir_read(dit_model_t *m, const char *dir);

/* An image pipeline's identity: its class and the VAE's spatial factor. */
dit_status_t dit_pipeline_identity_spatial(const dit_model_t *m, cJSON **out);

/* The flow-match Euler schedule of a pipeline's scheduler config for an image of
 * image_seq_len tokens, into g->schedule; sigmas_to_zero: the pipeline starts from
 * linspace(1, 0, n+1)[:-1] (HunyuanVideo) rather than linspace(1, 1/n, n). */
dit_status_t dit_flow_schedule_from(const dit_scheduler_defaults_t *sc, int64_t image_seq_len, int sigmas_to_zero,
                                    dit_manifest_generate_t *g);

#endif
