// LoaderState's JSON form; see batchd/loader.h. The format is small and
// versioned: a checkpoint written by one release is read by the next, and
// anything that is not a batchd state is refused naming the field.
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "batchd/loader.h"

namespace batchd {
namespace {

constexpr char kFormat[] = "batchd.loader_state";

using Json = nlohmann::json;

absl::Status Wrong(const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("not a batchd loader state: ", what));
}

// A counter exactly as ToJson writes it: a JSON integer from 0 to the
// largest T. nlohmann's get<> would turn -1 into 2^64-1, 1.5 into 1 and
// true into 1; a checkpoint that holds them was not written by state_dict().
template <typename T>
absl::Status TakeCount(const Json& v, const std::string& what, T* out) {
  static_assert(std::is_unsigned_v<T>);
  if (!v.is_number_unsigned()) {
    const std::string is =
        v.is_number_integer() ? std::string("negative")
        : v.is_number_float()
            ? absl::StrCat("not a whole number (", v.dump(), ")")
            : absl::StrCat("a ", v.type_name());
    return Wrong(absl::StrCat(what, " is ", is,
                              "; it must be an integer from 0 to ",
                              std::numeric_limits<T>::max()));
  }
  const uint64_t n = v.get<uint64_t>();
  if (n > std::numeric_limits<T>::max()) {
    return Wrong(absl::StrCat(what, " is ", n, "; it must be at most ",
                              std::numeric_limits<T>::max()));
  }
  *out = T(n);
  return absl::OkStatus();
}

template <typename T>
absl::Status Take(const Json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return Wrong(absl::StrCat("no field '", key, "'"));
  if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    return TakeCount(*it, absl::StrCat("field '", key, "'"), out);
  }
  try {
    *out = it->get<T>();
  } catch (const Json::exception&) {
    return Wrong(absl::StrCat("field '", key, "' is ", it->type_name()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string LoaderState::ToJson() const {
  Json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["workload"] = workload;
  j["data"] = data;
  j["split"] = split;
  j["global_batch_size"] = global_batch_size;
  j["seed"] = seed;
  j["options"] = options;
  j["next_step"] = next_step;
  j["cursor"] = has_cursor ? Json::array({cursor[0], cursor[1], cursor[2],
                                          cursor_step})
                           : Json(nullptr);
  j["world_size"] = world_size;
  return j.dump();
}

absl::StatusOr<LoaderState> LoaderState::FromJson(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Wrong("not a JSON object");
  std::string format;
  if (absl::Status s = Take(j, "format", &format); !s.ok()) return s;
  if (format != kFormat) return Wrong(absl::StrCat("format is '", format, "'"));
  uint64_t version = 0;
  if (absl::Status s = Take(j, "version", &version); !s.ok()) return s;
  if (version != uint64_t(kVersion)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batchd loader state of version ", version, "; this client reads "
        "version ", kVersion));
  }
  LoaderState st;
  absl::Status s = Take(j, "workload", &st.workload);
  if (s.ok()) s = Take(j, "data", &st.data);
  if (s.ok()) s = Take(j, "split", &st.split);
  if (s.ok()) s = Take(j, "global_batch_size", &st.global_batch_size);
  if (s.ok()) s = Take(j, "seed", &st.seed);
  if (s.ok()) s = Take(j, "options", &st.options);
  if (s.ok()) s = Take(j, "next_step", &st.next_step);
  if (s.ok() && j.contains("world_size")) {
    s = Take(j, "world_size", &st.world_size);
  }
  if (!s.ok()) return s;
  const Json& c = j.contains("cursor") ? j["cursor"] : Json(nullptr);
  if (!c.is_null()) {
    if (!c.is_array() || c.size() != 4) {
      return Wrong("cursor is not [epoch, window, row, step]");
    }
    std::vector<uint64_t> v(4);
    static const char* const kCursorParts[] = {"epoch", "window", "row",
                                               "step"};
    for (size_t i = 0; i < 4; ++i) {
      absl::Status cs = TakeCount(
          c[i], absl::StrCat("field 'cursor' (its ", kCursorParts[i], ")"),
          &v[i]);
      if (!cs.ok()) return cs;
    }
    st.has_cursor = true;
    for (int i = 0; i < 3; ++i) st.cursor[i] = v[i];
    st.cursor_step = v[3];
    if (st.cursor_step > st.next_step) {
      return Wrong(absl::StrCat("cursor of step ", st.cursor_step,
                                " is past next_step ", st.next_step));
    }
  }
  return st;
}

}  // namespace batchd
