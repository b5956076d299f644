// The token ids of every kept WMT train pair, as the length pass stores
// them in the cache (kind "wmt-tokens", one blob: each kept pair's first
// max-length-cut ids of each side, as packing takes them, in file order,
// `width` little-endian bytes an id), and the reading of one pair's ids
// back, from which rows are then made without reading the text or
// tokenizing. Every id is checked against the vocabulary as the blob is
// opened (with its checksum) and as it is read; a forged id drops the
// store (a cache_corrupt warning), and rows are tokenized again.
//
// Thread safety: Open is called by one thread at a time (the length
// pass); ready, Pair and Append from any thread. What Open writes is
// published by a release store of ready.
#ifndef BATCHD_WORKLOADS_WMT_TOKEN_STORE_H_
#define BATCHD_WORKLOADS_WMT_TOKEN_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "storage/cache_dir.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/tokenizer.h"

namespace batchd {
namespace wmt {

class TokenStore {
 public:
  // Pair `id`'s packed lengths (the index's), which say where its ids are.
  using LengthsOf = absl::FunctionRef<PackedLengths(uint64_t id)>;

  // The store of `n` pairs under `lengths_key` in `cache` (may be null:
  // never ready), for a vocabulary of `vocab_size` ids.
  TokenStore(std::shared_ptr<const CacheDir> cache,
             const std::string& lengths_key, int32_t vocab_size, uint64_t n);

  // The blob's cache key (the lengths' key and the id width).
  const std::string& key() const { return key_; }
  // Appends the first `count` ids of `tokens` as the blob stores them.
  void Append(const std::vector<int32_t>& tokens, uint16_t count,
              std::string* out) const;

  // Opens the stored blob if the cache holds it whole for these lengths
  // (every id within the vocabulary) and indexes where each pair's ids
  // start; true once ready (also when it was already).
  bool Open(LengthsOf lengths);
  // Rows are made from the stored ids (acquire): opened, not dropped.
  bool ready() const {
    return ready_.load(std::memory_order_acquire) &&
           !dropped_.load(std::memory_order_relaxed);
  }
  // Pair `id`'s ids as packing takes them (`l` its lengths). DataLoss for
  // an id outside the vocabulary (the store is then dropped).
  absl::Status Pair(uint64_t id, const PackedLengths& l, LengthsOf lengths,
                    TokenPair* pair) const;

 private:
  void Drop(const std::string& why) const;

  // Constant after construction.
  const std::shared_ptr<const CacheDir> cache_;
  const uint32_t width_;  // bytes of one id: 2, or 4 past 65536 pieces
  const int32_t vocab_;
  const std::string key_;
  const uint64_t n_;

  // Written once by Open, before ready_ (release).
  std::atomic<bool> ready_{false};
  std::shared_ptr<const CacheDir::Blob> blob_;
  std::vector<uint64_t> starts_;  // where pair k * kStride's ids start
  mutable std::atomic<bool> dropped_{false};  // a forged id was met
};

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_TOKEN_STORE_H_
