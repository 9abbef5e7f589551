// SentencePiece models through libsentencepiece: stories260K's tok512.model and Llama 2's
// tokenizer.model, against vectors made by other implementations (llama2.c's test.c, an independent
// re-implementation of run.c for stories260K, and Hugging Face's Llama tokenizer for llama.cpp's set).
#include <doctest/doctest.h>

#include "text/vectors.h"
#include "text/tokenizer.h"

using namespace journey;
using namespace journey::test;

namespace {

const Tokenizer& tok512() {
  static const auto tokenizer = load_tokenizer(source_data("stories260K/tok512.model"));
  return *tokenizer;
}
const Tokenizer& llama2() {
  static const auto tokenizer = load_tokenizer(build_data("llama2/tokenizer.model"));
  return *tokenizer;
}

std::vector<int> read_ids(const std::filesystem::path& path) {
  std::istringstream in(read_file(path));
  std::vector<int> ids;
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

}  // namespace

TEST_CASE("tok512.model encodes the stories260K reference prompts (EXPECTED.md section 2)") {
  const Tokenizer& t = tok512();
  CHECK(t.kind() == "sentencepiece");
  CHECK(t.vocab_size() == 512);
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_ids() == std::vector<int>{2});
  CHECK(t.encode("Once upon a time") == std::vector<int>{403, 407, 261, 378});
  CHECK(t.encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
  CHECK(t.encode("", true) == std::vector<int>{1});
  CHECK(t.encode("Hello world") == std::vector<int>{346, 306, 414, 263, 304, 341});
  CHECK(t.encode("Once upon a time, there was a little girl named Lily.") ==
        std::vector<int>{403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426});
  // Byte fallback: ï, é and 😀 are not pieces, so they become <0xHH> pieces (id = byte + 3).
  CHECK(t.encode("naïve café 😀") ==
        std::vector<int>{297, 412, 198, 178, 360, 280, 412, 431, 485, 410, 243, 162, 155, 131});
}

TEST_CASE("tok512.model decodes llama2.c's greedy stories260K output byte for byte") {
  // test_all.py's expected stdout for `run stories260K.bin -z tok512.bin -t 0.0 -n 200` (llama2.c,
  // MIT); the ids are the 200 greedy tokens (EXPECTED.md section 2), decoded after BOS.
  const std::string expected =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
      "a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said, \"Lily, let's go to the "
      "park.\" Lily was sad and didn't know what to do. She said, \"I want to play with your ball, but I can't find "
      "it.\"\nLily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what to do.\"\n"
      "Lily didn't want to help her mom, so she";
  std::vector<int> ids = read_ids(source_data("stories260K/greedy_256_ids.txt"));
  REQUIRE(ids.size() == 256);
  ids.resize(200);
  ids.insert(ids.begin(), 1);  // generation starts from BOS
  CHECK(tok512().decode(ids) == expected);
  // token_bytes: the first piece after BOS loses its leading space; later ones keep it.
  CHECK(tok512().token_bytes(403, 1) == "Once");
  CHECK(tok512().token_bytes(403, -1) == "Once");
  CHECK(tok512().token_bytes(407, 403) == " upon");
  CHECK(tok512().piece(407) == "\xE2\x96\x81upon");
  CHECK(tok512().token_bytes(1, -1, false) == "<s>");
  CHECK(tok512().token_bytes(1, -1, true) == "");
}

TEST_CASE("Llama 2 tokenizer.model matches llama2.c's test.c vectors") {
  const Tokenizer& t = llama2();
  CHECK(t.vocab_size() == 32000);
  CHECK(t.encode("", true) == std::vector<int>{1});
  CHECK(t.encode("I believe the meaning of life is", true) == std::vector<int>{1, 306, 4658, 278, 6593, 310, 2834, 338});
  CHECK(t.encode("Simply put, the theory of relativity states that ", true) ==
        std::vector<int>{1, 3439, 17632, 1925, 29892, 278, 6368, 310, 14215, 537, 5922, 393, 29871});
  CHECK(t.encode("A brief message congratulating the team on the launch:\n\n        Hi everyone,\n\n        I just ", true) ==
        std::vector<int>{1, 319, 11473, 2643, 378, 629, 271, 18099, 278, 3815, 373, 278, 6826, 29901, 13, 13, 4706,
                         6324, 14332, 29892, 13, 13, 4706, 306, 925, 29871});
  CHECK(t.encode("Translate English to French:\n\n        sea otter => loutre de mer\n        peppermint => menthe "
                 "poivrée\n        plush girafe => girafe peluche\n        cheese =>", true) ==
        std::vector<int>{1, 4103, 9632, 4223, 304, 5176, 29901, 13, 13, 4706, 7205, 4932, 357, 1149, 301, 449, 276,
                         316, 2778, 13, 4706, 1236, 407, 837, 524, 1149, 6042, 354, 772, 440, 29878, 1318, 13, 4706,
                         715, 1878, 330, 3055, 1725, 1149, 330, 3055, 1725, 4639, 28754, 13, 4706, 923, 968, 1149});
}

TEST_CASE("Llama 2 tokenizer.model matches llama.cpp's llama-spm vectors") {
  const auto vectors = read_vectors("ggml-vocab-llama-spm.gguf");
  REQUIRE(vectors.size() == 46);
  CHECK(count_exact(llama2(), vectors, "llama-spm via libsentencepiece") == 46);
  // SentencePiece round trip: decode(encode(x)) == x for all but strings SentencePiece itself
  // changes (none in this set: the model's normalizer is "identity").
  const auto failures = round_trip_failures(llama2(), vectors);
  for (const auto& text : failures) MESSAGE("no round trip: \"", text, "\"");
  CHECK(failures.empty());
}

TEST_CASE("Llama 2 SentencePiece encodes CJK as byte pieces and streams them as whole characters") {
  const Tokenizer& t = llama2();
  const std::string text = "你好，世界。我们在学习分词。";
  const std::vector<int> ids = t.encode(text);
  bool has_byte_piece = false;
  for (int id : ids) has_byte_piece = has_byte_piece || t.piece(id).rfind("<0x", 0) == 0;
  CHECK(has_byte_piece);  // at least one character is not a piece: the streaming test needs split characters
  CHECK(t.decode(ids) == text);

  IncrementalDetokenizer stream(t);
  std::string joined;
  for (int id : ids) {
    const std::string chunk = stream.push(id);
    // Every chunk is whole UTF-8 characters.
    for (size_t pos = 0; pos < chunk.size();) {
      const auto lead = static_cast<unsigned char>(chunk[pos]);
      const int n = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
      REQUIRE(pos + n <= chunk.size());
      pos += n;
    }
    joined += chunk;
  }
  joined += stream.flush();
  CHECK(joined == t.decode(ids));
}

TEST_CASE("special tokens in text with SentencePiece") {
  const Tokenizer& t = llama2();
  // Without a tokenizer_config.json the model's control pieces (<s>, </s>) are the special tokens.
  CHECK(t.encode("<s>Hi", false, true).front() == 1);
  CHECK(t.encode("<s>Hi", false, false).front() != 1);
  CHECK(t.is_special(1));
  CHECK(t.token_id("\xE2\x96\x81the") == 278);
  CHECK_FALSE(t.token_id("not a piece at all").has_value());
}
