// The C interface of libbatchd_sentencepiece.so, a small shared library
// around SentencePiece that batchd loads at run time (see
// sentencepiece_model.h for why). Plain C types only, and nothing allocated
// on one side is freed on the other.
//
// Thread safety: batchd_spm_encode may be called from any number of threads
// at once on one model.
#ifndef BATCHD_WORKLOADS_WMT_SENTENCEPIECE_SHIM_H_
#define BATCHD_WORKLOADS_WMT_SENTENCEPIECE_SHIM_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BATCHD_SPM_ABI_VERSION 3

// BATCHD_SPM_ABI_VERSION of the library.
int batchd_spm_abi_version(void);
// Loads a model file; NULL and a message in error[0, error_size) on failure.
void* batchd_spm_load(const char* path, char* error, size_t error_size);
// Loads a model from its bytes (a serialized ModelProto), as
// batchd_spm_load does from a file.
void* batchd_spm_load_bytes(const char* data, size_t size, char* error,
                            size_t error_size);
void batchd_spm_free(void* model);
// 0: pieces in the vocabulary, 1: eos id (-1 when none), 2: unk id.
int batchd_spm_info(const void* model, int what);
// Encodes text[0, len) (no BOS or EOS). Writes up to `capacity` ids and
// returns how many the text has (call again with more room when that is
// more than capacity), or -1 and a message on failure.
long batchd_spm_encode(const void* model, const char* text, size_t len,
                       int* ids, size_t capacity, char* error,
                       size_t error_size);
// Trains a model: `args` as for spm_train ("--input=... --model_prefix=...").
// 0 on success, -1 and a message on failure.
int batchd_spm_train(const char* args, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif  // BATCHD_WORKLOADS_WMT_SENTENCEPIECE_SHIM_H_
