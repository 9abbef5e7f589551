// load_tokenizer on paths that hold no tokenizer, or a damaged one: clear errors, no crash.
#include <doctest/doctest.h>

#include <fstream>

#include "core/error.h"
#include "text/tokenizer.h"
#include "text/vectors.h"

using namespace journey;
using namespace journey::test;

namespace {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) : path(std::filesystem::temp_directory_path() / name) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
  }
};

}  // namespace

TEST_CASE("a directory without tokenizer files lists what was looked for") {
  TempDir dir("journey_tok_empty");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path),
                       doctest::Contains("looked for tokenizer.json (Hugging Face), tokenizer.model (SentencePiece)"),
                       journey::Error);
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path / "nope"), doctest::Contains("does not exist"), journey::Error);
}

TEST_CASE("a tokenizer-only directory with tokenizer.model and tokenizer_config.json") {
  TempDir dir("journey_tok_sp");
  std::filesystem::copy_file(source_data("stories260K/tok512.model"), dir.path / "tokenizer.model");
  // The config renames nothing but turns BOS off: add_special then adds nothing.
  dir.write("tokenizer_config.json", R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": false})");
  const auto t = load_tokenizer(dir.path);
  CHECK(t->bos_id() == 1);
  CHECK(t->encode("Once upon a time", true) == std::vector<int>{403, 407, 261, 378});
  dir.write("tokenizer_config.json", R"({"bos_token": "<nope>"})");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path), doctest::Contains("bos_token \"<nope>\""), journey::Error);
  dir.write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path), doctest::Contains("\"add_bos_token\": expected true/false"),
                       journey::Error);
  dir.write("tokenizer_config.json", "{ not json");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path), doctest::Contains("tokenizer_config.json: not valid JSON"),
                       journey::Error);
}

TEST_CASE("damaged tokenizer.json and tokenizer.model") {
  TempDir dir("journey_tok_bad");
  dir.write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path), doctest::Contains("model type \"Unigram\" is not supported"),
                       journey::Error);
  dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path), doctest::Contains("merge 0 (\"a\" \"b\")"), journey::Error);
  dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
    "pre_tokenizer": {"type": "BertPreTokenizer"}})");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path), doctest::Contains("pre-tokenizer type \"BertPreTokenizer\""),
                       journey::Error);
  std::filesystem::remove(dir.path / "tokenizer.json");
  dir.write("tokenizer.model", "definitely not a protobuf");
  CHECK_THROWS_AS(load_tokenizer(dir.path), journey::Error);
}

TEST_CASE("token ids outside the vocabulary are errors, not garbage") {
  const auto t = load_tokenizer(source_data("stories260K/tok512.model"));
  CHECK_THROWS_AS(t->token_bytes(512, -1), journey::Error);
  CHECK_THROWS_AS(t->piece(-1), journey::Error);
  const auto bin = load_tokenizer(source_data("stories260K/tok512.bin"));
  CHECK_THROWS_WITH_AS(bin->token_bytes(9999, -1), doctest::Contains("outside the vocabulary"), journey::Error);
}

TEST_CASE("a tiny hand-written tokenizer.json exercises merges, byte fallback and metaspace decoding") {
  // Llama-2-style (non-byte-level) BPE: spaces become "▁" by normalizer, unknown characters fall
  // back to <0xHH> pieces. Expected ids are worked out by hand from the merge list.
  TempDir dir("journey_tok_tiny");
  dir.write("tokenizer.json", R"({
    "added_tokens": [{"id": 0, "content": "<s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": null,
      "vocab": {"<s>": 0, "<0xC3>": 1, "<0xA9>": 2, "▁": 3, "a": 4, "b": 5, "▁a": 6, "ab": 7, "▁ab": 8},
      "merges": ["a b", "▁ a", "▁ ab"]}
  })");
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  const auto t = load_tokenizer(dir.path);
  // "ab ab": "▁ab▁ab" -> a+b first (rank 0) -> ▁ ab -> merge "▁ ab" (rank 2) -> [8, 8]
  CHECK(t->encode("ab ab") == std::vector<int>{8, 8});
  // "aé": "▁aé" -> "▁ a" (rank 1) -> ▁a, é via bytes C3 A9 -> [6, 1, 2]
  CHECK(t->encode("aé") == std::vector<int>{6, 1, 2});
  CHECK(t->encode("aé", true) == std::vector<int>{0, 6, 1, 2});
  CHECK(t->decode({0, 6, 1, 2}) == "aé");
  CHECK(t->decode({8, 8}) == "ab ab");
}
