// libbatchd_sentencepiece.so: SentencePiece behind the C interface of
// sentencepiece_shim.h. The only file that includes SentencePiece's header.
#include "workloads/wmt/sentencepiece_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <string>
#include <vector>

// SentencePiece's own switch for its LOG() messages (src/common.h; the
// library exports it, the public header does not declare it).
namespace sentencepiece {
namespace logging {
void SetMinLogLevel(int v);
}  // namespace logging
}  // namespace sentencepiece

namespace {

// Deep-bound, SentencePiece reaches libstdc++'s own std::cerr, which is not
// the one an executable with a copy relocation of std::cerr (any program
// that uses it) has constructed: writing to it crashes. So SentencePiece
// must never log; its errors come back as statuses anyway.
constexpr int kSilent = 100;

__attribute__((constructor)) void Silence() {
  sentencepiece::logging::SetMinLogLevel(kSilent);
}

void SetError(const std::string& message, char* error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const size_t n = std::min(message.size(), error_size - 1);
  memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int batchd_spm_abi_version(void) {
  return BATCHD_SPM_ABI_VERSION;
}

__attribute__((visibility("default"))) void* batchd_spm_load(
    const char* path, char* error, size_t error_size) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const sentencepiece::util::Status s = sp->Load(path);
  if (!s.ok()) {
    SetError(s.ToString(), error, error_size);
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void* batchd_spm_load_bytes(
    const char* data, size_t size, char* error, size_t error_size) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const sentencepiece::util::Status s =
      sp->LoadFromSerializedProto(absl::string_view(data, size));
  if (!s.ok()) {
    SetError(s.ToString(), error, error_size);
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void batchd_spm_free(void* model) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(model);
}

__attribute__((visibility("default"))) int batchd_spm_info(const void* model,
                                                           int what) {
  const auto* sp =
      static_cast<const sentencepiece::SentencePieceProcessor*>(model);
  switch (what) {
    case 0:
      return sp->GetPieceSize();
    case 1:
      return sp->eos_id();
    case 2:
      return sp->unk_id();
  }
  return -1;
}

__attribute__((visibility("default"))) long batchd_spm_encode(
    const void* model, const char* text, size_t len, int* ids, size_t capacity,
    char* error, size_t error_size) {
  const auto* sp =
      static_cast<const sentencepiece::SentencePieceProcessor*>(model);
  thread_local std::vector<int> pieces;
  const sentencepiece::util::Status s =
      sp->Encode(std::string_view(text, len), &pieces);
  if (!s.ok()) {
    SetError(s.ToString(), error, error_size);
    return -1;
  }
  const size_t n = std::min(pieces.size(), capacity);
  if (n > 0) memcpy(ids, pieces.data(), n * sizeof(int));
  return long(pieces.size());
}

__attribute__((visibility("default"))) int batchd_spm_train(const char* args,
                                                            char* error,
                                                            size_t error_size) {
  // The last --minloglevel wins: keep the trainer silent (see Silence()).
  const std::string silent =
      std::string(args) + " --minloglevel=" + std::to_string(kSilent);
  const sentencepiece::util::Status s =
      sentencepiece::SentencePieceTrainer::Train(silent);
  if (!s.ok()) {
    SetError(s.ToString(), error, error_size);
    return -1;
  }
  return 0;
}

}  // extern "C"
