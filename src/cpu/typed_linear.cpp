// cpu::linear per weight type (the table in typed_linear.h).
#include "cpu/typed_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"

namespace journey::cpu {

namespace {


// Per-thread scratch of the typed paths, kept across calls (OpenMP threads persist).
struct Scratch {
  std::vector<uint8_t> q;              // [in] one weight row unpacked
  std::vector<float> s, o;             // [in / 16]
  HugePageFloats rows;                 // [kFallbackRows, in] rows widened to f32 (no AVX512-BF16)
  std::vector<unsigned char> bf16;     // kernels::bf16_panel_rows's panel and sums
  std::vector<unsigned char> amx;      // kernels::amx_rows's panel and tiles
  std::vector<unsigned char> panel;    // kernels::panel_rows's f32 panel and sums
  std::vector<unsigned char> stored;   // [kStoredChunkRows, row bytes] rows of a grouped matrix back as stored
  std::vector<float> prefill_scratch;  // the prefill kernels' scratch (kernels::prefill_scratch_floats)
  std::vector<kernels::TokenLaneActivations> lanes;  // [chunks] the token lanes of a prefill
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
template <typename V>
void ensure(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Rows widened to f32 per fallback chunk: 16 rows of 5632 floats stay in L2 (360 KB).
constexpr int64_t kFallbackRows = 16;

// Rows of a grouped matrix (WeightView::row_groups) put back as stored per chunk where a product of
// several tokens has no kernel that reads the groups (kernels.h): 96 rows of 5632 weights are
// 297 KB (L2), two of bf16_panel_rows' 48-row panels.
constexpr int64_t kStoredChunkRows = 96;

// From how many tokens batched decode takes dot_tokens (16 token lanes, filled or not) rather than
// dot() per token. tests/cpu/bench_block_dots (AVX512-VNNI, Zen 4, in = 2048): dot() costs ~50 ns
// per row x token whatever the batch; dot_tokens ~290 ns per row for any batch up to 16 (~18 ns per
// row x token when full, 68-77 at 4 tokens), so it wins from about 6 tokens.
constexpr int64_t kMinLaneTokens = 6;

// std::lround(v) for |v| <= 127.5 (round half away from zero, as llama.cpp's roundf), in plain
// arithmetic the compiler vectorizes: lround and roundf are a library call per value (GCC inlines
// roundf only without -ftrapping-math), ~2% of a 16-token step on one thread while the others wait.
// v - trunc(v) is exact for |v| < 2^23.
inline int round_half_away(float v) {
  const int whole = int(v);  // toward zero
  const float fraction = v - float(whole);
  return whole + (fraction >= 0.5f) - (fraction <= -0.5f);
}

// Which activation blocks a block type multiplies with: llama.cpp's vec_dot_type.
int64_t activation_block(DType type) { return dtype_block_size(type) == 256 ? 256 : 32; }

// f32 weights, columns [begin, end), up to kSmallBatchTokens tokens (prefill takes the f32 panels
// of run_block, which replaced Eigen's GEMM there: 1.1B f32 prefill 33.3 -> 53.2 tok/s on the AMD
// Zen 3 VM): one token the rows as one stream (kernels' one_token_rows: 1.1B decode 8.1 tok/s
// against 6.9 for Eigen's GEMV, 2-core Xeon VM, 2026-12-01; the 4-row tile kernel had been slower
// than Eigen, 6.5 against 7.2); 2 to 16 tokens the tile kernel of gemm.h (~15% faster than Eigen at
// 16 tokens).
void f32_block(const LinearTarget& target, const float* x, int64_t T, int64_t in, int64_t begin, int64_t end) {
  const float* weight = static_cast<const float*>(target.weight.data);
  const int64_t out = target.out;
  if (T == 1) {
    kernels::table(kernels::best_isa()).float_rows(DType::F32, target.y, x, weight, target.bias, T, in, out, begin, end);
    return;
  }
  gemm::linear_rows(gemm::best_isa(), target.y, x, weight, target.bias, T, in, out, begin, end);
}

}  // namespace

void QuantizedInput::size_for(int64_t T, int64_t in_) {
  in = in_;
  const int64_t groups = in / kernels::kGroup;
  q.resize(size_t(T * in));
  dx.resize(size_t(T * groups));
  xs.resize(size_t(T * groups));
  gsum.resize(size_t(T * groups));
}

namespace {
// Rows of a QuantizedInput are independent: a prefill's (128 tokens x up to 5632 values) are shared
// by the threads, a decode step's few are quantized on the calling thread, a batched one's too (16
// x 5632 values): a parallel region costs more than that saves where OpenMP's threads sleep
// between regions (OMP_WAIT_POLICY=passive, journey serve's choice), since the team mate must be
// woken (docs/performance.md, "Fewer parallel regions in a batched step").
bool quantize_in_parallel(int threads, int64_t T, int64_t in) { return threads > 1 && T > 1 && T * in >= (1 << 18); }
}  // namespace

void QuantizedInput::quantize(const float* x, int64_t T, int64_t in_, int64_t block, int threads) {
  const kernels::KernelTable& k = kernels::table(kernels::best_isa());
  const auto row_kernel = block == 32 ? k.quantize_q8_0 : block == 256 ? k.quantize_q8_k : nullptr;
  if (!row_kernel) return quantize_portable(x, T, in_, block, threads);
  size_for(T, in_);
  const int64_t groups = in / kernels::kGroup;
#pragma omp parallel for num_threads(threads) schedule(static) if (quantize_in_parallel(threads, T, in))
  for (int64_t t = 0; t < T; ++t)
    row_kernel(x + t * in, in, q.data() + t * in, dx.data() + t * groups, gsum.data() + t * groups,
                    xs.data() + t * groups);
}

void QuantizedInput::quantize_portable(const float* x, int64_t T, int64_t in_, int64_t block, int threads) {
  size_for(T, in_);
  const int64_t groups = in / kernels::kGroup;
#pragma omp parallel for num_threads(threads) schedule(static) if (quantize_in_parallel(threads, T, in))
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x + t * in;
    int8_t* qr = q.data() + t * in;
    for (int64_t b0 = 0; b0 < in; b0 += block) {
      float d = 0, inverse = 0;
      if (block == 32) {  // llama.cpp quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d)
        float amax = 0;
        for (int64_t j = 0; j < block; ++j) amax = std::max(amax, std::fabs(row[b0 + j]));
        d = amax / 127.0f;
        inverse = d != 0.0f ? 1.0f / d : 0.0f;
        for (int64_t j = 0; j < block; ++j) qr[b0 + j] = int8_t(round_half_away(row[b0 + j] * inverse));
      } else {  // llama.cpp quantize_row_q8_K_ref: the value of largest magnitude maps to -127
        float amax = 0, max = 0;
        for (int64_t j = 0; j < block; ++j)
          if (std::fabs(row[b0 + j]) > amax) amax = std::fabs(row[b0 + j]), max = row[b0 + j];
        if (amax != 0.0f) {
          inverse = -127.0f / max;
          d = 1.0f / inverse;
        }
        for (int64_t j = 0; j < block; ++j)
          qr[b0 + j] = int8_t(std::min<long>(127, std::lrint(inverse * row[b0 + j])));
      }
      for (int64_t g = b0 / kernels::kGroup; g < (b0 + block) / kernels::kGroup; ++g) {
        int32_t sum = 0;
        for (int64_t k = 0; k < kernels::kGroup; ++k) sum += qr[g * kernels::kGroup + k];
        gsum[size_t(t * groups + g)] = sum;
        dx[size_t(t * groups + g)] = d;
        xs[size_t(t * groups + g)] = d * float(sum);
      }
    }
  }
}

void QuantizedInput::lay_out_token_lanes(int64_t T, int threads, bool unsigned_quads) {
  constexpr int64_t L = kernels::kLaneTokens;
  const int64_t groups = in / kernels::kGroup, chunks = (T + L - 1) / L;
  lane_tokens = T;
  lane_q.assign(size_t(chunks * groups * 4 * L * 4), 0);
  lane_dx.assign(size_t(chunks * groups * L), 0.0f);
  lane_xs.assign(size_t(chunks * groups * L), 0.0f);
  lane_gsum.assign(size_t(chunks * groups * L), 0);
  lane_u.clear();  // (none from an earlier product)
  if (unsigned_quads) lane_u.resize(lane_q.size());
  // quad k of group g of token t (4 bytes) goes to lane t % L of row (g, k) of chunk t / L: whole
  // quads, not bytes
#pragma omp parallel for num_threads(threads) schedule(static) if (quantize_in_parallel(threads, T, in))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * L, here = std::min(L, T - first);
    int8_t* chunk_q = lane_q.data() + c * groups * 4 * L * 4;
    const int64_t lanes = c * groups * L;
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t k = 0; k < 4; ++k)
        for (int64_t t = 0; t < here; ++t)
          std::memcpy(chunk_q + ((g * 4 + k) * L + t) * 4, &q[size_t((first + t) * in + g * kernels::kGroup + 4 * k)], 4);
      for (int64_t t = 0; t < here; ++t) {
        lane_dx[size_t(lanes + g * L + t)] = dx[size_t((first + t) * groups + g)];
        lane_xs[size_t(lanes + g * L + t)] = xs[size_t((first + t) * groups + g)];
        lane_gsum[size_t(lanes + g * L + t)] = gsum[size_t((first + t) * groups + g)];
      }
    }
    if (unsigned_quads) {  // the chunk's quads + 128, by the thread that laid them out
      uint8_t* chunk_u = lane_u.data() + c * groups * 4 * L * 4;
      for (int64_t i = 0; i < groups * 4 * L * 4; ++i) chunk_u[i] = uint8_t(chunk_q[i]) ^ 0x80;
    }
  }
}

PrefillPath prefill_path_of(DType type, int64_t in) {
  const bool rounded = type == DType::BF16 || dtype_is_quantized(type);  // multiplied on bf16 wherever the CPU can
  // F16 only on the tiles, split into bf16 + remainder (exact); vdpbf16ps would round it
  if ((rounded || type == DType::F16) && kernels::has_amx() && in % 32 == 0) return PrefillPath::AmxTiles;
  if (rounded && kernels::bf16_dot_pays() && in % 32 == 0 && !kernels::int8_lanes_before_bf16(type))
    return PrefillPath::Bf16Dot;
  if (dtype_is_quantized(type) && kernels::table(kernels::best_isa()).dot_tokens) return PrefillPath::Int8Lanes;
  return PrefillPath::F32;
}

namespace {
PreparedBuffers& thread_buffers() {
  thread_local PreparedBuffers buffers;
  return buffers;
}
}  // namespace

PreparedInput::~PreparedInput() {
  if (!own_) b_->in_use = false;
}

PreparedInput::PreparedInput(const float* x, int64_t T, int64_t in, std::span<const LinearTarget> targets,
                             int threads)
    : x_(x), T_(T), in_(in) {
  PreparedBuffers& mine = thread_buffers();
  if (mine.in_use) own_ = std::make_unique<PreparedBuffers>();
  b_ = own_ ? own_.get() : &mine;
  b_->in_use = true;
  bool q8_0 = false, q8_k = false;
  const kernels::KernelTable& k = kernels::table(kernels::best_isa());
  const bool batched_decode = T >= kMinLaneTokens && T <= kSmallBatchTokens;  // (on the token lanes)
  for (const LinearTarget& target : targets) {
    const DType type = target.weight.type;
    if (!dtype_is_quantized(type) && type != DType::F32 && type != DType::F16 && type != DType::BF16)
      fail("linear: weights of type ", dtype_name(type), " cannot be multiplied (expected f32, f16, bf16 or a block type)");
    const PrefillPath path = T > kSmallBatchTokens ? prefill_path_of(type, in) : PrefillPath::F32;
    token_pairs_ = token_pairs_ || path == PrefillPath::AmxTiles || path == PrefillPath::Bf16Dot;
    if (path == PrefillPath::Int8Lanes) lane_prefill_ = true;
    // the tokens' quads unsigned too for the tiles of Q8_0 with block sums (prefill and batched
    // decode) and of Q4_0 (prefill: its conversion is shared by many chunks)
    if ((path == PrefillPath::Int8Lanes || batched_decode) && type == DType::Q8_0 && target.weight.block_sums &&
        k.prefill_q8_0_sums)
      unsigned_lanes_ = true;
    if (path == PrefillPath::Int8Lanes && type == DType::Q4_0 && k.prefill_q4_0) unsigned_lanes_ = true;
    if (path == PrefillPath::F32 && T > kSmallBatchTokens && !dtype_is_quantized(type)) panels_ = true;
    if (T == 1 && type == DType::BF16 && in % k.pair_lanes == 0) x_pairs_ = true;
    if ((T <= kSmallBatchTokens || path == PrefillPath::Int8Lanes) && dtype_is_quantized(type)) {
      if (activation_block(type) == 32) q8_0 = true;
      else q8_k = true;
    }
  }
  if (q8_0) b_->q8_0.quantize(x, T, in, 32, threads);
  if (q8_k) b_->q8_k.quantize(x, T, in, 256, threads);
  // Batched decode and the integer prefill: the tokens side by side for dot_tokens (where the CPU
  // has it).
  token_lanes_ = lane_prefill_ || (batched_decode && k.dot_tokens);
  if (token_lanes_) {
    if (q8_0) b_->q8_0.lay_out_token_lanes(T, threads, unsigned_lanes_);
    if (q8_k) b_->q8_k.lay_out_token_lanes(T, threads);
  }
  // BF16 decode: x in pair order, once per product (every thread and target shares it)
  if (x_pairs_) {
    b_->x_pairs.resize(size_t(in));
    kernels::table(kernels::best_isa()).split_pairs(x, in, b_->x_pairs.data());
  }
  // f32 panels: x with the tokens in the lanes (every thread and target shares it), the blocks of
  // tokens split over the threads
  if (panels_) {
    const kernels::KernelTable& k = kernels::table(kernels::best_isa());
    const int64_t blocks = (T + k.panel_tokens - 1) / k.panel_tokens;
    b_->token_columns.resize(size_t(blocks * in * k.panel_tokens));
    float* packed = b_->token_columns.data();
#pragma omp parallel for num_threads(int(std::min<int64_t>(threads, blocks))) schedule(static) if (threads > 1)
    for (int64_t b = 0; b < blocks; ++b) k.pack_token_columns(x, T, in, packed, b, b + 1);
  }
  // AMX and AVX512-BF16: x rounded to bf16 straight into the token tiles tdpbf16ps and vdpbf16ps read
  // (every thread and target shares it), the tiles of 16 tokens split over the threads
  if (token_pairs_) {
    b_->token_pairs.resize(size_t(kernels::token_pairs_size(T, in)));
    const int64_t tiles = kernels::token_pair_tiles(T);
    uint16_t* packed = b_->token_pairs.data();
#pragma omp parallel for num_threads(int(std::min<int64_t>(threads, tiles))) schedule(static) if (threads > 1)
    for (int64_t b = 0; b < tiles; ++b) kernels::pack_token_pairs(x, T, in, packed, b, b + 1);
  }
}

void PreparedInput::run_block(const LinearTarget& target, int64_t begin, int64_t end) const {
  if (end <= begin) return;
  const DType type = target.weight.type;
  const int64_t T = T_, in = in_, out = target.out;
  const kernels::Isa isa = kernels::best_isa();
  const kernels::KernelTable& k = kernels::table(isa);
  const bool prefill = T > kSmallBatchTokens;
  const PrefillPath path = prefill ? prefill_path_of(type, in) : PrefillPath::F32;
  const size_t row_bytes = size_t(dtype_bytes_for(type, in));
  const char* weight = static_cast<const char*>(target.weight.data);
  const bool fused_groups = target.weight.row_groups && T <= kSmallBatchTokens && !token_lanes_ && k.dot_row_groups;
  const bool lane_groups = target.weight.row_groups && !prefill && token_lanes_ && k.dot_tokens_grouped &&
                           kernels::has_grouped_token_dot(type, isa);  // (Q4_K's rows: put back first)
  const bool panel_groups =
      target.weight.row_groups && prefill && (path == PrefillPath::Bf16Dot || path == PrefillPath::AmxTiles);
  // The Q4_K and Q4_0 tiles on the token lanes (prefill; Q4_K's in batched decode too, Q4_0's there
  // is lane_groups) read the stored rows or the groups as they are
  const bool stored_lanes = token_lanes_ && k.dot_tokens_stored && kernels::has_stored_token_dot(type, isa);
  const bool q4_k_tiles = stored_lanes && type == DType::Q4_K && k.prefill_q4_k;
  const bool q4_0_tiles = stored_lanes && prefill && type == DType::Q4_0 && k.prefill_q4_0 && unsigned_lanes_;
  const bool tile_groups = target.weight.row_groups && (q4_k_tiles || q4_0_tiles);
  if (target.weight.row_groups && !fused_groups && !lane_groups && !panel_groups && !tile_groups) {
    // the other token lanes of grouped rows (and a prefill of a CPU without the bf16 paths): the
    // rows back as stored, a chunk at a time, through the usual kernels
    Scratch& s = scratch();
    ensure(s.stored, size_t(kStoredChunkRows) * row_bytes);
    for (int64_t r0 = begin; r0 < end; r0 += kStoredChunkRows) {
      const int64_t n = std::min(kStoredChunkRows, end - r0);
      kernels::rows_from_groups(type, kernels::group_layout(isa), weight, in, r0, n, s.stored.data());
      const LinearTarget rows{target.y + r0, WeightView{s.stored.data(), type}, target.bias ? target.bias + r0 : nullptr,
                              out};
      run_block(rows, 0, n);
    }
    return;
  }
  if (prefill && path == PrefillPath::F32 && !dtype_is_quantized(type)) {  // f32, f16, bf16: the f32 panels
    Scratch& s = scratch();
    ensure(s.panel, k.panel_rows_scratch_bytes(T));
    k.panel_rows(type, target.y, b_->token_columns.data(), weight, row_bytes, target.bias, T, in, out, begin, end,
                 s.panel.data());
    return;
  }
  if (type == DType::F32) return f32_block(target, x_, T, in, begin, end);
  if (path == PrefillPath::AmxTiles) {
    Scratch& s = scratch();
    ensure(s.amx, kernels::amx_rows_scratch_bytes(in));
    kernels::amx_rows(type, target.y, b_->token_pairs.data(), weight, row_bytes, target.bias, T, in, out, begin, end,
                      s.amx.data(), target.weight.row_groups);  // (grouped: read from the groups)
    return;
  }
  if (path == PrefillPath::Bf16Dot) {
    Scratch& s = scratch();
    ensure(s.bf16, kernels::bf16_panel_rows_scratch_bytes(T));
    kernels::bf16_panel_rows(type, target.y, b_->token_pairs.data(), weight, row_bytes, target.bias, T, in, out, begin,
                             end, s.bf16.data(), target.weight.row_groups);  // (grouped: read from the groups)
    return;
  }
  if (type == DType::BF16 && x_pairs_)  // decode: the stored words split into f32 halves
    return k.one_token_bf16_pairs(target.y, b_->x_pairs.data(), weight, target.bias, in, begin, end);
  if (!dtype_is_quantized(type))  // f16, bf16: widened in registers
    return k.float_rows(type, target.y, x_, weight, target.bias, T, in, out, begin, end);

  Scratch& s = scratch();
  const int64_t groups = in / kernels::kGroup;
  ensure(s.q, size_t(in));
  ensure(s.s, size_t(groups));
  ensure(s.o, size_t(groups));
  const int zero = kernels::unpacked_zero(type);
  if (prefill && path == PrefillPath::F32) {  // no integer kernels: rows dequantized to f32, the f32 tile kernel
    ensure(s.rows, size_t(kFallbackRows * in));
    for (int64_t r0 = begin; r0 < end; r0 += kFallbackRows) {
      const int64_t n = std::min(kFallbackRows, end - r0);
      for (int64_t r = 0; r < n; ++r) {
        k.unpack_row(type, weight + (r0 + r) * row_bytes, in, s.q.data(), s.s.data(), s.o.data());
        k.dequantize_unpacked(s.q.data(), s.s.data(), s.o.data(), zero, in, s.rows.data() + r * in);
      }
      k.float_rows(DType::F32, target.y + r0, x_, s.rows.data(), target.bias ? target.bias + r0 : nullptr, T, in, out,
                   0, n);
    }
    return;
  }
  const QuantizedInput& qx = activation_block(type) == 32 ? b_->q8_0 : b_->q8_k;
  const bool has_offset = kernels::unpacked_has_offset(type);
  if (fused_groups) {
    // a grouped matrix, 1 to 5 tokens: the fused dot on whole groups, edge groups through
    // `edge` — each row's value is what dot_rows gives it as stored (the branches below)
    constexpr int64_t G = kernels::kGroupRows;
    const size_t group_bytes = size_t(G) * row_bytes;
    auto rows_of_token = [&](int64_t t, int64_t r, int64_t r_end) {  // y[t, r .. r_end)
      const kernels::QuantizedActivations xt{qx.q.data() + t * in, qx.dx.data() + t * groups,
                                             qx.gsum.data() + t * groups, qx.xs.data() + t * groups};
      float* y = target.y + t * out;
      while (r < r_end) {
        const int64_t g = r / G, whole = r % G == 0 ? (r_end - r) / G : 0;
        if (whole > 0) {
          k.dot_row_groups(type, weight + g * group_bytes, whole, xt, in, y + r);
          r += whole * G;
        } else {
          float edge[G];
          k.dot_row_groups(type, weight + g * group_bytes, 1, xt, in, edge);
          const int64_t n = std::min(G - r % G, r_end - r);
          std::copy(edge + r % G, edge + r % G + n, y + r);
          r += n;
        }
      }
    };
    constexpr int64_t kTileRows = 16;  // several tokens: as the stored rows' tiles below, each tile from memory once
    for (int64_t r0 = begin; r0 < end; r0 += T == 1 ? end - begin : kTileRows)
      for (int64_t t = 0; t < T; ++t) rows_of_token(t, r0, T == 1 ? end : std::min(end, r0 + kTileRows));
    if (target.bias)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = begin; r < end; ++r) target.y[t * out + r] += target.bias[r];
    return;
  }
  if (T == 1 && k.dot_rows && kernels::has_fused_dot(type, isa)) {  // decode: blocks widened in registers
    const kernels::QuantizedActivations x{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
    k.dot_rows(type, weight + begin * row_bytes, row_bytes, end - begin, x, in, target.y + begin);
    if (target.bias)
      for (int64_t r = begin; r < end; ++r) target.y[r] += target.bias[r];
    return;
  }
  if (!token_lanes_ && k.dot_rows && kernels::has_fused_dot(type, isa)) {
    // Batched decode of fewer than kMinLaneTokens tokens: every token through the fused dots, a
    // tile of rows at a time, so each tile comes from memory once and from L1/L2 for the other
    // tokens (instead of unpacking each row and the plain per-token dot: 1.1B Q4_0, 16 streams,
    // docs/performance.md "AVX2").
    constexpr int64_t kTileRows = 16;  // 16 rows of 2048 Q8_0 weights: 34 KB
    float tile[kTileRows];
    for (int64_t r0 = begin; r0 < end; r0 += kTileRows) {
      const int64_t rows = std::min(kTileRows, end - r0);
      for (int64_t t = 0; t < T; ++t) {
        const kernels::QuantizedActivations xt{qx.q.data() + t * in, qx.dx.data() + t * groups,
                                               qx.gsum.data() + t * groups, qx.xs.data() + t * groups};
        k.dot_rows(type, weight + r0 * row_bytes, row_bytes, rows, xt, in, tile);
        for (int64_t r = 0; r < rows; ++r)
          target.y[t * out + r0 + r] = (target.bias ? target.bias[r0 + r] : 0.0f) + tile[r];
      }
    }
    return;
  }
  if (lane_groups) {  // batched decode of a grouped matrix: as the stored rows below, from the groups
    constexpr int64_t G = kernels::kGroupRows, L = kernels::kLaneTokens;
    float tile_out[kernels::kStoredTokenRows * L];  // [rows, kLaneTokens]
    const kernels::TokenLaneActivations lanes = qx.token_lanes(0);
    for (int64_t r0 = begin; r0 < end;) {
      // up to 4 rows, not past the group's end
      const int rows = int(std::min({int64_t(kernels::kStoredTokenRows), G - r0 % G, end - r0}));
      k.dot_tokens_grouped(type, weight + r0 / G * G * row_bytes, row_bytes, int(r0 % G), rows, lanes, in, tile_out);
      for (int r = 0; r < rows; ++r) {
        const float bias = target.bias ? target.bias[r0 + r] : 0.0f;
        for (int64_t t = 0; t < lanes.tokens; ++t) target.y[t * out + r0 + r] = bias + tile_out[r * L + t];
      }
      r0 += rows;
    }
    return;
  }
  if (token_lanes_) {  // batched decode and integer prefill: up to 16 tokens in the lanes of a register
    // Q8_0, Q4_0 and Q4_K straight from the stored rows where the CPU has that kernel (prefill too:
    // AVX2's Q8_0 kernel from the stored rows took 50 ns per row x token in cache against 56 for the
    // unpacked rows' lanes, bench_block_dots on the Zen 3 VM); the other
    // types unpack a tile of rows first (prefill multiplies each tile with every chunk of 16 tokens)
    const bool stored = stored_lanes;  // (as computed above: token_lanes_ holds here)
    // Q8_0 with its block sums: the same bits, a third fewer instructions (kernels.h)
    const bool with_sums = stored && type == DType::Q8_0 && target.weight.block_sums && k.dot_tokens_q8_0_sums;
    const int64_t sums_per_row = in / dtype_block_size(DType::Q8_0);  // (block_sums: [out, in / 32])
    const int R = stored ? kernels::kStoredTokenRows : kernels::kTokenRows;
    if (!stored) {
      ensure(s.q, size_t(R * in));
      ensure(s.s, size_t(R * groups));
      ensure(s.o, size_t(R * groups));
    }
    constexpr int kMaxRows = std::max(kernels::kStoredTokenRows, kernels::kTokenRows);
    constexpr int64_t L = kernels::kLaneTokens;
    const bool q8_0_tiles = with_sums && k.prefill_q8_0_sums && qx.lane_u.size();
    const bool unpacked_tiles = prefill && !stored && k.prefill_unpacked;  // the other block types
    if (q8_0_tiles || q4_k_tiles || q4_0_tiles || unpacked_tiles) {
      // prefill (and a batched decode step of Q8_0 with block sums or Q4_K: one chunk, tiles of
      // 8 rows): kPrefillRows rows at a time against the chunks of 16 tokens that fit L2
      // (prefill_chunks_per_call), in tiles of 4 rows x 2 chunks; once per call the rows' scales
      // decoded (Q8_0, Q4_K), the rows made Q8_0 (Q4_0) or unpacked (the other block types); each
      // call writes its rows into y
      constexpr int RT = kernels::kPrefillRows;
      const int64_t chunks = qx.lane_chunks(), per_call = kernels::prefill_chunks_per_call(in);
      ensure(s.prefill_scratch, size_t(kernels::prefill_scratch_floats(in, std::min(chunks, per_call))));
      if (unpacked_tiles) {  // the call's rows unpacked once for all its chunks
        ensure(s.q, size_t(RT * in));
        ensure(s.s, size_t(RT * groups));
        ensure(s.o, size_t(RT * groups));
      }
      std::vector<kernels::TokenLaneActivations>& lanes = s.lanes;
      lanes.resize(size_t(chunks));
      for (int64_t c = 0; c < chunks; ++c) lanes[size_t(c)] = qx.token_lanes(c);
      for (int64_t c0 = 0; c0 < chunks; c0 += per_call) {
        const int call_chunks = int(std::min(per_call, chunks - c0));
        for (int64_t r0 = begin; r0 < end; r0 += RT) {
          const int rows = int(std::min<int64_t>(RT, end - r0));
          const kernels::PrefillOutput y{target.y + c0 * L * out + r0, out, target.bias ? target.bias + r0 : nullptr};
          if (q8_0_tiles)
            k.prefill_q8_0_sums(weight + r0 * row_bytes, row_bytes, target.weight.block_sums + r0 * sums_per_row,
                                size_t(sums_per_row), rows, lanes.data() + c0, call_chunks, in, y, s.prefill_scratch.data());
          else if (unpacked_tiles) {
            for (int r = 0; r < rows; ++r)
              k.unpack_row(type, weight + (r0 + r) * row_bytes, in, s.q.data() + r * in, s.s.data() + r * groups,
                           s.o.data() + r * groups);
            k.prefill_unpacked(type, s.q.data(), s.s.data(), s.o.data(), rows, lanes.data() + c0, call_chunks, in, y,
                               s.prefill_scratch.data());
          } else {  // Q4_0 or Q4_K
            // grouped: from the group that holds row r0, its row r0 % 8; as stored: from row r0
            const char* from = tile_groups ? weight + r0 / kernels::kGroupRows * kernels::kGroupRows * row_bytes
                                           : weight + r0 * row_bytes;
            const int group_first = tile_groups ? int(r0 % kernels::kGroupRows) : -1;
            (q4_0_tiles ? k.prefill_q4_0 : k.prefill_q4_k)(from, row_bytes, group_first, rows, lanes.data() + c0,
                                                           call_chunks, in, y, s.prefill_scratch.data());
          }
        }
      }
      return;
    }
    float tile_out[kMaxRows * L];  // [rows, kLaneTokens]
    for (int64_t r0 = begin; r0 < end; r0 += R) {
      const int rows = int(std::min<int64_t>(R, end - r0));
      if (!stored)
        for (int r = 0; r < rows; ++r)
          k.unpack_row(type, weight + (r0 + r) * row_bytes, in, s.q.data() + r * in, s.s.data() + r * groups,
                       s.o.data() + r * groups);
      // The next tile's stored rows are fetched while this one is multiplied: unpack_row would
      // otherwise wait for memory with the multiplier idle, and dot_tokens compute with the memory
      // idle (measured: the two took equal time in a 16-token step before).
      if (!stored && r0 + R < end) {  // (dot_tokens_stored fetches the next rows itself)
        const char* next = weight + (r0 + R) * row_bytes;
        const size_t next_bytes = size_t(std::min<int64_t>(R, end - r0 - R)) * row_bytes;
        for (size_t b = 0; b < next_bytes; b += 64) __builtin_prefetch(next + b, 0, 3);
      }
      for (int64_t c = 0; c < qx.lane_chunks(); ++c) {
        const kernels::TokenLaneActivations lanes = qx.token_lanes(c);
        if (with_sums)
          k.dot_tokens_q8_0_sums(weight + r0 * row_bytes, row_bytes, target.weight.block_sums + r0 * sums_per_row,
                                 size_t(sums_per_row), rows, lanes, in, tile_out);
        else if (stored)
          k.dot_tokens_stored(type, weight + r0 * row_bytes, row_bytes, rows, lanes, in, tile_out);
        else
          k.dot_tokens(type, s.q.data(), s.s.data(), s.o.data(), rows, lanes, in, tile_out);
        for (int r = 0; r < rows; ++r) {
          const float bias = target.bias ? target.bias[r0 + r] : 0.0f;
          for (int64_t t = 0; t < lanes.tokens; ++t) target.y[(c * L + t) * out + r0 + r] = bias + tile_out[r * L + t];
        }
      }
    }
    return;
  }
  for (int64_t r = begin; r < end; ++r) {
    k.unpack_row(type, weight + r * row_bytes, in, s.q.data(), s.s.data(), s.o.data());
    const float bias = target.bias ? target.bias[r] : 0.0f;
    for (int64_t t = 0; t < T; ++t) {
      const kernels::QuantizedActivations xt{qx.q.data() + t * in, qx.dx.data() + t * groups,
                                             qx.gsum.data() + t * groups, qx.xs.data() + t * groups};
      target.y[t * out + r] = bias + k.dot(s.q.data(), s.s.data(), s.o.data(), zero, has_offset, xt, in);
    }
  }
}

}  // namespace journey::cpu
