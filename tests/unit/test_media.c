/* runtime/media.c and runtime/preview.c: a synthetic clip (gradients and a moving square, 9
 * frames of 64 x 48) written as H.264 MP4 and PNG and read back with FFmpeg's decoder and
 * libspng: the MP4's frame count, rate, size and PSNR at the default quality, the PNG exactly;
 * the 8-bit mapping; batch file names; odd sizes; refusals that leave no file; previews. Input
 * images against PIL's goldens (tests/data/images, make_goldens_image.py): every PNG kind decoded,
 * LANCZOS and BICUBIC resizes, transformers' center crop and shortest-edge sizes, byte for byte. */
#include <dirent.h>
#include <sys/stat.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
#include <spng.h>

#include "base/fileio.h"
#include "check.h"
#include "runtime/media.h"
#include "runtime/preview.h"

enum { B = 2, F = 9, H = 48, W = 64 };

/* Item b of the clip: R a horizontal ramp, G a vertical one, B a wave moving with time; a
 * 12 x 12 square crossing it, lighter than its background in item 0, darker in item 1. The
 * square shifts R, G and B alike, so its edges are brightness edges, which 4:2:0 keeps: an edge
 * in hue loses PSNR to the halved chroma alone (below 35 dB here even coded losslessly), which is
 * no fault of the encoder's; the ramps and the wave carry the chroma. */
static float *make_clip(int batch, int frames, int h, int w) {
  float *x = malloc((size_t)batch * 3 * frames * h * w * sizeof *x);
  for (int b = 0; b < batch; b++)
    for (int c = 0; c < 3; c++)
      for (int f = 0; f < frames; f++)
        for (int y = 0; y < h; y++)
          for (int i = 0; i < w; i++) {
            const int sq = i >= 4 + 5 * f && i < 16 + 5 * f && y >= 6 + 3 * f && y < 18 + 3 * f;
            float v = c == 0   ? 0.45f * (2.0f * i / (w - 1) - 1)
                      : c == 1 ? 0.45f * (2.0f * y / (h - 1) - 1)
                               : 0.4f * sinf(0.1f * (i + y) + 0.5f * f);
            if (sq) v += b ? -0.5f : 0.5f;
            x[((((size_t)b * 3 + c) * frames + f) * h + y) * w + i] = v;
          }
  return x;
}

/* The RGB8 the files should hold for item b, frame f. */
static void expected_rgb(const float *clip, int frames, int h, int w, int b, int f, uint8_t *rgb) {
  for (int y = 0; y < h; y++)
    for (int i = 0; i < w; i++)
      for (int c = 0; c < 3; c++)
        rgb[((size_t)y * w + i) * 3 + c] = dit_media_to_u8(clip[((((size_t)b * 3 + c) * frames + f) * h + y) * w + i]);
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  if (d) closedir(d);
  return n;
}

typedef struct decoded {
  int frames, w, h;
  AVRational fps;
  enum AVCodecID codec;
  int bt709, limited;
  uint8_t *rgb; /* frames x h x w x 3 */
} decoded_t;

static void keep_frame(decoded_t *d, const AVFrame *fr) {
  d->w = fr->width, d->h = fr->height;
  d->bt709 = fr->colorspace == AVCOL_SPC_BT709, d->limited = fr->color_range == AVCOL_RANGE_MPEG;
  struct SwsContext *sws = sws_getContext(fr->width, fr->height, fr->format, fr->width, fr->height, AV_PIX_FMT_RGB24,
                                          SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
  const int *k = sws_getCoefficients(SWS_CS_ITU709);
  sws_setColorspaceDetails(sws, k, 0, k, 1, 0, 1 << 16, 1 << 16);
  const size_t one = (size_t)fr->width * fr->height * 3;
  d->rgb = realloc(d->rgb, one * (d->frames + 1));
  uint8_t *dst[1] = {d->rgb + one * d->frames};
  const int stride[1] = {fr->width * 3};
  sws_scale(sws, (const uint8_t *const *)fr->data, fr->linesize, 0, fr->height, dst, stride);
  sws_freeContext(sws);
  d->frames++;
}

/* Decodes every frame of an MP4 with libavformat and libavcodec into RGB8. */
static int decode_mp4(const char *path, decoded_t *d) {
  memset(d, 0, sizeof *d);
  AVFormatContext *fc = NULL;
  if (avformat_open_input(&fc, path, NULL, NULL) < 0) return -1;
  const AVCodec *dec = NULL;
  int si = avformat_find_stream_info(fc, NULL) < 0 ? -1 : av_find_best_stream(fc, AVMEDIA_TYPE_VIDEO, -1, -1, &dec, 0);
  if (si < 0) {
    avformat_close_input(&fc);
    return -1;
  }
  d->fps = fc->streams[si]->avg_frame_rate, d->codec = fc->streams[si]->codecpar->codec_id;
  AVCodecContext *cc = avcodec_alloc_context3(dec);
  avcodec_parameters_to_context(cc, fc->streams[si]->codecpar);
  avcodec_open2(cc, dec, NULL);
  AVPacket *pkt = av_packet_alloc();
  AVFrame *fr = av_frame_alloc();
  for (int more = 1; more;) {
    more = av_read_frame(fc, pkt) >= 0;
    if (more && pkt->stream_index != si) {
      av_packet_unref(pkt);
      continue;
    }
    avcodec_send_packet(cc, more ? pkt : NULL);
    av_packet_unref(pkt);
    while (avcodec_receive_frame(cc, fr) == 0) keep_frame(d, fr);
  }
  av_frame_free(&fr);
  av_packet_free(&pkt);
  avcodec_free_context(&cc);
  avformat_close_input(&fc);
  return 0;
}

/* A PNG decoded with libspng into RGB8 (malloc'ed); NULL when it does not decode. */
static uint8_t *decode_png(const char *path, int *w, int *h) {
  char *data;
  size_t n;
  dit_status_t s = dit_file_read(path, 1 << 26, &data, &n);
  if (s) return dit_status_free(s), NULL;
  spng_ctx *ctx = spng_ctx_new(0);
  struct spng_ihdr ihdr;
  size_t size = 0;
  uint8_t *out = NULL;
  if (!spng_set_png_buffer(ctx, data, n) && !spng_get_ihdr(ctx, &ihdr) && !spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size)) {
    out = malloc(size);
    if (spng_decode_image(ctx, out, size, SPNG_FMT_RGB8, 0)) free(out), out = NULL;
    *w = (int)ihdr.width, *h = (int)ihdr.height;
  }
  spng_ctx_free(ctx);
  free(data);
  return out;
}

/* PSNR of frame f of d (its top-left h x w) against the clip's item 0. */
static double psnr(const decoded_t *d, int f, const float *clip, int frames, int h, int w) {
  uint8_t *want = malloc((size_t)h * w * 3);
  expected_rgb(clip, frames, h, w, 0, f, want);
  double se = 0;
  const uint8_t *got = d->rgb + (size_t)d->w * d->h * 3 * f;
  for (int y = 0; y < h; y++)
    for (int i = 0; i < w * 3; i++) {
      const double e = (double)got[(size_t)y * d->w * 3 + i] - want[(size_t)y * w * 3 + i];
      se += e * e;
    }
  free(want);
  const double mse = se / ((double)h * w * 3);
  return mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : 99;
}

static void test_to_u8(void) {
  CHECK_EQ_INT(dit_media_to_u8(-1.0f), 0);
  CHECK_EQ_INT(dit_media_to_u8(1.0f), 255);
  CHECK_EQ_INT(dit_media_to_u8(-7.0f), 0);
  CHECK_EQ_INT(dit_media_to_u8(3.0f), 255);
  CHECK_EQ_INT(dit_media_to_u8(NAN), 0);
  /* 0 -> 0.5 * 255 = 127.5: numpy's round goes to the even 128. */
  CHECK_EQ_INT(dit_media_to_u8(0.0f), 128);
  /* x = 2 * 0.5 / 255 * k - 1 puts v * 255 near k + 0.5 in fp32: half to even, as numpy. */
  int even = 0, n = 0;
  for (int k = 0; k < 255; k++) {
    const float v = (k + 0.5f) / 255.0f, x = 2.0f * v - 1.0f;
    const float y = (x * 0.5f + 0.5f) * 255.0f;
    if (y == k + 0.5f) n++, even += dit_media_to_u8(x) == (k % 2 ? k + 1 : k);
  }
  CHECK(n > 0);
  CHECK_EQ_INT(even, n);
}

static void test_item_paths(void) {
  char p[256];
  CHECK_OK(dit_media_item_path("out/a.png", 0, p, sizeof p));
  CHECK(!strcmp(p, "out/a.png"));
  CHECK_OK(dit_media_item_path("out/a.b.mp4", 2, p, sizeof p));
  CHECK(!strcmp(p, "out/a.b_2.mp4"));
  CHECK_OK(dit_media_item_path("x.y/clip", 1, p, sizeof p));
  CHECK(!strcmp(p, "x.y/clip_1"));
  CHECK_EQ_INT(dit_media_kind_of("a/B.PNG"), DIT_MEDIA_PNG);
  CHECK_EQ_INT(dit_media_kind_of("a.mp4/x"), DIT_MEDIA_UNKNOWN);
  CHECK_EQ_INT(dit_media_kind_of("dir/.mp4"), DIT_MEDIA_UNKNOWN);
}

static void test_mp4_png(const char *dir) {
  float *clip = make_clip(B, F, H, W);
  dit_tensor_t t = {clip, DIT_F32, 5, {B, 3, F, H, W}};
  char mp4[CHECK_PATH_MAX], mp4_1[CHECK_PATH_MAX], png[CHECK_PATH_MAX], png_1[CHECK_PATH_MAX];
  check_pathf(mp4, "%s/clip.mp4", dir);
  check_pathf(mp4_1, "%s/clip_1.mp4", dir);
  check_pathf(png, "%s/clip.png", dir);
  check_pathf(png_1, "%s/clip_1.png", dir);
  CHECK_OK(dit_media_write(mp4, &t, NULL));
  CHECK_EQ_INT(dir_entries(dir), 2); /* clip.mp4, clip_1.mp4: no temporary left */
  decoded_t d;
  CHECK_EQ_INT(decode_mp4(mp4, &d), 0);
  CHECK_EQ_INT(d.codec, AV_CODEC_ID_H264);
  CHECK_EQ_INT(d.frames, F);
  CHECK_EQ_INT(d.w, W);
  CHECK_EQ_INT(d.h, H);
  CHECK_EQ_INT(d.fps.num, 16);
  CHECK_EQ_INT(d.fps.den, 1);
  CHECK(d.bt709 && d.limited);
  double worst = 99;
  for (int f = 0; f < d.frames && f < F; f++) {
    const double p = psnr(&d, f, clip, F, H, W);
    if (p < worst) worst = p;
  }
  printf("mp4 at the default crf: worst frame PSNR %.2f dB\n", worst);
  CHECK(worst >= 35.0);
  /* The moving square is where it should be in the last frame (not a repeated first frame). */
  const uint8_t *last = d.rgb + (size_t)W * H * 3 * (F - 1);
  const int sy = 6 + 3 * (F - 1) + 6, sx = 4 + 5 * (F - 1) + 6;
  CHECK(last[((size_t)sy * W + sx) * 3 + 1] > 200);   /* G 0.24 + 0.5 -> 222 */
  CHECK(d.rgb[((size_t)sy * W + sx) * 3 + 1] < 180); /* frame 0 there: G 0.24 -> 158 */
  free(d.rgb);
  /* Item 1: its own file, its own square (R -0.31 - 0.5 -> 25, 88 without it). */
  CHECK_EQ_INT(decode_mp4(mp4_1, &d), 0);
  CHECK_EQ_INT(d.frames, F);
  CHECK(d.frames == F && d.rgb[((size_t)(6 + 6) * W + 4 + 6) * 3 + 0] < 45);
  free(d.rgb);

  /* Another rate and quality: a coarser crf makes a smaller file. */
  struct stat at18, at30;
  CHECK(stat(mp4, &at18) == 0);
  dit_media_options_t o = {.fps = 24, .crf = 30};
  t.dims[0] = 1;
  CHECK_OK(dit_media_write(mp4, &t, &o));
  CHECK(stat(mp4, &at30) == 0 && at30.st_size < at18.st_size);
  CHECK_EQ_INT(decode_mp4(mp4, &d), 0);
  CHECK_EQ_INT(d.fps.num, 24);
  CHECK_EQ_INT(d.frames, F);
  free(d.rgb);

  /* PNG: frame 0 of each item, exact. */
  t.dims[0] = B;
  CHECK_OK(dit_media_write(png, &t, NULL));
  uint8_t *want = malloc((size_t)W * H * 3);
  for (int b = 0; b < B; b++) {
    int w = 0, h = 0;
    uint8_t *got = decode_png(b ? png_1 : png, &w, &h);
    CHECK(got != NULL);
    CHECK_EQ_INT(w, W);
    CHECK_EQ_INT(h, H);
    expected_rgb(clip, F, H, W, b, 0, want);
    CHECK(got && w == W && h == H && !memcmp(got, want, (size_t)W * H * 3));
    free(got);
  }
  /* An image tensor [B, 3, H, W] in bf16: the same pixels as frame 0 where bf16 holds them. */
  uint16_t *img = malloc((size_t)3 * H * W * sizeof *img);
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < H * W; i++) img[(size_t)c * H * W + i] = dit_f32_to_bf16(clip[(size_t)c * F * H * W + i]);
  dit_tensor_t it = {img, DIT_BF16, 4, {1, 3, H, W}};
  CHECK_OK(dit_media_write(png, &it, NULL));
  int w = 0, h = 0;
  uint8_t *got = decode_png(png, &w, &h);
  int same = got != NULL;
  for (int c = 0; same && c < 3; c++)
    for (int i = 0; same && i < H * W; i++) same = got[(size_t)i * 3 + c] == dit_media_to_u8(dit_bf16_to_f32(img[(size_t)c * H * W + i]));
  CHECK(same);
  free(got);
  free(img);
  free(want);
  free(clip);
}

/* 4:2:0 needs even sizes: 63 x 47 frames become a 64 x 48 video whose last column and row repeat. */
static void test_odd(const char *dir) {
  float *clip = make_clip(1, 3, 47, 63);
  dit_tensor_t t = {clip, DIT_F32, 5, {1, 3, 3, 47, 63}};
  char mp4[CHECK_PATH_MAX];
  check_pathf(mp4, "%s/odd.mp4", dir);
  CHECK_OK(dit_media_write(mp4, &t, NULL));
  decoded_t d;
  CHECK_EQ_INT(decode_mp4(mp4, &d), 0);
  CHECK_EQ_INT(d.w, 64);
  CHECK_EQ_INT(d.h, 48);
  CHECK_EQ_INT(d.frames, 3);
  CHECK(d.frames == 3 && psnr(&d, 1, clip, 3, 47, 63) >= 35.0);
  free(d.rgb);
  free(clip);
}

static void test_refusals(const char *dir) {
  float px[3 * 2 * 4 * 4] = {0};
  char p[CHECK_PATH_MAX], nodir[CHECK_PATH_MAX], under_file[CHECK_PATH_MAX];
  check_pathf(p, "%s/x.mp4", dir);
  dit_tensor_t rank3 = {px, DIT_F32, 3, {3, 4, 4}};
  CHECK_ERR(dit_media_write(p, &rank3, NULL), INVALID_ARGUMENT,
            "x.mp4: frames: expected [B, 3, F, H, W] (video) or [B, 3, H, W] (image), found rank 3 [3, 4, 4]");
  dit_tensor_t four = {px, DIT_F32, 4, {1, 4, 4, 4}};
  check_pathf(p, "%s/x.png", dir);
  CHECK_ERR(dit_media_write(p, &four, NULL), INVALID_ARGUMENT,
            "x.png: frames [1, 4, 4, 4]: expected 3 channels (RGB) in dimension 1, found 4");
  dit_tensor_t ints = {px, DIT_I32, 4, {1, 3, 4, 4}};
  CHECK_ERR(dit_media_write(p, &ints, NULL), INVALID_ARGUMENT, "expected f32, bf16 or f16 values, found i32");
  dit_tensor_t ok = {px, DIT_F32, 5, {1, 3, 2, 4, 4}};
  check_pathf(p, "%s/x.gif", dir);
  CHECK_ERR(dit_media_write(p, &ok, NULL), INVALID_ARGUMENT,
            "x.gif: unknown extension '.gif': expected .mp4 (H.264 video) or .png (image)");
  check_pathf(p, "%s/noext", dir);
  CHECK_ERR(dit_media_write(p, &ok, NULL), INVALID_ARGUMENT, "unknown extension ''");
  check_pathf(nodir, "%s/missing/x.mp4", dir);
  CHECK_ERR(dit_media_write(nodir, &ok, NULL), IO, "missing/x.mp4: cannot create a file beside it: No such file or directory");
  check_pathf(p, "%s/plain", dir);
  CHECK_OK(dit_file_write_atomic(p, "x", 1));
  check_pathf(under_file, "%s/plain/x.png", dir);
  CHECK_ERR(dit_media_write(under_file, &ok, NULL), IO, "plain/x.png: cannot create a file beside it: Not a directory");
  dit_media_options_t fps = {.fps = -5, .crf = 0};
  check_pathf(p, "%s/x.mp4", dir);
  CHECK_ERR(dit_media_write(p, &ok, &fps), INVALID_ARGUMENT, "fps -5: expected 0.1..1000");
  dit_media_options_t crf = {.fps = 0, .crf = 60};
  CHECK_ERR(dit_media_write(p, &ok, &crf), INVALID_ARGUMENT, "crf 60: expected 1..51");
  CHECK_EQ_INT(dir_entries(dir), 1); /* only "plain" */
}

static void test_preview(const char *dir) {
  /* [1, 4, 3, 2, 3] latents: the fallback shows channels 0-2 scaled to their ranges. */
  enum { C = 4, LF = 3, LH = 2, LW = 3 };
  float z[C * LF * LH * LW];
  for (int i = 0; i < C * LF * LH * LW; i++) z[i] = (float)(i % 7) - 3.0f;
  const int64_t dims[5] = {1, C, LF, LH, LW};
  uint8_t *rgb = NULL;
  int w = 0, h = 0;
  CHECK_OK(dit_preview_image(NULL, z, 5, dims, &rgb, &w, &h));
  CHECK_EQ_INT(w, LW * DIT_PREVIEW_FALLBACK_UPSAMPLE * LF);
  CHECK_EQ_INT(h, LH * DIT_PREVIEW_FALLBACK_UPSAMPLE);
  /* Channel 0's minimum is black, its maximum white. */
  int has0 = 0, has255 = 0;
  for (int i = 0; rgb && i < w * h; i++) has0 |= rgb[i * 3] == 0, has255 |= rgb[i * 3] == 255;
  CHECK(has0 && has255);
  /* Nearest upsampling: an 8 x 8 block is one colour. */
  CHECK(rgb && !memcmp(rgb, rgb + ((size_t)7 * w + 7) * 3, 3));
  free(rgb);
  /* A map: rgb = M z + bias, M picking channel 3 for every colour, bias 0. */
  const float m[3 * C] = {0, 0, 0, 0.25f, 0, 0, 0, 0.25f, 0, 0, 0, 0.25f};
  const dit_preview_map_t map = {C, m, {0, 0, 0}, 2};
  CHECK_OK(dit_preview_image(&map, z, 5, dims, &rgb, &w, &h));
  CHECK_EQ_INT(w, LW * 2 * LF);
  CHECK_EQ_INT(h, LH * 2);
  const float z3 = z[3 * LF * LH * LW]; /* channel 3, frame 0, pixel (0, 0) */
  CHECK(rgb && rgb[0] == dit_media_to_u8(0.25f * z3) && rgb[1] == rgb[0] && rgb[2] == rgb[0]);
  free(rgb);
  const dit_preview_map_t wrong = {16, m, {0, 0, 0}, 8};
  CHECK_ERR(dit_preview_check(&wrong, 5, dims), INVALID_ARGUMENT, "map takes 16 channels, the latents have 4");
  const int64_t packed[3] = {1, 256, 64};
  CHECK_ERR(dit_preview_check(NULL, 3, packed), UNIMPLEMENTED, "the latents have rank 3");
  /* A long video shows its first and last latent frames and two between. */
  const int64_t many[5] = {1, 3, 21, 1, 1};
  float ramp[3 * 21];
  for (int c = 0; c < 3; c++)
    for (int f = 0; f < 21; f++) ramp[c * 21 + f] = (float)f;
  CHECK_OK(dit_preview_image(NULL, ramp, 5, many, &rgb, &w, &h));
  CHECK_EQ_INT(w, DIT_PREVIEW_MAX_FRAMES * DIT_PREVIEW_FALLBACK_UPSAMPLE);
  CHECK(rgb && rgb[0] == 0 && rgb[((size_t)w - 1) * 3] == 255);
  free(rgb);
  CHECK_OK(dit_preview_write(dir, 7, NULL, z, 5, dims));
  char p[CHECK_PATH_MAX];
  check_pathf(p, "%s/step_007.png", dir);
  uint8_t *got = decode_png(p, &w, &h);
  CHECK(got != NULL);
  CHECK_EQ_INT(w, LW * DIT_PREVIEW_FALLBACK_UPSAMPLE * LF);
  free(got);
  /* In memory: the file's bytes. */
  void *png = NULL;
  size_t len = 0, n = 0;
  char *file = NULL;
  CHECK_OK(dit_preview_png(NULL, z, 5, dims, &png, &len));
  CHECK_OK(dit_file_read(p, 1 << 20, &file, &n));
  CHECK(png && len == n && len > 8 && !memcmp(png, file, n) && !memcmp(png, "\x89PNG\r\n\x1a\n", 8));
  free(png);
  free(file);
  CHECK_ERR(dit_media_encode_png_rgb8("preview", (const uint8_t *)z, 0, 4, &png, &len), INVALID_ARGUMENT, "preview: image 0 x 4: expected sides of 1..16384");
  CHECK(png == NULL);
}

/* ---- input images against tests/data/images ---- */

static char *read_text(const char *path, size_t *n) {
  char *t = NULL;
  dit_status_t s = dit_file_read(path, 1 << 24, &t, n);
  if (s) {
    fprintf(stderr, "%s\n", dit_status_message(s));
    dit_status_free(s);
    return NULL;
  }
  return t;
}

/* The image INPUT.png of a golden named INPUT[.STEP].rgb, put through STEP. */
static dit_status_t golden_case(const char *dir, const char *file, int w, int h, dit_image_t *out) {
  char input[256], path[CHECK_PATH_MAX], step[64] = "";
  const char *dot = strchr(file, '.');
  snprintf(input, sizeof input, "%.*s", (int)(dot - file), file);
  if (strcmp(dot, ".rgb")) snprintf(step, sizeof step, "%.*s", (int)(strrchr(file, '.') - dot - 1), dot + 1);
  check_pathf(path, "%s/%s.png", dir, input);
  dit_image_t im;
  DIT_RETURN_IF(dit_image_read(path, &im));
  dit_status_t s = DIT_OK;
  if (!step[0]) {
    *out = im;
    return DIT_OK;
  } else if (!strncmp(step, "lanczos_", 8)) {
    s = dit_image_resize(&im, w, h, DIT_RESAMPLE_LANCZOS, out);
  } else if (!strncmp(step, "bicubic_", 8)) {
    s = dit_image_resize(&im, w, h, DIT_RESAMPLE_BICUBIC, out);
  } else if (!strncmp(step, "crop_", 5)) {
    s = dit_image_center_crop(&im, w, h, out);
  } else if (!strncmp(step, "clip_", 5)) { /* CLIPImageProcessor: shortest edge to w, BICUBIC, centre w x h */
    int sw, sh;
    dit_image_t mid;
    dit_image_shortest_edge_size(im.width, im.height, w, &sw, &sh);
    s = dit_image_resize(&im, sw, sh, DIT_RESAMPLE_BICUBIC, &mid);
    if (!s) s = dit_image_center_crop(&mid, w, h, out);
    dit_image_free(&mid);
  } else {
    s = DIT_ERR(INVALID_ARGUMENT, "%s: unknown step '%s'", file, step);
  }
  dit_image_free(&im);
  return s;
}

static void test_image_goldens(void) {
  char dir[CHECK_PATH_MAX], path[CHECK_PATH_MAX];
  check_pathf(dir, "%s/images", getenv("DIT_TEST_DATA") ? getenv("DIT_TEST_DATA") : "data");
  check_pathf(path, "%s/meta.txt", dir);
  size_t n = 0;
  char *meta = read_text(path, &n);
  CHECK(meta != NULL);
  int images = 0, sizes = 0;
  for (char *line = meta, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    char file[128];
    int a, b, c, d, e;
    if (sscanf(line, "shortest_edge %d %d %d %d %d", &a, &b, &c, &d, &e) == 5) {
      int w = 0, h = 0;
      dit_image_shortest_edge_size(a, b, c, &w, &h);
      if (w != d || h != e) fprintf(stderr, "shortest edge %d of %d x %d: expected %d x %d, got %d x %d\n", c, a, b, d, e, w, h);
      CHECK(w == d && h == e);
      sizes++;
      continue;
    }
    if (line[0] == '#' || sscanf(line, "%127s %d %d", file, &a, &b) != 3) continue;
    dit_image_t got = {0};
    CHECK_OK(golden_case(dir, file, a, b, &got));
    check_pathf(path, "%s/%s", dir, file);
    size_t wn = 0;
    char *want = read_text(path, &wn);
    const int same = want && got.rgb && got.width == a && got.height == b && wn == (size_t)a * b * 3 && !memcmp(got.rgb, want, wn);
    if (!same) {
      size_t diff = 0, worst = 0;
      for (size_t i = 0; want && got.rgb && wn == (size_t)got.width * got.height * 3 && i < wn; i++) {
        const int dv = abs((int)got.rgb[i] - (uint8_t)want[i]);
        diff += dv != 0, worst = (size_t)dv > worst ? (size_t)dv : worst;
      }
      fprintf(stderr, "%s: got %d x %d, expected %d x %d; %zu bytes differ (by up to %zu)\n", file, got.width, got.height, a, b,
              diff, worst);
    }
    CHECK(same);
    free(want);
    dit_image_free(&got);
    images++;
  }
  free(meta);
  CHECK(images >= 36 && sizes >= 9); /* every case of meta.txt was read */
}

static void test_image_refusals(const char *tmp) {
  char data[CHECK_PATH_MAX], p[CHECK_PATH_MAX];
  check_pathf(data, "%s/images", getenv("DIT_TEST_DATA") ? getenv("DIT_TEST_DATA") : "data");
  dit_image_t im = {0};
  check_pathf(p, "%s/absent.png", tmp);
  CHECK_ERR(dit_image_read(p, &im), NOT_FOUND, "absent.png: cannot open: No such file or directory");
  check_pathf(p, "%s/meta.txt", data);
  CHECK_ERR(dit_image_read(p, &im), INVALID_ARGUMENT, "meta.txt: not a PNG (the file does not start with the PNG signature)");
  check_pathf(p, "%s/refuse_large.png", data);
  CHECK_ERR(dit_image_read(p, &im), OUT_OF_RANGE, "refuse_large.png: image 16385 x 2: more than the 16384 pixels a side allowed");
  check_pathf(p, "%s/refuse_crc.png", data);
  CHECK_ERR(dit_image_read(p, &im), INVALID_ARGUMENT, "refuse_crc.png: corrupt PNG: ");
  /* Every cut of a PNG is refused as truncated (or, cut inside the signature, as not a PNG). */
  check_pathf(p, "%s/photo.png", data);
  size_t n = 0;
  char *png = read_text(p, &n);
  CHECK(png && n > 100);
  int truncated = 0;
  for (size_t cut = 0; png && cut < n; cut += cut < 64 ? 1 : 97) {
    dit_status_t s = dit_image_decode_png(png, cut, "cut.png", &im);
    CHECK(s && im.rgb == NULL);
    if (s && !strstr(dit_status_message(s), "truncated") && !strstr(dit_status_message(s), "not a PNG"))
      fprintf(stderr, "cut at %zu: %s\n", cut, dit_status_message(s));
    truncated += s && strstr(dit_status_message(s), "cut.png: truncated PNG: the data ends before the image does") != NULL;
    dit_status_free(s);
  }
  CHECK(truncated > 20);
  /* Without its IEND chunk the image is whole: PIL reads it, and so do we. */
  dit_image_t whole = {0};
  CHECK_OK(dit_image_decode_png(png, n, "photo.png", &whole));
  CHECK_OK(dit_image_decode_png(png, n - 12, "no_iend.png", &im));
  CHECK(whole.rgb && im.rgb && im.width == whole.width && !memcmp(im.rgb, whole.rgb, (size_t)whole.width * whole.height * 3));
  dit_image_free(&im);
  dit_image_free(&whole);
  free(png);
  /* Sizes and arguments. */
  uint8_t px[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const dit_image_t two = {2, 2, px};
  dit_image_t out = {0};
  CHECK_ERR(dit_image_resize(&two, 0, 5, DIT_RESAMPLE_LANCZOS, &out), INVALID_ARGUMENT,
            "image resize: image 0 x 5: expected sides of 1..16384");
  CHECK_ERR(dit_image_resize(&two, 5, 5, (dit_resample_t)9, &out), INVALID_ARGUMENT,
            "unknown filter 9: expected bicubic or lanczos");
  CHECK_ERR(dit_image_center_crop(&two, 3, 16385, &out), INVALID_ARGUMENT,
            "image center crop: image 3 x 16385: expected sides of 1..16384");
  CHECK(out.rgb == NULL);
  /* One pixel up to many: every output is that pixel (the weights sum to one). */
  const dit_image_t one = {1, 1, px};
  CHECK_OK(dit_image_resize(&one, 7, 3, DIT_RESAMPLE_LANCZOS, &out));
  int flat = out.rgb != NULL;
  for (int i = 0; flat && i < 21; i++) flat = !memcmp(out.rgb + i * 3, px, 3);
  CHECK(flat);
  dit_image_free(&out);
  CHECK(out.rgb == NULL && out.width == 0);
}

int main(void) {
  test_to_u8();
  test_item_paths();
  test_mp4_png(check_tmpdir("media_files"));
  test_odd(check_tmpdir("media_odd"));
  test_refusals(check_tmpdir("media_refusals"));
  test_preview(check_tmpdir("media_preview"));
  test_image_goldens();
  test_image_refusals(check_tmpdir("media_images"));
  return check_summary("test_media");
}
