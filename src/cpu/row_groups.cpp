// Q4_0, Q8_0 and Q4_K rows regrouped by 8 for the one-token decode dot, and back (kernels.h,
// block_q4_0x8, block_q8_0x8, block_q4_kx8). Plain byte moves, run once per matrix at load and per
// chunk of rows where a product of several tokens reads a grouped matrix. And Q8_0's block sums
// (q8_0_block_sums), the other layout made at load.
#include <cstring>
#include <stdexcept>
#include <string>

#include "cpu/kernels.h"
#include "quant/blocks.h"

namespace journey::cpu::kernels {

namespace {
// 16 bytes as one vector (SSE2 / NEON): the compiler left a plain byte loop scalar (360 ns per row
// of 2048 put back, against 42 for this; bench_block_dots' back/row).
typedef uint8_t Bytes __attribute__((vector_size(16)));

// Half h of a chunk, bytes 32j .. 32j + 31: row A = 4h + j's quants in the low nibbles, row B = 4h + 2 + j's
// in the high ones; a stored byte i holds quants i (low) and i + 16 (high), so bytes 32j + i and
// 32j + 16 + i come from stored byte i of A and of B.
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
        for (int j = 0; j < 2; ++j) {
          Bytes a, b_;
          std::memcpy(&a, row0[(4 * h + j) * blocks].qs, 16);
          std::memcpy(&b_, row0[(4 * h + 2 + j) * blocks].qs, 16);
          const Bytes low_quants = (a & 0x0F) | (b_ << 4), high_quants = (a >> 4) | (b_ & 0xF0);
          std::memcpy(c.qs + 64 * h + 32 * j, &low_quants, 16);
          std::memcpy(c.qs + 64 * h + 32 * j + 16, &high_quants, 16);
        }
    }
}

// Row r = 4h + 2m + j of a group is pair 2h + m's half j: its quant i is in byte 32j + i of half h,
// the low nibble for m = 0, the high one for m = 1; a stored byte i holds quants i and i + 16. Byte
// operations on 16 bytes at a time: prefill puts every row of a grouped matrix back through here.
void q4_0_take(const block_q4_0x8& c, int r, quant::block_q4_0& block) {
  const int h = r / 4, high = (r / 2) % 2, j = r % 2;
  const uint8_t* row_quants = c.qs + 64 * h + 32 * j;  // quants 0..15 of the row, then 16..31
  block.d = c.d[r];
  Bytes quants_low, quants_high;  // quants 0..15 and 16..31 of the row, in their nibbles of the group bytes
  std::memcpy(&quants_low, row_quants, 16);
  std::memcpy(&quants_high, row_quants + 16, 16);
  const Bytes packed = high ? (quants_low >> 4) | (quants_high & 0xF0) : (quants_low & 0x0F) | (quants_high << 4);
  std::memcpy(block.qs, &packed, 16);
}

// GroupLayout::Quads (AVX2): row r's stored bytes 4j .. 4j + 3 at 32j + 4r of the chunk's qs.
void q4_0_quads_place(block_q4_0x8& c, int r, const quant::block_q4_0& block) {
  c.d[r] = block.d;
  for (int j = 0; j < 4; ++j) std::memcpy(c.qs + 32 * j + 4 * r, block.qs + 4 * j, 4);
}
void q4_0_quads_take(const block_q4_0x8& c, int r, quant::block_q4_0& block) {
  block.d = c.d[r];
  for (int j = 0; j < 4; ++j) std::memcpy(block.qs + 4 * j, c.qs + 32 * j + 4 * r, 4);
}

// GroupLayout::Quads of Q4_K: d and dmin as in Pairs; word k of row r's packed scales at 32k + 4r
// of the scales' 96 bytes, its qs bytes 32c + 4j .. + 3 at 256c + 32j + 4r of the qs' 1,024.
void q4_k_quads_place(block_q4_kx8& c, int r, const quant::block_q4_k& block) {
  c.d[r] = block.d, c.dmin[r] = block.dmin;
  uint8_t* words = c.scales[0];
  uint8_t* quads = c.qs[0][0];
  for (int k = 0; k < 3; ++k) std::memcpy(words + 32 * k + 4 * r, block.scales + 4 * k, 4);
  for (int chunk = 0; chunk < 4; ++chunk)
    for (int j = 0; j < 8; ++j) std::memcpy(quads + 256 * chunk + 32 * j + 4 * r, block.qs + 32 * chunk + 4 * j, 4);
}
void q4_k_quads_take(const block_q4_kx8& c, int r, quant::block_q4_k& block) {
  block.d = c.d[r], block.dmin = c.dmin[r];
  const uint8_t* words = c.scales[0];
  const uint8_t* quads = c.qs[0][0];
  for (int k = 0; k < 3; ++k) std::memcpy(block.scales + 4 * k, words + 32 * k + 4 * r, 4);
  for (int chunk = 0; chunk < 4; ++chunk)
    for (int j = 0; j < 8; ++j) std::memcpy(block.qs + 32 * chunk + 4 * j, quads + 256 * chunk + 32 * j + 4 * r, 4);
}

// A whole Quads chunk back to its 8 rows at once (batched decode and prefill put every row of a
// grouped matrix back, a chunk of rows at a time): the rows' words transposed 4 x 4 in vectors,
// one 16-byte store per row and 4 words, where taking row by row stores 4 bytes at a time (Q4_0
// 102-182 -> 56-77 ns per row of 2048, Q4_K 85-142 -> 33-41; bench_block_dots' back/row).
typedef uint32_t Words __attribute__((vector_size(16)));
// Word i of the vector at src + j * src_step -> word j of the row at dst[i] (i, j < 4).
inline void transpose_words_4x4(const uint8_t* src, size_t src_step, uint8_t* const dst[4]) {
  Words v[4];
  for (int j = 0; j < 4; ++j) std::memcpy(&v[j], src + size_t(j) * src_step, 16);
  const Words t0 = __builtin_shufflevector(v[0], v[1], 0, 4, 1, 5), t1 = __builtin_shufflevector(v[0], v[1], 2, 6, 3, 7);
  const Words t2 = __builtin_shufflevector(v[2], v[3], 0, 4, 1, 5), t3 = __builtin_shufflevector(v[2], v[3], 2, 6, 3, 7);
  const Words rows[4] = {__builtin_shufflevector(t0, t2, 0, 1, 4, 5), __builtin_shufflevector(t0, t2, 2, 3, 6, 7),
                         __builtin_shufflevector(t1, t3, 0, 1, 4, 5), __builtin_shufflevector(t1, t3, 2, 3, 6, 7)};
  for (int i = 0; i < 4; ++i) std::memcpy(dst[i], &rows[i], 16);
}
// Row r's block at rows[r * stride].
void q4_0_quads_take_all(const block_q4_0x8& c, quant::block_q4_0* rows, int64_t stride) {
  for (int half = 0; half < 2; ++half) {  // rows 4h .. 4h + 3: bytes 16h .. of each quad register
    uint8_t* dst[4];
    for (int i = 0; i < 4; ++i) dst[i] = rows[(4 * half + i) * stride].qs;
    transpose_words_4x4(c.qs + 16 * half, 32, dst);
  }
  for (int r = 0; r < kGroupRows; ++r) rows[r * stride].d = c.d[r];
}
void q4_k_quads_take_all(const block_q4_kx8& c, quant::block_q4_k* rows, int64_t stride) {
  const uint8_t* words = c.scales[0];
  const uint8_t* quads = c.qs[0][0];
  for (int r = 0; r < kGroupRows; ++r) {
    quant::block_q4_k& block = rows[r * stride];
    block.d = c.d[r], block.dmin = c.dmin[r];
    for (int k = 0; k < 3; ++k) std::memcpy(block.scales + 4 * k, words + 32 * k + 4 * r, 4);
  }
  for (int chunk = 0; chunk < 4; ++chunk)
    for (int quad = 0; quad < 8; quad += 4)  // quads quad .. quad + 3 of rows 4 half .. 4 half + 3
      for (int half = 0; half < 2; ++half) {
        uint8_t* dst[4];
        for (int i = 0; i < 4; ++i) dst[i] = rows[(4 * half + i) * stride].qs + 32 * chunk + 4 * quad;
        transpose_words_4x4(quads + 256 * chunk + 32 * quad + 16 * half, 32, dst);
      }
}

// The layouts that place each row's block on its own (Q8_0, Q4_K; Q4_0 packs two rows' nibbles
// per byte, above): `place(chunk, r, block)` puts row r's block into the chunk, `take(chunk, r,
// block)` takes it back; these loops walk the groups and rows.
template <typename Block, typename Chunk, typename Place>
void each_row_to_groups(const void* stored, int64_t rows, int64_t blocks, void* grouped, Place place) {
  const auto* src = static_cast<const Block*>(stored);  // [rows, blocks]
  auto* dst = static_cast<Chunk*>(grouped);             // [rows / 8, blocks]
  for (int64_t g = 0; g < rows / kGroupRows; ++g)
    for (int64_t b = 0; b < blocks; ++b) {
      const Block* row0 = src + g * kGroupRows * blocks + b;  // row r's block: row0[r * blocks]
      for (int r = 0; r < kGroupRows; ++r) place(dst[g * blocks + b], r, row0[r * blocks]);
    }
}
// Blocks [first_block, first_block + block_count) of rows [first, first + count), each row's
// block_count blocks after the other's in `stored`. take_all (or nullptr): a whole group's 8 rows
// of one chunk at once, for the groups that lie wholly inside the rows.
template <typename Block, typename Chunk, typename Take>
void each_row_from_groups(const void* grouped, int64_t blocks, int64_t first, int64_t count, int64_t first_block,
                          int64_t block_count, void* stored, Take take,
                          void (*take_all)(const Chunk&, Block*, int64_t) = nullptr) {
  const auto* src = static_cast<const Chunk*>(grouped);
  auto* dst = static_cast<Block*>(stored);  // [count, block_count]
  for (int64_t k = 0; k < count;) {
    const int64_t row = first + k;
    const Chunk* chunk = src + row / kGroupRows * blocks + first_block;
    if (take_all && row % kGroupRows == 0 && k + kGroupRows <= count) {
      for (int64_t b = 0; b < block_count; ++b) take_all(chunk[b], dst + k * block_count + b, block_count);
      k += kGroupRows;
      continue;
    }
    for (int64_t b = 0; b < block_count; ++b) take(chunk[b], int(row % kGroupRows), dst[k * block_count + b]);
    ++k;
  }
}

// Q8_0: row r's quants are bytes 32r .. 32r + 31 of a chunk, as they are stored.
void q8_0_place(block_q8_0x8& c, int r, const quant::block_q8_0& block) {
  c.d[r] = block.d;
  std::memcpy(c.qs + quant::kQK * r, block.qs, quant::kQK);
}
void q8_0_take(const block_q8_0x8& c, int r, quant::block_q8_0& block) {
  block.d = c.d[r];
  std::memcpy(block.qs, c.qs + quant::kQK * r, quant::kQK);
}

// Q4_K: per super-block the 8 rows' d, dmin and packed scales side by side, then chunk k (32 bytes
// of qs: weights 64k .. 64k + 63) of rows 2p and 2p + 1 next to each other, pair after pair.
void q4_k_place(block_q4_kx8& c, int r, const quant::block_q4_k& block) {
  c.d[r] = block.d, c.dmin[r] = block.dmin;
  std::memcpy(c.scales[r], block.scales, sizeof c.scales[r]);
  for (int k = 0; k < 4; ++k) std::memcpy(&c.qs[k][r / 2][32 * (r % 2)], block.qs + 32 * k, 32);
}
void q4_k_take(const block_q4_kx8& c, int r, quant::block_q4_k& block) {
  block.d = c.d[r], block.dmin = c.dmin[r];
  std::memcpy(block.scales, c.scales[r], sizeof block.scales);
  for (int k = 0; k < 4; ++k) std::memcpy(block.qs + 32 * k, &c.qs[k][r / 2][32 * (r % 2)], 32);
}

[[noreturn]] void no_layout(const char* what, DType type, GroupLayout layout) {
  throw std::logic_error(std::string(what) + ": " + std::string(dtype_name(type)) + " has no row groups" +
                         (layout == GroupLayout::Quads ? " in the Quads layout" : ""));
}

}  // namespace

void rows_to_groups(DType type, GroupLayout layout, const void* stored, int64_t rows, int64_t in, void* grouped) {
  if (layout == GroupLayout::Quads) {
    if (type == DType::Q4_0)
      return each_row_to_groups<quant::block_q4_0, block_q4_0x8>(stored, rows, in / quant::kQK, grouped,
                                                                 q4_0_quads_place);
    if (type == DType::Q4_K)
      return each_row_to_groups<quant::block_q4_k, block_q4_kx8>(stored, rows, in / quant::kQK_K, grouped,
                                                                 q4_k_quads_place);
    no_layout("rows_to_groups", type, layout);
  }
  if (type == DType::Q4_0) return q4_0_rows_to_groups(stored, rows, in, grouped);
  if (type == DType::Q8_0)
    return each_row_to_groups<quant::block_q8_0, block_q8_0x8>(stored, rows, in / quant::kQK, grouped, q8_0_place);
  if (type == DType::Q4_K)
    return each_row_to_groups<quant::block_q4_k, block_q4_kx8>(stored, rows, in / quant::kQK_K, grouped, q4_k_place);
  no_layout("rows_to_groups", type, layout);
}

void row_blocks_from_groups(DType type, GroupLayout layout, const void* grouped, int64_t in, int64_t first,
                            int64_t count, int64_t first_block, int64_t block_count, void* stored) {
  const int64_t blocks = in / dtype_block_size(type);
  if (layout == GroupLayout::Quads) {
    if (type == DType::Q4_0)
      return each_row_from_groups<quant::block_q4_0, block_q4_0x8>(grouped, blocks, first, count, first_block,
                                                                   block_count, stored, q4_0_quads_take,
                                                                   q4_0_quads_take_all);
    if (type == DType::Q4_K)
      return each_row_from_groups<quant::block_q4_k, block_q4_kx8>(grouped, blocks, first, count, first_block,
                                                                   block_count, stored, q4_k_quads_take,
                                                                   q4_k_quads_take_all);
    no_layout("rows_from_groups", type, layout);
  }
  if (type == DType::Q4_0)
    return each_row_from_groups<quant::block_q4_0, block_q4_0x8>(grouped, blocks, first, count, first_block,
                                                                 block_count, stored, q4_0_take);
  if (type == DType::Q8_0)
    return each_row_from_groups<quant::block_q8_0, block_q8_0x8>(grouped, blocks, first, count, first_block,
                                                                 block_count, stored, q8_0_take);
  if (type == DType::Q4_K)
    return each_row_from_groups<quant::block_q4_k, block_q4_kx8>(grouped, blocks, first, count, first_block,
                                                                 block_count, stored, q4_k_take);
  no_layout("rows_from_groups", type, layout);
}

void rows_from_groups(DType type, GroupLayout layout, const void* grouped, int64_t in, int64_t first, int64_t count,
                      void* stored) {
  row_blocks_from_groups(type, layout, grouped, in, first, count, 0, in / dtype_block_size(type), stored);
}

void q8_0_block_sums(const void* rows, int64_t count, int64_t in, int16_t* sums) {
  const auto* blocks = static_cast<const quant::block_q8_0*>(rows);  // [count, in / 32]
  for (int64_t b = 0; b < count * (in / quant::kQK); ++b) {
    int sum = 0;
    for (int8_t q : blocks[b].qs) sum += q;
    sums[b] = int16_t(sum);
  }
}

}  // namespace journey::cpu::kernels
