// The parts of the CUDA backend that must work WITHOUT a GPU, so they run on every machine that
// compiles CUDA (CI included): asking for devices never throws, a backend on a machine with no
// device fails with a clear journey::Error instead of crashing, and the launchers reject bad
// arguments before they touch the device.
#include <doctest/doctest.h>

#include <fstream>
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
  CHECK_THROWS_WITH_AS(cuda::gemv(cuda::GemvVersion(3), nullptr, nullptr, {nullptr, DType::Q8_0}, nullptr, 32, 4, nullptr),
                       doctest::Contains("q8_0"), Error);
  CHECK_THROWS_WITH_AS(cuda::linear(nullptr, nullptr, {nullptr, DType::BF16}, nullptr, 4, 8, 8, cuda::LinearContext{}),
                       doctest::Contains("cuBLAS handle"), Error);
  CHECK_THROWS_WITH_AS(cuda::paged_attention(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0, 0, 4, 2, 8, nullptr,
                                             nullptr, nullptr),
                       doctest::Contains("block_size"), Error);
}

TEST_CASE("the fast-path launchers reject bad arguments before launching") {
  float y = 0;
  const cuda::LinearTarget five[] = {{&y, {nullptr, DType::BF16}, nullptr, 1}, {&y, {nullptr, DType::BF16}, nullptr, 1},
                                     {&y, {nullptr, DType::BF16}, nullptr, 1}, {&y, {nullptr, DType::BF16}, nullptr, 1},
                                     {&y, {nullptr, DType::BF16}, nullptr, 1}};
  CHECK_THROWS_WITH_AS(cuda::linear_shared_input(nullptr, 1, 8, five, cuda::LinearContext{}),
                       doctest::Contains("5 targets, expected 1 to 4"), Error);
  const cuda::LinearTarget q2k[] = {{&y, {nullptr, DType::Q2_K}, nullptr, 4}};
  CHECK_THROWS_WITH_AS(cuda::linear_shared_input(nullptr, 1, 256, q2k, cuda::LinearContext{}),
                       doctest::Contains("found q2_K"), Error);
  const cuda::LinearTarget q4k[] = {{&y, {nullptr, DType::Q4_K}, nullptr, 4}};
  CHECK_THROWS_WITH_AS(cuda::linear_shared_input(nullptr, 1, 96, q4k, cuda::LinearContext{}),
                       doctest::Contains("rows of 96 weights cannot be stored as q4_K blocks of 256"), Error);
  CHECK_THROWS_WITH_AS(cuda::linear_shared_input(nullptr, 3, 256, q4k, cuda::LinearContext{}),
                       doctest::Contains("cuBLAS handle"), Error);
  CHECK_THROWS_WITH_AS(cuda::rms_norm_swiglu(nullptr, nullptr, nullptr, 1e-5f, {nullptr, DType::Q4_K},
                                             {nullptr, DType::Q6_K}, 256, 4, cuda::LinearContext{}),
                       doctest::Contains("gate is q4_K, up is q6_K"), Error);
  const cuda::LinearTarget empty_rows[] = {{&y, {nullptr, DType::BF16}, nullptr, 0}};
  CHECK_THROWS_WITH_AS(cuda::rms_norm_linear_shared_input(nullptr, nullptr, 1e-5f, 8, empty_rows, cuda::LinearContext{}),
                       doctest::Contains("out = 0"), Error);
  cuda::DecodeBatch batch;  // no device arrays
  batch.S = 1, batch.table_stride = 4;
  CHECK_THROWS_WITH_AS(cuda::paged_attention_decode(nullptr, nullptr, nullptr, nullptr, batch, 16, 4, 2, 8, nullptr),
                       doctest::Contains("device arrays"), Error);
  int64_t position = 0;
  int32_t table = 0;
  batch.positions = &position, batch.block_tables = &table;
  CHECK_THROWS_WITH_AS(cuda::paged_attention_decode(nullptr, nullptr, nullptr, nullptr, batch, 16, 6, 4, 8, nullptr),
                       doctest::Contains("H a multiple of KVH"), Error);
  CHECK_THROWS_WITH_AS(cuda::paged_attention_decode(nullptr, nullptr, nullptr, nullptr, batch, 16, 4, 2, 2048, nullptr),
                       doctest::Contains("head_dim 2048 is too large"), Error);
  CHECK_THROWS_WITH_AS(cuda::rope_kv_cache_write_decode(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                        1e-6f, batch, 16, 4, 2, 7, 1e4, RopeLayout::HalfSplit, nullptr),
                       doctest::Contains("an even D"), Error);
}

namespace {
// Whether a file whose name contains `library` is mapped into this process (/proc/self/maps).
bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(library) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("cuBLAS is opened on first use, not at start, and every entry point journey calls resolves") {
  // Linking it made every run of a CUDA build ~147 MB larger, on the CPU too (cublas_loader.h): the
  // earlier test cases of this binary built a backend on a machine without a device, which must not
  // have opened it either.
  if (!cuda::cublas_loaded()) CHECK_FALSE(mapped("libcublas"));
  const cuda::Cublas& api = cuda::cublas();  // needs no GPU: only the library
  CHECK(cuda::cublas_loaded());
  CHECK(mapped(cuda::cublas_library_name()));
  for (const void* entry : {(const void*)api.create, (const void*)api.destroy, (const void*)api.set_stream,
                            (const void*)api.get_stream, (const void*)api.set_workspace, (const void*)api.gemm_ex,
                            (const void*)api.status_name, (const void*)api.status_string})
    CHECK(entry != nullptr);
  // two calls that need no device: the library answers with its own names
  CHECK(std::string(api.status_name(CUBLAS_STATUS_NOT_INITIALIZED)) == "CUBLAS_STATUS_NOT_INITIALIZED");
  CHECK_THROWS_WITH_AS(cuda::check_cublas(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmEx(...)", "here.cpp", 7),
                       doctest::Contains("CUBLAS_STATUS_INVALID_VALUE"), Error);
}
