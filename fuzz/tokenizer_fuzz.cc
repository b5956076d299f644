// libFuzzer target for the WMT tokenizer on arbitrary bytes, as TFRecord
// features or text lines reach it: Tokenizer::Encode and TokenizePair (the
// input split at its first tab into de and en) give ids or a Status, never
// a crash. What encodes must be valid ids ending in EOS, and the same ids
// as the model gives for the whole text at once (the tokenizer's per-word
// cache claims exactly that).
//
// The model: $BATCHD_FUZZ_SPM_MODEL, else a tiny one trained at start-up
// from a generated corpus through the repository's trainer
// (TrainSentencePiece), so the target needs no files.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "workloads/wmt/packing.h"
#include "workloads/wmt/sentencepiece_model.h"
#include "workloads/wmt/tokenizer.h"

namespace {

std::string TrainTinyModel() {
  const std::string dir = batchd::fuzz::ScratchDir();
  const std::string corpus = dir + "/corpus.txt";
  {
    // German and English-like words, digits and a few non-ASCII letters, so
    // the model has multi-byte pieces and byte fallback has work to do.
    static const char* kWords[] = {
        "der",  "die",         "das",         "und",       "ist",   "nicht",
        "über", "straße",      "grüße",       "the",       "and",   "is",
        "not",  "over",        "street",      "greetings", "naïve", "2017",
        "42",   "translation", "Übersetzung", "café",      "ß",     "€"};
    std::ofstream out(corpus);
    uint64_t x = 1;
    for (int line = 0; line < 400; ++line) {
      for (int w = 0; w < 8; ++w) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        out << kWords[(x >> 33) % (sizeof(kWords) / sizeof(kWords[0]))]
            << (w == 7 ? "\n" : " ");
      }
    }
  }
  std::string error;
  if (!batchd::wmt::TrainSentencePiece(
          absl::StrCat("--input=", corpus, " --model_prefix=", dir,
                       "/spm --vocab_size=40 --hard_vocab_limit=false "
                       "--model_type=unigram "
                       "--character_coverage=1.0 --num_threads=1 "
                       "--minloglevel=2"),
          &error)) {
    batchd::fuzz::Fail("cannot train the fuzz model: " + error);
  }
  return dir + "/spm.model";
}

const batchd::wmt::Tokenizer* tokenizer = nullptr;
const batchd::wmt::SentencePieceModel* model = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* given = getenv("BATCHD_FUZZ_SPM_MODEL");
  const std::string path = given != nullptr ? given : TrainTinyModel();
  auto t = batchd::wmt::Tokenizer::Load(path);
  if (!t.ok()) batchd::fuzz::Fail(std::string(t.status().message()));
  tokenizer = t->release();
  std::string error;
  model = batchd::wmt::SentencePieceModel::Load(path, &error).release();
  if (model == nullptr) batchd::fuzz::Fail("cannot load the model: " + error);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<int32_t> ids;
  if (tokenizer->Encode(text, &ids).ok()) {
    if (ids.empty() || ids.back() != tokenizer->eos_id()) {
      batchd::fuzz::Fail("encoded ids do not end in EOS");
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer->vocab_size()) {
        batchd::fuzz::Fail(absl::StrCat("id ", id, " outside the vocabulary"));
      }
    }
    std::vector<int> whole;
    std::string error;
    if (model->Encode(text, &whole, &error)) {
      whole.push_back(tokenizer->eos_id());
      if (std::vector<int32_t>(whole.begin(), whole.end()) != ids) {
        batchd::fuzz::Fail("the word cache encodes differently from the model");
      }
    }
  }
  const size_t tab = text.find('\t');
  const std::string_view de = text.substr(0, tab);
  const std::string_view en =
      tab == std::string_view::npos ? std::string_view() : text.substr(tab + 1);
  batchd::wmt::TokenPair pair;
  (void)tokenizer->TokenizePair(de, en, 256, size % 2 == 0, &pair);
  return 0;
}
