// Opens libbatchd_sentencepiece.so; see sentencepiece_model.h.
#include "workloads/wmt/sentencepiece_model.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <type_traits>

#include "workloads/wmt/sentencepiece_shim.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BATCHD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BATCHD_SANITIZED 1
#endif
#endif

namespace batchd {
namespace wmt {
namespace {

constexpr char kLibraryName[] = "libbatchd_sentencepiece.so";

struct Shim {
  int (*abi_version)() = nullptr;
  void* (*load)(const char*, char*, size_t) = nullptr;
  void* (*load_bytes)(const char*, size_t, char*, size_t) = nullptr;
  void (*free_model)(void*) = nullptr;
  int (*info)(const void*, int) = nullptr;
  long (*encode)(const void*, const char*, size_t, int*, size_t, char*,
                 size_t) = nullptr;
  int (*train)(const char*, char*, size_t) = nullptr;
  std::string error;  // why the library is unusable; empty when it is
};

#ifdef BATCHD_SANITIZED
bool ProtobufLoaded() {
  return dl_iterate_phdr(
             [](dl_phdr_info* info, size_t, void*) {
               return info->dlpi_name != nullptr &&
                              strstr(info->dlpi_name, "libprotobuf") != nullptr
                          ? 1
                          : 0;
             },
             nullptr) != 0;
}
#endif

std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* env = getenv("BATCHD_SENTENCEPIECE_LIBRARY")) {
    paths.push_back(env);
  }
#ifdef BATCHD_SENTENCEPIECE_BUILD_PATH
  paths.push_back(BATCHD_SENTENCEPIECE_BUILD_PATH);
#endif
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, size_t(n));
    dir = dir.substr(0, dir.rfind('/'));
    paths.push_back(dir + "/" + kLibraryName);
    paths.push_back(dir + "/../lib/" + kLibraryName);
  }
  paths.push_back(kLibraryName);
  return paths;
}

Shim OpenShim() {
  Shim shim;
  int flags = RTLD_NOW | RTLD_LOCAL;
#ifdef BATCHD_SANITIZED
  if (ProtobufLoaded()) {
    shim.error =
        "SentencePiece cannot be loaded into this sanitizer build: Debian's "
        "libsentencepiece carries its own protobuf-lite, which needs "
        "RTLD_DEEPBIND to live next to libprotobuf, and sanitizers do not "
        "allow RTLD_DEEPBIND";
    return shim;
  }
#else
  flags |= RTLD_DEEPBIND;
#endif
  void* handle = nullptr;
  std::string tried;
  for (const std::string& path : Candidates()) {
    handle = dlopen(path.c_str(), flags);
    if (handle != nullptr) break;
    const char* e = dlerror();
    tried += "\n  " + path + ": " + (e ? e : "?");
  }
  if (handle == nullptr) {
    shim.error =
        std::string("cannot load ") + kLibraryName +
        " (set BATCHD_SENTENCEPIECE_LIBRARY to its path); tried:" + tried;
    return shim;
  }
  // Never closed: models may live until exit.
  auto sym = [&](const char* name, auto* fn) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(
        dlsym(handle, name));
    if (*fn == nullptr && shim.error.empty()) {
      shim.error = std::string(kLibraryName) + " lacks " + name;
    }
  };
  sym("batchd_spm_abi_version", &shim.abi_version);
  sym("batchd_spm_load", &shim.load);
  sym("batchd_spm_load_bytes", &shim.load_bytes);
  sym("batchd_spm_free", &shim.free_model);
  sym("batchd_spm_info", &shim.info);
  sym("batchd_spm_encode", &shim.encode);
  sym("batchd_spm_train", &shim.train);
  if (shim.error.empty() && shim.abi_version() != BATCHD_SPM_ABI_VERSION) {
    shim.error = std::string(kLibraryName) + " has interface version " +
                 std::to_string(shim.abi_version()) + ", batchd needs " +
                 std::to_string(BATCHD_SPM_ABI_VERSION);
  }
  return shim;
}

const Shim& GetShim() {
  static const Shim shim = OpenShim();
  return shim;
}

}  // namespace

SentencePieceModel::SentencePieceModel(void* model) : model_(model) {
  const Shim& shim = GetShim();
  vocab_size_ = shim.info(model_, 0);
  eos_id_ = shim.info(model_, 1);
  unk_id_ = shim.info(model_, 2);
}

SentencePieceModel::~SentencePieceModel() { GetShim().free_model(model_); }

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(
    const std::string& path, std::string* error) {
  const Shim& shim = GetShim();
  if (!shim.error.empty()) {
    *error = shim.error;
    return nullptr;
  }
  char message[512] = "";
  void* model = shim.load(path.c_str(), message, sizeof(message));
  if (model == nullptr) {
    *error = message;
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(model));
}

std::unique_ptr<SentencePieceModel> SentencePieceModel::LoadBytes(
    std::string_view bytes, std::string* error) {
  const Shim& shim = GetShim();
  if (!shim.error.empty()) {
    *error = shim.error;
    return nullptr;
  }
  char message[512] = "";
  void* model =
      shim.load_bytes(bytes.data(), bytes.size(), message, sizeof(message));
  if (model == nullptr) {
    *error = message;
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(model));
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids,
                                std::string* error) const {
  const Shim& shim = GetShim();
  char message[512] = "";
  // Pieces rarely outnumber bytes; when normalisation makes more, ask again.
  ids->resize(text.size() + 8);
  long n = shim.encode(model_, text.data(), text.size(), ids->data(),
                       ids->size(), message, sizeof(message));
  if (n > long(ids->size())) {
    ids->resize(size_t(n));
    n = shim.encode(model_, text.data(), text.size(), ids->data(), ids->size(),
                    message, sizeof(message));
  }
  if (n < 0 || n > long(ids->size())) {
    *error = message;
    return false;
  }
  ids->resize(size_t(n));
  return true;
}

bool TrainSentencePiece(const std::string& args, std::string* error) {
  const Shim& shim = GetShim();
  if (!shim.error.empty()) {
    *error = shim.error;
    return false;
  }
  char message[512] = "";
  if (shim.train(args.c_str(), message, sizeof(message)) != 0) {
    *error = message;
    return false;
  }
  return true;
}

}  // namespace wmt
}  // namespace batchd
