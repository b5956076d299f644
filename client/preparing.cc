// OpenStream's "still preparing" answer; see preparing.h.
#include "client/preparing.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace batchd {

std::string DescribePreparing(const v1::Preparing& p) {
  std::string text = p.what();
  if (p.total() > 0) {
    absl::StrAppend(&text, ": ", p.done(), "/", p.total(), " ", p.unit(), " (",
                    p.done() * 100 / p.total(), "%)");
  } else if (p.done() > 0) {
    absl::StrAppend(&text, ": ", p.done(), " ", p.unit());
  }
  absl::StrAppend(&text, text.empty() ? "" : ", ",
                  absl::StrFormat("%.0f s so far", p.seconds()));
  return text;
}

std::optional<v1::Preparing> PreparingOf(const absl::Status& s) {
  const auto payload = s.GetPayload(kPreparingPayload);
  if (!payload.has_value()) return std::nullopt;
  v1::Preparing p;
  if (!p.ParseFromString(std::string(*payload))) return std::nullopt;
  return p;
}

}  // namespace batchd
