// Byte-level BPE from Hugging Face tokenizer.json files (Llama 3, Qwen2.5, Qwen3) against the
// llama.cpp vectors made with Hugging Face's own tokenizers for the same vocabularies.
#include <doctest/doctest.h>

#include <algorithm>

#include "text/tokenizer.h"
#include "text/vectors.h"

using namespace journey;
using namespace journey::test;

namespace {

const Tokenizer& llama3() {
  static const auto t = load_tokenizer(build_data("hf/llama3-instruct"));
  return *t;
}
const Tokenizer& qwen25() {
  static const auto t = load_tokenizer(build_data("hf/qwen2.5-instruct"));
  return *t;
}
const Tokenizer& qwen3() {
  static const auto t = load_tokenizer(build_data("hf/qwen3"));
  return *t;
}

const std::vector<std::string> kChinese = {
    "你好，世界！", "我们今天学习分词器。", "北京欢迎你 2024 年", "繁體中文與简体中文混合",
};

void check_round_trip(const Tokenizer& t, const std::vector<Vector>& vectors) {
  const auto failures = round_trip_failures(t, vectors);
  for (const auto& text : failures) MESSAGE("no round trip: \"", text, "\"");
  CHECK(failures.empty());
  for (const std::string& text : kChinese) CHECK(t.decode(t.encode(text)) == text);
}

}  // namespace

TEST_CASE("Llama 3 tokenizer.json: llama-bpe vectors") {
  const Tokenizer& t = llama3();
  CHECK(t.kind() == "bpe");
  CHECK(t.vocab_size() == 128256);
  CHECK(t.bos_id() == 128000);
  CHECK(t.eos_ids() == std::vector<int>{128001});
  const auto vectors = read_vectors("ggml-vocab-llama-bpe.gguf");
  CHECK(count_exact(t, vectors, "llama-bpe (Llama 3 tokenizer.json)") == 46);
  check_round_trip(t, vectors);
  // BOS is added with add_special (tokenizer_config.json names it; the file's post-processor does not add it).
  CHECK(t.encode("Hello", true).front() == 128000);
  const std::vector<int> header = t.encode("<|start_header_id|>user<|end_header_id|>");
  CHECK(header.front() == 128006);
  CHECK(header.back() == 128007);
}

TEST_CASE("Qwen2.5 tokenizer.json: qwen2 and deepseek-r1-qwen vectors") {
  const Tokenizer& t = qwen25();
  CHECK(t.vocab_size() == 151665);
  CHECK_FALSE(t.bos_id().has_value());
  CHECK(t.eos_ids() == std::vector<int>{151645});
  const auto qwen2 = read_vectors("ggml-vocab-qwen2.gguf");
  CHECK(count_exact(t, qwen2, "qwen2 (Qwen2.5 tokenizer.json)") == 46);
  const auto deepseek = read_vectors("ggml-vocab-deepseek-r1-qwen.gguf");
  CHECK(count_exact(t, deepseek, "deepseek-r1-qwen (Qwen2.5 tokenizer.json)") == 46);
  check_round_trip(t, qwen2);
  CHECK(t.encode("Hello", true) == t.encode("Hello"));  // Qwen adds no BOS
}

TEST_CASE("Qwen3 tokenizer.json (merges as [a, b] pairs): qwen2 vectors") {
  const Tokenizer& t = qwen3();
  CHECK(t.vocab_size() == 151669);
  const auto vectors = read_vectors("ggml-vocab-qwen2.gguf");
  CHECK(count_exact(t, vectors, "qwen2 (Qwen3 tokenizer.json)") == 46);
  check_round_trip(t, vectors);
  CHECK(t.encode("<think>") == std::vector<int>{151667});  // a non-special added token is matched always
}

TEST_CASE("special tokens inside text with the Qwen tokenizer") {
  const Tokenizer& t = qwen25();
  const std::vector<int> ids = t.encode("<|im_start|>user\nHi<|im_end|>");
  REQUIRE(ids.size() >= 3);
  CHECK(ids.front() == 151644);
  CHECK(ids[1] == *t.token_id("user"));
  CHECK(ids.back() == 151645);
  CHECK(t.is_special(151644));
  // With parse_special off the marker is ordinary text.
  const std::vector<int> plain = t.encode("<|im_start|>user", false, false);
  CHECK(std::find(plain.begin(), plain.end(), 151644) == plain.end());
  CHECK(t.decode(plain) == "<|im_start|>user");
  // Decoding: special tokens vanish unless asked for.
  CHECK(t.decode(ids) == "user\nHi");
  CHECK(t.decode(ids, false) == "<|im_start|>user\nHi<|im_end|>");
}

TEST_CASE("NFC normalization applies before Qwen's BPE") {
  const Tokenizer& t = qwen25();
  // "e" + combining acute (NFD) encodes exactly like the precomposed "é" (NFC).
  CHECK(t.encode("caf\x65\xCC\x81") == t.encode("caf\xC3\xA9"));
}

TEST_CASE("streaming decode of byte-level BPE never splits a character") {
  const Tokenizer& t = llama3();
  const std::string text = "流式输出中文 🙂 and emoji 👨‍👩‍👧";
  const std::vector<int> ids = t.encode(text);
  IncrementalDetokenizer stream(t);
  std::string joined;
  int chunks_held_back = 0;
  for (int id : ids) {
    const std::string bytes = t.token_bytes(id, -1);
    const std::string chunk = stream.push(id);
    if (chunk.size() != bytes.size()) ++chunks_held_back;
    joined += chunk;
  }
  joined += stream.flush();
  CHECK(joined == text);
  CHECK(chunks_held_back > 0);  // some token did end inside a character
}
