// cuBLAS opened on first use (cublas_loader.h says why).
#include "cuda/cublas_loader.h"

#include <dlfcn.h>

#include <atomic>
#include <string>

#include "core/error.h"

namespace journey::cuda {

namespace {

std::atomic<bool> loaded{false};

// Every entry point or an error message, once.
struct Loaded {
  Cublas api{};
  std::string error;  // empty: api is complete
};

template <typename Function>
void resolve(void* library, const char* symbol, Function& into, std::string& error) {
  dlerror();  // clear an older message: the one read below is this lookup's
  into = reinterpret_cast<Function>(dlsym(library, symbol));
  const char* why = dlerror();
  if (into == nullptr && error.empty())
    error = std::string(cublas_library_name()) + " has no " + symbol + " (" + (why ? why : "a null address") +
            "); journey was built with cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) + "." +
            std::to_string(CUBLAS_VER_MINOR) + "'s headers";
}

Loaded open_cublas() {
  Loaded result;
  // RTLD_LOCAL: its symbols stay out of the global scope (nothing else should bind to them)
  void* library = dlopen(cublas_library_name(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    result.error = std::string("cannot open ") + cublas_library_name() + " (cuBLAS, which --device cuda needs): " +
                   (why ? why : "unknown reason") +
                   "; install the CUDA toolkit's cuBLAS or put its lib directory on LD_LIBRARY_PATH";
    return result;
  }
  Cublas& api = result.api;
  resolve(library, "cublasCreate_v2", api.create, result.error);
  resolve(library, "cublasDestroy_v2", api.destroy, result.error);
  resolve(library, "cublasSetStream_v2", api.set_stream, result.error);
  resolve(library, "cublasGetStream_v2", api.get_stream, result.error);
  resolve(library, "cublasSetWorkspace_v2", api.set_workspace, result.error);
  resolve(library, "cublasGemmEx", api.gemm_ex, result.error);
  resolve(library, "cublasGetStatusName", api.status_name, result.error);
  resolve(library, "cublasGetStatusString", api.status_string, result.error);
  loaded = true;  // kept open for the life of the process, like a linked library
  return result;
}

}  // namespace

const char* cublas_library_name() {
  static const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  return name.c_str();
}

const Cublas& cublas() {
  static const Loaded once = open_cublas();
  if (!once.error.empty()) fail(once.error);
  return once.api;
}

bool cublas_loaded() { return loaded; }

}  // namespace journey::cuda
