// The kernels of kernels_impl.inc compiled for one instruction set (flags in src/cpu/CMakeLists.txt):
// AVX-512 with BF16 and the AMX tiles, for the AMX-BF16 prefill (part 4b).
#define JOURNEY_KERNEL_NS amx
#include "cpu/kernels_impl.inc"
