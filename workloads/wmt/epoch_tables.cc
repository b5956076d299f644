// The tables of a WMT train epoch; see epoch_tables.h.
#include "workloads/wmt/epoch_tables.h"

#include "absl/strings/str_cat.h"
#include "base/executor.h"

namespace batchd {
namespace wmt {

absl::StatusOr<std::shared_ptr<EpochTable>> BuildEpochTable(
    const LengthIndex& index, const EpochOrder& order, uint64_t max_length,
    Executor* executor, uint64_t threads, Priority priority) {
  const uint64_t n = order.num_examples, pairs = index.size();
  std::vector<uint32_t> words(n);
  constexpr uint64_t kSpan = 8192;
  const uint64_t spans = (n + kSpan - 1) / kSpan;
  absl::Status gathered = ParallelFor(
      executor, priority, spans, std::min<uint64_t>(threads, spans),
      [&](uint64_t k) {
        const uint64_t p0 = k * kSpan, count = std::min(kSpan, n - p0);
        std::vector<uint64_t> ids(count);
        EpochIds(order, p0, count, ids.data());
        for (uint64_t i = 0; i < count; ++i) {
          if (ids[i] >= pairs) {
            return absl::InternalError(
                absl::StrCat("wmt: the epoch order gives id ", ids[i],
                             " at position ", p0 + i));
          }
          words[p0 + i] = index.WordAt(ids[i]);
        }
        return absl::OkStatus();
      },
      /*max_chunk=*/1);
  if (!gathered.ok()) return gathered;
  EpochTableBuilder b(order, max_length);
  for (uint64_t p = 0; p < n; ++p) {
    b.Add({uint16_t(words[p] & 0xffff), uint16_t(words[p] >> 16)});
  }
  b.Finish();
  return b.Table();
}

std::string EpochRowsKey(const std::string& lengths_key,
                         const EpochOrder& order) {
  std::string key =
      absl::StrCat(lengths_key, "\nseed ", order.seed, " epoch ", order.epoch,
                   " n ", order.num_examples, " ids");
  if (order.id_at) {
    for (uint64_t p = 0; p < std::min<uint64_t>(order.num_examples, 16); ++p) {
      absl::StrAppend(&key, " ", order.id_at(p));
    }
  }
  return key;
}

std::optional<uint64_t> StoredEpochRows(const CacheDir& cache,
                                        const std::string& key) {
  absl::StatusOr<std::string> v = cache.Get(kEpochRowsKind, key);
  if (!v.ok() || v->size() != 8) return std::nullopt;
  uint64_t rows = 0;
  for (int i = 7; i >= 0; --i) rows = rows << 8 | uint8_t((*v)[i]);
  return rows;
}

void StoreEpochRows(const CacheDir& cache, const std::string& key,
                    uint64_t rows) {
  std::string value(8, '\0');
  for (int i = 0; i < 8; ++i) value[i] = char((rows >> (8 * i)) & 0xff);
  (void)cache.Put(kEpochRowsKind, key, value);  // best effort
}

}  // namespace wmt
}  // namespace batchd
