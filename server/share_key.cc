// The key of streams that share fills; see share_key.h.
#include "server/share_key.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"

namespace batchd {

namespace {

uint64_t Nanos(const struct timespec& t) {
  return uint64_t(t.tv_sec) * 1000000000 + uint64_t(t.tv_nsec);
}

// A field that cannot run into the next, whatever bytes it holds.
void Field(std::string* out, const char* name, const std::string& value) {
  absl::StrAppend(out, name, "=", value.size(), ":", value, ";");
}

}  // namespace

std::string DataIdentity(const DataRoot& root,
                         const std::string& resolved_path) {
  if (resolved_path.empty()) return "";
  struct stat st;
  if (!root.Stat(resolved_path, &st).ok()) {
    static std::atomic<uint64_t> unknown{0};
    return absl::StrCat("unknown ", unknown.fetch_add(1));
  }
  return absl::StrCat("dev=", st.st_dev, " ino=", st.st_ino,
                      " size=", st.st_size, " mtime_ns=", Nanos(st.st_mtim),
                      " ctime_ns=", Nanos(st.st_ctim));
}

std::string ShareKeyOf(const v1::StreamSpec& spec, const Caller& owner,
                       const StreamSetup& setup) {
  std::string key;
  Field(&key, "workload", spec.workload());
  Field(&key, "data", setup.data_identity);
  Field(&key, "split", spec.split());
  Field(&key, "seed", absl::StrCat(spec.seed()));
  Field(&key, "global_batch_size", absl::StrCat(spec.global_batch_size()));
  const std::map<std::string, std::string> options(spec.options().begin(),
                                                   spec.options().end());
  for (const auto& [k, v] : options) {
    Field(&key, "option", k);
    Field(&key, "value", v);
  }
  Field(&key, "examples", absl::StrCat(setup.sampler.num_examples()));
  for (const BatchLayout::Entry& e : setup.layout.entries) {
    std::string shape;
    for (int64_t d : e.tensor.example_shape) absl::StrAppend(&shape, d, ",");
    Field(&key, "tensor", e.tensor.name);
    Field(&key, "dtype", absl::StrCat(int(e.tensor.dtype)));
    Field(&key, "shape", shape);
  }
  if (!owner.known) {
    Field(&key, "owner", "tcp");
  } else {
    std::vector<uint32_t> groups = owner.groups;
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    std::string g;
    for (uint32_t x : groups) absl::StrAppend(&g, x, ",");
    Field(&key, "owner", absl::StrCat(owner.uid));
    Field(&key, "gid", absl::StrCat(owner.gid));
    Field(&key, "groups", g);
  }
  return key;
}

std::shared_ptr<ShareMember> JoinShare(FillShare& share,
                                       const v1::StreamSpec& spec,
                                       const Caller& owner,
                                       const StreamSetup& setup) {
  std::vector<uint64_t> tensor_bytes;
  for (const BatchLayout::Entry& e : setup.layout.entries) {
    tensor_bytes.push_back(e.example_bytes);
  }
  return share.Join(ShareKeyOf(spec, owner, setup), tensor_bytes);
}

}  // namespace batchd
