// Criteo blocks; see criteo_blocks.h.
#include "workloads/criteo1tb/criteo_blocks.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/log.h"

namespace batchd {
namespace criteo {

absl::StatusOr<std::shared_ptr<BlockTable>> BlockTable::Create(
    std::shared_ptr<const DataRoot> root, std::vector<std::string> files,
    uint64_t block_bytes, uint64_t max_line) {
  std::shared_ptr<BlockTable> t(new BlockTable());
  t->root_ = std::move(root);
  t->block_bytes_ = block_bytes;
  t->max_line_ = max_line;
  t->first_block_.push_back(0);
  t->identity_ = absl::StrCat("block_bytes=", block_bytes, "\n");
  for (std::string& path : files) {
    struct stat st;
    absl::StatusOr<int> fd = t->root_->OpenFile(path, &st);
    if (!fd.ok()) return fd.status();
    close(*fd);
    const uint64_t size = uint64_t(st.st_size);
    absl::StrAppend(&t->identity_, FileIdentity(path, st), "\n");
    t->total_bytes_ += size;
    t->first_block_.push_back(t->first_block_.back() +
                              (size + block_bytes - 1) / block_bytes);
    if (t->first_block_.back() > kMaxBlocks) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "criteo1tb: the split's files up to ", path, " hold ",
          t->total_bytes_, " bytes, over ", kMaxBlocks, " blocks of ",
          block_bytes, " bytes (Criteo 1TB has ~16 M of the smallest)"));
    }
    t->files_.push_back({std::move(path), size});
  }
  const uint64_t n = t->first_block_.back();
  t->counts_.reset(new std::atomic<uint32_t>[n]);
  for (uint64_t i = 0; i < n; ++i) t->counts_[i].store(UINT32_MAX);
  return t;
}

size_t BlockTable::FileOf(uint64_t block) const {
  return size_t(
             std::upper_bound(first_block_.begin(), first_block_.end(), block) -
             first_block_.begin()) -
         1;
}

std::string BlockTable::Describe(uint64_t block) const {
  const size_t f = FileOf(block);
  const uint64_t begin = (block - first_block_[f]) * block_bytes_;
  return absl::StrCat(files_[f].path, " bytes [", begin, ", ",
                      std::min(begin + block_bytes_, files_[f].size), ")");
}

absl::Status BlockTable::ReadRange(size_t file, uint64_t begin, uint64_t end,
                                   std::string* out) const {
  out->resize(end - begin);
  absl::StatusOr<int> fd = root_->OpenFile(files_[file].path);
  if (!fd.ok()) return fd.status();
  const ssize_t done = PreadFull(*fd, out->data(), end - begin, begin);
  const int err = errno;
  close(*fd);
  if (done < 0) {
    return absl::InternalError(absl::StrCat("criteo1tb: reading ",
                                            files_[file].path, " at byte ",
                                            begin, ": ", strerror(err)));
  }
  if (uint64_t(done) != end - begin) {  // shrank since it was listed
    return absl::DataLossError(
        absl::StrCat("criteo1tb: ", files_[file].path, " ends at byte ",
                     begin + uint64_t(done), ", before ", end, " (it was ",
                     files_[file].size, " bytes when listed)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> BlockTable::Lines(uint64_t block) const {
  const uint32_t known = KnownLines(block);
  if (known != UINT32_MAX) return known;
  const size_t f = FileOf(block);
  const uint64_t size = files_[f].size;
  const uint64_t begin = (block - first_block_[f]) * block_bytes_;
  const uint64_t end = std::min(begin + block_bytes_, size);
  // Line starts in [begin, end): byte 0 of a non-empty file, and the byte
  // after each '\n' at [begin - 1, end - 1).
  uint32_t lines = (begin == 0 && size > 0) ? 1 : 0;
  const uint64_t from = begin == 0 ? 0 : begin - 1;
  if (end > from + 1) {
    std::string buf;
    if (absl::Status s = ReadRange(f, from, end - 1, &buf); !s.ok()) return s;
    const char* p = buf.data();
    const char* const e = p + buf.size();
    while ((p = static_cast<const char*>(memchr(p, '\n', size_t(e - p)))) !=
           nullptr) {
      ++lines;
      ++p;
    }
  }
  counts_[block].store(lines, std::memory_order_relaxed);
  counted_.fetch_add(1, std::memory_order_relaxed);
  return lines;
}

constexpr char kCountsKind[] = "criteo-block-lines";

void BlockTable::LoadCounts(const CacheDir& cache) const {
  absl::StatusOr<std::string> v = cache.Get(kCountsKind, identity_);
  const uint64_t n = num_blocks();
  if (!v.ok() || v->size() != n * 4) return;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t c;
    std::memcpy(&c, v->data() + i * 4, 4);
    if (c != UINT32_MAX) counts_[i].store(c, std::memory_order_relaxed);
  }
  counted_.store(0);
}

void BlockTable::StoreCounts(const CacheDir& cache) const {
  const uint64_t n = num_blocks();
  std::string v(n * 4, '\0');
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t c = counts_[i].load(std::memory_order_relaxed);
    std::memcpy(v.data() + i * 4, &c, 4);
  }
  counted_.store(0);
  if (absl::Status s = cache.Put(kCountsKind, identity_, v); !s.ok()) {
    Log(LogLevel::kWarn, "criteo1tb: line counts not kept",
        {{"error", std::string(s.message())}});
  }
}

absl::Status BlockTable::ReadBlock(uint64_t block, std::string* bytes) const {
  if (block >= num_blocks()) {
    return absl::OutOfRangeError(
        absl::StrCat("criteo1tb: block ", block, " of ", num_blocks()));
  }
  const size_t f = FileOf(block);
  const uint64_t size = files_[f].size;
  const uint64_t begin = (block - first_block_[f]) * block_bytes_;
  const uint64_t end = std::min(begin + block_bytes_, size);
  const uint64_t from = begin == 0 ? 0 : begin - 1;
  // The last line starting in the block may run max_line bytes past it.
  const uint64_t to = std::min(size, end + max_line_ + 1);
  if (absl::Status s = ReadRange(f, from, to, bytes); !s.ok()) return s;
  // Kept up to the end of the block's last line: the first '\n' at or after
  // byte end - 1 (a '\n' before it starts a line inside the block).
  const size_t last = size_t(end - 1 - from);
  const void* nl = memchr(bytes->data() + last, '\n', bytes->size() - last);
  if (nl != nullptr) {
    bytes->resize(size_t(static_cast<const char*>(nl) - bytes->data()) + 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ParsedBlock>> BlockTable::Parse(
    uint64_t block, const std::string& buf, bool exact_ids,
    bool keep_counts) const {
  const size_t f = FileOf(block);
  const uint64_t size = files_[f].size;
  const uint64_t begin = (block - first_block_[f]) * block_bytes_;
  const uint64_t end = std::min(begin + block_bytes_, size);
  const uint64_t from = begin == 0 ? 0 : begin - 1;
  if (from + buf.size() < end || from + buf.size() > size) {
    return absl::DataLossError(absl::StrCat(
        "criteo1tb: ", Describe(block), " read as ", buf.size(),
        " bytes from byte ", from, " (the file changed since it was listed)"));
  }
  auto out = std::make_shared<ParsedBlock>();
  const char* const base = buf.data();
  const char* const stop = base + buf.size();
  const bool at_eof = from + buf.size() == size;
  // The first line start at or after `begin`.
  const char* s = base;
  if (begin != 0) {
    const char* nl =
        static_cast<const char*>(memchr(base, '\n', size_t(stop - base)));
    s = nl == nullptr ? stop : nl + 1;
  }
  const char* const block_end = base + (end - from);
  // Room for the lines counted (else an estimate), so that the values do
  // not move as lines are added.
  const uint32_t known = KnownLines(block);
  const size_t expect = known != UINT32_MAX ? known : block_bytes_ / 128;
  out->values.reserve(expect * kFields);
  out->bad.reserve(expect);
  if (exact_ids) out->ids.reserve(expect * kCategorical);
  if (keep_counts) out->counts.reserve(expect * kDense);
  ParsedLine line;
  while (s < block_end) {
    const char* nl =
        static_cast<const char*>(memchr(s, '\n', size_t(stop - s)));
    const char* line_end = nl != nullptr ? nl : stop;
    const uint64_t offset = from + uint64_t(s - base);
    LineError err = LineError::kNone;
    if (nl == nullptr && !at_eof) {
      err = LineError::kFieldTooLong;  // longer than the cap
    } else if (uint64_t(line_end - s) > max_line_) {
      err = LineError::kFieldTooLong;
    } else {
      err = ParseLine(s, size_t(line_end - s), &line);
    }
    const size_t i = out->lines++;
    float v[kFields] = {};
    out->bad.push_back(err == LineError::kNone ? 0 : 1);
    if (exact_ids) out->ids.resize(out->ids.size() + kCategorical);
    if (keep_counts) out->counts.resize(out->counts.size() + kDense);
    if (err == LineError::kNone) {
      if (keep_counts) {
        std::memcpy(&out->counts[i * kDense], line.counts, sizeof(line.counts));
      }
      v[0] = line.label;
      std::memcpy(v + 1, line.dense, sizeof(line.dense));
      // Ids are below 2^26: converted from int64_t, one instruction each.
      for (int c = 0; c < kCategorical; ++c) {
        v[1 + kDense + c] = static_cast<float>(int64_t(line.ids[c]));
      }
      if (exact_ids) {
        std::copy(line.ids, line.ids + kCategorical,
                  out->ids.begin() + i * kCategorical);
      }
    } else {
      const bool too_long = uint64_t(line_end - s) > max_line_ || nl == nullptr;
      LogKeyed(
          LogLevel::kWarn, "criteo1tb-bad-line",
          "criteo1tb: line is not an example; served as zeros with "
          "weight 0",
          {{"file", files_[f].path},
           {"offset", absl::StrCat(offset)},
           {"reason",
            too_long ? absl::StrCat("longer than max_line_bytes=", max_line_)
                     : std::string(LineErrorName(err))}});
    }
    out->values.insert(out->values.end(), v, v + kFields);
    if (nl == nullptr) break;
    s = nl + 1;
    if (uint64_t(s - base) + from >= size) break;  // the file's last '\n'
  }
  return std::shared_ptr<const ParsedBlock>(std::move(out));
}

absl::StatusOr<std::shared_ptr<const ParsedBlock>> BlockCache::Get(
    uint64_t block, absl::FunctionRef<absl::Status(std::string*)> read) const {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(block);
    if (it != entries_.end()) {
      entry = it->second;
      if (entry->lru != lru_.begin()) {
        lru_.splice(lru_.begin(), lru_, entry->lru);
      }
    }
  }
  bool mine = false;
  std::string bytes;
  if (entry == nullptr) {
    // Read without an entry: a read may be pending (its item runs again
    // later), and nobody waits for another item's I/O.
    if (absl::Status s = read(&bytes); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(block);
    if (it != entries_.end()) {  // parsed meanwhile by another thread
      entry = it->second;
    } else {
      entry = std::make_shared<Entry>();
      lru_.push_front(block);
      entry->lru = lru_.begin();
      entries_.emplace(block, entry);
      mine = true;
      while (entries_.size() > capacity_) {
        entries_.erase(lru_.back());
        lru_.pop_back();
      }
    }
  }
  if (mine) {
    entry->result = table_->Parse(block, bytes, exact_ids_, keep_counts_);
    if (!entry->result.ok()) {  // not kept: the next reader tries again
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(block);
      if (it != entries_.end() && it->second == entry) {
        lru_.erase(entry->lru);
        entries_.erase(it);
      }
    }
    entry->ready.Notify();
  } else {
    entry->ready.WaitForNotification();  // a parse in progress, never I/O
  }
  return entry->result;
}

}  // namespace criteo
}  // namespace batchd
