// The stored token ids of the WMT train pairs; see token_store.h.
#include "workloads/wmt/token_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/log.h"
#include "workloads/wmt/length_cache.h"
#include "workloads/wmt/wmt_constants.h"

namespace batchd {
namespace wmt {
namespace {

// Pairs per entry of the index of where stored token ids start.
constexpr uint64_t kStride = 8;

// The largest of n little-endian ids of `width` bytes at p. Vectorised
// where the compiler can (GCC does not at -O2 by itself): the check reads
// the 0.7 GB of WMT17's ids at every start, 4x faster so.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
uint32_t LargestId(const uint8_t* p, size_t n, uint32_t width) {
  uint32_t most = 0;
  if (width == 2) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t t;
      memcpy(&t, p + 2 * i, 2);  // x86 and the blob are little endian
      most = std::max<uint32_t>(most, t);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t t;
      memcpy(&t, p + 4 * i, 4);
      most = std::max(most, t);
    }
  }
  return most;
}

// "" when every token id of `value` (the piece at byte `at` of the blob)
// is below `vocab`; else which is not.
std::string CheckTokenIds(absl::string_view value, uint64_t at,
                          uint32_t width, uint32_t vocab) {
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  const size_t n = value.size() / width;
  if (LargestId(p, n, width) < vocab) return "";
  for (size_t i = 0; i < n; ++i) {
    uint32_t t = 0;
    for (uint32_t b = 0; b < width; ++b) {
      t |= uint32_t(p[i * width + b]) << (8 * b);
    }
    if (t >= vocab) {
      return absl::StrCat("token id ", t, " at byte ", at + i * width,
                          " is outside the vocabulary of ", vocab);
    }
  }
  return "";
}

uint32_t WidthFor(int32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

}  // namespace

TokenStore::TokenStore(std::shared_ptr<const CacheDir> cache,
                       const std::string& lengths_key, int32_t vocab_size,
                       uint64_t n)
    : cache_(std::move(cache)),
      width_(WidthFor(vocab_size)),
      vocab_(vocab_size),
      key_(absl::StrCat(lengths_key, "\ntoken bytes ", width_)),
      n_(n) {}

void TokenStore::Append(const std::vector<int32_t>& tokens, uint16_t count,
                        std::string* out) const {
  for (uint16_t i = 0; i < count; ++i) {
    const uint32_t t = uint32_t(tokens[i]);
    for (uint32_t b = 0; b < width_; ++b) {
      out->push_back(char((t >> (8 * b)) & 0xff));
    }
  }
}

bool TokenStore::Open(LengthsOf lengths) {
  if (cache_ == nullptr) return false;
  if (ready_.load(std::memory_order_acquire)) return true;
  const uint64_t start = MonotonicNanos();
  const uint32_t vocab = uint32_t(std::max(0, vocab_));
  const uint32_t width = width_;
  absl::StatusOr<std::shared_ptr<const CacheDir::Blob>> blob =
      cache_->OpenBlob(kTokensKind, key_,
                       [vocab, width](absl::string_view value, uint64_t at) {
                         return CheckTokenIds(value, at, width, vocab);
                       });
  if (!blob.ok()) return false;
  std::vector<uint64_t> starts;
  starts.reserve(n_ / kStride + 2);
  uint64_t at = 0;
  for (uint64_t id = 0; id < n_; ++id) {
    if (id % kStride == 0) starts.push_back(at);
    const PackedLengths l = lengths(id);
    if (!Dropped(l)) at += uint64_t(l.inputs) + l.targets;
  }
  if (at * width_ != (*blob)->size()) {
    Log(LogLevel::kWarn, "cache_corrupt",
        {{"kind", kTokensKind},
         {"reason", absl::StrCat((*blob)->size(), " bytes, the lengths say ",
                                 at * width_)},
         {"action", "tokenize rows"}});
    return false;
  }
  starts_ = std::move(starts);
  blob_ = *blob;
  ready_.store(true, std::memory_order_release);
  Log(LogLevel::kInfo, "wmt_tokens",
      {{"pairs", absl::StrCat(n_)},
       {"bytes", absl::StrCat((*blob)->size())},
       {"seconds",
        absl::StrFormat("%.3f", double(MonotonicNanos() - start) * 1e-9)}});
  return true;
}

void TokenStore::Drop(const std::string& why) const {
  if (dropped_.exchange(true)) return;
  Log(LogLevel::kWarn, "cache_corrupt",
      {{"kind", kTokensKind}, {"reason", why}, {"action", "tokenize rows"}});
}

absl::Status TokenStore::Pair(uint64_t id, const PackedLengths& l,
                              LengthsOf lengths, TokenPair* pair) const {
  if (dropped_.load(std::memory_order_relaxed)) {
    return absl::DataLossError("wmt: the stored token ids are dropped");
  }
  uint64_t at = starts_[id / kStride];
  for (uint64_t j = id - id % kStride; j < id; ++j) {
    const PackedLengths before = lengths(j);
    if (!Dropped(before)) at += uint64_t(before.inputs) + before.targets;
  }
  const size_t count = size_t(l.inputs) + l.targets;
  uint8_t buf[2 * kMaxLength * 4];
  absl::Status s = blob_->Read(at * width_, count * width_, buf);
  if (!s.ok()) return s;
  auto token = [&](size_t i) {
    const uint8_t* b = buf + i * width_;
    return width_ == 2 ? int32_t(uint32_t(b[0]) | uint32_t(b[1]) << 8)
                       : int32_t(uint32_t(b[0]) | uint32_t(b[1]) << 8 |
                                 uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24);
  };
  pair->inputs.resize(l.inputs);
  pair->targets.resize(l.targets);
  for (size_t i = 0; i < count; ++i) {
    const int32_t t = token(i);
    if (t < 0 || t >= vocab_) {
      const std::string why = absl::StrCat(
          "token id ", t, " of pair ", id, " is outside the vocabulary of ",
          vocab_);
      Drop(why);
      return absl::DataLossError(absl::StrCat("wmt: ", why));
    }
    (i < l.inputs ? pair->inputs[i] : pair->targets[i - l.inputs]) = t;
  }
  return absl::OkStatus();
}

}  // namespace wmt
}  // namespace batchd
