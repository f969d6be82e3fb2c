// The one C++ file: libsentencepiece's processor behind the C calls of spm.h.
#include "text/spm.h"

#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

struct dit_spm {
  sentencepiece::SentencePieceProcessor sp;
};

dit_status_t dit_spm_open(const char *path, dit_spm_t **out) {
  *out = nullptr;
  dit_spm_t *m = new (std::nothrow) dit_spm_t;
  if (!m) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path);
  const auto st = m->sp.Load(path);
  if (!st.ok()) {
    dit_status_t s = DIT_ERR(DATA_LOSS, "%s: not a SentencePiece model: %s", path, st.ToString().c_str());
    delete m;
    return s;
  }
  *out = m;
  return DIT_OK;
}

void dit_spm_free(dit_spm_t *m) { delete m; }

int32_t dit_spm_piece_id(const dit_spm_t *m, const char *piece) {
  // PieceToId answers unk for a piece it lacks: only the unk piece itself may map there.
  const int id = m->sp.PieceToId(piece);
  return id == m->sp.unk_id() && m->sp.IdToPiece(id) != piece ? -1 : id;
}

int32_t dit_spm_unk_id(const dit_spm_t *m) { return m->sp.unk_id(); }

int dit_spm_is_byte(const dit_spm_t *m, int32_t id) { return m->sp.IsByte(id); }

dit_status_t dit_spm_encode(const dit_spm_t *m, const char *text, size_t len, int32_t *ids, size_t cap,
                            size_t *n_out) {
  std::vector<int> v;
  const auto st = m->sp.Encode(absl::string_view(text, len), &v);
  if (!st.ok()) return DIT_ERR(INVALID_ARGUMENT, "SentencePiece refused the text: %s", st.ToString().c_str());
  for (size_t i = 0; i < v.size() && i < cap; i++) ids[i] = v[i];
  *n_out = v.size();
  return DIT_OK;
}
