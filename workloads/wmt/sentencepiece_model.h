// A SentencePiece model, loaded through libbatchd_sentencepiece.so
// (sentencepiece_shim.h), which this file opens at run time with
// RTLD_LOCAL | RTLD_DEEPBIND instead of linking SentencePiece.
//
// Why: Debian's libsentencepiece.so.0 carries its own copy of protobuf-lite
// (3.14) and exports its symbols. Linked into a process that also has
// libprotobuf.so.32 (gRPC: the batchd daemon), whichever comes first in the
// symbol search order serves both, and the daemon crashes during static
// initialisation. Opened locally and deep-bound, SentencePiece resolves to
// its own copy and nobody else sees it.
//
// Deep binding has one known trap: the library reaches libstdc++'s own
// std::cerr, not an executable's copy-relocated one, so the shim keeps
// SentencePiece from ever logging (its errors come back as statuses).
//
// Sanitizer runtimes refuse RTLD_DEEPBIND; a sanitized build opens the
// library with RTLD_LOCAL alone, which is safe only where libprotobuf is
// not loaded (the unit tests), and refuses with an error elsewhere.
//
// Where the library is looked for, in order: $BATCHD_SENTENCEPIECE_LIBRARY;
// the build tree's copy; next to the executable and in ../lib; the dynamic
// linker's search path.
//
// Thread safety: immutable after Load; Encode may be called from any number
// of threads at once.
#ifndef BATCHD_WORKLOADS_WMT_SENTENCEPIECE_MODEL_H_
#define BATCHD_WORKLOADS_WMT_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace batchd {
namespace wmt {

class SentencePieceModel {
 public:
  // Loads a serialized model file. On failure returns null and sets *error.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path,
                                                  std::string* error);
  // Loads a serialized model from its bytes (checked first: see
  // SentencePieceVocab::Parse and its limits).
  static std::unique_ptr<SentencePieceModel> LoadBytes(std::string_view bytes,
                                                       std::string* error);
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  int vocab_size() const { return vocab_size_; }
  int eos_id() const { return eos_id_; }  // -1 when the model has none
  int unk_id() const { return unk_id_; }

  // Token ids of `text`, without BOS or EOS. False (and *error) when
  // SentencePiece fails.
  bool Encode(std::string_view text, std::vector<int>* ids,
              std::string* error) const;

 private:
  explicit SentencePieceModel(void* model);
  void* const model_;  // owned, freed through the library
  int vocab_size_ = 0, eos_id_ = -1, unk_id_ = 0;
};

// Trains a model with SentencePiece's trainer; `args` as for spm_train
// ("--input=corpus.txt --model_prefix=out --vocab_size=1000 ..."). False
// and *error on failure. For tests and tools.
bool TrainSentencePiece(const std::string& args, std::string* error);

}  // namespace wmt
}  // namespace batchd

#endif  // BATCHD_WORKLOADS_WMT_SENTENCEPIECE_MODEL_H_
