/* The bytes the ranks exchange while they meet and afterwards, apart from the sockets that
 * carry them: frame headers, each frame type's body, the mesh's address entries, and the
 * MACs of the handshake that proves the job secret. Everything here parses untrusted bytes
 * (anything can connect to a listening port), so every length is checked before use; the
 * fuzz target tests/fuzz/fuzz_rendezvous.c drives it. */
#ifndef DIT_RUNTIME_LAUNCH_RDZV_WIRE_H
#define DIT_RUNTIME_LAUNCH_RDZV_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DIT_RDZV_MAGIC 0x44495452u /* "DITR" */
/* 2: connections prove the job secret before anything else is said. */
#define DIT_RDZV_VERSION 2
#define DIT_RDZV_HDR_BYTES 20
#define DIT_RDZV_NONCE_BYTES 32
#define DIT_RDZV_MAC_BYTES 32
#define DIT_RDZV_MAX_TEXT 1024
#define DIT_RDZV_MAX_BODY 4096 /* DIT_RDZV_MAX_PAYLOAD, the largest body of any type */
#define DIT_RDZV_ADDR_BYTES 20
#define DIT_RDZV_MAX_TABLE 64 /* entries of a mesh address table */
#define DIT_RDZV_HELLO_BODY (4 + DIT_RDZV_NONCE_BYTES + DIT_RDZV_MAC_BYTES)

/* Frame types, with what the header's a and b carry and the body. Values only grow. */
typedef enum dit_rdzv_type {
  DIT_RDZV_HELLO = 1,     /* connecting rank: a rank, b world; body extra (u32), its nonce, its MAC */
  DIT_RDZV_WELCOME = 2,   /* rank 0: b world; body rank 0's payload */
  DIT_RDZV_ERROR = 3,     /* a dit_code_t; body the reason (text) */
  DIT_RDZV_FAIL = 4,      /* a the rank that failed; body why (text) */
  DIT_RDZV_BYE = 5,       /* a the rank closing cleanly; no body */
  DIT_RDZV_CHALLENGE = 6, /* accepting side, first thing on a connection: a channel; body its nonce */
  DIT_RDZV_PROOF = 7,     /* accepting side: a its rank; body its MAC */
  DIT_RDZV_TABLE = 8,     /* rank 0 of the mesh: a entries; body a x DIT_RDZV_ADDR_BYTES */
} dit_rdzv_type_t;

/* Which listener a handshake is for: a proof for one never opens the other. */
typedef enum dit_rdzv_channel {
  DIT_RDZV_CHANNEL_RENDEZVOUS = 1,
  DIT_RDZV_CHANNEL_MESH = 2,
} dit_rdzv_channel_t;

typedef struct dit_rdzv_frame {
  uint32_t magic;
  uint16_t version, type;
  int32_t a, b;
  uint32_t len; /* body bytes */
} dit_rdzv_frame_t;

/* One parsed frame. body points into the parsed bytes (WELCOME's payload, TABLE's entries);
 * text is ERROR's or FAIL's body with anything but printable ASCII replaced by '?', so a
 * peer's words cannot forge lines in our logs. */
typedef struct dit_rdzv_msg {
  dit_rdzv_frame_t h;
  uint32_t extra;                            /* HELLO */
  unsigned char nonce[DIT_RDZV_NONCE_BYTES]; /* HELLO, CHALLENGE */
  unsigned char mac[DIT_RDZV_MAC_BYTES];     /* HELLO, PROOF */
  const unsigned char *body;
  size_t body_len;
  char text[DIT_RDZV_MAX_TEXT + 1];
} dit_rdzv_msg_t;

void dit_rdzv_header_encode(const dit_rdzv_frame_t *f, unsigned char out[DIT_RDZV_HDR_BYTES]);

/* Checks the header at the start of h (n >= DIT_RDZV_HDR_BYTES): our magic (else
 * INVALID_ARGUMENT "not a ditrun rendezvous frame"), our version (FAILED_PRECONDITION naming
 * both) and a body length its type allows (INVALID_ARGUMENT naming both); OUT_OF_RANGE only
 * for fewer than DIT_RDZV_HDR_BYTES bytes. An unknown type is
 * accepted with a body of at most DIT_RDZV_MAX_TEXT bytes: a newer peer's notice. */
dit_status_t dit_rdzv_header_parse(const unsigned char *h, size_t n, dit_rdzv_frame_t *out);

/* Parses the frame at the start of bytes: OK with *consumed (header + body) when it is whole
 * and well formed; OUT_OF_RANGE "incomplete" when the bytes end inside it; otherwise the
 * header's errors, or INVALID_ARGUMENT naming the type and what is wrong with its body (a
 * HELLO or CHALLENGE or PROOF of the wrong size, a TABLE whose count and length disagree). */
dit_status_t dit_rdzv_msg_parse(const void *bytes, size_t n, dit_rdzv_msg_t *out, size_t *consumed);

/* "hello", "welcome", ... ; "frame type N" (in buf) for a type we do not know. */
const char *dit_rdzv_type_name(int type, char *buf, size_t cap);

/* A mesh address entry: family (4 or 6), port, 16 address bytes (IPv4 in the first 4). */
dit_status_t dit_rdzv_addr_encode(const struct sockaddr *sa, unsigned char out[DIT_RDZV_ADDR_BYTES]);
/* INVALID_ARGUMENT for another family, a zero port or non-zero padding. */
dit_status_t dit_rdzv_addr_decode(const unsigned char in[DIT_RDZV_ADDR_BYTES], struct sockaddr_storage *out,
                                  socklen_t *out_len);

/* What a connecting rank answers a challenge with: HMAC-SHA256(secret, context || channel ||
 * the acceptor's nonce || its own nonce || rank || world || extra). */
void dit_rdzv_hello_mac(const unsigned char *secret, size_t secret_len, int channel,
                        const unsigned char server_nonce[DIT_RDZV_NONCE_BYTES],
                        const unsigned char client_nonce[DIT_RDZV_NONCE_BYTES], int32_t rank, int32_t world,
                        uint32_t extra, unsigned char out[DIT_RDZV_MAC_BYTES]);
/* The accepting side's proof, over the connecting rank's nonce first (another context, so a
 * hello's MAC can never serve as a proof). */
void dit_rdzv_proof_mac(const unsigned char *secret, size_t secret_len, int channel,
                        const unsigned char server_nonce[DIT_RDZV_NONCE_BYTES],
                        const unsigned char client_nonce[DIT_RDZV_NONCE_BYTES], int32_t acceptor_rank,
                        int32_t client_rank, int32_t world, unsigned char out[DIT_RDZV_MAC_BYTES]);

/* What the accepting side does with the bytes a connection sent after its challenge: parses
 * them as one whole HELLO frame (nothing after it) and checks its MAC against server_nonce in
 * constant time. OK with the hello in *out; the parser's errors, INVALID_ARGUMENT for another
 * frame type or trailing bytes, DATA_LOSS "does not prove the job secret" for a wrong MAC. */
dit_status_t dit_rdzv_hello_verify(const unsigned char *secret, size_t secret_len, int channel,
                                   const unsigned char server_nonce[DIT_RDZV_NONCE_BYTES], const void *bytes, size_t n,
                                   dit_rdzv_msg_t *out);

#ifdef __cplusplus
}
#endif
#endif
