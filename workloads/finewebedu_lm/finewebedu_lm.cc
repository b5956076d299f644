// The finewebedu_lm workload; see finewebedu_lm.h and docs/finewebedu_lm.md.
#include "workloads/finewebedu_lm/finewebedu_lm.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "storage/data_file.h"
#include "workloads/finewebedu_lm/arrow_stream.h"

namespace batchd {
namespace {

constexpr char kName[] = "finewebedu_lm";
constexpr uint64_t kSeqLen = 1024;
constexpr uint64_t kWindow = kSeqLen + 1;
constexpr uint64_t kAlgoPerfEvalTrain = 10000;
// The most shards a split may have: each stays open (a descriptor) while
// its stream lives, and the daemon's descriptors serve every user
// (docs/security.md, "Connections and file descriptors"), so that one
// folder of empty files named as shards must not take them all. AlgoPerf's
// FineWeb-Edu sample-10BT (~40 GB of int32 tokens) makes about 80 of
// save_to_disk's 500 MB shards.
constexpr uint64_t kMaxShards = 1024;

// One record batch's tokens: `tokens` values from byte `offset` of file
// `file`, the split's tokens [first, first + tokens).
struct Piece {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t first = 0;
  uint64_t tokens = 0;
};

// The split's shards, held open (with the caller's permissions, checked at
// open), and where each record batch's tokens lie.
class TokenStream : public ExampleSource {
 public:
  ~TokenStream() override {
    for (int fd : fds_) close(fd);
  }

  std::vector<std::string> paths_;
  std::vector<int> fds_;
  std::vector<Piece> pieces_;  // non-empty batches only, in stream order
  uint64_t tokens_ = 0;
  int element_bytes_ = 4;

  uint64_t windows() const { return tokens_ / kWindow; }

  // The piece holding token t (t < tokens_).
  size_t PieceOf(uint64_t t) const {
    return size_t(std::upper_bound(
                      pieces_.begin(), pieces_.end(), t,
                      [](uint64_t v, const Piece& p) { return v < p.first; }) -
                  pieces_.begin()) -
           1;
  }

  // Window key.id's 1,025 tokens as stored (element_bytes_ each).
  absl::Status Read(const ExampleKey& key, std::string* bytes,
                    int64_t* label) const override {
    *label = 0;
    const uint64_t eb = uint64_t(element_bytes_);
    bytes->resize(kWindow * eb);
    uint64_t t = key.id * kWindow, done = 0;
    for (size_t p = PieceOf(t); done < kWindow; ++p) {
      const Piece& piece = pieces_[p];
      const uint64_t from = t - piece.first;
      const uint64_t n = std::min(kWindow - done, piece.tokens - from);
      std::string part;
      part.swap(*bytes);
      // Read straight into the caller's buffer at its place.
      const ssize_t got = PreadFull(fds_[piece.file], part.data() + done * eb,
                                    n * eb, piece.offset + from * eb);
      part.swap(*bytes);
      if (got < 0 || uint64_t(got) != n * eb) {
        const uint64_t read = got < 0 ? 0 : uint64_t(got);
        return absl::DataLossError(absl::StrCat(
            kName, ": ", paths_[piece.file], ": cannot read ", n * eb - read,
            " bytes at byte ", piece.offset + from * eb + read,
            got >= 0 ? " (the file is shorter than when opened)"
                     : absl::StrCat(": ", strerror(errno))));
      }
      done += n;
      t += n;
    }
    return absl::OkStatus();
  }

  std::string Describe(const ExampleKey& key) const override {
    const uint64_t t = key.id * kWindow;
    if (t >= tokens_) return absl::StrCat("window ", key.id);
    const Piece& p = pieces_[PieceOf(t)];
    return absl::StrCat(paths_[p.file], " byte ",
                        p.offset + (t - p.first) * element_bytes_, " (window ",
                        key.id, ")");
  }
};

// data-XXXXX-of-NNNNN.arrow: its index and count.
bool ShardName(const char* name, uint64_t* index, uint64_t* count) {
  const size_t n = std::strlen(name);
  if (n != 5 + 5 + 4 + 5 + 6 || std::strncmp(name, "data-", 5) != 0 ||
      std::strncmp(name + 10, "-of-", 4) != 0 ||
      std::strcmp(name + 19, ".arrow") != 0) {
    return false;
  }
  return absl::SimpleAtoi(absl::string_view(name + 5, 5), index) &&
         absl::SimpleAtoi(absl::string_view(name + 14, 5), count);
}

absl::StatusOr<std::shared_ptr<TokenStream>> OpenSplit(const DataRoot& root,
                                                       const std::string& dir,
                                                       Executor* pool) {
  std::vector<std::pair<uint64_t, std::string>> found;
  uint64_t count = 0;
  bool mixed = false;
  absl::Status listed = root.ForEachEntry(dir, [&](const dirent& e) {
    uint64_t i = 0, n = 0;
    if (!ShardName(e.d_name, &i, &n)) return true;
    if (count != 0 && n != count) mixed = true;
    count = n;
    found.emplace_back(i, e.d_name);
    return found.size() <= kMaxShards;
  });
  if (!listed.ok()) return listed;
  if (found.size() > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": more than ", kMaxShards, " shards in ", dir,
                     " (each stays open while the stream lives)"));
  }
  std::sort(found.begin(), found.end());
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat(kName, ": no data-XXXXX-of-NNNNN.arrow file in ", dir,
                     " (a Hugging Face save_to_disk folder)"));
  }
  for (uint64_t i = 0; i < found.size(); ++i) {
    if (mixed || found.size() != count || found[i].first != i) {
      return absl::FailedPreconditionError(absl::StrCat(
          kName, ": ", dir, " holds ", found.size(), " shards but names ",
          found.back().second, " (a shard is missing or from another save)"));
    }
  }
  auto s = std::make_shared<TokenStream>();
  std::vector<arrow::ColumnIndex> idx(found.size());
  // The split's shards share one budget of record batches: its index is
  // bounded however the batches fall into shards.
  arrow::BatchBudget budget(arrow::kMaxBatches);
  for (const auto& [i, name] : found) {
    s->paths_.push_back(absl::StrCat(dir, "/", name));
    struct stat st;
    absl::StatusOr<int> fd = root.OpenFile(s->paths_.back(), &st);
    if (!fd.ok()) return fd.status();
    s->fds_.push_back(*fd);
  }
  absl::Status st = ParallelFor(
      pool, Priority::kServing, found.size(), found.size(),
      [&](uint64_t i) -> absl::Status {
        struct stat sb;
        if (fstat(s->fds_[i], &sb) != 0) {
          return absl::InternalError(
              absl::StrCat(kName, ": cannot stat ", s->paths_[i]));
        }
        absl::StatusOr<arrow::ColumnIndex> c =
            arrow::IndexListColumn(s->fds_[i], uint64_t(sb.st_size),
                                   s->paths_[i], "input_ids", &budget);
        if (!c.ok()) {
          return absl::Status(c.status().code(),
                              absl::StrCat(kName, ": ", c.status().message()));
        }
        idx[i] = *std::move(c);
        return absl::OkStatus();
      },
      1);
  if (!st.ok()) return st;
  for (size_t f = 0; f < idx.size(); ++f) {
    if (f > 0 && idx[f].element_bytes != idx[0].element_bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat(kName, ": ", s->paths_[f], " stores input_ids as int",
                       idx[f].element_bytes * 8, ", ", s->paths_[0], " as int",
                       idx[0].element_bytes * 8));
    }
    for (const arrow::ColumnBatch& b : idx[f].batches) {
      if (b.values == 0) continue;
      s->pieces_.push_back(
          {uint32_t(f), b.values_offset, s->tokens_, b.values});
      s->tokens_ += b.values;
    }
  }
  s->element_bytes_ = idx[0].element_bytes;
  return s;
}

class LmWorkload : public Workload {
 public:
  LmWorkload(std::shared_ptr<TokenStream> stream, uint64_t n, bool train)
      : stream_(std::move(stream)), n_(n), train_(train) {
    tensors_ = {{"inputs", DType::kInt32, {int64_t(kSeqLen)}},
                {"targets", DType::kInt32, {int64_t(kSeqLen)}}};
    if (!train)
      tensors_.push_back({"weights", DType::kFloat32, {int64_t(kSeqLen)}});
  }
  const ExampleSource* source() const override { return stream_.get(); }
  uint64_t num_examples() const override { return n_; }
  bool shuffle() const override { return train_; }
  const std::vector<TensorLayout>& tensors() const override { return tensors_; }

  absl::Status FillItem(FillContext& ctx, uint8_t* const* out) const override {
    const ItemRef& item = ctx.item();
    int32_t* inputs = reinterpret_cast<int32_t*>(out[0]);
    int32_t* targets = reinterpret_cast<int32_t*>(out[1]);
    if (!item.valid) {  // eval padding: -1 rows of weight 0
      std::fill(inputs, inputs + kSeqLen, -1);
      std::fill(targets, targets + kSeqLen, -1);
      if (!train_) std::memset(out[2], 0, kSeqLen * 4);
      return absl::OkStatus();
    }
    std::string bytes;
    int64_t label = 0;
    if (absl::Status s = ctx.Read(ctx.key(), &bytes, &label); !s.ok()) {
      return s;
    }
    const uint64_t eb = uint64_t(stream_->element_bytes_);
    if (bytes.size() != kWindow * eb) {
      return absl::DataLossError(
          absl::StrCat(kName, ": ", stream_->Describe(ctx.key()), ": read ",
                       bytes.size(), " bytes, not ", kWindow * eb));
    }
    if (eb == 4) {
      std::memcpy(inputs, bytes.data(), kSeqLen * 4);
      std::memcpy(targets, bytes.data() + 4, kSeqLen * 4);
    } else {
      for (uint64_t i = 0; i < kWindow; ++i) {
        int64_t v;
        std::memcpy(&v, bytes.data() + 8 * i, 8);
        if (v < INT32_MIN || v > INT32_MAX) {
          return absl::DataLossError(
              absl::StrCat(kName, ": ", stream_->Describe(ctx.key()),
                           ": token ", v, " does not fit int32"));
        }
        if (i < kSeqLen) inputs[i] = int32_t(v);
        if (i > 0) targets[i - 1] = int32_t(v);
      }
    }
    if (!train_) {
      float* w = reinterpret_cast<float*>(out[2]);
      std::fill(w, w + kSeqLen, 1.0f);
    }
    return absl::OkStatus();
  }

 private:
  const std::shared_ptr<TokenStream> stream_;
  const uint64_t n_;
  const bool train_;
  std::vector<TensorLayout> tensors_;
};

absl::StatusOr<std::unique_ptr<Workload>> Create(const WorkloadContext& c) {
  const Split split = c.split;
  const std::string dir = absl::StrCat(
      c.data_path(), split == Split::kValidation ? "/val" : "/train");
  absl::StatusOr<std::shared_ptr<TokenStream>> stream =
      OpenSplit(*c.root, dir, c.pool());
  if (!stream.ok()) return stream.status();
  uint64_t n = (*stream)->windows();
  if (split == Split::kEvalTrain) {
    n = std::min(n, c.options.Uint("eval_train_examples"));
  }
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": ", dir, " holds ", (*stream)->tokens_,
                     " tokens, less than one window of ", kWindow));
  }
  return std::unique_ptr<Workload>(
      new LmWorkload(*std::move(stream), n, split == Split::kTrain));
}

constexpr OptionSpec kOptions[] = {EvalTrainExamples(kAlgoPerfEvalTrain)};
constexpr Split kSplits[] = {Split::kTrain, Split::kEvalTrain,
                             Split::kValidation};

}  // namespace

const WorkloadEntry kFineWebEduLmWorkload = {
    "finewebedu_lm",
    "Hugging Face save_to_disk Arrow token rows, AlgoPerf's LM windows",
    kSplits,
    kOptions,
    Create,
};

}  // namespace batchd
