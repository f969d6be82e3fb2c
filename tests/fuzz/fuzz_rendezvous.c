/* libFuzzer target for everything a peer can send the rendezvous and the TCP mesh: the input
 * is a byte stream of frames as one connection would carry it (a hello with its MAC, proofs,
 * challenges, the welcome with its payload, error and failure notices, byes, address tables,
 * and whatever else). Each frame is parsed; an accepted one must lie inside the input, its
 * text must be printable and terminated, its address entries must decode and encode back to
 * the same bytes, and a hello goes through the acceptor's check against a fixed challenge.
 * The first frame is also judged as the acceptor judges a connection's first bytes, and
 * every prefix of it must be "incomplete", never accepted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/launch/rdzv_wire.h"

static const unsigned char kSecret[] = "fuzz secret of thirty-two bytes!";
static const unsigned char kNonce[DIT_RDZV_NONCE_BYTES] = "0123456789abcdef0123456789abcde";

static void check_msg(const dit_rdzv_msg_t *m, const uint8_t *data, size_t size, size_t used) {
  if (used < DIT_RDZV_HDR_BYTES || used > size || used != DIT_RDZV_HDR_BYTES + (size_t)m->h.len) abort();
  if (m->body != data + DIT_RDZV_HDR_BYTES || m->body_len != m->h.len) abort();
  if (m->h.magic != DIT_RDZV_MAGIC || m->h.version != DIT_RDZV_VERSION) abort();
  size_t t = strlen(m->text);
  if (t > DIT_RDZV_MAX_TEXT) abort();
  for (size_t i = 0; i < t; i++)
    if (m->text[i] < 0x20 || m->text[i] > 0x7e) abort();
  char b[32];
  if (!dit_rdzv_type_name(m->h.type, b, sizeof b)[0]) abort();
  switch (m->h.type) {
    case DIT_RDZV_HELLO: {
      if (m->h.len != DIT_RDZV_HELLO_BODY) abort();
      dit_rdzv_msg_t v;
      for (int ch = DIT_RDZV_CHANNEL_RENDEZVOUS; ch <= DIT_RDZV_CHANNEL_MESH; ch++) {
        dit_status_t s = dit_rdzv_hello_verify(kSecret, sizeof kSecret - 1, ch, kNonce, data, used, &v);
        /* A MAC the fuzzer found is as good as a real one: it must say what the frame says. */
        if (!s && (v.h.a != m->h.a || v.h.b != m->h.b || v.extra != m->extra)) abort();
        dit_status_free(s);
      }
      break;
    }
    case DIT_RDZV_CHALLENGE:
      if (m->h.len != DIT_RDZV_NONCE_BYTES || memcmp(m->nonce, m->body, DIT_RDZV_NONCE_BYTES)) abort();
      break;
    case DIT_RDZV_PROOF:
      if (m->h.len != DIT_RDZV_MAC_BYTES || memcmp(m->mac, m->body, DIT_RDZV_MAC_BYTES)) abort();
      break;
    case DIT_RDZV_TABLE:
      if (m->h.a < 1 || m->h.a > DIT_RDZV_MAX_TABLE || m->body_len != (size_t)m->h.a * DIT_RDZV_ADDR_BYTES) abort();
      for (int i = 0; i < m->h.a; i++) {
        struct sockaddr_storage a;
        socklen_t al = 0;
        unsigned char back[DIT_RDZV_ADDR_BYTES];
        const unsigned char *entry = m->body + (size_t)i * DIT_RDZV_ADDR_BYTES;
        dit_status_t s = dit_rdzv_addr_decode(entry, &a, &al);
        if (!s) {
          if (al == 0 || al > sizeof a || dit_rdzv_addr_encode((struct sockaddr *)&a, back) ||
              memcmp(back, entry, DIT_RDZV_ADDR_BYTES))
            abort();
        }
        dit_status_free(s);
      }
      break;
    case DIT_RDZV_WELCOME:
      if (m->body_len > DIT_RDZV_MAX_BODY) abort();
      break;
    case DIT_RDZV_BYE:
      if (m->body_len) abort();
      break;
    default:
      if (m->body_len > DIT_RDZV_MAX_TEXT || t != m->body_len) abort();
      break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A connection's first bytes, as the acceptor sees them. */
  dit_rdzv_msg_t *m = malloc(sizeof *m);
  if (!m) return 0;
  dit_status_t s = dit_rdzv_hello_verify(kSecret, sizeof kSecret - 1, DIT_RDZV_CHANNEL_RENDEZVOUS, kNonce, data, size, m);
  dit_status_free(s);
  size_t used = 0;
  s = dit_rdzv_msg_parse(data, size, m, &used);
  if (!s)
    for (size_t cut = 0; cut < used; cut += 1 + cut / 4) {
      size_t u2;
      dit_status_t p = dit_rdzv_msg_parse(data, cut, m, &u2);
      if (!p || dit_status_code(p) != DIT_CODE_OUT_OF_RANGE) abort();
      dit_status_free(p);
    }
  dit_status_free(s);
  /* Then the stream, frame after frame, as the watcher and the ranks read it. */
  size_t off = 0;
  while (off < size) {
    s = dit_rdzv_msg_parse(data + off, size - off, m, &used);
    if (s) {
      if (!dit_status_message(s)[0]) abort();
      dit_status_free(s);
      break;
    }
    check_msg(m, data + off, size - off, used);
    off += used;
  }
  free(m);
  return 0;
}
