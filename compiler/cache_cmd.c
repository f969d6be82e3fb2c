/* ditc's store commands (cache ls/verify/rm/gc/why/add/push/pull, keygen, pack): argument
 * parsing and reports around store/store.h, remote.h, sign.h and archive.h. */
#include "compiler/cache_cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "artifacts/identity.h"
#include "base/fileio.h"
#include "compiler/compile_store.h"
#include "store/archive.h"
#include "store/remote.h"
#include "store/sign.h"
#include "store/size_arg.h"
#include "store/store.h"

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "ditc: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see ditc --help)\n");
  return 2;
}

typedef struct {
  const char *store, *remote, *token_file, *sign_key, *trusted_key, *out, *max_size, *max_age;
  int timeout_s, retries, quiet, insecure_token;
  dit_store_limits_t limits;
  const char *pos[2];
  int n_pos;
} args_t;

static int parse_args(int argc, char **argv, args_t *a) {
  memset(a, 0, sizeof *a);
  const char *env = getenv("DITC_STORE");
  a->store = env && env[0] ? env : NULL;
  env = getenv("DITC_REMOTE");
  a->remote = env && env[0] ? env : NULL;
  a->timeout_s = 30;
  a->retries = 3;
  for (int i = 0; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    const char **dst = NULL;
    int *num = NULL;
    if (!strcmp(f, "--store")) dst = &a->store;
    else if (!strcmp(f, "--remote")) dst = &a->remote;
    else if (!strcmp(f, "--token-file")) dst = &a->token_file;
    else if (!strcmp(f, "--sign-key")) dst = &a->sign_key;
    else if (!strcmp(f, "--trusted-key")) dst = &a->trusted_key;
    else if (!strcmp(f, "-o") || !strcmp(f, "--output")) dst = &a->out;
    else if (!strcmp(f, "--max-size")) dst = &a->max_size;
    else if (!strcmp(f, "--max-age")) dst = &a->max_age;
    else if (!strcmp(f, "--timeout")) num = &a->timeout_s;
    else if (!strcmp(f, "--retries")) num = &a->retries;
    else if (!strcmp(f, "-q") || !strcmp(f, "--quiet")) {
      a->quiet = 1;
      continue;
    } else if (!strcmp(f, "--insecure-token")) {
      a->insecure_token = 1;
      continue;
    } else if (!strcmp(f, "--max-bytes") || !strcmp(f, "--max-blobs")) {
      if (!v) return usage_error("%s needs a value", f);
      uint64_t n = 0;
      int bytes = !strcmp(f, "--max-bytes");
      if (!dit_parse_size(v, &n) || n == 0 || (!bytes && strpbrk(v, "kKmMgGtT.")))
        return usage_error(bytes ? "--max-bytes %s: expected a positive size such as 4096, 500M, 20G or 1T"
                                 : "--max-blobs %s: expected a positive integer",
                           v);
      if (bytes) a->limits.max_bytes = n;
      else a->limits.max_blobs = n;
      i++;
      continue;
    } else if (f[0] == '-' && f[1]) return usage_error("unknown option %s", f);
    else if (a->n_pos < 2) {
      a->pos[a->n_pos++] = f;
      continue;
    } else return usage_error("unexpected argument %s", f);
    if (!v) return usage_error("%s needs a value", f);
    i++;
    if (dst) *dst = v;
    if (num) {
      char *end;
      errno = 0;
      long n = strtol(v, &end, 10);
      if (errno || end == v || *end || n < 0 || n > 100000) {
        fprintf(stderr, "ditc: error: %s %s: expected a non-negative integer\n", f, v);
        return 2;
      }
      *num = (int)n;
    }
  }
  return 0;
}

static int need_store(const args_t *a, dit_store_t **out) {
  *out = NULL;
  if (!a->store) return usage_error("%s", "no store: pass --store DIR or set DITC_STORE");
  dit_status_t s = dit_store_open(a->store, out);
  return s ? dit_status_report(s, "ditc") : 0;
}

/* "30s", "15m", "12h", "7d", "2w"; a bare number is seconds. */
static int parse_duration(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0)) return 0; /* NaN too */
  double mul = 1;
  switch (*end) {
    case 's': end++; break;
    case 'm': mul = 60, end++; break;
    case 'h': mul = 3600, end++; break;
    case 'd': mul = 86400, end++; break;
    case 'w': mul = 604800, end++; break;
    default: break;
  }
  if (*end || !(v * mul <= 9e15)) return 0;
  *out = (int64_t)(v * mul);
  return 1;
}

static void when(int64_t t, char out[32]) {
  time_t tt = (time_t)t;
  struct tm tm;
  localtime_r(&tt, &tm);
  strftime(out, 32, "%Y-%m-%d %H:%M", &tm);
}

/* ---- ls / verify / rm / gc / add ---- */

static int cmd_ls(const args_t *a) {
  dit_store_t *st;
  int rc = need_store(a, &st);
  if (rc) return rc;
  dit_store_entry_t *e = NULL;
  size_t n = 0;
  dit_status_t s = dit_store_list(st, &e, &n);
  if (s) {
    dit_store_close(st);
    return dit_status_report(s, "ditc");
  }
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    char t[32], b[32];
    when(e[i].last_used, t);
    dit_format_bytes(e[i].bytes, b);
    total += e[i].bytes;
    if (!e[i].manifest) {
      printf("%s  %s  invalid: %s\n", e[i].identity, t, e[i].error ? e[i].error : "?");
      continue;
    }
    const dit_manifest_t *m = e[i].manifest;
    printf("%s  %s  %10s  %-8s %s %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " text %" PRId64 " %s %s%s\n", e[i].identity, t, b,
           e[i].is_signed ? "signed" : "unsigned", m->variant, m->model_class, m->shape.batch, m->shape.frames, m->shape.height,
           m->shape.width, m->shape.text_len, dit_dtype_name(m->dtype), m->arch, e[i].complete ? "" : "  (incomplete: blobs missing)");
  }
  char tb[32];
  dit_format_bytes(total, tb);
  printf("%zu entr%s in %s (%s listed; blobs shared between entries are stored once)\n", n, n == 1 ? "y" : "ies",
         dit_store_root(st), tb);
  dit_store_entries_free(e, n);
  dit_store_close(st);
  return 0;
}

static int cmd_verify(const args_t *a) {
  dit_store_t *st;
  int rc = need_store(a, &st);
  if (rc) return rc;
  dit_store_stats_t v;
  dit_status_t s = dit_store_verify(st, stderr, &v);
  dit_store_close(st);
  if (s) return dit_status_report(s, "ditc");
  char b[32];
  dit_format_bytes(v.bytes, b);
  printf("%s: %zu blobs (%s) rehashed, %zu entries checked: %zu damaged blob%s removed, %zu entr%s incomplete\n",
         v.bad_blobs || v.bad_entries ? "FAILED" : "ok", v.blobs, b, v.entries, v.bad_blobs, v.bad_blobs == 1 ? "" : "s",
         v.bad_entries, v.bad_entries == 1 ? "y" : "ies");
  return v.bad_blobs || v.bad_entries ? 1 : 0;
}

static void print_removed(const char *what, const dit_store_stats_t *g) {
  char a[32], b[32];
  dit_format_bytes(g->bytes_removed, a);
  dit_format_bytes(g->bytes, b);
  printf("%s: removed %zu entr%s and %zu blob%s (%s); %zu entr%s, %zu blob%s (%s) left\n", what, g->entries_removed,
         g->entries_removed == 1 ? "y" : "ies", g->blobs_removed, g->blobs_removed == 1 ? "" : "s", a, g->entries,
         g->entries == 1 ? "y" : "ies", g->blobs, g->blobs == 1 ? "" : "s", b);
}

static int cmd_rm(const args_t *a) {
  if (a->n_pos != 1) return usage_error("%s", "cache rm needs exactly one IDENTITY");
  dit_store_t *st;
  int rc = need_store(a, &st);
  if (rc) return rc;
  dit_store_stats_t g;
  dit_status_t s = dit_store_remove(st, a->pos[0], &g);
  dit_store_close(st);
  if (s) return dit_status_report(s, "ditc");
  print_removed("rm", &g);
  return 0;
}

static int cmd_gc(const args_t *a) {
  uint64_t max_size = 0;
  int64_t max_age = -1;
  if (a->max_size && !dit_parse_size(a->max_size, &max_size))
    return usage_error("--max-size %s: expected a size such as 500M, 20G or 1T", a->max_size);
  if (a->max_age && !parse_duration(a->max_age, &max_age))
    return usage_error("--max-age %s: expected a duration such as 30s, 15m, 12h or 7d", a->max_age);
  dit_store_t *st;
  int rc = need_store(a, &st);
  if (rc) return rc;
  dit_store_stats_t g;
  dit_status_t s = dit_store_gc(st, max_size, max_age, &g);
  dit_store_close(st);
  if (s) return dit_status_report(s, "ditc");
  print_removed("gc", &g);
  return 0;
}

static int cmd_add(const args_t *a) {
  if (a->n_pos != 1) return usage_error("%s", "cache add needs exactly one BUNDLE_DIR");
  dit_store_t *st;
  int rc = need_store(a, &st);
  if (rc) return rc;
  char id[DIT_HASH_HEX];
  dit_status_t s = dit_store_import_bundle(st, a->pos[0], id);
  dit_store_close(st);
  if (s) return dit_status_report(s, "ditc");
  printf("added %s\n", id);
  return 0;
}

/* ---- push / pull ---- */

static int open_remote(const args_t *a, char **token, dit_remote_t **out) {
  *out = NULL;
  *token = NULL;
  if (!a->remote) return usage_error("%s", "no remote: pass --remote URL or set DITC_REMOTE");
  const char *tok = getenv("DITC_REMOTE_TOKEN");
  if (a->token_file) {
    size_t n = 0;
    dit_status_t s = dit_file_read(a->token_file, 64 << 10, token, &n);
    if (s) return dit_status_report(dit_status_annotate(s, "--token-file"), "ditc");
    while (n && ((*token)[n - 1] == '\n' || (*token)[n - 1] == '\r')) (*token)[--n] = 0;
    tok = *token;
  }
  dit_remote_options_t ro = {a->remote, tok && tok[0] ? tok : NULL, a->insecure_token, a->timeout_s, a->retries, !a->quiet, a->limits};
  dit_status_t s = dit_remote_create(&ro, out);
  return s ? dit_status_report(s, "ditc") : 0;
}

static void print_transfer(const char *verb, const char *id, const char *url, const dit_remote_stats_t *r) {
  char raw[32], wire[32];
  dit_format_bytes(r->raw_bytes, raw);
  dit_format_bytes(r->wire_bytes, wire);
  double ratio = r->wire_bytes ? (double)r->raw_bytes / (double)r->wire_bytes : 0;
  double rate = r->seconds > 0 ? (double)r->raw_bytes / (1 << 20) / r->seconds : 0;
  printf("%s %s %s %s: %zu blob%s transferred (%s, %s on the wire, ratio %.2f), %zu already there, %.2fs (%.0f MiB/s)\n", verb, id,
         strcmp(verb, "pushed") ? "from" : "to", url, r->blobs_transferred, r->blobs_transferred == 1 ? "" : "s", raw, wire, ratio,
         r->blobs_present, r->seconds, rate);
}

/* The local store and the remote one, both or neither (the exit status says why). */
static int open_store_and_remote(const args_t *a, dit_store_t **st, char **token, dit_remote_t **r) {
  int rc = need_store(a, st);
  if (rc) return rc;
  rc = open_remote(a, token, r);
  if (rc) dit_store_close(*st);
  return rc;
}

static int cmd_push(const args_t *a) {
  if (a->n_pos != 1) return usage_error("%s", "cache push needs exactly one IDENTITY");
  dit_store_t *st;
  dit_remote_t *r = NULL;
  char *token = NULL;
  int rc = open_store_and_remote(a, &st, &token, &r);
  if (rc) return rc;
  dit_status_t s = DIT_OK;
  if (a->sign_key) {
    char *text = NULL, *sig = NULL;
    size_t len = 0;
    s = dit_store_get_manifest(st, a->pos[0], NULL, &text, &len);
    if (!s) s = dit_sign_text(a->sign_key, text, len, &sig);
    if (!s) s = dit_store_put_signature(st, a->pos[0], sig);
    free(text);
    free(sig);
  }
  dit_remote_stats_t rs;
  if (!s) s = dit_remote_push(r, st, a->pos[0], &rs);
  if (!s) print_transfer("pushed", a->pos[0], a->remote, &rs);
  dit_remote_destroy(r);
  dit_store_close(st);
  free(token);
  return dit_status_report(s, "ditc");
}

static int cmd_pull(const args_t *a) {
  if (a->n_pos != 1) return usage_error("%s", "cache pull needs exactly one IDENTITY");
  dit_store_t *st;
  dit_remote_t *r = NULL;
  char *token = NULL;
  int rc = open_store_and_remote(a, &st, &token, &r);
  if (rc) return rc;
  dit_remote_stats_t rs;
  dit_status_t s = dit_remote_pull(r, st, a->pos[0], a->trusted_key, &rs);
  if (!s) print_transfer("pulled", a->pos[0], a->remote, &rs);
  dit_remote_destroy(r);
  dit_store_close(st);
  free(token);
  return dit_status_report(s, "ditc");
}

int dit_cache_main(int argc, char **argv) {
  if (argc < 1) return usage_error("%s", "cache needs a subcommand: ls, verify, rm, gc, why, add, push, pull");
  args_t a;
  int rc = parse_args(argc - 1, argv + 1, &a);
  if (rc) return rc;
  const char *c = argv[0];
  if (strcmp(c, "rm") && strcmp(c, "add") && strcmp(c, "push") && strcmp(c, "pull") && a.n_pos)
    return usage_error("unexpected argument %s", a.pos[0]);
  if (!strcmp(c, "ls")) return cmd_ls(&a);
  if (!strcmp(c, "verify")) return cmd_verify(&a);
  if (!strcmp(c, "rm")) return cmd_rm(&a);
  if (!strcmp(c, "gc")) return cmd_gc(&a);
  if (!strcmp(c, "add")) return cmd_add(&a);
  if (!strcmp(c, "push")) return cmd_push(&a);
  if (!strcmp(c, "pull")) return cmd_pull(&a);
  return usage_error("unknown cache subcommand '%s' (ls, verify, rm, gc, why, add, push, pull)", c);
}

/* ---- why ---- */

int dit_cache_why(const dit_compile_options_t *o) {
  if (!o->store_dir) return usage_error("%s", "no store: pass --store DIR or set DITC_STORE");
  cJSON *inputs = NULL;
  char id[33];
  dit_status_t s = dit_compile_identity(o, &inputs, id);
  dit_store_t *st = NULL;
  if (!s) s = dit_store_open(o->store_dir, &st);
  if (!s) {
    if (dit_store_has_entry(st, id)) printf("hit: identity %s is in store %s: ditc compile would do no work\n", id, o->store_dir);
    else dit_compile_explain(st, NULL, inputs, id, stdout);
  }
  dit_store_close(st);
  cJSON_Delete(inputs);
  return dit_status_report(s, "ditc");
}

/* ---- keygen / pack ---- */

int dit_keygen_main(int argc, char **argv) {
  args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc;
  if (!a.out || a.n_pos) return usage_error("%s", "keygen needs -o KEY (and nothing else)");
  size_t n = strlen(a.out) + 8;
  char *pub = malloc(n);
  if (!pub) return dit_status_report(DIT_ERR(RESOURCE_EXHAUSTED, "out of memory"), "ditc");
  snprintf(pub, n, "%s.pub", a.out);
  dit_status_t s = dit_sign_keygen(a.out, pub);
  if (!s) printf("wrote %s (private, keep it secret) and %s (public, give it to ditrun --trusted-key)\n", a.out, pub);
  free(pub);
  return dit_status_report(s, "ditc");
}

int dit_pack_main(int argc, char **argv) {
  args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc;
  if (a.n_pos != 1 || !a.out) return usage_error("%s", "pack needs IDENTITY and -o FILE.ditb");
  dit_store_t *st;
  rc = need_store(&a, &st);
  if (rc) return rc;
  dit_ditb_stats_t ps;
  dit_status_t s = dit_ditb_write(st, a.pos[0], a.out, &ps);
  dit_store_close(st);
  if (!s) {
    char r[32], f[32];
    dit_format_bytes(ps.raw_bytes, r);
    dit_format_bytes(ps.file_bytes, f);
    printf("packed %s into %s: %zu blobs, %s of blobs in a %s file (ratio %.2f)\n", a.pos[0], a.out, ps.blobs, r, f,
           ps.file_bytes ? (double)ps.raw_bytes / (double)ps.file_bytes : 0.0);
  }
  return dit_status_report(s, "ditc");
}
