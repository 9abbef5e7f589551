// Helpers of the CUDA tests: device arrays with SENTINELS on both sides (a kernel that writes one
// element too far changes a sentinel and the test says so) and random inputs. Errors are measured
// with journey::nmse (core/numeric.h), the normalized squared error of llama.cpp's test-backend-ops.
#pragma once
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"

namespace cudatest {

// Every test starts with this: without a device there is nothing to test (main() already exits 77;
// this keeps a single test case honest when run on its own).
#define SKIP_WITHOUT_CUDA_DEVICE()                                            \
  do {                                                                         \
    if (journey::cuda_device_count() == 0) {                                   \
      MESSAGE("SKIPPED: no CUDA device visible");                              \
      return;                                                                  \
    }                                                                          \
  } while (0)

constexpr size_t kPad = 64;  // sentinel elements on each side

// A device array of n elements of T between two runs of kPad sentinel elements.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n, T sentinel = sentinel_value()) : n_(n), sentinel_(sentinel) {
    JOURNEY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), (n + 2 * kPad) * sizeof(T)));
    std::vector<T> init(n + 2 * kPad, sentinel);
    JOURNEY_CUDA_CHECK(cudaMemcpy(base_, init.data(), init.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) { upload(values); }
  ~DeviceArray() { cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return base_ + kPad; }
  void upload(const std::vector<T>& values) {
    REQUIRE(values.size() == n_);
    JOURNEY_CUDA_CHECK(cudaMemcpy(get(), values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    JOURNEY_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> out(n_);
    JOURNEY_CUDA_CHECK(cudaMemcpy(out.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  // True when no element outside [0, n) was written.
  bool sentinels_intact() const {
    JOURNEY_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> all(n_ + 2 * kPad);
    JOURNEY_CUDA_CHECK(cudaMemcpy(all.data(), base_, all.size() * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < kPad; ++i)
      if (std::memcmp(&all[i], &sentinel_, sizeof(T)) != 0 || std::memcmp(&all[kPad + n_ + i], &sentinel_, sizeof(T)) != 0)
        return false;
    return true;
  }

 private:
  static T sentinel_value() {
    if constexpr (std::is_same_v<T, float>) return -12345.678f;
    else return T(0x5a5a);
  }
  size_t n_;
  T sentinel_;
  T* base_ = nullptr;
};

inline std::vector<float> random_vector(size_t n, uint32_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, stddev);
  std::vector<float> out(n);
  for (float& v : out) v = normal(rng);
  return out;
}

// Host copies of weights in a narrow type: the bits the device gets, and their exact f32 values
// (what the reference must multiply by, so the comparison measures only the kernel's arithmetic).
struct NarrowWeights {
  std::vector<uint16_t> bits;
  std::vector<float> widened;
};
inline NarrowWeights narrow(const std::vector<float>& values, journey::DType type) {
  NarrowWeights out;
  for (float v : values) {
    const uint16_t b = type == journey::DType::BF16 ? journey::f32_to_bf16(v) : journey::f32_to_f16(v);
    out.bits.push_back(b);
    out.widened.push_back(type == journey::DType::BF16 ? journey::bf16_to_f32(b) : journey::f16_to_f32(b));
  }
  return out;
}

}  // namespace cudatest
