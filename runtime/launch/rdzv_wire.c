/* Rendezvous and mesh frames to and from bytes, and the handshake's MACs. */
#include "runtime/launch/rdzv_wire.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "base/sha256.h"

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void dit_rdzv_header_encode(const dit_rdzv_frame_t *f, unsigned char out[DIT_RDZV_HDR_BYTES]) {
  put32(out, f->magic);
  put32(out + 4, (uint32_t)f->version << 16 | f->type);
  put32(out + 8, (uint32_t)f->a);
  put32(out + 12, (uint32_t)f->b);
  put32(out + 16, f->len);
}

const char *dit_rdzv_type_name(int type, char *buf, size_t cap) {
  static const char *const names[] = {NULL, "hello", "welcome", "error", "failure", "bye", "challenge", "proof", "address table"};
  if (type > 0 && type < (int)(sizeof names / sizeof names[0])) return names[type];
  snprintf(buf, cap, "frame type %d", type);
  return buf;
}

/* The body sizes each type allows: [min, max]. */
static void body_bounds(int type, uint32_t *lo, uint32_t *hi) {
  *lo = 0;
  switch (type) {
    case DIT_RDZV_HELLO: *lo = *hi = DIT_RDZV_HELLO_BODY; break;
    case DIT_RDZV_CHALLENGE: *lo = *hi = DIT_RDZV_NONCE_BYTES; break;
    case DIT_RDZV_PROOF: *lo = *hi = DIT_RDZV_MAC_BYTES; break;
    case DIT_RDZV_WELCOME: *hi = DIT_RDZV_MAX_BODY; break;
    case DIT_RDZV_BYE: *hi = 0; break;
    case DIT_RDZV_TABLE: *lo = DIT_RDZV_ADDR_BYTES, *hi = DIT_RDZV_MAX_TABLE * DIT_RDZV_ADDR_BYTES; break;
    default: *hi = DIT_RDZV_MAX_TEXT; break; /* ERROR, FAIL, and types of newer peers */
  }
}

dit_status_t dit_rdzv_header_parse(const unsigned char *h, size_t n, dit_rdzv_frame_t *out) {
  if (n < DIT_RDZV_HDR_BYTES) return DIT_ERR(OUT_OF_RANGE, "rendezvous frame: incomplete header (%zu of %d bytes)", n, DIT_RDZV_HDR_BYTES);
  dit_rdzv_frame_t f;
  f.magic = get32(h);
  uint32_t vt = get32(h + 4);
  f.version = (uint16_t)(vt >> 16), f.type = (uint16_t)vt;
  f.a = (int32_t)get32(h + 8), f.b = (int32_t)get32(h + 12);
  f.len = get32(h + 16);
  if (f.magic != DIT_RDZV_MAGIC)
    return DIT_ERR(INVALID_ARGUMENT, "not a ditrun rendezvous frame (it starts with 0x%08x, expected 0x%08x \"DITR\")", f.magic, DIT_RDZV_MAGIC);
  if (f.version != DIT_RDZV_VERSION)
    return DIT_ERR(FAILED_PRECONDITION, "rendezvous protocol version %u, this ditrun speaks %d (a different ditrun build?)", f.version,
                   DIT_RDZV_VERSION);
  uint32_t lo, hi;
  body_bounds(f.type, &lo, &hi);
  if (f.len < lo || f.len > hi) {
    char b[32];
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous frame: a %s of %u body bytes, expected %u..%u", dit_rdzv_type_name(f.type, b, sizeof b),
                   f.len, lo, hi);
  }
  *out = f;
  return DIT_OK;
}

static void copy_text(char *dst, const unsigned char *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? (char)src[i] : '?';
  dst[n] = 0;
}

dit_status_t dit_rdzv_msg_parse(const void *bytes, size_t n, dit_rdzv_msg_t *out, size_t *consumed) {
  const unsigned char *p = bytes;
  memset(out, 0, sizeof *out);
  *consumed = 0;
  DIT_RETURN_IF(dit_rdzv_header_parse(p, n, &out->h));
  const dit_rdzv_frame_t *f = &out->h;
  if (n - DIT_RDZV_HDR_BYTES < f->len)
    return DIT_ERR(OUT_OF_RANGE, "rendezvous frame: incomplete body (%zu of %u bytes)", n - DIT_RDZV_HDR_BYTES, f->len);
  const unsigned char *b = p + DIT_RDZV_HDR_BYTES;
  switch (f->type) {
    case DIT_RDZV_HELLO:
      out->extra = get32(b);
      memcpy(out->nonce, b + 4, DIT_RDZV_NONCE_BYTES);
      memcpy(out->mac, b + 4 + DIT_RDZV_NONCE_BYTES, DIT_RDZV_MAC_BYTES);
      break;
    case DIT_RDZV_CHALLENGE: memcpy(out->nonce, b, DIT_RDZV_NONCE_BYTES); break;
    case DIT_RDZV_PROOF: memcpy(out->mac, b, DIT_RDZV_MAC_BYTES); break;
    case DIT_RDZV_TABLE:
      if (f->a < 1 || f->a > DIT_RDZV_MAX_TABLE || f->len != (uint32_t)f->a * DIT_RDZV_ADDR_BYTES)
        return DIT_ERR(INVALID_ARGUMENT, "rendezvous frame: an address table of %d entries in %u bytes (entries of %d bytes, at most %d)",
                       f->a, f->len, DIT_RDZV_ADDR_BYTES, DIT_RDZV_MAX_TABLE);
      break;
    case DIT_RDZV_WELCOME: break;
    default: copy_text(out->text, b, f->len); break;
  }
  out->body = b;
  out->body_len = f->len;
  *consumed = DIT_RDZV_HDR_BYTES + f->len;
  return DIT_OK;
}

dit_status_t dit_rdzv_addr_encode(const struct sockaddr *sa, unsigned char out[DIT_RDZV_ADDR_BYTES]) {
  memset(out, 0, DIT_RDZV_ADDR_BYTES);
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    out[1] = 4;
    memcpy(out + 2, &a->sin_port, 2);
    memcpy(out + 4, &a->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    if (a->sin6_scope_id) return DIT_ERR(UNIMPLEMENTED, "rendezvous: a link-local IPv6 address (scope %u) cannot be shared", a->sin6_scope_id);
    out[1] = 6;
    memcpy(out + 2, &a->sin6_port, 2);
    memcpy(out + 4, &a->sin6_addr, 16);
  } else {
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: address family %d is neither IPv4 nor IPv6", sa->sa_family);
  }
  return DIT_OK;
}

dit_status_t dit_rdzv_addr_decode(const unsigned char in[DIT_RDZV_ADDR_BYTES], struct sockaddr_storage *out, socklen_t *out_len) {
  memset(out, 0, sizeof *out);
  uint16_t port;
  memcpy(&port, in + 2, 2);
  if (in[0] != 0 || (in[1] != 4 && in[1] != 6))
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: address entry of family %u, expected 4 or 6", (unsigned)in[0] << 8 | in[1]);
  if (!port) return DIT_ERR(INVALID_ARGUMENT, "rendezvous: address entry with port 0");
  if (in[1] == 4) {
    for (int i = 8; i < DIT_RDZV_ADDR_BYTES; i++)
      if (in[i]) return DIT_ERR(INVALID_ARGUMENT, "rendezvous: IPv4 address entry with non-zero padding");
    struct sockaddr_in *a = (struct sockaddr_in *)out;
    a->sin_family = AF_INET;
    memcpy(&a->sin_port, &port, 2);
    memcpy(&a->sin_addr, in + 4, 4);
    *out_len = sizeof *a;
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;
    a->sin6_family = AF_INET6;
    memcpy(&a->sin6_port, &port, 2);
    memcpy(&a->sin6_addr, in + 4, 16);
    *out_len = sizeof *a;
  }
  return DIT_OK;
}

static const char *channel_name(int channel) {
  return channel == DIT_RDZV_CHANNEL_RENDEZVOUS ? "rendezvous" : channel == DIT_RDZV_CHANNEL_MESH ? "mesh" : "unknown";
}

/* The context names the protocol, the channel and the message, each NUL-terminated, so no
 * two of them are prefixes of each other. */
static void mac_start(dit_hmac_sha256_t *c, const unsigned char *secret, size_t secret_len, int channel, const char *what) {
  static const char proto[] = "ditrun job secret v2";
  const char *ch = channel_name(channel);
  dit_hmac_sha256_init(c, secret, secret_len);
  dit_hmac_sha256_update(c, proto, sizeof proto);
  dit_hmac_sha256_update(c, ch, strlen(ch) + 1);
  dit_hmac_sha256_update(c, what, strlen(what) + 1);
}

static void mac_u32(dit_hmac_sha256_t *c, uint32_t v) {
  unsigned char b[4];
  put32(b, v);
  dit_hmac_sha256_update(c, b, 4);
}

void dit_rdzv_hello_mac(const unsigned char *secret, size_t secret_len, int channel,
                        const unsigned char server_nonce[DIT_RDZV_NONCE_BYTES],
                        const unsigned char client_nonce[DIT_RDZV_NONCE_BYTES], int32_t rank, int32_t world,
                        uint32_t extra, unsigned char out[DIT_RDZV_MAC_BYTES]) {
  dit_hmac_sha256_t c;
  mac_start(&c, secret, secret_len, channel, "hello");
  dit_hmac_sha256_update(&c, server_nonce, DIT_RDZV_NONCE_BYTES);
  dit_hmac_sha256_update(&c, client_nonce, DIT_RDZV_NONCE_BYTES);
  mac_u32(&c, (uint32_t)rank);
  mac_u32(&c, (uint32_t)world);
  mac_u32(&c, extra);
  dit_hmac_sha256_final(&c, out);
}

void dit_rdzv_proof_mac(const unsigned char *secret, size_t secret_len, int channel,
                        const unsigned char server_nonce[DIT_RDZV_NONCE_BYTES],
                        const unsigned char client_nonce[DIT_RDZV_NONCE_BYTES], int32_t acceptor_rank,
                        int32_t client_rank, int32_t world, unsigned char out[DIT_RDZV_MAC_BYTES]) {
  dit_hmac_sha256_t c;
  mac_start(&c, secret, secret_len, channel, "proof");
  dit_hmac_sha256_update(&c, client_nonce, DIT_RDZV_NONCE_BYTES);
  dit_hmac_sha256_update(&c, server_nonce, DIT_RDZV_NONCE_BYTES);
  mac_u32(&c, (uint32_t)acceptor_rank);
  mac_u32(&c, (uint32_t)client_rank);
  mac_u32(&c, (uint32_t)world);
  dit_hmac_sha256_final(&c, out);
}

dit_status_t dit_rdzv_hello_verify(const unsigned char *secret, size_t secret_len, int channel,
                                   const unsigned char server_nonce[DIT_RDZV_NONCE_BYTES], const void *bytes, size_t n,
                                   dit_rdzv_msg_t *out) {
  size_t used = 0;
  DIT_RETURN_IF(dit_rdzv_msg_parse(bytes, n, out, &used));
  char b[32];
  if (out->h.type != DIT_RDZV_HELLO)
    return DIT_ERR(INVALID_ARGUMENT, "it sent a %s frame where a hello belongs", dit_rdzv_type_name(out->h.type, b, sizeof b));
  if (used != n) return DIT_ERR(INVALID_ARGUMENT, "it sent %zu bytes after its hello, before hearing back", n - used);
  unsigned char want[DIT_RDZV_MAC_BYTES];
  dit_rdzv_hello_mac(secret, secret_len, channel, server_nonce, out->nonce, out->h.a, out->h.b, out->extra, want);
  const int ok = dit_crypto_equal(want, out->mac, sizeof want);
  dit_crypto_wipe(want, sizeof want);
  if (!ok)
    return DIT_ERR(DATA_LOSS, "it claims rank %d of %d but its answer to this connection's challenge does not prove the job secret "
                   "(a process with another secret, or a replayed answer)", out->h.a, out->h.b);
  return DIT_OK;
}
