/* The libsentencepiece shim (spm.cc): the C side sees an opaque model. */
#ifndef DIT_TEXT_SPM_H
#define DIT_TEXT_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dit_spm dit_spm_t;

dit_status_t dit_spm_open(const char *path, dit_spm_t **out);
void dit_spm_free(dit_spm_t *m);
/* The id of a piece, or -1 when the model does not have it. */
int32_t dit_spm_piece_id(const dit_spm_t *m, const char *piece);
int32_t dit_spm_unk_id(const dit_spm_t *m);
int dit_spm_is_byte(const dit_spm_t *m, int32_t id);
/* The ids of the text into ids[cap]; *n_out the full count (may exceed cap). */
dit_status_t dit_spm_encode(const dit_spm_t *m, const char *text, size_t len, int32_t *ids, size_t cap,
                            size_t *n_out);

#ifdef __cplusplus
}
#endif
#endif
