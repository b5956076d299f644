// Turns one WMT pair into token ids the way AlgoPerf does: SentencePiece
// (add_bos = false, add_eos = true), then drop the pair when either side is
// longer than max_length.
//
// The ids are always those of whole-sentence SentencePiece (EncodeAsIds +
// EOS), for every sentence: a word cache serves a sentence only when it is
// provably equal (see tokenizer.cc for the argument), and otherwise the
// sentence is encoded whole. So the ids never depend on threads, on the
// order sentences are seen in, or on what the cache holds.
//
// Thread safety: Tokenize/Encode may be called from any number of threads at
// once; the cache is sharded under mutexes.
#ifndef BATCHD_WORKLOADS_WMT_TOKENIZER_H_
#define BATCHD_WORKLOADS_WMT_TOKENIZER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/data_file.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/wmt_constants.h"

namespace batchd {

class Executor;    // base/executor.h
class SharedWork;  // workloads/shared_work.h

namespace wmt {

class SentencePieceModel;

// What to do with text that is not well-formed UTF-8.
enum class InvalidUtf8 : uint8_t {
  // Encode it as SentencePiece (and so tensorflow-text, AlgoPerf's
  // tokenizer) does: each byte that does not start a valid sequence becomes
  // U+FFFD, an unknown piece (unk id) unless the model has U+FFFD, and a run
  // of unknown pieces is one unk id.
  kEncode,
  kDrop,  // the pair is PairFate::kDamaged
};

class Tokenizer {
 public:
  // NotFound naming the path when the file is missing; InvalidArgument when
  // it holds more than ModelLimits allow (sentencepiece_vocab.h: checked
  // before SentencePiece sees it), SentencePiece cannot load it or it has
  // no EOS piece.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& model_path);
  // The same, the file opened through `root` (confined to the data root,
  // regular file, non-blocking; its size checked before it is read).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& model_path, const DataRoot& root);
  // How the daemon's streams load their models.
  struct LoadOptions {
    // A model loaded already (the same bytes) is shared, and a new one is
    // charged to the budget of loaded models first (ResourceExhausted
    // beyond it). Null: nothing shared, no budget.
    SharedWork* shared = nullptr;
    // SentencePiece loads on a thread of this executor, whose stack is
    // known (WorkloadConfig::pool()). Null: on the calling thread.
    Executor* executor = nullptr;
  };
  // Load(model_path, root), shared by identity: the model's memory goes
  // (back to the system, malloc_trim) with the last holder.
  static absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadShared(
      const std::string& model_path, const DataRoot& root,
      const LoadOptions& options);
  // A model from the bytes of its file (`what` names it in errors), checked
  // and then loaded on a thread of `executor` (null: the calling thread),
  // and charged to `budget`'s models first (either may be null).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromBytes(
      std::string bytes, const std::string& what, Executor* executor,
      SharedWork* budget);
  ~Tokenizer();

  // The model file's bytes, as loaded.
  const std::string& model_bytes() const { return model_bytes_; }
  // What the loaded model takes in memory, estimated from its pieces and
  // bytes (the figure charged to the budget). The word cache comes on top
  // (at most kShards * kMaxWordsPerShard words).
  uint64_t resident_bytes() const { return resident_bytes_; }

  int vocab_size() const;
  int eos_id() const;

  // Ids of `text` with EOS appended: SentencePiece's EncodeAsIds of the whole
  // text, invalid UTF-8 included (see InvalidUtf8::kEncode). InvalidArgument
  // on a SentencePiece failure.
  absl::Status Encode(std::string_view text, std::vector<int32_t>* ids) const;

  // Encodes both sides and applies the filters. *pair is filled for kKept.
  absl::StatusOr<PairFate> TokenizePair(
      std::string_view de, std::string_view en, size_t max_length,
      bool skip_empty, TokenPair* pair,
      InvalidUtf8 invalid_utf8 = InvalidUtf8::kEncode) const;

  // Empty when the word cache may serve this model; otherwise why every
  // sentence is encoded whole (a property of the model, fixed at Load).
  const std::string& word_cache_off_reason() const { return cache_off_; }

  // Sentences served from the word cache and encoded whole so far. For
  // tests and benchmarks; the ids do not depend on them.
  struct Stats {
    uint64_t from_words = 0;
    uint64_t whole = 0;
  };
  Stats stats() const;

 private:
  struct Vocab;
  // A word (text between ASCII spaces) as SentencePiece encodes it alone.
  struct Word {
    std::vector<int32_t> ids;
    bool usable = false;  // whether the lone encoding may stand in a sentence
    uint32_t chars = 0;   // characters of its normalised form
    double best = 0;      // score of its best segmentation
    double margin = 0;    // best - the runner-up's (infinity when alone)
  };

  Tokenizer(std::unique_ptr<SentencePieceModel> model,
            std::unique_ptr<Vocab> vocab);
  absl::Status EncodeWhole(std::string_view text,
                           std::vector<int32_t>* ids) const;
  absl::Status EncodeValidUtf8(std::string_view text,
                               std::vector<int32_t>* ids) const;
  // Appends the word's ids to *ids and its facts to the sentence's; false
  // when the sentence must be encoded whole instead.
  absl::StatusOr<bool> AddWord(std::string_view word, std::vector<int32_t>* ids,
                               double* score_sum, double* min_ratio) const;
  absl::StatusOr<Word> AnalyzeWord(std::string_view word) const;

  const std::unique_ptr<SentencePieceModel> model_;
  const std::unique_ptr<Vocab> vocab_;  // null when cache_off_ is set
  std::string cache_off_;
  std::string model_bytes_;
  uint64_t resident_bytes_ = 0;
  // The model's share of the daemon's budget, released with it.
  std::shared_ptr<const void> charge_;

  static constexpr int kShards = 64;
  static constexpr size_t kMaxWordsPerShard = 1 << 15;
  struct Shard {
    absl::Mutex mu;
    std::unordered_map<std::string, Word> words ABSL_GUARDED_BY(mu);
  };
  mutable Shard shards_[kShards];
  mutable std::atomic<uint64_t> from_words_{0}, whole_{0};
};

// The offset of the first byte that is not well-formed UTF-8 (overlong
// forms, surrogates and code points past U+10FFFF are not), or npos.
size_t FirstInvalidUtf8(std::string_view s);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_TOKENIZER_H_
