// The wmt tokenizer and SentencePiece model reader: whole-sentence ids,
// Viterbi ties, UTF-8, SentencePiece beside libprotobuf
// (workloads/wmt/tokenizer.h, sentencepiece_model.h).
#include <link.h>

#ifdef BATCHD_TEST_WITH_PROTOBUF
#include "google/protobuf/stubs/common.h"
#endif
#include "tests/wmt_fixture.h"

namespace batchd {
namespace {

// The fixture, with HasSubstr, PackedRow and TokenPair.
using namespace wmt_test;  // NOLINT: the suites' shared fixture

class WmtTokenizerTest : public WmtFixture {};

#ifdef BATCHD_TEST_WITH_PROTOBUF
// The daemon has gRPC's libprotobuf loaded; Debian's libsentencepiece
// carries another protobuf. This suite runs with both, as the daemon does.
TEST_F(WmtTokenizerTest, SentencePieceLivesNextToLibprotobuf) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  const bool loaded = dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) -> int {
        return info->dlpi_name != nullptr &&
               strstr(info->dlpi_name, "libprotobuf.so") != nullptr;
      },
      nullptr);
  EXPECT_TRUE(loaded);
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok->Encode("der Rat", &ids).ok());
  EXPECT_EQ(ids.back(), 2);
}
#endif

TEST(WmtUtf8, FindsTheFirstMalformedByte) {
  using wmt::FirstInvalidUtf8;
  constexpr size_t kNone = std::string_view::npos;
  EXPECT_EQ(FirstInvalidUtf8(""), kNone);
  EXPECT_EQ(FirstInvalidUtf8("Stra\xc3\x9f"
                             "e \xe2\x82\xac \xf0\x9f\x98\x80"),
            kNone);
  EXPECT_EQ(FirstInvalidUtf8("ab\x80"), 2u);            // stray continuation
  EXPECT_EQ(FirstInvalidUtf8("a\xc3"), 1u);             // cut short
  EXPECT_EQ(FirstInvalidUtf8("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("x\xe0\x80\xaf"), 1u);     // overlong, 3 bytes
  EXPECT_EQ(FirstInvalidUtf8("\xed\xa0\x80"), 0u);      // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xff"), 0u);
}

// Runs of one character make Viterbi ties: with "c" and "cc" both pieces,
// "ccc" is c+cc or cc+c, equal sums in another order, and float rounding
// of the running score before the word decides. A model trained on text
// with such runs, a small search for words whose lone encoding differs
// from what a sentence gives them, and the tokenizer against SentencePiece
// on those sentences.
TEST_F(WmtTokenizerTest, TokenizerEqualsWholeSentenceSentencePieceOnTies) {
  const std::string dir = *root_ + "/ties";
  fs::create_directories(dir);
  std::mt19937_64 rng(11);
  const std::string chars = "]-.+=*#_~!?/|Xle";
  std::string corpus;
  for (size_t i = 0; i < kModelLines; ++i) {
    corpus += (*pairs_)[i].de + "\n" + (*pairs_)[i].en + "\n";
    const char c = chars[rng() % chars.size()];
    corpus += (*pairs_)[i].en.substr(0, 40);
    for (int k = 0, n = 1 + rng() % 4; k < n; ++k) {
      static const char* const kPrefix[] = {"", "a", "x"};
      const uint64_t prefix = rng() % 3, length = 1 + rng() % 12;
      corpus += std::string(" ") + kPrefix[prefix] + std::string(length, c);
    }
    corpus += "\n";
  }
  WriteFile(dir + "/corpus.txt", corpus);
  std::string error;
  ASSERT_TRUE(wmt::TrainSentencePiece(
      "--input=" + dir + "/corpus.txt --model_prefix=" + dir +
          "/spm --vocab_size=400 --model_type=unigram "
          "--character_coverage=1.0 --hard_vocab_limit=false "
          "--num_threads=1 --minloglevel=2",
      &error))
      << error;
  auto model = wmt::SentencePieceModel::Load(dir + "/spm.model", &error);
  ASSERT_NE(model, nullptr) << error;
  auto whole = [&](const std::string& s) {
    std::vector<int> ids;
    EXPECT_TRUE(model->Encode(s, &ids, &error)) << error;
    ids.push_back(2);
    return std::vector<int32_t>(ids.begin(), ids.end());
  };
  auto word_by_word = [&](const std::string& s) {
    std::vector<int32_t> ids;
    for (absl::string_view w : absl::StrSplit(s, ' ', absl::SkipEmpty())) {
      std::vector<int32_t> one = whole(std::string(w));
      ids.insert(ids.end(), one.begin(), one.end() - 1);
    }
    ids.push_back(2);
    return ids;
  };
  // Plain sentences first: the order that fooled the old sampled check.
  std::vector<std::string> sentences, tie_words;
  for (size_t i = 0; i < kTrainPairs; ++i) {
    sentences.push_back((*pairs_)[i].de);
    sentences.push_back((*pairs_)[i].en);
  }
  for (char c : chars) {
    for (int n = 2; n <= 12; ++n) {
      for (const char* prefix : {"", "a", "x"}) {
        const std::string w = prefix + std::string(n, c);
        bool tie = false;
        for (size_t i = 0; i < 30; ++i) {
          for (const std::string* ctx : {&(*pairs_)[i].en, &(*pairs_)[i].de}) {
            const std::string s = *ctx + " " + w;
            sentences.push_back(s);
            if (whole(s) != word_by_word(s)) tie = true;
          }
        }
        if (tie) tie_words.push_back(w);
      }
    }
  }
  ASSERT_GE(tie_words.size(), 3u) << "few ties found: the search needs a look";
  RecordProperty("tie_words", int(tie_words.size()));
  auto tok = wmt::Tokenizer::Load(dir + "/spm.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->word_cache_off_reason(), "");
  size_t differ = 0;
  for (const std::string& s : sentences) {
    const std::vector<int32_t> want = whole(s);
    differ += want != word_by_word(s);
    std::vector<int32_t> got;
    ASSERT_TRUE((*tok)->Encode(s, &got).ok());
    ASSERT_EQ(got, want) << "'" << s << "'";
  }
  EXPECT_GE(differ, tie_words.size());
  // Both ways were taken: the cache served most sentences, ties went whole.
  const wmt::Tokenizer::Stats st = (*tok)->stats();
  EXPECT_GT(st.from_words, sentences.size() / 2);
  EXPECT_GE(st.whole, differ);
}

TEST_F(WmtTokenizerTest, ModelFileFactsAndCharsmapAreRead) {
  const std::string bytes = ReadFile(*root_ + "/spm.model");
  auto v = wmt::SentencePieceVocab::Parse(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(int(v->pieces.size()), tok->vocab_size());
  EXPECT_EQ(v->pieces[0].type, wmt::SentencePieceVocab::kUnknown);
  EXPECT_EQ(v->pieces[2].text, "</s>");
  EXPECT_EQ(v->model_type, 1);
  EXPECT_EQ(v->normalizer_name, "nmt_nfkc");
  EXPECT_TRUE(v->add_dummy_prefix);
  auto keys = wmt::ScanCharsmap(v->precompiled_charsmap);
  ASSERT_TRUE(keys.ok()) << keys.status();
  // NFKC rewrites thousands of characters, full-width Latin (EF BC xx)
  // among them; no rule holds a space.
  EXPECT_GT(keys->keys, 1000u);
  EXPECT_TRUE(keys->byte_in_key[0xef]);
  EXPECT_TRUE(keys->byte_in_key[0xbc]);
  EXPECT_FALSE(keys->byte_in_key[' ']);
  EXPECT_EQ(tok->word_cache_off_reason(), "");

  std::string broken = v->precompiled_charsmap;
  broken[0] = '\xff';  // a trie size past the blob
  EXPECT_FALSE(wmt::ScanCharsmap(broken).ok());
  EXPECT_FALSE(wmt::SentencePieceVocab::Parse("\x0a\xff").ok());
}

TEST_F(WmtTokenizerTest, ModelsTheArgumentDoesNotCoverAreEncodedWhole) {
  // A user-defined symbol is matched before normalisation and may hold
  // what the word split relies on; such a model never uses the cache.
  const std::string dir = *root_ + "/userdef";
  fs::create_directories(dir);
  std::string error;
  ASSERT_TRUE(wmt::TrainSentencePiece(
      "--input=" + *root_ + "/corpus.txt --model_prefix=" + dir +
          "/spm --vocab_size=300 --model_type=unigram "
          "--user_defined_symbols=Rat --character_coverage=1.0 "
          "--hard_vocab_limit=false --num_threads=1 --minloglevel=2",
      &error))
      << error;
  auto tok = wmt::Tokenizer::Load(dir + "/spm.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT((*tok)->word_cache_off_reason(), HasSubstr("user-defined"));
  auto model = wmt::SentencePieceModel::Load(dir + "/spm.model", &error);
  ASSERT_NE(model, nullptr);
  for (size_t i = 0; i < 50; ++i) {
    std::vector<int32_t> got;
    ASSERT_TRUE((*tok)->Encode((*pairs_)[i].de, &got).ok());
    std::vector<int> want;
    ASSERT_TRUE(model->Encode((*pairs_)[i].de, &want, &error));
    want.push_back(2);
    EXPECT_EQ(std::vector<int>(got.begin(), got.end()), want);
  }
  EXPECT_EQ((*tok)->stats().from_words, 0u);
  EXPECT_EQ((*tok)->stats().whole, 50u);
}

}  // namespace
}  // namespace batchd
