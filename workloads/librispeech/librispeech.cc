// The librispeech workload; see librispeech.h.
#include "workloads/librispeech/librispeech.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/format.h"
#include "storage/data_file.h"
#include "workloads/imagenet/python_random.h"
#include "workloads/librispeech/npy.h"
#include "workloads/options.h"
#include "workloads/split.h"

namespace batchd {
namespace {

// AlgoPerf's librispeech num_eval_train_examples.
constexpr uint64_t kAlgoPerfEvalTrainExamples = 5376;
// A subset's CSV: the largest (train-other-500) is 148,688 lines of ~25
// bytes, ~4 MB; 16 MiB is what one OpenStream may read of one.
constexpr uint64_t kMaxCsvBytes = uint64_t(16) << 20;
// Utterances of one split, each kept as ~40 bytes and its id: the train
// split has 281,241. A split's CSVs, however short their lines, keep at
// most ~50 MB. (Also below 2^32: eval_train is drawn with getrandbits(k
// <= 32), python_random.h.)
constexpr uint64_t kMaxUtterances = uint64_t(1) << 20;
// An audio file: 320,000 int64 values and a header (at most 64 KiB, npy.cc).
constexpr uint64_t kMaxAudioFileBytes = kLibriSpeechMaxAudio * 8 + (1 << 17);
constexpr uint64_t kMaxTargetsFileBytes =
    kLibriSpeechMaxTargets * 8 + (1 << 17);
// Utterance ids are file name stems ("1272-128104-0000").
constexpr size_t kMaxIdBytes = 255;

const char* const kTrainSubsets[] = {"train-clean-100", "train-clean-360",
                                     "train-other-500"};
const char* const kValidationSubsets[] = {"dev-clean", "dev-other"};
const char* const kTestSubsets[] = {"test-clean"};

struct Utterance {
  uint32_t subset;  // index into the workload's subset names
  std::string id;
};

// Reads `{data}/{subset}.csv`: the header ",id", then "ROWINDEX,ID" lines
// (pandas' to_csv; AlgoPerf skips the header and takes column 1), onto
// `out`, which holds at most kMaxUtterances.
absl::Status ReadCsv(const DataRoot& root, const std::string& data,
                     uint32_t subset, const std::string& name,
                     std::vector<Utterance>* out) {
  const std::string path = absl::StrCat(data, "/", name, ".csv");
  std::string text;
  absl::Status st = ReadFileCapped(root, path, kMaxCsvBytes, &text);
  if (!st.ok()) {
    return absl::Status(
        st.code(),
        absl::StrCat("librispeech: split needs ", Printable(path),
                     " (AlgoPerf's index of ", name, "): ", st.message()));
  }
  uint64_t offset = 0;
  bool header = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const uint64_t at = offset;
    offset += line.size() + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (header) {
      header = false;
      if (line != ",id") {
        return absl::DataLossError(absl::StrCat(
            "librispeech: ", Printable(path),
            " does not start with the header ',id' (AlgoPerf's index)"));
      }
      continue;
    }
    const size_t comma = line.find(',');
    absl::string_view row = line.substr(0, comma);
    absl::string_view id = comma == absl::string_view::npos
                               ? absl::string_view()
                               : line.substr(comma + 1);
    uint64_t unused = 0;
    const bool ok =
        !row.empty() && absl::SimpleAtoi(row, &unused) && !id.empty() &&
        id.size() <= kMaxIdBytes && id != "." && id != ".." &&
        id.find_first_of(std::string("/,\0", 3)) == absl::string_view::npos;
    if (!ok) {
      return absl::DataLossError(absl::StrCat(
          "librispeech: ", Printable(path), " at byte ", at, ": line '",
          Printable(line.substr(0, 80)), "' is not ROWINDEX,UTTERANCE_ID"));
    }
    if (out->size() >= kMaxUtterances) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "librispeech: ", Printable(path), " at byte ", at, ": more than ",
          kMaxUtterances,
          " utterances in the split (LibriSpeech's train split has 281,241)"));
    }
    out->push_back({subset, std::string(id)});
  }
  if (header) {
    return absl::DataLossError(absl::StrCat("librispeech: ", Printable(path),
                                            " is empty (no ',id' header)"));
  }
  return absl::OkStatus();
}

// What one worker thread reuses from utterance to utterance: a fresh
// string per utterance would be a fresh mapping of ~1.3 MB, zero-filled and
// faulted in page by page.
struct ThreadState {
  std::string bytes;
  std::string targets;
};

ThreadState& LocalState() {
  thread_local ThreadState state;
  return state;
}

// Writes a's values as little-endian int16 into out (a little-endian
// host, as the ring's layout assumes); false when one is outside int16.
// One branch-free loop per stored width, so that the compiler vectorises
// it: the check is folded into a flag, not a branch per sample.
template <typename T>
bool Narrow(const char* data, uint64_t n, uint8_t* out) {
  bool ok = true;
  for (uint64_t i = 0; i < n; ++i) {
    T v;
    memcpy(&v, data + i * sizeof(T), sizeof(T));
    ok &= int64_t(v) >= -32768 && int64_t(v) <= 32767;
    const int16_t s = int16_t(v);
    memcpy(out + 2 * i, &s, 2);
  }
  return ok;
}

bool NarrowToInt16(const NpyArray& a, uint8_t* out) {
  switch (a.item_bytes) {
    case 8:
      return Narrow<int64_t>(a.data, a.length, out);
    case 4:
      return Narrow<int32_t>(a.data, a.length, out);
    default:
      return Narrow<int16_t>(a.data, a.length, out);
  }
}

// The bytes the source reads for one utterance: the audio file, then the
// targets file, then the targets file's size (8 bytes, little-endian), so
// that the large file is read in place and never copied.
constexpr size_t kTrailerBytes = 8;

class LibriSpeechWorkload : public Workload {
 public:
  LibriSpeechWorkload(std::shared_ptr<const DataRoot> root, std::string data,
                      std::vector<std::string> subsets,
                      std::vector<Utterance> utterances,
                      std::vector<uint32_t> chosen, bool train)
      : root_(std::move(root)),
        data_(std::move(data)),
        subsets_(std::move(subsets)),
        utterances_(std::move(utterances)),
        chosen_(std::move(chosen)),
        train_(train) {
    tensors_ = {{"audio", DType::kUInt8, {2 * kLibriSpeechMaxAudio}},
                {"audio_lengths", DType::kInt32, {}},
                {"targets", DType::kInt32, {kLibriSpeechMaxTargets}},
                {"target_lengths", DType::kInt32, {}}};
    if (!train_) tensors_.push_back({"weights", DType::kFloat32, {}});
  }

  uint64_t num_examples() const override {
    return chosen_.empty() ? utterances_.size() : chosen_.size();
  }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }
  const ExampleSource* source() const override { return &stored_; }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    int32_t audio_length = 0, target_length = 0;
    float weight = 0.0f;
    if (!item.valid) {
      memset(out[0], 0, 2 * kLibriSpeechMaxAudio);
      memset(out[2], 0, 4 * kLibriSpeechMaxTargets);
    } else {
      std::string& bytes = LocalState().bytes;
      int64_t label = 0;
      absl::Status st = ctx.Read(ctx.key(), &bytes, &label);
      if (!st.ok()) return st;  // pending included: returned unchanged
      st = Decode(ctx.key(), bytes, out[0], &audio_length, out[2],
                  &target_length);
      if (!st.ok()) {
        if (ctx.counters() != nullptr) {
          ctx.counters()->decode_errors.fetch_add(1);
        }
        return st;
      }
      weight = 1.0f;
    }
    memcpy(out[1], &audio_length, 4);
    memcpy(out[3], &target_length, 4);
    if (!train_) memcpy(out[4], &weight, 4);
    return absl::OkStatus();
  }

 private:
  absl::Status Decode(const ExampleKey& key, const std::string& bytes,
                      uint8_t* audio, int32_t* audio_length, uint8_t* targets,
                      int32_t* target_length) const {
    absl::StatusOr<const Utterance*> u = Find(key);
    if (!u.ok()) return u.status();
    const std::string audio_path = AudioPath(**u);
    uint64_t targets_bytes = 0;
    if (bytes.size() >= kTrailerBytes) {
      for (size_t i = 0; i < kTrailerBytes; ++i) {
        targets_bytes |=
            uint64_t(uint8_t(bytes[bytes.size() - kTrailerBytes + i]))
            << (8 * i);
      }
    }
    if (bytes.size() < kTrailerBytes ||
        targets_bytes > bytes.size() - kTrailerBytes) {
      return absl::InternalError(
          absl::StrCat("librispeech: bytes read for ", Printable(audio_path),
                       " are not an audio and a targets file"));
    }
    const absl::string_view all(bytes);
    const size_t audio_bytes = bytes.size() - kTrailerBytes - targets_bytes;
    absl::StatusOr<NpyArray> a =
        ParseNpy(all.substr(0, audio_bytes), audio_path, {"<i8", "<i4", "<i2"},
                 kLibriSpeechMaxAudio);
    if (!a.ok()) return a.status();
    const std::string targets_path = TargetsPath(**u);
    absl::StatusOr<NpyArray> t =
        ParseNpy(all.substr(audio_bytes, targets_bytes), targets_path,
                 {"<i4", "<i8"}, kLibriSpeechMaxTargets);
    if (!t.ok()) return t.status();
    if (!NarrowToInt16(*a, audio)) {
      for (uint64_t i = 0; i < a->length; ++i) {
        const int64_t v = a->at(i);
        if (v < -32768 || v > 32767) {
          return absl::DataLossError(absl::StrCat(
              "librispeech: ", Printable(audio_path), " at byte ",
              a->data_offset + i * a->item_bytes, ": sample ", i, " = ", v,
              " is outside int16 (AlgoPerf stores 16-bit PCM)"));
        }
      }
    }
    memset(audio + 2 * a->length, 0, 2 * (kLibriSpeechMaxAudio - a->length));
    for (uint64_t i = 0; i < t->length; ++i) {
      const int64_t v = t->at(i);
      if (v < INT32_MIN || v > INT32_MAX) {
        return absl::DataLossError(
            absl::StrCat("librispeech: ", Printable(targets_path), " at byte ",
                         t->data_offset + i * t->item_bytes, ": token ", i,
                         " = ", v, " is outside int32"));
      }
      const int32_t w = int32_t(v);
      memcpy(targets + 4 * i, &w, 4);
    }
    memset(targets + 4 * t->length, 0,
           4 * (kLibriSpeechMaxTargets - t->length));
    *audio_length = int32_t(a->length);
    *target_length = int32_t(t->length);
    return absl::OkStatus();
  }

  absl::StatusOr<const Utterance*> Find(const ExampleKey& key) const {
    uint64_t index = key.id;
    if (!chosen_.empty()) {
      if (key.id >= chosen_.size()) {
        return absl::OutOfRangeError(absl::StrCat(
            "librispeech: example ", key.id, " of ", chosen_.size()));
      }
      index = chosen_[key.id];
    }
    if (index >= utterances_.size()) {
      return absl::OutOfRangeError(absl::StrCat("librispeech: example ", index,
                                                " of ", utterances_.size()));
    }
    return &utterances_[index];
  }

  std::string AudioPath(const Utterance& u) const {
    return absl::StrCat(data_, "/", subsets_[u.subset], "/", u.id,
                        "_audio.npy");
  }
  std::string TargetsPath(const Utterance& u) const {
    return absl::StrCat(data_, "/", subsets_[u.subset], "/", u.id,
                        "_targets.npy");
  }

  // One utterance's two files, as Decode takes them (kTrailerBytes).
  class StoredUtterances : public ExampleSource {
   public:
    explicit StoredUtterances(const LibriSpeechWorkload* w) : w_(*w) {}
    absl::Status Read(const ExampleKey& key, std::string* bytes,
                      int64_t* label) const override {
      *label = 0;
      absl::StatusOr<const Utterance*> u = w_.Find(key);
      if (!u.ok()) return u.status();
      // Room for both files and the trailer at once: appending the targets
      // to a buffer sized to the audio alone would move the audio.
      bytes->reserve(kMaxAudioFileBytes + kMaxTargetsFileBytes + kTrailerBytes);
      absl::Status st = ReadFileCapped(*w_.root_, w_.AudioPath(**u),
                                       kMaxAudioFileBytes, bytes);
      if (!st.ok()) return st;
      std::string& targets = LocalState().targets;
      st = ReadFileCapped(*w_.root_, w_.TargetsPath(**u), kMaxTargetsFileBytes,
                          &targets);
      if (!st.ok()) return st;
      bytes->append(targets);
      const uint64_t n = targets.size();
      for (size_t i = 0; i < kTrailerBytes; ++i) {
        bytes->push_back(char(uint8_t(n >> (8 * i))));
      }
      return absl::OkStatus();
    }
    std::string Describe(const ExampleKey& key) const override {
      absl::StatusOr<const Utterance*> u = w_.Find(key);
      return u.ok() ? w_.AudioPath(**u) : absl::StrCat("example ", key.id);
    }

   private:
    const LibriSpeechWorkload& w_;
  };

  const std::shared_ptr<const DataRoot> root_;
  const std::string data_;
  const std::vector<std::string> subsets_;
  const std::vector<Utterance> utterances_;
  // eval_train: the train indices it serves, in order; else empty.
  const std::vector<uint32_t> chosen_;
  const bool train_;
  std::vector<TensorLayout> tensors_;
  const StoredUtterances stored_{this};
};

absl::StatusOr<std::unique_ptr<Workload>> Create(const WorkloadContext& c) {
  const uint64_t eval_train_examples = c.options.Uint("eval_train_examples");
  const Split split = c.split;
  const std::shared_ptr<const DataRoot>& root = c.root;

  std::vector<std::string> subsets;
  switch (split) {
    case Split::kTrain:
    case Split::kEvalTrain:
      subsets.assign(std::begin(kTrainSubsets), std::end(kTrainSubsets));
      break;
    case Split::kValidation:
      subsets.assign(std::begin(kValidationSubsets),
                     std::end(kValidationSubsets));
      break;
    case Split::kTest:
      subsets.assign(std::begin(kTestSubsets), std::end(kTestSubsets));
      break;
  }
  std::vector<Utterance> utterances;
  for (uint32_t i = 0; i < subsets.size(); ++i) {
    absl::Status st = ReadCsv(*root, c.data_path(), i, subsets[i], &utterances);
    if (!st.ok()) return st;
  }
  if (utterances.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("librispeech: split ", c.split_name(),
                     " has no utterances under ", Printable(c.data_path())));
  }
  std::vector<uint32_t> chosen;
  if (split == Split::kEvalTrain) {
    // AlgoPerf: indices = list(range(N)); random.Random(seed).shuffle(...);
    // Subset(dataset, indices[:num_eval_train_examples]).
    chosen.resize(utterances.size());
    for (uint32_t i = 0; i < chosen.size(); ++i) chosen[i] = i;
    PythonRandom(c.seed()).Shuffle(&chosen);
    if (chosen.size() > eval_train_examples) {
      chosen.resize(eval_train_examples);
    }
  }
  return std::unique_ptr<Workload>(new LibriSpeechWorkload(
      root, c.data_path(), std::move(subsets), std::move(utterances),
      std::move(chosen), split == Split::kTrain));
}

constexpr OptionSpec kOptions[] = {
    EvalTrainExamples(kAlgoPerfEvalTrainExamples),
};

}  // namespace

const WorkloadEntry kLibriSpeechWorkload = {
    "librispeech",
    "AlgoPerf's pre-processed LibriSpeech (.npy utterances, CSV indexes)",
    kEverySplit,
    kOptions,
    Create,
};

}  // namespace batchd
