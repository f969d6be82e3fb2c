/* The HTTP remote (layout in remote.h) over libcurl: one connection reused for every request,
 * transient failures (connection errors, stalls, 5xx, 429, damaged bodies) retried with
 * exponential backoff, blobs zstd-compressed on the fly in both directions and verified
 * before they enter the local store. */
#include "store/remote.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <zstd.h>

#include "artifacts/identity.h"
#include "base/clock.h"
#include "base/fileio.h"
#include "store/remote_response.h"
#include "store/sign.h"

#define MANIFEST_MAX ((size_t)64 << 20)
#define SIG_MAX ((size_t)64 << 10)
#define ZSTD_LEVEL 3
#define BACKOFF_BASE_MS 250
#define BACKOFF_MAX_MS 8000

struct dit_remote {
  char *url; /* without a trailing slash */
  struct curl_slist *headers;
  CURL *curl;
  int timeout_s, retries, verbose;
  int loopback; /* the host is loopback: never through a proxy */
  dit_store_limits_t limits;
};

static int g_curl_users = 0;

int dit_remote_is_url(const char *s) { return s && (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8)); }

static int host_is_loopback(const char *host) {
  if (!strcasecmp(host, "localhost") || !strcasecmp(host, "localhost.")) return 1;
  struct in_addr a4;
  if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  char v6[INET6_ADDRSTRLEN + 2];
  size_t n = strlen(host);
  if (n < 2 || n - 2 >= sizeof v6 || host[0] != '[' || host[n - 1] != ']') return 0;
  memcpy(v6, host + 1, n - 2);
  v6[n - 2] = 0;
  struct in6_addr a6;
  if (inet_pton(AF_INET6, v6, &a6) != 1) return 0;
  if (IN6_IS_ADDR_LOOPBACK(&a6)) return 1;
  return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

int dit_remote_url_is_loopback(const char *url) {
  CURLU *u = curl_url();
  char *host = NULL;
  int ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK && curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
           host && host_is_loopback(host);
  curl_free(host);
  curl_url_cleanup(u);
  return ok;
}

dit_status_t dit_remote_create(const dit_remote_options_t *o, dit_remote_t **out) {
  *out = NULL;
  if (!o || !dit_remote_is_url(o->url))
    return DIT_ERR(INVALID_ARGUMENT, "remote: '%s' is not an http:// or https:// URL", o && o->url ? o->url : "(none)");
  if (o->token && (strchr(o->token, '\n') || strchr(o->token, '\r')))
    return DIT_ERR(INVALID_ARGUMENT, "remote %s: the bearer token holds a line break", o->url);
  int loopback = dit_remote_url_is_loopback(o->url);
  /* Refused before any connection: on plain http anyone on the path reads the token. */
  if (o->token && !strncmp(o->url, "http://", 7) && !loopback && !o->insecure_token)
    return DIT_ERR(FAILED_PRECONDITION,
                   "remote %s: refusing to send the bearer token over plain http:// to a host that is not loopback "
                   "(127.0.0.0/8, ::1, localhost): use https://, or pass --insecure-token to send it anyway",
                   o->url);
  if (g_curl_users++ == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    g_curl_users--;
    return DIT_ERR(UNAVAILABLE, "remote %s: curl_global_init failed", o->url);
  }
  dit_remote_t *r = calloc(1, sizeof *r);
  if (!r) {
    if (--g_curl_users == 0) curl_global_cleanup();
    return DIT_ERR(RESOURCE_EXHAUSTED, "remote %s: out of memory", o->url);
  }
  r->url = strdup(o->url);
  r->curl = curl_easy_init();
  r->timeout_s = o->timeout_s > 0 ? o->timeout_s : 30;
  r->retries = o->retries >= 0 ? o->retries : 3;
  r->verbose = o->verbose;
  r->loopback = loopback;
  r->limits = o->limits;
  dit_status_t s = r->url && r->curl ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "remote %s: curl_easy_init failed", o->url);
  if (!s) {
    size_t n = strlen(r->url);
    while (n > 0 && r->url[n - 1] == '/') r->url[--n] = 0;
    /* Without this curl sends "Expect: 100-continue" and waits for an answer some servers
     * never give. */
    r->headers = curl_slist_append(r->headers, "Expect:");
    if (o->token) {
      size_t tn = strlen(o->token) + 32;
      char *h = malloc(tn);
      if (h) {
        snprintf(h, tn, "Authorization: Bearer %s", o->token);
        r->headers = curl_slist_append(r->headers, h);
        /* The token must not linger in freed memory longer than needed. */
        memset(h, 0, tn);
        free(h);
      }
    }
  }
  if (s) {
    dit_remote_destroy(r);
    return s;
  }
  *out = r;
  return DIT_OK;
}

void dit_remote_destroy(dit_remote_t *r) {
  if (!r) return;
  if (r->curl) curl_easy_cleanup(r->curl);
  curl_slist_free_all(r->headers);
  free(r->url);
  free(r);
  if (--g_curl_users == 0) curl_global_cleanup();
}

/* ---------------------------------------------------------------------------------- */
/* Requests */

/* Where a response body goes. reset runs before every attempt; write returns a status to
 * abort the transfer (kept in err). */
typedef struct sink {
  dit_status_t (*reset)(struct sink *k);
  dit_status_t (*write)(struct sink *k, const void *p, size_t n);
  dit_status_t err;
  uint64_t wire;
} sink_t;

/* What a request body comes from; reset rewinds it for a retry. read returns bytes
 * written, or sets err and returns CURL_READFUNC_ABORT. */
typedef struct source {
  dit_status_t (*reset)(struct source *s);
  size_t (*read)(struct source *s, char *buf, size_t cap);
  dit_status_t err;
  int64_t size; /* -1: unknown (chunked) */
  uint64_t wire;
} source_t;

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud) {
  sink_t *k = ud;
  size_t n = size * nmemb;
  k->wire += n;
  if (k->err) return 0;
  k->err = k->write(k, p, n);
  return k->err ? 0 : n; /* a short count makes curl abort with CURLE_WRITE_ERROR */
}

static size_t on_read(char *buf, size_t size, size_t nitems, void *ud) {
  source_t *src = ud;
  size_t n = src->read(src, buf, size * nitems);
  if (n != CURL_READFUNC_ABORT) src->wire += n;
  return n;
}

typedef enum { M_GET, M_HEAD, M_PUT } method_t;

static const char *method_name(method_t m) { return m == M_GET ? "GET" : m == M_HEAD ? "HEAD" : "PUT"; }

static void backoff(int attempt) {
  long ms = BACKOFF_BASE_MS << (attempt < 5 ? attempt : 5);
  if (ms > BACKOFF_MAX_MS) ms = BACKOFF_MAX_MS;
  /* Jitter spreads out many clients retrying against one server. */
  ms += (long)(rand() % (int)(ms / 4 + 1));
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* One request with retries. *out_code is the final HTTP status (0 if none). A 404 is
 * returned as OK with *out_code 404 so callers can tell absence from failure. `small`
 * requests also get an overall time limit. */
static dit_status_t request(dit_remote_t *r, method_t m, const char *path, sink_t *sink, source_t *src, int small,
                            long *out_code) {
  *out_code = 0;
  char url[4096];
  snprintf(url, sizeof url, "%s/%s", r->url, path);
  dit_status_t last = DIT_OK;
  for (int attempt = 0; attempt <= r->retries; attempt++) {
    if (attempt) backoff(attempt - 1);
    dit_status_free(last);
    last = DIT_OK;
    if (sink) {
      dit_status_free(sink->err);
      sink->err = DIT_OK;
      sink->wire = 0;
      if (sink->reset && (last = sink->reset(sink))) return last;
    }
    if (src) {
      dit_status_free(src->err);
      src->err = DIT_OK;
      src->wire = 0;
      if (src->reset && (last = src->reset(src))) return last;
    }
    CURL *c = r->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    /* A redirect is answered as an error, never followed: the token stays with this host. */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 0L);
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
    /* Loopback is this host: a proxy from the environment would carry the token away. */
    if (r->loopback) curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)r->timeout_s * 1000);
    /* A stall (under 1 byte/s for timeout_s, including the wait for the first byte) fails
     * the attempt; a large transfer that keeps moving is never cut. */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)r->timeout_s);
    if (small) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)r->timeout_s * 2000);
    if (m == M_HEAD) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (m == M_PUT) {
      curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(c, CURLOPT_READDATA, src);
      if (src->size >= 0) curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)src->size);
    }
    if (sink) {
      /* Fewer, larger callbacks: each one runs the decompressor and both hashes. */
      curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L << 10);
      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
      curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    /* Error bodies of non-2xx answers are not ours to verify: discard them. */
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 0L);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    *out_code = code;
    int transient = 0;
    if (rc == CURLE_WRITE_ERROR && sink && sink->err) {
      /* Our own check refused the body: a damaged download may come right next time. */
      last = sink->err;
      sink->err = DIT_OK;
      if (code >= 400) {
        /* The sink refused an error page: report the status instead. */
        dit_status_free(last);
        last = DIT_OK;
      } else {
        transient = 1;
      }
    } else if (rc == CURLE_ABORTED_BY_CALLBACK || (rc == CURLE_READ_ERROR && src && src->err)) {
      last = src && src->err ? src->err : DIT_ERR(ABORTED, "%s %s: aborted", method_name(m), url);
      if (src) src->err = DIT_OK;
      return last; /* a local problem: retrying does not help */
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
      last = DIT_ERR(DEADLINE_EXCEEDED, "%s %s: timed out (no progress for %d s): %s", method_name(m), url, r->timeout_s,
                     errbuf[0] ? errbuf : curl_easy_strerror(rc));
      transient = 1;
    } else if (rc == CURLE_PARTIAL_FILE) {
      last = DIT_ERR(DATA_LOSS, "%s %s: truncated body: the connection closed before the announced length: %s", method_name(m),
                     url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
      transient = 1;
    } else if (rc != CURLE_OK) {
      last = DIT_ERR(UNAVAILABLE, "%s %s: %s (curl error %d)", method_name(m), url, errbuf[0] ? errbuf : curl_easy_strerror(rc),
                     (int)rc);
      transient = rc != CURLE_UNSUPPORTED_PROTOCOL && rc != CURLE_URL_MALFORMAT && rc != CURLE_OUT_OF_MEMORY;
    }
    if (!last && code) {
      if (code == 404 || (code >= 200 && code < 300)) return DIT_OK;
      if (code == 401 || code == 403)
        return DIT_ERR(FAILED_PRECONDITION, "%s %s: HTTP %ld: access refused; check the bearer token (--token-file or DITC_REMOTE_TOKEN)",
                       method_name(m), url, code);
      last = DIT_ERR(UNAVAILABLE, "%s %s: HTTP %ld from the server", method_name(m), url, code);
      transient = code >= 500 || code == 408 || code == 429;
    } else if (!last) {
      last = DIT_ERR(UNAVAILABLE, "%s %s: no HTTP status received", method_name(m), url);
      transient = 1;
    }
    if (!transient) return last;
    if (r->verbose && attempt < r->retries)
      fprintf(stderr, "remote: attempt %d of %d failed, retrying: %s\n", attempt + 1, r->retries + 1, dit_status_message(last));
  }
  return dit_status_annotate(last, "after %d attempt%s", r->retries + 1, r->retries ? "s" : "");
}

/* ---------------------------------------------------------------------------------- */
/* Sinks and sources */

typedef struct {
  sink_t k;
  char *p;
  size_t n, cap;
  const char *what;
} mem_sink_t;

static dit_status_t mem_reset(sink_t *k) {
  ((mem_sink_t *)k)->n = 0;
  return DIT_OK;
}

static dit_status_t mem_write(sink_t *k, const void *p, size_t n) {
  mem_sink_t *s = (mem_sink_t *)k;
  if (n > s->cap - s->n) return DIT_ERR(OUT_OF_RANGE, "%s: body larger than the %zu bytes allowed", s->what, s->cap);
  if (!s->p) {
    /* Grown in steps up to the cap; most bodies (manifests) are small. */
    s->p = malloc(s->cap + 1);
    if (!s->p) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", s->what);
  }
  memcpy(s->p + s->n, p, n);
  s->n += n;
  s->p[s->n] = 0;
  return DIT_OK;
}

/* A blob body goes through remote_response.h's checks as it arrives. */
typedef struct {
  sink_t k;
  dit_remote_blob_body_t *body;
} blob_sink_t;

static dit_status_t blob_reset(sink_t *k) { return dit_remote_blob_body_reset(((blob_sink_t *)k)->body); }

static dit_status_t blob_write(sink_t *k, const void *p, size_t n) { return dit_remote_blob_body_feed(((blob_sink_t *)k)->body, p, n); }

typedef struct {
  source_t s;
  const char *p;
  size_t n, off;
} mem_source_t;

static dit_status_t memsrc_reset(source_t *s) {
  ((mem_source_t *)s)->off = 0;
  return DIT_OK;
}

static size_t memsrc_read(source_t *s, char *buf, size_t cap) {
  mem_source_t *m = (mem_source_t *)s;
  size_t k = m->n - m->off < cap ? m->n - m->off : cap;
  memcpy(buf, m->p + m->off, k);
  m->off += k;
  return k;
}

/* A local blob compressed while it is sent, and hashed as it is read: a blob damaged in the
 * local store aborts its upload instead of poisoning the remote. */
typedef struct {
  source_t s;
  dit_mapping_t map;
  ZSTD_CCtx *z;
  size_t in_pos;
  char *out;
  size_t out_cap, out_len, out_off;
  int ended;
  dit_hasher_t *h;
  const char *hash, *what;
} blob_source_t;

static dit_status_t blobsrc_reset(source_t *s) {
  blob_source_t *b = (blob_source_t *)s;
  b->in_pos = b->out_len = b->out_off = 0;
  b->ended = 0;
  ZSTD_CCtx_reset(b->z, ZSTD_reset_session_only);
  dit_hasher_destroy(b->h);
  b->h = NULL;
  return dit_hasher_create(&b->h);
}

static size_t blobsrc_read(source_t *s, char *buf, size_t cap) {
  blob_source_t *b = (blob_source_t *)s;
  size_t done = 0;
  while (done < cap) {
    if (b->out_off < b->out_len) {
      size_t k = b->out_len - b->out_off < cap - done ? b->out_len - b->out_off : cap - done;
      memcpy(buf + done, b->out + b->out_off, k);
      b->out_off += k;
      done += k;
      continue;
    }
    if (b->ended) break;
    size_t chunk = (size_t)1 << 20;
    size_t take = b->map.size - b->in_pos < chunk ? b->map.size - b->in_pos : chunk;
    ZSTD_inBuffer in = {b->map.data ? b->map.data + b->in_pos : (const void *)"", take, 0};
    ZSTD_outBuffer out = {b->out, b->out_cap, 0};
    int last = b->in_pos + take == b->map.size;
    size_t ret = ZSTD_compressStream2(b->z, &out, &in, last ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(ret)) {
      s->err = DIT_ERR(INTERNAL, "%s: ZSTD_compressStream2: %s", b->what, ZSTD_getErrorName(ret));
      return CURL_READFUNC_ABORT;
    }
    if (in.pos) dit_hasher_update(b->h, b->map.data + b->in_pos, in.pos);
    b->in_pos += in.pos;
    b->out_len = out.pos;
    b->out_off = 0;
    if (last && in.pos == take && ret == 0) {
      b->ended = 1;
      char found[DIT_HASH_HEX];
      dit_hasher_hex(b->h, found);
      if (strcmp(found, b->hash)) {
        s->err = DIT_ERR(DATA_LOSS, "%s: content hash mismatch: expected %s, found %s; not uploaded (run ditc cache verify)", b->what,
                         b->hash, found);
        return CURL_READFUNC_ABORT;
      }
    }
  }
  return done;
}

/* ---------------------------------------------------------------------------------- */
/* Push */

static dit_status_t put_memory(dit_remote_t *r, const char *path, const char *text, size_t len) {
  mem_source_t src = {{memsrc_reset, memsrc_read, DIT_OK, (int64_t)len, 0}, text, len, 0};
  long code = 0;
  dit_status_t s = request(r, M_PUT, path, NULL, &src.s, 1, &code);
  if (!s && code == 404) s = DIT_ERR(UNAVAILABLE, "PUT %s/%s: HTTP 404: the server does not accept uploads there", r->url, path);
  dit_status_free(src.s.err);
  return s;
}

static dit_status_t head_exists(dit_remote_t *r, const char *path, int *out) {
  long code = 0;
  DIT_RETURN_IF(request(r, M_HEAD, path, NULL, NULL, 1, &code));
  *out = code >= 200 && code < 300;
  return DIT_OK;
}

static dit_status_t push_blob(dit_remote_t *r, dit_store_t *st, const dit_manifest_blob_t *b, uint64_t *out_wire) {
  char *path = NULL;
  DIT_RETURN_IF(dit_store_blob_path(st, b->hash, &path));
  char what[4200];
  snprintf(what, sizeof what, "%s", path);
  blob_source_t src;
  memset(&src, 0, sizeof src);
  src.s.reset = blobsrc_reset;
  src.s.read = blobsrc_read;
  src.s.size = -1;
  src.hash = b->hash;
  src.what = what;
  dit_status_t s = dit_file_map(path, &src.map);
  free(path);
  if (!s && src.map.size != b->size)
    s = DIT_ERR(DATA_LOSS, "%s: size mismatch: expected %" PRIu64 " bytes, found %zu", what, b->size, src.map.size);
  if (!s) {
    src.z = ZSTD_createCCtx();
    src.out_cap = ZSTD_CStreamOutSize();
    src.out = malloc(src.out_cap);
    if (!src.z || !src.out) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  }
  if (!s) {
    ZSTD_CCtx_setParameter(src.z, ZSTD_c_compressionLevel, ZSTD_LEVEL);
    ZSTD_CCtx_setParameter(src.z, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setPledgedSrcSize(src.z, src.map.size);
    char rel[64];
    snprintf(rel, sizeof rel, "cas/%s", b->hash);
    long code = 0;
    s = request(r, M_PUT, rel, NULL, &src.s, 0, &code);
    if (!s && code == 404) s = DIT_ERR(UNAVAILABLE, "PUT %s/%s: HTTP 404: the server does not accept uploads there", r->url, rel);
    *out_wire = src.s.wire;
  }
  dit_status_free(src.s.err);
  dit_hasher_destroy(src.h);
  ZSTD_freeCCtx(src.z);
  free(src.out);
  dit_file_unmap(&src.map);
  return s;
}

/* One blob moved (push: sent, pull: fetched and verified) since t_start: the counters, and with
 * --verbose a line naming it. */
static void count_blob(const dit_remote_t *r, dit_remote_stats_t *out, const dit_manifest_blob_t *b, uint64_t wire, double t_start,
                       int pull) {
  out->blobs_transferred++;
  out->raw_bytes += b->size;
  out->wire_bytes += wire;
  if (!r->verbose) return;
  char a[32], c[32];
  dit_format_bytes(b->size, a);
  dit_format_bytes(wire, c);
  const double dt = dit_now_s() - t_start;
  fprintf(stderr, "%s: blob %s (%s, %s) %s as %s in %.2fs (%.0f MiB/s)%s\n", pull ? "pull" : "push", b->hash, b->role, a,
          pull ? "fetched" : "sent", c, dt, dt > 0 ? (double)b->size / (1 << 20) / dt : 0.0,
          pull ? ", XXH3-128 and SHA-256 verified" : "");
}

dit_status_t dit_remote_push(dit_remote_t *r, dit_store_t *st, const char *identity, dit_remote_stats_t *out) {
  memset(out, 0, sizeof *out);
  double t0 = dit_now_s();
  dit_manifest_t *m = NULL;
  char *text = NULL, *sig = NULL;
  size_t len = 0;
  dit_status_t s = dit_store_get_manifest(st, identity, &m, &text, &len);
  if (!s) {
    dit_status_t ss = dit_store_get_signature(st, identity, &sig, NULL);
    if (ss && dit_status_code(ss) != DIT_CODE_NOT_FOUND) s = ss;
    else dit_status_free(ss);
  }
  for (size_t i = 0; !s && i < m->n_blobs; i++) {
    const dit_manifest_blob_t *b = &m->blobs[i];
    char rel[64];
    snprintf(rel, sizeof rel, "cas/%s", b->hash);
    int have = 0;
    s = head_exists(r, rel, &have);
    if (s) break;
    if (have) {
      out->blobs_present++;
      continue;
    }
    double tb = dit_now_s();
    uint64_t wire = 0;
    s = push_blob(r, st, b, &wire);
    if (!s) count_blob(r, out, b, wire, tb, 0);
  }
  char rel[64];
  if (!s && sig) {
    snprintf(rel, sizeof rel, "ac/%s.sig", identity);
    s = put_memory(r, rel, sig, strlen(sig));
  }
  if (!s) {
    snprintf(rel, sizeof rel, "ac/%s", identity);
    s = put_memory(r, rel, text, len);
  }
  out->seconds = dit_now_s() - t0;
  free(text);
  free(sig);
  dit_manifest_free(m);
  return s ? dit_status_annotate(s, "push %s to %s", identity, r->url) : DIT_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Pull */

static dit_status_t get_memory(dit_remote_t *r, const char *path, size_t cap, char **out, size_t *out_len, long *out_code) {
  char what[4200];
  snprintf(what, sizeof what, "%s/%s", r->url, path);
  mem_sink_t k = {{mem_reset, mem_write, DIT_OK, 0}, NULL, 0, cap, what};
  dit_status_t s = request(r, M_GET, path, &k.k, NULL, 1, out_code);
  dit_status_free(k.k.err);
  if (s || *out_code != 200) {
    free(k.p);
    *out = NULL;
    *out_len = 0;
    return s;
  }
  if (!k.p) k.p = calloc(1, 1); /* an empty body */
  *out = k.p;
  *out_len = k.n;
  return k.p ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
}

static dit_status_t pull_blob(dit_remote_t *r, dit_store_t *st, const dit_manifest_blob_t *b, dit_store_quota_t *q,
                              uint64_t *out_wire) {
  char rel[64], what[4200];
  snprintf(rel, sizeof rel, "cas/%s", b->hash);
  snprintf(what, sizeof what, "%s/%s", r->url, rel);
  blob_sink_t k;
  memset(&k, 0, sizeof k);
  k.k.reset = blob_reset;
  k.k.write = blob_write;
  dit_status_t s = dit_remote_blob_body_create(st, b, q, what, &k.body);
  /* Each attempt is verified in full; a damaged one is dropped and fetched again. */
  for (int attempt = 0; !s; attempt++) {
    long code = 0;
    /* request() retries transport failures itself; this loop retries a body that arrived
     * whole but failed verification. */
    s = request(r, M_GET, rel, &k.k, NULL, 0, &code);
    if (s) break;
    if (code == 404) s = DIT_ERR(NOT_FOUND, "%s: HTTP 404: the remote lacks blob %s (role %s) its manifest lists", what, b->hash, b->role);
    if (!s) s = dit_remote_blob_body_finish(k.body);
    if (!s || dit_status_code(s) != DIT_CODE_DATA_LOSS || attempt >= r->retries) break;
    if (r->verbose) fprintf(stderr, "remote: attempt %d of %d refused, retrying: %s\n", attempt + 1, r->retries + 1, dit_status_message(s));
    dit_status_free(s);
    s = dit_remote_blob_body_reset(k.body);
    if (!s) backoff(attempt);
  }
  *out_wire = k.k.wire;
  dit_status_free(k.k.err);
  dit_remote_blob_body_destroy(k.body);
  return s;
}

/* The local entry answers when it is complete and, with a trusted key, signed by it. */
static int local_entry_usable(dit_store_t *st, const char *identity, const char *trusted_key) {
  if (!dit_store_has_entry(st, identity)) return 0;
  if (!trusted_key) return 1;
  char *text = NULL, *sig = NULL;
  size_t len = 0, slen = 0;
  dit_status_t s = dit_store_get_manifest(st, identity, NULL, &text, &len);
  if (!s) s = dit_store_get_signature(st, identity, &sig, &slen);
  if (!s) s = dit_sign_verify(trusted_key, text, len, sig, slen, "local entry");
  int ok = !s;
  dit_status_free(s);
  free(text);
  free(sig);
  return ok;
}

dit_status_t dit_remote_pull(dit_remote_t *r, dit_store_t *st, const char *identity, const char *trusted_key,
                             dit_remote_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!dit_is_hash_hex(identity))
    return DIT_ERR(INVALID_ARGUMENT, "pull: '%s' is not an identity (32 lowercase hex digits)", identity);
  double t0 = dit_now_s();
  if (local_entry_usable(st, identity, trusted_key)) {
    dit_manifest_t *m = NULL;
    dit_status_t s = dit_store_get_manifest(st, identity, &m, NULL, NULL);
    if (!s) out->blobs_present = m->n_blobs;
    dit_manifest_free(m);
    out->seconds = dit_now_s() - t0;
    return s;
  }
  char rel[64], what[4200];
  snprintf(rel, sizeof rel, "ac/%s", identity);
  snprintf(what, sizeof what, "%s/%s", r->url, rel);
  char *text = NULL, *sig = NULL;
  size_t len = 0, slen = 0;
  long code = 0;
  dit_manifest_t *m = NULL;
  dit_store_quota_t *q = NULL;
  char qwhat[4200];
  snprintf(qwhat, sizeof qwhat, "pull %s from %s", identity, r->url);
  dit_status_t s = dit_store_quota_create(&r->limits, qwhat, &q);
  if (!s) s = get_memory(r, rel, MANIFEST_MAX, &text, &len, &code);
  if (!s && code == 404) s = DIT_ERR(NOT_FOUND, "%s: HTTP 404: the remote has no entry for identity %s", what, identity);
  if (!s) s = dit_remote_manifest_body_check(text, len, identity, what, &m);
  if (!s) {
    snprintf(rel, sizeof rel, "ac/%s.sig", identity);
    s = get_memory(r, rel, SIG_MAX, &sig, &slen, &code);
    if (!s && code == 404) {
      free(sig);
      sig = NULL;
    }
    if (!s && sig) {
      char swhat[4200];
      snprintf(swhat, sizeof swhat, "%s/%s", r->url, rel);
      s = dit_remote_signature_body_check(sig, slen, swhat);
    }
  }
  /* Trust is settled before a single blob is fetched. */
  if (!s && trusted_key) s = dit_sign_verify(trusted_key, text, len, sig, slen, what);
  if (!s) s = dit_store_lock(st, 0);
  if (!s) {
    /* The manifest's claims are checked first so an honest but too large entry fetches
     * nothing; the writers then count what really arrives. */
    s = dit_store_quota_check_manifest(q, st, m);
    for (size_t i = 0; !s && i < m->n_blobs; i++) {
      const dit_manifest_blob_t *b = &m->blobs[i];
      if (dit_store_has_blob(st, b->hash, b->size)) {
        out->blobs_present++;
        continue;
      }
      double tb = dit_now_s();
      uint64_t wire = 0;
      s = pull_blob(r, st, b, q, &wire);
      if (!s) count_blob(r, out, b, wire, tb, 1);
    }
    /* With a signature that did not verify against a trusted key we never get here; an
     * unverified signature is still kept so a later trusted-key run can check it. */
    if (!s) s = dit_store_put_manifest(st, identity, text, len, sig, NULL);
    dit_store_unlock(st);
  }
  if (s && q && dit_store_quota_exceeded(q)) {
    dit_status_t rs = dit_store_quota_rollback(q, st);
    if (rs) s = dit_status_annotate(s, "removing the blobs it entered failed too (%s)", dit_status_message(rs));
    dit_status_free(rs);
  }
  dit_store_quota_destroy(q);
  out->seconds = dit_now_s() - t0;
  free(text);
  free(sig);
  dit_manifest_free(m);
  return s ? dit_status_annotate(s, "pull %s from %s", identity, r->url) : DIT_OK;
}
