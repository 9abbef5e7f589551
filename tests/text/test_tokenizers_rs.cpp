// journey's byte-level BPE against the Rust `tokenizers` library (Hugging Face's own
// implementation) on the shipped tokenizer.json files, over 3056 strings: the seeds' sentences
// (北京今天下雨吗？ 我喜欢编程 ...), llama.cpp's edge cases and mixtures of many scripts, emoji,
// digits, whitespace runs, combining accents and special-token text. The vectors were written by
// tools/python/make_tokenizer_vectors.py (encode(text, add_special_tokens=False), which matches
// special tokens in the text: parse_special here); ctest text.tokenizers_rs_vectors checks they
// are still the pinned library's answers.
#include <doctest/doctest.h>

#include <algorithm>

#include "text/tokenizer.h"
#include "text/vectors.h"

using namespace journey;
using namespace journey::test;

namespace {

std::vector<Vector> vectors_for(const std::string& name) {
  return read_vectors_from(build_data("tokenizers-rs/strings.inp"), build_data("tokenizers-rs/" + name + ".out"),
                           "tokenizers-rs/" + name);
}

void check_all_exact(const std::string& name) {
  const auto tokenizer = load_tokenizer(build_data("hf/" + name));
  const auto vectors = vectors_for(name);
  REQUIRE(vectors.size() == 3056);
  CHECK(count_exact(*tokenizer, vectors, name + " vs tokenizers-rs", /*parse_special=*/true) ==
        static_cast<int>(vectors.size()));
}

}  // namespace

TEST_CASE("tokenizers-rs: Llama 3 tokenizer.json, 3056 strings") { check_all_exact("llama3-instruct"); }
TEST_CASE("tokenizers-rs: Qwen2.5 tokenizer.json, 3056 strings") { check_all_exact("qwen2.5-instruct"); }
TEST_CASE("tokenizers-rs: Qwen3 tokenizer.json, 3056 strings") { check_all_exact("qwen3"); }

TEST_CASE("tokenizers-rs: the seeds' Chinese sentences, id for id") {
  const auto vectors = vectors_for("qwen2.5-instruct");
  const auto tokenizer = load_tokenizer(build_data("hf/qwen2.5-instruct"));
  for (const std::string text : {"北京今天下雨吗？", "我喜欢编程", "北京今天下雨吗？ 我喜欢编程"}) {
    const auto it = std::find_if(vectors.begin(), vectors.end(), [&](const Vector& v) { return v.text == text; });
    REQUIRE_MESSAGE(it != vectors.end(), "\"", text, "\" is not among the vectors");
    CHECK_MESSAGE(tokenizer->encode(text, false, true) == it->ids, text, ": ", ids_text(it->ids));
  }
}
