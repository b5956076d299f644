// Tests of ImageDecoder: region + DCT-scaled decode against a full decode,
// colour models (gray, CMYK, PNG), and broken input.
#include "workloads/imagenet/image_decoder.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "tests/test_images.h"
#include "workloads/imagenet/transforms.h"

namespace batchd {
namespace {

using testing_images::EncodeJpeg;
using testing_images::EncodePng;
using testing_images::Picture;

const uint8_t* U8(const std::string& s) {
  return reinterpret_cast<const uint8_t*>(s.data());
}

// Pillow's bilinear resize of a crop, in doubles, on a full RGB image:
// crop [box], resize to size x size (horizontal pass rounded to 8 bits).
std::vector<uint8_t> ReferenceCropResize(const std::vector<uint8_t>& rgb,
                                         int width, const CropBox& box,
                                         int size) {
  auto taps = [](int in_size, int out_size, int o, int* first,
                 std::vector<double>* w) {
    const double scale = double(in_size) / out_size;
    const double fs = std::max(1.0, scale);
    const double center = (o + 0.5) * scale;
    int lo = std::max(0, int(center - fs + 0.5));
    int hi = std::min(in_size, int(center + fs + 0.5));
    w->clear();
    double sum = 0;
    for (int x = lo; x < hi; ++x) {
      const double t = std::abs((x - center + 0.5) / fs);
      w->push_back(t < 1 ? 1 - t : 0);
      sum += w->back();
    }
    for (double& v : *w) v /= sum;
    *first = lo;
  };
  std::vector<uint8_t> tmp(size_t(box.h) * size * 3);
  std::vector<double> w;
  int first;
  for (int o = 0; o < size; ++o) {
    taps(box.w, size, o, &first, &w);
    for (int y = 0; y < box.h; ++y) {
      for (int c = 0; c < 3; ++c) {
        double acc = 0;
        for (size_t k = 0; k < w.size(); ++k) {
          acc += w[k] *
                 rgb[(size_t(box.y + y) * width + box.x + first + k) * 3 + c];
        }
        tmp[(size_t(y) * size + o) * 3 + c] =
            uint8_t(std::min(255.0, std::max(0.0, std::floor(acc + 0.5))));
      }
    }
  }
  std::vector<uint8_t> out(size_t(size) * size * 3);
  for (int o = 0; o < size; ++o) {
    taps(box.h, size, o, &first, &w);
    for (int x = 0; x < size * 3; ++x) {
      double acc = 0;
      for (size_t k = 0; k < w.size(); ++k) {
        acc += w[k] * tmp[size_t(first + k) * size * 3 + x];
      }
      out[size_t(o) * size * 3 + x] =
          uint8_t(std::min(255.0, std::max(0.0, std::floor(acc + 0.5))));
    }
  }
  return out;
}

double MeanAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                   int* max_diff) {
  double sum = 0;
  *max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int d = std::abs(int(a[i]) - int(b[i]));
    sum += d;
    *max_diff = std::max(*max_diff, d);
  }
  return sum / a.size();
}

class CropTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// A crop decoded at full scale through crop_scanline / skip_scanlines and
// resized equals the full decode resized by the reference filter.
TEST_P(CropTest, RegionDecodeMatchesFullDecode) {
  const auto [cx, cy, cw] = GetParam();
  const int w = 500, h = 375;
  const std::string jpeg = EncodeJpeg(Picture(w, h, 3), w, h, 3);
  ImageDecoder dec;
  ASSERT_TRUE(dec.Open(U8(jpeg), jpeg.size()).ok());
  std::vector<uint8_t> full;
  int fw, fh;
  ASSERT_TRUE(dec.DecodeFull(8, &full, &fw, &fh).ok());
  ASSERT_EQ(fw, w);
  const CropBox box{cx, cy, cw, std::min(h - cy, cw * 3 / 4 + 1)};
  const int size = 224;
  ResampleAxis ax, ay;
  CropResizeAxes(box, size, &ax, &ay);
  ASSERT_TRUE(dec.Open(U8(jpeg), jpeg.size()).ok());
  std::vector<uint8_t> got(size_t(size) * size * 3);
  DecodeStats stats;
  ASSERT_TRUE(dec.DecodeResized(ax, ay, got.data(), &stats).ok());
  const std::vector<uint8_t> want = ReferenceCropResize(full, w, box, size);
  int max_diff;
  const double mad = MeanAbsDiff(got, want, &max_diff);
  if (stats.scale_num == 8) {
    EXPECT_LE(max_diff, 1) << "mean " << mad;
    if (max_diff > 1) {
      int shown = 0;
      for (size_t i = 0; i < got.size() && shown < 10; ++i) {
        if (std::abs(int(got[i]) - int(want[i])) > 1) {
          ADD_FAILURE() << "at y " << i / (size * 3) << " x " << (i / 3) % size
                        << " c " << i % 3 << ": " << int(got[i]) << " vs "
                        << int(want[i]);
          ++shown;
        }
      }
    }
  } else {
    // A DCT-scaled decode low-passes differently from the triangle filter;
    // on this picture's per-pixel noise (a worst case; photos differ far
    // less, see tests/python/test_imagenet.py) by about 3.4 on average.
    EXPECT_LE(mad, 4.0) << "scale " << stats.scale_num << "/8, max "
                        << max_diff;
  }
  EXPECT_LE(stats.rows, box.h * stats.scale_num / 8 + 4);
}

INSTANTIATE_TEST_SUITE_P(Boxes, CropTest,
                         ::testing::Values(std::make_tuple(0, 0, 224),
                                           std::make_tuple(37, 21, 100),
                                           std::make_tuple(123, 77, 230),
                                           std::make_tuple(250, 150, 249),
                                           std::make_tuple(0, 0, 499),
                                           std::make_tuple(1, 3, 460),
                                           std::make_tuple(10, 200, 60)));

TEST(ImageDecoderTest, ChoosesSmallestSufficientDctScale) {
  const int w = 1000, h = 1000;
  const std::string jpeg = EncodeJpeg(Picture(w, h, 3), w, h, 3);
  ImageDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  // Smallest k in {1, 2, 4, 8} with crop * k / 8 >= headroom * 224.
  const double cases[][3] = {{900, 2, 1.0},  {448, 4, 1.0},  {449, 4, 1.0},
                             {447, 8, 1.0},  {224, 8, 1.0},  {100, 8, 1.0},
                             {900, 4, 1.25}, {560, 4, 1.25}, {559, 8, 1.25}};
  for (const auto& c : cases) {
    dec.set_dct_headroom(c[2]);
    ASSERT_TRUE(dec.Open(U8(jpeg), jpeg.size()).ok());
    ResampleAxis ax, ay;
    CropResizeAxes(CropBox{50, 60, int(c[0]), int(c[0])}, 224, &ax, &ay);
    DecodeStats st;
    ASSERT_TRUE(dec.DecodeResized(ax, ay, out.data(), &st).ok());
    EXPECT_EQ(st.scale_num, int(c[1])) << "crop " << c[0];
  }
}

TEST(ImageDecoderTest, GrayscaleBecomesRgb) {
  const int w = 320, h = 240;
  const std::string jpeg = EncodeJpeg(Picture(w, h, 1), w, h, 1);
  ImageDecoder dec;
  ASSERT_TRUE(dec.Open(U8(jpeg), jpeg.size()).ok());
  EXPECT_EQ(dec.header().components, 1);
  ResampleAxis ax, ay;
  ResizeCenterCropAxes(w, h, 256, 224, &ax, &ay);
  std::vector<uint8_t> out(224 * 224 * 3);
  ASSERT_TRUE(dec.DecodeResized(ax, ay, out.data()).ok());
  for (size_t i = 0; i < out.size(); i += 3) {
    ASSERT_EQ(out[i], out[i + 1]);
    ASSERT_EQ(out[i], out[i + 2]);
  }
}

TEST(ImageDecoderTest, CmykIsAdobeInvertedAndConvertedAsPil) {
  // A flat CMYK picture (stored inverted, as Photoshop and PIL write it).
  const int w = 64, h = 48;
  const uint8_t c = 40, m = 120, y = 200, k = 30;  // true ink amounts
  std::vector<uint8_t> px(size_t(w) * h * 4);
  for (size_t i = 0; i < px.size(); i += 4) {
    px[i] = 255 - c;
    px[i + 1] = 255 - m;
    px[i + 2] = 255 - y;
    px[i + 3] = 255 - k;
  }
  const std::string jpeg = EncodeJpeg(px, w, h, 4, 100);
  ImageDecoder dec;
  ASSERT_TRUE(dec.Open(U8(jpeg), jpeg.size()).ok());
  EXPECT_EQ(dec.header().components, 4);
  std::vector<uint8_t> rgb;
  int fw, fh;
  ASSERT_TRUE(dec.DecodeFull(8, &rgb, &fw, &fh).ok());
  auto pil = [](int ink, int black) {
    const int nk = 255 - black, tmp = ink * nk + 128;
    return nk - (((tmp >> 8) + tmp) >> 8);
  };
  EXPECT_NEAR(rgb[(24 * w + 32) * 3 + 0], pil(c, k), 2);
  EXPECT_NEAR(rgb[(24 * w + 32) * 3 + 1], pil(m, k), 2);
  EXPECT_NEAR(rgb[(24 * w + 32) * 3 + 2], pil(y, k), 2);
}

TEST(ImageDecoderTest, PngNamedJpegDecodes) {
  const int w = 224, h = 224;
  for (int comps : {1, 3, 4}) {
    const std::vector<uint8_t> px = Picture(w, h, comps);
    const std::string png = EncodePng(px, w, h, comps);
    ImageDecoder dec;
    ASSERT_TRUE(dec.Open(U8(png), png.size()).ok());
    EXPECT_EQ(dec.header().codec, ImageCodec::kPng);
    ResampleAxis ax, ay;
    CropResizeAxes(CropBox{0, 0, w, h}, 224, &ax, &ay);  // identity
    std::vector<uint8_t> out(224 * 224 * 3);
    ASSERT_TRUE(dec.DecodeResized(ax, ay, out.data()).ok()) << comps;
    for (int i = 0; i < w * h; i += 97) {
      for (int ch = 0; ch < 3; ++ch) {
        const int src = comps == 1 ? px[i] : px[size_t(i) * comps + ch];
        ASSERT_EQ(out[size_t(i) * 3 + ch], src) << "components " << comps;
      }
    }
  }
}

TEST(ImageDecoderTest, TruncatedJpegIsDataLoss) {
  const int w = 400, h = 300;
  std::string jpeg = EncodeJpeg(Picture(w, h, 3), w, h, 3);
  jpeg.resize(jpeg.size() * 6 / 10);
  ImageDecoder dec;
  ASSERT_TRUE(dec.Open(U8(jpeg), jpeg.size()).ok());
  std::vector<uint8_t> rgb;
  int fw, fh;
  absl::Status st = dec.DecodeFull(8, &rgb, &fw, &fh);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("truncated"), std::string::npos) << st;
  // The evaluation path reads down to the crop's bottom: it sees the end.
  ASSERT_TRUE(dec.Open(U8(jpeg), jpeg.size()).ok());
  ResampleAxis ax, ay;
  ResizeCenterCropAxes(w, h, 256, 224, &ax, &ay);
  std::vector<uint8_t> out(224 * 224 * 3);
  EXPECT_EQ(dec.DecodeResized(ax, ay, out.data()).code(),
            absl::StatusCode::kDataLoss);
  // The decoder is usable again after an error.
  const std::string good = EncodeJpeg(Picture(w, h, 3), w, h, 3);
  ASSERT_TRUE(dec.Open(U8(good), good.size()).ok());
  EXPECT_TRUE(dec.DecodeResized(ax, ay, out.data()).ok());
}

TEST(ImageDecoderTest, NotAnImage) {
  ImageDecoder dec;
  const std::string text = "hello, this is not an image";
  EXPECT_EQ(dec.Open(U8(text), text.size()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(dec.Open(nullptr, 0).ok());
}

TEST(ImageDecoderTest, HugeDimensionsAreRefused) {
  std::string jpeg = EncodeJpeg(Picture(64, 48, 3), 64, 48, 3);
  // Patch the SOF0 frame's height and width to 65000 x 65000.
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = jpeg[sof + 7] = char(0xFD);
  jpeg[sof + 6] = jpeg[sof + 8] = char(0xE8);
  ImageDecoder dec;
  EXPECT_EQ(dec.Open(U8(jpeg), jpeg.size()).code(),
            absl::StatusCode::kDataLoss);
  // A 60-byte PNG that claims 1 x 4194304 pixels: refused before its
  // pixels are allocated (found by the fuzzer as a slow input).
  std::string png = EncodePng(Picture(8, 8, 3), 8, 8, 3);
  png[16] = png[17] = png[18] = 0;
  png[19] = 1;
  png[20] = 0;
  png[21] = 0x40;
  png[22] = png[23] = 0;
  png.resize(60);
  EXPECT_EQ(dec.Open(U8(png), png.size()).code(),
            absl::StatusCode::kDataLoss);
}

// Random damage to valid files: every outcome is a Status, never a crash.
TEST(ImageDecoderTest, DamagedFilesNeverCrash) {
  const int w = 160, h = 120;
  const std::vector<std::string> seeds = {
      EncodeJpeg(Picture(w, h, 3), w, h, 3),
      EncodeJpeg(Picture(w, h, 3), w, h, 3, 75, /*progressive=*/true),
      EncodeJpeg(Picture(w, h, 1), w, h, 1),
      EncodeJpeg(Picture(w, h, 4), w, h, 4),
      EncodePng(Picture(w, h, 3), w, h, 3)};
  std::mt19937 rng(7);
  ImageDecoder dec;
  std::vector<uint8_t> out(64 * 64 * 3);
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string data = seeds[iter % seeds.size()];
    const int kind = iter % 4;
    if (kind == 0) {
      data.resize(rng() % data.size());
    } else if (kind == 1) {
      for (int f = 0; f < 1 + int(rng() % 8); ++f) {
        data[rng() % data.size()] = char(rng());
      }
    } else if (kind == 2) {
      for (size_t i = 2; i < data.size(); ++i) data[i] = char(rng());
    } else {
      data[rng() % std::min<size_t>(data.size(), 200)] = char(rng());
    }
    absl::Status st = dec.Open(U8(data), data.size());
    if (st.ok()) {
      const int iw = dec.header().width, ih = dec.header().height;
      ResampleAxis ax, ay;
      if (iter % 2 == 0) {
        CropResizeAxes(CropBox{0, 0, iw, ih}, 64, &ax, &ay);
      } else {
        ResizeCenterCropAxes(iw, ih, 80, 64, &ax, &ay);
      }
      st = dec.DecodeResized(ax, ay, out.data());
    }
    (st.ok() ? ok : failed)++;
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(ok, 0);
}

}  // namespace
}  // namespace batchd
