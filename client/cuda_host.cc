// cudaHostRegister through dlopen; see cuda_host.h.
#include "client/cuda_host.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace batchd {
namespace {

// The path of a loaded object whose file name starts with "libcudart".
int FindLoaded(struct dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* base = strrchr(name, '/');
  base = base == nullptr ? name : base + 1;
  if (strncmp(base, "libcudart", 9) != 0) return 0;
  *static_cast<std::string*>(out) = name;
  return 1;
}

// The runtime torch loaded is the one to use: first whatever libcudart is
// in the process, then (none loaded) one by the names CUDA 11-13 give it.
void* CudaRuntime() {
  std::string loaded;
  dl_iterate_phdr(FindLoaded, &loaded);
  if (!loaded.empty()) {
    if (void* h = dlopen(loaded.c_str(), RTLD_LAZY | RTLD_NOLOAD)) return h;
  }
  static const char* const kNames[] = {"libcudart.so", "libcudart.so.13",
                                       "libcudart.so.12", "libcudart.so.11.0"};
  for (const char* name : kNames) {
    if (void* h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD)) return h;
  }
  for (const char* name : kNames) {
    if (void* h = dlopen(name, RTLD_LAZY)) return h;
  }
  return nullptr;
}

template <typename Fn>
absl::Status Lookup(const char* symbol, Fn* fn) {
  void* cudart = CudaRuntime();
  if (cudart == nullptr) {
    return absl::FailedPreconditionError("no CUDA runtime (libcudart)");
  }
  *fn = reinterpret_cast<Fn>(dlsym(cudart, symbol));
  if (*fn == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("libcudart has no ", symbol));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaHostRegister(void* address, size_t bytes) {
  int (*reg)(void*, size_t, unsigned) = nullptr;
  if (absl::Status s = Lookup("cudaHostRegister", &reg); !s.ok()) return s;
  const int rc = reg(address, bytes, 0);
  if (rc != 0) {
    // 35: no driver for this runtime; 100: no device. Either way the copies
    // stay synchronous, which is all a caller can do about it.
    return absl::FailedPreconditionError(
        absl::StrCat("cudaHostRegister of the ring failed: CUDA error ", rc));
  }
  return absl::OkStatus();
}

absl::Status CudaHostUnregister(void* address) {
  int (*unreg)(void*) = nullptr;
  if (absl::Status s = Lookup("cudaHostUnregister", &unreg); !s.ok()) {
    return s;
  }
  const int rc = unreg(address);
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cudaHostUnregister of the ring failed: CUDA error ", rc));
  }
  return absl::OkStatus();
}

}  // namespace batchd
