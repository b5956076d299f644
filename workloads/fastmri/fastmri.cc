// The fastmri workload; see fastmri.h.
#include "workloads/fastmri/fastmri.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/format.h"
#include "base/work_context.h"
#include "storage/data_file.h"
#include "workloads/fastmri/kspace.h"
#include "workloads/fastmri/volume.h"
#include "workloads/options.h"
#include "workloads/split.h"

namespace batchd {
namespace {

constexpr char kName[] = "fastmri";
constexpr char kTrainDir[] = "knee_singlecoil_train";
constexpr char kValDir[] = "knee_singlecoil_val";
// AlgoPerf's num_eval_train_examples: 3,554 validation slices rounded up to
// a multiple of its eval batch (256).
constexpr uint64_t kAlgoPerfEvalTrainExamples = 3584;
// AlgoPerf's validation split: the first 100 sorted val volumes.
constexpr uint64_t kAlgoPerfValidationFiles = 100;
// The release has 973 train and 199 val volumes; far above.
constexpr uint64_t kMaxVolumes = 1 << 20;
constexpr int kPixels = kFastMriCrop * kFastMriCrop;

// The `*.h5` files of `dir` (glob's rule: no leading dot), sorted.
absl::StatusOr<std::vector<std::string>> VolumeFiles(const DataRoot& root,
                                                     const std::string& dir) {
  std::vector<std::string> names;
  absl::Status listed = root.ForEachEntry(dir, [&](const dirent& e) {
    const absl::string_view name(e.d_name);
    if (name.size() > 3 && name[0] != '.' && absl::EndsWith(name, ".h5")) {
      names.emplace_back(name);
    }
    return names.size() <= kMaxVolumes;
  });
  if (!listed.ok()) {
    return absl::Status(
        listed.code(),
        absl::StrCat(
            kName, ": the split needs the directory ", Printable(dir),
            " (fastMRI's knee single-coil volumes): ", listed.message()));
  }
  if (names.size() > kMaxVolumes) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": more than ", kMaxVolumes, " volumes in ", Printable(dir)));
  }
  std::sort(names.begin(), names.end());
  for (std::string& n : names) n = absl::StrCat(dir, "/", n);
  return names;
}

class FastMriWorkload : public Workload {
 public:
  FastMriWorkload(std::shared_ptr<const DataRoot> root,
                  std::vector<FastMriVolume> volumes, uint64_t examples,
                  Split split, uint64_t seed)
      : root_(std::move(root)),
        volumes_(std::move(volumes)),
        examples_(examples),
        split_(split),
        seed_(seed) {
    uint64_t start = 0;
    for (const FastMriVolume& v : volumes_) {
      starts_.push_back(start);
      start += v.slices;
    }
    tensors_ = {{"inputs", DType::kFloat32, {kFastMriCrop, kFastMriCrop}},
                {"targets", DType::kFloat32, {kFastMriCrop, kFastMriCrop}},
                {"mean", DType::kFloat32, {}},
                {"std", DType::kFloat32, {}},
                {"volume_max", DType::kFloat32, {}}};
    if (split_ != Split::kTrain) {
      tensors_.push_back({"weights", DType::kFloat32, {}});
    }
  }

  uint64_t num_examples() const override { return examples_; }
  bool shuffle() const override { return split_ == Split::kTrain; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  const ExampleSource* source() const override { return &stored_; }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    float* inputs = reinterpret_cast<float*>(out[0]);
    float* targets = reinterpret_cast<float*>(out[1]);
    float weight = 0, volume_max = 0;
    SliceOut slice{inputs, targets};
    if (!item.valid) {
      memset(inputs, 0, sizeof(float) * kPixels);
      memset(targets, 0, sizeof(float) * kPixels);
    } else {
      std::string& bytes = LocalBytes();
      int64_t label = 0;
      absl::Status st = ctx.Read(ctx.key(), &bytes, &label);
      if (!st.ok()) return st;  // pending included: returned unchanged
      st = Transform(ctx.key().id, bytes, &slice, &volume_max);
      if (!st.ok()) {
        if (ctx.counters() != nullptr) {
          ctx.counters()->decode_errors.fetch_add(1);
        }
        return st;
      }
      weight = 1;
    }
    memcpy(out[2], &slice.mean, 4);
    memcpy(out[3], &slice.std, 4);
    memcpy(out[4], &volume_max, 4);
    if (split_ != Split::kTrain) memcpy(out[5], &weight, 4);
    return absl::OkStatus();
  }

 private:
  // A worker's read buffer: ~2 MB a slice, kept rather than mapped afresh.
  static std::string& LocalBytes() {
    thread_local std::string bytes;
    return bytes;
  }

  struct Where {
    const FastMriVolume* volume;
    uint32_t slice;
  };

  absl::StatusOr<Where> Find(uint64_t id) const {
    if (id >= examples_) {
      return absl::OutOfRangeError(
          absl::StrCat(kName, ": example ", id, " of ", examples_));
    }
    const size_t v =
        size_t(std::upper_bound(starts_.begin(), starts_.end(), id) -
               starts_.begin()) -
        1;
    return Where{&volumes_[v], uint32_t(id - starts_[v])};
  }

  absl::Status Transform(uint64_t id, const std::string& bytes, SliceOut* out,
                         float* volume_max) const {
    absl::StatusOr<Where> w = Find(id);
    if (!w.ok()) return w.status();
    const FastMriVolume& v = *w->volume;
    if (bytes.size() !=
        v.KspaceSliceBytes() + FastMriVolume::kTargetSliceBytes) {
      return absl::InternalError(
          absl::StrCat(kName, ": ", bytes.size(), " bytes read for slice ",
                       w->slice, " of ", Printable(v.path)));
    }
    std::vector<float> u(v.width);
    if (split_ == Split::kTrain || split_ == Split::kEvalTrain) {
      TrainUniform(seed_, id, int(v.width), u.data());
    } else {
      StatelessUniform(0, 0, int(v.width), u.data());  // AlgoPerf's eval seed
    }
    const std::vector<uint8_t> mask = ColumnMask(u.data(), int(v.width));
    // The read buffer is 16-byte aligned (the allocator's), as float
    // access needs.
    const float* kspace = reinterpret_cast<const float*>(bytes.data());
    const float* target =
        reinterpret_cast<const float*>(bytes.data() + v.KspaceSliceBytes());
    absl::Status st =
        TransformSlice(kspace, int(v.width), mask.data(), target, out);
    if (!st.ok()) {
      return absl::DataLossError(absl::StrCat(kName, ": ", Printable(v.path),
                                              " slice ", w->slice, ": ",
                                              st.message()));
    }
    *volume_max = v.volume_max;
    return absl::OkStatus();
  }

  // A slice's stored bytes: its k-space, then its target.
  class StoredSlices : public ExampleSource {
   public:
    explicit StoredSlices(const FastMriWorkload* w) : w_(*w) {}
    absl::Status Read(const ExampleKey& key, std::string* bytes,
                      int64_t* label) const override {
      *label = 0;
      absl::StatusOr<Where> where = w_.Find(key.id);
      if (!where.ok()) return where.status();
      return ReadVolumeSlice(*w_.root_, *where->volume, where->slice, bytes);
    }
    std::string Describe(const ExampleKey& key) const override {
      absl::StatusOr<Where> where = w_.Find(key.id);
      if (!where.ok()) return absl::StrCat("example ", key.id);
      return absl::StrCat(where->volume->path, " slice ", where->slice);
    }

   private:
    const FastMriWorkload& w_;
  };

  const std::shared_ptr<const DataRoot> root_;
  const std::vector<FastMriVolume> volumes_;
  std::vector<uint64_t> starts_;  // each volume's first example
  const uint64_t examples_;
  const Split split_;
  const uint64_t seed_;
  std::vector<TensorLayout> tensors_;
  const StoredSlices stored_{this};
};

absl::StatusOr<std::unique_ptr<Workload>> Create(const WorkloadContext& c) {
  const uint64_t eval_train_examples = c.options.Uint("eval_train_examples");
  const uint64_t validation_files = c.options.Uint("validation_files");
  const Split split = c.split;
  const std::shared_ptr<const DataRoot>& root = c.root;
  const std::string& data_path = c.data_path();

  const bool train = split == Split::kTrain || split == Split::kEvalTrain;
  absl::StatusOr<std::vector<std::string>> files = VolumeFiles(
      *root, absl::StrCat(data_path, "/", train ? kTrainDir : kValDir));
  if (!files.ok()) return files.status();
  if (!train) {
    // AlgoPerf: sorted(val)[:100] is validation, the rest test.
    const size_t cut = std::min<size_t>(files->size(), validation_files);
    if (split == Split::kValidation) {
      files->resize(cut);
    } else {
      files->erase(files->begin(), files->begin() + ptrdiff_t(cut));
    }
  }
  if (files->empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        kName, ": split ", c.split_name(), " has no volumes under ",
        Printable(data_path), " (", train ? kTrainDir : kValDir, "/*.h5",
        train ? ""
              : "; validation takes the first validation_files "
                "sorted volumes, test the rest",
        ")"));
  }
  std::vector<FastMriVolume> volumes;
  uint64_t slices = 0;
  for (const std::string& f : *files) {
    // One call to the owner's helper a volume, up to 2^20 of them: a
    // request that no longer wants the stream (its caller gone, timed out
    // or refused) stops here, not after the last volume.
    if (absl::Status s = CheckCancelled(absl::StrCat("indexing ", f));
        !s.ok()) {
      return s;
    }
    absl::StatusOr<FastMriVolume> v = IndexVolume(*root, f);
    if (!v.ok()) return v.status();
    slices += v->slices;
    volumes.push_back(*std::move(v));
  }
  if (slices == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        kName, ": split ", c.split_name(), "'s volumes hold no slices"));
  }
  uint64_t examples = slices;
  if (split == Split::kEvalTrain) {
    examples = std::min(examples, eval_train_examples);
  }
  return std::unique_ptr<Workload>(
      new FastMriWorkload(root, std::move(volumes), examples, split, c.seed()));
}

constexpr OptionSpec kOptions[] = {
    EvalTrainExamples(kAlgoPerfEvalTrainExamples),
    UintOption("validation_files", kAlgoPerfValidationFiles, 1, kMaxVolumes,
               "sorted val volumes of the validation split (AlgoPerf's); "
               "test has the rest"),
};

}  // namespace

const WorkloadEntry kFastMriWorkload = {
    "fastmri",
    "fastMRI knee single-coil HDF5 volumes, AlgoPerf's k-space transform",
    kEverySplit,
    kOptions,
    Create,
};

}  // namespace batchd
