// tokenizer.model: a SentencePiece model protobuf (read by libsentencepiece), then encoding and
// decoding through journey's wrapper.
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "text/loaders.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("tokenizer.model", data, size);
  fuzz::expect_only_journey_errors("load_sentencepiece_tokenizer", [&] {
    auto tokenizer = load_sentencepiece_tokenizer(path, TokenizerConfig{});
    fuzz::exercise_tokenizer(*tokenizer, "Once upon a time");
  });
  return 0;
}
