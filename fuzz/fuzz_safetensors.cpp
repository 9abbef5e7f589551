// safetensors: the 8-byte length, the JSON header (names, dtypes, shapes, offsets), and every
// tensor's bytes touched at both ends.
#include <cstdint>

#include "assets/safetensors.h"
#include "fuzz/fuzz_input.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("model.safetensors", data, size);
  fuzz::expect_only_journey_errors("read_safetensors", [&] {
    WeightStore store;
    (void)read_safetensors(path, store);
    unsigned sum = 0;
    for (const auto& [name, t] : store.all())
      if (t.nbytes > 0) sum += unsigned(t.data[0]) + unsigned(t.data[t.nbytes - 1]);
    (void)sum;
  });
  return 0;
}
