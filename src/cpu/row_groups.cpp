// Q4_0 rows regrouped by 8 for the one-token decode dot, and back (kernels.h, block_q4_0x8). Plain
// byte moves, run once per matrix at load and per chunk of rows where a product of several tokens
// reads a grouped matrix.
#include <cstring>

#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace journey::cpu::kernels {

namespace {
constexpr int64_t kBlockBytes = sizeof(quant::block_q4_0);  // 18
static_assert(kBlockBytes == 18);

// 16 bytes as one vector (SSE2 / NEON): the compiler left a plain byte loop scalar (360 ns per row
// of 2048 put back, against 42 for this; bench_block_dots' back/row).
typedef uint8_t Bytes __attribute__((vector_size(16)));

// Quant i (0..31) of a stored block: block_q4_0's nibble order.
inline uint8_t quant_of(const quant::block_q4_0& b, int i) { return i < 16 ? b.qs[i] & 0x0F : b.qs[i - 16] >> 4; }
}  // namespace

void q4_0_rows_to_groups(const void* stored, int64_t rows, int64_t in, void* grouped) {
  const int64_t blocks = in / quant::kQK;
  const auto* src = static_cast<const quant::block_q4_0*>(stored);  // [rows, blocks]
  auto* dst = static_cast<block_q4_0x8*>(grouped);                 // [rows / 8, blocks]
  for (int64_t g = 0; g < rows / kGroupRows; ++g)
    for (int64_t b = 0; b < blocks; ++b) {
      block_q4_0x8& c = dst[g * blocks + b];
      const quant::block_q4_0* row0 = src + g * kGroupRows * blocks + b;  // row r's block: row0[r * blocks]
      for (int r = 0; r < kGroupRows; ++r) c.d[r] = row0[r * blocks].d;
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 64; ++i) {  // pair p's byte i: quant i % 32 of row 2p + i / 32
          const uint8_t lo = quant_of(row0[(4 * h + i / 32) * blocks], i % 32);      // pair 2h
          const uint8_t hi = quant_of(row0[(4 * h + 2 + i / 32) * blocks], i % 32);  // pair 2h + 1
          c.qs[64 * h + i] = uint8_t(lo | hi << 4);
        }
    }
}

// Row r = 4h + 2m + j of a group is pair 2h + m's half j: its quant i is in byte 32j + i of half h,
// the low nibble for m = 0, the high one for m = 1; a stored byte i holds quants i and i + 16. Byte
// operations on 16 bytes at a time: prefill and the token lanes of batched decode put every row of a
// grouped matrix back through here.
void q4_0_rows_from_groups(const void* grouped, int64_t in, int64_t first, int64_t count, void* stored) {
  const int64_t blocks = in / quant::kQK;
  const auto* src = static_cast<const block_q4_0x8*>(grouped);
  auto* dst = static_cast<quant::block_q4_0*>(stored);  // [count, blocks]
  for (int64_t k = 0; k < count; ++k) {
    const int64_t row = first + k, g = row / kGroupRows;
    const int r = int(row % kGroupRows), h = r / 4, high = (r / 2) % 2, j = r % 2;
    const block_q4_0x8* chunk = src + g * blocks;
    quant::block_q4_0* out = dst + k * blocks;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* row_quants = chunk[b].qs + 64 * h + 32 * j;  // quants 0..15 of the row, then 16..31
      out[b].d = chunk[b].d[r];
      Bytes quants_low, quants_high;  // quants 0..15 and 16..31 of the row, in their nibbles of the group bytes
      std::memcpy(&quants_low, row_quants, 16);
      std::memcpy(&quants_high, row_quants + 16, 16);
      const Bytes packed = high ? (quants_low >> 4) | (quants_high & 0xF0) : (quants_low & 0x0F) | (quants_high << 4);
      std::memcpy(out[b].qs, &packed, 16);
    }
  }
}

}  // namespace journey::cpu::kernels
