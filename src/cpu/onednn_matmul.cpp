// oneDNN's matmul on journey's weight layout (see onednn_matmul.h for why it is here).
//
// Threads: Debian's oneDNN 2.6.3 is built with the OpenMP runtime (DNNL_CPU_RUNTIME_OMP in
// dnnl_config.h); it takes its thread count from omp_get_max_threads() when a primitive is made
// (the brgemm matmul sizes its work split then) and runs its parallel regions with that many.
// So the count is set with omp_set_num_threads() around both the creation and the runs, and the
// caller's value is put back afterwards (journey's own kernels ask OpenMP for their count per call).
// Checked once by hand on the 2-core VM: after measure() with threads = 1 the process still had
// one thread (/proc/self/task), with 2 OpenMP's pool had grown to two, and omp_get_max_threads()
// read as before each time (test_onednn checks that last part).
#include "cpu/onednn_matmul.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "cpu/huge_pages.h"

#ifdef JOURNEY_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace journey::cpu::onednn {

bool available() {
#ifdef JOURNEY_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

namespace {

// "[M, K] x [N, K]^T bf16": the product named in every error, as the caller passed it.
std::string describe(int64_t M, int64_t K, int64_t N, DType type) {
  return cat("[", M, ", ", K, "] x [", N, ", ", K, "]^T ", dtype_name(type));
}

void check_arguments(int64_t M, int64_t K, int64_t N, DType type) {
  if (M < 1 || K < 1 || N < 1)
    fail("oneDNN matmul ", describe(M, K, N, type), ": every size must be at least 1");
  if (type != DType::F32 && type != DType::BF16 && type != DType::U8)
    fail("oneDNN matmul ", describe(M, K, N, type), ": type ", dtype_name(type),
         " is not supported (f32, bf16 for both x and the weight, or u8: x u8 and the weight s8)");
}

#ifdef JOURNEY_HAVE_ONEDNN

// Sets OpenMP's thread count for oneDNN while it lives and puts the caller's back (see the top).
class OpenMpThreads {
 public:
  explicit OpenMpThreads(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(resolve_threads(threads)); }
  ~OpenMpThreads() { omp_set_num_threads(previous_); }
  OpenMpThreads(const OpenMpThreads&) = delete;
  OpenMpThreads& operator=(const OpenMpThreads&) = delete;

 private:
  int previous_;
};

// One oneDNN matmul primitive for a shape and type, on journey's layouts. oneDNN computes
// dst [M, N] = src [M, K] · weights [K, N]; journey's weight is [N, K] row-major, which is the
// [K, N] matrix with strides {1, K} (element (k, n) at n·K + k): a transposed view, no copy.
// With WeightLayout::Prepacked the primitive takes the weight in the layout it chose instead, which
// weight_memory() makes from journey's.
class Matmul {
 public:
  Matmul(int64_t M, int64_t K, int64_t N, DType type, WeightLayout layout = WeightLayout::AsStored) {
    using dt = dnnl::memory::data_type;
    const dt input = type == DType::BF16 ? dt::bf16 : type == DType::U8 ? dt::u8 : dt::f32;
    const dt weights = type == DType::U8 ? dt::s8 : input;  // oneDNN's int8 form: u8 x s8, s32 sums
    x_desc_ = dnnl::memory::desc({M, K}, input, {K, 1});                            // x      [M, K] row-major
    stored_weight_desc_ = dnnl::memory::desc({K, N}, weights, {1, K});              // weight [N, K] read as [K, N]
    y_desc_ = dnnl::memory::desc({M, N}, dt::f32, {N, 1});                          // y      [M, N] row-major
    const dnnl::memory::desc weight_desc = layout == WeightLayout::Prepacked
                                               ? dnnl::memory::desc({K, N}, weights, dnnl::memory::format_tag::any)
                                               : stored_weight_desc_;
    descriptor_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(x_desc_, weight_desc, y_desc_), engine_);
    primitive_ = dnnl::matmul(descriptor_);
  }

  // journey's [N, K] weight as the primitive takes it: wrapped in place (AsStored), or copied into
  // the layout the primitive chose (Prepacked): into `packed_bytes` where given (packed_size() bytes),
  // else oneDNN allocates the copy.
  size_t packed_size() const { return descriptor_.weights_desc().get_size(); }
  dnnl::memory weight_memory(const void* weight, void* packed_bytes = nullptr) {
    dnnl::memory stored(stored_weight_desc_, engine_, const_cast<void*>(weight));  // oneDNN only reads it
    if (descriptor_.weights_desc() == stored_weight_desc_) return stored;
    dnnl::memory packed = packed_bytes ? dnnl::memory(descriptor_.weights_desc(), engine_, packed_bytes)
                                       : dnnl::memory(descriptor_.weights_desc(), engine_);
    dnnl::reorder(stored, packed).execute(stream_, stored, packed);
    stream_.wait();
    return packed;
  }

  void run(float* y, const void* x, const dnnl::memory& weight) {
    dnnl::memory x_memory(x_desc_, engine_, const_cast<void*>(x));  // oneDNN's handles are not const; it only reads
    dnnl::memory y_memory(y_desc_, engine_, y);
    primitive_.execute(stream_, {{DNNL_ARG_SRC, x_memory}, {DNNL_ARG_WEIGHTS, weight}, {DNNL_ARG_DST, y_memory}});
    stream_.wait();
  }

  std::string implementation() const { return descriptor_.impl_info_str(); }

 private:
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::memory::desc x_desc_, stored_weight_desc_, y_desc_;
  dnnl::matmul::primitive_desc descriptor_;
  dnnl::matmul primitive_;
};

// `count` values uniform in [-1, 1), stored as `type` (f32, or bf16 rounded to nearest even); for
// U8 (the int8 form) random bytes, read as u8 (x) or s8 (the weight). In huge pages from 2 MiB up,
// as the engine's weights and activations are (see measure).
HugePageVector<uint8_t> random_values(DType type, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  HugePageVector<uint8_t> bytes(size_t(dtype_bytes_for(type, count)));
  if (type == DType::U8) {
    for (uint8_t& b : bytes) b = uint8_t(rng());
    return bytes;
  }
  for (int64_t i = 0; i < count; ++i) {
    const float value = uniform(rng);
    if (type == DType::BF16) {
      const uint16_t b = f32_to_bf16(value);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &value, 4);
    }
  }
  return bytes;
}

#endif

}  // namespace

bool supports(DType type) {
  if (type != DType::F32 && type != DType::BF16 && type != DType::U8) return false;
#ifdef JOURNEY_HAVE_ONEDNN
  try {
    Matmul product(16, 64, 16, type);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
#else
  return false;
#endif
}

void matmul(float* y, const void* x, const void* weight, int64_t M, int64_t K, int64_t N, DType type, int threads) {
  check_arguments(M, K, N, type);
  if (!y || !x || !weight) fail("oneDNN matmul ", describe(M, K, N, type), ": a null buffer");
#ifdef JOURNEY_HAVE_ONEDNN
  try {
    OpenMpThreads scope(threads);
    Matmul product(M, K, N, type);  // oneDNN's primitive cache makes a repeated shape cheap
    product.run(y, x, product.weight_memory(weight));
  } catch (const dnnl::error& e) {
    fail("oneDNN matmul ", describe(M, K, N, type), ": ", e.what(), " (dnnl_status_t ", int(e.status), ")");
  }
#else
  (void)threads;
  fail("oneDNN matmul ", describe(M, K, N, type),
       ": journey was built without oneDNN (install libdnnl-dev, see scripts/install-deps.sh, and configure with "
       "-DJOURNEY_ONEDNN=ON)");
#endif
}

MatmulRate measure(int threads, int64_t M, int64_t K, int64_t N, DType type, double seconds, WeightLayout layout) {
  check_arguments(M, K, N, type);
#ifdef JOURNEY_HAVE_ONEDNN
  try {
    OpenMpThreads scope(threads);
    Matmul product(M, K, N, type, layout);
    // Every buffer in huge pages, as the engine's are: with plain malloc the rate moved with where
    // the heap put the 23 MB packed weight (2-core Xeon VM, [128, 2048] x [5632, 2048] bf16 on AMX
    // tiles: 1.59-1.63 TFLOP/s from fresh mmap'd pages, 2.14-2.31 from reused heap, depending on
    // what the process had freed before; docs/performance.md, "A steadier GEMM ceiling").
    const HugePageVector<uint8_t> x = random_values(type, M * K, 1);  // [M, K]
    HugePageVector<uint8_t> stored = random_values(type, N * K, 2);   // [N, K]
    HugePageFloats y(size_t(M * N));                                  // [M, N]
    HugePageVector<uint8_t> packed(layout == WeightLayout::Prepacked ? product.packed_size() : 0);
    const dnnl::memory weight = product.weight_memory(stored.data(), packed.empty() ? nullptr : packed.data());  // [K, N]
    if (weight.get_data_handle() != stored.data())  // (prepacked: the primitive took a copy)
      HugePageVector<uint8_t>().swap(stored);  // as at load: only the packed copy stays
    product.run(y.data(), x.data(), weight);  // untimed: first touches of y, oneDNN's scratchpad
    using Clock = std::chrono::steady_clock;
    const double flops = 2.0 * double(M) * double(K) * double(N);
    const Clock::time_point start = Clock::now();
    double best_seconds = 1e30;
    for (int run = 0; run < 3 || std::chrono::duration<double>(Clock::now() - start).count() < seconds; ++run) {
      const Clock::time_point t0 = Clock::now();
      product.run(y.data(), x.data(), weight);
      best_seconds = std::min(best_seconds, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return {flops / best_seconds / 1e9, product.implementation()};
  } catch (const dnnl::error& e) {
    fail("oneDNN matmul ", describe(M, K, N, type), ": ", e.what(), " (dnnl_status_t ", int(e.status), ")");
  }
#else
  (void)threads, (void)seconds, (void)layout;
  return {0, "not built"};
#endif
}

}  // namespace journey::cpu::onednn
