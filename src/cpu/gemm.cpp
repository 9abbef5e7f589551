// The small-batch product y = x W^T, W [out, in] row-major, in the dot-product form that layout
// asks for: y[t, o] is the dot product of token row x[t, :] with weight row W[o, :], both
// contiguous. The kernel computes a tile of kTokens tokens x kRows weight rows at once:
//
//   for k in steps of one SIMD register (kLanes floats):
//     load kTokens registers of x and kRows registers of W, and do kTokens * kRows FMAs into
//     kTokens * kRows accumulator registers (each weight register is used kTokens times, each
//     token register kRows times, so loads stay well below the FMA count)
//   then fold the accumulators' lanes into kTokens * kRows sums (sum_lanes) and write them to y.
//
// Loop order (rows()): weight rows outermost, so each block of kRows rows comes from memory once
// and is reused from L1/L2 by every token tile; x is small and stays in L2. Only the first token
// tile of a block would wait for memory, and the later ones would leave it idle, so while a block
// is computed the next block's rows are prefetched, spread evenly over all its token tiles: the
// memory stream then runs during the arithmetic instead of after it (126 vs 155 ms for the 16-token
// products of a 0.5B model on 2 cores, docs/performance.md). For many tokens
// (prefill) the `in` dimension is cut into slices so that x's slice still fits in L2; the partial
// sums are then added into y. Nothing is repacked: the weights are used as loaded.
//
// This is the scheme of llama.cpp's "tinyBLAS" (sgemm.cpp) in a few generic lines. The vectors
// are GCC/Clang vector extensions, so one template serves every instruction set; each x86 variant
// is compiled with its own target attribute, so even a build for baseline x86-64 (CI,
// JOURNEY_NATIVE=OFF) runs AVX-512 or AVX2 code where the CPU has it. Accumulation is plain f32
// FMA (-ffp-contract=fast is set for this file in CMake), k ascending within each lane.
#include "cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <utility>

// GCC notes that returning 32- and 64-byte vectors changes the ABI when the file is built without
// AVX; every function that does so here is internal and always inlined, so no ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace journey::cpu::gemm {

namespace {

#if defined(__x86_64__) || defined(__i386__)
#define JOURNEY_GEMM_X86 1
#endif

// kLanes floats in one SIMD register; `a * b + c` on them is one FMA per register. (Spelled out
// per width: GCC drops vector_size from an alias template with a dependent size.)
template <int kLanes>
struct VecOf;
template <>
struct VecOf<4> {
  typedef float type __attribute__((vector_size(16)));
  typedef float unaligned __attribute__((vector_size(16), aligned(4), may_alias));  // to load from any float
};
template <>
struct VecOf<8> {
  typedef float type __attribute__((vector_size(32)));
  typedef float unaligned __attribute__((vector_size(32), aligned(4), may_alias));  // to load from any float
};
template <>
struct VecOf<16> {
  typedef float type __attribute__((vector_size(64)));
  typedef float unaligned __attribute__((vector_size(64), aligned(4), may_alias));  // to load from any float
};
template <int kLanes>
using Vec = typename VecOf<kLanes>::type;

template <int kLanes>
[[gnu::always_inline]] inline Vec<kLanes> load(const float* p) {
  // An unaligned load (rows start anywhere). Not memcpy: GCC then copies x's rows through the
  // stack instead of loading straight into registers (measured: 15% slower steps).
  return *reinterpret_cast<const typename VecOf<kLanes>::unaligned*>(p);
}

// One folding step of sum_lanes. Both inputs hold segments of `width` partial sums; the result
// holds a's segments in its low half and b's in its high half, each folded to width/2 by adding
// its two halves. Lane i of the result is lane half_lane(i, false) + lane half_lane(i, true) of
// the concatenation [a, b].
constexpr int half_lane(int lanes, int width, int i, bool upper) {
  const int source = i < lanes / 2 ? 0 : lanes;  // lanes of b are numbered after those of a
  const int j = i % (lanes / 2);
  return source + (j / (width / 2)) * width + j % (width / 2) + (upper ? width / 2 : 0);
}

template <int kLanes, int kWidth, std::size_t... I>
[[gnu::always_inline]] inline void fold(const Vec<kLanes>& a, const Vec<kLanes>& b, Vec<kLanes>& folded,
                                        std::index_sequence<I...>) {
  folded = __builtin_shufflevector(a, b, half_lane(kLanes, kWidth, int(I), false)...) +
           __builtin_shufflevector(a, b, half_lane(kLanes, kWidth, int(I), true)...);
}

// v[0 .. kCount) hold segments of kWidth partial sums; fold pairs until one vector of kLanes
// full sums is left in v[0], lane i the sum of the original v[i].
template <int kLanes, int kWidth, int kCount>
[[gnu::always_inline]] inline void fold_all(Vec<kLanes>* v) {
  if constexpr (kWidth > 1) {
    for (int i = 0; i < kCount / 2; ++i)
      fold<kLanes, kWidth>(v[2 * i], v[2 * i + 1], v[i], std::make_index_sequence<kLanes>());
    fold_all<kLanes, kWidth / 2, kCount / 2>(v);
  }
}

// sums[i] = sum of the lanes of acc[i], kLanes accumulators at a time (15 shuffle+add steps for
// 16 registers of 16 lanes, instead of 16 separate horizontal sums).
template <int kLanes, int kCount>
[[gnu::always_inline]] inline void sum_lanes(const Vec<kLanes>* acc, float* sums) {
  for (int group = 0; group < kCount; group += kLanes) {
    Vec<kLanes> v[kLanes] = {};  // missing accumulators of a last, partial group stay zero
    for (int i = 0; i < kLanes && group + i < kCount; ++i) v[i] = acc[group + i];
    fold_all<kLanes, kLanes, kLanes>(v);
    std::memcpy(sums + group, &v[0], sizeof v[0]);
  }
}

// Cache lines of weights to bring into L2 while a tile computes: the lines [begin, end) of the
// contiguous range that starts at `first`.
struct Prefetch {
  static constexpr int64_t kFloatsPerLine = 64 / sizeof(float);
  const float* first = nullptr;
  int64_t begin = 0, end = 0;
  [[gnu::always_inline]] void line(int64_t i) const { __builtin_prefetch(first + i * kFloatsPerLine, 0, 2); }
};

// y[t, r] (+)= sum over k in [k_begin, k_end) of x[t, k] * w[r, k] for a kTokens x kRows tile;
// y, x and w point at the tile's first token / weight row. The slice starting at k = 0 writes
// bias + sum, later slices add to it. `prefetch` is this tile's share of the next block.
template <int kLanes, int kTokens, int kRows>
[[gnu::always_inline]] inline void tile(float* y, const float* x, const float* w, const float* bias, int64_t in,
                                        int64_t out, int64_t k_begin, int64_t k_end, const Prefetch& prefetch) {
  using V = Vec<kLanes>;
  constexpr int kCount = kTokens * kRows;
  V acc[kCount] = {};  // [kTokens, kRows] registers of partial sums
  // the prefetches, spread evenly over the k steps
  const int64_t steps = std::max<int64_t>(1, (k_end - k_begin) / kLanes);
  const int64_t to_issue = prefetch.end - prefetch.begin;
  int64_t issued = 0, step = 0;
  int64_t k = k_begin;
  for (; k + kLanes <= k_end; k += kLanes) {
    for (const int64_t target = ++step * to_issue / steps; issued < target; ++issued)
      prefetch.line(prefetch.begin + issued);
    V xs[kTokens];  // x[t, k .. k + kLanes) of each token of the tile
    for (int t = 0; t < kTokens; ++t) xs[t] = load<kLanes>(x + t * in + k);
    for (int r = 0; r < kRows; ++r) {
      const V ws = load<kLanes>(w + r * in + k);
      for (int t = 0; t < kTokens; ++t) acc[t * kRows + r] += xs[t] * ws;
    }
  }
  float sums[(kCount + kLanes - 1) / kLanes * kLanes];  // [kTokens, kRows] (+ padding)
  sum_lanes<kLanes, kCount>(acc, sums);
  for (; k < k_end; ++k)  // the last few k when in is not a multiple of kLanes
    for (int t = 0; t < kTokens; ++t)
      for (int r = 0; r < kRows; ++r) sums[t * kRows + r] += x[t * in + k] * w[r * in + k];
  for (int t = 0; t < kTokens; ++t)
    for (int r = 0; r < kRows; ++r) {
      float& dst = y[t * out + r];
      dst = (k_begin > 0 ? dst : bias ? bias[r] : 0.0f) + sums[t * kRows + r];
    }
}

// tile() for an edge tile with fewer tokens or rows than the full tile: the compiler builds one
// tile per (tokens, rows) shape, chosen here at run time.
template <int kLanes, int kTokens, int kRows>
[[gnu::always_inline]] inline void any_tile(int tokens, int rows, float* y, const float* x, const float* w,
                                            const float* bias, int64_t in, int64_t out, int64_t k_begin,
                                            int64_t k_end, const Prefetch& prefetch) {
  if constexpr (kTokens > 1) {
    if (tokens < kTokens)
      return any_tile<kLanes, kTokens - 1, kRows>(tokens, rows, y, x, w, bias, in, out, k_begin, k_end, prefetch);
  }
  if constexpr (kRows > 1) {
    if (rows < kRows)
      return any_tile<kLanes, kTokens, kRows - 1>(tokens, rows, y, x, w, bias, in, out, k_begin, k_end, prefetch);
  }
  tile<kLanes, kTokens, kRows>(y, x, w, bias, in, out, k_begin, k_end, prefetch);
}

// The length of the slices of `in`: x's slice [T, slice] should stay in L2 (512 KiB here; cores
// with AVX2 or AVX-512 have 1-2 MiB) while all of this thread's weight rows stream past it.
int64_t slice_length(int64_t T, int64_t in, int lanes) {
  constexpr int64_t kSliceBytes = 512 * 1024;
  const int64_t fit = std::max<int64_t>(256, kSliceBytes / int64_t(sizeof(float)) / T / lanes * lanes);
  return std::min(in, fit);
}

template <int kLanes, int kTokens, int kRows>
[[gnu::always_inline]] inline void rows(float* y, const float* x, const float* weight, const float* bias, int64_t T,
                                        int64_t in, int64_t out, int64_t row_begin, int64_t row_end) {
  if (in == 0) {  // an empty sum: y = bias
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = row_begin; o < row_end; ++o) y[t * out + o] = bias ? bias[o] : 0.0f;
    return;
  }
  const int64_t slice = slice_length(T, in, kLanes);
  for (int64_t k0 = 0; k0 < in; k0 += slice) {
    const int64_t k1 = std::min(in, k0 + slice);
    const int64_t token_tiles = (T + kTokens - 1) / kTokens;
    for (int64_t o = row_begin; o < row_end; o += kRows) {
      const int rows_here = int(std::min<int64_t>(kRows, row_end - o));
      // the next block's rows (contiguous: whole rows of W), one share per token tile; with the
      // inputs cut into slices, the first slice brings whole rows and the others nothing
      Prefetch next;
      next.first = weight + (o + kRows) * in;
      const int64_t next_floats = std::clamp<int64_t>(row_end - (o + kRows), 0, kRows) * in;
      const int64_t next_lines = k0 == 0 ? (next_floats + Prefetch::kFloatsPerLine - 1) / Prefetch::kFloatsPerLine : 0;
      for (int64_t t = 0; t < T; t += kTokens) {
        const int tokens_here = int(std::min<int64_t>(kTokens, T - t));
        const int64_t tile_index = t / kTokens;
        next.begin = next_lines * tile_index / token_tiles;
        next.end = next_lines * (tile_index + 1) / token_tiles;
        any_tile<kLanes, kTokens, kRows>(tokens_here, rows_here, y + t * out + o, x + t * in, weight + o * in,
                                         bias ? bias + o : nullptr, in, out, k0, k1, next);
      }
    }
  }
}

// One function per instruction set. Tile shapes fill the register file without spilling:
// AVX-512 has 32 registers: 24 accumulators (4 tokens x 6 rows) + 4 x + 1 w (4 x 6 measured 20 vs
// 23 ms for 4 x 4 on cached weights);
// AVX2 and SSE have 16: 8 accumulators (2 tokens x 4 rows) + 2 x + 1 w.
#define JOURNEY_GEMM_ARGS                                                                                     \
  float *y, const float *x, const float *weight, const float *bias, int64_t T, int64_t in, int64_t out, \
      int64_t row_begin, int64_t row_end
#define JOURNEY_GEMM_PASS y, x, weight, bias, T, in, out, row_begin, row_end

void rows_generic(JOURNEY_GEMM_ARGS) { rows<4, 2, 4>(JOURNEY_GEMM_PASS); }

#ifdef JOURNEY_GEMM_X86
__attribute__((target("avx2,fma"))) void rows_avx2(JOURNEY_GEMM_ARGS) { rows<8, 2, 4>(JOURNEY_GEMM_PASS); }
__attribute__((target("avx512f,avx2,fma"))) void rows_avx512(JOURNEY_GEMM_ARGS) {
  rows<16, 4, 6>(JOURNEY_GEMM_PASS);
}
#endif

}  // namespace

bool supports(Isa isa) {
  switch (isa) {
    case Isa::Generic: return true;
#ifdef JOURNEY_GEMM_X86
    case Isa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::Avx512: return __builtin_cpu_supports("avx512f") && supports(Isa::Avx2);
#endif
    default: return false;
  }
}

Isa best_isa() {
  static const Isa best = supports(Isa::Avx512) ? Isa::Avx512 : supports(Isa::Avx2) ? Isa::Avx2 : Isa::Generic;
  return best;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "generic";
  }
}

void linear_rows(Isa isa, JOURNEY_GEMM_ARGS) {
  if (!supports(isa)) isa = best_isa();  // never run instructions this CPU lacks
#ifdef JOURNEY_GEMM_X86
  if (isa == Isa::Avx512) return rows_avx512(JOURNEY_GEMM_PASS);
  if (isa == Isa::Avx2) return rows_avx2(JOURNEY_GEMM_PASS);
#endif
  (void)isa;
  rows_generic(JOURNEY_GEMM_PASS);
}

}  // namespace journey::cpu::gemm
