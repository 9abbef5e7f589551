// Vocabularies stored in GGUF metadata (llama.cpp's vocab-only test files), against the vectors
// llama.cpp's tests/test-tokenizer-0 checks them with (made with Hugging Face's tokenizers).
#include <doctest/doctest.h>

#include "text/tokenizer.h"
#include "text/vectors.h"

using namespace journey;
using namespace journey::test;

namespace {

// Chinese and emoji beyond the vector set: must come back unchanged (SPM needs byte pieces here).
void check_chinese_round_trip(const Tokenizer& t) {
  for (const std::string text : {"你好，世界！", "我们今天学习分词器。", "繁體中文與简体中文混合 🙂"}) {
    CHECK(t.decode(t.encode(text)) == text);
  }
}

}  // namespace

TEST_CASE("GGUF llama (SPM) vocabulary: llama-spm vectors") {
  const auto t = load_tokenizer(build_data("llamacpp-vocab/ggml-vocab-llama-spm.gguf"));
  CHECK(t->kind() == "gguf-llama");
  CHECK(t->vocab_size() == 32000);
  CHECK(t->bos_id() == 1);
  CHECK(t->eos_ids() == std::vector<int>{2});
  CHECK(t->encode("Hello world", true) == std::vector<int>{1, 15043, 3186});
  const auto vectors = read_vectors("ggml-vocab-llama-spm.gguf");
  CHECK(count_exact(*t, vectors, "llama-spm (GGUF)") == 46);
  CHECK(round_trip_failures(*t, vectors).empty());
  check_chinese_round_trip(*t);
  // Control tokens in text are single ids only when parse_special is set.
  CHECK(t->encode("</s>", false, true) == std::vector<int>{2});
  CHECK(t->encode("</s>", false, false) != std::vector<int>{2});
}

TEST_CASE("GGUF llama (SPM) vocabulary: phi-3 vectors") {
  const auto t = load_tokenizer(build_data("llamacpp-vocab/ggml-vocab-phi-3.gguf"));
  CHECK(t->vocab_size() == 32064);
  CHECK(t->eos_ids().front() == 32000);
  const auto vectors = read_vectors("ggml-vocab-phi-3.gguf");
  CHECK(count_exact(*t, vectors, "phi-3 (GGUF)") == 46);
  CHECK(round_trip_failures(*t, vectors).empty());
  check_chinese_round_trip(*t);
  CHECK(t->encode("<|endoftext|>", false, true) == std::vector<int>{32000});
  CHECK(t->token_bytes(32000, 5, false) == "<|endoftext|>");
  CHECK(t->token_bytes(32000, 5, true) == "");
}

TEST_CASE("GGUF gpt2 (byte-level BPE) vocabulary: gpt-2 vectors") {
  const auto t = load_tokenizer(build_data("llamacpp-vocab/ggml-vocab-gpt-2.gguf"));
  CHECK(t->kind() == "gguf-gpt2");
  CHECK(t->vocab_size() == 50257);
  CHECK(t->encode("Hello world") == std::vector<int>{15496, 995});
  CHECK(t->piece(995) == "\xC4\xA0world");  // "Ġworld"
  CHECK(t->token_bytes(995, 15496) == " world");
  const auto vectors = read_vectors("ggml-vocab-gpt-2.gguf");
  CHECK(count_exact(*t, vectors, "gpt-2 (GGUF)") == 46);
  CHECK(round_trip_failures(*t, vectors).empty());
  check_chinese_round_trip(*t);
}
