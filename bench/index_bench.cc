// index_bench: opens one ImageNet source the way the imagenet workload does
// (ImageFolder tree or TFDS TFRecord shards, every file through the data
// root) and prints how long indexing took, what the index cache did and the
// process's peak RSS, as one JSON line. Run by bench/index_bench.sh, once
// per process, so that each figure is a daemon start.
//
//   index_bench --root DATA_ROOT (--folder REL_DIR | --tfrecord REL_DIR
//       [--split train]) [--cache-dir DIR]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/cache_dir.h"
#include "storage/data_file.h"
#include "workloads/imagenet/image_source.h"

namespace {

int Usage() {
  fprintf(stderr,
          "usage: index_bench --root DATA_ROOT (--folder REL_DIR | "
          "--tfrecord REL_DIR [--split train]) [--cache-dir DIR]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string root_path, folder, tfrecord, split = "train", cache_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--root") {
      root_path = value;
    } else if (flag == "--folder") {
      folder = value;
    } else if (flag == "--tfrecord") {
      tfrecord = value;
    } else if (flag == "--split") {
      split = value;
    } else if (flag == "--cache-dir") {
      cache_path = value;
    } else {
      return Usage();
    }
  }
  if (argc % 2 != 1 || root_path.empty() ||
      folder.empty() == tfrecord.empty()) {
    return Usage();
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto root = batchd::DataRoot::Open(root_path);
  if (!root.ok()) {
    fprintf(stderr, "index_bench: %s\n", root.status().ToString().c_str());
    return 1;
  }
  auto cache = batchd::CacheDir::Open(cache_path);
  if (!cache.ok()) {
    fprintf(stderr, "index_bench: %s\n", cache.status().ToString().c_str());
    return 1;
  }
  batchd::ImageIndexStats stats;
  batchd::ImageSourceOptions options;
  options.root = *root;
  options.cache = *cache;
  options.stats = &stats;
  options.progress = true;
  const std::string base = (*root)->path();
  absl::StatusOr<std::unique_ptr<batchd::ImageSource>> src;
  uint64_t files = 0;
  if (!folder.empty()) {
    src = batchd::OpenImageFolder(absl::StrCat(base, "/", folder), options);
  } else {
    const std::vector<std::string> shards = batchd::FindTFRecordShards(
        absl::StrCat(base, "/", tfrecord), split, root->get());
    files = shards.size();
    src = batchd::OpenTFRecordImages(shards, options);
  }
  if (!src.ok()) {
    fprintf(stderr, "index_bench: %s\n", src.status().ToString().c_str());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf(
      "{\"source\": \"%s\", \"examples\": %llu, \"shards\": %llu, "
      "\"seconds\": %.3f, \"cache\": %s, \"listing_from_cache\": %s, "
      "\"listing_stored\": %s, \"shards_from_cache\": %llu, "
      "\"shards_scanned\": %llu, \"shards_stored\": %llu, "
      "\"peak_rss_mb\": %.1f}\n",
      folder.empty() ? "tfrecord" : "imagefolder",
      static_cast<unsigned long long>((*src)->size()),
      static_cast<unsigned long long>(files), seconds,
      cache_path.empty() ? "false" : "true",
      stats.listing_from_cache ? "true" : "false",
      stats.listing_stored ? "true" : "false",
      static_cast<unsigned long long>(stats.shards_from_cache),
      static_cast<unsigned long long>(stats.shards_scanned),
      static_cast<unsigned long long>(stats.shards_stored),
      double(ru.ru_maxrss) / 1024.0);
  return 0;
}
