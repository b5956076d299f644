// Persisted WMT length tables; see length_cache.h.
#include "workloads/wmt/length_cache.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/cache_dir.h"

namespace batchd {
namespace wmt {
namespace {

std::atomic<uint64_t> length_pass_tokenizations{0};

}  // namespace

std::string LengthsKey(const LengthsKeyParts& p) {
  return absl::StrCat(
      "wmt-lengths v", kLengthsFormat, " split=", p.split,
      " source=", p.source_kind, " max_length=", p.max_length,
      " skip_empty=", p.skip_empty ? 1 : 0, " invalid_utf8=", p.invalid_utf8,
      absl::StrFormat(" model=%016x:%d", StableHash64(p.model_bytes),
                      p.model_bytes.size()),
      " files=", p.source_identity);
}

std::string EncodeLengths(const std::vector<PackedLengths>& lengths) {
  std::string out(lengths.size() * 4, '\0');
  for (size_t i = 0; i < lengths.size(); ++i) {
    out[4 * i] = char(lengths[i].inputs & 0xff);
    out[4 * i + 1] = char(lengths[i].inputs >> 8);
    out[4 * i + 2] = char(lengths[i].targets & 0xff);
    out[4 * i + 3] = char(lengths[i].targets >> 8);
  }
  return out;
}

bool DecodeLengths(absl::string_view value, uint64_t n, uint64_t max_length,
                   std::vector<PackedLengths>* lengths) {
  if (value.size() != n * 4) return false;
  std::vector<PackedLengths> out(n);
  const auto* p = reinterpret_cast<const uint8_t*>(value.data());
  for (uint64_t i = 0; i < n; ++i, p += 4) {
    out[i].inputs = uint16_t(p[0] | (p[1] << 8));
    out[i].targets = uint16_t(p[2] | (p[3] << 8));
    const bool mark =
        out[i].inputs >= kFirstMark && out[i].targets == out[i].inputs;
    if (!mark && (out[i].inputs > max_length || out[i].targets > max_length)) {
      return false;
    }
  }
  *lengths = std::move(out);
  return true;
}

uint64_t LengthPassTokenizations() {
  return length_pass_tokenizations.load(std::memory_order_relaxed);
}

std::atomic<uint64_t> epochs_counted{0};
std::atomic<uint64_t> stored_token_rows{0};

uint64_t EpochsCounted() {
  return epochs_counted.load(std::memory_order_relaxed);
}

void CountEpochCounted() {
  epochs_counted.fetch_add(1, std::memory_order_relaxed);
}

uint64_t RowsFromStoredTokens() {
  return stored_token_rows.load(std::memory_order_relaxed);
}

void CountRowFromStoredTokens() {
  stored_token_rows.fetch_add(1, std::memory_order_relaxed);
}

void CountLengthPassTokenizations(uint64_t n) {
  length_pass_tokenizations.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace wmt
}  // namespace batchd
