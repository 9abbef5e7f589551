// Benchmark, not a test (no ctest entry): the cost of one row x one token of each integer dot
// product of a block type, in CPU time of this thread (clock_gettime(CLOCK_THREAD_CPUTIME_ID)), so
// the figures hold while other jobs share the machine. Everything sits in L1/L2: this measures the
// instructions, not the memory (journey bench and bench_engine_batch measure whole steps).
//
//   dot_row     the fused decode dot (1 token; blocks widened in registers), per row of one
//               dot_rows call over kRows rows
//   dot         an unpacked row against one token (batched decode before dot_tokens)
//   dot_tokens  4 unpacked rows against 16 tokens in register lanes (batched decode)
//   unpack_row  one stored row to the unpacked form (once per row per batched step)
//   grouped     dot_row_groups: the fused decode dot on Q4_0 or Q8_0 rows regrouped by 8
//               (block_q4_0x8, block_q8_0x8), per row (compare with dot_row); back/row: one such
//               row put back as stored (rows_from_groups: what prefill pays per row of a grouped matrix)
//   stored      dot_tokens_stored: 4 stored rows against 16 tokens in register lanes, no unpacking
//               (Q8_0, Q4_0, Q4_K; compare with dot_tokens + unpack_row / 16 tokens); grp/tokens:
//               dot_tokens_grouped, the same from the rows regrouped by 8 (batched decode of them);
//               +sums: dot_tokens_q8_0_sums, Q8_0's stored rows with their block sums (AVX512-VNNI)
//
// usage: bench_block_dots [--in 2048] [--tokens 16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu/kernels.h"
#include "cpu/typed_linear.h"
#include "quant/quantize.h"

using namespace journey;

namespace {

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Best of 5 rounds of `repeat` calls, seconds per call.
template <typename F>
double time_call(F&& f, int repeat) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const double t0 = thread_seconds();
    for (int i = 0; i < repeat; ++i) f();
    best = std::min(best, (thread_seconds() - t0) / repeat);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t in = 2048, tokens = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--in")) in = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoll(argv[i + 1]);
    else return std::fprintf(stderr, "usage: %s [--in 2048] [--tokens 16]\n", argv[0]), 2;
  }
  if (in <= 0 || in % 256 != 0 || tokens < 1 || tokens > cpu::kernels::kLaneTokens)
    return std::fprintf(stderr, "--in must be a positive multiple of 256, --tokens 1..16\n"), 2;
  const cpu::kernels::Isa isa = cpu::kernels::best_isa();
  const cpu::kernels::KernelTable& k = cpu::kernels::table(isa);
  constexpr int R = cpu::kernels::kTokenRows;
  const int64_t groups = in / cpu::kernels::kGroup;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kRows = std::max(R, cpu::kernels::kStoredTokenRows);
  std::vector<float> w(size_t(kRows * in)), x(size_t(tokens * in));  // [kRows, in], [tokens, in]
  for (float& v : w) v = normal(rng);
  for (float& v : x) v = normal(rng);
  std::printf("isa %s, in %lld, %lld tokens; ns of this thread's CPU time per row x token (2 x in operations)\n",
              std::string(cpu::kernels::isa_name(isa)).c_str(), (long long)in, (long long)tokens);
  std::printf("%-6s %10s %10s %10s %10s %12s %12s %12s %12s %10s\n", "type", "dot_row", "grouped", "back/row", "dot",
              "dot_tokens", "unpack/row", "stored", "grp/tokens", "+sums");
  float sink = 0;
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q3_K, DType::Q2_K}) {
    const int64_t row_bytes = dtype_bytes_for(type, in);
    std::vector<uint8_t> stored(size_t(kRows * row_bytes));  // [kRows rows as stored]
    for (int r = 0; r < kRows; ++r) quant::quantize(type, w.data() + r * in, stored.data() + r * row_bytes, in);
    cpu::QuantizedInput qx;
    qx.quantize(x.data(), tokens, in, dtype_block_size(type) == 256 ? 256 : 32);
    qx.lay_out_token_lanes(tokens);
    std::vector<uint8_t> q(size_t(R * in));                               // [R, in] unpacked
    std::vector<float> s(size_t(R * groups)), o(size_t(R * groups));      // [R, in / 16]
    for (int r = 0; r < R; ++r)
      k.unpack_row(type, stored.data() + r * row_bytes, in, q.data() + r * in, s.data() + r * groups, o.data() + r * groups);
    const int zero = cpu::kernels::unpacked_zero(type);
    const bool has_offset = cpu::kernels::unpacked_has_offset(type);
    const cpu::kernels::QuantizedActivations x0{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
    const int repeat = int(std::max<int64_t>(1, 4000000 / in));
    double fused = -1, tiled = -1;
    if (k.dot_rows && cpu::kernels::has_fused_dot(type, isa)) {
      float rows_out[kRows];
      fused = time_call([&] {
        k.dot_rows(type, stored.data(), row_bytes, kRows, x0, in, rows_out);
        sink += rows_out[0];
      }, repeat) / kRows;
    }
    double grouped = -1, back = -1, grouped_tokens = -1;
    if (k.dot_row_groups && cpu::kernels::has_row_group_dot(type, isa)) {
      constexpr int64_t G = cpu::kernels::kGroupRows;
      std::vector<uint8_t> rows(size_t(G * row_bytes)), groups(size_t(G * row_bytes));
      for (int64_t r = 0; r < G; ++r)
        quant::quantize(type, w.data() + (r % kRows) * in, rows.data() + r * row_bytes, in);
      cpu::kernels::rows_to_groups(type, cpu::kernels::group_layout(isa), rows.data(), G, in, groups.data());
      float group_out[G];
      grouped = time_call([&] {
        k.dot_row_groups(type, groups.data(), 1, x0, in, group_out);
        sink += group_out[0];
      }, repeat / int(G) + 1) / double(G);
      back = time_call([&] {
        cpu::kernels::rows_from_groups(type, cpu::kernels::group_layout(isa), groups.data(), in, 0, G, rows.data());
        sink += float(rows[5]);
      }, repeat / int(G) + 1) / double(G);
      if (k.dot_tokens_grouped && cpu::kernels::has_grouped_token_dot(type, isa)) {
        constexpr int kStored = cpu::kernels::kStoredTokenRows;
        float out[kStored * cpu::kernels::kLaneTokens];
        grouped_tokens = time_call([&] {
          for (int first = 0; first < G; first += kStored) {
            k.dot_tokens_grouped(type, groups.data(), size_t(row_bytes), first, kStored, qx.token_lanes(), in, out);
            sink += out[0];
          }
        }, repeat / int(tokens * G) + 1) / double(G * tokens);
      }
    }
    const double plain = time_call([&] {
      for (int r = 0; r < R; ++r)
        for (int64_t t = 0; t < tokens; ++t) {
          const cpu::kernels::QuantizedActivations xt{qx.q.data() + t * in, qx.dx.data() + t * groups,
                                                      qx.gsum.data() + t * groups, qx.xs.data() + t * groups};
          sink += k.dot(q.data() + r * in, s.data() + r * groups, o.data() + r * groups, zero, has_offset, xt, in);
        }
    }, repeat / int(tokens) + 1) / double(R * tokens);
    if (k.dot_tokens) {
      float out[R * cpu::kernels::kLaneTokens];
      tiled = time_call([&] {
        k.dot_tokens(type, q.data(), s.data(), o.data(), R, qx.token_lanes(), in, out);
        sink += out[0];
      }, repeat / int(tokens) + 1) / double(R * tokens);
    }
    const double unpack = time_call([&] {
      for (int r = 0; r < R; ++r)
        k.unpack_row(type, stored.data() + r * row_bytes, in, q.data() + r * in, s.data() + r * groups, o.data() + r * groups);
    }, repeat) / R;
    double direct = -1;
    if (k.dot_tokens_stored && cpu::kernels::has_stored_token_dot(type, isa)) {
      constexpr int kStored = cpu::kernels::kStoredTokenRows;
      float out[kStored * cpu::kernels::kLaneTokens];
      direct = time_call([&] {
        k.dot_tokens_stored(type, stored.data(), size_t(row_bytes), kStored, qx.token_lanes(), in, out);
        sink += out[0];
      }, repeat / int(tokens) + 1) / double(kStored * tokens);
    }
    double with_sums = -1;
    if (type == DType::Q8_0 && k.dot_tokens_q8_0_sums) {
      constexpr int kStored = cpu::kernels::kStoredTokenRows;
      std::vector<int16_t> sums(size_t(kStored * (in / 32)));
      cpu::kernels::q8_0_block_sums(stored.data(), kStored, in, sums.data());
      float out[kStored * cpu::kernels::kLaneTokens];
      with_sums = time_call([&] {
        k.dot_tokens_q8_0_sums(stored.data(), size_t(row_bytes), sums.data(), size_t(in / 32), kStored, qx.token_lanes(),
                               in, out);
        sink += out[0];
      }, repeat / int(tokens) + 1) / double(kStored * tokens);
    }
    auto cell = [](double seconds) { return seconds < 0 ? std::string("-") : std::to_string(seconds * 1e9).substr(0, 6); };
    std::printf("%-6s %10s %10s %10s %10s %12s %12s %12s %12s %10s\n", std::string(dtype_name(type)).c_str(),
                cell(fused).c_str(), cell(grouped).c_str(), cell(back).c_str(), cell(plain).c_str(), cell(tiled).c_str(),
                cell(unpack).c_str(), cell(direct).c_str(), cell(grouped_tokens).c_str(), cell(with_sums).c_str());
  }
  // The floor of every column but unpack: each row x token is `in` multiply-adds, and vpdpbusd
  // (512-bit) does 64 of them per instruction at best (AVX2's vpmaddubsw + vpmaddwd pair 32).
  const double peak = cpu::kernels::peak_rate(cpu::kernels::PeakKind::Int8Dot, 0.5);
  if (peak > 0)
    std::printf("int8 dot peak of this thread (vpdpbusd; AVX2: vpmaddubsw + vpmaddwd): %.0f GOP/s, i.e. %.2f ns per row x token at in = %lld\n", peak * 1e-9,
                2.0 * double(in) / peak * 1e9, (long long)in);
  std::printf("(checksum %g)\n", double(sink));
}
