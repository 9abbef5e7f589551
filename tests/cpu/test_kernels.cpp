// The typed kernels of cpu/kernels.h on EVERY instruction set this CPU runs (the op test in
// tests/backends runs the best one only): unpacking each block type, the integer dot product
// against Q8 activations, the f16/bf16 tile kernel, and the bf16 prefill kernels (AVX512-BF16, AMX) — each
// against a double-precision loop over the reference dequantizer's values (quant::dequantize).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/typed_linear.h"
#include "quant/blocks.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "reference/scalar_ops.h"

using namespace journey;
using cpu::kernels::Isa;

namespace {

const DType kBlockTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                             DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::NeonDot}) {
    if (cpu::kernels::supports(isa)) isas.push_back(isa);
    else {
      const std::string lacking = "this CPU lacks " + std::string(cpu::kernels::isa_name(isa)) + "; not tested";
      MESSAGE(lacking);
    }
  }
  return isas;
}

std::vector<uint8_t> quantized(DType type, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(size_t(dtype_bytes_for(type, int64_t(values.size()))));
  quant::quantize(type, values.data(), bytes.data(), int64_t(values.size()));
  return bytes;
}

}  // namespace

TEST_CASE("kernels: every block type unpacks to the reference dequantizer's values, on every instruction set") {
  const int64_t n = 768;  // 3 K super-blocks, 24 legacy blocks
  const auto values = scalar::random_vector(size_t(n), 5, 0.7f);
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    for (DType type : kBlockTypes) {
      CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type));
      const auto bytes = quantized(type, values);
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n)), s(static_cast<size_t>(n / 16)), o(static_cast<size_t>(n / 16));
      std::vector<uint8_t> q(static_cast<size_t>(n));
      quant::dequantize(type, bytes.data(), want.data(), n);
      k.unpack_row(type, bytes.data(), n, q.data(), s.data(), o.data());
      k.dequantize_unpacked(q.data(), s.data(), o.data(), cpu::kernels::unpacked_zero(type), n, got.data());
      // (s * (q - z) - o rounds once or twice where the reference's formula rounds in its own order)
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        worst = std::max(worst, std::abs(double(got[i]) - want[i]));
        scale = std::max(scale, std::abs(double(want[i])));
      }
      CHECK(worst <= 1e-6 * scale);
      if (!cpu::kernels::unpacked_has_offset(type))  // symmetric types: no offsets at all
        for (float offset : o) CHECK(offset == 0.0f);
    }
  }
}

TEST_CASE("kernels: the integer dot products (unpacked, and fused for decode) equal the double-precision dot of the dequantized values") {
  for (int64_t n : {32, 256, 768, 4352}) {
    const auto w_values = scalar::random_vector(size_t(n), 7, 0.5f);
    const auto x_values = scalar::random_vector(size_t(n), 8, 2.0f);
    for (Isa isa : supported_isas()) {
      const auto& k = cpu::kernels::table(isa);
      for (DType type : kBlockTypes) {
        if (n % dtype_block_size(type) != 0) continue;
        CAPTURE(n); CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type));
        const auto bytes = quantized(type, w_values);
        std::vector<float> w(static_cast<size_t>(n));
        quant::dequantize(type, bytes.data(), w.data(), n);
        cpu::QuantizedInput qx;
        qx.quantize(x_values.data(), 1, n, dtype_block_size(type) == 256 ? 256 : 32);
        double want = 0, magnitude = 0;  // the dot of the dequantized weights with the dequantized x
        for (int64_t i = 0; i < n; ++i) {
          const double x = double(qx.dx[size_t(i / 16)]) * qx.q[size_t(i)];
          want += double(w[i]) * x;
          magnitude += std::abs(double(w[i]) * x);
        }
        std::vector<uint8_t> q(static_cast<size_t>(n));
        std::vector<float> s(static_cast<size_t>(n / 16)), o(static_cast<size_t>(n / 16));
        k.unpack_row(type, bytes.data(), n, q.data(), s.data(), o.data());
        const cpu::kernels::QuantizedActivations x{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
        const float got = k.dot(q.data(), s.data(), o.data(), cpu::kernels::unpacked_zero(type),
                                cpu::kernels::unpacked_has_offset(type), x, n);
        CHECK(std::abs(got - want) <= 1e-5 * magnitude);
        if (k.dot_rows && cpu::kernels::has_fused_dot(type, isa)) {  // the fused decode path
          float fused = NAN;
          k.dot_rows(type, bytes.data(), bytes.size(), 1, x, n, &fused);
          CHECK(std::abs(fused - want) <= 1e-5 * magnitude);
        }
      }
    }
  }
}

// Every bit pattern of the packed scales, minimums and quants, not only those a quantizer writes
// (its scales stay near the largest): K-type super-blocks of random bytes with sane f16 d / dmin,
// through each instruction set's fused decode dot against the dequantized values.
template <typename Block>
void set_k_block_halves(std::vector<uint8_t>& bytes, uint16_t d, uint16_t dmin) {
  for (size_t at = 0; at + sizeof(Block) <= bytes.size(); at += sizeof(Block)) {
    Block b;
    std::memcpy(&b, bytes.data() + at, sizeof b);
    b.d = d;
    if constexpr (requires { b.dmin; }) b.dmin = dmin;
    std::memcpy(bytes.data() + at, &b, sizeof b);
  }
}

TEST_CASE("kernels: the fused K-type dots decode every packed scale, minimum and quant bit (random bytes)") {
  const int64_t n = 1024;
  const auto x_values = scalar::random_vector(size_t(n), 11, 2.0f);
  cpu::QuantizedInput qx;
  qx.quantize(x_values.data(), 1, n, 256);
  const cpu::kernels::QuantizedActivations x{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
  for (DType type : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    std::vector<uint8_t> bytes(size_t(n / 256) * dtype_block_bytes(type));
    uint32_t state = 12345u + uint32_t(type);
    for (auto& byte : bytes) byte = uint8_t((state = state * 1664525u + 1013904223u) >> 24);
    const uint16_t d = 0x2C00, dmin = 0x2800;  // 1/16 and 1/32
    switch (type) {
      case DType::Q2_K: set_k_block_halves<quant::block_q2_k>(bytes, d, dmin); break;
      case DType::Q3_K: set_k_block_halves<quant::block_q3_k>(bytes, d, dmin); break;
      case DType::Q4_K: set_k_block_halves<quant::block_q4_k>(bytes, d, dmin); break;
      case DType::Q5_K: set_k_block_halves<quant::block_q5_k>(bytes, d, dmin); break;
      default: set_k_block_halves<quant::block_q6_k>(bytes, d, dmin); break;
    }
    std::vector<float> w(static_cast<size_t>(n));
    quant::dequantize(type, bytes.data(), w.data(), n);
    double want = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xi = double(qx.dx[size_t(i / 16)]) * qx.q[size_t(i)];
      want += double(w[i]) * xi;
      magnitude += std::abs(double(w[i]) * xi);
    }
    for (Isa isa : supported_isas()) {
      const auto& k = cpu::kernels::table(isa);
      if (!k.dot_rows || !cpu::kernels::has_fused_dot(type, isa)) continue;
      CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type));
      float fused = NAN;
      k.dot_rows(type, bytes.data(), bytes.size(), 1, x, n, &fused);
      CHECK(std::abs(fused - want) <= 1e-5 * magnitude);
    }
  }
}

TEST_CASE("kernels: aarch64 dotprod's dot (sdot on q - 128) and fused dot equal the generic dot bit for bit, extreme quants included") {
  if (!cpu::kernels::supports(Isa::NeonDot)) {
    MESSAGE("this CPU lacks neon-dotprod; not tested");
    return;
  }
  const auto& generic = cpu::kernels::table(Isa::Generic);
  const auto& neon = cpu::kernels::table(Isa::NeonDot);
  const bool own_dot = neon.dot != generic.dot;  // (doctest prints no function pointers)
  REQUIRE(own_dot);
  // 35 groups: two chunks of 16 groups (the 4-group steps) and a tail of 3
  for (int64_t n : {int64_t(32), int64_t(256), int64_t(560), int64_t(4352)}) {
    for (int extreme = 0; extreme < 2; ++extreme) {
      auto w_values = scalar::random_vector(size_t(n), 17, 0.5f);
      auto x_values = scalar::random_vector(size_t(n), 18, 2.0f);
      if (extreme)  // every quant at its largest magnitude, activations at +-127
        for (size_t i = 0; i < size_t(n); ++i) w_values[i] = i % 2 ? 1.0f : -1.0f, x_values[i] = i % 3 ? 2.0f : -2.0f;
      for (DType type : kBlockTypes) {
        if (n % dtype_block_size(type) != 0) continue;
        CAPTURE(n); CAPTURE(extreme); CAPTURE(dtype_name(type));
        const auto bytes = quantized(type, w_values);
        cpu::QuantizedInput qx;
        qx.quantize(x_values.data(), 1, n, dtype_block_size(type) == 256 ? 256 : 32);
        std::vector<uint8_t> q(static_cast<size_t>(n));
        std::vector<float> s(static_cast<size_t>(n / 16)), o(static_cast<size_t>(n / 16));
        generic.unpack_row(type, bytes.data(), n, q.data(), s.data(), o.data());
        const cpu::kernels::QuantizedActivations x{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
        const int zero = cpu::kernels::unpacked_zero(type);
        const bool has_offset = cpu::kernels::unpacked_has_offset(type);
        const float want = generic.dot(q.data(), s.data(), o.data(), zero, has_offset, x, n);
        const float got = neon.dot(q.data(), s.data(), o.data(), zero, has_offset, x, n);
        uint32_t want_bits = 0, got_bits = 0;
        std::memcpy(&want_bits, &want, 4);
        std::memcpy(&got_bits, &got, 4);
        CHECK(got_bits == want_bits);
        if (cpu::kernels::has_fused_dot(type, Isa::NeonDot)) {  // the fused decode dot, from the stored row
          float fused = NAN;
          neon.dot_rows(type, bytes.data(), bytes.size(), 1, x, n, &fused);
          uint32_t fused_bits = 0;
          std::memcpy(&fused_bits, &fused, 4);
          CHECK(fused_bits == want_bits);
        }
      }
    }
  }
}

TEST_CASE("kernels: the AVX-512 table's K dots (Q6_K two chunks to a register) give the AVX2 table's bits, extreme quants included") {
  if (!cpu::kernels::supports(Isa::Avx512)) {
    MESSAGE("this CPU lacks avx512-vnni; not tested");
    return;
  }
  const auto& avx2 = cpu::kernels::table(Isa::Avx2);
  const auto& avx512 = cpu::kernels::table(Isa::Avx512);
  int compared = 0;
  // 1, 3 (an odd count: the last super-block's accumulator alone), 8 and 22 super-blocks
  for (int64_t n : {int64_t(256), int64_t(768), int64_t(2048), int64_t(5632)}) {
    for (int extreme = 0; extreme < 2; ++extreme) {
      auto w_values = scalar::random_vector(size_t(n), 23, 0.5f);
      auto x_values = scalar::random_vector(size_t(n), 24, 2.0f);
      if (extreme)  // the largest quants and scales, activations at +-127
        for (size_t i = 0; i < size_t(n); ++i) w_values[i] = i % 2 ? 1.0f : -1.0f, x_values[i] = i % 3 ? 2.0f : -2.0f;
      cpu::QuantizedInput qx;
      qx.quantize(x_values.data(), 1, n, 256);
      const cpu::kernels::QuantizedActivations x{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
      for (DType type : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        if (!cpu::kernels::has_fused_dot(type, Isa::Avx2) || !cpu::kernels::has_fused_dot(type, Isa::Avx512)) continue;
        CAPTURE(n); CAPTURE(extreme); CAPTURE(dtype_name(type));
        const auto bytes = quantized(type, w_values);
        float narrow = NAN, wide = NAN;
        avx2.dot_rows(type, bytes.data(), bytes.size(), 1, x, n, &narrow);
        avx512.dot_rows(type, bytes.data(), bytes.size(), 1, x, n, &wide);
        uint32_t narrow_bits = 0, wide_bits = 0;
        std::memcpy(&narrow_bits, &narrow, 4);
        std::memcpy(&wide_bits, &wide, 4);
        CHECK(wide_bits == narrow_bits);
        CHECK(std::isfinite(wide));
        ++compared;
      }
    }
  }
  CHECK(compared == 4 * 2 * 5);
}

TEST_CASE("kernels: dot_rows over many rows gives each row the value it gets alone, and the dequantized dot") {
  // 5 rows starting at row 0 and at row 1; rows of 768 (24 blocks: the 4-block loop and no tail)
  // and 800 (25 blocks: a tail block)
  for (int64_t n : {int64_t(768), int64_t(800)})
    for (Isa isa : supported_isas()) {
      const auto& k = cpu::kernels::table(isa);
      if (!k.dot_rows) continue;
      for (DType type : kBlockTypes) {
        if (n % dtype_block_size(type) != 0) continue;
        CAPTURE(n); CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type));
        constexpr int kRows = 6;
        const size_t row_bytes = size_t(dtype_bytes_for(type, n));
        std::vector<uint8_t> stored(kRows * row_bytes);  // [kRows rows as stored]
        std::vector<float> w(size_t(kRows * n));          // [kRows, n] dequantized
        for (int r = 0; r < kRows; ++r) {
          const auto bytes = quantized(type, scalar::random_vector(size_t(n), 50 + r, 0.5f));
          std::memcpy(stored.data() + r * row_bytes, bytes.data(), row_bytes);
          quant::dequantize(type, bytes.data(), w.data() + r * n, n);
        }
        const auto x_values = scalar::random_vector(size_t(n), 60, 2.0f);
        cpu::QuantizedInput qx;
        qx.quantize(x_values.data(), 1, n, dtype_block_size(type) == 256 ? 256 : 32);
        const cpu::kernels::QuantizedActivations x{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
        if (!cpu::kernels::has_fused_dot(type, isa)) {  // (unfused types: none at present) NaN: no caller takes it for a value
          float none = 0;
          k.dot_rows(type, stored.data(), row_bytes, 1, x, n, &none);
          CHECK(std::isnan(none));
          continue;
        }
        for (int first : {0, 1}) {
          const int count = 5;
          std::vector<float> together(count, NAN);
          k.dot_rows(type, stored.data() + first * row_bytes, row_bytes, count, x, n, together.data());
          for (int r = 0; r < count; ++r) {
            CAPTURE(first); CAPTURE(r);
            float alone = NAN;
            k.dot_rows(type, stored.data() + (first + r) * row_bytes, row_bytes, 1, x, n, &alone);
            CHECK(together[size_t(r)] == alone);  // bit for bit
            double want = 0, magnitude = 0;
            for (int64_t i = 0; i < n; ++i) {
              const double xi = double(qx.dx[size_t(i / 16)]) * qx.q[size_t(i)];
              want += double(w[size_t((first + r) * n + i)]) * xi;
              magnitude += std::abs(double(w[size_t((first + r) * n + i)]) * xi);
            }
            CHECK(std::abs(together[size_t(r)] - want) <= 1e-5 * magnitude);
          }
        }
      }
    }
}

TEST_CASE("kernels: Q4_0, Q8_0 and Q4_K rows in groups of 8 hold the stored bytes, and their decode dots equal the stored rows' bit for bit") {
  // 16 rows (two groups) of 800 (25 blocks: the 4- and 8-block loops and a tail block), 992 (31: a
  // tail of 7 blocks after AVX2's 8-block loop) and 768 (no tail; Q4_K: 3 super-blocks, and 1024,
  // 2048); extreme quants planted in some blocks (Q4_0: 0 and 15, Q8_0: -127 and 127) so a quant
  // placed in the wrong half, pair, quad or row shows
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K})
  for (int64_t n : {int64_t(768), int64_t(type == DType::Q4_K ? 1024 : 800), int64_t(type == DType::Q4_K ? 2048 : 992)}) {
    CAPTURE(dtype_name(type)); CAPTURE(n);
    constexpr int64_t kRows = 16;
    const size_t row_bytes = size_t(dtype_bytes_for(type, n));
    std::vector<uint8_t> stored(size_t(kRows) * row_bytes);
    for (int64_t r = 0; r < kRows; ++r) {
      auto values = scalar::random_vector(size_t(n), 70 + uint64_t(r), 0.5f);
      for (int64_t i = 0; i < n; i += 97) values[size_t(i)] = (r % 2 ? 4.0f : -4.0f);  // extremes of their blocks
      const auto bytes = quantized(type, values);
      std::memcpy(stored.data() + r * row_bytes, bytes.data(), row_bytes);
    }
    // every layout the type has (Pairs: AVX512-VNNI's; Quads: AVX2's Q4_0 and Q4_K), made on any CPU
    using cpu::kernels::GroupLayout;
    const bool has_quads = type != DType::Q8_0;
    std::vector<uint8_t> grouped(stored.size()), quads(has_quads ? stored.size() : 0);
    cpu::kernels::rows_to_groups(type, GroupLayout::Pairs, stored.data(), kRows, n, grouped.data());
    if (has_quads) cpu::kernels::rows_to_groups(type, GroupLayout::Quads, stored.data(), kRows, n, quads.data());
    else CHECK_THROWS_WITH(cpu::kernels::rows_to_groups(type, GroupLayout::Quads, stored.data(), kRows, n, quads.data()),
                           doctest::Contains("has no row groups in the Quads layout"));
    for (GroupLayout layout : {GroupLayout::Pairs, GroupLayout::Quads}) {
      if (layout == GroupLayout::Quads && !has_quads) continue;
      CAPTURE(layout == GroupLayout::Quads);
      const std::vector<uint8_t>& groups = layout == GroupLayout::Pairs ? grouped : quads;
      CHECK(groups != stored);  // (the layout moves bytes)
      std::vector<uint8_t> back(stored.size(), 0xAB);
      cpu::kernels::rows_from_groups(type, layout, groups.data(), n, 0, kRows, back.data());
      CHECK(back == stored);
      // any run of rows, groups crossed
      std::vector<uint8_t> some(size_t(5) * row_bytes);
      cpu::kernels::rows_from_groups(type, layout, groups.data(), n, 6, 5, some.data());
      CHECK(std::memcmp(some.data(), stored.data() + 6 * row_bytes, some.size()) == 0);
    }
    CHECK(grouped != quads);

    const auto x_values = scalar::random_vector(size_t(n), 61, 2.0f);
    cpu::QuantizedInput qx;
    qx.quantize(x_values.data(), 1, n, dtype_block_size(type) == 256 ? 256 : 32);
    const cpu::kernels::QuantizedActivations x{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
    bool any = false;
    for (Isa isa : supported_isas()) {
      const auto& k = cpu::kernels::table(isa);
      if (!k.dot_row_groups || !cpu::kernels::has_row_group_dot(type, isa)) continue;
      any = true;
      CAPTURE(cpu::kernels::isa_name(isa));
      const std::vector<uint8_t>& groups = cpu::kernels::group_layout(isa) == GroupLayout::Pairs ? grouped : quads;
      std::vector<float> from_groups(kRows, NAN), from_rows(kRows, NAN);
      k.dot_row_groups(type, groups.data(), kRows / cpu::kernels::kGroupRows, x, n, from_groups.data());
      k.dot_rows(type, stored.data(), row_bytes, kRows, x, n, from_rows.data());
      for (int64_t r = 0; r < kRows; ++r) {
        CAPTURE(r);
        CHECK(std::memcmp(&from_groups[size_t(r)], &from_rows[size_t(r)], sizeof(float)) == 0);
      }
      float other[cpu::kernels::kGroupRows];
      k.dot_row_groups(DType::Q4_1, groups.data(), 1, x, n, other);  // (a type without groups)
      CHECK(std::isnan(other[0]));
      // batched decode: 7 tokens in the lanes, any run of up to 4 rows of a group (the second group)
      if (!k.dot_tokens_grouped || !cpu::kernels::has_grouped_token_dot(type, isa)) continue;
      const auto tokens = scalar::random_vector(size_t(7 * n), 62, 2.0f);
      cpu::QuantizedInput lanes;
      lanes.quantize(tokens.data(), 7, n, 32);
      lanes.lay_out_token_lanes(7);
      constexpr int64_t L = cpu::kernels::kLaneTokens;
      const int64_t G = cpu::kernels::kGroupRows;
      for (int first : {0, 1, 4, 5, 7})
        for (int count = 1; count <= 4 && first + count <= G; ++count) {
          CAPTURE(first); CAPTURE(count);
          std::vector<float> from_group(size_t(4 * L), NAN), from_rows(size_t(4 * L), NAN);
          k.dot_tokens_grouped(type, grouped.data() + G * row_bytes, row_bytes, first, count, lanes.token_lanes(), n,
                               from_group.data());
          k.dot_tokens_stored(type, stored.data() + (G + first) * row_bytes, row_bytes, count, lanes.token_lanes(), n,
                              from_rows.data());
          CHECK(std::memcmp(from_group.data(), from_rows.data(), size_t(count * L) * sizeof(float)) == 0);
        }
    }
    if (!any) MESSAGE("no instruction set of this CPU has dot_row_groups for ", dtype_name(type), " (AVX512-VNNI; Q4_0 and Q4_K also AVX2); only the regrouping is tested");
    // prefill on bf16 panels filled straight from the groups: the stored rows' results, bit for bit
    // (rows 3 .. 15: panels that start inside a group and cross into the next)
    if (cpu::kernels::has_bf16_dot()) {
      constexpr int64_t T = 20;
      const auto tokens = scalar::random_vector(size_t(T * n), 63, 2.0f);
      std::vector<uint16_t> packed(size_t(cpu::kernels::token_pairs_size(T, n)));
      cpu::kernels::pack_token_pairs(tokens.data(), T, n, packed.data(), 0, cpu::kernels::token_pair_tiles(T));
      std::vector<unsigned char> scratch(cpu::kernels::bf16_panel_rows_scratch_bytes(T));
      std::vector<float> from_groups(size_t(T * kRows), NAN), from_rows(size_t(T * kRows), NAN);
      cpu::kernels::bf16_panel_rows(type, from_groups.data(), packed.data(), grouped.data(), row_bytes, nullptr, T, n,
                                    kRows, 3, kRows, scratch.data(), true);
      cpu::kernels::bf16_panel_rows(type, from_rows.data(), packed.data(), stored.data(), row_bytes, nullptr, T, n,
                                    kRows, 3, kRows, scratch.data());
      CHECK(std::memcmp(from_groups.data(), from_rows.data(), from_rows.size() * sizeof(float)) == 0);
      // and on AMX tiles, each piece of a panel row taken from its group (rows 3 .. kRows: the panels
      // start inside a group)
      if (cpu::kernels::has_amx()) {
        std::vector<unsigned char> tiles_scratch(cpu::kernels::amx_rows_scratch_bytes(n));
        std::fill(from_groups.begin(), from_groups.end(), NAN);
        std::fill(from_rows.begin(), from_rows.end(), NAN);
        cpu::kernels::amx_rows(type, from_groups.data(), packed.data(), grouped.data(), row_bytes, nullptr, T, n, kRows,
                               3, kRows, tiles_scratch.data(), true);
        cpu::kernels::amx_rows(type, from_rows.data(), packed.data(), stored.data(), row_bytes, nullptr, T, n, kRows, 3,
                               kRows, tiles_scratch.data());
        CHECK(std::memcmp(from_groups.data(), from_rows.data(), from_rows.size() * sizeof(float)) == 0);
        CHECK(from_rows[size_t(T * kRows - 1)] == from_rows[size_t(T * kRows - 1)]);  // written: not NaN
      }
    }
  }
}

// `rows` random rows of n weights of a block type, quantized and unpacked by unpack_row: q [rows, n],
// s and o [rows, n / 16]; row r from seed + r.
struct UnpackedRows {
  std::vector<uint8_t> q;
  std::vector<float> s, o;
};
UnpackedRows unpacked_random_rows(const cpu::kernels::KernelTable& k, DType type, int rows, int64_t n, int seed) {
  const int64_t groups = n / cpu::kernels::kGroup;
  UnpackedRows u{std::vector<uint8_t>(size_t(rows * n)), std::vector<float>(size_t(rows * groups)),
                 std::vector<float>(size_t(rows * groups))};
  for (int r = 0; r < rows; ++r) {
    const auto bytes = quantized(type, scalar::random_vector(size_t(n), seed + r, 0.5f));
    k.unpack_row(type, bytes.data(), n, u.q.data() + r * n, u.s.data() + r * groups, u.o.data() + r * groups);
  }
  return u;
}

TEST_CASE("kernels: dot_tokens (batched decode, tokens in register lanes) equals dot() per row and token") {
  const int64_t n = 768;  // 3 super-blocks, 24 legacy blocks
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    if (!k.dot_tokens) continue;  // AVX512-VNNI, AVX2, aarch64 dotprod; the generic table falls back to dot() per token
    for (DType type : kBlockTypes)
      for (int64_t T : {2, 5, 8, 9, 16})
        for (int rows = 1; rows <= cpu::kernels::kTokenRows; ++rows) {
          CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type)); CAPTURE(T); CAPTURE(rows);
          const int64_t groups = n / cpu::kernels::kGroup;
          const UnpackedRows unpacked = unpacked_random_rows(k, type, rows, n, 30);
          const std::vector<uint8_t>& q = unpacked.q;
          const std::vector<float>& s = unpacked.s;
          const std::vector<float>& o = unpacked.o;
          const auto x_values = scalar::random_vector(size_t(T * n), 40, 2.0f);
          cpu::QuantizedInput qx;
          qx.quantize(x_values.data(), T, n, dtype_block_size(type) == 256 ? 256 : 32);
          qx.lay_out_token_lanes(T);
          const int zero = cpu::kernels::unpacked_zero(type);
          const bool has_offset = cpu::kernels::unpacked_has_offset(type);
          std::vector<float> got(size_t(rows * cpu::kernels::kLaneTokens), NAN);
          k.dot_tokens(type, q.data(), s.data(), o.data(), rows, qx.token_lanes(), n, got.data());
          for (int r = 0; r < rows; ++r)
            for (int64_t t = 0; t < T; ++t) {
              const cpu::kernels::QuantizedActivations xt{qx.q.data() + t * n, qx.dx.data() + t * groups,
                                                          qx.gsum.data() + t * groups, qx.xs.data() + t * groups};
              const float want = k.dot(q.data() + r * n, s.data() + r * groups, o.data() + r * groups, zero,
                                       has_offset, xt, n);
              double magnitude = 0;  // sum of |each group's share|: the two differ only in f32 order
              for (int64_t g = 0; g < groups; ++g) {
                int64_t group_sum = 0;
                for (int64_t j = g * 16; j < g * 16 + 16; ++j)
                  group_sum += (int64_t(q[size_t(r * n + j)]) - zero) * qx.q[size_t(t * n + j)];
                magnitude += std::abs(double(s[size_t(r * groups + g)]) * qx.dx[size_t(t * groups + g)] * double(group_sum)) +
                             std::abs(double(o[size_t(r * groups + g)]) * qx.xs[size_t(t * groups + g)]);
              }
              CHECK(std::abs(got[size_t(r * cpu::kernels::kLaneTokens + t)] - want) <= 1e-5 * magnitude);
              // aarch64's lanes do dot()'s float part in its order: the same bits, not only close
              if (isa == Isa::NeonDot) CHECK(got[size_t(r * cpu::kernels::kLaneTokens + t)] == want);
            }
        }
  }
}

TEST_CASE("kernels: dot_tokens stays exact at every type's largest quants against +-127 activations (no int16 overflow)") {
  // AVX2 adds the int16 pair sums of vpmaddubsw before widening them: four quads for quants up to
  // 31, two for Q6_K's up to 63, one for Q8_0 (as |q| x sign(x, q)). Every weight here is the
  // type's largest (or, for Q8_0, -128 and 127) and every activation +-127 with the same sign per
  // group, the largest sums there can be; one quad too many in an int16 sum overflows it.
  const int64_t n = 512, groups = n / cpu::kernels::kGroup, T = 16;
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    if (!k.dot_tokens) continue;
    for (DType type : kBlockTypes) {
      CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type));
      const int zero = cpu::kernels::unpacked_zero(type);
      const bool has_offset = cpu::kernels::unpacked_has_offset(type);
      const int bits = type == DType::Q8_0 ? 8 : type == DType::Q6_K ? 6 : type == DType::Q2_K ? 2
                       : type == DType::Q3_K ? 3 : (type == DType::Q5_0 || type == DType::Q5_1 || type == DType::Q5_K) ? 5 : 4;
      const int rows = cpu::kernels::kTokenRows;
      std::vector<uint8_t> q(size_t(rows * n));
      std::vector<float> s(size_t(rows * groups), 1.0f / 64), o(size_t(rows * groups), has_offset ? 0.25f : 0.0f);
      for (int r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j)  // row 0: all the largest quant; row 1 (Q8_0): q = -128; others mixed
          q[size_t(r * n + j)] = type == DType::Q8_0 ? uint8_t(r == 1 ? 0 : r == 2 && j % 3 ? 0 : 255)
                                                     : uint8_t(r == 2 && j % 5 == 0 ? 0 : (1 << bits) - 1);
      // activations quantized from values whose every block's extreme is +-127 of it
      std::vector<float> x(size_t(T * n));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < n; ++j)  // signs per group, mostly positive, so that the sums do not cancel
          x[size_t(t * n + j)] = ((j / 16 * 7 + t) % 3 == 0 ? -1.0f : 1.0f) * (t % 3 ? 1.0f : 0.5f);
      cpu::QuantizedInput qx;
      qx.quantize_portable(x.data(), T, n, dtype_block_size(type) == 256 ? 256 : 32);
      for (int8_t v : qx.q) REQUIRE(std::abs(int(v)) == 127);
      qx.lay_out_token_lanes(T);
      std::vector<float> got(size_t(rows * cpu::kernels::kLaneTokens), NAN);
      k.dot_tokens(type, q.data(), s.data(), o.data(), rows, qx.token_lanes(), n, got.data());
      for (int r = 0; r < rows; ++r)
        for (int64_t t = 0; t < T; ++t) {
          CAPTURE(r); CAPTURE(t);
          double want = 0;
          for (int64_t j = 0; j < n; ++j) {
            const int64_t g = j / 16;
            const double w = double(s[size_t(r * groups + g)]) * (int(q[size_t(r * n + j)]) - zero) - o[size_t(r * groups + g)];
            want += w * double(qx.dx[size_t(t * groups + g)]) * qx.q[size_t(t * n + j)];
          }
          CHECK(std::abs(got[size_t(r * cpu::kernels::kLaneTokens + t)] - want) <= 1e-5 * std::max(1.0, std::abs(want)) * 64);
        }
    }
  }
}

TEST_CASE("kernels: the token lanes of a prefill, 16 tokens a chunk, hold each token's quants where dot_tokens reads them") {
  const int64_t n = 256, groups = n / cpu::kernels::kGroup;
  for (int64_t T : {17, 37, 48}) {
    CAPTURE(T);
    const auto x = scalar::random_vector(size_t(T * n), 80, 2.0f);
    cpu::QuantizedInput qx;
    qx.quantize(x.data(), T, n, 32);
    qx.lay_out_token_lanes(T, 2);
    REQUIRE(qx.lane_chunks() == (T + 15) / 16);
    for (int64_t c = 0; c < qx.lane_chunks(); ++c) {
      const cpu::kernels::TokenLaneActivations lanes = qx.token_lanes(c);
      CHECK(lanes.tokens == std::min<int64_t>(16, T - 16 * c));
      for (int64_t lane = 0; lane < cpu::kernels::kLaneTokens; ++lane) {
        const int64_t t = 16 * c + lane;
        for (int64_t g = 0; g < groups; ++g) {
          CAPTURE(c); CAPTURE(lane); CAPTURE(g);
          CHECK(lanes.dx[g * 16 + lane] == (t < T ? qx.dx[size_t(t * groups + g)] : 0.0f));
          CHECK(lanes.gsum[g * 16 + lane] == (t < T ? qx.gsum[size_t(t * groups + g)] : 0));
          for (int64_t j = 0; j < 16; ++j)  // quad j / 4 of the group, byte j % 4
            CHECK(int(lanes.q[((g * 4 + j / 4) * 16 + lane) * 4 + j % 4]) == (t < T ? int(qx.q[size_t(t * n + g * 16 + j)]) : 0));
        }
      }
    }
  }
}

TEST_CASE("kernels: the activations' Q8_0 quants are llama.cpp's (quant::quantize), ties rounded away from zero") {
  const int64_t n = 256, T = 3;
  auto x = scalar::random_vector(size_t(T * n), 70, 3.0f);
  // ties: a block whose largest magnitude is 127 has d = 1, so x = k + 0.5 is an exact tie
  for (int64_t j = 0; j < 32; ++j) x[size_t(32 + j)] = j == 0 ? 127.0f : float(j % 16) - 7.5f;
  x[size_t(64)] = -127.0f, x[size_t(65)] = 126.5f, x[size_t(66)] = -0.5f, x[size_t(67)] = 0.49999997f;
  cpu::QuantizedInput qx;
  qx.quantize(x.data(), T, n, 32);
  for (int64_t t = 0; t < T; ++t) {
    const auto blocks = quantized(DType::Q8_0, std::vector<float>(x.begin() + t * n, x.begin() + (t + 1) * n));
    const auto* stored = reinterpret_cast<const quant::block_q8_0*>(blocks.data());
    for (int64_t j = 0; j < n; ++j) {
      CAPTURE(t); CAPTURE(j); CAPTURE(x[size_t(t * n + j)]);
      CHECK(int(qx.q[size_t(t * n + j)]) == int(stored[j / 32].qs[j % 32]));
    }
  }
  CHECK(int(qx.q[32 + 1]) == -7);  // -6.5 -> -7
  CHECK(int(qx.q[32 + 8]) == 1);   // 0.5 -> 1
  CHECK(int(qx.q[65]) == 127);     // 126.5 -> 127
  CHECK(int(qx.q[66]) == -1);      // -0.5 -> -1
  CHECK(int(qx.q[67]) == 0);       // just below the tie
}

TEST_CASE("kernels: dot_tokens_stored (Q8_0, Q4_0, Q4_K straight from the stored blocks) equals dot() per row and token") {
  // 3 blocks, 17 (one scale chunk of 16 and a tail) and 64 (the 2048-wide rows of the benchmarks);
  // Q4_K: 1, 2 and 8 super-blocks of 256
  for (int64_t n : {96, 256, 512, 544, 2048})
    for (Isa isa : supported_isas()) {
      const auto& k = cpu::kernels::table(isa);
      if (!k.dot_tokens_stored) continue;  // AVX512-VNNI and AVX2; the generic table unpacks first
      for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_K})
        for (int64_t T : {1, 6, 11, 16})
          for (int rows = 1; rows <= cpu::kernels::kStoredTokenRows; ++rows) {
            CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type)); CAPTURE(n); CAPTURE(T); CAPTURE(rows);
            if (!cpu::kernels::has_stored_token_dot(type, isa)) continue;  // AVX2: Q8_0 only
            if (n % dtype_block_size(type) != 0 || (type != DType::Q4_K && n % 256 == 0 && n != 2048)) continue;
            const int64_t groups = n / cpu::kernels::kGroup, row_bytes = dtype_bytes_for(type, n);
            std::vector<uint8_t> stored;  // [rows, row_bytes] as stored
            for (int r = 0; r < rows; ++r) {
              const auto bytes = quantized(type, scalar::random_vector(size_t(n), 50 + r, 0.5f));
              stored.insert(stored.end(), bytes.begin(), bytes.end());
            }
            std::vector<uint8_t> q(size_t(rows * n));  // the same rows unpacked, for dot()
            std::vector<float> s(size_t(rows * groups)), o(size_t(rows * groups));
            for (int r = 0; r < rows; ++r)
              k.unpack_row(type, stored.data() + r * row_bytes, n, q.data() + r * n, s.data() + r * groups,
                           o.data() + r * groups);
            const auto x_values = scalar::random_vector(size_t(T * n), 60, 2.0f);
            cpu::QuantizedInput qx;
            qx.quantize(x_values.data(), T, n, dtype_block_size(type) == 256 ? 256 : 32);  // Q8_K for Q4_K
            qx.lay_out_token_lanes(T);
            const int zero = cpu::kernels::unpacked_zero(type);
            const bool has_offset = cpu::kernels::unpacked_has_offset(type);  // Q4_K's minimums
            std::vector<float> got(size_t(rows * cpu::kernels::kLaneTokens), NAN);
            k.dot_tokens_stored(type, stored.data(), size_t(row_bytes), rows, qx.token_lanes(), n, got.data());
            for (int r = 0; r < rows; ++r)
              for (int64_t t = 0; t < cpu::kernels::kLaneTokens; ++t) {
                CAPTURE(r); CAPTURE(t);
                if (t >= T) {  // the empty lanes multiply zeros
                  CHECK(got[size_t(r * cpu::kernels::kLaneTokens + t)] == 0.0f);
                  continue;
                }
                const cpu::kernels::QuantizedActivations xt{qx.q.data() + t * n, qx.dx.data() + t * groups,
                                                            qx.gsum.data() + t * groups, qx.xs.data() + t * groups};
                const float want =
                    k.dot(q.data() + r * n, s.data() + r * groups, o.data() + r * groups, zero, has_offset, xt, n);
                double magnitude = 0;  // sum of |each group's shares|: the two differ only in f32 order
                for (int64_t g = 0; g < groups; ++g) {
                  int64_t group_sum = 0;
                  for (int64_t j = g * 16; j < g * 16 + 16; ++j)
                    group_sum += (int64_t(q[size_t(r * n + j)]) - zero) * qx.q[size_t(t * n + j)];
                  magnitude += std::abs(double(s[size_t(r * groups + g)]) * qx.dx[size_t(t * groups + g)] * double(group_sum));
                  if (has_offset) magnitude += std::abs(double(o[size_t(r * groups + g)]) * qx.xs[size_t(t * groups + g)]);
                }
                CHECK(std::abs(got[size_t(r * cpu::kernels::kLaneTokens + t)] - want) <= 1e-5 * magnitude);
              }
          }
    }
}

// `rows` random rows of n weights quantized to `type`, [rows, row_bytes]; row r from seed + r.
std::vector<uint8_t> quantized_random_rows(DType type, int rows, int64_t n, int seed) {
  std::vector<uint8_t> stored;
  for (int r = 0; r < rows; ++r) {
    const auto bytes = quantized(type, scalar::random_vector(size_t(n), seed + r, 0.5f));
    stored.insert(stored.end(), bytes.begin(), bytes.end());
  }
  return stored;
}

// `rows` random Q8_0 rows of n weights ([rows, row_bytes]), row 0's first two blocks at the block
// sums' extremes (32 x 127 and 32 x -128)
std::vector<uint8_t> q8_0_rows_with_extreme_sums(int rows, int64_t n, int seed) {
  std::vector<uint8_t> stored = quantized_random_rows(DType::Q8_0, rows, n, seed);
  auto* block = reinterpret_cast<quant::block_q8_0*>(stored.data());
  for (int i = 0; i < 32; ++i) block[0].qs[i] = 127, block[1].qs[i] = -128;
  return stored;
}

TEST_CASE("kernels: dot_tokens_q8_0_sums (weights signed, tokens + 128, the block sums) equals dot_tokens_stored bit for bit") {
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    if (!k.dot_tokens_q8_0_sums) continue;  // AVX512-VNNI only
    for (int64_t n : {96, 544, 2048})  // 3 blocks, one chunk of 16 scales and a tail, 64 blocks
      for (int64_t T : {1, 6, 11, 16})
        for (int rows = 1; rows <= cpu::kernels::kStoredTokenRows; ++rows) {
          CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(n); CAPTURE(T); CAPTURE(rows);
          const int64_t blocks = n / 32, row_bytes = dtype_bytes_for(DType::Q8_0, n);
          std::vector<uint8_t> stored = q8_0_rows_with_extreme_sums(rows, n, 70);  // [rows, row_bytes]
          const auto* block = reinterpret_cast<const quant::block_q8_0*>(stored.data());  // row 0's blocks
          std::vector<int16_t> sums(size_t(rows * blocks), 12345);
          cpu::kernels::q8_0_block_sums(stored.data(), rows, n, sums.data());
          for (int64_t b = 0; b < rows * blocks; ++b) {
            int want = 0;
            for (int8_t q : block[b].qs) want += q;
            REQUIRE(sums[size_t(b)] == want);
          }
          CHECK(sums[0] == 32 * 127);
          CHECK(sums[1] == -32 * 128);
          const auto x_values = scalar::random_vector(size_t(T * n), 80, 2.0f);
          cpu::QuantizedInput qx;
          qx.quantize(x_values.data(), T, n, 32);
          qx.lay_out_token_lanes(T);
          constexpr int64_t L = cpu::kernels::kLaneTokens;
          std::vector<float> want(size_t(rows * L), NAN), got(size_t(rows * L), NAN);
          k.dot_tokens_stored(DType::Q8_0, stored.data(), size_t(row_bytes), rows, qx.token_lanes(), n, want.data());
          k.dot_tokens_q8_0_sums(stored.data(), size_t(row_bytes), sums.data(), size_t(blocks), rows, qx.token_lanes(), n,
                                 got.data());
          CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
          for (int r = 0; r < rows; ++r)  // (and not both zero: the rows multiply something)
            CHECK(want[size_t(r * L)] != 0.0f);
        }
  }
}

// A prefill kernel's y (PrefillOutput, `stride` floats a token, NaN where it must not write)
// against the batched-decode kernel's results of each chunk and up to 4 rows, want(r0, rows, c,
// out [rows, kLaneTokens]), plus `bias`: equal bit for bit where written, untouched elsewhere.
// Returns the rows x tokens compared.
template <typename Want>
int64_t check_prefill_output(const std::vector<float>& y, int64_t stride, int rows, int64_t T, const float* bias,
                             Want&& want_of) {
  constexpr int64_t L = cpu::kernels::kLaneTokens;
  int64_t compared = 0;
  for (int64_t c = 0; c * L < T; ++c)
    for (int r0 = 0; r0 < rows; r0 += cpu::kernels::kStoredTokenRows) {
      const int here = std::min(cpu::kernels::kStoredTokenRows, rows - r0);
      std::vector<float> want(size_t(here * L), NAN);  // [here, L]
      want_of(r0, here, c, want.data());
      for (int r = 0; r < here; ++r)
        for (int64_t t = 0; t < L && c * L + t < T; ++t) {
          CAPTURE(c); CAPTURE(r0 + r); CAPTURE(t);
          const float expected = (bias ? bias[r0 + r] : 0.0f) + want[size_t(r * L + t)];
          const float got = y[size_t((c * L + t) * stride + r0 + r)];
          CHECK(std::memcmp(&expected, &got, sizeof got) == 0);
          if (t == 0) CHECK(want[size_t(r * L)] != 0.0f);  // (and not zero: the rows multiply something)
          ++compared;
        }
    }
  for (int64_t t = 0; t < int64_t(y.size()) / stride; ++t)  // nothing past the call's rows and tokens
    for (int64_t r = t < T ? rows : 0; r < stride; ++r) CHECK(std::isnan(y[size_t(t * stride + r)]));
  return compared;
}

// One prefill kernel call on the token lanes of qx (all its chunks), into a y of `stride` floats a
// token ([chunks x 16, stride], NaN where the call did not write), with `bias` or none:
// run(lanes, chunks, y, scratch) calls the kernel.
template <typename Run>
std::vector<float> prefill_output(const cpu::QuantizedInput& qx, int64_t n, int64_t stride, const float* bias, Run&& run) {
  const int64_t chunks = qx.lane_chunks();
  std::vector<cpu::kernels::TokenLaneActivations> lanes;
  for (int64_t c = 0; c < chunks; ++c) lanes.push_back(qx.token_lanes(c));
  std::vector<float> y(size_t(chunks * cpu::kernels::kLaneTokens * stride), NAN);  // [chunks x 16, stride]
  std::vector<float> scratch(size_t(cpu::kernels::prefill_scratch_floats(n, chunks)), NAN);
  run(lanes.data(), int(chunks), cpu::kernels::PrefillOutput{y.data(), stride, bias}, scratch.data());
  return y;
}

// prefill_output with a random bias or none, checked by check_prefill_output against want_of, every
// row x token compared.
template <typename Run, typename Want>
void check_prefill_kernel(const cpu::QuantizedInput& qx, int64_t n, int64_t T, int rows, int64_t stride, bool biased,
                          Run&& run, Want&& want_of) {
  const std::vector<float> bias = scalar::random_vector(size_t(rows), 92 + rows, 1.0f);
  const float* with_bias = biased ? bias.data() : nullptr;
  const std::vector<float> y = prefill_output(qx, n, stride, with_bias, run);
  const int64_t compared = check_prefill_output(y, stride, rows, T, with_bias, [&](int r0, int here, int64_t c, float* want) {
    want_of(r0, here, qx.token_lanes(c), want);
  });
  CHECK(compared == rows * T);
}

TEST_CASE("kernels: prefill_q8_0_sums (up to 16 rows against every chunk of 16 tokens, tiles of 4 rows x 2 chunks or 8 x 1, unsigned token quads) equals dot_tokens_q8_0_sums chunk by chunk, bit for bit, written transposed into y") {
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    if (!k.prefill_q8_0_sums) continue;  // AVX512-VNNI only
    for (int64_t n : {96, 544, 2048})  // 3 blocks, one chunk of 16 scales and a tail, 64 blocks
      // one chunk (a batched decode step: tiles of 8 rows), 2 (the second of one token), 2 whole
      // ones, 3 (2 + 1), 5
      for (int64_t T : {6, 16, 17, 32, 45, 80})
        for (int rows : {1, 2, 3, 4, 5, 7, 9, 16}) {  // a tile and less, tiles and a tail, kPrefillRows
          CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(n); CAPTURE(T); CAPTURE(rows);
          const int64_t blocks = n / 32, row_bytes = dtype_bytes_for(DType::Q8_0, n);
          const std::vector<uint8_t> stored = q8_0_rows_with_extreme_sums(rows, n, 90);  // [rows, row_bytes]
          std::vector<int16_t> sums(size_t(rows * blocks));
          cpu::kernels::q8_0_block_sums(stored.data(), rows, n, sums.data());
          auto x_values = scalar::random_vector(size_t(T * n), 91, 2.0f);
          for (int64_t i = 0; i < n; ++i) x_values[size_t(i)] = i % 2 ? -1.0f : 1.0f;  // token 0: quants +-127
          cpu::QuantizedInput qx;
          qx.quantize(x_values.data(), T, n, 32);
          qx.lay_out_token_lanes(T, 1, /*unsigned_quads=*/true);
          REQUIRE(qx.token_lanes(0).qu != nullptr);
          check_prefill_kernel(qx, n, T, rows, rows + 3, rows % 2,  // with and without a bias
              [&](const cpu::kernels::TokenLaneActivations* lanes, int chunks, const cpu::kernels::PrefillOutput& y, float* scratch) {
                k.prefill_q8_0_sums(stored.data(), size_t(row_bytes), sums.data(), size_t(blocks), rows, lanes, chunks, n, y,
                                    scratch);
              },
              [&](int r0, int here, const cpu::kernels::TokenLaneActivations& lanes, float* want) {
                k.dot_tokens_q8_0_sums(stored.data() + r0 * row_bytes, size_t(row_bytes), sums.data() + r0 * blocks,
                                       size_t(blocks), here, lanes, n, want);
              });
          qx.lay_out_token_lanes(T);  // not asked for: no unsigned quads left from before
          CHECK(qx.token_lanes(0).qu == nullptr);
        }
  }
}

TEST_CASE("kernels: prefill_q4_0 (its rows made Q8_0 once per call, then prefill_q8_0_sums's tiles) equals dot_tokens_stored's Q4_0 chunk by chunk, bit for bit, written transposed into y") {
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    if (!k.prefill_q4_0) continue;  // AVX512-VNNI only
    for (int64_t n : {96, 544, 2048})
      for (int64_t T : {17, 45, 80})  // chunks: 2 (the second of one token), 3 (2 + 1), 5
        for (int rows : {1, 4, 5, 16}) {
          CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(n); CAPTURE(T); CAPTURE(rows);
          const int64_t row_bytes = dtype_bytes_for(DType::Q4_0, n);
          std::vector<uint8_t> stored = quantized_random_rows(DType::Q4_0, rows, n, 120);  // [rows, row_bytes]
          // the last row's quants random bytes (every nibble, sums up to 32 x 7 and down to 32 x -8),
          // its first block all 15s and its second all 0s
          std::mt19937 bytes(int(n + T + rows));
          auto* last = reinterpret_cast<quant::block_q4_0*>(stored.data() + (rows - 1) * row_bytes);
          for (int64_t b = 0; b < n / 32; ++b)
            for (uint8_t& q : last[b].qs) q = b == 0 ? 0xFF : b == 1 ? 0x00 : uint8_t(bytes());
          auto x_values = scalar::random_vector(size_t(T * n), 121, 2.0f);
          for (int64_t i = 0; i < n; ++i) x_values[size_t(i)] = i % 2 ? -1.0f : 1.0f;  // token 0: quants +-127
          cpu::QuantizedInput qx;
          qx.quantize(x_values.data(), T, n, 32);
          qx.lay_out_token_lanes(T, 1, /*unsigned_quads=*/true);
          check_prefill_kernel(qx, n, T, rows, rows + 2, rows % 2,
              [&](const cpu::kernels::TokenLaneActivations* lanes, int chunks, const cpu::kernels::PrefillOutput& y, float* scratch) {
                k.prefill_q4_0(stored.data(), size_t(row_bytes), -1, rows, lanes, chunks, n, y, scratch);
              },
              [&](int r0, int here, const cpu::kernels::TokenLaneActivations& lanes, float* want) {
                k.dot_tokens_stored(DType::Q4_0, stored.data() + r0 * row_bytes, size_t(row_bytes), here, lanes, n, want);
              });
        }
  }
}

// A prefill kernel's y (prefill_output: [tokens, stride], NaN where it must not write) against
// each row x token's exact product in double, exact_of(r, t) -> {exact, the sum of its terms'
// magnitudes}, plus `bias`: within 4e-6 of the magnitudes (one f32 rounding per term and per step
// of 24-128: <= 8e-6 at worst). The batched-decode kernel's value decode_of(r, t) is held to the
// same bound, so both are the same product up to rounding. Nothing written past the call's rows
// and tokens.
template <typename Exact, typename Decode>
void check_prefill_exact(const std::vector<float>& y, int64_t stride, int rows, int64_t T, const float* bias,
                         Exact&& exact_of, Decode&& decode_of) {
  int64_t compared = 0;
  for (int r = 0; r < rows; ++r)
    for (int64_t t = 0; t < T; ++t) {
      CAPTURE(r); CAPTURE(t);
      const auto [exact, magnitude] = exact_of(r, t);
      CHECK(magnitude > 0.0);
      const double b = bias ? bias[r] : 0.0;
      CHECK(std::fabs(double(y[size_t(t * stride + r)]) - (exact + b)) <= 4e-6 * (magnitude + std::fabs(b)));
      CHECK(std::fabs(double(decode_of(r, t)) - exact) <= 4e-6 * magnitude);
      ++compared;
    }
  CHECK(compared == rows * T);
  for (int64_t t = 0; t < int64_t(y.size()) / stride; ++t)
    for (int64_t r = t < T ? rows : 0; r < stride; ++r) CHECK(std::isnan(y[size_t(t * stride + r)]));
}

// prefill_unpacked and dot_tokens against the exact sum in double (check_prefill_exact), sum over
// groups of s dx (sum of (q - z) x) - o xs. The types with one scale and offset per 32
// (unpacked_scale_groups 2) do the f32 work once per pair of groups of 16, the K types once per
// super-block without dx (one per 256 in Q8_K) and then with it: neither is dot_tokens' bits.
void check_unpacked_exact(const cpu::kernels::KernelTable& k, DType type, const UnpackedRows& unpacked,
                          const cpu::QuantizedInput& qx, int64_t n, int64_t T, int rows) {
  const std::vector<uint8_t>& q = unpacked.q;
  const std::vector<float>& s = unpacked.s;
  const std::vector<float>& o = unpacked.o;
  if (cpu::kernels::unpacked_scale_groups(type) == 2)
    for (size_t g = 0; g < s.size(); g += 2) {  // what the kernel rests on: one scale and offset per pair
      REQUIRE(s[g] == s[g + 1]);
      REQUIRE(o[g] == o[g + 1]);
    }
  constexpr int64_t L = cpu::kernels::kLaneTokens;
  const int64_t groups = n / cpu::kernels::kGroup, stride = rows + 1;
  const std::vector<float> bias = scalar::random_vector(size_t(rows), 94 + rows, 1.0f);
  const float* with_bias = rows % 2 ? bias.data() : nullptr;  // with and without a bias
  const std::vector<float> y = prefill_output(qx, n, stride, with_bias,
      [&](const cpu::kernels::TokenLaneActivations* lanes, int chunks, const cpu::kernels::PrefillOutput& out, float* scratch) {
        k.prefill_unpacked(type, q.data(), s.data(), o.data(), rows, lanes, chunks, n, out, scratch);
      });
  std::vector<float> decode(size_t(cpu::kernels::kTokenRows * L));  // dot_tokens' [rows, L] of one chunk
  const int zero = cpu::kernels::unpacked_zero(type);
  check_prefill_exact(y, stride, rows, T, with_bias,
      [&](int r, int64_t t) {
        double exact = 0, magnitude = 0;
        for (int64_t g = 0; g < groups; ++g) {
          int64_t sum = 0;
          for (int64_t i = 0; i < cpu::kernels::kGroup; ++i)
            sum += (int64_t(q[size_t(r * n + g * 16 + i)]) - zero) * int64_t(qx.q[size_t(t * n + g * 16 + i)]);
          const double term = double(s[size_t(r * groups + g)]) * double(qx.dx[size_t(t * groups + g)]) * double(sum);
          const double offset = double(o[size_t(r * groups + g)]) * double(qx.xs[size_t(t * groups + g)]);
          exact += term - offset;
          magnitude += std::fabs(term) + std::fabs(offset);
        }
        return std::pair{exact, magnitude};
      },
      [&](int r, int64_t t) {
        k.dot_tokens(type, q.data() + r * n, s.data() + r * groups, o.data() + r * groups, 1, qx.token_lanes(t / L), n,
                     decode.data());
        return decode[size_t(t % L)];
      });
}

TEST_CASE("kernels: prefill_unpacked (rows unpacked once per call, tiles of 4 rows x 2 chunks or 8 x 1) and dot_tokens agree with the exact product within f32 rounding of its terms, for every block type") {
  const int64_t n = 768;  // 3 super-blocks, 24 legacy blocks
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    if (!k.prefill_unpacked) continue;  // AVX512-VNNI only
    for (DType type : kBlockTypes)
      for (int64_t T : {6, 17, 45})  // chunks: 1 (tiles of 8 rows), 2 (the second of one token), 3 (2 + 1)
        for (int rows : {1, 4, 5, 9, 16}) {
          CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type)); CAPTURE(T); CAPTURE(rows);
          const UnpackedRows unpacked = unpacked_random_rows(k, type, rows, n, 130);
          const auto x_values = scalar::random_vector(size_t(T * n), 131, 2.0f);
          cpu::QuantizedInput qx;
          qx.quantize(x_values.data(), T, n, dtype_block_size(type) == 256 ? 256 : 32);
          qx.lay_out_token_lanes(T);
          check_unpacked_exact(k, type, unpacked, qx, n, T, rows);
        }
  }
}

// A Q4_K row's product with token t of qx (Q8_K) in double, from the stored blocks by the
// reference's unpacking of the 6-bit scales (quant::scale_min_k4): the sum over sub-blocks of 32
// of d sc dx sum(q xq) - dmin m dx sum(xq); second, the sum of those terms' magnitudes.
std::pair<double, double> q4_k_exact_product(const uint8_t* row, const cpu::QuantizedInput& qx, int64_t t, int64_t n) {
  const auto* blocks = reinterpret_cast<const quant::block_q4_k*>(row);
  double exact = 0, magnitude = 0;
  for (int64_t sb = 0; sb < n / 256; ++sb)
    for (int j = 0; j < 8; ++j) {
      uint8_t sc = 0, m = 0;
      quant::scale_min_k4(j, blocks[sb].scales, &sc, &m);
      int64_t sum = 0, xsum = 0;
      for (int i = 0; i < 32; ++i) {  // sub-blocks 2p and 2p + 1: the low and high nibbles of qs[32p ..]
        const uint8_t byte = blocks[sb].qs[32 * (j / 2) + i];
        const int64_t xq = qx.q[size_t(t * n + sb * 256 + 32 * j + i)];
        sum += (j % 2 ? byte >> 4 : byte & 0x0F) * xq;
        xsum += xq;
      }
      const double dx = qx.dx[size_t(t * (n / 16) + sb * 16)];  // (Q8_K: one scale per 256)
      const double term = double(f16_to_f32(blocks[sb].d)) * sc * dx * double(sum);
      const double offset = double(f16_to_f32(blocks[sb].dmin)) * m * dx * double(xsum);
      exact += term - offset;
      magnitude += std::fabs(term) + std::fabs(offset);
    }
  return {exact, magnitude};
}

TEST_CASE("kernels: prefill_q4_k (up to 16 rows against every chunk of 16 tokens, tiles of 4 rows x 2 chunks or 8 x 1, each super-block's sub-blocks summed before its dx) and dot_tokens_stored's Q4_K agree with the exact product within f32 rounding of its terms, written transposed into y") {
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    if (!k.prefill_q4_k) continue;  // AVX512-VNNI only
    for (int64_t n : {256, 768, 2048})
      for (int64_t T : {6, 16, 17, 32, 45, 80})  // chunks: 1 (tiles of 8 rows), 2 (the second of one token), 2, 3, 5
        for (int rows : {1, 3, 4, 6, 11, 16}) {
          CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(n); CAPTURE(T); CAPTURE(rows);
          const int64_t row_bytes = dtype_bytes_for(DType::Q4_K, n), stride = rows + 1;
          std::vector<uint8_t> stored = quantized_random_rows(DType::Q4_K, rows, n, 110);  // [rows, row_bytes]
          // the last row's scales, minimums and quants random bytes: every 6-bit scale and minimum,
          // every nibble (d, dmin kept finite)
          std::mt19937 bytes(int(n + T + rows));
          auto* last = reinterpret_cast<quant::block_q4_k*>(stored.data() + (rows - 1) * row_bytes);
          for (int64_t sb = 0; sb < n / 256; ++sb) {
            for (uint8_t& b : last[sb].scales) b = uint8_t(bytes());
            for (uint8_t& b : last[sb].qs) b = uint8_t(bytes());
            last[sb].d = f32_to_f16(0.01f), last[sb].dmin = f32_to_f16(0.02f);
          }
          const auto x_values = scalar::random_vector(size_t(T * n), 111, 2.0f);
          cpu::QuantizedInput qx;
          qx.quantize(x_values.data(), T, n, 256);
          qx.lay_out_token_lanes(T);
          const std::vector<float> bias = scalar::random_vector(size_t(rows), 92 + rows, 1.0f);
          const float* with_bias = rows % 2 == 0 ? bias.data() : nullptr;
          const std::vector<float> y = prefill_output(qx, n, stride, with_bias,
              [&](const cpu::kernels::TokenLaneActivations* lanes, int chunks, const cpu::kernels::PrefillOutput& out, float* scratch) {
                k.prefill_q4_k(stored.data(), size_t(row_bytes), -1, rows, lanes, chunks, n, out, scratch);
              });
          constexpr int64_t L = cpu::kernels::kLaneTokens;
          std::vector<float> decode(size_t(cpu::kernels::kStoredTokenRows * L));  // dot_tokens_stored's [1, L]
          check_prefill_exact(y, stride, rows, T, with_bias,
              [&](int r, int64_t t) { return q4_k_exact_product(stored.data() + r * row_bytes, qx, t, n); },
              [&](int r, int64_t t) {
                k.dot_tokens_stored(DType::Q4_K, stored.data() + r * row_bytes, size_t(row_bytes), 1,
                                    qx.token_lanes(t / L), n, decode.data());
                return decode[size_t(t % L)];
              });
        }
  }
}

TEST_CASE("kernels: prefill_q4_0 and prefill_q4_k on rows regrouped by 8 (block_q4_0x8, block_q4_kx8; from any row of a group, across groups) equal the same kernels on the rows as stored (prefill_q4_0: and dot_tokens_stored), bit for bit") {
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    if (!k.prefill_q4_k || !k.prefill_q4_0) continue;  // AVX512-VNNI only
    constexpr int kMatrixRows = 32;  // 4 groups
    for (DType type : {DType::Q4_0, DType::Q4_K})
      for (int64_t n : {256, 2048})
        for (int64_t T : {6, 45}) {  // one chunk (tiles of 8 rows), 3 chunks
          const int64_t row_bytes = dtype_bytes_for(type, n);
          const std::vector<uint8_t> stored = quantized_random_rows(type, kMatrixRows, n, 120);
          std::vector<uint8_t> grouped(stored.size());
          cpu::kernels::rows_to_groups(type, cpu::kernels::GroupLayout::Pairs, stored.data(), kMatrixRows, n,
                                       grouped.data());
          REQUIRE(grouped != stored);  // (the layout did change)
          const auto x_values = scalar::random_vector(size_t(T * n), 121, 2.0f);
          cpu::QuantizedInput qx;
          qx.quantize(x_values.data(), T, n, type == DType::Q4_0 ? 32 : 256);
          qx.lay_out_token_lanes(T, 1, /*unsigned_quads=*/type == DType::Q4_0);
          const auto prefill = type == DType::Q4_0 ? k.prefill_q4_0 : k.prefill_q4_k;
          // a call's first row at a group's start, inside one, at its last row; 1 to 16 rows
          for (auto [first, rows] : {std::pair{0, 16}, {3, 16}, {7, 9}, {8, 1}, {13, 6}, {16, 16}, {21, 11}}) {
            CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type)); CAPTURE(n); CAPTURE(T); CAPTURE(first);
            CAPTURE(rows);
            const uint8_t* group = grouped.data() + first / 8 * 8 * row_bytes;
            const auto from_groups = [&](const cpu::kernels::TokenLaneActivations* lanes, int chunks,
                                         const cpu::kernels::PrefillOutput& y, float* scratch) {
              prefill(group, size_t(row_bytes), first % 8, rows, lanes, chunks, n, y, scratch);
            };
            const std::vector<float> bias = scalar::random_vector(size_t(rows), 93 + rows, 1.0f);
            const std::vector<float> grouped_y = prefill_output(qx, n, rows + 1, bias.data(), from_groups);
            const std::vector<float> stored_y = prefill_output(qx, n, rows + 1, bias.data(),
                [&](const cpu::kernels::TokenLaneActivations* lanes, int chunks, const cpu::kernels::PrefillOutput& y,
                    float* scratch) {
                  prefill(stored.data() + first * row_bytes, size_t(row_bytes), -1, rows, lanes, chunks, n, y, scratch);
                });
            CHECK(std::memcmp(grouped_y.data(), stored_y.data(), grouped_y.size() * sizeof(float)) == 0);
            CHECK(std::count_if(grouped_y.begin(), grouped_y.end(), [](float v) { return !std::isnan(v); }) == rows * T);
            if (type == DType::Q4_0)  // (Q4_K's tiles sum a super-block before its dx: not dot_tokens' bits)
              check_prefill_kernel(qx, n, T, rows, rows + 1, first % 2 == 1, from_groups,
                  [&](int r0, int here, const cpu::kernels::TokenLaneActivations& lanes, float* want) {
                    k.dot_tokens_stored(type, stored.data() + (first + r0) * row_bytes, size_t(row_bytes), here, lanes,
                                        n, want);
                  });
          }
        }
  }
}

TEST_CASE("kernels: the f16 and bf16 small-batch kernels equal the f32 one on the widened weights, and the product") {
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    for (DType type : {DType::F16, DType::BF16})
      for (int64_t T : {1, 3, 17})
        for (auto [in, out] : {std::pair<int64_t, int64_t>{37, 53}, {64, 5}, {2100, 13}}) {
          CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type)); CAPTURE(T); CAPTURE(in);
          const auto x = scalar::random_vector(size_t(T * in), 21);
          const auto values = scalar::random_vector(size_t(out * in), 22);
          std::vector<uint16_t> stored(values.size());
          std::vector<float> widened(values.size());
          for (size_t i = 0; i < values.size(); ++i) {
            stored[i] = type == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
            widened[i] = type == DType::F16 ? f16_to_f32(stored[i]) : bf16_to_f32(stored[i]);
          }
          std::vector<float> got(static_cast<size_t>(T * out)), want(static_cast<size_t>(T * out));
          k.float_rows(type, got.data(), x.data(), stored.data(), nullptr, T, in, out, 0, out);
          k.float_rows(DType::F32, want.data(), x.data(), widened.data(), nullptr, T, in, out, 0, out);
          CHECK(got == want);  // the same sums in the same order: bit for bit
          for (int64_t t = 0; t < T; ++t)  // and both are the product (T = 1: one_token_rows, else the tiles)
            for (int64_t o = 0; o < out; ++o) {
              double exact = 0, magnitude = 0;
              for (int64_t i = 0; i < in; ++i) {
                exact += double(x[size_t(t * in + i)]) * widened[size_t(o * in + i)];
                magnitude += std::abs(double(x[size_t(t * in + i)]) * widened[size_t(o * in + i)]);
              }
              CHECK(std::abs(got[size_t(t * out + o)] - exact) <= 1e-5 * magnitude);
            }
        }
  }
}

TEST_CASE("kernels: BF16 decode on pairs (x split into even and odd inputs, the stored words halved) equals the product") {
  for (Isa isa : supported_isas()) {
    const cpu::kernels::KernelTable& k = cpu::kernels::table(isa);
    for (int64_t blocks : {1, 3, 64}) {  // in = 1, 3, 64 blocks of pair_lanes: the tail block, and long rows
      const int64_t in = blocks * k.pair_lanes, out = 21;
      CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(in);
      const auto x = scalar::random_vector(size_t(in), 91);
      const auto values = scalar::random_vector(size_t(out * in), 92, 0.5f);
      const auto bias = scalar::random_vector(size_t(out), 93);
      std::vector<uint16_t> stored(values.size());
      for (size_t i = 0; i < values.size(); ++i) stored[i] = f32_to_bf16(values[i]);
      std::vector<float> pairs(size_t(in), NAN);
      k.split_pairs(x.data(), in, pairs.data());
      const int64_t begin = 2, end = out - 3;  // the rows outside stay as they were
      std::vector<float> got(size_t(out), -7.0f);
      k.one_token_bf16_pairs(got.data(), pairs.data(), stored.data(), bias.data(), in, begin, end);
      for (int64_t o = 0; o < out; ++o) {
        CAPTURE(o);
        if (o < begin || o >= end) {
          CHECK(got[size_t(o)] == -7.0f);
          continue;
        }
        double exact = bias[size_t(o)], magnitude = std::abs(double(bias[size_t(o)]));
        for (int64_t i = 0; i < in; ++i) {
          const double product = double(x[size_t(i)]) * double(bf16_to_f32(stored[size_t(o * in + i)]));
          exact += product;
          magnitude += std::abs(product);
        }
        // exact products, f32 sums in another order: ~1e-7 of the magnitude (a weight met with the
        // wrong input, or a dropped half, is off by far more)
        CHECK(std::abs(got[size_t(o)] - exact) <= 1e-5 * magnitude);
      }
    }
  }
}

TEST_CASE("kernels: the f32 panel prefill kernel (x packed by tokens, an outer-product micro-kernel) equals the product") {
  // T past one and two token blocks, `in` past one slice of 256 and not a multiple of any vector,
  // rows not a multiple of the micro-tile, a row range that starts and ends inside the matrix
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    for (DType type : {DType::F32, DType::F16, DType::BF16})
      for (int64_t T : {17, 40})
        for (auto [in, out] : {std::pair<int64_t, int64_t>{37, 53}, {300, 29}, {2100, 13}}) {
          CAPTURE(cpu::kernels::isa_name(isa)); CAPTURE(dtype_name(type)); CAPTURE(T); CAPTURE(in); CAPTURE(out);
          const auto x = scalar::random_vector(size_t(T * in), 23);
          const auto values = scalar::random_vector(size_t(out * in), 24);
          const auto bias = scalar::random_vector(size_t(out), 25);
          std::vector<uint8_t> stored(size_t(dtype_bytes_for(type, out * in)));
          std::vector<float> widened(values.size());
          for (size_t i = 0; i < values.size(); ++i) {
            if (type == DType::F32) {
              widened[i] = values[i];
              std::memcpy(stored.data() + 4 * i, &values[i], 4);
            } else {
              const uint16_t h = type == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
              widened[i] = type == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
              std::memcpy(stored.data() + 2 * i, &h, 2);
            }
          }
          const int64_t blocks = (T + k.panel_tokens - 1) / k.panel_tokens;
          std::vector<float> packed(size_t(blocks * in * k.panel_tokens), NAN);
          k.pack_token_columns(x.data(), T, in, packed.data(), 0, blocks);
          std::vector<unsigned char> scratch(k.panel_rows_scratch_bytes(T));
          const int64_t begin = 3, end = out - 2;  // the rows outside stay as they were
          std::vector<float> got(size_t(T * out), -7.0f);
          k.panel_rows(type, got.data(), packed.data(), stored.data(), size_t(dtype_bytes_for(type, in)), bias.data(), T,
                       in, out, begin, end, scratch.data());
          for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < out; ++o) {
              CAPTURE(t); CAPTURE(o);
              if (o < begin || o >= end) {
                CHECK(got[size_t(t * out + o)] == -7.0f);
                continue;
              }
              double exact = bias[size_t(o)], magnitude = std::abs(double(bias[size_t(o)]));
              for (int64_t i = 0; i < in; ++i) {
                exact += double(x[size_t(t * in + i)]) * widened[size_t(o * in + i)];
                magnitude += std::abs(double(x[size_t(t * in + i)]) * widened[size_t(o * in + i)]);
              }
              CHECK(std::abs(got[size_t(t * out + o)] - exact) <= 1e-5 * magnitude);
            }
        }
  }
}

TEST_CASE("kernels: the bf16 prefill kernels (AVX512-BF16, AMX tiles) equal a double-precision loop over bf16-rounded values") {
  if (!cpu::kernels::has_bf16_dot()) {
    MESSAGE("this CPU lacks AVX512-BF16; the prefill kernels are not tested (prefill widens to f32 instead)");
    return;
  }
  const bool amx = cpu::kernels::has_amx();
  if (!amx) MESSAGE("no AMX-BF16 here (or JOURNEY_CPU_ISA caps it): only the AVX512-BF16 kernel is tested");
  for (const bool on_tiles : {false, true}) {
    if (on_tiles && !amx) continue;
    for (DType type : {DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K})
      for (int64_t T : {1, 17, 40}) {
        if (type == DType::F16 && !on_tiles) continue;  // F16 prefill: on AMX tiles only

        // 2304 and 4608: 9 and 18 slices of 256 inputs (bf16_panel_rows); out = 70: two AMX panels of
        // 32 rows and a part, a 48-row panel and 22 rows (12 + 10) of the AVX512-BF16 kernel; in = 96
        // and out = 100: a last slice shorter than 256, two full 48-row panels and 3 rows
        for (auto [in, out] :
             {std::pair<int64_t, int64_t>{256, 13}, {2304, 7}, {4608, 3}, {256, 70}, {96, 100}}) {
          if (in % dtype_block_size(type) != 0) continue;  // K types: whole super-blocks of 256
          CAPTURE(on_tiles); CAPTURE(dtype_name(type)); CAPTURE(T); CAPTURE(in); CAPTURE(out);
          const auto x = scalar::random_vector(size_t(T * in), 31);
          const auto values = scalar::random_vector(size_t(out * in), 32, 0.5f);
          const auto bias = scalar::random_vector(size_t(out), 33);
          const auto bytes = quantized(type, values);
          std::vector<float> w(values.size());
          quant::dequantize(type, bytes.data(), w.data(), int64_t(values.size()));
          std::vector<uint16_t> xb(x.size());  // x as the kernels round it (pack_token_pairs: nearest even)
          for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
          const float sentinel = 12345.0f;
          std::vector<float> got(static_cast<size_t>(T * out), sentinel);
          const size_t row_bytes = size_t(dtype_bytes_for(type, in));
          // rows [1, out): row 0 must stay untouched
          std::vector<uint16_t> packed(size_t(cpu::kernels::token_pairs_size(T, in)));
          cpu::kernels::pack_token_pairs(x.data(), T, in, packed.data(), 0, cpu::kernels::token_pair_tiles(T));
          if (on_tiles) {
            std::vector<unsigned char> scratch(cpu::kernels::amx_rows_scratch_bytes(in));
            cpu::kernels::amx_rows(type, got.data(), packed.data(), bytes.data(), row_bytes, bias.data(), T, in, out,
                                   1, out, scratch.data());
          } else {
            std::vector<unsigned char> scratch(cpu::kernels::bf16_panel_rows_scratch_bytes(T));
            cpu::kernels::bf16_panel_rows(type, got.data(), packed.data(), bytes.data(), row_bytes, bias.data(), T, in,
                                          out, 1, out, scratch.data());
          }
          for (int64_t t = 0; t < T; ++t) {
            CHECK(got[size_t(t * out)] == sentinel);
            for (int64_t o = 1; o < out; ++o) {
              double want = bias[size_t(o)], magnitude = std::abs(want);
              for (int64_t i = 0; i < in; ++i) {
                // the weight as multiplied: rounded to bf16, except F16, split into bf16 + remainder (exact)
                const float weight = w[size_t(o * in + i)];
                const double product = double(bf16_to_f32(xb[size_t(t * in + i)])) *
                                       (type == DType::F16 ? weight : bf16_to_f32(f32_to_bf16(weight)));
                want += product;
                magnitude += std::abs(product);
              }
              // f32 sums of exact bf16 products: the order of the sums differs, ~1e-7 relative each
              CHECK(std::abs(got[size_t(t * out + o)] - want) <= 1e-5 * magnitude);
            }
          }
        }
      }
  }
}

TEST_CASE("kernels: the bf16 prefill kernels multiply each weight as bf16(the reference dequantizer's value), bit for bit") {
  // Token t is one-hot at input i = base + t, so y[t, o] is the single product 1 * w[o, i]: exact, and
  // equal to bf16(dequantize(w)) only if every weight is filled into the panels exactly so (the
  // in-register fills of Q8_0, Q4_0, Q4_K, Q6_K and the unpack path of the others; the tolerance of
  // the test above cannot tell one bf16 step of a single weight apart).
  if (!cpu::kernels::has_bf16_dot()) {
    MESSAGE("this CPU lacks AVX512-BF16; the prefill kernels are not tested (prefill widens to f32 instead)");
    return;
  }
  constexpr int64_t in = 512, out = 19, T = 32;  // two K super-blocks, 16 legacy blocks per row
  for (const bool on_tiles : {false, true}) {
    if (on_tiles && !cpu::kernels::has_amx()) continue;
    for (DType type : {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,
                       DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      CAPTURE(on_tiles); CAPTURE(dtype_name(type));
      const auto values = scalar::random_vector(size_t(out * in), 34, 0.8f);  // [out, in]
      const auto bytes = quantized(type, values);
      std::vector<float> w(values.size());  // [out, in], the reference dequantizer's
      quant::dequantize(type, bytes.data(), w.data(), int64_t(values.size()));
      const size_t row_bytes = size_t(dtype_bytes_for(type, in));
      int64_t mismatches = 0;
      for (int64_t base = 0; base < in; base += T) {
        std::vector<float> x(size_t(T * in), 0.0f);  // [T, in], token t one-hot at base + t
        for (int64_t t = 0; t < T; ++t) x[size_t(t * in + base + t)] = 1.0f;
        std::vector<uint16_t> packed(size_t(cpu::kernels::token_pairs_size(T, in)));
        cpu::kernels::pack_token_pairs(x.data(), T, in, packed.data(), 0, cpu::kernels::token_pair_tiles(T));
        std::vector<float> got(size_t(T * out), NAN);  // [T, out]
        if (on_tiles) {
          std::vector<unsigned char> scratch(cpu::kernels::amx_rows_scratch_bytes(in));
          cpu::kernels::amx_rows(type, got.data(), packed.data(), bytes.data(), row_bytes, nullptr, T, in, out, 0,
                                 out, scratch.data());
        } else {
          std::vector<unsigned char> scratch(cpu::kernels::bf16_panel_rows_scratch_bytes(T));
          cpu::kernels::bf16_panel_rows(type, got.data(), packed.data(), bytes.data(), row_bytes, nullptr, T, in, out,
                                        0, out, scratch.data());
        }
        for (int64_t t = 0; t < T; ++t)
          for (int64_t o = 0; o < out; ++o) {
            const float want = bf16_to_f32(f32_to_bf16(w[size_t(o * in + base + t)]));
            if (got[size_t(t * out + o)] != want && mismatches++ < 3)
              CHECK_MESSAGE(false, "row ", o, " input ", base + t, ": got ", got[size_t(t * out + o)], ", want ", want);
          }
      }
      CHECK(mismatches == 0);
    }
  }
}

// Each table's activation quantizer `kernel` (quantize_q8_0 or quantize_q8_k; nullptr in the
// generic table, which runs the plain loop itself) on the T rows of x, against the plain loop's
// `plain`, bit for bit.
using QuantizeRow = void (*)(const float* x, int64_t n, int8_t* q, float* dx, int32_t* gsum, float* xs);
void check_quantize_kernel(const std::vector<float>& x, int64_t T, int64_t in, const cpu::QuantizedInput& plain,
                           QuantizeRow cpu::kernels::KernelTable::*kernel) {
  int tested = 0;
  for (Isa isa : supported_isas()) {
    const QuantizeRow quantize = cpu::kernels::table(isa).*kernel;
    if (!quantize) continue;
    CAPTURE(cpu::kernels::isa_name(isa));
    ++tested;
    cpu::QuantizedInput fast;
    fast.size_for(T, in);
    const int64_t groups = in / cpu::kernels::kGroup;
    for (int64_t t = 0; t < T; ++t)
      quantize(x.data() + t * in, in, fast.q.data() + t * in, fast.dx.data() + t * groups, fast.gsum.data() + t * groups,
               fast.xs.data() + t * groups);
    CHECK(fast.q == plain.q);
    CHECK(fast.gsum == plain.gsum);
    CHECK(std::memcmp(fast.dx.data(), plain.dx.data(), plain.dx.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(fast.xs.data(), plain.xs.data(), plain.xs.size() * sizeof(float)) == 0);
  }
  if (tested == 0) MESSAGE("no AVX2 here: activations are quantized by the plain loop only");
}

TEST_CASE("kernels: the vectorized Q8_0 activation quantization equals the plain loop bit for bit, ties included") {
  const int64_t T = 3, in = 320;  // 10 blocks per token
  std::vector<float> x = scalar::random_vector(size_t(T * in), 70, 3.0f);  // [T, in]
  // block 1 of token 0: every value an exact tie after scaling (max 127 -> d = 1, values k + 0.5 and -(k + 0.5))
  for (int j = 0; j < 32; ++j) x[size_t(32 + j)] = (j == 0 ? 127.0f : float(j % 20) + 0.5f) * (j % 2 ? -1.0f : 1.0f);
  for (int j = 0; j < 32; ++j) x[size_t(64 + j)] = 0.0f;  // block 2: all zero (d = 0)
  x[size_t(in + 5)] = 1e-30f;                              // token 1: a tiny value among normal ones
  cpu::QuantizedInput plain;
  plain.quantize_portable(x.data(), T, in, 32);
  CHECK(plain.q[32 + 1] == -2);  // -1.5 rounds away from zero: the ties did reach the rounding
  CHECK(plain.q[32 + 2] == 3);   // 2.5 -> 3
  check_quantize_kernel(x, T, in, plain, &cpu::kernels::KernelTable::quantize_q8_0);
  // and through QuantizedInput, threads sharing the rows of a prefill-sized input
  const int64_t big_T = 70, big_in = 1024;
  const std::vector<float> big = scalar::random_vector(size_t(big_T * big_in), 71, 3.0f);
  cpu::QuantizedInput shared, alone;
  shared.quantize(big.data(), big_T, big_in, 32, 2);
  alone.quantize_portable(big.data(), big_T, big_in, 32);
  CHECK(shared.q == alone.q);
  CHECK(shared.gsum == alone.gsum);
  shared.quantize(big.data(), big_T, big_in, 256, 2);
  alone.quantize_portable(big.data(), big_T, big_in, 256);
  CHECK(shared.q == alone.q);
  CHECK(std::memcmp(shared.dx.data(), alone.dx.data(), alone.dx.size() * sizeof(float)) == 0);
}

TEST_CASE("kernels: the vectorized Q8_K activation quantization equals the plain loop bit for bit, ties and the largest value's sign included") {
  const int64_t T = 3, in = 1280;  // 5 super-blocks of 256 per token
  std::vector<float> x = scalar::random_vector(size_t(T * in), 72, 3.0f);  // [T, in]
  // super-block 1 of token 0: max -127 first, +127 later (the first maps to -127: inverse 1, d = 1),
  // the others exact ties k + 0.5 after scaling (round to even: 4.5 -> 4, -5.5 -> -6)
  float* tie = x.data() + 256;
  for (int j = 0; j < 256; ++j) tie[j] = (float(j % 20) + 0.5f) * (j % 2 ? -1.0f : 1.0f);
  tie[3] = -127.0f, tie[200] = 127.0f;
  std::fill(x.begin() + 512, x.begin() + 768, 0.0f);  // super-block 2: all zero (d = 0)
  x[size_t(in + 17)] = 1e-30f;                           // token 1: a tiny value among normal ones
  x[size_t(2 * in + 300)] = 50.0f, x[size_t(2 * in + 301)] = -50.0f;  // token 2: +max before -max
  cpu::QuantizedInput plain;
  plain.quantize_portable(x.data(), T, in, 256);
  CHECK(plain.q[256 + 3] == -127);
  CHECK(plain.q[256 + 200] == 127);
  CHECK(plain.q[256 + 4] == 4);   // 4.5 -> 4 (even)
  CHECK(plain.q[256 + 5] == -6);  // -5.5 -> -6 (even)
  CHECK(plain.q[size_t(2 * in + 300)] == -127);
  CHECK(plain.q[size_t(2 * in + 301)] == 127);
  check_quantize_kernel(x, T, in, plain, &cpu::kernels::KernelTable::quantize_q8_k);
}

TEST_CASE("kernels: softmax_row and silu_mul equal double-precision exp within 4e-7; -inf weighs exactly 0; a value's bits do not depend on its place") {
  // (Relative bounds: e^x's own error ~1e-7, plus, for softmax, the f32 rounding of x - max, which
  // moves e^(x - max) by up to |x - max| 2^-24 relative; silu below g = -88 is -0 against a true
  // value under 1e-36.)
  const float inf = std::numeric_limits<float>::infinity();
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    CAPTURE(cpu::kernels::isa_name(isa));
    // silu over the whole float range that matters, the extremes included
    std::vector<float> gate, up;
    for (float g = -120.0f; g <= 120.0f; g += 0.37f) gate.push_back(g), up.push_back(0.5f + 0.001f * float(gate.size()));
    for (float g : {-1e30f, -88.7f, -88.3f, -87.0f, -1e-30f, 0.0f, 1e-30f, 87.0f, 88.3f, 88.8f, 1e30f})
      gate.push_back(g), up.push_back(1.0f);
    const int64_t n = int64_t(gate.size());
    std::vector<float> act(gate.size());
    k.silu_mul(gate.data(), up.data(), act.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(gate[size_t(i)]);
      const double g = gate[size_t(i)];
      const double want = g / (1.0 + std::exp(-g)) * up[size_t(i)];
      CHECK(std::abs(act[size_t(i)] - want) <= 4e-7 * std::abs(want) + 1e-35);
    }
    // the same element at every offset (1 .. 40 elements in: body lanes and tail) gives the same bits
    for (int64_t offset = 1; offset <= 40; ++offset) {
      std::vector<float> g2(size_t(offset), 0.3f), u2(size_t(offset), 1.0f), o2(size_t(offset) + 1);
      g2.push_back(gate[7]), u2.push_back(up[7]);
      k.silu_mul(g2.data(), u2.data(), o2.data(), offset + 1);
      CHECK(o2[size_t(offset)] == act[7]);
    }
    // softmax rows of every length 1 .. 70 with masked tails and a large spread
    for (int64_t len = 1; len <= 70; ++len) {
      CAPTURE(len);
      std::vector<float> row(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) row[size_t(i)] = float(std::sin(double(i) * 1.7) * 30.0);
      for (int64_t i = len * 2 / 3 + 1; i < len; ++i) row[size_t(i)] = -inf;  // masked
      std::vector<double> want(row.begin(), row.end());
      const double top = *std::max_element(want.begin(), want.end());
      double total = 0;
      for (double& v : want) total += (v = std::exp(v - top));
      k.softmax_row(row.data(), len);
      for (int64_t i = 0; i < len; ++i) {
        if (i > len * 2 / 3) CHECK(row[size_t(i)] == 0.0f);  // exactly
        else {
          const double p = want[size_t(i)] / total, spread = std::abs(std::log(want[size_t(i)]));  // |x - max|
          CHECK(std::abs(row[size_t(i)] - p) <= (4e-7 + 6e-8 * spread) * p);
        }
      }
    }
  }
}

TEST_CASE("kernels: attention over an f16, bf16 or q8_0 KV cache read in place equals attention over the rows widened first, bit for bit") {
  // The fast backend's paged attention passes the cached rows as stored; the kernels widen each
  // value as quant::dequantize does, so the scores and the mix must be the f32 kernels' on the
  // dequantized rows exactly. D = 68 leaves a tail after the vector lanes (f16 / bf16; Q8_0 needs
  // whole blocks of 32); 37 positions leave a partial group of rows.
  for (Isa isa : supported_isas()) {
    const auto& k = cpu::kernels::table(isa);
    CAPTURE(cpu::kernels::isa_name(isa));
    for (DType type : {DType::F16, DType::BF16, DType::Q8_0}) {
      for (const int64_t D : {int64_t(64), int64_t(68), int64_t(128)}) {
        if (type == DType::Q8_0 && D % 32 != 0) continue;
        for (const int64_t count : {int64_t(1), int64_t(7), int64_t(37)}) {
          CAPTURE(dtype_name(type));
          CAPTURE(D);
          CAPTURE(count);
          std::vector<float> values(size_t(count * D)), q(static_cast<size_t>(D)), weights(static_cast<size_t>(count));
          for (size_t i = 0; i < values.size(); ++i) values[i] = float(std::sin(double(i) * 0.37) * (1 + i % 5));
          for (size_t i = 0; i < q.size(); ++i) q[i] = float(std::cos(double(i) * 0.11));
          for (size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0f / float(1 + i);
          const std::vector<uint8_t> stored = quantized(type, values);
          std::vector<float> widened(values.size());
          quant::dequantize(type, stored.data(), widened.data(), int64_t(values.size()));
          const int64_t row_bytes = dtype_bytes_for(type, D);
          std::vector<const void*> typed_rows, f32_rows;
          for (int64_t p = count - 1; p >= 0; --p) {  // (any order: rows are addressed one by one)
            typed_rows.push_back(stored.data() + p * row_bytes);
            f32_rows.push_back(widened.data() + p * D);
          }
          std::vector<float> scores(static_cast<size_t>(count)), want_scores(static_cast<size_t>(count));
          k.attention_scores(type, q.data(), typed_rows.data(), count, D, 0.125f, scores.data());
          k.attention_scores(DType::F32, q.data(), f32_rows.data(), count, D, 0.125f, want_scores.data());
          CHECK(std::memcmp(scores.data(), want_scores.data(), scores.size() * sizeof(float)) == 0);
          // attention_scores_heads: eleven heads at once (8 in the lanes, then 3: two blocks of lanes,
          // as a prefill's tile of queries gives them) and 35 (four blocks, then one of 3), each with
          // its own q: each head's scores alone (one block, a decode step's kernel), and the rows as
          // stored give the widened rows' scores
          for (const int many_heads : {11, 35}) {
            CAPTURE(many_heads);
            std::vector<float> many_q(size_t(many_heads * D)), many(size_t(many_heads * count)), many_f32(many.size()),
                alone_scores(static_cast<size_t>(count));
            for (size_t i = 0; i < many_q.size(); ++i) many_q[i] = float(std::cos(double(i) * 0.23) * (1 + i % 3));
            k.attention_scores_heads(type, many_q.data(), D, many_heads, typed_rows.data(), count, D, 0.125f, many.data(),
                                     count, typed_rows.data());
            k.attention_scores_heads(DType::F32, many_q.data(), D, many_heads, f32_rows.data(), count, D, 0.125f,
                                     many_f32.data(), count, nullptr);
            CHECK(std::memcmp(many.data(), many_f32.data(), many.size() * sizeof(float)) == 0);
            for (int64_t h = 0; h < many_heads; ++h) {
              k.attention_scores_heads(type, many_q.data() + h * D, D, 1, typed_rows.data(), count, D, 0.125f,
                                       alone_scores.data(), count, nullptr);
              CHECK(std::memcmp(many.data() + h * count, alone_scores.data(), alone_scores.size() * sizeof(float)) == 0);
            }
            for (const int64_t h : {int64_t(0), int64_t(7), int64_t(10), int64_t(many_heads - 1)})  // against a double loop
              for (int64_t i = 0; i < count; ++i) {
                double want = 0;  // typed_rows[i] is row count - 1 - i
                for (int64_t d = 0; d < D; ++d) want += double(many_q[size_t(h * D + d)]) * widened[size_t((count - 1 - i) * D + d)];
                CHECK(std::abs(many[size_t(h * count + i)] - 0.125 * want) <= 1e-5 * (1 + std::abs(0.125 * want)));
              }
          }
          std::vector<float> mix(static_cast<size_t>(D)), want_mix(static_cast<size_t>(D));
          k.attention_mix(type, weights.data(), count, typed_rows.data(), count, D, mix.data(), D, 1, false);
          k.attention_mix(DType::F32, weights.data(), count, f32_rows.data(), count, D, want_mix.data(), D, 1, false);
          CHECK(std::memcmp(mix.data(), want_mix.data(), mix.size() * sizeof(float)) == 0);
          // the rows split over two calls, the second going on from the first's sums: the same bits
          const int64_t split = count / 2;
          std::vector<float> halves(static_cast<size_t>(D));
          k.attention_mix(type, weights.data(), count, typed_rows.data(), split, D, halves.data(), D, 1, false);
          k.attention_mix(type, weights.data() + split, count, typed_rows.data() + split, count - split, D, halves.data(), D, 1,
                          true);
          CHECK(std::memcmp(halves.data(), mix.data(), mix.size() * sizeof(float)) == 0);
          // three heads at once (a pair, then one) and eleven (two fours, a pair and one on AVX-512; five
          // pairs and one elsewhere), each with its own
          // weights: each head's values alone, also with the rows split over two calls
          for (const int heads : {3, 11}) {
            CAPTURE(heads);
            std::vector<float> many_weights(size_t(heads * count)), many(size_t(heads * D)), many_split(many.size()),
                alone(static_cast<size_t>(D));
            for (size_t i = 0; i < many_weights.size(); ++i) many_weights[i] = 1.0f / float(2 + i % 11);
            k.attention_mix(type, many_weights.data(), count, typed_rows.data(), count, D, many.data(), D, heads, false);
            k.attention_mix(type, many_weights.data(), count, typed_rows.data(), split, D, many_split.data(), D, heads,
                            false);
            k.attention_mix(type, many_weights.data() + split, count, typed_rows.data() + split, count - split, D,
                            many_split.data(), D, heads, true);
            CHECK(std::memcmp(many_split.data(), many.data(), many.size() * sizeof(float)) == 0);
            for (int64_t h = 0; h < heads; ++h) {
              k.attention_mix(type, many_weights.data() + h * count, count, typed_rows.data(), count, D, alone.data(), D,
                              1, false);
              CHECK(std::memcmp(many.data() + h * D, alone.data(), alone.size() * sizeof(float)) == 0);
            }
          }
          // and the f32 kernels agree with a double-precision loop (so "equal" is not two wrongs)
          double s0 = 0;
          for (int64_t d = 0; d < D; ++d) s0 += double(q[size_t(d)]) * widened[size_t((count - 1) * D + d)];
          CHECK(std::abs(want_scores[0] - 0.125 * s0) <= 1e-5 * (1 + std::abs(0.125 * s0)));
        }
      }
    }
  }
}
