// imagenet_tool: the imagenet workload's pieces on their own.
//
//   imagenet_tool crops --width W --height H [--count N] [--seed S]
//       RandomResizedCrop boxes and flips exactly as the train split samples
//       them for positions 0..N-1 of epoch 0: "x y w h flip" per line (the
//       statistical test compares them with torchvision's get_params).
//   imagenet_tool decode [--eval] [--size S] [--headroom H] [--crop x,y,w,h]
//       FILE OUT.ppm
//       One image through the workload's decode + resize path (H: the
//       decoder's DCT headroom).
//   imagenet_tool full-decode [--threads T] [--scale K] [--train|--eval]
//       FILE...
//       The benchmark's baseline: read and fully decode every file to RGB at
//       DCT scale K/8 (default 8, i.e. full size) with TurboJPEG's
//       tjDecompress2 (libjpeg when built without it), T threads; prints one
//       JSON object (images/s, threads, RSS). With --train / --eval, each
//       file goes through the workload's transform instead (read, header,
//       crop, region decode, resize; no ring), for comparison.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifdef BATCHD_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

#include "base/files.h"
#include "workloads/counter_rng.h"
#include "workloads/imagenet/image_decoder.h"
#include "workloads/imagenet/transforms.h"

namespace batchd {
namespace {

int Usage() {
  fprintf(stderr,
          "usage: imagenet_tool crops --width W --height H [--count N] "
          "[--seed S]\n"
          "       imagenet_tool decode [--eval] [--size S] [--headroom H] "
          "[--crop x,y,w,h] FILE OUT.ppm\n"
          "       imagenet_tool full-decode [--threads T] [--scale K] "
          "FILE...\n");
  return 2;
}

bool ReadFile(const std::string& path, std::string* out) {
  absl::StatusOr<std::string> bytes = batchd::ReadFileToString(path);
  if (!bytes.ok()) return false;
  *out = std::move(*bytes);
  return true;
}

int Crops(int argc, char** argv) {
  int width = 0, height = 0;
  uint64_t count = 1000, seed = 0;
  for (int i = 0; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--width")
      width = atoi(v);
    else if (k == "--height")
      height = atoi(v);
    else if (k == "--count")
      count = strtoull(v, nullptr, 10);
    else if (k == "--seed")
      seed = strtoull(v, nullptr, 10);
    else
      return Usage();
  }
  if (width <= 0 || height <= 0) return Usage();
  for (uint64_t p = 0; p < count; ++p) {
    ExampleRng rng(seed, 0, p);
    const CropBox b =
        SampleRandomResizedCrop(width, height, RandomResizedCropParams(), &rng);
    const bool flip = rng.Uniform() < 0.5;
    printf("%d %d %d %d %d\n", b.x, b.y, b.w, b.h, flip ? 1 : 0);
  }
  return 0;
}

int Decode(int argc, char** argv) {
  bool eval = false;
  int size = 224;
  double headroom = 1.0;
  CropBox crop;
  bool have_crop = false;
  std::vector<std::string> files;
  for (int i = 0; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--eval") {
      eval = true;
    } else if (k == "--size" && i + 1 < argc) {
      size = atoi(argv[++i]);
    } else if (k == "--headroom" && i + 1 < argc) {
      headroom = atof(argv[++i]);
    } else if (k == "--crop" && i + 1 < argc) {
      have_crop = sscanf(argv[++i], "%d,%d,%d,%d", &crop.x, &crop.y, &crop.w,
                         &crop.h) == 4;
      if (!have_crop) return Usage();
    } else {
      files.push_back(k);
    }
  }
  if (files.size() != 2 || (eval == have_crop)) return Usage();
  std::string bytes;
  if (!ReadFile(files[0], &bytes)) {
    fprintf(stderr, "cannot read %s\n", files[0].c_str());
    return 1;
  }
  ImageDecoder dec;
  dec.set_dct_headroom(headroom);
  absl::Status st =
      dec.Open(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ResampleAxis ax, ay;
  if (st.ok()) {
    if (eval) {
      ResizeCenterCropAxes(dec.header().width, dec.header().height,
                           size * 256 / 224, size, &ax, &ay);
    } else {
      CropResizeAxes(crop, size, &ax, &ay);
    }
  }
  std::vector<uint8_t> out(size_t(size) * size * 3);
  DecodeStats stats;
  if (st.ok()) st = dec.DecodeResized(ax, ay, out.data(), &stats);
  if (!st.ok()) {
    fprintf(stderr, "%s: %s\n", files[0].c_str(), st.ToString().c_str());
    return 1;
  }
  FILE* f = fopen(files[1].c_str(), "wb");
  if (f == nullptr) return 1;
  fprintf(f, "P6\n%d %d\n255\n", size, size);
  fwrite(out.data(), 1, out.size(), f);
  fclose(f);
  fprintf(stderr, "scale %d/8, decoded %d x %d\n", stats.scale_num, stats.cols,
          stats.rows);
  return 0;
}

long RssKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return atol(line.c_str() + 6);
  }
  return 0;
}

// The workload's path without the ring: header, crop (train: random
// resized, eval: resize and center crop), decode at 224x224.
bool DecodeTransformed(ImageDecoder* dec, const std::string& bytes,
                       int transform, size_t i, uint8_t* out) {
  absl::Status st =
      dec->Open(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!st.ok()) return false;
  ResampleAxis ax, ay;
  const int w = dec->header().width, h = dec->header().height;
  if (transform == 1) {
    ExampleRng rng(0, 0, i);
    CropResizeAxes(
        SampleRandomResizedCrop(w, h, RandomResizedCropParams(), &rng), 224,
        &ax, &ay);
  } else {
    ResizeCenterCropAxes(w, h, 256, 224, &ax, &ay);
  }
  return dec->DecodeResized(ax, ay, out).ok();
}

// A whole image at scale/8 (libjpeg-turbo's own decoder where it is
// there, the workload's otherwise): the full-decode limit.
class FullDecoder {
 public:
#ifdef BATCHD_HAVE_TURBOJPEG
  FullDecoder() : tj_(tjInitDecompress()) {}
  ~FullDecoder() { tjDestroy(tj_); }
  static const char* name() { return "turbojpeg"; }
  bool Decode(const std::string& bytes, int scale, std::vector<uint8_t>* rgb,
              uint64_t* pixels) {
    int w, h, subsamp, colorspace;
    const auto* buf = reinterpret_cast<const unsigned char*>(bytes.data());
    if (tjDecompressHeader3(tj_, buf, bytes.size(), &w, &h, &subsamp,
                            &colorspace) != 0) {
      return false;
    }
    const tjscalingfactor sf{scale, 8};
    w = TJSCALED(w, sf);
    h = TJSCALED(h, sf);
    rgb->resize(size_t(w) * h * 3);
    if (tjDecompress2(tj_, buf, bytes.size(), rgb->data(), w, 0, h, TJPF_RGB,
                      0) != 0 &&
        tjGetErrorCode(tj_) == TJERR_FATAL) {
      return false;
    }
    *pixels = uint64_t(w) * h;
    return true;
  }

 private:
  tjhandle tj_;
#else
  static const char* name() { return "libjpeg"; }
  bool Decode(const std::string& bytes, int scale, std::vector<uint8_t>* rgb,
              uint64_t* pixels) {
    int w, h;
    if (!dec_.Open(reinterpret_cast<const uint8_t*>(bytes.data()),
                   bytes.size())
             .ok() ||
        !dec_.DecodeFull(scale, rgb, &w, &h).ok()) {
      return false;
    }
    *pixels = uint64_t(w) * h;
    return true;
  }

 private:
  ImageDecoder dec_;
#endif
};

int FullDecode(int argc, char** argv) {
  int threads = 1, scale = 8;
  int transform = 0;  // 0: full decode; 1: train; 2: eval
  std::vector<std::string> files;
  for (int i = 0; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--threads" && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (k == "--scale" && i + 1 < argc)
      scale = atoi(argv[++i]);
    else if (k == "--train")
      transform = 1;
    else if (k == "--eval")
      transform = 2;
    else
      files.push_back(k);
  }
  if (files.empty() || threads < 1 || scale < 1 || scale > 8) return Usage();
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> decoded{0}, failed{0}, pixels{0};
  auto work = [&] {
    std::string bytes;
    std::vector<uint8_t> rgb;
    FullDecoder full;
    ImageDecoder tdec;
    tdec.set_dct_headroom(1.25);
    std::vector<uint8_t> out(224 * 224 * 3);
    for (size_t i; (i = next.fetch_add(1)) < files.size();) {
      uint64_t px = 0;
      const bool ok =
          ReadFile(files[i], &bytes) &&
          (transform != 0
               ? DecodeTransformed(&tdec, bytes, transform, i, out.data())
               : full.Decode(bytes, scale, &rgb, &px));
      (ok ? decoded : failed).fetch_add(1);
      pixels.fetch_add(px);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  printf(
      "{\"decoder\": \"%s\", \"scale\": %d, \"threads\": %d, \"files\": %zu, "
      "\"decoded\": %llu, \"failed\": %llu, \"seconds\": %.3f, "
      "\"images_per_s\": %.1f, \"megapixels_per_s\": %.1f, "
      "\"rss_bytes\": %ld}\n",
      transform == 1   ? "batchd-train"
      : transform == 2 ? "batchd-eval"
                       : FullDecoder::name(),
      scale, threads, files.size(), (unsigned long long)decoded.load(),
      (unsigned long long)failed.load(), s, decoded.load() / s,
      pixels.load() / s / 1e6, RssKiB() * 1024);
  return 0;
}

}  // namespace
}  // namespace batchd

int main(int argc, char** argv) {
  if (argc < 2) return batchd::Usage();
  const std::string cmd = argv[1];
  if (cmd == "crops") return batchd::Crops(argc - 2, argv + 2);
  if (cmd == "decode") return batchd::Decode(argc - 2, argv + 2);
  if (cmd == "full-decode") return batchd::FullDecode(argc - 2, argv + 2);
  return batchd::Usage();
}
