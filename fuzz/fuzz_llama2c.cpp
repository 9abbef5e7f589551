// llama2.c checkpoints: the legacy header, "ak42" v1 (float32) and v2 (int8 groups); the header
// alone (with_weights = false) and the full read, every tensor touched at both ends.
#include <cstdint>

#include "assets/llama2c.h"
#include "fuzz/fuzz_input.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("model.bin", data, size);
  fuzz::expect_only_journey_errors("is_llama2c_file", [&] { (void)is_llama2c_file(path); });
  fuzz::expect_only_journey_errors("read_llama2c(header)", [&] { (void)read_llama2c(path, false); });
  fuzz::expect_only_journey_errors("read_llama2c", [&] {
    Llama2cCheckpoint c = read_llama2c(path, true);
    unsigned sum = 0;
    for (const auto& [name, t] : c.weights.all())
      if (t.nbytes > 0) sum += unsigned(t.data[0]) + unsigned(t.data[t.nbytes - 1]);
    (void)sum;
  });
  return 0;
}
