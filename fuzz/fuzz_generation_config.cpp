// generation_config.json: BOS/EOS ids and the sampling defaults a model ships.
#include <cstdint>

#include "assets/hf_config.h"
#include "fuzz/fuzz_input.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("generation_config.json", data, size);
  fuzz::expect_only_journey_errors("read_generation_config", [&] { (void)read_generation_config(path); });
  return 0;
}
