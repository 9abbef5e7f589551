// tokenizer.json: byte-level BPE (vocab, merges, added tokens, normalizers, pre-tokenizers,
// decoders), then encoding and decoding with the tokenizer it describes.
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "text/loaders.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("tokenizer.json", data, size);
  fuzz::expect_only_journey_errors("load_hf_tokenizer", [&] {
    auto tokenizer = load_hf_tokenizer(path, TokenizerConfig{});
    fuzz::exercise_tokenizer(*tokenizer, std::string_view(reinterpret_cast<const char*>(data), std::min<size_t>(size, 256)));
  });
  return 0;
}
