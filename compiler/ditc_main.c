/* ditc: the command line of the compiler (compile, inspect; cache, keygen and pack live in
 * cache_cmd.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/bundle.h"
#include "artifacts/plan.h"
#include "compiler/cache_cmd.h"
#include "compiler/compile.h"
#include "dit_sources_hash.h"

static const char kUsage[] =
    "usage: ditc <command> [options]\n"
    "\n"
    "commands:\n"
    "  compile MODEL_DIR [--frames F] --height H --width W [options]\n"
    "      Compile a diffusers transformer or pipeline directory for one shape into a\n"
    "      content-addressed bundle (--frames for video models: Wan; not for image models:\n"
    "      FLUX.1). A text encoder's folder (transformers' UMT5EncoderModel or T5EncoderModel)\n"
    "      takes only --text-len (its tokens) and --batch. Options:\n"
    "        --batch B           batch size (default 1)\n"
    "        --text-len L        text tokens (default 512)\n"
    "        --image-len N       image tokens of an image-conditioned model (default 257, as CLIP gives)\n"
    "        --dtype fp32|bf16   storage and compute policy (default fp32)\n"
    "        --quant none|fp8    fp8: the transformer blocks' large linears (attention q/k/v/o, FFN) on\n"
    "                            e4m3 weights (per-channel scales) and activations (per-token scales,\n"
    "                            on the fly), fp32 accumulation; the rest as --dtype says (default none)\n"
    "        --attn-quant none|fp8|int8|int8fp8  self-attention at head dim 64 or 128 on 8-bit\n"
    "                            operands, fp32 accumulation. fp8: e4m3 Q, K (a scale per head and 64\n"
    "                            query rows / a key tile), V (per channel) and softmax P; int8: int8 Q,\n"
    "                            K (amax / 127) with an exact integer Q K^T, P V in bf16; int8fp8: int8\n"
    "                            Q, K, e4m3 P, V; cpu and sm_90 targets (default none)\n"
    "        --target T          cpu, or sm_80 .. sm_90 (default cpu)\n"
    "        --sparse-attn P     sparse video self-attention (Wan): sta:T,H,W (sliding tile windows\n"
    "                            of T frames x H rows x W columns of patched tokens around each\n"
    "                            tile of 128 tokens; a window as large as the grid is dense) or\n"
    "                            radial (Radial Attention's static mask); text stays dense\n"
    "        --sparse-dense-layers L  the first L transformer blocks keep dense attention\n"
    "        --sparse-dense-steps N   the first N steps dense (only 0: one plan per bundle)\n"
    "        --tp N              tensor-parallel degree: N ranks, heads and FFN split (cpu)\n"
    "        --sp                sequence parallelism inside the tensor-parallel group: norms,\n"
    "                            modulation and residuals on 1/tp of the tokens (needs --tp)\n"
    "        --cp N              context-parallel degree: each rank takes 1/N of the tokens (cpu)\n"
    "        --cp-mode M         gather (all-gather K/V), ulysses (all-to-all tokens<->heads) or\n"
    "                            ring (rotate K/V, merge partial states by LSE) or usp (Ulysses\n"
    "                            of degree U inside groups, ring between them); default gather\n"
    "        --ulysses U         the Ulysses degree of --cp-mode usp\n"
    "        --reuse ditango     attention-state reuse under --cp-mode ring or usp: each\n"
    "                            self-attention layer's remote groups computed or taken from a\n"
    "                            state cache, as `ditrun generate --reuse-ratio` decides per step\n"
    "        --reuse-group G     ranks per reuse group (default 1; G divides --cp, >= 2 groups;\n"
    "                            under usp ring members: G divides --cp / --ulysses)\n"
    "        --reuse-cache-mb M  the state cache's memory cap in MiB (fractions allowed): adjacent\n"
    "                            remote groups share one cached state (k of them, merged by LSE,\n"
    "                            decided as one) for the smallest k that fits; refused when one\n"
    "                            state per layer does not\n"
    "        --offload M         weight offload plan: none (default), layerwise or chunked\n"
    "        --chunk-mb C        copy unit of chunked offload (default 16)\n"
    "        --residency R | --memory-budget GIB | --latency-target MS\n"
    "                            resident fraction of each block's weights, or chosen to fit\n"
    "                            a device-memory budget or meet a step-time target\n"
    "        --profile P         hardware profile: h100-pcie, h100-sxm, h200-sxm (default) or a\n"
    "                            JSON file {p_peak_tflops, bw_h2d_gbs, eta_comp, eta_pref} with,\n"
    "                            optionally, overhead_mib, step_overhead_us, coll_latency_us and\n"
    "                            coll_gbs (ditrun calibrate writes one)\n"
    "        --ranks-per-node K  ranks per node: tensor-parallel and Ulysses groups stay inside one\n"
    "                            (ranks are numbered tensor-parallel fastest, then cp, then cfg)\n"
    "        --cfg-parallel      two lanes of ranks run the conditional and unconditional\n"
    "                            branches of classifier-free guidance at once (cpu)\n"
    "        --variant NAME      model variant for VAE factors (default: from config.json)\n"
    "        --stages LIST       a pipeline directory's stages to compile: transformer,text_encoder,\n"
    "                            text_encoder_2,vae,image_encoder (default: every stage the directory\n"
    "                            has that this build compiles). Each stage is a bundle of its own at\n"
    "                            the shape the flags imply (batch 1; a text encoder at --text-len,\n"
    "                            plus its pipeline's template rows, or FLUX's CLIP at its tokenizer's\n"
    "                            77, with its tokenizer's files: tokenizer/, tokenizer_2/; the VAE\n"
    "                            decoder at --frames/--height/--width, an image VAE in one graph;\n"
    "                            an image-to-video pipeline's VAE encoder and CLIP image encoder,\n"
    "                            the latter with image_processor/'s preprocessing), published beside\n"
    "                            the transformer's, whose manifest names them and the generate\n"
    "                            argument each text encoder makes: ditrun generate --prompt [--image]\n"
    "                            runs them\n"
    "        --vae-chunk N       a pipeline's VAE decoder stage decodes N latent frames per forward,\n"
    "                            each causal convolution carrying its last input frames to the next\n"
    "                            (default 1, as diffusers: the peak memory of one chunk); 0: one\n"
    "                            graph over the whole video. On a vae/ folder alone: the graph of\n"
    "                            one such chunk (--vae-first: of latent frame 0)\n"
    "        --vae-budget GIB    the most device memory the VAE decode may take: ditc splits the\n"
    "                            decoder into a head over whole frames and a tail over the fewest\n"
    "                            overlapping column windows whose predicted peak fits (exact: each\n"
    "                            window's halo covers the tail's receptive field), or refuses\n"
    "        --vae-tiles N       the same split with N windows, whatever memory it takes\n"
    "        --vae-part head|tail|encoder  on a vae/ folder alone: the head's graph (with --vae-chunk 1)\n"
    "                            or the tail's (--vae-chunk, --vae-first, --vae-tiles or --vae-budget);\n"
    "                            encoder: the video of --frames at --height x --width to its latents\n"
    "                            (image-to-video's conditioning), normalized as the pipeline does\n"
    "        -o DIR              parent directory of bundles (default ./bundles, or STORE/bundles\n"
    "                            with a store)\n"
    "        --store DIR         content-addressed store to look in first and enter the bundle\n"
    "                            into (default: $DITC_STORE; none if unset)\n"
    "        --explain           on a cache miss, name the identity inputs that differ from the\n"
    "                            nearest stored entries\n"
    "        --rehash            hash the checkpoint even if the store's memo says it is unchanged\n"
    "        --dump-ir           print the final graph to stdout\n"
    "        --dump-after=PASS   print the graph after PASS (verify, dce, fuse, schedule, group,\n"
    "                            memplan, all) to stderr\n"
    "        -q, --quiet         no progress on stderr\n"
    "      The last line on stdout is: bundle <identity> <path>\n"
    "  inspect BUNDLE\n"
    "      Summarize a bundle's manifest (blob hashes are not checked: use ditrun verify).\n"
    DIT_CACHE_USAGE
    "  --version, --help\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "ditc: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see ditc --help)\n");
  return 2;
}

static int parse_i64(const char *flag, const char *s, int64_t *out) {
  if (!s) return usage_error("%s needs a value", flag);
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < 0) {
    fprintf(stderr, "ditc: error: %s %s: expected a non-negative integer\n", flag, s);
    return 2;
  }
  *out = v;
  return 0;
}

/* compile, or with `why` set, `cache why` (the same flags, nothing compiled). */
static int cmd_compile(int argc, char **argv, int why) {
  dit_compile_options_t o;
  memset(&o, 0, sizeof o);
  const char *env_store = getenv("DITC_STORE");
  o.store_dir = env_store && env_store[0] ? env_store : NULL;
  int out_given = 0, reuse_given = 0, group_given = 0, cap_given = 0;
  const char *sparse_extra = NULL;
  o.shape.batch = 1;
  o.shape.text_len = 512;
  o.shape.frames = o.shape.height = o.shape.width = -1;
  o.shape.vae_chunk = -1; /* a pipeline's default (1); a vae/ folder alone: the whole video */
  o.shape.dtype = DIT_F32;
  o.target = "cpu";
  o.out_dir = "bundles";
  o.chunk_mb = 16;
  o.residency = -1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(a, "--frames")) rc = parse_i64(a, val, &o.shape.frames), i++;
    else if (!strcmp(a, "--height")) rc = parse_i64(a, val, &o.shape.height), i++;
    else if (!strcmp(a, "--width")) rc = parse_i64(a, val, &o.shape.width), i++;
    else if (!strcmp(a, "--batch")) rc = parse_i64(a, val, &o.shape.batch), i++;
    else if (!strcmp(a, "--text-len")) rc = parse_i64(a, val, &o.shape.text_len), i++;
    else if (!strcmp(a, "--vae-chunk")) {
      rc = parse_i64(a, val, &o.shape.vae_chunk), i++;
      if (!rc && o.shape.vae_chunk < 0) return usage_error("--vae-chunk %s: expected a count of latent frames >= 0", val);
    } else if (!strcmp(a, "--vae-first")) o.shape.vae_first = 1;
    else if (!strcmp(a, "--vae-tiles")) {
      rc = parse_i64(a, val, &o.shape.vae_tiles), i++;
      if (!rc && o.shape.vae_tiles < 1) return usage_error("--vae-tiles %s: expected a count of windows >= 1", val);
    } else if (!strcmp(a, "--vae-part")) {
      if (!val || (strcmp(val, "head") && strcmp(val, "tail") && strcmp(val, "encoder")))
        return usage_error("--vae-part %s: expected head, tail or encoder", val ? val : "(missing)");
      o.shape.vae_part = !strcmp(val, "head") ? DIT_VAE_HEAD : !strcmp(val, "tail") ? DIT_VAE_TAIL : DIT_VAE_ENCODER, i++;
    }
    else if (!strcmp(a, "--image-len")) {
      rc = parse_i64(a, val, &o.shape.image_len), i++;
      if (!rc && o.shape.image_len < 1) return usage_error("--image-len %s: expected a positive count", val);
    }
    else if (!strcmp(a, "--cfg-parallel")) o.cfg_parallel = 1;
    else if (!strcmp(a, "--sp")) o.shape.sp = 1;
    else if (!strcmp(a, "--offload")) {
      if (!val || (strcmp(val, "none") && strcmp(val, "layerwise") && strcmp(val, "chunked")))
        return usage_error("--offload %s: expected none, layerwise or chunked", val ? val : "(missing)");
      o.offload = val, i++;
    } else if (!strcmp(a, "--profile")) {
      if (!val) return usage_error("%s needs a value", a);
      o.profile = val, i++;
    } else if (!strcmp(a, "--chunk-mb") || !strcmp(a, "--residency") || !strcmp(a, "--memory-budget") ||
               !strcmp(a, "--latency-target") || !strcmp(a, "--reuse-cache-mb") || !strcmp(a, "--vae-budget")) {
      char *end = NULL;
      double d = val ? strtod(val, &end) : -1;
      if (!val || end == val || *end || !(d >= 0) || !isfinite(d)) return usage_error("%s needs a non-negative number", a);
      if (!strcmp(a, "--residency") && d > 1) return usage_error("--residency %s: expected a fraction in 0..1", val);
      if (!strcmp(a, "--chunk-mb")) o.chunk_mb = d;
      else if (!strcmp(a, "--residency")) o.residency = d;
      else if (!strcmp(a, "--memory-budget")) o.memory_budget_gib = d;
      else if (!strcmp(a, "--reuse-cache-mb")) o.reuse_cache_mb = d, cap_given = 1;
      else if (!strcmp(a, "--vae-budget")) o.vae_budget_gib = d;
      else o.latency_target_ms = d;
      i++;
    }
    else if (!strcmp(a, "--ranks-per-node")) {
      int64_t k = 0;
      rc = parse_i64(a, val, &k), i++;
      if (!rc && (k < 1 || k > 4096)) return usage_error("--ranks-per-node %s: expected 1..4096", val);
      o.ranks_per_node = (int)k;
    }
    else if (!strcmp(a, "--cp")) {
      int64_t cp = 0;
      rc = parse_i64(a, val, &cp), i++;
      if (!rc && (cp < 1 || cp > 64)) return usage_error("--cp %s: expected 1..64", val);
      o.shape.cp = (int)cp;
    } else if (!strcmp(a, "--cp-mode")) {
      if (!val) return usage_error("%s needs a value", a);
      if (!strcmp(val, "gather")) o.shape.cp_mode = DIT_CP_GATHER;
      else if (!strcmp(val, "ulysses")) o.shape.cp_mode = DIT_CP_ULYSSES;
      else if (!strcmp(val, "ring")) o.shape.cp_mode = DIT_CP_RING;
      else if (!strcmp(val, "usp")) o.shape.cp_mode = DIT_CP_USP;
      else return usage_error("--cp-mode %s: expected gather, ulysses, ring or usp", val);
      i++;
    } else if (!strcmp(a, "--reuse")) {
      if (!val) return usage_error("%s needs a value", a);
      if (strcmp(val, "ditango")) return usage_error("--reuse %s: expected ditango", val);
      if (!o.shape.reuse_group) o.shape.reuse_group = 1;
      reuse_given = 1, i++;
    } else if (!strcmp(a, "--reuse-group")) {
      int64_t g = 0;
      rc = parse_i64(a, val, &g), i++;
      if (!rc && (g < 1 || g > 64)) return usage_error("--reuse-group %s: expected 1..64", val);
      o.shape.reuse_group = (int)g, group_given = 1;
    } else if (!strcmp(a, "--ulysses")) {
      int64_t u = 0;
      rc = parse_i64(a, val, &u), i++;
      if (!rc && (u < 1 || u > 64)) return usage_error("--ulysses %s: expected 1..64", val);
      o.shape.ulysses = (int)u;
    }
    else if (!strcmp(a, "--tp")) {
      int64_t tp = 0;
      rc = parse_i64(a, val, &tp), i++;
      if (!rc && (tp < 1 || tp > 64)) return usage_error("--tp %s: expected 1..64", val);
      o.shape.tp = (int)tp;
    }
    else if (!strcmp(a, "--sparse-attn")) {
      dit_status_t ps = dit_sparse_attn_parse(val, &o.shape.sparse);
      if (ps) return dit_status_report(ps, "ditc");
      i++;
    } else if (!strcmp(a, "--sparse-dense-layers")) rc = parse_i64(a, val, &o.shape.sparse.dense_layers), i++, sparse_extra = a;
    else if (!strcmp(a, "--sparse-dense-steps")) rc = parse_i64(a, val, &o.shape.sparse.dense_steps), i++, sparse_extra = a;
    else if (!strcmp(a, "--quant")) {
      if (!val) return usage_error("%s needs a value", a);
      if (dit_quant_parse(val, &o.quant) || (o.quant != DIT_QUANT_NONE && o.quant != DIT_QUANT_FP8))
        return usage_error("--quant %s: expected none or fp8", val);
      i++;
    } else if (!strcmp(a, "--attn-quant")) {
      if (!val) return usage_error("%s needs a value", a);
      if (dit_quant_parse(val, &o.attn_quant)) return usage_error("--attn-quant %s: expected none, fp8, int8 or int8fp8", val);
      i++;
    } else if (!strcmp(a, "--dtype")) {
      if (!val) return usage_error("%s needs a value", a);
      if (!strcmp(val, "fp32") || !strcmp(val, "f32")) o.shape.dtype = DIT_F32;
      else if (!strcmp(val, "bf16")) o.shape.dtype = DIT_BF16;
      else return usage_error("--dtype %s: expected fp32 or bf16", val);
      i++;
    } else if (!strcmp(a, "--target")) {
      if (!val) return usage_error("%s needs a value", a);
      o.target = val, i++;
    } else if (!strcmp(a, "--stages")) {
      if (!val || !val[0]) return usage_error("%s needs a value (e.g. transformer,text_encoder,vae)", a);
      o.stages = val, i++;
    } else if (!strcmp(a, "--variant")) {
      if (!val) return usage_error("%s needs a value", a);
      o.variant = val, i++;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (!val) return usage_error("%s needs a value", a);
      o.out_dir = val, i++, out_given = 1;
    } else if (!strcmp(a, "--store")) {
      if (!val) return usage_error("%s needs a value", a);
      o.store_dir = val, i++;
    } else if (!strcmp(a, "--explain")) o.explain = 1;
    else if (!strcmp(a, "--rehash")) o.rehash = 1;
    else if (!strcmp(a, "--dump-ir")) o.dump_ir = 1;
    else if (!strncmp(a, "--dump-after=", 13)) o.dump_after = a + 13;
    else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o.quiet = 1;
    else if (a[0] == '-') return usage_error("unknown option %s", a);
    else if (!o.model_dir) o.model_dir = a;
    else return usage_error("unexpected argument %s", a);
    if (rc) return rc;
  }
  if (!o.model_dir) return usage_error("%s", "compile needs a MODEL_DIR");
  if (o.shape.vae_first && o.shape.vae_chunk < 1) return usage_error("%s", "--vae-first needs --vae-chunk N with N >= 1");
  if (o.shape.vae_part == DIT_VAE_HEAD && (o.shape.vae_tiles || o.vae_budget_gib > 0))
    return usage_error("%s", "--vae-part head runs over whole frames: --vae-tiles and --vae-budget are the tail's");
  if (o.shape.vae_part == DIT_VAE_ENCODER && (o.shape.vae_tiles || o.vae_budget_gib > 0))
    return usage_error("%s", "--vae-part encoder runs over whole frames: --vae-tiles and --vae-budget are the decoder tail's");
  if (o.shape.vae_tiles && o.vae_budget_gib > 0) return usage_error("%s", "--vae-tiles and --vae-budget: give one (the budget picks the tiles)");
  if (sparse_extra && !o.shape.sparse.pattern) return usage_error("%s needs --sparse-attn", sparse_extra);
  if (o.shape.cp > 1 && !o.shape.cp_mode) o.shape.cp_mode = DIT_CP_GATHER;
  if (o.shape.cp_mode && o.shape.cp < 2) return usage_error("%s", "--cp-mode needs --cp N with N >= 2");
  if (o.shape.ulysses && o.shape.cp_mode != DIT_CP_USP) return usage_error("%s", "--ulysses needs --cp-mode usp");
  if (group_given && !reuse_given) return usage_error("%s", "--reuse-group needs --reuse ditango");
  if (cap_given && !reuse_given) return usage_error("%s", "--reuse-cache-mb needs --reuse ditango");
  if (cap_given && !(o.reuse_cache_mb > 0)) return usage_error("%s", "--reuse-cache-mb 0: expected a size in MiB > 0");
  int offloading = o.offload && strcmp(o.offload, "none");
  if (!offloading && (o.residency >= 0 || o.memory_budget_gib > 0 || o.latency_target_ms > 0 || o.profile))
    return usage_error("%s", "--residency, --memory-budget, --latency-target and --profile need --offload layerwise|chunked");
  if (offloading && !(o.chunk_mb > 0)) return usage_error("%s", "--chunk-mb must be positive");
  o.dump = o.dump_after ? stderr : stdout;
  char store_bundles[4200];
  if (o.store_dir && !out_given) {
    snprintf(store_bundles, sizeof store_bundles, "%s/bundles", o.store_dir);
    o.out_dir = store_bundles;
  }
  if (why) return dit_cache_why(&o);
  dit_compile_result_t r;
  dit_status_t s = dit_compile(&o, &r);
  if (s) return dit_status_report(s, "ditc");
  printf("bundle %s %s\n", r.identity, r.path);
  free(r.path);
  return 0;
}

static int cmd_inspect(int argc, char **argv) {
  if (argc != 1) return usage_error("%s", "inspect needs exactly one BUNDLE directory");
  dit_bundle_t *b;
  dit_status_t s = dit_bundle_open(argv[0], 0, &b);
  if (s) return dit_status_report(s, "ditc");
  dit_manifest_print(dit_bundle_manifest(b), stdout);
  dit_bundle_print_offload(b, stdout);
  dit_bundle_close(b);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("ditc 0.1.0 (sources %s, bundle schema %d.%d)\n", DIT_SOURCES_HASH, DIT_SCHEMA_MAJOR, DIT_SCHEMA_MINOR);
    return 0;
  }
  if (!strcmp(argv[1], "compile")) return cmd_compile(argc - 2, argv + 2, 0);
  if (!strcmp(argv[1], "cache") && argc > 2 && !strcmp(argv[2], "why")) return cmd_compile(argc - 3, argv + 3, 1);
  if (!strcmp(argv[1], "cache")) return dit_cache_main(argc - 2, argv + 2);
  if (!strcmp(argv[1], "keygen")) return dit_keygen_main(argc - 2, argv + 2);
  if (!strcmp(argv[1], "pack")) return dit_pack_main(argc - 2, argv + 2);
  if (!strcmp(argv[1], "inspect")) return cmd_inspect(argc - 2, argv + 2);
  return usage_error("unknown command '%s'", argv[1]);
}
