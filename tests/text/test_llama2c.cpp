// llama2.c's tokenizer.bin with run.c's encode algorithm, against llama2.c's own test.c vectors and
// the stories260K prompt encodings of EXPECTED.md (an independent re-implementation of run.c).
#include <doctest/doctest.h>

#include <cstring>

#include "core/error.h"
#include "text/tokenizer.h"
#include "text/vectors.h"

using namespace journey;
using namespace journey::test;

TEST_CASE("tok512.bin (vocab 512) encodes like run.c") {
  const auto t = load_llama2c_tokenizer(source_data("stories260K/tok512.bin"), 512);
  CHECK(t->kind() == "llama2c");
  CHECK(t->vocab_size() == 512);
  CHECK(t->encode("", true) == std::vector<int>{1});
  CHECK(t->encode("Once upon a time", true) == std::vector<int>{1, 403, 407, 261, 378});
  CHECK(t->encode("Hello world", true) == std::vector<int>{1, 346, 306, 414, 263, 304, 341});
  CHECK(t->encode("naïve café 😀", true) ==
        std::vector<int>{1, 297, 412, 198, 178, 360, 280, 412, 431, 485, 410, 243, 162, 155, 131});
  // run.c's decode: the leading space goes after BOS, <0xHH> pieces become bytes.
  CHECK(t->decode({1, 403, 407, 261, 378}) == "Once upon a time");
  CHECK(t->decode({1, 297, 412, 198, 178, 360, 280, 412, 431, 485, 410, 243, 162, 155, 131}) == "naïve café 😀");
}

TEST_CASE("load_tokenizer reads a .bin to its end when no vocab size is given") {
  const auto t = load_tokenizer(source_data("stories260K/tok512.bin"));
  CHECK(t->vocab_size() == 512);
  CHECK(t->encode("Once upon a time") == std::vector<int>{403, 407, 261, 378});
}

TEST_CASE("Llama 2 tokenizer.bin matches llama2.c's test.c vectors and llama.cpp's llama-spm vectors") {
  const auto t = load_llama2c_tokenizer(build_data("llama2/tokenizer.bin"), 32000);
  CHECK(t->encode("I believe the meaning of life is", true) == std::vector<int>{1, 306, 4658, 278, 6593, 310, 2834, 338});
  CHECK(t->encode("Simply put, the theory of relativity states that ", true) ==
        std::vector<int>{1, 3439, 17632, 1925, 29892, 278, 6368, 310, 14215, 537, 5922, 393, 29871});
  CHECK(t->encode("Translate English to French:\n\n        sea otter => loutre de mer\n        peppermint => menthe "
                  "poivrée\n        plush girafe => girafe peluche\n        cheese =>", true) ==
        std::vector<int>{1, 4103, 9632, 4223, 304, 5176, 29901, 13, 13, 4706, 7205, 4932, 357, 1149, 301, 449, 276,
                         316, 2778, 13, 4706, 1236, 407, 837, 524, 1149, 6042, 354, 772, 440, 29878, 1318, 13, 4706,
                         715, 1878, 330, 3055, 1725, 1149, 330, 3055, 1725, 4639, 28754, 13, 4706, 923, 968, 1149});
  const auto vectors = read_vectors("ggml-vocab-llama-spm.gguf");
  CHECK(count_exact(*t, vectors, "llama-spm via llama2.c tokenizer.bin") == static_cast<int>(vectors.size()));
  CHECK(round_trip_failures(*t, vectors).empty());
}

TEST_CASE("a damaged tokenizer.bin is an error that names the file and the token") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "journey_test_llama2c";
  std::filesystem::create_directories(dir);
  const std::string good = read_file(source_data("stories260K/tok512.bin"));
  {
    std::ofstream(dir / "truncated.bin", std::ios::binary) << good.substr(0, good.size() - 3);
  }
  CHECK_THROWS_WITH_AS(load_llama2c_tokenizer(dir / "truncated.bin", 512),
                       doctest::Contains("truncated.bin: ends inside"), journey::Error);
  CHECK_THROWS_WITH_AS(load_llama2c_tokenizer(source_data("stories260K/tok512.bin"), 600),
                       doctest::Contains("of the expected 600"), journey::Error);
  {
    std::string bad = good;
    const int32_t huge = 1 << 20;
    std::memcpy(bad.data(), &huge, 4);
    std::ofstream(dir / "bad_header.bin", std::ios::binary) << bad;
  }
  CHECK_THROWS_WITH_AS(load_llama2c_tokenizer(dir / "bad_header.bin"), doctest::Contains("max_token_length"),
                       journey::Error);
  std::filesystem::remove_all(dir);
}
