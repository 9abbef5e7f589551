// llama2.c tokenizer.bin: max token length, then (score, length, bytes) per token.
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "text/tokenizer.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("tokenizer.bin", data, size);
  fuzz::expect_only_journey_errors("load_llama2c_tokenizer", [&] {
    auto tokenizer = load_llama2c_tokenizer(path);
    fuzz::exercise_tokenizer(*tokenizer, "Once upon a time");
  });
  return 0;
}
