// batchctl's output formats; see output.h.
#include "tools/batchctl/output.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace batchd::batchctl {
namespace {

namespace pb = google::protobuf;

// One value of field `f` (element `index` when repeated) of `m`.
Json ProtoValue(const pb::Message& m, const pb::FieldDescriptor* f, int index) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return int64_t(rep ? r->GetRepeatedInt32(m, f, index)
                         : r->GetInt32(m, f));
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return int64_t(rep ? r->GetRepeatedInt64(m, f, index)
                         : r->GetInt64(m, f));
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return uint64_t(rep ? r->GetRepeatedUInt32(m, f, index)
                          : r->GetUInt32(m, f));
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return uint64_t(rep ? r->GetRepeatedUInt64(m, f, index)
                          : r->GetUInt64(m, f));
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f);
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      return double(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      return rep ? r->GetRepeatedEnum(m, f, index)->name()
                 : r->GetEnum(m, f)->name();
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(rep ? r->GetRepeatedMessage(m, f, index)
                             : r->GetMessage(m, f));
  }
  return nullptr;
}

// A map field as an object with sorted keys (a non-string key as its JSON
// text, e.g. "7").
Json ProtoMap(const pb::Message& m, const pb::FieldDescriptor* f) {
  const pb::Reflection* r = m.GetReflection();
  const pb::FieldDescriptor* key = f->message_type()->map_key();
  const pb::FieldDescriptor* value = f->message_type()->map_value();
  std::vector<std::pair<std::string, const pb::Message*>> entries;
  for (int j = 0; j < r->FieldSize(m, f); ++j) {
    const pb::Message& e = r->GetRepeatedMessage(m, f, j);
    std::string k = key->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING
                        ? e.GetReflection()->GetString(e, key)
                        : DumpJson(ProtoValue(e, key, 0));
    entries.emplace_back(std::move(k), &e);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Json out = Json::object();
  for (const auto& [k, e] : entries) out[k] = ProtoValue(*e, value, 0);
  return out;
}

}  // namespace

std::string FormatSeconds(double s) {
  if (s < 60) return absl::StrFormat("%.1f s", s);
  const int64_t t = int64_t(s);
  if (t < 3600) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  if (t < 86400) {
    return absl::StrFormat("%dh%02dm", t / 3600, (t % 3600) / 60);
  }
  return absl::StrFormat("%dd%02dh", t / 86400, (t % 86400) / 3600);
}

std::string OptionsSuffix(const std::map<std::string, std::string>& options) {
  std::string out;
  for (const auto& [k, v] : options) {
    absl::StrAppend(&out, " ", Printable(k), "=", Printable(v));
  }
  return out;
}

std::string UtcNow() {
  const time_t now = time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

Table::Table(std::vector<std::string> header) {
  rows_.push_back(std::move(header));
}

void Table::Add(std::vector<std::string> row) {
  rows_.push_back(std::move(row));
}

void Table::AlignRight(std::vector<size_t> columns) {
  right_ = std::move(columns);
}

std::string Table::Render(const std::string& indent) const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool right =
          std::find(right_.begin(), right_.end(), c) != right_.end();
      const std::string pad(width[c] - row[c].size(), ' ');
      if (c > 0) line += "  ";
      line += right ? pad + row[c] : row[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

Json ProtoToJson(const pb::Message& m) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  Json out = Json::object();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->is_map()) {
      out[f->name()] = ProtoMap(m, f);
    } else if (f->is_repeated()) {
      Json list = Json::array();
      for (int j = 0; j < r->FieldSize(m, f); ++j) {
        list.push_back(ProtoValue(m, f, j));
      }
      out[f->name()] = std::move(list);
    } else {
      out[f->name()] = ProtoValue(m, f, 0);
    }
  }
  return out;
}

std::string DumpJson(const Json& j) {
  // ensure_ascii: every byte above 0x7e (DEL, C1 controls, bidi overrides)
  // and every control is a \u escape, so that a terminal shown the line
  // acts on none of what a data path or an option holds.
  return j.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
}

}  // namespace batchd::batchctl
