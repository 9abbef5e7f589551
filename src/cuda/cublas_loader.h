// cuBLAS, opened when a CUDA backend first needs it (dlopen), not when journey starts.
//
// Why: linking libcublas pulls in libcublasLt, and loading that library alone makes ~147 MB of the
// process resident (its relocated tables; measured by dlopen on the 2-core AMD Zen 4 VM, CUDA 13).
// Every `journey` run of a CUDA build paid it, on the CPU too: `journey --help` took 232 MB, and
// `journey bench` on a 0.64 GB Q4_0 file reported 0.81 GB resident after load (file + 0.17 GB) against
// issue #11's "file x 1.1". llama.cpp loads its CUDA backend as a module for the same reason
// (GGML_BACKEND_DL). The CUDA runtime (libcudart, ~1 MB resident) stays linked.
//
// The calls keep cuBLAS's own signatures (decltype of the declarations in cublas_v2.h); only the
// ones journey uses are here.
#pragma once
#include <cublas_v2.h>

namespace journey::cuda {

struct Cublas {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasGetStream_v2) get_stream;
  decltype(&::cublasSetWorkspace_v2) set_workspace;
  // (cublasGemmEx is overloaded in C++ by an inline legacy form: the C declaration's type, spelled out)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb,
                            const void* beta, void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo);
  decltype(&::cublasGetStatusName) status_name;
  decltype(&::cublasGetStatusString) status_string;
};

// The library's file name: libcublas.so.<major version of the headers journey was built with>.
const char* cublas_library_name();

// Opens cuBLAS on the first call (thread-safe) and returns its entry points; throws journey::Error
// naming the library and the loader's message when it cannot be opened or lacks one of them (then
// every later call throws the same).
const Cublas& cublas();

// Whether cublas() has opened the library in this process (tests: nothing else opens it).
bool cublas_loaded();

}  // namespace journey::cuda
