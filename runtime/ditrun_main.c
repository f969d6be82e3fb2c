/* ditrun: the command line of the runtime (verify, info, forward, generate, calibrate-cache, ...). */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "artifacts/bundle.h"
#include "store/fetch.h"
#include "store/size_arg.h"
#include "artifacts/plan.h"
#include "artifacts/safetensors.h"
#include "base/clock.h"
#include "base/hw_profile.h"
#include "runtime/cache_profile.h"
#include "runtime/compare.h"
#include "runtime/ditrun.h"
#include "runtime/gen_cli.h"
#include "runtime/launch/launch_cmd.h"
#include "runtime/launch/launch_env.h"
#include "runtime/gen_stages.h"
#include "runtime/media.h"
#include "runtime/preview.h"
#include "runtime/rng.h"
#include "runtime/serve/serve.h"
#include "text/tokenizer.h"

static const char kUsage[] =
    "usage: ditrun <command> BUNDLE [options]\n"
    "\n"
    "commands:\n"
    "  verify BUNDLE      check integrity: manifest schema, recomputed identity, every blob's\n"
    "                     presence, size and hash, plans against the manifest\n"
    "  info BUNDLE        summarize the manifest\n"
    "  tokenize DIR --text TEXT [--max-length N]\n"
    "                     the input_ids and attention_mask (JSON) of a pipeline's tokenizer folder\n"
    "                     (spiece.model; CLIP's vocab.json + merges.txt; Qwen2's vocab.json + merges.txt\n"
    "                     or tokenizer.json; Llama 3's tokenizer.json): special tokens added,\n"
    "                     truncated and padded to N (default: the folder's model_max_length)\n"
    "  frames IN.safetensors [--tensor NAME] --out FILE.mp4|FILE.png [--fps N] [--crf N]\n"
    "                     decoded frames ([B, 3, F, H, W] or [B, 3, H, W], values in [-1, 1])\n"
    "                     as an H.264 MP4 (yuv420p, --fps default 16, --crf 1..51 default 18)\n"
    "                     or a PNG (a video's frame 0); batch item b >= 1 goes to FILE_b.EXT\n"
    "  decode VAE_BUNDLE [--first FIRST_BUNDLE [--head HEAD_BUNDLE]] [--window-stride N\n"
    "         [--last LAST_BUNDLE]] --latents IN.safetensors --out OUT.safetensors\n"
    "                     a VAE decoder stage's decode of tensor 'latents' ([B, C, f, h, w]) into\n"
    "                     tensor 'frames', as generate --prompt decodes: with --first, the stage\n"
    "                     in chunks (FIRST_BUNDLE latent frame 0's, VAE_BUNDLE the later chunks');\n"
    "                     with --head, split for windows (HEAD_BUNDLE over whole frames, then the\n"
    "                     two tails window by window); with --window-stride, framewise (VAE_BUNDLE\n"
    "                     a window's, LAST_BUNDLE the shorter last one's, blended). VAE_BUNDLE a\n"
    "                     pipeline's bundle: its own decoder stages, as generate decodes\n"
    "  forward BUNDLE --inputs IN.safetensors --out OUT.safetensors [--expert transformer_2]\n"
    "                     one transformer forward; inputs named hidden_states, timestep,\n"
    "                     encoder_hidden_states; output sample\n"
    "  generate BUNDLE --prompt TEXT [--negative-prompt TEXT] ... --out OUT.mp4|OUT.png|OUT.safetensors\n"
    "                  [--fps N] [--out-latents LATENTS.safetensors] [--out-frames FRAMES.safetensors]\n"
    "                     (--out-latents without --out: the latents alone, no decode)\n"
    "                     a bundle compiled from a pipeline directory with its stages: the text\n"
    "                     encoder stage makes the embeddings (WanPipeline's tokenization and\n"
    "                     zeroed padding rows; the negative prompt \"\" under guidance; FLUX.1:\n"
    "                     CLIP's pooled output and T5's hidden states as FluxPipeline, the\n"
    "                     negative prompt only with --true-cfg S > 1), the VAE decoder stage\n"
    "                     the frames or image (.safetensors: tensor frames; --fps default 16);\n"
    "                     --out-frames: the same frames as tensor frames (fp32, [-1, 1]) beside\n"
    "                     an MP4 or PNG, from the one decode\n"
    "                  [--image IMG.png] image-to-video (Wan2.1/2.2 I2V, Wan2.2 TI2V): the\n"
    "                     picture resized to the video (PIL's LANCZOS), through the VAE encoder\n"
    "                     stage (and Wan2.1-I2V's CLIP image encoder stage, with its\n"
    "                     CLIPImageProcessor preprocessing) into the image condition below\n"
    "  generate BUNDLE --prompt-embeds P.safetensors [--negative-embeds N.safetensors]\n"
    "                  [--init-latents X.safetensors | --seed S] [--steps N] [--guidance G]\n"
    "                  [--guidance-2 G2] (two-expert bundles: transformer_2's; default G)\n"
    "                  [--shift S] [--sampler unipc|euler] --out LATENTS.safetensors\n"
    "                  [--image IMG.png | --image-latents I.safetensors [--image-embeds E.safetensors]]\n"
    "                  [--step-cache off|cadence:N|delta:T|easycache:T|teacache:T|fbcache:T|auto]\n"
    "                  [--cache-warmup W] [--cache-cooldown C] [--cache-profile P.json]\n"
    "                  [--cache-reuse hidden|output]\n"
    "                  [--reuse-ratio R] [--reuse-eps-local E] [--reuse-warmup W]\n"
    "                  [--reuse-report FILE] [--reuse-diagnostic]\n"
    "                  [--preview DIR] [--preview-every K]\n"
    "                     the denoising loop (defaults: 50 steps, guidance 5, shift 3, unipc);\n"
    "                     reads tensors prompt_embeds, negative_prompt_embeds, init_latents;\n"
    "                     writes latents (fp32)\n"
    "                     image-to-video: tensor image_latents, the normalized VAE encoding of\n"
    "                     the image: [B, 16, f, h, w] with zero frames after it (Wan2.1-I2V,\n"
    "                     Wan2.2-I2V-A14B: the pipeline's first-frame mask is built here and\n"
    "                     both concatenated to the latents), or [B, 48, 1, h, w] (Wan2.2-TI2V:\n"
    "                     the first latent frame is held to it, its tokens at timestep 0);\n"
    "                     tensor image_embeds [B, n_img, image_dim] (Wan2.1-I2V: the CLIP image\n"
    "                     encoder's hidden states, n_img as compiled); batch 1 serves every item\n"
    "                     --step-cache (lossy, off by default): skipped steps run no forward and\n"
    "                     take the prediction extrapolated from the two latest computed ones;\n"
    "                     cadence:N computes every N-th step, delta:T skips the step after one\n"
    "                     whose prediction moved by a relative L1 below T (never two in a row);\n"
    "                     easycache:T (EasyCache) skips while the output change predicted from\n"
    "                     the latents' change, accumulated since the last computed step, stays\n"
    "                     below T, and adds the latest computed step's (prediction - latents)\n"
    "                     to the latents; teacache:T (TeaCache; one rank, or --cfg-parallel\n"
    "                     alone in one process) runs each step up to block 0's modulated norm\n"
    "                     and skips while its rescaled change, accumulated, stays below T;\n"
    "                     fbcache:T (first-block cache; the same bundles) runs each step through\n"
    "                     block 0 and skips while its output residual's relative L1 change\n"
    "                     from the latest computed step's stays below T; both reuse the block\n"
    "                     stack's residual (a skipped step runs block 0 and the output head), or\n"
    "                     with --cache-reuse output, or where the plan's head takes more than\n"
    "                     the last block's hidden state, reuse as easycache; the first W\n"
    "                     (default 2) and last C (default 1) steps always run; auto takes the\n"
    "                     policy, W and C of --cache-profile P.json (calibrate-cache's, for this\n"
    "                     bundle and --steps) and prints it\n"
    "                     --reuse-ratio R (lossy; bundles compiled with --reuse ditango):\n"
    "                     per step, layer and remote group, the attention state is recomputed\n"
    "                     or taken from the state cache as DiTango's error model decides, R the\n"
    "                     share recomputed after the first W (default 2) steps (1: all);\n"
    "                     E (default 0.2) the local group's relative drift forcing an anchor;\n"
    "                     FILE gets every decision and predicted error (JSON), and with\n"
    "                     --reuse-diagnostic the measured error of every reused state\n"
    "                     --preview DIR: every K steps (default 1) and after the last, the\n"
    "                     latents as DIR/step_NNN.png through the bundle's latent-to-RGB map\n"
    "                     (without one: latent channels 0-2, each scaled by its own range),\n"
    "                     batch item 0, up to 4 latent frames side by side\n"
    "\n"
    "  calibrate-cache BUNDLE [generate's inputs and options] --profile-out P.json\n"
    "                  [--runs K] [--target-speedup S]\n"
    "                     K (default 1) exact generates, seeds seed..seed+K-1, observing\n"
    "                     teacache's probe: per step its relative L1 change d and the guided\n"
    "                     prediction's o; fits o on d (degree 4), Pearson of (poly(d), o), the\n"
    "                     lag-1 autocorrelation of o, and the gate's choice: teacache with the\n"
    "                     fit when Pearson >= 0.8, else delta when the autocorrelation >= 0.7,\n"
    "                     else cadence, its threshold (N) replayed on the runs to run about\n"
    "                     steps / S (default 2) steps in full; writes P.json for\n"
    "                     generate --step-cache auto --cache-profile P.json\n"
    "\n"
    "  compare BUNDLE --inputs IN.safetensors [--reference cpu] [--accumulate]\n"
    "                  [--max-rel X] [-v]\n"
    "                     run the plan step by step on the bundle's backend and on the\n"
    "                     reference backend; report each op's max relative error and cosine\n"
    "                     (each step on the reference's inputs unless --accumulate); 8-bit\n"
    "                     codes pass one step of their grid apart\n"
    "\n"
    "  bench BUNDLE --inputs IN.safetensors [--steps ITERS] [--warmup N] [--no-split]\n"
    "        [--split-in-flight] [-v]\n"
    "                     median forward time after N warm-up forwards (default 2), and\n"
    "                     the time split by op class (one more forward, step by step, each\n"
    "                     step drained before the next; --split-in-flight: the steps back to\n"
    "                     back, each timed by device events around it); -v adds the steps\n"
    "                     grouped by op and operand shapes\n"
    "\n"
    "  calibrate BUNDLE --inputs IN.safetensors --profile-out PROFILE.json [--chunk-mb C]\n"
    "                  [--steps FORWARDS] [--second BUNDLE2 --second-inputs IN2.safetensors]\n"
    "                     measure this machine for the offload planner: the bundle's forward\n"
    "                     rate (TFLOP/s), its weights streamed host-to-device in chunks (GB/s),\n"
    "                     a multi-rank bundle's collectives (GB/s); a second, smaller shape of\n"
    "                     the same model separates a fixed cost per plan step from the rate\n"
    "                     (and the collectives' latency from theirs); ditc compile --profile\n"
    "                     PROFILE.json reads the result\n"
    "\n"
    "  serve BUNDLE|ID... [--listen 127.0.0.1:8088] [--max-running 1] [--max-queued 16]\n"
    "                  [--token-file F] [--max-body-mb 64] [--grace-s 5]\n"
    "                  [--cuda-graph | --no-cuda-graph]\n"
    "                     a resident HTTP server running generate on the bundles, loaded\n"
    "                     once in a worker process (README: Resident serving); its\n"
    "                     --token-file is the bearer token clients must send\n"
    "\n"
    "  launch -n N [--port P] [--grace-ms MS] -- COMMAND [ARGS...]\n"
    "                     run N ranks of `ditrun COMMAND ARGS...` on this host (torchrun's\n"
    "                     variables set; stderr lines prefixed [rank i]); one failing rank\n"
    "                     stops the others\n"
    "\n"
    "options for forward, generate, compare and bench:\n"
    "  --threads N        CPU threads (default: all)\n"
    "  --backend NAME     cpu or cuda (default: the bundle's target)\n"
    "  --device N         GPU ordinal (default 0)\n"
    "  --devices K        a multi-rank bundle in one process: its ranks round-robin over\n"
    "                     GPUs device .. device+K-1 (default 1: all on --device)\n"
    "  --stage-collectives  collectives through host copies on any backend (GPU ranks\n"
    "                     that share a GPU always use them)\n"
    "  --overlap-collectives  collectives on a queue of their own, overlapped with the\n"
    "                     compute that does not need their results (NCCL GPU ranks, and\n"
    "                     the CPU backend's collectives); the default under NCCL\n"
    "  --no-overlap-collectives  collectives in plan order on the compute queue\n"
    "  --offload-pace host|stream  how chunked prefetch yields to collectives: copy-queue\n"
    "                     dependencies (stream, the default) or the host pausing the copies\n"
    "                     until it sees the collective done (host)\n"
    "  --cuda-graph       capture the forward once as a CUDA graph and replay it; refused,\n"
    "                     naming why, where a graph cannot be used. The default (also for\n"
    "                     serve) is a graph where it applies: one rank, a GPU backend, no\n"
    "                     offload streaming, no attention reuse; step by step elsewhere, in\n"
    "                     calibrate (it measures the forward offloaded runs make) and in the\n"
    "                     stage bundles (text encoders, VAE)\n"
    "  --no-cuda-graph    every transformer forward step by step, never a graph\n"
    "\n"
    "BUNDLE is a bundle directory, a .ditb archive (ditc pack), or with --store an identity.\n"
    "options for every command, anywhere on the line:\n"
    "  --store URL|DIR    fetch the identity from a remote store (http://...; only the blobs\n"
    "                     the local store lacks) or take it from a local store directory\n"
    "  --cache DIR        local store receiving pulls and archives (default: $DITC_STORE, else\n"
    "                     ~/.cache/ditc/store for pulls, a temporary store for archives)\n"
    "  --trusted-key KEY  refuse a bundle whose manifest is not signed by this ed25519 public\n"
    "                     key (PEM; ditc keygen)\n"
    "  --token-file FILE  bearer token for the remote (default: $DITC_REMOTE_TOKEN); sent over\n"
    "                     plain http:// only to loopback (127.0.0.0/8, ::1, localhost)\n"
    "  --insecure-token   send it over plain http:// to any host\n"
    "  --timeout S        remote: connect timeout and longest stall (default 30)\n"
    "  --retries N        remote: further attempts after a transient failure (default 3)\n"
    "  --max-bytes SIZE   stop a pull or archive import, leaving nothing, past SIZE bytes of\n"
    "                     blobs counted as they are decompressed (K/M/G/T; default 256G)\n"
    "  --max-blobs N      refuse a manifest or archive of more than N blobs (default 65536)\n"
    "(a ditrun built with -DDIT_STORE=OFF runs bundle directories only)\n";

/* The latest command-line refusal's message, for a served job's reason (gen_usage_message). */
static char g_usage_msg[600];

static int usage_error(const char *fmt, const char *arg) {
  snprintf(g_usage_msg, sizeof g_usage_msg, fmt, arg);
  fprintf(stderr, "ditrun: error: %s\n(see ditrun --help)\n", g_usage_msg);
  return 2;
}

const char *gen_usage_message(void) { return g_usage_msg; }

/* ---- where the bundle comes from (fetch.h) ---- */

static dit_fetch_options_t g_fetch = {.timeout_s = 30, .retries = 3, .verbose = 1};
/* The bundles named so far (serve names several), each fetched once. */
#define MAX_FETCHED 16
static struct {
  char *what;
  dit_fetched_t *f;
} g_fetched[MAX_FETCHED];
static char *g_token;

/* The bundle directory for what the user named; kept until the process ends. */
dit_status_t gen_resolve_bundle(const char *what, const char **out_dir) {
  int i = 0;
  while (i < MAX_FETCHED && g_fetched[i].what && strcmp(g_fetched[i].what, what)) i++;
  if (i == MAX_FETCHED) return DIT_ERR(OUT_OF_RANGE, "%s: at most %d bundles per process", what, MAX_FETCHED);
  if (!g_fetched[i].what) {
    DIT_RETURN_IF(dit_fetch_bundle(what, &g_fetch, &g_fetched[i].f));
    if (!(g_fetched[i].what = strdup(what))) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  *out_dir = dit_fetched_dir(g_fetched[i].f);
  return DIT_OK;
}

/* Takes the bundle-source options out of argv wherever they stand; returns 0 or an exit
 * status. */
static int take_fetch_options(int *argc, char **argv) {
  const char *token_file = NULL;
  int o = 1;
  for (int i = 1; i < *argc; i++) {
    const char *f = argv[i], *v = i + 1 < *argc ? argv[i + 1] : NULL;
    const char **dst = !strcmp(f, "--store") ? &g_fetch.store : !strcmp(f, "--cache") ? &g_fetch.cache_dir
                       : !strcmp(f, "--trusted-key") ? &g_fetch.trusted_key : !strcmp(f, "--token-file") ? &token_file : NULL;
    int is_num = !strcmp(f, "--timeout") || !strcmp(f, "--retries");
    int is_size = !strcmp(f, "--max-bytes") || !strcmp(f, "--max-blobs");
    if (!strcmp(f, "--insecure-token")) {
      g_fetch.insecure_token = 1;
      continue;
    }
    if (is_size) {
      uint64_t n = 0;
      if (!v || !dit_parse_size(v, &n) || n == 0 || (!strcmp(f, "--max-blobs") && strpbrk(v, "kKmMgGtT.")))
        return usage_error("%s: expected a positive size (4096, 500M, 20G, 1T; --max-blobs: an integer)", f);
      if (!strcmp(f, "--max-bytes")) g_fetch.limits.max_bytes = n;
      else g_fetch.limits.max_blobs = n;
      i++;
      continue;
    }
    if (!dst && !is_num) {
      argv[o++] = argv[i];
      continue;
    }
    if (!v) return usage_error("%s needs a value", f);
    if (dst) *dst = v;
    if (is_num) {
      char *end;
      long n = strtol(v, &end, 10);
      if (*end || end == v || n < 0 || n > 100000) return usage_error("%s: expected a non-negative integer", f);
      if (!strcmp(f, "--timeout")) g_fetch.timeout_s = (int)n;
      else g_fetch.retries = (int)n;
    }
    i++;
  }
  *argc = o;
  argv[o] = NULL;
  const char *env = getenv("DITC_REMOTE_TOKEN");
  if (token_file) {
    size_t n = 0;
    dit_status_t s = dit_file_read(token_file, 64 << 10, &g_token, &n);
    if (s) return dit_status_report(dit_status_annotate(s, "--token-file"), "ditrun");
    while (n && (g_token[n - 1] == '\n' || g_token[n - 1] == '\r')) g_token[--n] = 0;
    g_fetch.token = g_token;
  } else if (env && env[0]) {
    g_fetch.token = env;
  }
  return 0;
}

/* ---- verify / info ---- */

static int cmd_verify(const char *dir) {
  double t0 = dit_now_s();
  dit_bundle_t *b;
  dit_status_t s = gen_resolve_bundle(dir, &dir);
  if (s) return dit_status_report(s, "ditrun");
  s = dit_bundle_open(dir, DIT_BUNDLE_HASH_BLOBS, &b);
  if (s) return dit_status_report(s, "ditrun");
  const dit_manifest_t *m = dit_bundle_manifest(b);
  uint64_t bytes = 0;
  for (size_t i = 0; i < m->n_blobs; i++) bytes += m->blobs[i].size;
  /* Every rank's plan: `ranks` (the first expert), then transformer_2's of a two-expert bundle. */
  size_t checked = 0;
  for (size_t x = 0; x < (m->n_experts ? m->n_experts : 1); x++)
  for (size_t r = 0; !s && r < (x ? m->experts[x].n_ranks : m->n_ranks); r++, checked++) {
    const dit_manifest_rank_t *rk = x ? &m->experts[x].ranks[r] : &m->ranks[r];
    const dit_manifest_weights_t *w = dit_manifest_find_weights(m, rk->weights);
    dit_mapping_t pm;
    char what[160];
    snprintf(what, sizeof what, "%s/blobs/%s (plan of rank %d%s%s)", dir, rk->plan, rk->rank, x ? ", " : "", x ? m->experts[x].name : "");
    if (!w) {
      s = DIT_ERR(NOT_FOUND, "manifest.json: rank %d weights %s have no layout", rk->rank, rk->weights);
      break;
    }
    s = dit_bundle_map_blob(b, rk->plan, &pm);
    if (s) break;
    dit_plan_t *p = NULL;
    s = dit_plan_parse((const char *)pm.data, pm.size, what, &p);
    if (!s) s = dit_plan_check_bindings(p, m, w, what);
    dit_plan_free(p);
    dit_file_unmap(&pm);
  }
  if (!s)
    printf("ok: bundle %s verified: %zu blobs, %.1f MiB hashed, %zu rank plans checked (%.2fs)\n", m->identity, m->n_blobs,
           (double)bytes / (1 << 20), checked, dit_now_s() - t0);
  dit_bundle_close(b);
  return dit_status_report(s, "ditrun");
}

static int cmd_info(const char *dir) {
  dit_bundle_t *b;
  dit_status_t s = gen_resolve_bundle(dir, &dir);
  if (!s) s = dit_bundle_open(dir, 0, &b);
  if (s) return dit_status_report(s, "ditrun");
  dit_manifest_print(dit_bundle_manifest(b), stdout);
  dit_bundle_print_offload(b, stdout);
  dit_bundle_close(b);
  return 0;
}

/* ---- tensor files ---- */

/* Copies tensor `name` of st (read from `path`) into an aligned heap copy (caller frees t->data). */
static dit_status_t copy_tensor(const dit_safetensors_t *st, const char *path, const char *name, const char *flag, dit_tensor_t *t) {
  const dit_st_tensor_t *e = dit_safetensors_find(st, name);
  dit_status_t s = DIT_OK;
  if (!e) {
    s = DIT_ERR(NOT_FOUND, "%s %s: no tensor named '%s' (the file has %zu tensors%s%s)", flag, path, name,
                dit_safetensors_count(st), dit_safetensors_count(st) ? ", e.g. " : "",
                dit_safetensors_count(st) ? dit_safetensors_at(st, 0)->name : "");
  } else {
    t->dtype = e->dtype;
    t->rank = e->rank;
    memcpy(t->dims, e->dims, sizeof t->dims);
    t->data = malloc(e->nbytes ? e->nbytes : 1);
    if (!t->data) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path);
    else memcpy(t->data, e->data, e->nbytes);
  }
  return s;
}

/* Reads tensor `name` of `path` into an aligned heap copy (caller frees t->data). */
static dit_status_t read_tensor(const char *path, const char *name, const char *flag, dit_tensor_t *t) {
  dit_safetensors_t *st;
  DIT_RETURN_IF_ERROR(dit_safetensors_open(path, &st), "%s", flag);
  dit_status_t s = copy_tensor(st, path, name, flag, t);
  dit_safetensors_close(st);
  return s;
}

/* A loop input: from a served job's request when there is one, else from the file. */
static dit_status_t read_arg_tensor(const run_args_t *a, const char *path, const char *name, const char *flag, dit_tensor_t *t) {
  return a->request ? copy_tensor(a->request, "(request inputs)", name, flag, t) : read_tensor(path, name, flag, t);
}

/* ---- forward / generate ---- */


static int parse_num(const char *flag, const char *v, double *out) {
  if (!v) return usage_error("%s needs a value", flag);
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(d)) {
    fprintf(stderr, "ditrun: error: %s %s: expected a finite number\n", flag, v);
    return 2;
  }
  *out = d;
  return 0;
}

static int parse_int(const char *flag, const char *v, int64_t *out) {
  double d;
  int rc = parse_num(flag, v, &d);
  if (rc) return rc;
  if (d < 0 || d != (double)(int64_t)d) {
    fprintf(stderr, "ditrun: error: %s %s: expected a non-negative integer\n", flag, v);
    return 2;
  }
  *out = (int64_t)d;
  return 0;
}

/* Options only generate reads; the other commands refuse them rather than ignore them. */
static int generate_only(const char *f) {
  static const char *const k[] = {"--prompt-embeds", "--negative-embeds", "--init-latents", "--image-latents", "--image-embeds", "--image",
                                  "--sampler", "--guidance", "--guidance-2", "--shift", "--seed", "--true-cfg",
                                  "--step-cache", "--cache-warmup", "--cache-cooldown", "--cache-profile", "--cache-reuse",
                                  "--reuse-ratio", "--reuse-eps-local", "--reuse-warmup", "--reuse-report", "--reuse-diagnostic",
                                  "--preview", "--preview-every", "--prompt", "--negative-prompt", "--out-latents", "--out-frames", "--fps", NULL};
  for (int i = 0; k[i]; i++)
    if (!strcmp(f, k[i])) return 1;
  return 0;
}

int parse_run_args(int argc, char **argv, run_args_t *a, int need_out, const char *cmd) {
  memset(a, 0, sizeof *a);
  a->need_out = need_out;
  a->steps = 50;
  a->warmup = 2;
  a->guidance = 5.0;
  a->shift = 3.0;
  a->true_cfg = 1.0;
  a->sampler = "unipc";
  a->reference = "cpu";
  a->max_rel = -1;
  a->cache_warmup = DIT_STEP_CACHE_DEFAULT_WARMUP;
  a->cache_cooldown = DIT_STEP_CACHE_DEFAULT_COOLDOWN;
  a->reuse_ratio = DIT_DITANGO_DEFAULT_RATIO;
  a->reuse_eps_local = DIT_DITANGO_DEFAULT_EPS_LOCAL;
  a->reuse_warmup = DIT_DITANGO_DEFAULT_WARMUP;
  a->preview_every = 1;
  /* generate's inputs and options: generate (1) and calibrate-cache (2) */
  const int gen = a->generate = !strcmp(cmd, "generate") ? 1 : !strcmp(cmd, "calibrate-cache") ? 2 : 0;
  for (int i = 0; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    const char **str = NULL;
    int rc = 0;
    if (!gen && generate_only(f)) {
      fprintf(stderr, "ditrun: error: %s is an option of generate; %s does not take it\n(see ditrun --help)\n", f, cmd);
      return 2;
    }
    if (gen && !strcmp(f, "--inputs")) return usage_error("%s", "--inputs is an option of forward, compare, bench and calibrate; generate takes --prompt-embeds");
    if (!strcmp(f, "--inputs")) str = &a->inputs;
    else if (!strcmp(f, "--out")) str = &a->out;
    else if (!strcmp(f, "--prompt-embeds")) str = &a->prompt;
    else if (!strcmp(f, "--prompt")) str = &a->text;
    else if (!strcmp(f, "--negative-prompt")) str = &a->negative_text;
    else if (!strcmp(f, "--out-latents")) str = &a->out_latents;
    else if (!strcmp(f, "--out-frames")) str = &a->out_frames;
    else if (!strcmp(f, "--fps")) rc = parse_num(f, v, &a->fps), i++;
    else if (!strcmp(f, "--negative-embeds")) str = &a->negative;
    else if (!strcmp(f, "--init-latents")) str = &a->init;
    else if (!strcmp(f, "--image-latents")) str = &a->image_latents;
    else if (!strcmp(f, "--image-embeds")) str = &a->image_embeds;
    else if (!strcmp(f, "--image")) str = &a->image;
    else if (!strcmp(f, "--step-cache")) str = &a->step_cache;
    else if (!strcmp(f, "--cache-profile")) str = &a->cache_profile;
    else if (!strcmp(f, "--cache-reuse")) str = &a->cache_reuse;
    else if (!strcmp(f, "--preview")) str = &a->preview;
    else if (!strcmp(f, "--preview-every")) rc = parse_int(f, v, &a->preview_every), i++;
    else if (!strcmp(f, "--reuse-report")) str = &a->reuse_report, a->reuse_on = 1;
    else if (!strcmp(f, "--reuse-ratio")) rc = parse_num(f, v, &a->reuse_ratio), a->reuse_on = 1, i++;
    else if (!strcmp(f, "--reuse-eps-local")) rc = parse_num(f, v, &a->reuse_eps_local), a->reuse_on = 1, i++;
    else if (!strcmp(f, "--reuse-warmup")) rc = parse_int(f, v, &a->reuse_warmup), a->reuse_on = 1, i++;
    else if (!strcmp(f, "--reuse-diagnostic")) a->reuse_diagnostic = a->reuse_on = 1;
    else if (!strcmp(f, "--cache-warmup")) rc = parse_int(f, v, &a->cache_warmup), a->have_cache_warmup = 1, i++;
    else if (!strcmp(f, "--cache-cooldown")) rc = parse_int(f, v, &a->cache_cooldown), a->have_cache_cooldown = 1, i++;
    else if (!strcmp(f, "--sampler")) str = &a->sampler, a->have_sampler = 1;
    else if (!strcmp(f, "--backend")) str = &a->backend;
    else if (!strcmp(f, "--reference")) str = &a->reference;
    else if (!strcmp(f, "--expert")) {
      if (!v || (strcmp(v, "transformer") && strcmp(v, "transformer_2")))
        return usage_error("--expert: expected transformer or transformer_2, found '%s'", v ? v : "");
      a->expert = v;
      i++;
    }
    else if (!strcmp(f, "--guidance-2")) rc = parse_num(f, v, &a->guidance_2), a->have_guidance_2 = 1, i++;
    else if (!strcmp(f, "--device")) rc = parse_int(f, v, &a->device), i++;
    else if (!strcmp(f, "--max-rel")) rc = parse_num(f, v, &a->max_rel), i++;
    else if (!strcmp(f, "--accumulate")) a->accumulate = 1;
    else if (!strcmp(f, "--devices")) rc = parse_int(f, v, &a->devices), i++;
    else if (!strcmp(f, "--cuda-graph")) a->graph = 1;
    else if (!strcmp(f, "--no-cuda-graph")) a->graph = -1;
    else if (!strcmp(f, "--overlap-collectives")) a->overlap = 1;
    else if (!strcmp(f, "--no-overlap-collectives")) a->overlap = -1;
    else if (!strcmp(f, "--offload-pace")) {
      if (!v || (strcmp(v, "host") && strcmp(v, "stream"))) return usage_error("--offload-pace: expected host or stream, found '%s'", v ? v : "");
      a->pace_host = !strcmp(v, "host");
      i++;
    }
    else if (!strcmp(f, "--stage-collectives")) a->stage = 1;
    else if (!strcmp(f, "-v") || !strcmp(f, "--verbose")) a->verbose = 1;
    else if (!strcmp(f, "--steps")) rc = parse_int(f, v, &a->steps), a->have_steps = 1, i++;
    else if (!strcmp(f, "--warmup")) rc = parse_int(f, v, &a->warmup), i++;
    else if (!strcmp(f, "--no-split")) a->no_split = 1;
    else if (!strcmp(f, "--split-in-flight")) a->split_in_flight = 1;
    else if (!strcmp(f, "--seed")) rc = parse_int(f, v, &a->seed), a->have_seed = 1, i++;
    else if (!strcmp(f, "--threads")) rc = parse_int(f, v, &a->threads), i++;
    else if (!strcmp(f, "--guidance")) rc = parse_num(f, v, &a->guidance), a->have_guidance = 1, i++;
    else if (!strcmp(f, "--shift")) rc = parse_num(f, v, &a->shift), a->have_shift = 1, i++;
    else if (!strcmp(f, "--true-cfg")) rc = parse_num(f, v, &a->true_cfg), a->have_true_cfg = 1, i++;
    else if (f[0] == '-') return usage_error("unknown option %s", f);
    else if (!a->bundle) a->bundle = f;
    else return usage_error("unexpected argument %s", f);
    if (rc) return rc;
    if (str) {
      if (!v) return usage_error("%s needs a value", f);
      *str = v;
      i++;
    }
  }
  if (gen == 2 && a->preview) return usage_error("%s", "--preview is an option of generate; calibrate-cache does not take it");
  if (a->split_in_flight && strcmp(cmd, "bench")) return usage_error("--split-in-flight is an option of bench; %s does not take it", cmd);
  if (a->split_in_flight && a->no_split) return usage_error("%s", "--split-in-flight times the split that --no-split leaves out: give one");
  if (a->preview_every < 1 || a->preview_every > 10000) return usage_error("%s", "--preview-every: expected 1..10000");
  if (!a->bundle) return usage_error("%s", "missing BUNDLE");
  /* generate --prompt may stop at the latents: --out-latents alone, no decode. */
  if (a->need_out && !a->out && !(gen == 1 && a->text && a->out_latents)) return usage_error("%s", "missing --out");
  return 0;
}

/* 0 in the processes of a launch other than rank 0: they compute, rank 0 writes. */
static int g_writer = 1;
/* 1 in a process of a multi-process launch. */
static int g_launched = 0;

/* What the runtime allocated (at most at once) against the bundle's prediction. */
static void print_memory(const dit_runtime_t *rt) {
  uint64_t alloc = 0, pred = 0;
  int mr = 0;
  if (!dit_runtime_memory(rt, &alloc, &pred, &mr)) {
    /* Reuse's anchor copies are the runtime's, beyond the manifest's peak: named apart. */
    const uint64_t rb = dit_runtime_reuse_bytes(rt);
    char extra[96] = "";
    if (rb) snprintf(extra, sizeof extra, ", of which %.2f MiB reuse anchor copies beyond the manifest's peak", rb / 1048576.0);
    fprintf(stderr, "ditrun: memory: %.2f MiB allocated, %.2f MiB predicted%s (rank %d; %" PRIu64 " bytes %s)\n", alloc / 1048576.0,
            pred / 1048576.0, extra, mr, alloc <= pred ? pred - alloc : alloc - pred,
            alloc <= pred ? "within the prediction" : "OVER the prediction");
  }
}

/* Loads the bundle (every expert of a two-expert one) and selects --expert. */
static dit_status_t load(const run_args_t *a, dit_runtime_t **rt) {
  static dit_launch_env_t env; /* the runtime keeps a pointer to it */
  DIT_RETURN_IF(dit_launch_env_read(&env));
  g_writer = env.launcher == DIT_LAUNCHER_NONE || env.world <= 1 || env.rank == 0;
  g_launched = env.launcher != DIT_LAUNCHER_NONE && env.world > 1;
  /* Only generate runs both experts; the other commands prepare the one they run (its weights
   * alone on the device). */
  dit_runtime_options_t o = {a->backend, (int)a->threads, (int)a->device, a->graph, (int)a->devices, a->stage,
                             env.launcher != DIT_LAUNCHER_NONE ? &env : NULL, a->overlap, a->pace_host,
                             a->generate ? NULL : a->expert ? a->expert : "transformer", NULL};
  double t0 = dit_now_s();
  const char *dir = NULL;
  DIT_RETURN_IF(gen_resolve_bundle(a->bundle, &dir));
  DIT_RETURN_IF(dit_runtime_load(dir, &o, rt));
  int expert = 0;
  DIT_RETURN_IF(dit_runtime_expert_find(*rt, a->expert, &expert));
  DIT_RETURN_IF(dit_runtime_expert_select(*rt, expert));
  const dit_manifest_t *m = dit_runtime_manifest(*rt);
  fprintf(stderr, "ditrun: loaded and verified %s in %.2fs", m->identity, dit_now_s() - t0);
  if (m->n_experts && dit_runtime_expert_count(*rt) == 2) fprintf(stderr, " (experts transformer and transformer_2)");
  else if (m->n_experts) fprintf(stderr, " (expert %s)", a->expert ? a->expert : "transformer");
  if (m->topology.world > 1) fprintf(stderr, " (%d ranks, collectives: %s)", m->topology.world, dit_runtime_collectives(*rt));
  fprintf(stderr, "\n");
  dit_offload_stats_t os;
  if (dit_runtime_offload_stats(*rt, &os)) {
    const double mib = 1 << 20;
    fprintf(stderr, "ditrun: offload %s: %d blocks, %.2f MiB resident + %.2f MiB in 2 slots of %.2f MiB of weights; %.2f MiB streamed per forward"
            " (predicted peak %.2f MiB)\n", os.mode, os.blocks, os.resident_bytes / mib, os.slot_bytes / mib, os.total_weight_bytes / mib,
            os.streamed_bytes / mib, os.predicted_peak_bytes / mib);
  }
  uint64_t hb = 0, hbytes = 0;
  dit_bundle_hash_stats(&hb, &hbytes);
  fprintf(stderr, "ditrun: verified %" PRIu64 " blob hashes (%.2f MiB) of the bundle's %zu blobs\n", hb, hbytes / 1048576.0, m->n_blobs);
  print_memory(*rt);
  return DIT_OK;
}

static dit_status_t set_inputs_from(dit_runtime_t *rt, const char *path) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  dit_status_t s = DIT_OK;
  for (size_t i = 0; !s && i < m->n_inputs; i++) {
    dit_tensor_t t = {0};
    s = read_tensor(path, m->io_inputs[i].name, "--inputs", &t);
    if (!s) s = dit_status_annotate(dit_runtime_set_input(rt, m->io_inputs[i].name, &t), "--inputs %s", path);
    free(t.data);
  }
  return s;
}

static int cmd_forward(int argc, char **argv) {
  run_args_t a;
  int rc = parse_run_args(argc, argv, &a, 1, "forward");
  if (rc) return rc;
  if (!a.inputs) return usage_error("%s", "forward needs --inputs IN.safetensors");
  dit_runtime_t *rt = NULL;
  dit_status_t s = load(&a, &rt);
  const dit_manifest_t *m = rt ? dit_runtime_manifest(rt) : NULL;
  if (!s) s = set_inputs_from(rt, a.inputs);
  double t0 = dit_now_s();
  if (!s) s = dit_runtime_forward(rt);
  if (!s) fprintf(stderr, "ditrun: forward %.3fs\n", dit_now_s() - t0);
  /* Every output in one file (the views stay valid until the next forward). */
  dit_st_writer_t *w = NULL;
  if (!s && g_writer) s = dit_st_writer_create(&w);
  for (size_t i = 0; !s && i < m->n_outputs; i++) {
    dit_tensor_t y;
    s = dit_runtime_output(rt, m->io_outputs[i].name, &y);
    if (!s && w) s = dit_st_writer_add(w, m->io_outputs[i].name, y.dtype, y.rank, y.dims, y.data);
  }
  if (!s && w) s = dit_st_writer_write(w, a.out);
  dit_st_writer_destroy(w);
  if (!s && g_writer) printf("wrote %s\n", a.out);
  dit_runtime_destroy(rt);
  return dit_status_report(s, "ditrun");
}

static const dit_runtime_t *g_step_rt; /* the runtime generate runs, for the step lines */
/* The step cache's probe change of the step being reported (teacache, fbcache): the signal their
 * thresholds are compared with, on the step line so a threshold can be chosen from a run. */
static int g_probe_step = -1;
static double g_probe_change;

static void on_probe_line(void *ctx, int step, double change) {
  (void)ctx;
  g_probe_step = step, g_probe_change = change;
}

/* generate --preview: where the latents are shown and how often (runtime/preview.h). */
static struct {
  const char *dir;
  int every;
  const dit_preview_map_t *map;
  const float *latents;
  int rank;
  int64_t dims[DIT_MAX_RANK];
} g_preview;
static double g_loop_t0; /* when the loop started, for the elapsed time and the ETA */

/* A duration as a person reads it: 0.42s, 12.3s, 4m05s, 2h07m. */
static void format_duration(double s, char *out, size_t cap) {
  if (s < 10) snprintf(out, cap, "%.2fs", s);
  else if (s < 60) snprintf(out, cap, "%.1fs", s);
  else if (s < 3600) snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

static void write_preview(int step, int steps) {
  if (!g_preview.dir || ((step + 1) % g_preview.every && step + 1 != steps)) return;
  dit_status_t s = dit_preview_write(g_preview.dir, step + 1, g_preview.map, g_preview.latents, g_preview.rank, g_preview.dims);
  if (s) {
    /* The run goes on: a preview is a view of it, not its result. */
    fprintf(stderr, "ditrun: warning: --preview stopped: %s\n", dit_status_message(s));
    dit_status_free(s);
    g_preview.dir = NULL;
  }
}

static void on_step(void *ctx, int step, int steps, double t, double seconds) {
  const dit_generate_options_t *g = ctx;
  char probe[40] = "", elapsed[24], eta[24], progress[80];
  if (g_probe_step == step) snprintf(probe, sizeof probe, "  probe %.4g", g_probe_change);
  const double spent = dit_now_s() - g_loop_t0;
  format_duration(spent, elapsed, sizeof elapsed);
  format_duration(spent / (step + 1) * (steps - step - 1), eta, sizeof eta);
  snprintf(progress, sizeof progress, "  [elapsed %s, ETA %s]", elapsed, eta);
  if (g->skipped_forwards && g->skipped_forwards[step]) {
    fprintf(stderr, "ditrun: step %d/%d  t=%g%s%s%s  skipped (step cache: %d forward%s saved)  %.3fs%s\n", step + 1, steps, t,
            g->expert_used ? "  expert " : "", g->expert_used ? (g->expert_used[step] ? "transformer_2" : "transformer") : "", probe,
            g->skipped_forwards[step], g->skipped_forwards[step] > 1 ? "s" : "", seconds, progress);
  } else {
    const dit_runtime_swap_stats_t sw = g_step_rt ? dit_runtime_swap_stats(g_step_rt) : (dit_runtime_swap_stats_t){0};
    if (g->expert_used && step > 0 && g->expert_used[step] != g->expert_used[step - 1] && sw.switched)
      fprintf(stderr, "ditrun: step %d/%d  t=%g  expert %s%s  %.3fs  (expert switch %.3f ms: %" PRIu64 " chunks loaded at the switch)%s\n",
              step + 1, steps, t, g->expert_used[step] ? "transformer_2" : "transformer", probe, seconds, sw.switch_ms, sw.chunks_at_switch,
              progress);
    else if (g->expert_used)
      fprintf(stderr, "ditrun: step %d/%d  t=%g  expert %s%s  %.3fs%s\n", step + 1, steps, t,
              g->expert_used[step] ? "transformer_2" : "transformer", probe, seconds, progress);
    else
      fprintf(stderr, "ditrun: step %d/%d  t=%g%s  %.3fs%s\n", step + 1, steps, t, probe, seconds, progress);
  }
  write_preview(step, steps);
}

/* A runtime's options for a stage bundle: the command line's backend, threads and device. Stages
 * run step by step: graphs were measured for the transformer's forward only (the graph flags are
 * the transformer's). */
static dit_runtime_options_t stage_runtime_options(const run_args_t *a) {
  dit_runtime_options_t o;
  memset(&o, 0, sizeof o);
  o.backend = a->backend, o.threads = (int)a->threads, o.device = (int)a->device, o.graph = -1;
  return o;
}

/* --prompt on a bundle with a generate section: each condition's argument (and, under true CFG,
 * its negative_ form from --negative-prompt) from the text encoder stage that makes it (the
 * manifest's stage argument), as its pipeline encodes; refused before any work when a condition
 * has no such stage, or when --out asks for an image and the bundle has no VAE decoder stage. */
static dit_status_t flow_prompt_arguments(const run_args_t *a, const dit_manifest_t *m, int cfg, dit_generate_options_t *g,
                                          dit_named_tensor_t *args, char names[][96]) {
  const dit_manifest_generate_t *gs = &m->generate;
  const char *dir = NULL, *te[DIT_GEN_MAX_CONDITIONS];
  const dit_manifest_stage_t *sts[DIT_GEN_MAX_CONDITIONS];
  DIT_RETURN_IF(gen_resolve_bundle(a->bundle, &dir));
  DIT_RETURN_IF(gen_text_stages(dir, m, "--prompt", sts, te));
  if (a->out && dit_media_kind_of(a->out) != DIT_MEDIA_UNKNOWN) {
    const char *vae = NULL; /* refused before any work when the image cannot be made */
    DIT_RETURN_IF(gen_stage_dir(dir, m, "vae_decoder", "--prompt", &vae));
  }
  const dit_runtime_options_t o = stage_runtime_options(a);
  const int64_t B = m->shape.batch > 0 ? m->shape.batch : 1;
  /* A stage's mask argument comes from the same encode as its embeddings: those first, then the masks. */
  for (int neg = 0; neg <= cfg; neg++) {
    dit_tensor_t masks[DIT_GEN_MAX_CONDITIONS] = {{0}};
    for (int pass = 0; pass < 2; pass++)
      for (size_t i = 0; i < gs->n_conditions; i++) {
        const dit_manifest_stage_t *st = sts[i];
        const int is_mask = !strcmp(st->mask_argument, gs->conditions[i].argument);
        if (is_mask != pass) continue;
        char *nm = names[g->n_args];
        snprintf(nm, 96, "%s%s", neg ? "negative_" : "", gs->conditions[i].argument);
        args[g->n_args].name = nm;
        size_t k = 0; /* the condition of the stage's embeddings */
        while (k < gs->n_conditions && strcmp(gs->conditions[k].argument, st->argument)) k++;
        if (is_mask) {
          if (k == gs->n_conditions || !masks[k].data)
            return DIT_ERR(FAILED_PRECONDITION, "%s: %s comes with the %s stage's %s, which the bundle's generate section does not take",
                           m->identity, nm, st->role, st->argument);
          args[g->n_args++].t = masks[k];
          masks[k].data = NULL;
          continue;
        }
        int n = 0;
        const double t0 = dit_now_s();
        dit_status_t s = gen_encode_prompt(te[i], st, &o, neg ? a->negative_text : a->text, B, &args[g->n_args].t,
                                           st->mask_argument[0] ? &masks[i] : NULL, &n);
        if (s) {
          for (size_t q = 0; q < gs->n_conditions; q++) free(masks[q].data);
          return dit_status_annotate(s, "%s: the %s stage", neg ? "--negative-prompt" : "--prompt", st->role);
        }
        g->n_args++;
        fprintf(stderr, "ditrun: %s (%s) %.2f s: %d tokens -> %s%s%s\n", st->role, st->model_class, dit_now_s() - t0, n, nm,
                st->mask_argument[0] ? " and its mask " : "", st->mask_argument);
      }
    for (size_t q = 0; q < gs->n_conditions; q++) free(masks[q].data);
  }
  return DIT_OK;
}

/* A bundle with a generate section: its schedule and inputs are the pipeline's. Reads the
 * section's arguments from --prompt-embeds, and their negative_ forms from --negative-embeds
 * when true CFG is on. */
static dit_status_t flow_arguments(const run_args_t *a, const dit_manifest_t *m, dit_generate_options_t *g, dit_named_tensor_t *args,
                                   char names[][96]) {
  const dit_manifest_generate_t *gs = &m->generate;
  if (a->have_sampler || a->have_shift)
    return DIT_ERR(INVALID_ARGUMENT, "%s: a %s bundle samples with its pipeline's scheduler config (flow-match Euler%s); it takes no "
                   "%s", a->have_sampler ? "--sampler" : "--shift", m->model_class, gs->schedule.dynamic ? ", shift from the image size" : "",
                   a->have_sampler ? "--sampler" : "--shift");
  if (a->have_guidance_2 || a->image || a->image_latents || a->image_embeds)
    return DIT_ERR(INVALID_ARGUMENT, "%s: only Wan bundles take it", a->have_guidance_2 ? "--guidance-2" : a->image ? "--image"
                   : a->image_latents ? "--image-latents" : "--image-embeds");
  if (a->have_guidance && !gs->guidance_input[0])
    fprintf(stderr, "ditrun: note: --guidance %g ignored: %s has no guidance embedding (true CFG with a negative prompt is --true-cfg)\n",
            a->guidance, m->model_class);
  if (!(a->true_cfg >= 1.0)) return DIT_ERR(INVALID_ARGUMENT, "--true-cfg %g: expected a scale >= 1 (1: off)", a->true_cfg);
  const int cfg = a->true_cfg > 1.0;
  if (cfg && !(a->text ? !!a->negative_text : !!a->negative))
    return DIT_ERR(INVALID_ARGUMENT, "--true-cfg %g: true CFG needs the negative prompt%s", a->true_cfg,
                   a->text ? " (--negative-prompt TEXT)" : "'s embeddings (--negative-embeds)");
  /* As the pipeline (FluxPipeline's do_true_cfg): a negative prompt is read only under true CFG. */
  if (!cfg && a->negative_text)
    return DIT_ERR(INVALID_ARGUMENT, "--negative-prompt: %s runs no negative branch at --true-cfg 1 (%s): add --true-cfg S > 1 for true "
                   "classifier-free guidance, or leave the negative prompt out", m->model_class,
                   gs->guidance_input[0] ? "guidance-distilled, --guidance is embedded in the model" : "no classifier-free guidance");
  if (!cfg && a->negative) fprintf(stderr, "ditrun: note: --true-cfg is 1: no true CFG, negative embeddings unused\n");
  g->guidance = a->have_guidance ? a->guidance : gs->guidance_default;
  g->true_cfg = a->true_cfg;
  if (!a->have_steps) g->steps = (int)gs->default_steps;
  g->args = args;
  if (a->text) return flow_prompt_arguments(a, m, cfg, g, args, names);
  for (int neg = 0; neg <= cfg; neg++)
    for (size_t i = 0; i < gs->n_conditions; i++) {
      char *nm = names[g->n_args];
      snprintf(nm, 96, "%s%s", neg ? "negative_" : "", gs->conditions[i].argument);
      args[g->n_args].name = nm;
      DIT_RETURN_IF(read_arg_tensor(a, neg ? a->negative : a->prompt, nm, neg ? "--negative-embeds" : "--prompt-embeds", &args[g->n_args].t));
      g->n_args++;
    }
  return DIT_OK;
}


/* --step-cache auto: the policy calibrate-cache chose for this bundle and these steps, with its
 * warmup and cooldown and, for teacache, its fitted polynomial. */
static dit_status_t step_cache_auto(const run_args_t *a, gen_job_t *j) {
  dit_generate_options_t *g = &j->g;
  if (!a->cache_profile)
    return DIT_ERR(INVALID_ARGUMENT, "--step-cache auto: the policy comes from a cache profile: add --cache-profile P.json (written by "
                   "ditrun calibrate-cache BUNDLE ... --profile-out P.json)");
  if (a->have_cache_warmup || a->have_cache_cooldown)
    return DIT_ERR(INVALID_ARGUMENT, "%s with --step-cache auto: the profile's threshold was chosen for its own warmup and cooldown; "
                   "calibrate again with %s", a->have_cache_warmup ? "--cache-warmup" : "--cache-cooldown",
                   a->have_cache_warmup ? "--cache-warmup" : "--cache-cooldown");
  dit_cache_profile_t *p = &j->profile;
  DIT_RETURN_IF_ERROR(dit_cache_profile_load(a->cache_profile, p), "--cache-profile");
  const dit_manifest_t *m = dit_runtime_manifest(j->rt);
  if (strcmp(p->bundle, m->identity))
    return DIT_ERR(FAILED_PRECONDITION, "--cache-profile %s: made for bundle %s, this bundle is %s: calibrate this one (ditrun "
                   "calibrate-cache)", a->cache_profile, p->bundle, m->identity);
  if (p->steps != g->steps)
    return DIT_ERR(FAILED_PRECONDITION, "--cache-profile %s: calibrated for %d steps, this run has %d: the policy's threshold is "
                   "chosen for the steps; calibrate with --steps %d", a->cache_profile, p->steps, g->steps, g->steps);
  const int flow = m->generate.present;
  if (strcmp(p->sampler, flow ? "flow-match" : a->sampler) || p->guidance != g->guidance || (!flow && p->shift != g->shift) ||
      (flow && p->true_cfg != g->true_cfg))
    fprintf(stderr, "ditrun: note: --cache-profile %s was calibrated with %s, guidance %g, %s %g; this run differs (sampler %s, guidance %g, "
            "%s %g): the policy may skip more or fewer steps than it did there\n", a->cache_profile, p->sampler, p->guidance,
            flow ? "true_cfg" : "shift", flow ? p->true_cfg : p->shift, flow ? "flow-match" : a->sampler, g->guidance,
            flow ? "true_cfg" : "shift", flow ? g->true_cfg : g->shift);
  g->step_cache = p->policy;
  if (p->policy.mode == DIT_STEP_CACHE_TEACACHE) g->step_cache_rescale = p->rescale, g->step_cache_rescale_k = DIT_CACHE_PROFILE_DEGREE + 1;
  char mode[64];
  fprintf(stderr, "ditrun: step cache auto: %s (W %d, C %d) from %s: pearson %g, lag-1 autocorrelation %g; %.3g of %d steps in "
          "full on the calibration runs\n", dit_step_cache_describe(&g->step_cache, mode, sizeof mode), p->warmup, p->cooldown,
          a->cache_profile, p->pearson, p->lag1, p->forwards, p->steps);
  return DIT_OK;
}

/* --step-cache and its warmup and cooldown into j->g (after the steps are settled); j->skipped: the
 * per-step record the summary line reads, when the cache is on. */
static dit_status_t step_cache_options(const run_args_t *a, gen_job_t *j) {
  dit_generate_options_t *g = &j->g;
  dit_step_cache_options_t *sc = &g->step_cache;
  if (a->cache_profile && !(a->step_cache && !strcmp(a->step_cache, "auto")))
    return DIT_ERR(INVALID_ARGUMENT, "--cache-profile %s: read by --step-cache auto only, found --step-cache %s", a->cache_profile,
                   a->step_cache ? a->step_cache : "off (the default)");
  if (a->step_cache && !strcmp(a->step_cache, "auto")) DIT_RETURN_IF(step_cache_auto(a, j));
  else DIT_RETURN_IF_ERROR(dit_step_cache_parse(a->step_cache ? a->step_cache : "off", sc), "--step-cache");
  if (a->cache_reuse && strcmp(a->cache_reuse, "hidden") && strcmp(a->cache_reuse, "output"))
    return DIT_ERR(INVALID_ARGUMENT, "--cache-reuse %s: expected hidden or output", a->cache_reuse);
  sc->reuse_output = a->cache_reuse && !strcmp(a->cache_reuse, "output");
  if (a->cache_reuse && sc->mode != DIT_STEP_CACHE_TEACACHE && sc->mode != DIT_STEP_CACHE_FBCACHE)
    return DIT_ERR(INVALID_ARGUMENT, "--cache-reuse %s: teacache and fbcache choose where a skipped step reuses; %s reuses at the output",
                   a->cache_reuse, a->step_cache ? a->step_cache : "off");
  if (sc->mode == DIT_STEP_CACHE_OFF) {
    if ((a->have_cache_warmup || a->have_cache_cooldown) && a->generate == 1)
      fprintf(stderr, "ditrun: note: %s ignored: the step cache is off (--step-cache MODE turns it on)\n",
              a->have_cache_warmup ? "--cache-warmup" : "--cache-cooldown");
    return DIT_OK;
  }
  if (a->cache_warmup > g->steps || a->cache_cooldown > g->steps)
    return DIT_ERR(INVALID_ARGUMENT, "%s %lld: expected at most the %d steps",
                   a->cache_warmup > g->steps ? "--cache-warmup" : "--cache-cooldown",
                   (long long)(a->cache_warmup > g->steps ? a->cache_warmup : a->cache_cooldown), g->steps);
  if (!j->profile.runs) {
    sc->warmup = (int)a->cache_warmup;
    sc->cooldown = (int)a->cache_cooldown;
  }
  DIT_RETURN_IF(dit_step_cache_check(sc));
  if (!(j->skipped = calloc((size_t)g->steps, sizeof *j->skipped))) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  g->skipped_forwards = j->skipped;
  g->hidden_reuse = &j->hidden_reuse;
  return DIT_OK;
}

/* One line: the mode, the skipped steps (numbered from 0) and the forwards they saved. */
static void print_step_cache(const dit_generate_options_t *g) {
  char mode[64];
  int n = 0, saved = 0;
  for (int i = 0; i < g->steps; i++) n += g->skipped_forwards[i] > 0, saved += g->skipped_forwards[i];
  fprintf(stderr, "ditrun: step cache %s: skipped %d of %d steps", dit_step_cache_describe(&g->step_cache, mode, sizeof mode), n,
          g->steps);
  for (int i = 0, k = 0; i < g->steps; i++)
    if (g->skipped_forwards[i]) fprintf(stderr, "%s%d", k++ ? " " : " (", i);
  fprintf(stderr, "%s, %d forward%s saved%s\n", n ? ")" : "", saved, saved == 1 ? "" : "s",
          n && g->hidden_reuse && *g->hidden_reuse ? "; skipped steps ran block 0 and the output head on the block stack's kept residual" : "");
}

/* A name ending in .safetensors (any case). */
static int st_name(const char *path) {
  const size_t n = strlen(path), k = strlen(".safetensors");
  return n > k && !strcasecmp(path + n - k, ".safetensors");
}

/* The command line's checks that need no bundle (an exit status, 0 when they pass). */
int gen_usage(const run_args_t *a, gen_job_t *j) {
  if (a->text && a->prompt) return usage_error("%s", "--prompt and --prompt-embeds: give the text or its embeddings, not both");
  if (a->text && a->negative) return usage_error("%s", "--negative-embeds goes with --prompt-embeds; with --prompt give --negative-prompt TEXT");
  if (!a->text && (a->negative_text || a->out_latents || a->out_frames || a->fps))
    return usage_error("%s needs --prompt TEXT (the pipeline's stages)", a->negative_text ? "--negative-prompt" : a->out_latents ? "--out-latents"
                       : a->out_frames ? "--out-frames" : "--fps");
  if (a->out_frames && !st_name(a->out_frames))
    return usage_error("--out-frames %s: the frames tensor goes to FILE.safetensors", a->out_frames);
  if (a->fps && !(a->fps > 0 && a->fps <= 1000)) return usage_error("%s", "--fps: expected a rate in (0, 1000]");
  if (a->text && a->out && dit_media_kind_of(a->out) == DIT_MEDIA_UNKNOWN && !st_name(a->out))
    return usage_error("--out %s: with --prompt, the decoded frames as FILE.mp4, FILE.png or FILE.safetensors (tensor frames)", a->out);
  if (!a->text && a->out && dit_media_kind_of(a->out) != DIT_MEDIA_UNKNOWN)
    return usage_error("--out %s: a video or image comes from the VAE stage, which runs after --prompt TEXT; --prompt-embeds writes "
                       "latents (FILE.safetensors; ditrun frames writes decoded frames as MP4 or PNG)", a->out);
  if (!a->prompt && !a->text)
    return usage_error("%s needs --prompt TEXT or --prompt-embeds P.safetensors", a->generate == 2 ? "calibrate-cache" : "generate");
  if (!!a->init == !!a->have_seed)
    return usage_error("%s needs exactly one of --init-latents and --seed", a->generate == 2 ? "calibrate-cache" : "generate");
  dit_generate_options_t *g = &j->g;
  if (dit_sampler_kind_parse(a->sampler, &g->sampler)) return usage_error("--sampler %s: expected unipc or euler", a->sampler);
  if (a->steps < 1 || a->steps > 10000) return usage_error("%s", "--steps: expected 1..10000");
  g->steps = (int)a->steps;
  g->guidance = a->guidance;
  g->shift = a->shift;
  g->on_step = on_step;
  g->on_probe = on_probe_line;
  g->ctx = g;
  if (a->expert) return usage_error("%s", "generate runs the bundle's experts as the pipeline does: --expert is for forward");
  return 0;
}

/* A job for generate or calibrate-cache with the command line's bundle-free checks passed (an exit
 * status, 0 with *out the caller's). */
static int gen_open(const run_args_t *a, gen_job_t **out) {
  gen_job_t *j = calloc(1, sizeof *j);
  if (!j) return dit_status_report(DIT_ERR(RESOURCE_EXHAUSTED, "out of memory"), "ditrun");
  int rc = gen_usage(a, j);
  if (rc) free(j);
  else *out = j;
  return rc;
}

dit_status_t gen_load(const run_args_t *a, gen_job_t *j) { return load(a, &j->rt); }

/* --prompt: the text encoder stage makes the embeddings --prompt-embeds would give, and the
 * negative prompt's (default "", as WanPipeline encodes it) when guidance is on. */
static dit_status_t gen_prompt_stage(const run_args_t *a, gen_job_t *j) {
  const char *dir = NULL, *te = NULL;
  const dit_manifest_t *m = dit_runtime_manifest(j->rt);
  DIT_RETURN_IF(gen_resolve_bundle(a->bundle, &dir));
  DIT_RETURN_IF(gen_stage_dir(dir, m, "text_encoder", "--prompt", &te));
  if (a->out && dit_media_kind_of(a->out) != DIT_MEDIA_UNKNOWN) {
    const char *vae = NULL; /* refused before any work when the frames cannot be made */
    DIT_RETURN_IF(gen_stage_dir(dir, m, "vae_decoder", "--prompt", &vae));
  }
  const dit_runtime_options_t o = stage_runtime_options(a);
  const int64_t B = m->shape.batch > 0 ? m->shape.batch : 1;
  int n = 0;
  double t0 = dit_now_s();
  DIT_RETURN_IF_ERROR(gen_encode_prompt(te, dit_manifest_find_stage(m, "text_encoder"), &o, a->text, B, &j->prompt, NULL, &n), "--prompt: the text encoder stage");
  int nn = -1;
  if (j->g.guidance > 1.0 || a->negative_text)
    DIT_RETURN_IF_ERROR(gen_encode_prompt(te, dit_manifest_find_stage(m, "text_encoder"), &o, a->negative_text ? a->negative_text : "", B, &j->neg, NULL, &nn), "--negative-prompt: the text encoder stage");
  if (nn >= 0) fprintf(stderr, "ditrun: text encoder %.2f s (%d and %d tokens of %lld)\n", dit_now_s() - t0, n, nn, (long long)j->prompt.dims[1]);
  else fprintf(stderr, "ditrun: text encoder %.2f s (%d tokens of %lld)\n", dit_now_s() - t0, n, (long long)j->prompt.dims[1]);
  if (nn >= 0 && j->g.guidance <= 1.0)
    fprintf(stderr, "ditrun: note: --guidance %g <= 1: no classifier-free guidance, the negative prompt unused\n", j->g.guidance);
  return DIT_OK;
}

/* --image: the picture through the bundle's VAE encoder (and image encoder) stages into the image
 * condition. */
static dit_status_t gen_image_stage(const run_args_t *a, gen_job_t *j) {
  const char *dir = NULL;
  DIT_RETURN_IF(gen_resolve_bundle(a->bundle, &dir));
  dit_image_t im = {0};
  DIT_RETURN_IF_ERROR(dit_image_read(a->image, &im), "--image");
  const dit_runtime_options_t o = stage_runtime_options(a);
  dit_generate_options_t *g = &j->g;
  dit_status_t s = gen_encode_image(dir, dit_runtime_manifest(j->rt), &o, &im, &g->condition.image_latents, &g->condition.image_embeds);
  dit_image_free(&im);
  snprintf(j->il_what, sizeof j->il_what, "--image %s", a->image);
  snprintf(j->ie_what, sizeof j->ie_what, "--image %s", a->image);
  g->condition.image_latents_what = j->il_what;
  g->condition.image_embeds_what = j->ie_what;
  return s;
}

/* The decoded frames as tensor 'frames' in a safetensors file. */
static dit_status_t write_frames(const char *path, const dit_tensor_t *frames) {
  dit_st_writer_t *w = NULL;
  dit_status_t s = dit_st_writer_create(&w);
  if (!s) s = dit_st_writer_add(w, "frames", frames->dtype, frames->rank, frames->dims, frames->data);
  if (!s) s = dit_st_writer_write(w, path);
  dit_st_writer_destroy(w);
  return s;
}

/* The final latents as tensor 'latents' at path. */
static dit_status_t write_latents(gen_job_t *j, const char *path) {
  dit_st_writer_t *w = NULL;
  dit_status_t s = gen_output(j, &w);
  if (!s) s = dit_st_writer_write(w, path);
  dit_st_writer_destroy(w);
  if (!s) printf("wrote %s\n", path);
  return s;
}

/* --prompt's output: the final latents through the VAE decoder stage, written as --out names
 * (an MP4, a PNG, or the frames tensor in safetensors), --out-frames (the same frames, the one
 * decode's: a video and its float frames for comparison without a second run) and --out-latents. */
dit_status_t gen_frames_output(const run_args_t *a, gen_job_t *j) {
  if (!a->out) return write_latents(j, a->out_latents); /* --out-latents alone: no decode */
  const char *dir = NULL;
  DIT_RETURN_IF(gen_resolve_bundle(a->bundle, &dir));
  gen_decoders_t dec;
  DIT_RETURN_IF(gen_decoder_stages(dir, dit_runtime_manifest(j->rt), "--prompt --out", &dec));
  const dit_runtime_options_t o = stage_runtime_options(a);
  dit_tensor_t lat = j->lat, frames;
  lat.data = j->latents;
  double t0 = dit_now_s();
  gen_decode_stats_t ds;
  DIT_RETURN_IF_ERROR(gen_decode_latents(&dec, &o, &lat, &frames, &ds), "the VAE decoder stage");
  gen_decode_report(dit_now_s() - t0, &ds);
  dit_status_t s = DIT_OK;
  if (dit_media_kind_of(a->out) != DIT_MEDIA_UNKNOWN) {
    dit_media_options_t mo = {.fps = a->fps};
    t0 = dit_now_s();
    s = dit_media_write(a->out, &frames, &mo);
    if (!s) fprintf(stderr, "ditrun: encode %s %.2f s\n", a->out, dit_now_s() - t0);
  } else {
    s = write_frames(a->out, &frames);
  }
  if (!s && a->out_frames) {
    /* Timed on its own: the frames file is an extra the video alone would not cost. */
    t0 = dit_now_s();
    s = write_frames(a->out_frames, &frames);
    if (!s) fprintf(stderr, "ditrun: out-frames %.2f s\n", dit_now_s() - t0);
    if (!s) printf("wrote %s\n", a->out_frames);
  }
  free(frames.data);
  if (!s && a->out_latents) s = write_latents(j, a->out_latents);
  return s;
}

/* Reads the loop's inputs: the experts' guidance, a generate section's arguments, the step
 * cache, the image condition, the embeddings, --init-latents' noise. */
dit_status_t gen_inputs(const run_args_t *a, gen_job_t *j) {
  dit_generate_options_t *g = &j->g;
  dit_status_t s = DIT_OK;
  /* Both experts are loaded: transformer_2 takes over below the boundary. */
  if (dit_runtime_expert_count(j->rt) == 2) {
    if (!(j->used = calloc((size_t)g->steps, sizeof *j->used))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    g->guidance_2 = a->have_guidance_2 ? a->guidance_2 : a->guidance;
    g->expert_used = j->used;
  } else if (a->have_guidance_2) {
    s = DIT_ERR(INVALID_ARGUMENT, "--guidance-2 %g: the bundle has one transformer (no transformer_2 to guide)", a->guidance_2);
  }
  const int flow = !s && dit_runtime_manifest(j->rt)->generate.present;
  if (flow) s = flow_arguments(a, dit_runtime_manifest(j->rt), g, j->args, j->arg_names);
  else if (!s && a->have_true_cfg)
    s = DIT_ERR(INVALID_ARGUMENT, "--true-cfg %g: a Wan bundle's classifier-free guidance is --guidance", a->true_cfg);
  if (!s) s = step_cache_options(a, j);
  if (!s && a->reuse_on) {
    g->reuse_on = 1;
    g->reuse = (dit_ditango_options_t){.ratio = a->reuse_ratio, .eps_local = a->reuse_eps_local,
                                       .warmup = a->reuse_warmup > 1000000 ? 1000000 : (int)a->reuse_warmup,
                                       .diagnostic = a->reuse_diagnostic};
    g->reuse_report = a->reuse_report;
    g->reuse_counts = j->reuse_counts;
    s = dit_ditango_check(&g->reuse);
  }
  if (!s) s = dit_generate_latents_shape(dit_runtime_manifest(j->rt), &j->lat.rank, j->lat.dims);
  if (!s && a->image && (a->image_latents || a->image_embeds))
    s = DIT_ERR(INVALID_ARGUMENT, "--image %s with %s: give the image, or what its stages make of it, not both", a->image,
                a->image_latents ? "--image-latents" : "--image-embeds");
  if (!s && a->image) s = gen_image_stage(a, j);
  if (!s && a->image_latents) {
    snprintf(j->il_what, sizeof j->il_what, "--image-latents %s", a->image_latents);
    g->condition.image_latents_what = j->il_what;
    s = read_arg_tensor(a, a->image_latents, "image_latents", "--image-latents", &g->condition.image_latents);
  }
  if (!s && a->image_embeds) {
    snprintf(j->ie_what, sizeof j->ie_what, "--image-embeds %s", a->image_embeds);
    g->condition.image_embeds_what = j->ie_what;
    s = read_arg_tensor(a, a->image_embeds, "image_embeds", "--image-embeds", &g->condition.image_embeds);
  }
  if (!s && !flow && a->text) s = gen_prompt_stage(a, j);
  else if (!s && !flow) s = read_arg_tensor(a, a->prompt, "prompt_embeds", "--prompt-embeds", &j->prompt);
  if (!s && !flow && a->negative) s = read_arg_tensor(a, a->negative, "negative_prompt_embeds", "--negative-embeds", &j->neg);
  if (!s && !flow && a->negative && g->guidance <= 1.0)
    fprintf(stderr, "ditrun: note: --guidance %g <= 1: no classifier-free guidance, negative embeddings unused\n", g->guidance);
  if (!s) {
    j->lat.dtype = DIT_F32;
    j->n = (size_t)dit_tensor_numel(&j->lat);
    j->latents = malloc(j->n * sizeof *j->latents + 1);
    if (!j->latents) s = DIT_ERR(RESOURCE_EXHAUSTED, "latents: out of memory");
  }
  if (!s && a->init) {
    dit_tensor_t x = {0};
    const dit_tensor_t *lat = &j->lat;
    s = read_tensor(a->init, "init_latents", "--init-latents", &x);
    int same = !s && x.rank == lat->rank;
    for (int i = 0; same && i < x.rank; i++) same = x.dims[i] == lat->dims[i];
    if (!s && !same) {
      char want[160] = "[", got[160] = "[";
      for (int i = 0; i < lat->rank; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)lat->dims[i]);
      for (int i = 0; i < x.rank && i < DIT_MAX_RANK; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)x.dims[i]);
      s = DIT_ERR(INVALID_ARGUMENT, "--init-latents %s: tensor 'init_latents' has shape %s], the bundle's latents are %s]", a->init, got, want);
    }
    if (!s && !(j->init = malloc(j->n * sizeof *j->init + 1))) s = DIT_ERR(RESOURCE_EXHAUSTED, "latents: out of memory");
    if (!s && dit_convert(j->init, DIT_F32, x.data, x.dtype, j->n))
      s = DIT_ERR(INVALID_ARGUMENT, "--init-latents %s: 'init_latents' is not a float tensor", a->init);
    free(x.data);
  }
  return s;
}

/* Loads the bundle and reads the loop's inputs. */
static dit_status_t gen_prepare(const run_args_t *a, gen_job_t *j) {
  DIT_RETURN_IF(gen_load(a, j));
  return gen_inputs(a, j);
}

/* The initial noise: --init-latents', else seed's. */
void gen_noise(const gen_job_t *j, uint64_t seed) {
  if (j->init) memcpy(j->latents, j->init, j->n * sizeof *j->latents);
  else dit_rng_normal(seed, 0, j->latents, j->n);
}

dit_status_t gen_run(gen_job_t *j, const run_args_t *a) {
  g_step_rt = j->rt;
  g_loop_t0 = dit_now_s();
  return dit_runtime_generate(j->rt, &j->g, &j->prompt, j->neg.data ? &j->neg : NULL, j->latents);
}

dit_status_t gen_output(gen_job_t *j, dit_st_writer_t **out) {
  j->lat.data = j->latents;
  DIT_RETURN_IF(dit_st_writer_create(out));
  return dit_st_writer_add(*out, "latents", j->lat.dtype, j->lat.rank, j->lat.dims, j->lat.data);
}

void gen_release_inputs(gen_job_t *j) {
  free(j->latents);
  free(j->init);
  free(j->prompt.data);
  free(j->neg.data);
  free(j->g.condition.image_latents.data);
  free(j->g.condition.image_embeds.data);
  for (size_t i = 0; i < j->g.n_args; i++) free(j->args[i].t.data);
  free(j->used);
  free(j->skipped);
  dit_cache_profile_free(&j->profile);
}

static void gen_release(gen_job_t *j) {
  gen_release_inputs(j);
  dit_runtime_destroy(j->rt);
}

static int wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  return 0;
}

/* --preview DIR: the bundle's latent-to-RGB map (or the fallback) checked against the latents, and
 * DIR made, before the first step. */
static dit_status_t preview_setup(const run_args_t *a, const gen_job_t *j) {
  const char *dir = NULL;
  DIT_RETURN_IF(gen_resolve_bundle(a->bundle, &dir));
  const dit_runtime_options_t so = stage_runtime_options(a);
  const dit_preview_map_t *map = gen_preview_map(dir, dit_runtime_manifest(j->rt), &so);
  DIT_RETURN_IF(dit_preview_check(map, j->lat.rank, j->lat.dims));
  DIT_RETURN_IF_ERROR(dit_mkdirs(a->preview, 0755), "--preview");
  g_preview.dir = a->preview, g_preview.every = (int)a->preview_every, g_preview.map = map, g_preview.latents = j->latents;
  g_preview.rank = j->lat.rank;
  memcpy(g_preview.dims, j->lat.dims, sizeof g_preview.dims);
  if (!map && !dit_manifest_find_stage(dit_runtime_manifest(j->rt), "vae_decoder"))
    fprintf(stderr, "ditrun: note: --preview: the bundle has no VAE decoder stage to fit a latent-to-RGB map on; previews show "
            "latent channels 0-2, each scaled by its own range\n");
  return DIT_OK;
}

static int cmd_generate(int argc, char **argv) {
  if (wants_help(argc, argv)) return fputs(kUsage, stdout), 0;
  run_args_t a;
  int rc = parse_run_args(argc, argv, &a, 1, "generate");
  if (rc) return rc;
  gen_job_t *j;
  if ((rc = gen_open(&a, &j))) return rc;
  dit_status_t s = gen_prepare(&a, j);
  if (!s) gen_noise(j, (uint64_t)a.seed);
  if (!s && a.preview && g_writer) s = preview_setup(&a, j);
  if (!g_writer) j->g.reuse_report = NULL; /* every process decides alike (the same report): rank 0 writes it */
  double t0 = dit_now_s();
  if (!s) s = gen_run(j, &a);
  if (!s) {
    fprintf(stderr, "ditrun: generate %d steps in %.3fs\n", j->g.steps, dit_now_s() - t0);
    if (j->skipped) print_step_cache(&j->g);
    if (j->g.reuse_on) {
      fprintf(stderr, "ditrun: reuse ditango R %g: computed %" PRId64 " of %" PRId64 " remote attention states after %d warm-up steps\n",
              j->g.reuse.ratio, j->reuse_counts[0], j->reuse_counts[1], j->g.reuse.warmup);
      print_memory(j->rt); /* again, with the anchor copies the first step allocated */
    }
    const dit_runtime_swap_stats_t sw = dit_runtime_swap_stats(j->rt);
    if (sw.switched) {
      fprintf(stderr, "ditrun: expert swap: %.2f MiB of transformer_2's resident set, %" PRIu64 " chunks loaded over %d forwards before "
              "the switch, %" PRIu64 " at the switch (%.3f ms)\n", sw.bytes / 1048576.0, sw.chunks_before, sw.forwards, sw.chunks_at_switch,
              sw.switch_ms);
      print_memory(j->rt);
    }
    dit_st_writer_t *w = NULL;
    if (g_writer && a.text) s = gen_frames_output(&a, j);
    else if (g_writer) s = gen_output(j, &w);
    if (!s && g_writer && !a.text) s = dit_st_writer_write(w, a.out);
    dit_st_writer_destroy(w);
  }
  if (!s && g_writer && a.out) printf("wrote %s\n", a.out);
  gen_release(j);
  free(j);
  return dit_status_report(s, "ditrun");
}

/* ---- calibrate-cache ---- */

/* What a calibration run records per step through generate's callbacks. */
typedef struct calib_rec {
  dit_generate_options_t *g;
  dit_cache_profile_t *p;
  int run;
  float *prev; /* P_{i-1} */
  int have_prev;
  size_t n;
} calib_rec_t;

static void calib_on_step(void *ctx, int step, int steps, double t, double seconds) {
  calib_rec_t *r = ctx;
  on_step(r->g, step, steps, t, seconds);
}

static void calib_on_probe(void *ctx, int step, double change) {
  calib_rec_t *r = ctx;
  if (step >= 0 && step < r->p->steps) r->p->d[(size_t)r->run * (size_t)r->p->steps + (size_t)step] = change;
  on_probe_line(NULL, step, change);
}

static void calib_on_prediction(void *ctx, int step, const float *prediction, size_t n, int computed) {
  calib_rec_t *r = ctx;
  (void)computed; /* teacache:0 computes every step */
  if (step < 0 || step >= r->p->steps || n != r->n) return;
  if (r->have_prev) {
    const double o = dit_step_cache_relative_l1(r->prev, prediction, n);
    r->p->o[(size_t)r->run * (size_t)r->p->steps + (size_t)step] = isfinite(o) ? o : NAN;
  }
  memcpy(r->prev, prediction, n * sizeof *prediction);
  r->have_prev = 1;
}

static int cmd_calibrate_cache(int argc, char **argv) {
  if (wants_help(argc, argv)) return fputs(kUsage, stdout), 0;
  const char *profile_out = NULL;
  double target = 2.0, runs_d = 1;
  int kept = 0, rc = 0;
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) return dit_status_report(DIT_ERR(RESOURCE_EXHAUSTED, "out of memory"), "ditrun");
  for (int i = 0; !rc && i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--profile-out")) {
      if (!(profile_out = v)) rc = usage_error("%s needs a value", argv[i]);
      i++;
    } else if (!strcmp(argv[i], "--target-speedup")) rc = parse_num(argv[i], v, &target), i++;
    else if (!strcmp(argv[i], "--runs")) rc = parse_num(argv[i], v, &runs_d), i++;
    else if (!strcmp(argv[i], "--step-cache") || !strcmp(argv[i], "--cache-profile"))
      rc = usage_error("%s: calibrate-cache runs exact generates (the probe observed, nothing skipped) and writes the profile "
                       "--step-cache auto reads", argv[i]);
    else rest[kept++] = argv[i];
  }
  run_args_t a;
  if (!rc) rc = parse_run_args(kept, rest, &a, 0, "calibrate-cache");
  free(rest);
  if (rc) return rc;
  if (!profile_out) return usage_error("%s", "calibrate-cache needs --profile-out P.json");
  if (!(target > 1 && target <= 1e6)) return usage_error("%s", "--target-speedup: expected a number in (1, 1000000] (the forwards: steps / S)");
  if (!(runs_d >= 1 && runs_d <= DIT_CACHE_PROFILE_MAX_RUNS && runs_d == (int)runs_d))
    return usage_error("%s", "--runs: expected an integer in 1..64 (calibration runs, seeds S..S+K-1)");
  const int runs = (int)runs_d;
  if (runs > 1 && a.init) return usage_error("%s", "--runs > 1 needs --seed S (run k takes seed S + k): --init-latents is one noise");
  gen_job_t *j;
  if ((rc = gen_open(&a, &j))) return rc;
  dit_status_t s = gen_prepare(&a, j);
  /* teacache at T = 0 skips nothing (the exact run, bit for bit) and reports the probe's change. */
  dit_generate_options_t *g = &j->g;
  dit_cache_profile_t p = {0};
  calib_rec_t rec = {g, &p, 0, NULL, 0, j->n};
  if (!s && dit_runtime_manifest(j->rt)->topology.world != 1)
    s = DIT_ERR(UNIMPLEMENTED, "calibrate-cache: the probe is read between plan steps of one rank; this bundle has %d ranks: "
                "calibrate a single-rank bundle", dit_runtime_manifest(j->rt)->topology.world);
  if (!s) {
    const dit_manifest_t *m = dit_runtime_manifest(j->rt);
    g->step_cache = (dit_step_cache_options_t){.mode = DIT_STEP_CACHE_TEACACHE, .threshold = 0, .warmup = (int)a.cache_warmup,
                                               .cooldown = (int)a.cache_cooldown};
    s = dit_step_cache_check(&g->step_cache);
    if (!s && (a.cache_warmup > g->steps || a.cache_cooldown > g->steps))
      s = DIT_ERR(INVALID_ARGUMENT, "--cache-warmup %lld / --cache-cooldown %lld: expected at most the %d steps", (long long)a.cache_warmup,
                  (long long)a.cache_cooldown, g->steps);
    snprintf(p.bundle, sizeof p.bundle, "%s", m->identity);
    snprintf(p.family, sizeof p.family, "%s", m->family);
    snprintf(p.sampler, sizeof p.sampler, "%s", m->generate.present ? "flow-match" : a.sampler);
    p.shift = m->generate.present ? 0 : g->shift;
    p.guidance = g->guidance, p.true_cfg = m->generate.present ? g->true_cfg : 1;
    p.steps = g->steps, p.warmup = (int)a.cache_warmup, p.cooldown = (int)a.cache_cooldown, p.target_speedup = target;
    if (!s) s = dit_cache_profile_alloc(&p, runs);
    if (!s && !(rec.prev = malloc(j->n * sizeof *rec.prev + 1))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    g->ctx = &rec, g->on_step = calib_on_step, g->on_probe = calib_on_probe, g->on_prediction = calib_on_prediction;
  }
  for (int r = 0; !s && r < runs; r++) {
    const uint64_t seed = (uint64_t)a.seed + (uint64_t)r;
    if (a.init) fprintf(stderr, "ditrun: calibration run %d of %d (--init-latents)\n", r + 1, runs);
    else fprintf(stderr, "ditrun: calibration run %d of %d (seed %" PRIu64 ")\n", r + 1, runs, seed);
    p.seeds[r] = a.init ? 0 : seed;
    rec.run = r, rec.have_prev = 0;
    gen_noise(j, seed);
    const double t0 = dit_now_s();
    s = dit_status_annotate(gen_run(j, &a), "calibration run %d of %d", r + 1, runs);
    if (!s) fprintf(stderr, "ditrun: calibration run %d of %d: %d steps in %.3fs\n", r + 1, runs, g->steps, dit_now_s() - t0);
  }
  if (!s) s = dit_cache_profile_fit(&p);
  if (!s && g_writer) s = dit_status_annotate(dit_cache_profile_write(profile_out, &p), "--profile-out");
  if (!s) {
    char mode[64];
    printf("calibrate-cache: %d run%s of %d steps, %d points\n", runs, runs == 1 ? "" : "s", p.steps, p.points);
    printf("  rescale (degree %d, highest first):", DIT_CACHE_PROFILE_DEGREE);
    for (int k = 0; k <= DIT_CACHE_PROFILE_DEGREE; k++) printf(" %.6g", p.rescale[k]);
    printf("\n  pearson of (max(poly(d), 0), o): %.4f (teacache when >= %.1f)\n", p.pearson, DIT_CACHE_GATE_PEARSON);
    printf("  lag-1 autocorrelation of o: %.4f (delta when >= %.1f)\n", p.lag1, DIT_CACHE_GATE_LAG1);
    printf("  gate: %s (W %d, C %d): %.3g of %d steps in full on the calibration runs (target speedup %g: %.3g)\n",
           dit_step_cache_describe(&p.policy, mode, sizeof mode), p.warmup, p.cooldown, p.forwards, p.steps, target, p.steps / target);
    if (g_writer) printf("wrote %s\n", profile_out);
  }
  free(rec.prev);
  dit_cache_profile_free(&p);
  gen_release(j);
  free(j);
  return dit_status_report(s, "ditrun");
}

typedef struct cmp_summary {
  int verbose;
  double limit;
  int failures;
  struct {
    const char *op;
    double worst, min_cos;
    size_t count;
  } ops[DIT_OP_COUNT];
  int n_ops;
} cmp_summary_t;

static void on_diff(void *ctx, const dit_step_diff_t *d) {
  cmp_summary_t *c = ctx;
  /* Codes are judged by their grid: one step apart passes whatever the limit. */
  const double limit = c->limit >= 0 && d->code_step > c->limit ? d->code_step : c->limit;
  int bad = limit >= 0 && !(d->max_rel <= limit);
  c->failures += bad;
  if (c->verbose || bad)
    printf("step %4zu %-15s %-32s max_rel_err %.3e cosine %.8f%s\n", d->step, d->op, d->value, d->max_rel, d->cosine,
           bad ? "  FAIL" : "");
  int k = 0;
  while (k < c->n_ops && strcmp(c->ops[k].op, d->op)) k++;
  if (k == c->n_ops) {
    c->ops[k].op = d->op, c->ops[k].worst = 0, c->ops[k].min_cos = 1, c->ops[k].count = 0;
    c->n_ops++;
  }
  if (!(d->max_rel <= c->ops[k].worst)) c->ops[k].worst = d->max_rel;
  if (d->cosine < c->ops[k].min_cos) c->ops[k].min_cos = d->cosine;
  c->ops[k].count++;
}

static int cmd_compare(int argc, char **argv) {
  run_args_t a;
  int rc = parse_run_args(argc, argv, &a, 0, "compare");
  if (rc) return rc;
  if (!a.inputs) return usage_error("%s", "compare needs --inputs IN.safetensors");
  dit_runtime_t *test = NULL, *ref = NULL;
  dit_status_t s = load(&a, &test);
  if (!s) {
    run_args_t r = a;
    r.backend = a.reference;
    s = load(&r, &ref);
  }
  if (!s) s = set_inputs_from(test, a.inputs);
  if (!s) s = set_inputs_from(ref, a.inputs);
  cmp_summary_t c;
  memset(&c, 0, sizeof c);
  c.verbose = a.verbose;
  c.limit = a.max_rel;
  if (!s) s = dit_runtime_compare(test, ref, a.accumulate, on_diff, &c);
  if (!s) {
    printf("%-16s %6s %14s %14s   (%s vs %s, %s)\n", "op", "steps", "max_rel_err", "min_cosine", a.backend ? a.backend : "bundle target",
           a.reference, a.accumulate ? "errors accumulate" : "each step on reference inputs");
    for (int k = 0; k < c.n_ops; k++)
      printf("%-16s %6zu %14.3e %14.8f\n", c.ops[k].op, c.ops[k].count, c.ops[k].worst, c.ops[k].min_cos);
    if (c.failures) s = DIT_ERR(DATA_LOSS, "%d step outputs exceed --max-rel %g", c.failures, a.max_rel);
  }
  dit_runtime_destroy(test);
  dit_runtime_destroy(ref);
  return dit_status_report(s, "ditrun");
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Times whole forwards (median of --iters after two warm-ups), then one forward step by step
 * with a synchronization after each step for the time split by op (GEMM, attention, other). */
/* bench -v: the profiled forward's steps grouped by op and operand shapes (a GEMM's [M, K] x
 * [N, K]), slowest group first: where the time goes, shape by shape. */
typedef struct step_group {
  char key[160];
  int count;
  double s;
} step_group_t;

static int cmp_group(const void *a, const void *b) {
  const double x = ((const step_group_t *)a)->s, y = ((const step_group_t *)b)->s;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void print_step_groups(const dit_plan_t *p, const double *sec) {
  step_group_t *g = calloc(p->n_steps ? p->n_steps : 1, sizeof *g);
  size_t n = 0;
  for (size_t i = 0; g && i < p->n_steps; i++) {
    const dit_plan_step_t *st = &p->steps[i];
    char key[160];
    size_t len = (size_t)snprintf(key, sizeof key, "%s", dit_op_info(st->kind)->name);
    for (int j = 0; j < st->n_in && j < 2 && len < sizeof key; j++) {
      const dit_plan_value_t *v = &p->values[st->in[j]];
      len += (size_t)snprintf(key + len, sizeof key - len, " %s[", dit_dtype_name(v->dtype));
      for (int d = 0; d < v->rank && len < sizeof key; d++)
        len += (size_t)snprintf(key + len, sizeof key - len, d ? ",%lld" : "%lld", (long long)v->dims[d]);
      if (len < sizeof key) len += (size_t)snprintf(key + len, sizeof key - len, "]");
    }
    size_t k = 0;
    while (k < n && strcmp(g[k].key, key)) k++;
    if (k == n) snprintf(g[n++].key, sizeof g[0].key, "%s", key);
    g[k].count++;
    g[k].s += sec[i];
  }
  if (g) qsort(g, n, sizeof *g, cmp_group);
  for (size_t k = 0; g && k < n; k++) printf("steps %5d %10.3f ms  %s\n", g[k].count, 1e3 * g[k].s, g[k].key);
  free(g);
}

static int cmd_bench(int argc, char **argv) {
  run_args_t a;
  int rc = parse_run_args(argc, argv, &a, 0, "bench");
  if (rc) return rc;
  if (!a.inputs) return usage_error("%s", "bench needs --inputs IN.safetensors");
  int iters = a.steps == 50 ? 10 : (int)a.steps; /* --steps doubles as the iteration count */
  if (iters < 1) iters = 1;
  dit_runtime_t *rt = NULL;
  dit_status_t s = load(&a, &rt);
  if (!s) s = set_inputs_from(rt, a.inputs);
  double *t = calloc((size_t)iters, sizeof *t);
  for (int64_t i = 0; !s && i < a.warmup; i++) s = dit_runtime_forward(rt);
  for (int i = 0; !s && i < iters; i++) {
    double t0 = dit_now_s();
    s = dit_runtime_forward(rt);
    t[i] = dit_now_s() - t0;
  }
  double split[4] = {0, 0, 0, 0}, total = 0, per_kind[DIT_OP_COUNT] = {0};
  dit_offload_stats_t os;
  if (!s && dit_runtime_offload_stats(rt, &os)) {
    double stall = 0, host = 0;
    /* Only a forced graph replays an offloaded forward: auto runs offload step by step. */
    dit_status_t b = a.graph > 0 ? NULL : dit_runtime_offload_breakdown(rt, &stall, &host);
    if (a.graph > 0) printf("offload %s: stalls are not timed inside a replayed CUDA graph (run without --cuda-graph)\n", os.mode);
    else if (!b) printf("offload %s: prefetch_stall_ms %.3f engine_host_ms %.3f streamed_mib %.1f (last forward)\n", os.mode, stall, host,
                   os.streamed_bytes / 1048576.0);
    else printf("offload %s: no breakdown (%s)\n", os.mode, dit_status_message(b));
    dit_status_free(b);
  }
  const dit_plan_t *plan = dit_runtime_plan(rt);
  double *per_step = !s && a.verbose && !a.no_split ? calloc(plan->n_steps ? plan->n_steps : 1, sizeof *per_step) : NULL;
  if (!s && !a.no_split)
    s = (a.split_in_flight ? dit_runtime_forward_profiled_in_flight : dit_runtime_forward_profiled)(rt, per_kind, per_step);
  for (int k = 0; !s && k < DIT_OP_COUNT; k++) {
    /* FP8 attention's operand quantizers count as attention: they exist only for it. */
    const int attn = k == DIT_OP_ATTENTION || k == DIT_OP_ATTENTION_FP8 || k == DIT_OP_ATTN_QUANT || k == DIT_OP_ATTN_QUANT_VT ||
                     k == DIT_OP_ATTN_VMAX;
    split[k == DIT_OP_LINEAR || k == DIT_OP_LINEAR_FP8 ? 0 : attn ? 1 : dit_op_is_collective((dit_op_kind_t)k) ? 3 : 2] += per_kind[k];
    total += per_kind[k];
  }
  if (!s) {
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    const double flops = dit_runtime_plan(rt)->work.flops;
    printf("forward_ms_median %.3f\nforward_ms_min %.3f\niters %d\ntflops_effective %.1f\n", 1e3 * t[iters / 2], 1e3 * t[0],
           iters, flops / t[iters / 2] / 1e12);
    if (!a.no_split) {
      printf("split_ms gemm %.3f attention %.3f other %.3f collectives %.3f (%s total %.3f)\n", 1e3 * split[0], 1e3 * split[1],
             1e3 * split[2], 1e3 * split[3], a.split_in_flight ? "in-flight" : "step-synchronized", 1e3 * total);
      printf("by_op_ms");
      for (int k = 0; k < DIT_OP_COUNT; k++)
        if (per_kind[k] > 0) printf(" %s=%.3f", dit_op_info((dit_op_kind_t)k)->name, 1e3 * per_kind[k]);
      printf("\n");
      if (per_step) print_step_groups(plan, per_step);
    }
  }
  free(per_step);
  free(t);
  dit_runtime_destroy(rt);
  return dit_status_report(s, "ditrun");
}

/* One calibration shape: the bundle's FLOPs, steps and collectives per forward (its manifest),
 * the median forward time, and the collectives' share of it (their share of a forward timed
 * step by step, where each step's time is its own). */
typedef struct calib_point {
  double flops, steps, colls, coll_bytes;
  double forward_s, coll_s;
  char identity[DIT_HASH_HEX], weights[DIT_HASH_HEX];
} calib_point_t;


static dit_status_t calib_measure(dit_runtime_t *rt, const char *bundle, const char *inputs, int iters, calib_point_t *p) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  dit_offload_stats_t os;
  if (dit_runtime_offload_stats(rt, &os))
    return DIT_ERR(INVALID_ARGUMENT, "%s: calibrate with a bundle compiled without --offload (its forward would include copies)", bundle);
  memset(p, 0, sizeof *p);
  const dit_plan_t *plan = dit_runtime_plan(rt);
  if (!plan->work.present || !(plan->work.flops > 0))
    return DIT_ERR(INVALID_ARGUMENT, "%s: rank 0's plan has no work section (a plan older than version 3): cannot rate the forward; recompile it",
                   bundle);
  p->flops = plan->work.flops, p->steps = (double)plan->n_steps;
  p->colls = (double)plan->work.collectives, p->coll_bytes = (double)plan->work.collective_bytes;
  snprintf(p->identity, sizeof p->identity, "%s", m->identity);
  snprintf(p->weights, sizeof p->weights, "%s", m->n_weights ? m->weights[0].blob : "");
  DIT_RETURN_IF(set_inputs_from(rt, inputs));
  double *t = calloc((size_t)iters, sizeof *t);
  if (!t) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  dit_status_t s = dit_runtime_forward(rt); /* warm-up */
  for (int i = 0; !s && i < iters; i++) {
    double t0 = dit_now_s();
    s = dit_runtime_forward(rt);
    t[i] = dit_now_s() - t0;
  }
  if (!s) {
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    p->forward_s = t[iters / 2];
  }
  free(t);
  if (!s && p->colls > 0) {
    double per_kind[DIT_OP_COUNT] = {0}, all = 0, coll = 0;
    s = dit_runtime_forward_profiled(rt, per_kind, NULL);
    for (int k = 0; !s && k < DIT_OP_COUNT; k++) {
      all += per_kind[k];
      if (dit_op_is_collective((dit_op_kind_t)k)) coll += per_kind[k];
    }
    if (!s && all > 0) p->coll_s = p->forward_s * coll / all;
  }
  return s;
}

/* Fits y = a * u + b * v through two points (a > 0, b >= 0); one point, or a fit that gives
 * b < 0: b = 0 and a from the larger point. */
static void fit2(const double u[2], const double v[2], const double y[2], int n, double *a, double *b) {
  const int big = n > 1 && u[1] > u[0];
  *a = y[big] / u[big], *b = 0;
  if (n < 2) return;
  const double det = u[0] * v[1] - u[1] * v[0];
  if (fabs(det) < 1e-12 * fabs(u[0] * v[1])) return;
  const double fa = (y[0] * v[1] - y[1] * v[0]) / det, fb = (u[0] * y[1] - u[1] * y[0]) / det;
  if (fa > 0 && fb >= 0) *a = fa, *b = fb;
}

/* Measures what the F* model needs on this machine into a profile that `ditc compile --profile
 * FILE` reads: the compute rate of the bundle's own forward (eta_comp * P_peak) and, with a
 * second shape of the same model, the fixed cost of a plan step (two forwards separate the
 * two); the host-to-device rate of its weights streamed in chunks on the copy queue (eta_pref *
 * BW_h2d); for a multi-rank bundle the collectives' rate (and with a second shape their
 * latency); the device memory the runtime holds beyond the plan. The products are what the
 * model uses, so the profile carries them as the peaks with efficiencies of 1. */
static int cmd_calibrate(int argc, char **argv) {
  const char *profile = NULL, *second = NULL, *second_inputs = NULL;
  double chunk_mb = 16;
  int kept = 0;
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  if (!rest) return dit_status_report(DIT_ERR(RESOURCE_EXHAUSTED, "out of memory"), "ditrun");
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--profile-out") && i + 1 < argc) profile = argv[++i];
    else if (!strcmp(argv[i], "--second") && i + 1 < argc) second = argv[++i];
    else if (!strcmp(argv[i], "--second-inputs") && i + 1 < argc) second_inputs = argv[++i];
    else if (!strcmp(argv[i], "--chunk-mb")) {
      int rc = parse_num(argv[i], i + 1 < argc ? argv[i + 1] : NULL, &chunk_mb);
      if (rc) {
        free(rest);
        return rc;
      }
      i++;
    } else rest[kept++] = argv[i];
  }
  run_args_t a;
  int rc = parse_run_args(kept, rest, &a, 0, "calibrate");
  free(rest);
  if (rc) return rc;
  if (!a.inputs || !profile) return usage_error("%s", "calibrate needs --inputs IN.safetensors and --profile-out PROFILE.json");
  /* The profile rates the forwards the offload planner plans, which run step by step (no graph
   * with offload streaming): measured so unless --cuda-graph asks otherwise. */
  if (!a.graph) a.graph = -1;
  if (!second != !second_inputs) return usage_error("%s", "--second BUNDLE and --second-inputs IN.safetensors go together");
  if (!(chunk_mb * (1 << 20) >= 4096)) return usage_error("%s", "--chunk-mb: at least 4 KiB (0.004)");
  const int iters = a.steps == 50 ? 5 : (int)(a.steps < 1 ? 1 : a.steps);
  calib_point_t pt[2];
  int n = 0;
  dit_runtime_t *rt = NULL;
  dit_status_t s = DIT_OK;
  if (second) { /* the second shape first: the first one's runtime stays for the copy rate */
    run_args_t b = a;
    b.bundle = second, b.inputs = second_inputs;
    s = load(&b, &rt);
    if (!s) s = calib_measure(rt, second, second_inputs, iters, &pt[1]);
    dit_runtime_destroy(rt);
    rt = NULL;
  }
  if (!s) s = load(&a, &rt);
  if (!s) s = calib_measure(rt, a.bundle, a.inputs, iters, &pt[0]);
  if (!s) n = second ? 2 : 1;
  if (!s && n == 2 && strcmp(pt[0].weights, pt[1].weights))
    s = DIT_ERR(INVALID_ARGUMENT, "--second %s: weights blob %s, expected the first bundle's %s (another shape of the same model)", second,
                pt[1].weights, pt[0].weights);
  if (!s && n == 2 && (pt[0].colls > 0) != (pt[1].colls > 0))
    s = DIT_ERR(INVALID_ARGUMENT, "--second %s: one bundle has collectives and the other not (expected the same topology)", second);
  double gbs = 0;
  if (!s) s = dit_runtime_measure_h2d(rt, (uint64_t)(chunk_mb * (1 << 20)), 3, &gbs);
  /* The runtime's own device memory, for the planner's peak: measured where the backend says. */
  uint64_t beyond = 0;
  dit_status_t ms = s ? DIT_OK : dit_runtime_memory_beyond_plan(rt, &beyond);
  const int have_overhead = !s && !ms;
  dit_status_free(ms);
  if (!s) {
    /* compute: forward - collectives = flops / rate + steps * t_step */
    double u[2], v[2], y[2], inv_rate, t_step, lat = 0, inv_bw = 0;
    for (int k = 0; k < n; k++) u[k] = pt[k].flops, v[k] = pt[k].steps, y[k] = pt[k].forward_s - pt[k].coll_s;
    fit2(u, v, y, n, &inv_rate, &t_step);
    /* collectives: time = bytes / rate + count * latency */
    const int colls = pt[0].colls > 0 && pt[0].coll_bytes > 0 && pt[0].coll_s > 0;
    if (colls) {
      for (int k = 0; k < n; k++) u[k] = pt[k].coll_bytes, v[k] = pt[k].colls, y[k] = pt[k].coll_s;
      fit2(u, v, y, n, &inv_bw, &lat);
    }
    const double tflops = 1 / inv_rate / 1e12;
    /* The products are what the model uses: the peaks carry them, with efficiencies of 1. */
    dit_hw_profile_t hp = {.name = "calibrated", .p_peak_tflops = tflops, .bw_h2d_gbs = gbs, .eta_comp = 1, .eta_pref = 1,
                           .overhead_mib = (double)beyond / 1048576.0, .step_overhead_us = 1e6 * t_step,
                           .coll_latency_us = 1e6 * lat, .coll_gbs = colls ? 1 / inv_bw / 1e9 : 0};
    const unsigned with = (have_overhead ? DIT_HW_WITH_OVERHEAD : 0) | (n == 2 ? DIT_HW_WITH_STEP_OVERHEAD : 0) |
                          (colls ? DIT_HW_WITH_COLLECTIVES : 0);
    dit_hw_measured_t ms = {.forward_ms_median = 1e3 * pt[0].forward_s, .collectives_ms = 1e3 * pt[0].coll_s, .forwards = iters,
                            .chunk_mb = chunk_mb, .h2d_bytes = (double)dit_runtime_manifest(rt)->weight_bytes};
    snprintf(ms.bundle, sizeof ms.bundle, "%s", pt[0].identity);
    if (n == 2) {
      snprintf(ms.second, sizeof ms.second, "%s", pt[1].identity);
      ms.second_forward_ms_median = 1e3 * pt[1].forward_s, ms.second_collectives_ms = 1e3 * pt[1].coll_s;
    }
    char *text = NULL;
    if (!(tflops > 0) || !(gbs > 0)) s = DIT_ERR(INTERNAL, "calibration measured %g TFLOP/s and %g GB/s", tflops, gbs);
    if (!s) s = dit_hw_profile_to_json(&hp, with, &ms, &text);
    /* What ditc will read back: a profile it would refuse is not written. */
    dit_hw_profile_t back;
    if (!s) s = dit_hw_profile_parse(text, strlen(text), profile, &back, NULL);
    if (!s) s = dit_file_write_atomic(profile, text, strlen(text));
    free(text);
    if (!s) {
      printf("compute %.4g TFLOP/s (forward %.3f ms)", tflops, 1e3 * pt[0].forward_s);
      if (n == 2) printf(" + %.3g us a step (second shape's forward %.3f ms)", 1e6 * t_step, 1e3 * pt[1].forward_s);
      if (colls) printf(", collectives %.3g us + bytes at %.4g GB/s", 1e6 * lat, 1 / inv_bw / 1e9);
      printf(", host-to-device %.4g GB/s in %g MiB chunks", gbs, chunk_mb);
      if (have_overhead) printf(", device memory beyond the plan %.0f MiB", (double)beyond / 1048576.0);
      printf(" -> %s\n", profile);
    }
  }
  dit_runtime_destroy(rt);
  return dit_status_report(s, "ditrun");
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv) {
  /* Before the fetch options are taken: everything after "launch" belongs to the ranks. */
  if (argc > 1 && !strcmp(argv[1], "launch")) return dit_launch_main(argc - 2, argv + 2);
  /* serve's --token-file is its bearer token; the store's token then comes from DITC_REMOTE_TOKEN. */
  int rc = argc > 1 && !strcmp(argv[1], "serve") ? dit_serve_take_token_file(&argc, argv) : 0;
  if (!rc) rc = take_fetch_options(&argc, argv);
  if (!rc) rc = run_command(argc, argv);
  /* After the runtime is gone: this may remove a temporary store it had mapped. */
  for (int i = 0; i < MAX_FETCHED && g_fetched[i].what; i++) {
    dit_fetched_destroy(g_fetched[i].f);
    free(g_fetched[i].what);
  }
  free(g_token);
  return rc;
}

/* `ditrun tokenize DIR --text T [--max-length N]`: the ids and mask a pipeline's tokenizer gives,
 * as one JSON object. */
static int cmd_tokenize(int argc, char **argv) {
  const char *dir = NULL, *text = NULL;
  int max_length = 0;
  for (int i = 0; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(f, "--text") || !strcmp(f, "--max-length")) {
      if (!v) return usage_error("%s needs a value", f);
      i++;
      if (f[2] == 't') {
        text = v;
      } else {
        char *end;
        const long n = strtol(v, &end, 10);
        if (*end || end == v || n < 1 || n > DIT_TOKENIZER_MAX_LENGTH)
          return usage_error("--max-length: expected an integer in 1..65536, found '%s'", v);
        max_length = (int)n;
      }
    } else if (f[0] == '-') {
      return usage_error("unknown option %s", f);
    } else if (dir) {
      return usage_error("unexpected argument %s", f);
    } else {
      dir = f;
    }
  }
  if (!dir) return usage_error("%s", "tokenize needs a tokenizer folder DIR");
  if (!text) return usage_error("%s", "tokenize needs --text TEXT");
  dit_tokenizer_t *t = NULL;
  dit_status_t s = dit_tokenizer_open(dir, &t);
  if (s) return dit_status_report(s, "ditrun");
  if (!max_length) max_length = dit_tokenizer_max_length(t);
  int32_t *ids = malloc(2 * (size_t)max_length * sizeof *ids);
  if (!ids) s = DIT_ERR(RESOURCE_EXHAUSTED, "tokenize: out of memory for %d ids", max_length);
  if (!s) s = dit_tokenizer_encode(t, text, strlen(text), max_length, ids, ids + max_length);
  if (!s) {
    for (int part = 0; part < 2; part++) {
      fputs(part ? "],\"attention_mask\":[" : "{\"input_ids\":[", stdout);
      for (int i = 0; i < max_length; i++) printf("%s%d", i ? "," : "", (int)ids[part * max_length + i]);
    }
    puts("]}");
  }
  free(ids);
  dit_tokenizer_free(t);
  return s ? dit_status_report(s, "ditrun") : 0;
}

/* `ditrun frames IN.safetensors [--tensor NAME] --out FILE.mp4|FILE.png [--fps N] [--crf N]`:
 * decoded frames (a VAE's output, [B, 3, F, H, W] or [B, 3, H, W] in [-1, 1]) as a video or
 * images (runtime/media.h). */
/* decode's stages: a pipeline's bundle (one with a vae_decoder stage) names its own, as generate
 * decodes (then none may be given); a decoder stage's bundle takes the flags' (`staged`). */
static dit_status_t decode_stages(const char *bundle, int staged, gen_decoders_t *dec) {
  dit_bundle_t *b = NULL;
  DIT_RETURN_IF(dit_bundle_open(bundle, 0, &b));
  const dit_manifest_t *m = dit_bundle_manifest(b);
  dit_status_t s = DIT_OK;
  if (dit_manifest_find_stage(m, "vae_decoder") && staged)
    s = DIT_ERR(INVALID_ARGUMENT, "%s: a pipeline's bundle decodes with its own stages: give no --first, --head, --last or "
                "--window-stride (or give the vae_decoder stage's bundle)", bundle);
  else if (dit_manifest_find_stage(m, "vae_decoder"))
    s = gen_decoder_stages(bundle, m, "decode", dec);
  dit_bundle_close(b);
  return s;
}

/* decode: gen_decode_latents on a latents file, the time on stderr as generate prints it. */
static int cmd_decode(int argc, char **argv) {
  const char *vae = NULL, *in = NULL, *out = NULL;
  gen_decoders_t dec = {0};
  int staged = 0; /* --first, --head, --last or --window-stride given */
  for (int i = 0; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    const char **dst = !strcmp(f, "--first") ? &dec.first_dir : !strcmp(f, "--head") ? &dec.head_dir : !strcmp(f, "--last") ? &dec.last_dir
                       : !strcmp(f, "--latents") ? &in : !strcmp(f, "--out") ? &out : NULL;
    if (dst || !strcmp(f, "--window-stride")) {
      if (!v) return usage_error("%s needs a value", f);
      double n = 0;
      const int rc = dst ? 0 : parse_num(f, v, &n);
      if (rc) return rc;
      if (!dst && !(n >= 1 && n <= 1 << 20 && n == (double)(int64_t)n))
        return usage_error("--window-stride %s: expected a count of latent frames >= 1", v);
      if (dst) *dst = v;
      else dec.stride = (int64_t)n;
      staged |= dst != &in && dst != &out;
      i++;
    } else if (f[0] == '-') {
      return usage_error("unknown option %s", f);
    } else if (vae) {
      return usage_error("unexpected argument %s", f);
    } else {
      vae = f;
    }
  }
  if (!vae || !in || !out) return usage_error("%s", "decode needs VAE_BUNDLE, --latents IN.safetensors and --out OUT.safetensors");
  dec.vae_dir = vae;
  dit_status_t s = decode_stages(vae, staged, &dec);
  dit_safetensors_t *st = NULL;
  if (!s) s = dit_safetensors_open(in, &st);
  const dit_st_tensor_t *e = s ? NULL : dit_safetensors_find(st, "latents");
  if (!s && !e) s = DIT_ERR(NOT_FOUND, "--latents %s: no tensor named 'latents'", in);
  dit_tensor_t lat = {0}, frames = {0};
  if (!s) {
    lat = (dit_tensor_t){NULL, DIT_F32, e->rank, {0}};
    memcpy(lat.dims, e->dims, sizeof lat.dims);
    lat.data = malloc((size_t)dit_tensor_numel(&lat) * sizeof(float) + 1);
    if (!lat.data) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    else if (dit_convert(lat.data, DIT_F32, e->data, e->dtype, (size_t)dit_tensor_numel(&lat)))
      s = DIT_ERR(INVALID_ARGUMENT, "--latents %s: tensor 'latents' is %s, not a float tensor", in, dit_st_dtype_name(e->dtype));
  }
  const dit_runtime_options_t o = {.graph = -1}; /* a stage: step by step, as stage_runtime_options */
  const double t0 = dit_now_s();
  gen_decode_stats_t ds;
  if (!s) s = dit_status_annotate(gen_decode_latents(&dec, &o, &lat, &frames, &ds), "--latents %s", in);
  if (!s) gen_decode_report(dit_now_s() - t0, &ds);
  dit_st_writer_t *w = NULL;
  if (!s) s = dit_st_writer_create(&w);
  if (!s) s = dit_st_writer_add(w, "frames", frames.dtype, frames.rank, frames.dims, frames.data);
  if (!s) s = dit_st_writer_write(w, out);
  if (!s) printf("wrote %s\n", out);
  dit_st_writer_destroy(w);
  free(frames.data);
  free(lat.data);
  dit_safetensors_close(st);
  return dit_status_report(s, "ditrun");
}

static int cmd_frames(int argc, char **argv) {
  const char *in = NULL, *name = NULL, *out = NULL;
  dit_media_options_t o = {0}; /* the defaults */
  for (int i = 0; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(f, "--tensor") || !strcmp(f, "--out")) {
      if (!v) return usage_error("%s needs a value", f);
      *(f[2] == 't' ? &name : &out) = v;
      i++;
    } else if (!strcmp(f, "--fps")) {
      rc = parse_num(f, v, &o.fps), i++;
      if (!rc && !(o.fps >= 0.1 && o.fps <= 1000)) return usage_error("--fps %s: expected a rate in 0.1..1000", v);
    } else if (!strcmp(f, "--crf")) {
      int64_t q = 0;
      rc = parse_int(f, v, &q), i++;
      if (!rc && (q < 1 || q > 51)) return usage_error("--crf %s: expected 1..51", v);
      o.crf = (int)q;
    } else if (f[0] == '-') {
      return usage_error("unknown option %s", f);
    } else if (in) {
      return usage_error("unexpected argument %s", f);
    } else {
      in = f;
    }
    if (rc) return rc;
  }
  if (!in) return usage_error("%s", "frames needs IN.safetensors");
  if (!out) return usage_error("%s", "frames needs --out FILE.mp4 or FILE.png");
  if (dit_media_kind_of(out) == DIT_MEDIA_UNKNOWN) return usage_error("--out %s: expected a .mp4 or .png file name", out);
  dit_safetensors_t *st;
  dit_status_t s = dit_safetensors_open(in, &st);
  if (s) return dit_status_report(s, "ditrun");
  const dit_st_tensor_t *e = NULL;
  if (name && !(e = dit_safetensors_find(st, name)))
    s = DIT_ERR(NOT_FOUND, "%s: no tensor named '%s' (--tensor)", in, name);
  else if (!name && dit_safetensors_count(st) != 1) {
    char names[300] = "";
    for (size_t i = 0, o = 0; i < dit_safetensors_count(st) && i <= 8 && o < sizeof names - 8; i++)
      o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "", i < 8 ? dit_safetensors_at(st, i)->name : "...");
    s = DIT_ERR(INVALID_ARGUMENT, "%s: %zu tensors (%s): name the frames with --tensor", in, dit_safetensors_count(st), names);
  } else if (!name)
    e = dit_safetensors_at(st, 0);
  if (!s) {
    dit_tensor_t t = {(void *)e->data, e->dtype, e->rank, {0}};
    memcpy(t.dims, e->dims, sizeof t.dims);
    s = dit_status_annotate(dit_media_write(out, &t, &o), "%s tensor '%s'", in, e->name);
    const int64_t batch = e->rank >= 1 ? e->dims[0] : 0;
    for (int64_t b = 0; !s && b < batch; b++) {
      char path[4096];
      if (!dit_media_item_path(out, (int)b, path, sizeof path)) printf("wrote %s\n", path);
    }
  }
  dit_safetensors_close(st);
  return dit_status_report(s, "ditrun");
}

static int run_command(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "verify") || !strcmp(cmd, "info")) {
    if (argc != 3) return usage_error("%s needs exactly one BUNDLE", cmd);
    return !strcmp(cmd, "verify") ? cmd_verify(argv[2]) : cmd_info(argv[2]);
  }
  if (!strcmp(cmd, "forward")) return cmd_forward(argc - 2, argv + 2);
  if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
  if (!strcmp(cmd, "compare")) return cmd_compare(argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
  if (!strcmp(cmd, "calibrate")) return cmd_calibrate(argc - 2, argv + 2);
  if (!strcmp(cmd, "calibrate-cache")) return cmd_calibrate_cache(argc - 2, argv + 2);
  if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
  if (!strcmp(cmd, "frames")) return cmd_frames(argc - 2, argv + 2);
  if (!strcmp(cmd, "decode")) return cmd_decode(argc - 2, argv + 2);
  if (!strcmp(cmd, "serve")) return dit_serve_main(argc - 2, argv + 2);
  if (!strcmp(cmd, "serve-worker")) return dit_serve_worker_main(argc - 2, argv + 2);
  if (!strcmp(cmd, "rendezvous-selftest")) return dit_rendezvous_selftest_main(argc - 2, argv + 2);
  return usage_error("unknown command '%s'", cmd);
}
