#include "cli/backend_select.h"

#include "core/error.h"
#include "reference/cpu_backend.h"
#if defined(JOURNEY_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace journey::cli {

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, int threads) {
  if (device == "cpu") return make_cpu_backend(model, CpuOptions{.threads = threads});
  if (device == "cuda") {
#if defined(JOURNEY_HAVE_CUDA)
    if (cuda_device_count() == 0) fail("--device cuda: no CUDA device visible (cudaGetDeviceCount found none)");
    return make_cuda_backend(model, CudaOptions{});
#else
    fail("--device cuda: journey was built without CUDA (JOURNEY_CUDA=OFF); rebuild with -DJOURNEY_CUDA=ON");
#endif
  }
  fail("--device: expected \"cpu\" or \"cuda\", found \"", device, "\"");
}

const char* device_flag_help() {
#if defined(JOURNEY_HAVE_CUDA)
  return "where to run: cpu (the reference) or cuda (bf16 weights on GPU 0)";
#else
  return "where to run: cpu (this build has no CUDA; cuda needs -DJOURNEY_CUDA=ON)";
#endif
}

}  // namespace journey::cli
