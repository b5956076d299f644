// Arrow IPC stream metadata; see arrow_stream.h. Slot numbers are those of
// Arrow's format/Message.fbs and format/Schema.fbs (a union field takes two
// slots: its type, then its value).
#include "workloads/finewebedu_lm/arrow_stream.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "base/files.h"

namespace batchd {
namespace arrow {
namespace {

// Message slots.
constexpr int kMsgVersion = 0, kMsgHeaderType = 1, kMsgHeader = 2,
              kMsgBodyLength = 3;
// MessageHeader union.
constexpr uint8_t kHeaderSchema = 1, kHeaderDictionary = 2,
                  kHeaderRecordBatch = 3;
// Schema slots.
constexpr int kSchemaEndianness = 0, kSchemaFields = 1;
// Field slots.
constexpr int kFieldName = 0, kFieldTypeType = 2, kFieldType = 3,
              kFieldDictionary = 4, kFieldChildren = 5;
// Type union.
enum TypeId : uint8_t {
  kNull = 1,
  kInt = 2,
  kFloatingPoint = 3,
  kBinary = 4,
  kUtf8 = 5,
  kBool = 6,
  kDecimal = 7,
  kDate = 8,
  kTime = 9,
  kTimestamp = 10,
  kInterval = 11,
  kList = 12,
  kStruct = 13,
  kFixedSizeBinary = 15,
  kFixedSizeList = 16,
  kMap = 17,
  kDuration = 18,
  kLargeBinary = 19,
  kLargeUtf8 = 20,
  kLargeList = 21
};
// RecordBatch slots.
constexpr int kBatchLength = 0, kBatchNodes = 1, kBatchBuffers = 2,
              kBatchCompression = 3;

// A flatbuffer held in memory (exactly its bytes: nothing after them that
// a read past the end could hide in), read with every offset checked. A
// failed read sets bad() and returns 0; callers check bad() once they are
// done.
class Flat {
 public:
  Flat(const uint8_t* p, uint64_t n) : p_(p), n_(n) {}
  bool bad() const { return bad_; }

  template <typename T>
  T Get(uint64_t at) {
    T v{};
    if (at > n_ || n_ - at < sizeof(T)) {
      bad_ = true;
      return v;
    }
    std::memcpy(&v, p_ + at, sizeof(T));
    return v;
  }
  // The root table.
  uint64_t Root() { return Get<uint32_t>(0); }
  // Where slot `slot` of the table at `table` lies, or 0 when absent.
  uint64_t Slot(uint64_t table, int slot) {
    const int64_t vt = int64_t(table) - int64_t(Get<int32_t>(table));
    if (vt < 0) {
      bad_ = true;
      return 0;
    }
    const uint16_t vsize = Get<uint16_t>(uint64_t(vt));
    const uint64_t entry = 4 + 2 * uint64_t(slot);
    if (bad_ || entry + 2 > vsize) return 0;
    const uint16_t off = Get<uint16_t>(uint64_t(vt) + entry);
    return off == 0 ? 0 : table + off;
  }
  template <typename T>
  T Scalar(uint64_t table, int slot, T def) {
    const uint64_t at = Slot(table, slot);
    return at == 0 ? def : Get<T>(at);
  }
  // The table, vector or string an offset slot points at (0 when absent).
  uint64_t Ref(uint64_t table, int slot) {
    const uint64_t at = Slot(table, slot);
    if (at == 0) return 0;
    const uint64_t to = at + Get<uint32_t>(at);
    if (to >= n_) bad_ = true;
    return bad_ ? 0 : to;
  }
  // Vector at `v`: its length, and where element i (of `size` bytes) lies;
  // the elements are checked to lie inside the buffer.
  uint64_t Length(uint64_t v, uint64_t size) {
    const uint64_t len = Get<uint32_t>(v);
    if (bad_ || len > (n_ - v - 4) / (size == 0 ? 1 : size)) {
      bad_ = true;
      return 0;
    }
    return len;
  }
  // Element i of a vector of tables.
  uint64_t TableAt(uint64_t v, uint64_t i) {
    const uint64_t at = v + 4 + 4 * i;
    return at + Get<uint32_t>(at);
  }
  // Whether the string at `s` (0: absent, the empty string) is `want`;
  // compared in place, so that many fields naming one long string cost
  // no more than the name they are compared with.
  bool StringIs(uint64_t s, const std::string& want) {
    const uint64_t len = s == 0 ? 0 : Length(s, 1);
    if (bad_ || len != want.size()) return false;
    return len == 0 || std::memcmp(p_ + s + 4, want.data(), len) == 0;
  }

 private:
  const uint8_t* p_;
  uint64_t n_;
  bool bad_ = false;
};

// Nodes and buffers a field of the Schema takes in a record batch
// (Arrow's columnar layout), recursively; false for types not counted, a
// table already `seen` (the schema is a tree: a field reached twice would
// double the walk at each level of a DAG) or nesting deeper than
// kMaxNestingDepth.
bool CountLayout(Flat& f, uint64_t field, int depth,
                 std::unordered_set<uint64_t>* seen, uint64_t* nodes,
                 uint64_t* buffers, std::string* what) {
  if (depth >= kMaxNestingDepth) {
    *what = absl::StrCat("a column nested more than ", kMaxNestingDepth,
                         " levels deep");
    return false;
  }
  if (!seen->insert(field).second) {
    *what = absl::StrCat("a schema field table at metadata byte ", field,
                         " reached twice (a schema is a tree)");
    return false;
  }
  const uint8_t type = f.Scalar<uint8_t>(field, kFieldTypeType, 0);
  *nodes += 1;
  bool children = false;
  switch (type) {
    case kNull:
      break;
    case kInt:
    case kFloatingPoint:
    case kBool:
    case kDecimal:
    case kDate:
    case kTime:
    case kTimestamp:
    case kInterval:
    case kFixedSizeBinary:
    case kDuration:
      *buffers += 2;
      break;
    case kBinary:
    case kUtf8:
    case kLargeBinary:
    case kLargeUtf8:
      *buffers += 3;
      break;
    case kList:
    case kLargeList:
    case kMap:
      *buffers += 2;
      children = true;
      break;
    case kStruct:
    case kFixedSizeList:
      *buffers += 1;
      children = true;
      break;
    default:
      *what = absl::StrCat("a column of Arrow type id ", int(type));
      return false;
  }
  if (!children) return true;
  const uint64_t v = f.Ref(field, kFieldChildren);
  if (v == 0) return !f.bad();
  const uint64_t n = f.Length(v, 4);
  for (uint64_t i = 0; i < n && !f.bad(); ++i) {
    if (!CountLayout(f, f.TableAt(v, i), depth + 1, seen, nodes, buffers,
                     what)) {
      return false;
    }
  }
  return !f.bad();
}

struct ColumnPlace {
  uint64_t node = 0;    // index of the list's node; its values' is node + 1
  uint64_t buffer = 0;  // list: validity, offsets; values: validity, data
  int offset_bytes = 4;
  int element_bytes = 4;
};

// pread of exactly n bytes at `offset` into p.
absl::Status ReadInto(int fd, const std::string& path, uint64_t offset,
                      uint8_t* p, uint64_t n) {
  const ssize_t done = PreadFull(fd, p, n, offset);
  if (done < 0) {
    return absl::InternalError(absl::StrCat(path, ": reading at byte ", offset,
                                            ": ", strerror(errno)));
  }
  if (uint64_t(done) != n) {
    return absl::DataLossError(absl::StrCat(
        path, ": ends at byte ", offset + uint64_t(done), ", reading ", n,
        " bytes at byte ", offset, " (truncated?)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadExact(int fd, const std::string& path, uint64_t offset,
                       std::string* out) {
  return ReadInto(fd, path, offset, reinterpret_cast<uint8_t*>(out->data()),
                  out->size());
}

absl::StatusOr<ColumnIndex> IndexListColumn(int fd, uint64_t size,
                                            const std::string& path,
                                            const std::string& column,
                                            BatchBudget* budget) {
  BatchBudget own(kMaxBatches);
  if (budget == nullptr) budget = &own;
  ColumnIndex index;
  ColumnPlace place;
  bool have_schema = false;
  uint64_t pos = 0;
  auto error = [&](uint64_t at, const std::string& what) {
    return absl::DataLossError(
        absl::StrCat(path, ": Arrow IPC message at byte ", at, ": ", what));
  };
  while (true) {
    if (pos == size) {
      return error(pos,
                   "the file ends without the end-of-stream marker "
                   "(truncated?)");
    }
    if (size - pos < 8) return error(pos, "truncated message prefix");
    std::string prefix(8, '\0');
    if (absl::Status s = ReadExact(fd, path, pos, &prefix); !s.ok()) return s;
    uint32_t first = 0;
    int32_t len = 0;
    std::memcpy(&first, prefix.data(), 4);
    uint64_t header = 8;
    if (first == 0xFFFFFFFFu) {
      std::memcpy(&len, prefix.data() + 4, 4);
    } else {  // before Arrow 0.15: no continuation marker
      len = int32_t(first);
      header = 4;
    }
    if (len == 0) break;  // end of stream
    if (len < 0 || uint64_t(len) > size - pos - header) {
      return error(pos, absl::StrCat("metadata of ", len,
                                     " bytes runs past "
                                     "the end of the file (",
                                     size, " bytes; truncated?)"));
    }
    if (uint64_t(len) > kMaxMetadataBytes) {
      return error(
          pos,
          absl::StrCat("metadata of ", len, " bytes, over the limit of ",
                       kMaxMetadataBytes, " (a real stream's is a few KB)"));
    }
    // Exactly the metadata's bytes, fresh for each message.
    const std::unique_ptr<uint8_t[]> meta(new uint8_t[uint64_t(len)]);
    if (absl::Status s =
            ReadInto(fd, path, pos + header, meta.get(), uint64_t(len));
        !s.ok()) {
      return s;
    }
    Flat f(meta.get(), uint64_t(len));
    const uint64_t msg = f.Root();
    const int16_t version = f.Scalar<int16_t>(msg, kMsgVersion, 0);
    const uint8_t kind = f.Scalar<uint8_t>(msg, kMsgHeaderType, 0);
    const uint64_t table = f.Ref(msg, kMsgHeader);
    const int64_t body_len = f.Scalar<int64_t>(msg, kMsgBodyLength, 0);
    if (f.bad() || table == 0) return error(pos, "corrupt message metadata");
    if (version < 3 || version > 4) {  // V4 = 3, V5 = 4
      return error(pos, absl::StrCat("metadata version ", version + 1,
                                     " (read: V4, V5)"));
    }
    const uint64_t body = pos + header + uint64_t(len);
    if (body_len < 0 || uint64_t(body_len) > size - body) {
      return error(pos, absl::StrCat("a body of ", body_len,
                                     " bytes runs past the end of the file (",
                                     size, " bytes; truncated?)"));
    }
    if (kind == kHeaderSchema) {
      if (have_schema) return error(pos, "a second schema");
      if (f.Scalar<int16_t>(table, kSchemaEndianness, 0) != 0) {
        return error(pos, "a big-endian stream");
      }
      const uint64_t fields = f.Ref(table, kSchemaFields);
      const uint64_t n = fields == 0 ? 0 : f.Length(fields, 4);
      bool found = false;
      std::unordered_set<uint64_t> seen;
      for (uint64_t i = 0; i < n && !f.bad() && !found; ++i) {
        const uint64_t field = f.TableAt(fields, i);
        if (!f.StringIs(f.Ref(field, kFieldName), column)) {
          std::string what;
          if (!CountLayout(f, field, 0, &seen, &place.node, &place.buffer,
                           &what)) {
            if (f.bad()) break;
            return error(pos, absl::StrCat(what, " before column ", column,
                                           " (cannot place the column)"));
          }
          continue;
        }
        found = true;
        const uint8_t type = f.Scalar<uint8_t>(field, kFieldTypeType, 0);
        const uint64_t kids = f.Ref(field, kFieldChildren);
        const uint64_t nkids = kids == 0 ? 0 : f.Length(kids, 4);
        const uint64_t child = nkids == 1 ? f.TableAt(kids, 0) : 0;
        const uint8_t ctype =
            child == 0 ? 0 : f.Scalar<uint8_t>(child, kFieldTypeType, 0);
        const uint64_t cint =
            ctype == kInt ? f.Ref(child, kFieldType) : 0;  // an Int table
        const int32_t bits = cint == 0 ? 0 : f.Scalar<int32_t>(cint, 0, 0);
        const bool is_signed = cint != 0 && f.Scalar<uint8_t>(cint, 1, 0) != 0;
        if (f.bad()) break;
        if ((type != kList && type != kLargeList) || ctype != kInt ||
            (bits != 32 && bits != 64) || !is_signed) {
          return error(pos, absl::StrCat("column ", column,
                                         " is not a list "
                                         "of int32 or int64 (type id ",
                                         int(type), ", values type id ",
                                         int(ctype), ", bits ", bits, ")"));
        }
        if (f.Slot(field, kFieldDictionary) != 0 ||
            f.Slot(child, kFieldDictionary) != 0) {
          return error(
              pos, absl::StrCat("column ", column, " is dictionary-encoded"));
        }
        place.offset_bytes = type == kLargeList ? 8 : 4;
        place.element_bytes = bits / 8;
      }
      if (f.bad()) return error(pos, "corrupt schema");
      if (!found) return error(pos, absl::StrCat("no column ", column));
      have_schema = true;
      index.element_bytes = place.element_bytes;
    } else if (kind == kHeaderRecordBatch) {
      if (!have_schema) return error(pos, "a record batch before the schema");
      if (!budget->Take()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            path, ": Arrow IPC message at byte ", pos,
            ": a record batch over the limit of ", budget->limit(),
            " per split (batches of a few rows each; save the set with"
            " larger batches)"));
      }
      const int64_t rows = f.Scalar<int64_t>(table, kBatchLength, 0);
      const uint64_t nodes = f.Ref(table, kBatchNodes);
      const uint64_t buffers = f.Ref(table, kBatchBuffers);
      if (f.Slot(table, kBatchCompression) != 0) {
        return error(pos, "a compressed body (not read)");
      }
      const uint64_t nn = nodes == 0 ? 0 : f.Length(nodes, 16);
      const uint64_t nb = buffers == 0 ? 0 : f.Length(buffers, 16);
      if (f.bad()) return error(pos, "corrupt record batch metadata");
      if (nn < place.node + 2 || nb < place.buffer + 4 || rows < 0) {
        return error(pos, absl::StrCat("a record batch of ", nn, " nodes, ", nb,
                                       " buffers and ", rows,
                                       " rows does not hold column ", column));
      }
      auto node = [&](uint64_t i, int k) {
        return f.Get<int64_t>(nodes + 4 + 16 * i + 8 * k);
      };
      auto buffer = [&](uint64_t i, int k) {
        return f.Get<int64_t>(buffers + 4 + 16 * i + 8 * k);
      };
      const int64_t list_len = node(place.node, 0);
      const int64_t list_nulls = node(place.node, 1);
      const int64_t values_len = node(place.node + 1, 0);
      const int64_t values_nulls = node(place.node + 1, 1);
      if (list_len != rows || list_nulls != 0 || values_nulls != 0 ||
          values_len < 0) {
        return error(pos, absl::StrCat("column ", column, ": ", list_len,
                                       " lists (", list_nulls,
                                       " null) in a "
                                       "batch of ",
                                       rows, " rows, ", values_len, " values (",
                                       values_nulls, " null); read: no nulls"));
      }
      int64_t off[2], blen[2];
      for (int k = 0; k < 2; ++k) {
        const uint64_t b = place.buffer + 1 + 2 * uint64_t(k);
        off[k] = buffer(b, 0);
        blen[k] = buffer(b, 1);
        if (off[k] < 0 || blen[k] < 0 || off[k] > body_len ||
            blen[k] > body_len - off[k]) {
          return error(pos, absl::StrCat("buffer ", b, " [", off[k], ", +",
                                         blen[k], ") lies outside the body of ",
                                         body_len, " bytes"));
        }
      }
      if (f.bad()) return error(pos, "corrupt record batch metadata");
      const uint64_t ob = uint64_t(place.offset_bytes);
      const uint64_t eb = uint64_t(place.element_bytes);
      if (uint64_t(values_len) > uint64_t(blen[1]) / eb ||
          (rows > 0 && uint64_t(rows) + 1 > uint64_t(blen[0]) / ob)) {
        return error(pos,
                     absl::StrCat("column ", column, ": buffers of ", blen[0],
                                  " and ", blen[1], " bytes are too short for ",
                                  rows, " lists of ", values_len, " values"));
      }
      ColumnBatch cb;
      cb.rows = uint64_t(rows);
      if (rows > 0) {
        // The first and last offsets bound the batch's values.
        std::string o(ob, '\0');
        int64_t first_last[2] = {0, 0};
        for (int k = 0; k < 2; ++k) {
          const uint64_t at =
              body + uint64_t(off[0]) + (k == 0 ? 0 : uint64_t(rows) * ob);
          if (absl::Status s = ReadExact(fd, path, at, &o); !s.ok()) return s;
          if (ob == 4) {
            int32_t v;
            std::memcpy(&v, o.data(), 4);
            first_last[k] = v;
          } else {
            std::memcpy(&first_last[k], o.data(), 8);
          }
        }
        if (first_last[0] < 0 || first_last[1] < first_last[0] ||
            first_last[1] > values_len) {
          return error(
              pos, absl::StrCat("column ", column, ": offsets [", first_last[0],
                                ", ", first_last[1], "] outside its ",
                                values_len, " values"));
        }
        cb.values_offset =
            body + uint64_t(off[1]) + uint64_t(first_last[0]) * eb;
        cb.values = uint64_t(first_last[1] - first_last[0]);
      }
      index.batches.push_back(cb);
    } else if (kind == kHeaderDictionary) {
      return error(pos,
                   "a dictionary batch (not read: no column of the "
                   "stream is read through a dictionary)");
    } else {
      return error(pos, absl::StrCat("a message of kind ", int(kind),
                                     " (read: schema, record batch)"));
    }
    pos = body + uint64_t(body_len);
  }
  if (!have_schema) return error(pos, "end of stream before the schema");
  return index;
}

}  // namespace arrow
}  // namespace batchd
