// The parts of the CUDA backend that must work WITHOUT a GPU, so they run on every machine that
// compiles CUDA (CI included): asking for devices never throws, a backend on a machine with no
// device fails with a clear journey::Error instead of crashing, and the launchers reject bad
// arguments before they touch the device.
#include <doctest/doctest.h>

#include <string>

#include "assets/model.h"
#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"

using namespace journey;

TEST_CASE("cuda_device_count never throws, and a backend without a device says why") {
  const int devices = cuda_device_count();
  CHECK(devices >= 0);
  if (devices > 0) {
    MESSAGE("a device is visible; the no-device error is not exercised here");
    return;
  }
  LoadedModel model = load_model("tests/golden/models/tiny-llama");
  try {
    make_cuda_backend(model, {});
    FAIL("make_cuda_backend succeeded without a device");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("no CUDA device visible") != std::string::npos);
  }
}

TEST_CASE("launchers reject bad arguments before launching") {
  // odd head_dim, heads not a multiple of kv heads, a quantized weight type, no cuBLAS handle
  CHECK_THROWS_WITH_AS(cuda::rope(nullptr, nullptr, 1, 1, 7, 1e4, RopeLayout::HalfSplit, nullptr),
                       doctest::Contains("odd"), Error);
  CHECK_THROWS_WITH_AS(cuda::attention(nullptr, nullptr, nullptr, nullptr, 1, 0, 6, 4, 8, nullptr, nullptr, nullptr),
                       doctest::Contains("multiple of KVH"), Error);
  CHECK_THROWS_WITH_AS(cuda::gemv(cuda::GemvVersion(3), nullptr, nullptr, nullptr, DType::Q8_0, nullptr, 32, 4, nullptr),
                       doctest::Contains("q8_0"), Error);
  CHECK_THROWS_WITH_AS(cuda::linear(nullptr, nullptr, nullptr, DType::BF16, nullptr, 4, 8, 8, cuda::LinearContext{}),
                       doctest::Contains("cuBLAS handle"), Error);
  CHECK_THROWS_WITH_AS(cuda::paged_attention(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0, 0, 4, 2, 8, nullptr,
                                             nullptr, nullptr),
                       doctest::Contains("block_size"), Error);
}
