#include "cli/backend_select.h"

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "reference/reference_backend.h"
#if defined(JOURNEY_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace journey::cli {

std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, int threads) {
  if (device == "reference") return make_reference_backend(model);
  if (device == "cpu") return make_cpu_backend(model, CpuOptions{.threads = threads});
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
#if defined(JOURNEY_HAVE_CUDA)
    CudaOptions options;  // bf16 weights unless "cuda:f32" / "cuda:f16"
    const std::string type = device == "cuda" ? "bf16" : device.substr(5);
    if (type == "f32") options.dtype = DType::F32;
    else if (type == "f16") options.dtype = DType::F16;
    else if (type != "bf16") fail("--device ", device, ": the weight type after \"cuda:\" must be bf16, f16 or f32");
    if (cuda_device_count() == 0) fail("--device ", device, ": no CUDA device visible (cudaGetDeviceCount found none)");
    return make_cuda_backend(model, options);
#else
    fail("--device ", device, ": journey was built without CUDA (JOURNEY_CUDA=OFF); rebuild with -DJOURNEY_CUDA=ON");
#endif
  }
  fail("--device: expected reference, cpu, cuda, cuda:bf16, cuda:f16 or cuda:f32, found \"", device, "\"");
}

const char* device_flag_help() {
#if defined(JOURNEY_HAVE_CUDA)
  return "where to run: cpu (fast, the default), reference (the literal path the chapters teach), cuda (bf16 "
         "weights on GPU 0), cuda:f16 or cuda:f32";
#else
  return "where to run: cpu (fast, the default) or reference (the literal path the chapters teach); this build has "
         "no CUDA (cuda needs -DJOURNEY_CUDA=ON)";
#endif
}

}  // namespace journey::cli
