// A trace dump as journey-trace and the tests read it: manifest.json (first part of the input)
// and one .npy tensor (the part after "\n--\n").
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "trace/manifest.h"
#include "trace/npy.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_input(data, size);
  const std::string_view manifest = parts.first, npy = parts.second;  // (clang 14 lambdas cannot capture bindings)
  const auto manifest_path = fuzz::write_file("manifest.json", manifest);
  fuzz::expect_only_journey_errors("read_manifest", [&] { (void)read_manifest(manifest_path); });
  const auto npy_path = fuzz::write_file("tensor.npy", npy.empty() ? manifest : npy);
  fuzz::expect_only_journey_errors("read_npy", [&] {
    NpyArray a = read_npy(npy_path);
    // An accepted array holds exactly the elements its shape names (counted without overflow).
    uint64_t elements = 1;
    for (int64_t d : a.shape)
      if (d < 0 || __builtin_mul_overflow(elements, uint64_t(d), &elements)) std::abort();
    if (elements != (a.dtype == NpyDType::F32 ? a.f32.size() : a.i32.size())) std::abort();
  });
  return 0;
}
