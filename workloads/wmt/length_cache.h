// The WMT train split's per-pair packed lengths, persisted in the cache
// (storage/cache_dir.h, kind "wmt-lengths") so that the one-time
// length pass, which tokenizes every pair, runs once per data set and not
// once per daemon start.
//
// Value: for each pair id in order, uint16 inputs then uint16 targets
// (little endian): a packed length (<= max_length), one of the workload's
// drop marks (>= kFirstMark), or kLengthUnknown for a pair not yet
// tokenized, so that a table can be filled and persisted piece by piece.
//
// Key: everything the lengths depend on: every input file's identity (path,
// size, mtime, inode, device), a hash of the SentencePiece model's bytes,
// max_length, skip_empty, invalid_utf8, the source kind, the split, and
// kLengthsFormat (bump it when tokenization or packed lengths change).
//
// Thread safety: functions only; the counter is atomic.
#ifndef BATCHD_WORKLOADS_WMT_LENGTH_CACHE_H_
#define BATCHD_WORKLOADS_WMT_LENGTH_CACHE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/wmt_constants.h"

namespace batchd {
namespace wmt {

constexpr const char* kLengthsKind = "wmt-lengths";
// The row count of one train epoch (8 bytes, little-endian), keyed by the
// length table's key, the seed, the epoch and N: a resume by step far ahead
// reads each earlier epoch's count instead of packing the epoch again.
constexpr const char* kEpochRowsKind = "wmt-epoch-rows";
// The token ids of every kept train pair (a CacheDir blob), in pair order:
// each side's first PackedLength tokens (the ones a row takes), inputs then
// targets, in the key's number of bytes each (2 when the vocabulary fits,
// else 4; little endian). Keyed by the length table's key and that width:
// where a pair's ids start follows from the lengths.
constexpr const char* kTokensKind = "wmt-tokens";
constexpr uint32_t kLengthsFormat = 1;
// The marks (kFirstMark, kLengthUnknown, the drop marks) are in
// wmt_constants.h.

struct LengthsKeyParts {
  std::string source_identity;  // PairSource::Identity()
  std::string model_bytes;      // the SentencePiece model file (hashed)
  uint64_t max_length = 0;
  bool skip_empty = false;
  std::string invalid_utf8;  // "encode" or "drop"
  std::string source_kind;   // the source option: auto, tfds, text
  std::string split;
};
std::string LengthsKey(const LengthsKeyParts& parts);

std::string EncodeLengths(const std::vector<PackedLengths>& lengths);
// The table of a cache value: false when it does not hold `n` entries or
// holds a value that is neither a length up to max_length nor a mark.
bool DecodeLengths(absl::string_view value, uint64_t n, uint64_t max_length,
                   std::vector<PackedLengths>* lengths);

// Pairs whose lengths were learnt by tokenizing them in this process (by a
// length pass or for an epoch's first windows; a pair both tokenize counts
// once): tests prove with it that a cached table tokenizes nothing.
uint64_t LengthPassTokenizations();
void CountLengthPassTokenizations(uint64_t n);
// Epochs whose rows were counted by packing them in this process (not read
// from the cache); tests prove with it that a resume reads the counts.
uint64_t EpochsCounted();
void CountEpochCounted();
// Train rows filled from stored token ids (kTokensKind) in this process.
uint64_t RowsFromStoredTokens();
void CountRowFromStoredTokens();

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_LENGTH_CACHE_H_
