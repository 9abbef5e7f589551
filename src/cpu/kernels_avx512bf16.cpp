// The kernels of kernels_impl.inc compiled for one instruction set (flags in src/cpu/CMakeLists.txt).
#define JOURNEY_KERNEL_NS avx512bf16
#include "cpu/kernels_impl.inc"
