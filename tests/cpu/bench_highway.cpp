// Benchmark, not a test (no ctest entry; built only where CMake finds Google Highway, libhwy-dev):
// the one-token decode products of journey's kernels written a second time with Highway's dynamic
// dispatch (one source, compiled by foreach_target.h for the x86 targets from the build's baseline
// up — with JOURNEY_NATIVE on an AVX2 CPU: AVX2 and AVX3 (AVX-512) — and, on ARM, NEON and SVE), on
// the same data in the same layouts, checked against journey's own kernels, then timed beside them
// in the same run (issue #11; docs/performance.md, "Highway, oneDNN, AMX").
//
//   f32    y[r] = x . w[r], rows of f32            journey: float_rows, one token (one_token_rows);
//                                                  Highway also by its own hn::Dot (contrib)
//   bf16   rows of bf16, x f32                     journey: one_token_bf16_pairs (the engine's path,
//                                                  x split into pairs) and float_rows (widening)
//   f16    rows of f16, x f32                      journey: float_rows (F16C)
//   Q8_0   GGUF blocks as stored (f16 d + 32 int8), x quantized to Q8_0 blocks (QuantizedInput)
//   Q4_0   GGUF blocks as stored (f16 d + 16 bytes: weight j the low nibble of byte j, j + 16 the
//          high one, w = d (q - 8)), x as for Q8_0    journey: dot_rows (the fused decode dot);
//          Highway with the zero point subtracted in int16, or in the integer sum's start
//
// Highway 1.0.3 (Debian 12) has no 8-bit pair or quad product (SatWidenMulPairwiseAdd, vpmaddubsw,
// and SumOfMulQuadAccumulate, vpdpbusd / NEON sdot, came in later releases), so the block dots widen
// both operands to int16 (PromoteTo) and multiply-add pairs into int32 with ReorderWidenMulAccumulate
// (vpmaddwd; NEON smlal). A block of 32 is worked on in int16 vectors of at most 16 lanes
// (CappedTag): 256-bit on AVX2 and AVX-512 (journey's dots are 256-bit on AVX-512 too), 128-bit on
// NEON. The row-stream prefetch is journey's own (kernels::fetch_decode_stream, as kDecodePrefetch
// says on this CPU), for every type.
//
// Every Highway result is checked against journey's on every row (cache set and the 1 GiB set) and
// both against a double-precision sum: |difference| <= 1e-5 x the sum of the magnitudes of the
// terms (for Q4_0 with the zero point's share counted apart: sum |d dx| (|q - 8| + 8) |xq|); the
// benchmark exits 1 on a mismatch. Then, per kernel, the implementations take turns (A B C, then
// C B A, ...; --rounds rounds) over the same rows, so the VM's drift hits them alike:
//   cache   --cache-kib KiB of rows (1 MiB: L2 + L3 here), passes for about 0.1 s per turn
//   memory  --mem-mib MiB of rows (1 GiB, 2 MiB pages as journey allocates weights), one pass per
//           turn: the rows stream from memory as in decode
// on one thread and on two (the rows halved, as cpu::linear splits them), in CPU time of the
// slower thread (time it is descheduled for other jobs does not count). Printed: the median of
// the turns in ns per row and GB/s of weights, and each implementation's time over the first
// journey one's, the median of the per-round ratios [lowest, highest].
//
// usage: bench_highway [--in 2048] [--rounds 7] [--cache-kib 1024] [--mem-mib 1024] [--only f32,bf16,...]
// (-DBENCH_HIGHWAY_KERNELS_ONLY builds Highway's kernels alone with a check against double sums and
// no journey library: the ARM check at the end of this file.)

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/decode_prefetch.h"
#include "quant/blocks.h"
#ifndef BENCH_HIGHWAY_KERNELS_ONLY  // (the ARM check below: Highway's kernels alone, no journey library)
#include "core/dtype.h"
#include "cpu/huge_pages.h"
#include "cpu/kernels.h"
#include "cpu/typed_linear.h"
#include "quant/quantize.h"
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench_highway.cpp"  // this file, found through its own directory (CMake)
#include "hwy/foreach_target.h"  // re-includes this file once per target
#include "hwy/highway.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/dot/dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bench_highway {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using journey::quant::block_q4_0;
using journey::quant::block_q8_0;
using journey::quant::kQK;

#ifndef BENCH_HIGHWAY_KERNELS_ONLY
// journey's decode prefetch (decode_prefetch.h: as kDecodePrefetch says on this CPU), so that the
// kernels compared read their rows alike
HWY_INLINE void FetchAhead(const void* at, int64_t bytes) { journey::cpu::kernels::fetch_decode_stream(at, bytes); }
#else  // no journey library: the near prefetch, journey's choice on ARM
HWY_INLINE void FetchAhead(const void* at, int64_t bytes) { journey::cpu::kernels::fetch_near(at, bytes); }
#endif

const char* Target() { return hwy::TargetName(HWY_TARGET); }

// ---- f32 / bf16 / f16 rows, one token: y[r] = x . w[r], r in [r0, r1) -------------------------

// The weights of one vector from a row of type T, as f32.
template <typename T, class DF>
HWY_INLINE hn::Vec<DF> LoadWeights(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<T, hwy::bfloat16_t>) {  // the top half of an f32
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<uint16_t, DF> du16;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)))));
  } else {  // hwy::float16_t: F16C on x86
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
  }
}

// Four accumulators over 4 vectors per step, as one_token_rows.
template <typename T>
HWY_INLINE void RowsT(const float* HWY_RESTRICT x, const T* HWY_RESTRICT w, int64_t in, int64_t r0, int64_t r1,
                      float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = w + r * in;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    int64_t k = 0;
    for (; k + 4 * N <= in; k += 4 * N) {
      FetchAhead(row + k, 4 * N * int64_t(sizeof(T)));
      a0 = hn::MulAdd(hn::LoadU(df, x + k), LoadWeights(df, row + k), a0);
      a1 = hn::MulAdd(hn::LoadU(df, x + k + N), LoadWeights(df, row + k + N), a1);
      a2 = hn::MulAdd(hn::LoadU(df, x + k + 2 * N), LoadWeights(df, row + k + 2 * N), a2);
      a3 = hn::MulAdd(hn::LoadU(df, x + k + 3 * N), LoadWeights(df, row + k + 3 * N), a3);
    }
    for (; k + N <= in; k += N) a0 = hn::MulAdd(hn::LoadU(df, x + k), LoadWeights(df, row + k), a0);
    float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
    for (; k < in; ++k) {  // (in a multiple of the lanes here: not taken)
      const hn::CappedTag<float, 1> d1;
      sum += x[k] * hn::GetLane(LoadWeights(d1, row + k));
    }
    y[r] = sum;
  }
}

void F32Rows(const float* x, const void* w, int64_t in, int64_t r0, int64_t r1, float* y) {
  RowsT(x, static_cast<const float*>(w), in, r0, r1, y);
}
void Bf16Rows(const float* x, const void* w, int64_t in, int64_t r0, int64_t r1, float* y) {
  RowsT(x, static_cast<const hwy::bfloat16_t*>(w), in, r0, r1, y);
}
void F16Rows(const float* x, const void* w, int64_t in, int64_t r0, int64_t r1, float* y) {
  RowsT(x, static_cast<const hwy::float16_t*>(w), in, r0, r1, y);
}

// f32 rows by the library's own dot product (hwy/contrib/dot), one call per row, no prefetch.
void F32RowsContribDot(const float* x, const void* w, int64_t in, int64_t r0, int64_t r1, float* y) {
  const hn::ScalableTag<float> df;
  const float* rows = static_cast<const float*>(w);
  for (int64_t r = r0; r < r1; ++r) y[r] = hn::Dot::Compute<hn::Dot::kAtLeastOneVector>(df, x, rows + r * in, size_t(in));
}

// bf16 the way one_token_bf16_pairs reads it: x split into pairs per block of 2N inputs (its N even
// inputs, then its N odd ones), each 32-bit word of the row giving both f32 weights by a shift and
// a mask. SplitPairs at this target's N.
void SplitPairs(const float* x, int64_t in, float* x_pairs) {
  const int64_t N = int64_t(hn::Lanes(hn::ScalableTag<float>()));
  for (int64_t k0 = 0; k0 + 2 * N <= in; k0 += 2 * N)
    for (int64_t i = 0; i < N; ++i) {
      x_pairs[k0 + i] = x[k0 + 2 * i];
      x_pairs[k0 + N + i] = x[k0 + 2 * i + 1];
    }
}
void Bf16PairRows(const float* x_pairs, const void* w, int64_t in, int64_t r0, int64_t r1, float* y) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto high = hn::Set(du32, 0xFFFF0000u);
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* row = static_cast<const uint16_t*>(w) + r * in;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    int64_t k = 0;
    for (; k + 4 * N <= in; k += 4 * N) {  // two blocks of 2N per step
      FetchAhead(row + k, 4 * N * 2);
      const auto w0 = hn::LoadU(du32, reinterpret_cast<const uint32_t*>(row + k));
      const auto w1 = hn::LoadU(du32, reinterpret_cast<const uint32_t*>(row + k + 2 * N));
      a0 = hn::MulAdd(hn::LoadU(df, x_pairs + k), hn::BitCast(df, hn::ShiftLeft<16>(w0)), a0);
      a1 = hn::MulAdd(hn::LoadU(df, x_pairs + k + N), hn::BitCast(df, hn::And(w0, high)), a1);
      a2 = hn::MulAdd(hn::LoadU(df, x_pairs + k + 2 * N), hn::BitCast(df, hn::ShiftLeft<16>(w1)), a2);
      a3 = hn::MulAdd(hn::LoadU(df, x_pairs + k + 3 * N), hn::BitCast(df, hn::And(w1, high)), a3);
    }
    for (; k + 2 * N <= in; k += 2 * N) {
      const auto w0 = hn::LoadU(du32, reinterpret_cast<const uint32_t*>(row + k));
      a0 = hn::MulAdd(hn::LoadU(df, x_pairs + k), hn::BitCast(df, hn::ShiftLeft<16>(w0)), a0);
      a1 = hn::MulAdd(hn::LoadU(df, x_pairs + k + N), hn::BitCast(df, hn::And(w0, high)), a1);
    }
    y[r] = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));  // (in a multiple of 2N)
  }
}

// ---- Q8_0 / Q4_0 rows as stored, one token quantized to Q8_0 blocks -----------------------------

// y[r] = sum_b d_b dx_b sum_j (q_j - z) xq_j for rows [r0, r1) of `first` (row_bytes apart). xd:
// the activation scale of each block (dx of its first group of 16), xsum the sum of its quants,
// n / 32 values each. Q4_0's zero point either as two int16 subtractions per block (kQ4Sub), or
// (kQ4Start) in the integer sum's start, -8 sum(xq) in its first lane, loaded from a table made
// once per call (as journey's VNNI dot starts its vpdpbusd sum).
enum Kind { kQ8, kQ4Sub, kQ4Start };
template <Kind kKind>
HWY_INLINE void BlockRowsT(const uint8_t* first, size_t row_bytes, int64_t r0, int64_t r1, const int8_t* HWY_RESTRICT xq,
                           const float* HWY_RESTRICT xd, const int32_t* HWY_RESTRICT xsum, int64_t n,
                           float* HWY_RESTRICT y) {
  constexpr bool kQ4 = kKind != kQ8;
  using Block = std::conditional_t<kQ4, block_q4_0, block_q8_0>;
  const hn::CappedTag<int16_t, 16> d16;              // 16 lanes on AVX2 / AVX-512 (256-bit), 8 on NEON
  const hn::Rebind<int8_t, decltype(d16)> d8;        // the int8 half as loaded
  const hn::Rebind<uint8_t, decltype(d16)> du8;
  const hn::RebindToUnsigned<decltype(d16)> du16;
  const hn::Repartition<int32_t, decltype(d16)> d32;  // the int32 sums of pairs
  const hn::Repartition<float, decltype(d16)> df;
  const hn::Rebind<uint16_t, decltype(df)> dh;        // one f16 scale per f32 lane
  const hn::Rebind<hwy::float16_t, decltype(df)> dhf;
  const int64_t N = int64_t(hn::Lanes(d16)), N32 = int64_t(hn::Lanes(d32));
  const int64_t count = n / kQK;
  std::vector<int32_t> start;
  if constexpr (kKind == kQ4Start) {
    start.assign(size_t(count * N32), 0);
    for (int64_t b = 0; b < count; ++b) start[size_t(b * N32)] = -8 * xsum[b];
  }
  for (int64_t r = r0; r < r1; ++r) {
    const Block* blocks = reinterpret_cast<const Block*>(first + r * row_bytes);
    // four accumulators, not an array of them: SVE vectors are sizeless and cannot be array elements
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    auto one_block = [&](int64_t b, hn::Vec<decltype(df)> acc) HWY_ATTR {
      const Block& block = blocks[b];
      const int8_t* xb = xq + b * kQK;
      auto s0 = kKind == kQ4Start ? hn::LoadU(d32, start.data() + b * N32) : hn::Zero(d32), s1 = hn::Zero(d32);
      if constexpr (kQ4) {
        const auto z = hn::Set(d16, int16_t(kKind == kQ4Sub ? 8 : 0));
        for (int64_t i = 0; i < kQK / 2; i += N) {
          const auto v = hn::BitCast(d16, hn::PromoteTo(du16, hn::LoadU(du8, block.qs + i)));
          auto lo = hn::And(v, hn::Set(d16, int16_t(0x0F)));  // weights i ..
          auto hi = hn::ShiftRight<4>(v);                     // weights 16 + i ..
          if constexpr (kKind == kQ4Sub) lo = hn::Sub(lo, z), hi = hn::Sub(hi, z);
          s0 = hn::ReorderWidenMulAccumulate(d32, lo, hn::PromoteTo(d16, hn::LoadU(d8, xb + i)), s0, s1);
          s0 = hn::ReorderWidenMulAccumulate(d32, hi, hn::PromoteTo(d16, hn::LoadU(d8, xb + kQK / 2 + i)), s0, s1);
        }
      } else {
        for (int64_t i = 0; i < kQK; i += N)
          s0 = hn::ReorderWidenMulAccumulate(d32, hn::PromoteTo(d16, hn::LoadU(d8, block.qs + i)),
                                             hn::PromoteTo(d16, hn::LoadU(d8, xb + i)), s0, s1);
      }
      // d * dx in every lane: the f16 scale broadcast, widened, times dx (journey's scale_lanes)
      const auto scale = hn::Mul(hn::PromoteTo(df, hn::BitCast(dhf, hn::Set(dh, block.d))), hn::Set(df, xd[b]));
      return hn::MulAdd(hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0, s1)), scale, acc);
    };
    int64_t b = 0;
    for (; b + 4 <= count; b += 4) {
      FetchAhead(blocks + b, 4 * int64_t(sizeof(Block)));
      a0 = one_block(b, a0);
      a1 = one_block(b + 1, a1);
      a2 = one_block(b + 2, a2);
      a3 = one_block(b + 3, a3);
    }
    for (; b < count; ++b) a0 = one_block(b, a0);
    y[r] = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  }
}

void Q8Rows(const uint8_t* first, size_t row_bytes, int64_t r0, int64_t r1, const int8_t* xq, const float* xd,
            const int32_t* xsum, int64_t n, float* y) {
  BlockRowsT<kQ8>(first, row_bytes, r0, r1, xq, xd, xsum, n, y);
}
void Q4Rows(const uint8_t* first, size_t row_bytes, int64_t r0, int64_t r1, const int8_t* xq, const float* xd,
            const int32_t* xsum, int64_t n, float* y) {
  BlockRowsT<kQ4Sub>(first, row_bytes, r0, r1, xq, xd, xsum, n, y);
}
void Q4StartRows(const uint8_t* first, size_t row_bytes, int64_t r0, int64_t r1, const int8_t* xq, const float* xd,
                 const int32_t* xsum, int64_t n, float* y) {
  BlockRowsT<kQ4Start>(first, row_bytes, r0, r1, xq, xd, xsum, n, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace bench_highway
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bench_highway {
HWY_EXPORT(Target);
HWY_EXPORT(F32Rows);
HWY_EXPORT(F32RowsContribDot);
HWY_EXPORT(Bf16Rows);
HWY_EXPORT(F16Rows);
HWY_EXPORT(SplitPairs);
HWY_EXPORT(Bf16PairRows);
HWY_EXPORT(Q8Rows);
HWY_EXPORT(Q4Rows);
HWY_EXPORT(Q4StartRows);
}  // namespace bench_highway

#ifndef BENCH_HIGHWAY_KERNELS_ONLY
using namespace journey;
namespace kernels = journey::cpu::kernels;
using quant::block_q4_0;
using quant::block_q8_0;
using quant::kQK;

namespace {

using Bytes = std::vector<uint8_t, HugePageAllocator<uint8_t>>;

constexpr double kTolerance = 1e-5;  // of the sum of the terms' magnitudes

// Rows [r0, r1) of the weights starting at `w`, their results into y[r0 .. r1).
using RowsFn = std::function<void(const uint8_t* w, int64_t r0, int64_t r1, float* y)>;
struct Impl {
  std::string name;
  RowsFn run;
};

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Seconds for `passes` passes of fn over `rows` rows on `threads` threads (rows halved): the CPU
// time of the slower thread (clock_gettime(CLOCK_THREAD_CPUTIME_ID), as bench_block_dots: time the
// thread spent waiting for memory counts, time it was descheduled for other jobs does not).
double time_passes(const RowsFn& fn, const uint8_t* w, int64_t rows, float* y, int threads, int passes) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  double seconds[2] = {0, 0};
  auto body = [&](int t) {
    const int64_t r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
    const double t0 = thread_seconds();
    for (int p = 0; p < passes; ++p) fn(w, r0, r1, y);
    seconds[t] = thread_seconds() - t0;
  };
  std::thread other;
  if (threads == 2) {
    other = std::thread([&] {
      ready.store(1, std::memory_order_release);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      body(1);
    });
    while (ready.load(std::memory_order_acquire) == 0) std::this_thread::yield();
  }
  go.store(true, std::memory_order_release);
  body(0);
  if (other.joinable()) other.join();
  return std::max(seconds[0], seconds[1]);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "?";
}

struct Case {
  std::string name;
  DType type;
  std::vector<Impl> impls;  // journey's first: the ratios are over impls[0]
  size_t journey_count;     // impls [0, journey_count) are journey's
};

bool g_failed = false;

}  // namespace

int main(int argc, char** argv) {
  int64_t in = 2048, cache_kib = 1024, mem_mib = 1024;
  int rounds = 7;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--in")) in = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--cache-kib")) cache_kib = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--mem-mib")) mem_mib = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
    else return std::fprintf(stderr, "usage: %s [--in 2048] [--rounds 7] [--cache-kib 1024] [--mem-mib 1024] [--only f32,bf16,f16,Q8_0,Q4_0]\n", argv[0]), 2;
  }
  if (in <= 0 || in % 64 != 0 || rounds < 1 || cache_kib < 64 || mem_mib < 1)
    return std::fprintf(stderr, "--in must be a positive multiple of 64, --rounds >= 1\n"), 2;
  if (argc % 2 == 0) return std::fprintf(stderr, "usage: options take a value\n"), 2;

  const kernels::Isa isa = kernels::best_isa();
  const kernels::KernelTable& k = kernels::table(isa);
  std::printf("CPU %s; load average at start %s\n", cpu_model().c_str(), load_average().c_str());
  std::printf("journey: %s\n", kernels::kernel_choice().c_str());
  std::string compiled, supported;
  for (int64_t t = HWY_TARGETS; t != 0; t &= t - 1) compiled += std::string(compiled.empty() ? "" : ", ") + hwy::TargetName(t & -t);
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) supported += std::string(supported.empty() ? "" : ", ") + hwy::TargetName(t);
  std::printf("Highway %d.%d.%d: compiled for %s; this CPU runs %s; dispatched: %s\n", HWY_MAJOR, HWY_MINOR, HWY_PATCH,
              compiled.c_str(), supported.c_str(), HWY_DYNAMIC_DISPATCH(bench_highway::Target)());
  if (!k.dot_rows) std::printf("(journey's table has no dot_rows on this CPU: the block types are skipped)\n");

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // activations on cache lines, as the engine's (HugePageAllocator: 64-byte aligned)
  using Floats = std::vector<float, HugePageAllocator<float>>;
  Floats x(static_cast<size_t>(in));
  for (float& v : x) v = normal(rng);
  // the activations as journey's decode prepares them: Q8_0 blocks (kernels::quantize_q8_0), pairs
  cpu::QuantizedInput qx;
  qx.quantize(x.data(), 1, in, 32);
  const kernels::QuantizedActivations xa{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
  std::vector<float> xd(static_cast<size_t>(in / kQK));  // one activation scale per block of 32, for Highway
  std::vector<int32_t> xsum(static_cast<size_t>(in / kQK));  // the sum of each block's quants
  for (int64_t b = 0; b < in / kQK; ++b) {
    xd[size_t(b)] = qx.dx[size_t(2 * b)];
    xsum[size_t(b)] = qx.gsum[size_t(2 * b)] + qx.gsum[size_t(2 * b + 1)];
  }
  Floats jx_pairs(static_cast<size_t>(in)), hx_pairs(static_cast<size_t>(in));
  k.split_pairs(x.data(), in, jx_pairs.data());
  HWY_DYNAMIC_DISPATCH(bench_highway::SplitPairs)(x.data(), in, hx_pairs.data());
  const bool j_pairs = in % k.pair_lanes == 0;

  auto jfloat = [&](DType type) -> RowsFn {
    return [&k, &x, type, in](const uint8_t* w, int64_t r0, int64_t r1, float* y) {
      k.float_rows(type, y, x.data(), w, nullptr, 1, in, 0, r0, r1);  // T = 1: one_token_rows
    };
  };
  using HFloat = void (*)(const float*, const void*, int64_t, int64_t, int64_t, float*);
  auto hfloat = [&](HFloat fn, const float* xs) -> RowsFn {
    return [fn, xs, in](const uint8_t* w, int64_t r0, int64_t r1, float* y) { fn(xs, w, in, r0, r1, y); };
  };
  // the dispatched pointers, looked up once (HWY_DYNAMIC_DISPATCH is a table lookup per call anyway)
  const HFloat h_f32 = HWY_DYNAMIC_DISPATCH(bench_highway::F32Rows);
  const HFloat h_f32_dot = HWY_DYNAMIC_DISPATCH(bench_highway::F32RowsContribDot);
  const HFloat h_bf16 = HWY_DYNAMIC_DISPATCH(bench_highway::Bf16Rows);
  const HFloat h_bf16_pairs = HWY_DYNAMIC_DISPATCH(bench_highway::Bf16PairRows);
  const HFloat h_f16 = HWY_DYNAMIC_DISPATCH(bench_highway::F16Rows);

  std::vector<Case> cases;
  cases.push_back({"f32", DType::F32,
                   {{"journey one_token_rows", jfloat(DType::F32)},
                    {"hwy loop", hfloat(h_f32, x.data())},
                    {"hwy contrib Dot", hfloat(h_f32_dot, x.data())}},
                   1});
  {
    Case c{"bf16", DType::BF16, {}, 0};
    if (j_pairs)
      c.impls.push_back({"journey bf16_pairs", [&](const uint8_t* w, int64_t r0, int64_t r1, float* y) {
                           k.one_token_bf16_pairs(y, jx_pairs.data(), w, nullptr, in, r0, r1);
                         }});
    c.impls.push_back({"journey one_token_rows", jfloat(DType::BF16)});
    c.journey_count = c.impls.size();
    c.impls.push_back({"hwy pairs", hfloat(h_bf16_pairs, hx_pairs.data())});
    c.impls.push_back({"hwy widen", hfloat(h_bf16, x.data())});
    cases.push_back(c);
  }
  cases.push_back({"f16", DType::F16,
                   {{"journey one_token_rows", jfloat(DType::F16)}, {"hwy widen", hfloat(h_f16, x.data())}},
                   1});
  using HBlocks = void (*)(const uint8_t*, size_t, int64_t, int64_t, const int8_t*, const float*, const int32_t*, int64_t,
                           float*);
  auto hblocks = [&](HBlocks fn, size_t row_bytes) -> RowsFn {
    return [fn, &qx, &xd, &xsum, row_bytes, in](const uint8_t* w, int64_t r0, int64_t r1, float* y) {
      fn(w, row_bytes, r0, r1, qx.q.data(), xd.data(), xsum.data(), in, y);
    };
  };
  for (DType type : {DType::Q8_0, DType::Q4_0}) {
    if (!k.dot_rows) break;
    const size_t row_bytes = size_t(dtype_bytes_for(type, in));
    Case c{type == DType::Q8_0 ? "Q8_0" : "Q4_0", type, {}, 1};
    c.impls.push_back({"journey dot_rows", [&k, &xa, type, row_bytes, in](const uint8_t* w, int64_t r0, int64_t r1, float* y) {
                         k.dot_rows(type, w + r0 * row_bytes, row_bytes, r1 - r0, xa, in, y + r0);
                       }});
    if (type == DType::Q8_0) {
      c.impls.push_back({"hwy i16 madd", hblocks(HWY_DYNAMIC_DISPATCH(bench_highway::Q8Rows), row_bytes)});
    } else {
      c.impls.push_back({"hwy i16 madd, z subtracted", hblocks(HWY_DYNAMIC_DISPATCH(bench_highway::Q4Rows), row_bytes)});
      c.impls.push_back({"hwy i16 madd, z in the start", hblocks(HWY_DYNAMIC_DISPATCH(bench_highway::Q4StartRows), row_bytes)});
    }
    cases.push_back(c);
  }

  Bytes mem;  // the memory set, reused by every type
  std::vector<std::string> checks;  // one line per kernel, printed after the table
  std::printf("\nin %lld; cache set %lld KiB, memory set %lld MiB; %d rounds; median of the turns, ratio = time / the first journey kernel's, median of the rounds [lowest, highest]\n",
              (long long)in, (long long)cache_kib, (long long)mem_mib, rounds);
  std::printf("| kernel | data | threads | implementation | ns/row | GB/s | ratio |\n|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (Case& c : cases) {
    if (!only.empty() && ("," + only + ",").find("," + c.name + ",") == std::string::npos) continue;
    const int64_t row_bytes = dtype_bytes_for(c.type, in);
    const int64_t pattern_rows = std::max<int64_t>(2, cache_kib * 1024 / row_bytes);
    const int64_t copies = std::max<int64_t>(1, mem_mib * 1024 * 1024 / (pattern_rows * row_bytes));
    const int64_t mem_rows = pattern_rows * copies;
    // the cache set: pattern_rows rows of the type as stored, from normal weights
    Bytes cache(static_cast<size_t>(pattern_rows * row_bytes));
    std::vector<float> wf(static_cast<size_t>(in));
    std::vector<double> exact(static_cast<size_t>(pattern_rows)), magnitude(static_cast<size_t>(pattern_rows));
    for (int64_t r = 0; r < pattern_rows; ++r) {
      for (float& v : wf) v = normal(rng);
      uint8_t* row = cache.data() + r * row_bytes;
      double sum = 0, mag = 0;
      if (c.type == DType::F32 || c.type == DType::BF16 || c.type == DType::F16) {
        for (int64_t i = 0; i < in; ++i) {
          float v = wf[size_t(i)];
          if (c.type == DType::F32) std::memcpy(row + 4 * i, &v, 4);
          else {
            const uint16_t h = c.type == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
            std::memcpy(row + 2 * i, &h, 2);
            v = c.type == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
          }
          sum += double(v) * double(x[size_t(i)]);
          mag += std::fabs(double(v) * double(x[size_t(i)]));
        }
      } else {
        quant::quantize(c.type, wf.data(), row, in);
        const int zero = c.type == DType::Q4_0 ? 8 : 0;
        for (int64_t b = 0; b < in / kQK; ++b) {
          double block = 0, block_mag = 0;
          int q[kQK];
          uint16_t d;
          if (c.type == DType::Q8_0) {
            const auto* blk = reinterpret_cast<const block_q8_0*>(row) + b;
            d = blk->d;
            for (int j = 0; j < kQK; ++j) q[j] = blk->qs[j];
          } else {
            const auto* blk = reinterpret_cast<const block_q4_0*>(row) + b;
            d = blk->d;
            for (int j = 0; j < kQK / 2; ++j) q[j] = blk->qs[j] & 0x0F, q[j + kQK / 2] = blk->qs[j] >> 4;
          }
          for (int j = 0; j < kQK; ++j) {
            const double xqj = qx.q[size_t(b * kQK + j)];
            block += double(q[j] - zero) * xqj;
            block_mag += (std::abs(q[j] - zero) + zero) * std::fabs(xqj);
          }
          const double s = double(f16_to_f32(d)) * double(xd[size_t(b)]);
          sum += s * block;
          mag += std::fabs(s) * block_mag;
        }
      }
      exact[size_t(r)] = sum;
      magnitude[size_t(r)] = mag;
    }
    mem.resize(size_t(mem_rows * row_bytes));
    for (int64_t copy = 0; copy < copies; ++copy)
      std::memcpy(mem.data() + copy * pattern_rows * row_bytes, cache.data(), size_t(pattern_rows * row_bytes));

    // correctness: every row of both sets, every implementation against the double sum and the
    // first journey kernel
    std::vector<float> y_ref(static_cast<size_t>(mem_rows)), y(static_cast<size_t>(mem_rows));
    double worst_exact = 0, worst_pair = 0;
    for (size_t i = 0; i < c.impls.size(); ++i) {
      for (int set = 0; set < 2; ++set) {
        const uint8_t* w = set ? mem.data() : cache.data();
        const int64_t rows = set ? mem_rows : pattern_rows;
        float* out = i == 0 ? y_ref.data() : y.data();
        std::fill(out, out + rows, std::nanf(""));
        c.impls[i].run(w, 0, rows, out);
        int bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t p = r % pattern_rows;
          const double bound = kTolerance * magnitude[size_t(p)];
          const double off_exact = std::fabs(double(out[r]) - exact[size_t(p)]);
          const double off_pair = std::fabs(double(out[r]) - double(y_ref[size_t(r)]));
          worst_exact = std::max(worst_exact, off_exact / magnitude[size_t(p)]);
          if (i > 0) worst_pair = std::max(worst_pair, off_pair / magnitude[size_t(p)]);
          if (!(off_exact <= bound) || (i > 0 && !(off_pair <= bound))) {
            if (bad++ < 3)
              std::fprintf(stderr, "MISMATCH %s %s row %lld: %.9g, journey %.9g, exact %.9g (bound %.3g)\n",
                           c.name.c_str(), c.impls[i].name.c_str(), (long long)r, double(out[r]),
                           double(y_ref[size_t(r)]), exact[size_t(p)], bound);
          }
        }
        if (bad) g_failed = true;
      }
    }
    char line[256];
    std::snprintf(line, sizeof line, "%s: %lld + %lld rows checked; worst |result - exact| %.2g, |highway - journey| %.2g of the magnitude sum (tolerance %.0e)%s",
                  c.name.c_str(), (long long)pattern_rows, (long long)mem_rows, worst_exact, worst_pair, kTolerance,
                  g_failed ? "  FAILED" : "");
    checks.push_back(line);

    for (int set = 0; set < 2; ++set) {
      const uint8_t* w = set ? mem.data() : cache.data();
      const int64_t rows = set ? mem_rows : pattern_rows;
      for (int threads : {1, 2}) {
        // passes per turn: about 0.1 s in cache (from the first kernel's warm pass), one from memory
        int passes = 1;
        const double one = time_passes(c.impls[0].run, w, rows, y.data(), threads, 1);
        if (!set) passes = int(std::clamp(0.1 / std::max(one, 1e-9), 1.0, 100000.0));
        for (Impl& impl : c.impls) time_passes(impl.run, w, rows, y.data(), threads, set ? 1 : passes);  // warm
        const size_t n = c.impls.size();
        std::vector<std::vector<double>> seconds(n);
        for (int round = 0; round < rounds; ++round)
          for (size_t j = 0; j < n; ++j) {
            const size_t i = round % 2 ? n - 1 - j : j;
            seconds[i].push_back(time_passes(c.impls[i].run, w, rows, y.data(), threads, passes) / passes);
          }
        for (size_t i = 0; i < n; ++i) {
          const double t = median(seconds[i]);
          std::vector<double> ratios;
          for (int round = 0; round < rounds; ++round) ratios.push_back(seconds[i][size_t(round)] / seconds[0][size_t(round)]);
          char ratio[64] = "1";
          if (i > 0)
            std::snprintf(ratio, sizeof ratio, "%.2f [%.2f, %.2f]", median(ratios),
                          *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()));
          std::printf("| %s | %s | %d | %s | %.1f | %.1f | %s |\n", c.name.c_str(),
                      set ? (std::to_string(mem_rows * row_bytes >> 20) + " MiB").c_str()
                          : (std::to_string(pattern_rows * row_bytes >> 10) + " KiB").c_str(),
                      threads, c.impls[i].name.c_str(), t / double(rows) * 1e9, double(rows * row_bytes) / t * 1e-9,
                      ratio);
        }
        std::fflush(stdout);
      }
    }
  }
  for (const std::string& line : checks) std::printf("%s\n", line.c_str());
  std::printf("load average at the end %s\n", load_average().c_str());
  if (g_failed) {
    std::fprintf(stderr, "bench_highway: MISMATCH (see above)\n");
    return 1;
  }
  return 0;
}

#else  // BENCH_HIGHWAY_KERNELS_ONLY
// Highway's kernels alone against double-precision sums on random rows (no journey library, no
// timing), on every target this CPU supports that the build compiled. For ARM, where journey has no
// NEON/SVE kernels to compare with and this machine has no ARM CPU: cross-compiled and run under
// QEMU (docs/performance.md, "Highway, oneDNN, AMX"):
//   aarch64-linux-gnu-g++ -std=c++20 -O2 -DBENCH_HIGHWAY_KERNELS_ONLY -Isrc -Itests/cpu
//     tests/cpu/bench_highway.cpp -lhwy -o /tmp/bench_highway_arm64
//   qemu-aarch64 -cpu max,sve-default-vector-length=32 /tmp/bench_highway_arm64   (SVE: 16, 32, 64 bytes; NEON: -cpu cortex-a72)
#include <cstring>
#include <random>
#include <vector>

namespace {

float half_to_float(uint16_t h) {  // IEEE half, normal or zero (the values generated here)
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  const uint32_t bits = exponent == 0 ? sign : sign | ((exponent + 112) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

int main() {
  using journey::quant::block_q4_0;
  using journey::quant::block_q8_0;
  constexpr int64_t in = 2048, rows = 64, kQK = journey::quant::kQK;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255), quant(-127, 127), f16_exponent(5, 20);
  auto random_half = [&] { return uint16_t((byte(rng) & 1) << 15 | f16_exponent(rng) << 10 | (byte(rng) << 2 & 0x3FF)); };
  std::vector<float> x(in), x_pairs(in), xd(in / kQK), w32(rows * in), y(rows);
  std::vector<uint16_t> wbf(rows * in), wh(rows * in);
  std::vector<int8_t> xq(in);
  std::vector<int32_t> xsum(in / kQK);
  std::vector<block_q8_0> q8(rows * in / kQK);
  std::vector<block_q4_0> q4(rows * in / kQK);
  for (float& v : x) v = normal(rng);
  for (int8_t& v : xq) v = int8_t(quant(rng));
  for (int64_t b = 0; b < in / kQK; ++b)
    for (int j = 0; j < kQK; ++j) xsum[b] += xq[b * kQK + j];
  for (float& v : xd) v = std::fabs(normal(rng)) * 0.01f;
  for (size_t i = 0; i < w32.size(); ++i) {
    w32[i] = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &w32[i], 4);
    wbf[i] = uint16_t(bits >> 16);
    wh[i] = random_half();
  }
  for (auto& b : q8) {
    b.d = random_half();
    for (int8_t& q : b.qs) q = int8_t(quant(rng));
  }
  for (auto& b : q4) {
    b.d = random_half();
    for (uint8_t& q : b.qs) q = uint8_t(byte(rng));
  }
  auto check = [&](const char* name, auto exact_and_magnitude) {
    int bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double exact = 0, magnitude = 0;
      exact_and_magnitude(r, exact, magnitude);
      const double off = std::fabs(double(y[r]) - exact);
      worst = std::max(worst, off / magnitude);
      if (!(off <= 1e-5 * magnitude) && bad++ < 3)
        std::fprintf(stderr, "MISMATCH %s row %lld: %.9g, exact %.9g\n", name, (long long)r, double(y[r]), exact);
    }
    std::printf("  %-10s worst |result - exact| %.2g of the magnitude sum%s\n", name, worst, bad ? "  FAILED" : "");
    return bad == 0;
  };
  auto float_rows = [&](auto weight) {
    return [&, weight](int64_t r, double& exact, double& magnitude) {
      for (int64_t k = 0; k < in; ++k) {
        const double p = double(x[k]) * double(weight(r * in + k));
        exact += p, magnitude += std::fabs(p);
      }
    };
  };
  auto block_rows = [&](bool is_q4) {
    return [&, is_q4](int64_t r, double& exact, double& magnitude) {
      for (int64_t b = 0; b < in / kQK; ++b) {
        const int64_t at = r * (in / kQK) + b;
        double sum = 0, mag = 0;
        for (int j = 0; j < kQK; ++j) {
          const int q = is_q4 ? (j < 16 ? q4[at].qs[j] & 0x0F : q4[at].qs[j - 16] >> 4) - 8 : q8[at].qs[j];
          sum += double(q) * xq[b * kQK + j];
          mag += (std::abs(q) + (is_q4 ? 8 : 0)) * std::fabs(double(xq[b * kQK + j]));
        }
        const double s = double(half_to_float(is_q4 ? q4[at].d : q8[at].d)) * double(xd[b]);
        exact += s * sum, magnitude += std::fabs(s) * mag;
      }
    };
  };
  bool ok = true;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::printf("target %s (dispatched: %s)\n", hwy::TargetName(target), HWY_DYNAMIC_DISPATCH(bench_highway::Target)());
    HWY_DYNAMIC_DISPATCH(bench_highway::F32Rows)(x.data(), w32.data(), in, 0, rows, y.data());
    ok &= check("f32", float_rows([&](int64_t i) { return w32[i]; }));
    HWY_DYNAMIC_DISPATCH(bench_highway::F32RowsContribDot)(x.data(), w32.data(), in, 0, rows, y.data());
    ok &= check("f32 Dot", float_rows([&](int64_t i) { return w32[i]; }));
    auto bf16 = [&](int64_t i) { const uint32_t bits = uint32_t(wbf[i]) << 16; float f; std::memcpy(&f, &bits, 4); return f; };
    HWY_DYNAMIC_DISPATCH(bench_highway::Bf16Rows)(x.data(), wbf.data(), in, 0, rows, y.data());
    ok &= check("bf16", float_rows(bf16));
    HWY_DYNAMIC_DISPATCH(bench_highway::SplitPairs)(x.data(), in, x_pairs.data());
    HWY_DYNAMIC_DISPATCH(bench_highway::Bf16PairRows)(x_pairs.data(), wbf.data(), in, 0, rows, y.data());
    ok &= check("bf16 pairs", float_rows(bf16));
    HWY_DYNAMIC_DISPATCH(bench_highway::F16Rows)(x.data(), wh.data(), in, 0, rows, y.data());
    ok &= check("f16", float_rows([&](int64_t i) { return half_to_float(wh[i]); }));
    const size_t q8_bytes = in / kQK * sizeof(block_q8_0), q4_bytes = in / kQK * sizeof(block_q4_0);
    HWY_DYNAMIC_DISPATCH(bench_highway::Q8Rows)(reinterpret_cast<const uint8_t*>(q8.data()), q8_bytes, 0, rows,
                                                xq.data(), xd.data(), xsum.data(), in, y.data());
    ok &= check("Q8_0", block_rows(false));
    HWY_DYNAMIC_DISPATCH(bench_highway::Q4Rows)(reinterpret_cast<const uint8_t*>(q4.data()), q4_bytes, 0, rows,
                                                xq.data(), xd.data(), xsum.data(), in, y.data());
    ok &= check("Q4_0", block_rows(true));
    HWY_DYNAMIC_DISPATCH(bench_highway::Q4StartRows)(reinterpret_cast<const uint8_t*>(q4.data()), q4_bytes, 0, rows,
                                                     xq.data(), xd.data(), xsum.data(), in, y.data());
    ok &= check("Q4_0 start", block_rows(true));
  }
  hwy::SetSupportedTargetsForTest(0);
  std::printf("%s\n", ok ? "all match" : "MISMATCH");
  return ok ? 0 : 1;
}
#endif  // BENCH_HIGHWAY_KERNELS_ONLY
#endif  // HWY_ONCE
