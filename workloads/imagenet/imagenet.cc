// The imagenet workload; see imagenet.h.
#include "workloads/imagenet/imagenet.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/executor.h"
#include "base/log.h"
#include "base/test_hooks.h"
#include "workloads/counter_rng.h"
#include "workloads/imagenet/image_decoder.h"
#include "workloads/imagenet/image_source.h"
#include "workloads/imagenet/python_random.h"
#include "workloads/imagenet/transforms.h"
#include "workloads/options.h"
#include "workloads/split.h"

namespace batchd {
namespace {

// Salt of the random stream that picks substitutes, so that it does not
// repeat the augmentation stream's words.
constexpr uint64_t kSubstituteSalt = 0x5ab571707e5eedULL;
constexpr int kSubstituteTries = 16;

// AlgoPerf's imagenet_resnet num_eval_train_examples (50,000 validation
// examples rounded up to a multiple of its eval batch of 1024).
constexpr uint64_t kAlgoPerfEvalTrainExamples = 50176;

// Where TFDS keeps ImageNet-v2, relative to its data_dir: AlgoPerf's test
// split is tfds.load('imagenet_v2/matched-frequency:3.0.0', split='test'),
// shards imagenet_v2-test.tfrecord-NNNNN-of-NNNNN with `image` (JPEG bytes),
// `label` (int64) and `file_name`.
constexpr const char* kImageNetV2Dir = "imagenet_v2/matched-frequency/3.0.0";

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A worker keeps its file buffer from image to image, but not one grown by
// an unusually large file: that would pin the largest file ever read, per
// thread, for the life of the daemon.
constexpr size_t kKeepBufferBytes = size_t(8) << 20;

// Largest max_file_bytes a stream may ask for.
constexpr uint64_t kMaxFileBytesLimit = uint64_t(256) << 20;

// Largest eval_train_examples: eval_train is a subset of a train split of
// fewer than 2^32 examples.
constexpr uint64_t kMaxEvalTrainExamples = (uint64_t(1) << 32) - 1;

// What one worker thread reuses from image to image.
struct ThreadState {
  ImageDecoder decoder;
  std::string bytes;
  std::vector<uint8_t> pixels;
};

ThreadState& LocalState() {
  thread_local ThreadState state;
  return state;
}

struct Options {
  int image_size = 224;
  int resize_size = 256;
  bool nchw = false;
  bool substitute = true;
  bool progress = true;
  double dct_headroom = 1.25;
  bool fixed_crop = false;
  CropBox crop;
  bool flip = false;
  bool with_ids = false;  // an `ids` tensor: each example's global id
  uint64_t eval_train_examples = kAlgoPerfEvalTrainExamples;
  uint64_t max_file_bytes = kDefaultMaxFileBytes;
};

absl::StatusOr<Options> ParseOptions(const WorkloadConfig& config) {
  const auto& o = config.options;
  absl::StatusOr<WorkloadOptions> opts = WorkloadOptions::Create(
      "imagenet", o,
      {"image_size", "resize_size", "layout", "on_decode_error", "progress",
       "dct_headroom", "debug_fixed_crop", "with_ids", "eval_train_examples",
       "max_file_bytes"});
  if (!opts.ok()) return opts.status();
  Options opt;
  absl::StatusOr<int> i = opts->Int("image_size", opt.image_size, 1, 4096);
  if (!i.ok()) return i.status();
  opt.image_size = *i;
  i = opts->Int("resize_size", opt.resize_size, 1, 8192);
  if (!i.ok()) return i.status();
  opt.resize_size = *i;
  if (opt.resize_size < opt.image_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("imagenet: resize_size ", opt.resize_size,
                     " is smaller than image_size ", opt.image_size));
  }
  i = opts->Int("progress", 1, 0, 1);
  if (!i.ok()) return i.status();
  opt.progress = *i == 1;
  i = opts->Int("with_ids", 0, 0, 1);
  if (!i.ok()) return i.status();
  opt.with_ids = *i == 1;
  // eval_train is a subset of train (AlgoPerf's has 50,000 examples).
  absl::StatusOr<uint64_t> u = opts->Uint(
      "eval_train_examples", opt.eval_train_examples, 1, kMaxEvalTrainExamples);
  if (!u.ok()) return u.status();
  opt.eval_train_examples = *u;
  u = opts->Uint("max_file_bytes", opt.max_file_bytes, 1, kMaxFileBytesLimit);
  if (!u.ok()) return u.status();
  opt.max_file_bytes = *u;
  if (opts->Has("dct_headroom")) {
    if (!ParseStrictDouble(opts->String("dct_headroom", ""),
                           &opt.dct_headroom) ||
        !(opt.dct_headroom >= 1.0 && opt.dct_headroom <= 8.0)) {
      return opts->Invalid("dct_headroom", "is not a number in [1, 8]");
    }
  }
  absl::StatusOr<std::string> choice =
      opts->Choice("layout", "nhwc", {"nhwc", "nchw"});
  if (!choice.ok()) return choice.status();
  opt.nchw = *choice == "nchw";
  choice = opts->Choice("on_decode_error", "substitute", {"substitute", "fail"});
  if (!choice.ok()) return choice.status();
  opt.substitute = *choice == "substitute";
  if (auto it = o.find("debug_fixed_crop"); it != o.end()) {
    if (!TestHooksEnabled()) {
      return absl::PermissionDeniedError(
          "imagenet: debug_fixed_crop is a test hook; the server must run "
          "with BATCHD_TEST_HOOKS=1");
    }
    std::vector<std::string> f = absl::StrSplit(it->second, ',');
    int v[5];
    bool ok = f.size() == 5;
    for (size_t i = 0; ok && i < 5; ++i) {
      ok = IsDecimal(f[i], /*allow_minus=*/false) &&
           absl::SimpleAtoi(f[i], &v[i]) && v[i] >= 0;
    }
    if (!ok || v[2] == 0 || v[3] == 0 || v[4] > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("imagenet: debug_fixed_crop='", it->second,
                       "' is not x,y,w,h,flip (w, h > 0; flip 0 or 1)"));
    }
    opt.fixed_crop = true;
    opt.crop = CropBox{v[0], v[1], v[2], v[3]};
    opt.flip = v[4] == 1;
  }
  return opt;
}

class ImageNetWorkload : public Workload {
 public:
  // `subset`: the source ids this split serves, in order (eval_train);
  // empty serves every example of the source.
  ImageNetWorkload(std::unique_ptr<ImageSource> source, bool train, Options opt,
                   std::vector<uint64_t> subset)
      : source_(std::move(source)),
        train_(train),
        opt_(opt),
        subset_(std::move(subset)) {
    const int64_t s = opt_.image_size;
    tensors_ = {{"inputs", DType::kUInt8,
                 opt_.nchw ? std::vector<int64_t>{3, s, s}
                           : std::vector<int64_t>{s, s, 3}},
                {"targets", DType::kInt64, {}}};
    if (!train_) tensors_.push_back({"weights", DType::kFloat32, {}});
    if (opt_.with_ids) tensors_.push_back({"ids", DType::kInt64, {}});
  }

  uint64_t num_examples() const override {
    return subset_.empty() ? source_->size() : subset_.size();
  }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }

  const ExampleSource* source() const override { return &stored_; }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& example = ctx.item();
    ItemRef ex = example;
    if (ex.valid && !subset_.empty()) {
      if (ex.id >= subset_.size()) {
        return absl::OutOfRangeError(
            absl::StrCat("imagenet: example ", ex.id, " of ", subset_.size()));
      }
      ex.id = subset_[ex.id];
    }
    const size_t image_bytes = size_t(opt_.image_size) * opt_.image_size * 3;
    int64_t label = 0;
    float weight = 0.0f;
    if (!ex.valid) {
      memset(out[0], 0, image_bytes);
    } else {
      absl::Status st = FillValid(ctx, ex, out[0], &label);
      if (!st.ok()) return st;
      weight = 1.0f;
    }
    memcpy(out[1], &label, sizeof(label));
    if (!train_) memcpy(out[2], &weight, sizeof(weight));
    if (opt_.with_ids) {
      // The example's own id (a substitute's pixels keep the id they stand
      // in for); -1 on padding.
      const int64_t id = ex.valid ? int64_t(ex.id) : -1;
      memcpy(out[train_ ? 2 : 3], &id, sizeof(id));
    }
    return absl::OkStatus();
  }

 private:
  // `ex`: the item with the source's id (after the eval_train subset).
  absl::Status FillValid(FillContext& ctx, const ItemRef& ex, uint8_t* inputs,
                         int64_t* label) const {
    WorkloadCounters* counters = ctx.counters();
    absl::Status st = FillImage(ctx, ex, ctx.key(), inputs, label);
    // Bytes not read yet: the engine runs the item again once they are.
    if (st.ok() || IsReadPending(st)) return st;
    ReportError(ex.id, st, counters);
    if (!opt_.substitute || source_->size() < 2) {
      return absl::DataLossError(absl::StrCat("imagenet: cannot decode ",
                                              source_->Describe(ex.id), ": ",
                                              st.message()));
    }
    // Another example of the epoch, drawn from a stream of its own keyed by
    // (seed, epoch, position): the same for every thread count and W.
    ExampleRng pick(ex.seed ^ kSubstituteSalt, ex.epoch, ex.position);
    const uint64_t n = source_->size();
    for (int t = 0; t < kSubstituteTries; ++t) {
      const uint64_t other = (ex.id + 1 + pick.NextU64() % (n - 1)) % n;
      st = FillImage(
          ctx, ex,
          {ex.epoch, ex.position, other, ExampleKey::Kind::kSubstitute}, inputs,
          label);
      if (st.ok() || IsReadPending(st)) return st;
      ReportError(other, st, counters);
    }
    return absl::DataLossError(absl::StrCat(
        "imagenet: cannot decode ", source_->Describe(ex.id), " nor ",
        kSubstituteTries, " substitutes; last: ", st.message()));
  }

  void ReportError(uint64_t id, const absl::Status& st,
                   WorkloadCounters* counters) const {
    if (counters != nullptr) counters->decode_errors.fetch_add(1);
    const uint64_t n = logged_.fetch_add(1, std::memory_order_relaxed) + 1;
    const LogFields fields = {
        {"workload", "imagenet"},
        {"example", source_->Describe(id)},
        {"error", std::string(st.message())},
        {"action", opt_.substitute ? "substituted" : "failing"},
        {"errors", std::to_string(n)}};
    // The first kLoggedErrors of a stream are each logged (they name
    // different files); after them a corrupt data set must not flood the
    // log, so the rest are folded per stream: one line per 10 s, saying how
    // many were dropped.
    if (n <= kLoggedErrors) {
      Log(LogLevel::kWarn, "decode_error", fields);
    } else {
      LogKeyed(LogLevel::kWarn,
               absl::StrCat("imagenet_decode_error ", log_key_), "decode_error",
               fields);
    }
  }

  // The example `key` reads (the item's own, or a substitute's) into
  // `inputs`, with the augmentation randomness of ex.
  absl::Status FillImage(FillContext& ctx, const ItemRef& ex,
                         const ExampleKey& key, uint8_t* inputs,
                         int64_t* label) const {
    ThreadState& ts = LocalState();
    ts.decoder.set_dct_headroom(opt_.dct_headroom);
    struct ReleaseLargeBuffer {
      std::string& bytes;
      ~ReleaseLargeBuffer() {
        if (bytes.capacity() > kKeepBufferBytes) std::string().swap(bytes);
      }
    } release{ts.bytes};
    absl::Status st = ctx.Read(key, &ts.bytes, label);
    if (!st.ok()) return st;
    st = ts.decoder.Open(reinterpret_cast<const uint8_t*>(ts.bytes.data()),
                         ts.bytes.size());
    if (!st.ok()) return st;
    const int width = ts.decoder.header().width;
    const int height = ts.decoder.header().height;
    const int s = opt_.image_size;
    ResampleAxis ax, ay;
    bool flip = false;
    if (train_) {
      CropBox box;
      if (opt_.fixed_crop) {
        box.x = std::min(opt_.crop.x, width - 1);
        box.y = std::min(opt_.crop.y, height - 1);
        box.w = std::min(opt_.crop.w, width - box.x);
        box.h = std::min(opt_.crop.h, height - box.y);
        flip = opt_.flip;
      } else {
        ExampleRng rng(ex.seed, ex.epoch, ex.position);
        box = SampleRandomResizedCrop(width, height, RandomResizedCropParams(),
                                      &rng);
        flip = rng.Uniform() < 0.5;
      }
      CropResizeAxes(box, s, &ax, &ay);
    } else {
      ResizeCenterCropAxes(width, height, opt_.resize_size, s, &ax, &ay);
    }
    // The flip is the resize's own: its columns are computed right to left.
    ax.reverse = flip;
    if (!opt_.nchw) {
      // HWC is the decoder's layout: it writes the slot itself.
      return ts.decoder.DecodeResized(ax, ay, inputs);
    }
    ts.pixels.resize(size_t(s) * s * 3);
    st = ts.decoder.DecodeResized(ax, ay, ts.pixels.data());
    if (!st.ok()) return st;
    WriteChw(ts.pixels.data(), inputs);
    return absl::OkStatus();
  }

  // HWC RGB -> CHW.
  void WriteChw(const uint8_t* hwc, uint8_t* out) const {
    const int s = opt_.image_size;
    const size_t plane = size_t(s) * s;
    for (size_t i = 0; i < plane; ++i, hwc += 3) {
      out[i] = hwc[0];
      out[plane + i] = hwc[1];
      out[2 * plane + i] = hwc[2];
    }
  }

  const std::unique_ptr<ImageSource> source_;
  const bool train_;
  const Options opt_;
  const std::vector<uint64_t> subset_;
  std::vector<TensorLayout> tensors_;
  static constexpr uint64_t kLoggedErrors = 10;
  mutable std::atomic<uint64_t> logged_{0};
  // Rate-limit key of this instance's decode warnings (its address).
  const std::string log_key_ = absl::StrCat(reinterpret_cast<uintptr_t>(this));
  // The stored images, by the stream's example id (eval_train's subset
  // maps it to the source's) or, for a substitute, by the source's own.
  class StoredImages : public ExampleSource {
   public:
    explicit StoredImages(const ImageNetWorkload* w) : w_(*w) {}
    absl::Status Read(const ExampleKey& key, std::string* bytes,
                      int64_t* label) const override {
      absl::StatusOr<uint64_t> id = w_.SourceId(key);
      if (!id.ok()) return id.status();
      return w_.source_->Read(*id, bytes, label);
    }
    std::string Describe(const ExampleKey& key) const override {
      absl::StatusOr<uint64_t> id = w_.SourceId(key);
      return id.ok() ? w_.source_->Describe(*id)
                     : absl::StrCat("example ", key.id);
    }

   private:
    const ImageNetWorkload& w_;
  };
  absl::StatusOr<uint64_t> SourceId(const ExampleKey& key) const {
    if (key.kind == ExampleKey::Kind::kSubstitute || subset_.empty()) {
      return key.id;
    }
    if (key.id >= subset_.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("imagenet: example ", key.id, " of ", subset_.size()));
    }
    return subset_[key.id];
  }
  const StoredImages stored_{this};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Workload>> CreateImageNetWorkload(
    const WorkloadConfig& config) {
  absl::StatusOr<Options> opt = ParseOptions(config);
  if (!opt.ok()) return opt.status();
  const std::string& root = config.data_path;
  const std::string& split = config.split;
  // Every file is opened through the server's data root: symlinks may
  // point anywhere inside it, never out (storage/data_file.h).
  absl::StatusOr<std::shared_ptr<const DataRoot>> data_root =
      config.OpenDataRoot();
  if (!data_root.ok()) return data_root.status();
  ImageSourceOptions source_options;
  source_options.root = *data_root;
  source_options.max_file_bytes = opt->max_file_bytes;
  source_options.progress = opt->progress;
  // The daemon's --cache-dir: listings and TFRecord offsets are kept there.
  source_options.cache = config.cache;
  source_options.executor = config.pool();
  absl::StatusOr<Split> kind = ParseSplit(
      "imagenet", split,
      {Split::kTrain, Split::kEvalTrain, Split::kValidation, Split::kTest});
  if (!kind.ok()) return kind.status();
  // eval_train reads the train files; test falls back to ImageNet-v2;
  // validation is a tree or shards named as spelt, else by its other name.
  const bool eval_train = *kind == Split::kEvalTrain;
  const std::string files = eval_train ? "train" : split;
  std::vector<std::string> names = {files};
  if (*kind == Split::kValidation) {
    for (const char* other : {"validation", "val"}) {
      if (files != other) names.push_back(other);
    }
  }
  std::vector<std::string> roots = {root};
  if (*kind == Split::kTest) {
    roots.push_back(absl::StrCat(root, "/", kImageNetV2Dir));
  }
  std::unique_ptr<ImageSource> source;
  for (const std::string& dir_root : roots) {
    for (const std::string& name : names) {
      const std::string dir = absl::StrCat(dir_root, "/", name);
      // A restricted reader's tree is one it may reach, looked up with its
      // rights: what lies beyond a directory it cannot search, or outside
      // the root, reads as missing.
      const bool tree = config.access.restricted()
                            ? (*data_root)->IsDirectory(dir) &&
                                  (*data_root)->Resolve(dir).ok()
                            : IsDir(dir);
      if (tree) {
        absl::StatusOr<std::unique_ptr<ImageSource>> s =
            OpenImageFolder(dir, source_options);
        if (!s.ok()) return s.status();
        source = std::move(*s);
        break;
      }
      std::vector<std::string> shards =
          FindTFRecordShards(dir_root, name, data_root->get());
      if (!shards.empty()) {
        absl::StatusOr<std::unique_ptr<ImageSource>> s =
            OpenTFRecordImages(shards, source_options);
        if (!s.ok()) return s.status();
        source = std::move(*s);
        break;
      }
    }
    if (source != nullptr) break;
  }
  if (source == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "imagenet: found neither an ImageFolder tree ", root, "/", files,
        "/<class>/ nor TFRecord shards ", root, "/*-", files, ".tfrecord-*",
        *kind == Split::kTest
            ? absl::StrCat(" nor ImageNet-v2's ", root, "/", kImageNetV2Dir,
                           "/imagenet_v2-test.tfrecord-*")
            : std::string()));
  }
  std::vector<uint64_t> subset;
  if (eval_train) {
    // AlgoPerf: indices = list(range(num_train_examples));
    // random.Random(seed).shuffle(indices); indices[:num_eval_train_examples].
    const uint64_t n = source->size();
    if (n >= (uint64_t(1) << 32)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "imagenet: eval_train over ", n, " examples (at most 2^32 - 1)"));
    }
    subset.resize(n);
    for (uint64_t i = 0; i < n; ++i) subset[i] = i;
    PythonRandom(config.seed).Shuffle(&subset);
    subset.resize(std::min(n, opt->eval_train_examples));
  }
  return std::unique_ptr<Workload>(new ImageNetWorkload(
      std::move(source), *kind == Split::kTrain, *opt, std::move(subset)));
}

}  // namespace batchd
