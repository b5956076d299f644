// JPEG / PNG decoding into resized RGB; see image_decoder.h.
//
// libjpeg and libpng report fatal errors by calling a handler that must not
// return; ours longjmp back to the function that called into the library.
// Those functions keep no local object with a destructor, so the jump skips
// nothing; what they fill lives in members.
#include "workloads/imagenet/image_decoder.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs FILE and size_t declared first (<cstdio> above).
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "absl/strings/str_cat.h"

namespace batchd {
namespace {

// libjpeg's working memory for one image (progressive files hold all their
// coefficients); beyond it the decode fails cleanly.
constexpr long kJpegMaxMemory = 1L << 30;

struct JpegError {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void JpegErrorExit(j_common_ptr c) {
  JpegError* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  longjmp(e->jump, 1);
}

// Warnings about corrupt data are tolerated, as PIL tolerates them, except
// the end of the data: PIL refuses a truncated file, and so do we.
void JpegEmitMessage(j_common_ptr c, int level) {
  if (level >= 0) return;
  JpegError* e = reinterpret_cast<JpegError*>(c->err);
  if (c->err->msg_code == JWRN_JPEG_EOF) {
    e->truncated = true;
    (*c->err->format_message)(c, e->message);
    longjmp(e->jump, 1);
  }
  c->err->num_warnings++;
}

void JpegOutputMessage(j_common_ptr) {}

// PIL's CMYK -> RGB (Convert.c cmyk2rgb) on Adobe-inverted CMYK.
inline uint8_t CmykChannel(int inverted_c, int nk) {
  const int c = 255 - inverted_c;
  const int tmp = c * nk + 128;
  const int v = nk - (((tmp >> 8) + tmp) >> 8);
  return uint8_t(v < 0 ? 0 : (v > 255 ? 255 : v));
}

void CmykRowToRgb(const uint8_t* in, int n, uint8_t* out) {
  for (int i = 0; i < n; ++i, in += 4, out += 3) {
    const int nk = in[3];  // 255 - k, with k = 255 - in[3]
    out[0] = CmykChannel(in[0], nk);
    out[1] = CmykChannel(in[1], nk);
    out[2] = CmykChannel(in[2], nk);
  }
}

void ExpandGray(const uint8_t* in, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i, out += 3) out[0] = out[1] = out[2] = in[i];
}

bool IsPng(const uint8_t* d, size_t n) {
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return n >= 8 && memcmp(d, kSig, 8) == 0;
}

uint32_t BigEndian32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 |
         p[3];
}

struct PngReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  PngReader* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "truncated PNG data");
  memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

void PngErrorFn(png_structp png, png_const_charp msg) {
  PngReader* r = static_cast<PngReader*>(png_get_error_ptr(png));
  snprintf(r->message, sizeof(r->message), "%s", msg);
  png_longjmp(png, 1);
}

void PngWarningFn(png_structp, png_const_charp) {}

}  // namespace

struct ImageDecoder::Jpeg {
  jpeg_decompress_struct cinfo;
  JpegError err;
  bool created = false;

  // Runs f, which calls libjpeg; false when libjpeg failed (err.message
  // says why) and the decompressor was reset. f keeps no local object with
  // a destructor: a failure jumps out of it.
  template <typename F>
  bool Protected(F&& f) {
    err.truncated = false;
    if (setjmp(err.jump) != 0) {
      jpeg_abort_decompress(&cinfo);
      return false;
    }
    f();
    return true;
  }
  absl::Status Error() const {
    return absl::DataLossError(absl::StrCat(
        err.truncated ? "truncated JPEG: " : "JPEG: ", err.message));
  }
};

ImageDecoder::ImageDecoder() : jpeg_(new Jpeg) {
  Jpeg& j = *jpeg_;
  j.cinfo.err = jpeg_std_error(&j.err.pub);
  j.err.pub.error_exit = JpegErrorExit;
  j.err.pub.emit_message = JpegEmitMessage;
  j.err.pub.output_message = JpegOutputMessage;
  if (setjmp(j.err.jump) == 0) {
    jpeg_create_decompress(&j.cinfo);
    j.created = true;
    j.cinfo.mem->max_memory_to_use = kJpegMaxMemory;
  }
}

ImageDecoder::~ImageDecoder() {
  if (jpeg_->created) jpeg_destroy_decompress(&jpeg_->cinfo);
}

absl::Status ImageDecoder::Open(const uint8_t* data, size_t size) {
  data_ = data;
  size_ = size;
  header_ = ImageHeader();
  if (IsPng(data, size)) {
    // The IHDR chunk comes first: length, "IHDR", width, height, depth, type.
    if (size < 8 + 8 + 13 || memcmp(data + 12, "IHDR", 4) != 0) {
      return absl::DataLossError("PNG without an IHDR chunk");
    }
    header_.codec = ImageCodec::kPng;
    const uint32_t w = BigEndian32(data + 16), h = BigEndian32(data + 20);
    const int type = data[25];
    header_.components = (type & PNG_COLOR_MASK_COLOR) ? 3 : 1;
    if (w == 0 || h == 0 || w > (1u << 30) || h > (1u << 30) ||
        uint64_t(w) * h > kMaxPixels) {
      return absl::DataLossError(
          absl::StrCat("PNG of ", w, " x ", h, " pixels is refused"));
    }
    // Deflate expands at most ~1032:1, so a short file cannot hold a large
    // image: refuse before allocating its pixels.
    const int depth = data[24];
    const int samples = type == 0   ? 1
                        : type == 2 ? 3
                        : type == 3 ? 1
                        : type == 4 ? 2
                                    : 4;
    const uint64_t raw =
        uint64_t(h) * (1 + (uint64_t(w) * depth * samples + 7) / 8);
    if (raw > uint64_t(size) * 1032 + 1024) {
      return absl::DataLossError(absl::StrCat(
          "PNG of ", w, " x ", h, " pixels cannot fit in ", size, " bytes"));
    }
    header_.width = int(w);
    header_.height = int(h);
    return absl::OkStatus();
  }
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) {
    return absl::InvalidArgumentError("neither a JPEG nor a PNG file");
  }
  Jpeg& j = *jpeg_;
  if (!j.created) return absl::InternalError("libjpeg failed to initialise");
  if (!j.Protected([&] {
        jpeg_abort_decompress(&j.cinfo);
        jpeg_mem_src(&j.cinfo, const_cast<unsigned char*>(data), size);
        jpeg_read_header(&j.cinfo, TRUE);
      })) {
    return absl::DataLossError(absl::StrCat("JPEG header: ", j.err.message));
  }
  header_.codec = ImageCodec::kJpeg;
  header_.width = int(j.cinfo.image_width);
  header_.height = int(j.cinfo.image_height);
  switch (j.cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
      header_.components = 1;
      break;
    case JCS_YCbCr:
    case JCS_RGB:
      header_.components = 3;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      header_.components = 4;
      break;
    default:
      return absl::DataLossError(
          absl::StrCat("JPEG with an unsupported colour space (",
                       int(j.cinfo.jpeg_color_space), ", ",
                       j.cinfo.num_components, " components)"));
  }
  if (header_.width <= 0 || header_.height <= 0 ||
      uint64_t(header_.width) * uint64_t(header_.height) > kMaxPixels) {
    return absl::DataLossError(absl::StrCat("JPEG of ", header_.width, " x ",
                                            header_.height,
                                            " pixels is refused"));
  }
  return absl::OkStatus();
}

absl::Status ImageDecoder::DecodeResized(const ResampleAxis& x,
                                         const ResampleAxis& y, uint8_t* out,
                                         DecodeStats* stats) {
  if (data_ == nullptr) return absl::FailedPreconditionError("not opened");
  if (x.out_count <= 0 || y.out_count <= 0 || x.out_size <= 0 ||
      y.out_size <= 0 || !(x.in1 > x.in0) || !(y.in1 > y.in0) || x.lo < 0 ||
      y.lo < 0 || x.hi > header_.width || y.hi > header_.height ||
      x.hi <= x.lo || y.hi <= y.lo) {
    return absl::InvalidArgumentError("resize box outside the image");
  }
  if (header_.codec == ImageCodec::kPng) {
    if (stats != nullptr) *stats = DecodeStats();
    return DecodePng(x, y, out);
  }
  return DecodeJpeg(x, y, out, stats);
}

absl::Status ImageDecoder::DecodeJpeg(const ResampleAxis& x,
                                      const ResampleAxis& y, uint8_t* out,
                                      DecodeStats* stats) {
  Jpeg& j = *jpeg_;
  jpeg_decompress_struct& cinfo = j.cinfo;
  // The smallest DCT scale that keeps at least dct_headroom_ pixels per
  // output pixel across the resized box on both axes.
  // Only 1/8, 2/8, 4/8 and 8/8: libjpeg-turbo has SIMD inverse DCTs for
  // those; the others (3/8, 5/8, 6/8, 7/8) run its plain C IDCTs, slower
  // than a full-size SIMD decode.
  int k = 1;
  const double need = 8.0 * dct_headroom_;
  while (k < 8 && ((x.in1 - x.in0) * k < need * x.out_size ||
                   (y.in1 - y.in0) * k < need * y.out_size)) {
    k *= 2;
  }
  const int in_channels = header_.components;     // libjpeg's output
  const int channels = in_channels == 1 ? 1 : 3;  // after colour conversion
  const J_COLOR_SPACE space = in_channels == 1
                                  ? JCS_GRAYSCALE
                                  : (in_channels == 4 ? JCS_CMYK : JCS_RGB);
  int y_begin = 0, y_end = 0, first_row = 0;
  JDIMENSION col0 = 0, cols = 0;
  bool skipped = true, stalled = false;
  size_t tmp_row = size_t(x.out_count) * channels;
  const bool ok = j.Protected([&] {
    cinfo.scale_num = k;
    cinfo.scale_denom = 8;
    cinfo.dct_method = JDCT_ISLOW;  // libjpeg's default, which PIL keeps
    cinfo.do_fancy_upsampling = TRUE;
    cinfo.out_color_space = space;
    jpeg_calc_output_dimensions(&cinfo);
    const double scale = k / 8.0;
    ComputeTaps(x, scale, int(cinfo.output_width), &taps_x_);
    ComputeTaps(y, scale, int(cinfo.output_height), &taps_y_);
    y_begin = taps_y_.src_begin;
    y_end = taps_y_.src_end;
    jpeg_start_decompress(&cinfo);
    // Fancy (triangle) chroma upsampling treats the edge of a cropped or
    // skipped region as the image's edge: decode kMargin more pixels on
    // every side so that the pixels the filter reads come out as a full
    // decode gives them.
    constexpr int kMargin = 2;
    const int out_w = int(cinfo.output_width);
    const int x_begin = std::max(0, taps_x_.src_begin - kMargin);
    const int x_end = std::min(out_w, taps_x_.src_end + kMargin);
    first_row = std::max(0, y_begin - kMargin);
    col0 = JDIMENSION(x_begin);
    cols = JDIMENSION(x_end - x_begin);
    if (col0 > 0 || cols < cinfo.output_width) {
      jpeg_crop_scanline(&cinfo, &col0, &cols);  // widens to iMCU columns
    } else {
      col0 = 0;
      cols = cinfo.output_width;
    }
    if (first_row > 0) {
      skipped = jpeg_skip_scanlines(&cinfo, JDIMENSION(first_row)) ==
                JDIMENSION(first_row);
      if (!skipped) return;
    }
    const size_t in_row = size_t(cols) * in_channels;
    constexpr int kBatchRows = 8;
    const size_t slack = ResampleRowSlack(taps_x_);
    rows_.resize(in_row * kBatchRows + slack);
    rgb_.resize(size_t(cols) * 3 + slack);
    tmp_.resize(tmp_row * size_t(y_end - y_begin));
    JSAMPROW pointers[kBatchRows];
    while (int(cinfo.output_scanline) < y_end) {
      const int first = int(cinfo.output_scanline);
      const int want = std::min(kBatchRows, y_end - first);
      for (int r = 0; r < want; ++r) pointers[r] = &rows_[in_row * r];
      const int got = int(jpeg_read_scanlines(&cinfo, pointers, want));
      if (got <= 0) {
        stalled = true;
        return;
      }
      for (int r = 0; r < got; ++r) {
        if (first + r < y_begin) continue;  // a margin row
        const uint8_t* src = &rows_[in_row * r];
        if (in_channels == 4) {
          CmykRowToRgb(src, int(cols), rgb_.data());
          src = rgb_.data();
        }
        ResampleRow(src, int(col0), channels, taps_x_,
                    &tmp_[tmp_row * size_t(first + r - y_begin)]);
      }
    }
  });
  // The rows below the last needed one are never read.
  jpeg_abort_decompress(&cinfo);
  if (!ok) return j.Error();
  if (!skipped) return absl::DataLossError("JPEG: could not skip to the crop");
  if (stalled) return absl::DataLossError("JPEG: the decoder stalled");
  if (stats != nullptr) {
    stats->scale_num = k;
    stats->rows = y_end - first_row;
    stats->cols = int(cols);
  }
  if (channels == 3) {
    ResampleColumns(tmp_.data(), y_begin, tmp_row, taps_y_, out);
  } else {
    small_.resize(tmp_row * size_t(y.out_count));
    ResampleColumns(tmp_.data(), y_begin, tmp_row, taps_y_, small_.data());
    ExpandGray(small_.data(), small_.size(), out);
  }
  return absl::OkStatus();
}

absl::Status ImageDecoder::ReadPng(std::vector<uint8_t>* pixels, int* channels,
                                   size_t slack) {
  PngReader reader{data_, size_, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader,
                                           PngErrorFn, PngWarningFn);
  if (png == nullptr) return absl::InternalError("libpng: out of memory");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::InternalError("libpng: out of memory");
  }
  if (setjmp(png_jmpbuf(png)) != 0) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::DataLossError(absl::StrCat("PNG: ", reader.message));
  }
  png_set_read_fn(png, &reader, PngRead);
  png_set_user_limits(png, 1u << 30, 1u << 30);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info);
  const png_uint_32 h = png_get_image_height(png, info);
  if (int(w) != header_.width || int(h) != header_.height) {
    png_error(png, "inconsistent IHDR");
  }
  const int type = png_get_color_type(png, info);
  png_set_expand(png);  // palette -> RGB, low-bit gray -> 8, tRNS -> alpha
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  const int c = (type & PNG_COLOR_MASK_COLOR) ? 3 : 1;
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != size_t(w) * c) {
    png_error(png, "unexpected row size");
  }
  pixels->resize(size_t(w) * h * c + slack);
  rows_.resize(sizeof(png_bytep) * h);
  png_bytepp rows = reinterpret_cast<png_bytepp>(rows_.data());
  for (png_uint_32 r = 0; r < h; ++r) rows[r] = &(*pixels)[size_t(w) * c * r];
  png_read_image(png, rows);
  png_destroy_read_struct(&png, &info, nullptr);
  *channels = c;
  return absl::OkStatus();
}

absl::Status ImageDecoder::DecodePng(const ResampleAxis& x,
                                     const ResampleAxis& y, uint8_t* out) {
  int channels = 0;
  std::vector<uint8_t>& pixels = small_;
  ComputeTaps(x, 1.0, header_.width, &taps_x_);
  ComputeTaps(y, 1.0, header_.height, &taps_y_);
  absl::Status st = ReadPng(&pixels, &channels, ResampleRowSlack(taps_x_));
  if (!st.ok()) return st;
  const size_t in_row = size_t(header_.width) * channels;
  const size_t tmp_row = size_t(x.out_count) * channels;
  tmp_.resize(tmp_row * size_t(taps_y_.src_end - taps_y_.src_begin));
  for (int r = taps_y_.src_begin; r < taps_y_.src_end; ++r) {
    ResampleRow(&pixels[in_row * r], 0, channels, taps_x_,
                &tmp_[tmp_row * size_t(r - taps_y_.src_begin)]);
  }
  if (channels == 3) {
    ResampleColumns(tmp_.data(), taps_y_.src_begin, tmp_row, taps_y_, out);
  } else {
    rgb_.resize(tmp_row * size_t(y.out_count));
    ResampleColumns(tmp_.data(), taps_y_.src_begin, tmp_row, taps_y_,
                    rgb_.data());
    ExpandGray(rgb_.data(), rgb_.size(), out);
  }
  return absl::OkStatus();
}

absl::Status ImageDecoder::DecodeFull(int scale_num, std::vector<uint8_t>* rgb,
                                      int* width, int* height) {
  if (data_ == nullptr) return absl::FailedPreconditionError("not opened");
  if (scale_num < 1 || scale_num > 8) {
    return absl::InvalidArgumentError("scale_num must be 1..8");
  }
  if (header_.codec == ImageCodec::kPng) {
    if (scale_num != 8) {
      return absl::InvalidArgumentError("PNG decodes at scale 8/8 only");
    }
    int channels = 0;
    absl::Status st = ReadPng(&small_, &channels, 0);
    if (!st.ok()) return st;
    *width = header_.width;
    *height = header_.height;
    rgb->resize(size_t(*width) * *height * 3);
    if (channels == 3) {
      memcpy(rgb->data(), small_.data(), rgb->size());
    } else {
      ExpandGray(small_.data(), size_t(*width) * *height, rgb->data());
    }
    return absl::OkStatus();
  }
  Jpeg& j = *jpeg_;
  jpeg_decompress_struct& cinfo = j.cinfo;
  const int comps = header_.components;
  bool stalled = false;
  const bool ok = j.Protected([&] {
    cinfo.scale_num = scale_num;
    cinfo.scale_denom = 8;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    cinfo.out_color_space =
        comps == 1 ? JCS_GRAYSCALE : (comps == 4 ? JCS_CMYK : JCS_RGB);
    jpeg_start_decompress(&cinfo);
    *width = int(cinfo.output_width);
    *height = int(cinfo.output_height);
    rgb->resize(size_t(*width) * *height * 3);
    rows_.resize(size_t(*width) * comps);
    while (cinfo.output_scanline < cinfo.output_height) {
      uint8_t* dst = &(*rgb)[size_t(*width) * 3 * cinfo.output_scanline];
      JSAMPROW row = comps == 3 ? dst : rows_.data();
      if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
        stalled = true;
        return;
      }
      if (comps == 4) CmykRowToRgb(rows_.data(), *width, dst);
      if (comps == 1) ExpandGray(rows_.data(), size_t(*width), dst);
    }
    jpeg_finish_decompress(&cinfo);
  });
  if (!ok) return j.Error();
  if (stalled) {
    jpeg_abort_decompress(&cinfo);
    return absl::DataLossError("JPEG: the decoder stalled");
  }
  return absl::OkStatus();
}

}  // namespace batchd
