// config.json: the Hugging Face model config (architecture, sizes, RoPE, biases, EOS ids).
#include <cstdint>

#include "assets/hf_config.h"
#include "fuzz/fuzz_input.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("config.json", data, size);
  fuzz::expect_only_journey_errors("read_hf_config", [&] {
    std::vector<std::string> notes;
    (void)read_hf_config(path, &notes);
  });
  return 0;
}
