/* PNG and H.264 MP4 writers for decoded frames (media.h). */
#include "runtime/media.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/macros.h>
#include <libswscale/swscale.h>
#include <spng.h>

#include "base/fileio.h"

dit_media_kind_t dit_media_kind_of(const char *path) {
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : path)) return DIT_MEDIA_UNKNOWN;
  if (!strcasecmp(dot, ".png")) return DIT_MEDIA_PNG;
  if (!strcasecmp(dot, ".mp4")) return DIT_MEDIA_MP4;
  return DIT_MEDIA_UNKNOWN;
}

dit_status_t dit_media_item_path(const char *path, int b, char *out, size_t cap) {
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  const size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - path) : strlen(path);
  const int n = b ? snprintf(out, cap, "%.*s_%d%s", (int)stem, path, b, path + stem) : snprintf(out, cap, "%s", path);
  if (n < 0 || (size_t)n >= cap) return DIT_ERR(OUT_OF_RANGE, "%s: batch item %d's file name is too long", path, b);
  return DIT_OK;
}

/* Round half to even in fp32 (rintf in the default rounding mode), as numpy's round does on
 * diffusers' float32 images. */
uint8_t dit_media_to_u8(float x) {
  if (isnan(x)) return 0;
  float v = x * 0.5f + 0.5f; /* x * 0.5 is exact: a fused multiply-add rounds the same */
  v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
  return (uint8_t)rintf(v * 255.0f);
}

/* ---- the frames tensor ---- */

typedef struct frames_view {
  const dit_tensor_t *t;
  int64_t batch, frames, height, width;
} frames_view_t;

static dit_status_t frames_check(const char *path, const dit_tensor_t *t, frames_view_t *v) {
  char shape[160] = "";
  for (int i = 0, o = 0; i < t->rank && o < (int)sizeof shape - 24; i++)
    o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
  if (t->rank != 4 && t->rank != 5)
    return DIT_ERR(INVALID_ARGUMENT, "%s: frames: expected [B, 3, F, H, W] (video) or [B, 3, H, W] (image), found rank %d [%s]", path,
                   t->rank, shape);
  if (t->dtype != DIT_F32 && t->dtype != DIT_BF16 && t->dtype != DIT_F16)
    return DIT_ERR(INVALID_ARGUMENT, "%s: frames: expected f32, bf16 or f16 values, found %s", path, dit_dtype_name(t->dtype));
  if (t->dims[1] != 3)
    return DIT_ERR(INVALID_ARGUMENT, "%s: frames [%s]: expected 3 channels (RGB) in dimension 1, found %lld", path, shape,
                   (long long)t->dims[1]);
  v->t = t;
  v->batch = t->dims[0];
  v->frames = t->rank == 5 ? t->dims[2] : 1;
  v->height = t->dims[t->rank - 2], v->width = t->dims[t->rank - 1];
  if (v->batch < 1 || v->batch > DIT_MEDIA_MAX_BATCH)
    return DIT_ERR(INVALID_ARGUMENT, "%s: frames [%s]: expected a batch of 1..%d, found %lld", path, shape, DIT_MEDIA_MAX_BATCH,
                   (long long)v->batch);
  if (v->frames < 1 || v->frames > 1000000)
    return DIT_ERR(INVALID_ARGUMENT, "%s: frames [%s]: expected 1..1000000 frames, found %lld", path, shape, (long long)v->frames);
  if (v->height < 1 || v->height > DIT_MEDIA_MAX_SIDE || v->width < 1 || v->width > DIT_MEDIA_MAX_SIDE)
    return DIT_ERR(INVALID_ARGUMENT, "%s: frames [%s]: expected a height and width of 1..%d, found %lld x %lld", path, shape,
                   DIT_MEDIA_MAX_SIDE, (long long)v->height, (long long)v->width);
  if (!t->data) return DIT_ERR(INVALID_ARGUMENT, "%s: frames [%s]: no data", path, shape);
  return DIT_OK;
}

static float value_at(const dit_tensor_t *t, size_t i) {
  switch (t->dtype) {
    case DIT_BF16: return dit_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case DIT_F16: return dit_f16_to_f32(((const uint16_t *)t->data)[i]);
    default: return ((const float *)t->data)[i];
  }
}

/* Item b's frame f as interleaved RGB8 of out_w x out_h (>= the frame's size; the last column and
 * row repeat into the padding). */
static void frame_rgb8(const frames_view_t *v, int64_t b, int64_t f, int out_w, int out_h, uint8_t *rgb) {
  const size_t plane = (size_t)v->height * (size_t)v->width;
  for (int c = 0; c < 3; c++) {
    const size_t base = (((size_t)b * 3 + (size_t)c) * (size_t)v->frames + (size_t)f) * plane;
    for (int y = 0; y < out_h; y++) {
      const int64_t sy = y < v->height ? y : v->height - 1;
      for (int x = 0; x < out_w; x++) {
        const int64_t sx = x < v->width ? x : v->width - 1;
        const float x_ = value_at(v->t, base + (size_t)sy * (size_t)v->width + (size_t)sx);
        rgb[((size_t)y * (size_t)out_w + (size_t)x) * 3 + (size_t)c] = dit_media_to_u8(x_);
      }
    }
  }
}

/* ---- temporary files ---- */

/* A file being written: its final name and the temporary one beside it. */
typedef struct pending {
  char final[4096];
  char tmp[4112];
} pending_t;

static dit_status_t pending_open(pending_t *p, int *fd) {
  snprintf(p->tmp, sizeof p->tmp, "%s.tmpXXXXXX", p->final);
  *fd = mkstemp(p->tmp);
  if (*fd < 0) {
    p->tmp[0] = 0;
    return DIT_ERR(IO, "%s: cannot create a file beside it: %s", p->final, strerror(errno));
  }
  if (fchmod(*fd, 0644) != 0) {
    const int e = errno;
    close(*fd);
    *fd = -1;
    return DIT_ERR(IO, "%s: chmod: %s", p->tmp, strerror(e));
  }
  return DIT_OK;
}

static dit_status_t write_fd(int fd, const char *path, const void *data, size_t size) {
  const uint8_t *q = data;
  while (size) {
    const ssize_t w = write(fd, q, size);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return DIT_ERR(IO, "%s: write: %s", path, strerror(errno));
    q += w, size -= (size_t)w;
  }
  if (fsync(fd) != 0) return DIT_ERR(IO, "%s: fsync: %s", path, strerror(errno));
  return DIT_OK;
}

/* ---- PNG ---- */

static dit_status_t png_encode(const char *path, const uint8_t *rgb, int width, int height, void **out, size_t *out_len) {
  spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  if (!ctx) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the PNG encoder", path);
  struct spng_ihdr ihdr = {.width = (uint32_t)width, .height = (uint32_t)height, .bit_depth = 8, .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
  int e = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  if (!e) e = spng_set_ihdr(ctx, &ihdr);
  if (!e) e = spng_encode_image(ctx, rgb, (size_t)width * (size_t)height * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  *out = e ? NULL : spng_get_png_buffer(ctx, out_len, &e);
  spng_ctx_free(ctx);
  if (e || !*out) return DIT_ERR(INTERNAL, "%s: PNG encoding failed: %s", path, spng_strerror(e));
  return DIT_OK;
}

static dit_status_t png_write_fd(const pending_t *p, int fd, const uint8_t *rgb, int width, int height) {
  void *png;
  size_t len;
  DIT_RETURN_IF(png_encode(p->final, rgb, width, height, &png, &len));
  dit_status_t s = write_fd(fd, p->tmp, png, len);
  free(png);
  return s;
}

dit_status_t dit_media_encode_png_rgb8(const char *what, const uint8_t *rgb, int width, int height, void **png, size_t *len) {
  *png = NULL, *len = 0;
  if (width < 1 || height < 1 || width > DIT_MEDIA_MAX_SIDE || height > DIT_MEDIA_MAX_SIDE)
    return DIT_ERR(INVALID_ARGUMENT, "%s: image %d x %d: expected sides of 1..%d", what, width, height, DIT_MEDIA_MAX_SIDE);
  return png_encode(what, rgb, width, height, png, len);
}

dit_status_t dit_media_write_png_rgb8(const char *path, const uint8_t *rgb, int width, int height) {
  void *png;
  size_t len;
  DIT_RETURN_IF(dit_media_encode_png_rgb8(path, rgb, width, height, &png, &len));
  dit_status_t s = dit_file_write_atomic(path, png, len);
  free(png);
  return s;
}

/* ---- FFmpeg, loaded on first use ----
 * Through dlopen, as the runtime reaches CUDA: ditrun starts and writes PNGs and latents where
 * FFmpeg's libraries are absent (and the Python wheel does not carry their hundred-odd
 * dependencies), and MP4 output there says which library it needs. The sonames are the major
 * versions of the headers built against: the ABI those structures have. */

#define FF_FUNCTIONS(X) \
  X(AVUTIL, av_d2q) X(AVUTIL, av_dict_free) X(AVUTIL, av_dict_set) X(AVUTIL, av_frame_alloc) \
  X(AVUTIL, av_frame_free) X(AVUTIL, av_frame_get_buffer) X(AVUTIL, av_frame_make_writable) \
  X(AVUTIL, av_log_set_level) X(AVUTIL, av_strerror) \
  X(SWSCALE, sws_freeContext) X(SWSCALE, sws_getCoefficients) X(SWSCALE, sws_getContext) X(SWSCALE, sws_scale) \
  X(SWSCALE, sws_setColorspaceDetails) \
  X(AVCODEC, av_packet_alloc) X(AVCODEC, av_packet_free) X(AVCODEC, av_packet_rescale_ts) \
  X(AVCODEC, avcodec_alloc_context3) X(AVCODEC, avcodec_find_encoder) X(AVCODEC, avcodec_find_encoder_by_name) \
  X(AVCODEC, avcodec_free_context) X(AVCODEC, avcodec_open2) X(AVCODEC, avcodec_parameters_from_context) \
  X(AVCODEC, avcodec_receive_packet) X(AVCODEC, avcodec_send_frame) \
  X(AVFORMAT, av_interleaved_write_frame) X(AVFORMAT, av_write_trailer) \
  X(AVFORMAT, avformat_alloc_output_context2) X(AVFORMAT, avformat_free_context) \
  X(AVFORMAT, avformat_new_stream) X(AVFORMAT, avformat_write_header) X(AVFORMAT, avio_closep) \
  X(AVFORMAT, avio_open)

enum { AVUTIL, SWSCALE, AVCODEC, AVFORMAT, FF_LIBS };
static const char *const kFFLib[FF_LIBS] = {
    "libavutil.so." AV_STRINGIFY(LIBAVUTIL_VERSION_MAJOR), "libswscale.so." AV_STRINGIFY(LIBSWSCALE_VERSION_MAJOR),
    "libavcodec.so." AV_STRINGIFY(LIBAVCODEC_VERSION_MAJOR), "libavformat.so." AV_STRINGIFY(LIBAVFORMAT_VERSION_MAJOR)};
static const char *const kFFPackage[FF_LIBS] = {
    "libavutil" AV_STRINGIFY(LIBAVUTIL_VERSION_MAJOR), "libswscale" AV_STRINGIFY(LIBSWSCALE_VERSION_MAJOR),
    "libavcodec" AV_STRINGIFY(LIBAVCODEC_VERSION_MAJOR), "libavformat" AV_STRINGIFY(LIBAVFORMAT_VERSION_MAJOR)};

static struct {
#define X(lib, f) __typeof__(&f) f;
  FF_FUNCTIONS(X)
#undef X
} ff;
static char ff_error[512]; /* why loading failed; empty once loaded */
static pthread_once_t ff_once = PTHREAD_ONCE_INIT;

static void ff_load_once(void) {
  void *lib[FF_LIBS];
  for (int i = 0; i < FF_LIBS; i++)
    if (!(lib[i] = dlopen(kFFLib[i], RTLD_NOW | RTLD_LOCAL))) {
      snprintf(ff_error, sizeof ff_error, "MP4 output needs FFmpeg's %s (Debian package %s): %s", kFFLib[i], kFFPackage[i], dlerror());
      return;
    }
#define X(l, f)                                                                                   \
  if (!(*(void **)&ff.f = dlsym(lib[l], #f))) {                                                   \
    snprintf(ff_error, sizeof ff_error, "MP4 output: %s has no %s (%s)", kFFLib[l], #f, dlerror()); \
    return;                                                                                       \
  }
  FF_FUNCTIONS(X)
#undef X
}

static dit_status_t ff_load(const char *path) {
  pthread_once(&ff_once, ff_load_once);
  return ff_error[0] ? DIT_ERR(UNIMPLEMENTED, "%s: %s", path, ff_error) : DIT_OK;
}

/* ---- H.264 MP4 ---- */

static dit_status_t av_fail(const char *path, const char *what, int e) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = "";
  ff.av_strerror(e, buf, sizeof buf);
  return DIT_ERR(IO, "%s: %s: %s", path, what, buf);
}

typedef struct mp4 {
  AVFormatContext *oc;
  AVCodecContext *cc;
  AVStream *st;
  AVFrame *frame;
  AVPacket *pkt;
  struct SwsContext *sws;
} mp4_t;

/* Moves every packet the encoder has ready into the file. */
static dit_status_t mp4_drain(mp4_t *m, const char *path) {
  int e;
  while ((e = ff.avcodec_receive_packet(m->cc, m->pkt)) == 0) {
    ff.av_packet_rescale_ts(m->pkt, m->cc->time_base, m->st->time_base);
    m->pkt->stream_index = m->st->index;
    if ((e = ff.av_interleaved_write_frame(m->oc, m->pkt)) < 0) return av_fail(path, "writing a packet", e);
  }
  return e == AVERROR(EAGAIN) || e == AVERROR_EOF ? DIT_OK : av_fail(path, "H.264 encoding", e);
}

static dit_status_t mp4_open(mp4_t *m, const pending_t *p, int width, int height, double fps, int crf) {
  const char *path = p->final;
  const AVCodec *codec = ff.avcodec_find_encoder_by_name("libx264");
  if (!codec) codec = ff.avcodec_find_encoder(AV_CODEC_ID_H264);
  if (!codec) return DIT_ERR(UNIMPLEMENTED, "%s: this FFmpeg has no H.264 encoder (libavcodec without libx264 or another)", path);
  int e = ff.avformat_alloc_output_context2(&m->oc, NULL, "mp4", p->tmp);
  if (e < 0) return av_fail(path, "the mp4 muxer", e);
  if (!(m->st = ff.avformat_new_stream(m->oc, NULL)) || !(m->cc = ff.avcodec_alloc_context3(codec)) || !(m->frame = ff.av_frame_alloc()) ||
      !(m->pkt = ff.av_packet_alloc()))
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the encoder", path);
  const AVRational rate = ff.av_d2q(fps, 1000000);
  AVCodecContext *cc = m->cc;
  cc->width = width, cc->height = height, cc->pix_fmt = AV_PIX_FMT_YUV420P;
  cc->time_base = av_inv_q(rate), cc->framerate = rate;
  /* sRGB frames through BT.709's matrix into limited range, and the stream says so. */
  cc->color_range = AVCOL_RANGE_MPEG, cc->colorspace = AVCOL_SPC_BT709;
  cc->color_primaries = AVCOL_PRI_BT709, cc->color_trc = AVCOL_TRC_IEC61966_2_1;
  if (m->oc->oformat->flags & AVFMT_GLOBALHEADER) cc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary *opts = NULL;
  char q[16];
  snprintf(q, sizeof q, "%d", crf);
  if (!strcmp(codec->name, "libx264")) {
    ff.av_dict_set(&opts, "crf", q, 0);
    ff.av_dict_set(&opts, "preset", "medium", 0);
  } else {
    /* Other encoders take no crf: about 0.25 bits a pixel at crf 18, halving every 6 above. */
    cc->bit_rate = (int64_t)(0.25 * pow(2.0, (DIT_MEDIA_DEFAULT_CRF - crf) / 6.0) * width * height * fps);
  }
  e = ff.avcodec_open2(cc, codec, &opts);
  ff.av_dict_free(&opts);
  if (e < 0) return av_fail(path, codec->name, e);
  if ((e = ff.avcodec_parameters_from_context(m->st->codecpar, cc)) < 0) return av_fail(path, "stream parameters", e);
  m->st->time_base = cc->time_base;
  m->st->avg_frame_rate = m->st->r_frame_rate = rate;
  if ((e = ff.avio_open(&m->oc->pb, p->tmp, AVIO_FLAG_WRITE)) < 0) return av_fail(path, p->tmp, e);
  AVDictionary *mux = NULL;
  ff.av_dict_set(&mux, "movflags", "+faststart", 0); /* the index first: players start before the whole file arrives */
  e = ff.avformat_write_header(m->oc, &mux);
  ff.av_dict_free(&mux);
  if (e < 0) return av_fail(path, "writing the mp4 header", e);
  m->frame->format = cc->pix_fmt, m->frame->width = width, m->frame->height = height;
  if ((e = ff.av_frame_get_buffer(m->frame, 0)) < 0) return av_fail(path, "a frame buffer", e);
  m->sws = ff.sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
                             SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, NULL, NULL, NULL);
  if (!m->sws) return DIT_ERR(INTERNAL, "%s: no RGB to yuv420p conversion", path);
  const int *bt709 = ff.sws_getCoefficients(SWS_CS_ITU709);
  ff.sws_setColorspaceDetails(m->sws, bt709, 1, bt709, 0, 0, 1 << 16, 1 << 16);
  return DIT_OK;
}

static void mp4_close(mp4_t *m) {
  if (m->oc && m->oc->pb) ff.avio_closep(&m->oc->pb);
  ff.avformat_free_context(m->oc);
  ff.avcodec_free_context(&m->cc);
  ff.av_frame_free(&m->frame);
  ff.av_packet_free(&m->pkt);
  ff.sws_freeContext(m->sws);
}

static dit_status_t mp4_write(const pending_t *p, const frames_view_t *v, int64_t b, double fps, int crf, uint8_t *rgb) {
  const char *path = p->final;
  const int w = (int)(v->width + (v->width & 1)), h = (int)(v->height + (v->height & 1));
  DIT_RETURN_IF(ff_load(path));
  ff.av_log_set_level(AV_LOG_ERROR); /* the encoder's statistics are not ours to print */
  mp4_t m = {0};
  dit_status_t s = mp4_open(&m, p, w, h, fps, crf);
  for (int64_t f = 0; !s && f < v->frames; f++) {
    frame_rgb8(v, b, f, w, h, rgb);
    int e = ff.av_frame_make_writable(m.frame);
    if (e < 0) s = av_fail(path, "a frame buffer", e);
    if (!s) {
      const uint8_t *src[1] = {rgb};
      const int stride[1] = {w * 3};
      ff.sws_scale(m.sws, src, stride, 0, h, m.frame->data, m.frame->linesize);
      m.frame->pts = f;
      if ((e = ff.avcodec_send_frame(m.cc, m.frame)) < 0) s = av_fail(path, "H.264 encoding", e);
    }
    if (!s) s = mp4_drain(&m, path);
  }
  if (!s) {
    const int e = ff.avcodec_send_frame(m.cc, NULL);
    s = e < 0 ? av_fail(path, "H.264 encoding", e) : mp4_drain(&m, path);
  }
  if (!s) {
    const int e = ff.av_write_trailer(m.oc);
    if (e < 0) s = av_fail(path, "writing the mp4 index", e);
  }
  mp4_close(&m);
  return s;
}

/* ---- the whole write ---- */

dit_status_t dit_media_write(const char *path, const dit_tensor_t *frames, const dit_media_options_t *o) {
  const dit_media_kind_t kind = dit_media_kind_of(path);
  if (kind == DIT_MEDIA_UNKNOWN) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    return DIT_ERR(INVALID_ARGUMENT, "%s: unknown extension '%s': expected .mp4 (H.264 video) or .png (image)", path,
                   dot && (!slash || dot > slash) ? dot : "");
  }
  frames_view_t v;
  DIT_RETURN_IF(frames_check(path, frames, &v));
  const double fps = o && o->fps != 0 ? o->fps : DIT_MEDIA_DEFAULT_FPS;
  const int crf = o && o->crf ? o->crf : DIT_MEDIA_DEFAULT_CRF;
  if (!(fps >= 0.1 && fps <= 1000)) return DIT_ERR(INVALID_ARGUMENT, "%s: fps %g: expected 0.1..1000", path, fps);
  if (crf < 1 || crf > 51) return DIT_ERR(INVALID_ARGUMENT, "%s: crf %d: expected 1..51", path, crf);
  const int w = (int)(v.width + (kind == DIT_MEDIA_MP4 && (v.width & 1))), h = (int)(v.height + (kind == DIT_MEDIA_MP4 && (v.height & 1)));
  pending_t *files = calloc((size_t)v.batch, sizeof *files);
  /* swscale's vector loads read a few bytes past the last row it is given (valgrind: 4 bytes):
   * the rows are followed by FFmpeg's input padding, never read as pixels. */
  uint8_t *rgb = malloc((size_t)w * (size_t)h * 3 + AV_INPUT_BUFFER_PADDING_SIZE);
  dit_status_t s = files && rgb ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for %lld x %lld frames", path,
                                                    (long long)v.height, (long long)v.width);
  for (int64_t b = 0; !s && b < v.batch; b++) {
    pending_t *p = &files[b];
    int fd = -1;
    s = dit_media_item_path(path, (int)b, p->final, sizeof p->final);
    if (!s) s = pending_open(p, &fd);
    if (!s && kind == DIT_MEDIA_PNG) {
      frame_rgb8(&v, b, 0, w, h, rgb);
      s = png_write_fd(p, fd, rgb, w, h);
    }
    if (fd >= 0) close(fd);
    if (!s && kind == DIT_MEDIA_MP4) s = mp4_write(p, &v, b, fps, crf, rgb);
  }
  for (int64_t b = 0; !s && b < v.batch; b++)
    if (rename(files[b].tmp, files[b].final) != 0) s = DIT_ERR(IO, "%s: rename from %s: %s", files[b].final, files[b].tmp, strerror(errno));
    else files[b].tmp[0] = 0;
  for (int64_t b = 0; files && b < v.batch; b++)
    if (files[b].tmp[0]) unlink(files[b].tmp);
  free(files);
  free(rgb);
  return s;
}

/* ---- input images: PNG through libspng ---- */

void dit_image_free(dit_image_t *im) {
  if (!im) return;
  free(im->rgb);
  *im = (dit_image_t){0};
}

static dit_status_t image_alloc(const char *what, int width, int height, dit_image_t *out) {
  *out = (dit_image_t){0};
  if (width < 1 || height < 1 || width > DIT_MEDIA_MAX_SIDE || height > DIT_MEDIA_MAX_SIDE)
    return DIT_ERR(INVALID_ARGUMENT, "%s: image %d x %d: expected sides of 1..%d", what, width, height, DIT_MEDIA_MAX_SIDE);
  const size_t n = (size_t)width * (size_t)height * 3;
  if (!(out->rgb = malloc(n)))
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate %zu bytes for a %d x %d image", what, n, width, height);
  out->width = width, out->height = height;
  return DIT_OK;
}

/* The Orientation tag (0x0112) of an EXIF block (a TIFF header and IFD0, after up to two
 * "Exif\0\0" as PIL accepts it); -1 where there is none or the block is malformed. */
static int exif_orientation(const uint8_t *p, size_t n) {
  for (int i = 0; i < 2 && n >= 6 && !memcmp(p, "Exif\0\0", 6); i++) p += 6, n -= 6;
  if (n < 8) return -1;
  const int le = !memcmp(p, "II*\0", 4);
  if (!le && memcmp(p, "MM\0*", 4)) return -1;
#define U16(q) (le ? (uint32_t)(q)[0] | (uint32_t)(q)[1] << 8 : (uint32_t)(q)[0] << 8 | (uint32_t)(q)[1])
#define U32(q) (le ? U16(q) | U16((q) + 2) << 16 : U16(q) << 16 | U16((q) + 2))
  const uint32_t ifd = U32(p + 4);
  if (ifd > n || n - ifd < 2) return -1;
  const uint32_t count = U16(p + ifd);
  for (uint32_t i = 0; i < count && ifd + 2 + (size_t)(i + 1) * 12 <= n; i++) {
    const uint8_t *e = p + ifd + 2 + (size_t)i * 12;
    if (U16(e) != 0x0112 || U32(e + 4) != 1) continue;
    const uint32_t type = U16(e + 2);
    if (type == 3) return (int)U16(e + 8);
    if (type == 4) return U32(e + 8) > 8 ? 0 : (int)U32(e + 8);
  }
  return -1;
#undef U32
#undef U16
}

static int hex_digit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* "Raw profile type exif" text: hex digits (whitespace between them) after its third line. */
static int raw_profile_orientation(const char *t, size_t n) {
  const char *end = t + n;
  for (int lines = 0; t < end && lines < 3; t++) lines += *t == '\n';
  uint8_t *raw = malloc((size_t)(end - t) / 2 + 1);
  size_t m = 0;
  int hi = -1, ok = raw != NULL;
  for (; ok && t < end; t++) {
    if (*t == ' ' || *t == '\n' || *t == '\t' || *t == '\r' || *t == '\v' || *t == '\f') continue;
    const int d = hex_digit(*t);
    if (!(ok = d >= 0)) break;
    if (hi < 0) hi = d;
    else raw[m++] = (uint8_t)(hi << 4 | d), hi = -1;
  }
  const int o = ok && hi < 0 ? exif_orientation(raw, m) : -1;
  free(raw);
  return o;
}

/* The first tiff:Orientation="D or tiff:Orientation>D of XMP text; -1 where there is none. */
static int xmp_orientation(const char *t, size_t n) {
  static const char kTag[] = "tiff:Orientation";
  const size_t k = sizeof kTag - 1;
  for (const char *q = t, *end = t + n; (q = memmem(q, (size_t)(end - q), kTag, k)); q++) {
    const char *v = q + k;
    if (end - v >= 3 && v[0] == '=' && v[1] == '"' && v[2] >= '0' && v[2] <= '9') return v[2] - '0';
    if (end - v >= 2 && v[0] == '>' && v[1] >= '0' && v[1] <= '9') return v[1] - '0';
  }
  return -1;
}

/* The orientation PIL's getexif finds: the eXIf chunk's, or without one a "Raw profile type exif"
 * text's; where that has no Orientation tag, the XMP text's. */
static int png_orientation(spng_ctx *ctx) {
  struct spng_exif exif;
  const int has_exif = !spng_get_exif(ctx, &exif);
  int o = has_exif ? exif_orientation((const uint8_t *)exif.data, exif.length) : -1;
  uint32_t n = 0;
  if (spng_get_text(ctx, NULL, &n) || !n) return o;
  struct spng_text *text = calloc(n, sizeof *text);
  if (text && !spng_get_text(ctx, text, &n)) {
    /* PIL keeps the last text of a keyword. */
    const struct spng_text *raw = NULL, *xmp = NULL;
    for (uint32_t i = 0; i < n; i++) {
      if (!strcmp(text[i].keyword, "Raw profile type exif")) raw = &text[i];
      if (!strcmp(text[i].keyword, "XML:com.adobe.xmp")) xmp = &text[i];
    }
    if (!has_exif && raw) o = raw_profile_orientation(raw->text, raw->length);
    if (o < 0 && xmp) o = xmp_orientation(xmp->text, xmp->length);
  }
  free(text);
  return o;
}

/* ImageOps.exif_transpose: orientation 2..8 mirrors or turns the image (5..8 swap its sides). */
static dit_status_t image_orient(const char *what, int orientation, dit_image_t *im) {
  if (orientation < 2 || orientation > 8) return DIT_OK;
  const int w = im->width, h = im->height, swap = orientation >= 5;
  dit_image_t out;
  DIT_RETURN_IF(image_alloc(what, swap ? h : w, swap ? w : h, &out));
  for (int y = 0; y < out.height; y++)
    for (int x = 0; x < out.width; x++) {
      int sx = x, sy = y;
      switch (orientation) {
        case 2: sx = w - 1 - x; break;                /* FLIP_LEFT_RIGHT */
        case 3: sx = w - 1 - x, sy = h - 1 - y; break; /* ROTATE_180 */
        case 4: sy = h - 1 - y; break;                /* FLIP_TOP_BOTTOM */
        case 5: sx = y, sy = x; break;                /* TRANSPOSE */
        case 6: sx = y, sy = h - 1 - x; break;        /* ROTATE_270: a quarter turn clockwise */
        case 7: sx = w - 1 - y, sy = h - 1 - x; break; /* TRANSVERSE */
        default: sx = w - 1 - y, sy = x; break;       /* 8, ROTATE_90: a quarter turn counterclockwise */
      }
      memcpy(out.rgb + ((size_t)y * (size_t)out.width + (size_t)x) * 3, im->rgb + ((size_t)sy * (size_t)w + (size_t)sx) * 3, 3);
    }
  dit_image_free(im);
  *im = out;
  return DIT_OK;
}

static dit_status_t spng_fail(const char *what, int e) {
  if (e == SPNG_ESIGNATURE)
    return DIT_ERR(INVALID_ARGUMENT, "%s: not a PNG (the file does not start with the PNG signature)", what);
  if (e == SPNG_IO_EOF || e == SPNG_EOF)
    return DIT_ERR(INVALID_ARGUMENT, "%s: truncated PNG: the data ends before the image does", what);
  return DIT_ERR(INVALID_ARGUMENT, "%s: corrupt PNG: %s", what, spng_strerror(e));
}

dit_status_t dit_image_decode_png(const void *png, size_t len, const char *what, dit_image_t *out) {
  *out = (dit_image_t){0};
  spng_ctx *ctx = spng_ctx_new(0);
  if (!ctx) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the PNG decoder", what);
  /* Ancillary chunks are kept only up to these sizes: a small file cannot make us hold gigabytes. */
  int e = spng_set_chunk_limits(ctx, 1 << 26, 1 << 26);
  if (!e) e = spng_set_png_buffer(ctx, png, len);
  struct spng_ihdr ihdr;
  if (!e) e = spng_get_ihdr(ctx, &ihdr);
  if (e) {
    spng_ctx_free(ctx);
    return spng_fail(what, e);
  }
  if (ihdr.width > DIT_MEDIA_MAX_SIDE || ihdr.height > DIT_MEDIA_MAX_SIDE) {
    spng_ctx_free(ctx);
    return DIT_ERR(OUT_OF_RANGE, "%s: image %u x %u: more than the %d pixels a side allowed", what, ihdr.width, ihdr.height,
                   DIT_MEDIA_MAX_SIDE);
  }
  dit_status_t s = image_alloc(what, (int)ihdr.width, (int)ihdr.height, out);
  const size_t pixels = (size_t)ihdr.width * ihdr.height;
  /* PIL reads 16-bit gray as mode I;16, whose conversion to RGB clips at 255; every other 16-bit
   * kind by its high byte, as libspng's RGB8 does. */
  const int gray16 = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 16;
  uint16_t *ga16 = NULL;
  if (!s && gray16 && !(ga16 = malloc(pixels * 4)))
    s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate %zu bytes for 16-bit samples", what, pixels * 4);
  if (!s) {
    e = gray16 ? spng_decode_image(ctx, ga16, pixels * 4, SPNG_FMT_GA16, 0)
               : spng_decode_image(ctx, out->rgb, pixels * 3, SPNG_FMT_RGB8, 0);
    if (e) s = spng_fail(what, e);
  }
  for (size_t i = 0; !s && gray16 && i < pixels; i++) memset(out->rgb + i * 3, ga16[i * 2] > 255 ? 255 : ga16[i * 2], 3);
  free(ga16);
  if (!s) s = image_orient(what, png_orientation(ctx), out);
  spng_ctx_free(ctx);
  if (s) dit_image_free(out);
  return s;
}

dit_status_t dit_image_read(const char *path, dit_image_t *out) {
  *out = (dit_image_t){0};
  char *data = NULL;
  size_t n = 0;
  DIT_RETURN_IF(dit_file_read(path, DIT_MEDIA_MAX_PNG_BYTES, &data, &n));
  dit_status_t s = dit_image_decode_png(data, n, path, out);
  free(data);
  return s;
}

/* ---- Pillow's resampling (libImaging/Resample.c, 8 bits a sample) ----
 * Each output sample is a weighted sum over the input samples within the filter's support,
 * stretched by the downscale factor; the weights of one output sample are normalized to sum to
 * 1 in double, then rounded to fixed point with 22 fraction bits, and the sum (started at half a
 * unit) is shifted down and clipped to 0..255. The expressions below are evaluated in the same
 * order and precision as Pillow's, which is what makes the bytes equal. */

enum { RESAMPLE_BITS = 22 };

static double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return sin(x) / x;
}

static double filter_at(dit_resample_t f, double x) {
  if (f == DIT_RESAMPLE_LANCZOS) return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0;
  /* Keys' cubic with a = -0.5 */
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((-0.5 + 2.0) * x - (-0.5 + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * -0.5;
  return 0.0;
}

/* One axis's weights: for output i, k[i * ksize ..] applies to inputs first[i] .. first[i] + count[i] - 1. */
typedef struct axis_weights {
  int ksize;
  int *first, *count;
  int32_t *k;
} axis_weights_t;

static void axis_free(axis_weights_t *a) {
  free(a->first), free(a->count), free(a->k);
  *a = (axis_weights_t){0};
}

static dit_status_t axis_weights(int in_size, int out_size, dit_resample_t f, axis_weights_t *a) {
  *a = (axis_weights_t){0};
  const double scale = (double)in_size / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = (f == DIT_RESAMPLE_LANCZOS ? 3.0 : 2.0) * filterscale;
  a->ksize = (int)ceil(support) * 2 + 1;
  double *w = malloc((size_t)a->ksize * sizeof *w);
  a->first = malloc((size_t)out_size * sizeof *a->first);
  a->count = malloc((size_t)out_size * sizeof *a->count);
  a->k = calloc((size_t)out_size * (size_t)a->ksize, sizeof *a->k);
  if (!w || !a->first || !a->count || !a->k) {
    free(w);
    axis_free(a);
    return DIT_ERR(RESOURCE_EXHAUSTED, "image resize: cannot allocate weights for %d -> %d", in_size, out_size);
  }
  const double inv_filterscale = 1.0 / filterscale;
  for (int i = 0; i < out_size; i++) {
    const double center = (i + 0.5) * scale;
    int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5); /* truncation, as Pillow */
    if (lo < 0) lo = 0;
    if (hi > in_size) hi = in_size;
    const int n = hi - lo;
    double sum = 0.0;
    for (int j = 0; j < n; j++) sum += w[j] = filter_at(f, (j + lo - center + 0.5) * inv_filterscale);
    for (int j = 0; j < n; j++) {
      const double v = (sum != 0.0 ? w[j] / sum : w[j]) * (1 << RESAMPLE_BITS);
      a->k[(size_t)i * (size_t)a->ksize + (size_t)j] = (int32_t)(v < 0 ? -0.5 + v : 0.5 + v);
    }
    a->first[i] = lo, a->count[i] = n;
  }
  free(w);
  return DIT_OK;
}

static uint8_t clip8(int32_t acc) {
  if (acc < 0) return 0;
  acc >>= RESAMPLE_BITS;
  return acc > 255 ? 255 : (uint8_t)acc;
}

/* Horizontal pass: rows row0 .. row0 + rows - 1 of src (src_w pixels wide) into dst (rows x a->out wide). */
static void pass_h(const uint8_t *src, int src_w, int row0, int rows, const axis_weights_t *a, int out_w, uint8_t *dst) {
  for (int y = 0; y < rows; y++) {
    const uint8_t *line = src + (size_t)(row0 + y) * (size_t)src_w * 3;
    for (int x = 0; x < out_w; x++) {
      const int32_t *k = a->k + (size_t)x * (size_t)a->ksize;
      const uint8_t *p = line + (size_t)a->first[x] * 3;
      int32_t acc[3] = {1 << (RESAMPLE_BITS - 1), 1 << (RESAMPLE_BITS - 1), 1 << (RESAMPLE_BITS - 1)};
      for (int j = 0; j < a->count[x]; j++)
        for (int c = 0; c < 3; c++) acc[c] += p[j * 3 + c] * k[j];
      for (int c = 0; c < 3; c++) dst[((size_t)y * (size_t)out_w + (size_t)x) * 3 + (size_t)c] = clip8(acc[c]);
    }
  }
}

/* Vertical pass: src (w pixels wide, its row 0 being the input's row base) into dst (out_h x w). */
static void pass_v(const uint8_t *src, int w, int base, const axis_weights_t *a, int out_h, uint8_t *dst) {
  const size_t stride = (size_t)w * 3;
  for (int y = 0; y < out_h; y++) {
    const int32_t *k = a->k + (size_t)y * (size_t)a->ksize;
    const uint8_t *top = src + (size_t)(a->first[y] - base) * stride;
    for (size_t x = 0; x < stride; x++) {
      int32_t acc = 1 << (RESAMPLE_BITS - 1);
      for (int j = 0; j < a->count[y]; j++) acc += top[(size_t)j * stride + x] * k[j];
      dst[(size_t)y * stride + x] = clip8(acc);
    }
  }
}

dit_status_t dit_image_resize(const dit_image_t *in, int width, int height, dit_resample_t filter, dit_image_t *out) {
  *out = (dit_image_t){0};
  if (filter != DIT_RESAMPLE_BICUBIC && filter != DIT_RESAMPLE_LANCZOS)
    return DIT_ERR(INVALID_ARGUMENT, "image resize: unknown filter %d: expected bicubic or lanczos", (int)filter);
  if (!in->rgb || in->width < 1 || in->height < 1)
    return DIT_ERR(INVALID_ARGUMENT, "image resize: the input image %d x %d has no pixels", in->width, in->height);
  DIT_RETURN_IF(image_alloc("image resize", width, height, out));
  const int W = in->width, H = in->height;
  if (width == W && height == H) {
    memcpy(out->rgb, in->rgb, (size_t)width * (size_t)height * 3);
    return DIT_OK;
  }
  axis_weights_t ax = {0}, ay = {0};
  dit_status_t s = DIT_OK;
  if (width != W) s = axis_weights(W, width, filter, &ax);
  if (!s && height != H) s = axis_weights(H, height, filter, &ay);
  /* Pillow 13 runs the vertical pass first when the height shrinks by more than twice what the
   * width does (Pillow 12 and earlier: always the horizontal pass first). The horizontal-first
   * pass makes only the input rows the vertical one reads. */
  const int vertical_first = height < H && H - height > 2 * (W - width);
  const int row0 = ay.k ? ay.first[0] : 0, rows = ay.k ? ay.first[height - 1] + ay.count[height - 1] - row0 : H;
  const size_t tmp_size = vertical_first ? (size_t)W * (size_t)height * 3 : (size_t)width * (size_t)rows * 3;
  uint8_t *tmp = NULL;
  if (!s && ax.k && ay.k && !(tmp = malloc(tmp_size)))
    s = DIT_ERR(RESOURCE_EXHAUSTED, "image resize: cannot allocate %zu bytes between the passes", tmp_size);
  if (!s) {
    if (!ay.k) {
      pass_h(in->rgb, W, 0, H, &ax, width, out->rgb);
    } else if (!ax.k) {
      pass_v(in->rgb, W, 0, &ay, height, out->rgb);
    } else if (vertical_first) {
      pass_v(in->rgb, W, 0, &ay, height, tmp);
      pass_h(tmp, W, 0, height, &ax, width, out->rgb);
    } else {
      pass_h(in->rgb, W, row0, rows, &ax, width, tmp);
      pass_v(tmp, width, row0, &ay, height, out->rgb);
    }
  }
  free(tmp);
  axis_free(&ax), axis_free(&ay);
  if (s) dit_image_free(out);
  return s;
}

/* ---- transformers' center crop and shortest-edge size ---- */

dit_status_t dit_image_center_crop(const dit_image_t *in, int width, int height, dit_image_t *out) {
  *out = (dit_image_t){0};
  if (!in->rgb || in->width < 1 || in->height < 1)
    return DIT_ERR(INVALID_ARGUMENT, "image center crop: the input image %d x %d has no pixels", in->width, in->height);
  DIT_RETURN_IF(image_alloc("image center crop", width, height, out));
  /* numpy's floor division of (side - crop) by 2, negative when the crop pads. */
  const int dx = in->width - width, dy = in->height - height;
  const int left = dx >= 0 ? dx / 2 : -((-dx + 1) / 2), top = dy >= 0 ? dy / 2 : -((-dy + 1) / 2);
  memset(out->rgb, 0, (size_t)width * (size_t)height * 3);
  const int x0 = left < 0 ? -left : 0, x1 = in->width - left < width ? in->width - left : width;
  for (int y = 0; y < height; y++) {
    const int sy = y + top;
    if (sy < 0 || sy >= in->height || x1 <= x0) continue;
    const uint8_t *from = in->rgb + ((size_t)sy * (size_t)in->width + (size_t)(x0 + left)) * 3;
    memcpy(out->rgb + ((size_t)y * (size_t)width + (size_t)x0) * 3, from, (size_t)(x1 - x0) * 3);
  }
  return DIT_OK;
}

void dit_image_shortest_edge_size(int width, int height, int edge, int *out_width, int *out_height) {
  const int shorter = width <= height ? width : height, longer = width <= height ? height : width;
  /* Python's int(edge * long / short): a double quotient, truncated. */
  const int other = (int)((double)((int64_t)edge * longer) / shorter);
  *out_width = width <= height ? edge : other;
  *out_height = width <= height ? other : edge;
}
