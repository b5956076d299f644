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

// What the options set (their defaults and bounds: kOptions).
struct Options {
  int image_size = 0;
  int resize_size = 0;
  bool nchw = false;
  bool substitute = false;
  bool progress = false;
  double dct_headroom = 0;
  bool fixed_crop = false;
  CropBox crop;
  bool flip = false;
  bool with_ids = false;  // an `ids` tensor: each example's global id
  uint64_t eval_train_examples = 0;
  uint64_t max_file_bytes = 0;
};

constexpr const char* kLayouts[] = {"nhwc", "nchw"};
constexpr const char* kOnDecodeError[] = {"substitute", "fail"};
constexpr OptionSpec kOptions[] = {
    UintOption("image_size", 224, 1, 4096, "S, the output side"),
    UintOption("resize_size", 256, 1, 8192,
               "evaluation's shorter side before the crop (at least "
               "image_size)"),
    ChoiceOption("layout", "nhwc", kLayouts,
                 "of inputs: [B, S, S, 3] or "
                 "[B, 3, S, S]"),
    ChoiceOption("on_decode_error", "substitute", kOnDecodeError,
                 "an image that cannot be decoded is replaced by another of "
                 "the epoch, or fails the stream"),
    UintOption("progress", 1, 0, 1,
               "1: report the indexing of large trees on stderr"),
    NumberOption("dct_headroom", 1.25, 1, 8,
                 "scaled pixels per output pixel a JPEG's DCT scaling keeps"),
    TextOption("debug_fixed_crop", "",
               "x,y,w,h,flip: a test hook (BATCHD_TEST_HOOKS=1) that fixes "
               "every training crop"),
    UintOption("with_ids", 0, 0, 1, "1: add ids int64 [B], the examples' ids"),
    EvalTrainExamples(kAlgoPerfEvalTrainExamples),
    MaxFileBytes(),
};

absl::StatusOr<Options> OptionsOf(const OptionValues& v) {
  Options opt;
  opt.image_size = int(v.Uint("image_size"));
  opt.resize_size = int(v.Uint("resize_size"));
  if (opt.resize_size < opt.image_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("imagenet: resize_size ", opt.resize_size,
                     " is smaller than image_size ", opt.image_size));
  }
  opt.progress = v.Uint("progress") == 1;
  opt.with_ids = v.Uint("with_ids") == 1;
  // eval_train is a subset of train (AlgoPerf's has 50,000 examples).
  opt.eval_train_examples = v.Uint("eval_train_examples");
  opt.max_file_bytes = v.Uint("max_file_bytes");
  opt.dct_headroom = v.Number("dct_headroom");
  opt.nchw = v.Text("layout") == "nchw";
  opt.substitute = v.Text("on_decode_error") == "substitute";
  if (v.Given("debug_fixed_crop")) {
    const std::string& crop = v.Text("debug_fixed_crop");
    if (!TestHooksEnabled()) {
      return absl::PermissionDeniedError(
          "imagenet: debug_fixed_crop is a test hook; the server must run "
          "with BATCHD_TEST_HOOKS=1");
    }
    std::vector<std::string> f = absl::StrSplit(crop, ',');
    int n[5];
    bool ok = f.size() == 5;
    for (size_t i = 0; ok && i < 5; ++i) {
      ok = IsDecimal(f[i], /*allow_minus=*/false) &&
           absl::SimpleAtoi(f[i], &n[i]) && n[i] >= 0;
    }
    if (!ok || n[2] == 0 || n[3] == 0 || n[4] > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("imagenet: debug_fixed_crop='", crop,
                       "' is not x,y,w,h,flip (w, h > 0; flip 0 or 1)"));
    }
    opt.fixed_crop = true;
    opt.crop = CropBox{n[0], n[1], n[2], n[3]};
    opt.flip = n[4] == 1;
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

absl::StatusOr<std::unique_ptr<Workload>> Create(const WorkloadContext& c) {
  absl::StatusOr<Options> opt = OptionsOf(c.options);
  if (!opt.ok()) return opt.status();
  const std::string& root = c.data_path();
  const std::string& split = c.split_name();
  // Every file is opened through the server's data root: symlinks may
  // point anywhere inside it, never out (storage/data_file.h).
  const std::shared_ptr<const DataRoot>& data_root = c.root;
  ImageSourceOptions source_options;
  source_options.root = data_root;
  source_options.max_file_bytes = opt->max_file_bytes;
  source_options.progress = opt->progress;
  // The daemon's --cache-dir: listings and TFRecord offsets are kept there.
  source_options.cache = c.config.cache;
  source_options.executor = c.pool();
  const Split kind = c.split;
  // eval_train reads the train files; test falls back to ImageNet-v2;
  // validation is a tree or shards named as spelt, else by its other name.
  const bool eval_train = kind == Split::kEvalTrain;
  const std::string files = eval_train ? "train" : split;
  std::vector<std::string> names = {files};
  if (kind == Split::kValidation) {
    for (const char* other : {"validation", "val"}) {
      if (files != other) names.push_back(other);
    }
  }
  std::vector<std::string> roots = {root};
  if (kind == Split::kTest) {
    roots.push_back(absl::StrCat(root, "/", kImageNetV2Dir));
  }
  std::unique_ptr<ImageSource> source;
  for (const std::string& dir_root : roots) {
    for (const std::string& name : names) {
      const std::string dir = absl::StrCat(dir_root, "/", name);
      // A restricted reader's tree is one it may reach, looked up with its
      // rights: what lies beyond a directory it cannot search, or outside
      // the root, reads as missing.
      const bool tree =
          data_root->access().restricted()
              ? data_root->IsDirectory(dir) && data_root->Resolve(dir).ok()
              : IsDir(dir);
      if (tree) {
        absl::StatusOr<std::unique_ptr<ImageSource>> s =
            OpenImageFolder(dir, source_options);
        if (!s.ok()) return s.status();
        source = std::move(*s);
        break;
      }
      std::vector<std::string> shards =
          FindTFRecordShards(dir_root, name, data_root.get());
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
        kind == Split::kTest
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
    PythonRandom(c.seed()).Shuffle(&subset);
    subset.resize(std::min(n, opt->eval_train_examples));
  }
  return std::unique_ptr<Workload>(new ImageNetWorkload(
      std::move(source), kind == Split::kTrain, *opt, std::move(subset)));
}


}  // namespace

const WorkloadEntry kImageNetWorkload = {
    "imagenet",
    "ImageFolder or TFDS imagenet2012, AlgoPerf's transforms",
    kEverySplit,
    kOptions,
    Create,
};

}  // namespace batchd
