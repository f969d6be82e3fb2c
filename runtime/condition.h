/* What the transformer sees each denoising step besides the text: the latents as the bundle
 * takes them (alone; concatenated with the first-frame mask and the image latents; or blended
 * with the image latents on the first frame), the timestep (one per item or one per token),
 * and the image embeddings, as diffusers' WanPipeline and WanImageToVideoPipeline build them. */
#ifndef DIT_RUNTIME_CONDITION_H
#define DIT_RUNTIME_CONDITION_H

#include <stdint.h>

#include "artifacts/manifest.h"
#include "base/status.h"
#include "runtime/tensor.h"

typedef struct dit_condition dit_condition_t;

typedef enum dit_condition_kind {
  DIT_CONDITION_TEXT = 0,        /* hidden_states = latents, timestep [B] */
  DIT_CONDITION_CONCAT = 1,      /* hidden_states = latents ++ mask ++ image latents, timestep [B]
                                    (Wan2.1-I2V, Wan2.2-I2V-A14B) */
  DIT_CONDITION_TOKEN_TEXT = 2,  /* hidden_states = latents, timestep [B, tokens] all t
                                    (Wan2.2-TI2V text-to-video) */
  DIT_CONDITION_TOKEN_IMAGE = 3, /* the first latent frame held to the image latents, its tokens
                                    at timestep 0 (Wan2.2-TI2V image-to-video) */
} dit_condition_kind_t;

/* The conditioning inputs of a generate. A tensor whose data is NULL is absent; `*_what` names
 * its source in messages (e.g. "--image-latents img.safetensors"). The tensors are copied. */
typedef struct dit_condition_inputs {
  dit_tensor_t image_latents; /* [B or 1, C, F, h, w] (concat) or [B or 1, C, 1, h, w] (per token) */
  const char *image_latents_what;
  dit_tensor_t image_embeds;  /* [B or 1, n_img, image_dim]: encoder_hidden_states_image */
  const char *image_embeds_what;
} dit_condition_inputs_t;

/* The shape of the latents the sampler steps for this bundle: its hidden_states with the
 * channels of its sample output. Refuses a bundle whose inputs or output generate cannot feed. */
dit_status_t dit_condition_latents_shape(const dit_manifest_t *m, int *out_rank, int64_t out_dims[DIT_MAX_RANK]);

/* Checks the inputs against what the bundle needs (the message names the input's source, the
 * field, the expected and the found values) and prepares the constant parts of each step's
 * inputs. Caller owns *out (dit_condition_destroy). */
dit_status_t dit_condition_create(const dit_manifest_t *m, const dit_condition_inputs_t *in, dit_condition_t **out);
void dit_condition_destroy(dit_condition_t *c);

dit_condition_kind_t dit_condition_kind(const dit_condition_t *c);

/* The step's transformer inputs for fp32 latents (the latents shape) at timestep t: views of
 * the condition's own buffers, valid until the next call or destroy. *out_image is zeroed
 * (data NULL) when the bundle takes no image embeddings. */
dit_status_t dit_condition_step(dit_condition_t *c, const float *latents, double t, dit_tensor_t *out_hidden,
                                dit_tensor_t *out_timestep, dit_tensor_t *out_image);

/* After the last step: the per-token image-to-video loop returns its latents with the first
 * frame held to the image latents, as the pipeline does before decoding; others unchanged. */
void dit_condition_finish(const dit_condition_t *c, float *latents);

/* The pipeline's 4-channel-style first-frame mask for one item (WanImageToVideoPipeline's
 * mask_lat_size with no last image): the first of (frames - 1) * temporal + 1 video frames is
 * kept, repeated `temporal` times, and the sequence viewed as [frames, temporal] and transposed:
 * out [temporal, frames, h, w]. */
void dit_condition_first_frame_mask(int64_t temporal, int64_t frames, int64_t h, int64_t w, float *out);

/* (1 - mask) * condition + mask * latents for one item with the per-token pipeline's mask
 * (0 on frame 0, 1 elsewhere): latents [C, F, hw], condition [C, 1, hw]. */
void dit_condition_blend_first_frame(int64_t channels, int64_t frames, int64_t hw, const float *condition,
                                     const float *latents, float *out);

#endif
