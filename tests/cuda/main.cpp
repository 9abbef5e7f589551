// The CUDA tests' entry point: with no visible device, say so and exit 77 (ctest SKIP_RETURN_CODE),
// so a machine without a GPU reports "Skipped" instead of a pass that tested nothing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "cuda/cuda_backend.h"

int main(int argc, char** argv) {
  if (journey::cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible (cudaGetDeviceCount found none); the CUDA tests need a GPU.\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
