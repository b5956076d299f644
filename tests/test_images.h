// Test-only helpers: small JPEG and PNG files made in memory (libjpeg,
// libpng), and a smooth-plus-texture test picture.
#ifndef BATCHD_TESTS_TEST_IMAGES_H_
#define BATCHD_TESTS_TEST_IMAGES_H_

#include <jpeglib.h>
#include <png.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace batchd {
namespace testing_images {

// A deterministic picture, `channels` bytes a pixel (1, 3 or 4): gradients
// plus a little pseudo-random texture, like a photo's mix of edges and
// smooth areas.
inline std::vector<uint8_t> Picture(int w, int h, int channels,
                                    unsigned seed = 1) {
  std::vector<uint8_t> p(size_t(w) * h * channels);
  unsigned s = seed * 2654435761u + 1;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        s = s * 1103515245u + 12345u;
        const int noise = int((s >> 16) & 15) - 8;
        int v =
            (x * (3 + c) + y * (5 - c) + ((x / 16 + y / 16) % 2) * 60) % 256 +
            noise;
        v = v < 0 ? 0 : (v > 255 ? 255 : v);
        p[(size_t(y) * w + x) * channels + c] = uint8_t(v);
      }
    }
  }
  return p;
}

// Encodes `pixels` (components 1 gray, 3 RGB, 4 CMYK as stored: Adobe
// inverted) as a baseline JPEG with 2x2 chroma subsampling.
inline std::string EncodeJpeg(const std::vector<uint8_t>& pixels, int w, int h,
                              int components, int quality = 90,
                              bool progressive = false) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = components;
  c.in_color_space =
      components == 1 ? JCS_GRAYSCALE : (components == 4 ? JCS_CMYK : JCS_RGB);
  jpeg_set_defaults(&c);
  if (components == 4) jpeg_set_colorspace(&c, JCS_YCCK);
  jpeg_set_quality(&c, quality, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row =
        const_cast<JSAMPROW>(&pixels[size_t(c.next_scanline) * w * components]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  free(buf);
  return out;
}

inline std::string EncodePng(const std::vector<uint8_t>& pixels, int w, int h,
                             int components) {
  png_image img = {};
  img.version = PNG_IMAGE_VERSION;
  img.width = w;
  img.height = h;
  img.format = components == 1
                   ? PNG_FORMAT_GRAY
                   : (components == 4 ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB);
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&img, nullptr, &size, 0, pixels.data(), 0, nullptr);
  std::string out(size, '\0');
  png_image_write_to_memory(&img, &out[0], &size, 0, pixels.data(), 0, nullptr);
  out.resize(size);
  return out;
}

}  // namespace testing_images
}  // namespace batchd

#endif  // BATCHD_TESTS_TEST_IMAGES_H_
