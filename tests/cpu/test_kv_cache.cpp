// The KV cache in lower precision (--kv-cache-dtype f16|bf16|q8_0, the fast CPU backend only):
//   - the ops: writing rounds (f16/bf16 to nearest even) or quantizes (q8_0, llama.cpp's blocks of
//     32) each K/V row, and paged attention over such a pool equals the reference's attention over
//     an f32 pool holding the same rounded values;
//   - the whole forward: logits with f16/bf16/q8_0 KV against f32 KV within a stated tolerance,
//     the pool's bytes per block halved (f16/bf16) or at 34/128 (q8_0), copy_kv_block, and a q8_0
//     pool refused for a head_dim its blocks do not divide.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "reference/ops.h"
#include "reference/random_model.h"
#include "reference/scalar_ops.h"

using namespace journey;

namespace {

const DType kReducedKv[] = {DType::F16, DType::BF16, DType::Q8_0};

// A llama-shaped model whose head_dim (32) q8_0 blocks divide.
ModelConfig kv_config() {
  ModelConfig c = testmodel::tiny_config("llama");
  c.hidden_size = 64, c.num_heads = 2, c.num_kv_heads = 1, c.head_dim = 32;
  return c;
}

std::vector<float> run(Backend& backend, const std::vector<int32_t>& prompt, int decode_steps) {
  const std::vector<int32_t> table = {3, 0, 2, 1};  // scattered blocks of 4
  backend.allocate_kv_cache(4, 4);
  std::vector<float> logits;
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table, true});
  ForwardOutput out = backend.forward(batch);
  logits = out.logits;
  for (int s = 0; s < decode_steps; ++s) {
    const int64_t position = int64_t(prompt.size()) + s;
    batch.sequences[0] = {0, {int32_t((s * 13 + 5) % 97)}, position, table, false};
    out = backend.forward(batch);
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  return logits;
}

// A pool of P positions (blocks of block_size in a shuffled table) holding K and V rows of KVH
// heads of D smooth values, stored as `type`, and T queries of H heads: what the attention tests
// below read.
struct FilledPool {
  std::vector<int32_t> table;          // [blocks]
  std::vector<float> k, v, q;          // [P, KVH, D] x2 as written, [T, H, D]
  std::vector<std::byte> k_pool, v_pool;  // [blocks, block_size, KVH, D] as `type`
};
FilledPool filled_pool(DType type, int64_t P, int64_t T, int64_t H, int64_t KVH, int64_t D, int64_t block_size) {
  const int64_t blocks = (P + block_size - 1) / block_size, slot = KVH * D;
  FilledPool f;
  f.table.resize(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) f.table[size_t(b)] = int32_t((b * 7) % blocks);  // a permutation: 7 is coprime to 10
  f.k.resize(size_t(P * slot)), f.v.resize(f.k.size()), f.q.resize(size_t(T * H * D));
  for (size_t i = 0; i < f.k.size(); ++i) f.k[i] = float(std::sin(double(i) * 0.013)), f.v[i] = float(std::cos(double(i) * 0.029));
  for (size_t i = 0; i < f.q.size(); ++i) f.q[i] = float(std::sin(double(i) * 0.7));
  f.k_pool.resize(size_t(dtype_bytes_for(type, blocks * block_size * slot))), f.v_pool.resize(f.k_pool.size());
  cpu::kv_cache_write({f.k_pool.data(), type}, {f.v_pool.data(), type}, f.k.data(), f.v.data(), f.table.data(), P, 0,
                      block_size, KVH, D);
  return f;
}

// fn(H, D, type, pool) for each query head count in `heads`, D 64 and 68 (a tail after the vector
// lanes) and every pool type (q8_0 only where its blocks divide D).
template <typename Fn>
void for_each_pool(std::initializer_list<int64_t> heads, int64_t P, int64_t T, int64_t KVH, int64_t block_size, Fn fn) {
  for (const int64_t H : heads)
    for (const int64_t D : {int64_t(64), int64_t(68)})
      for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
        if (type == DType::Q8_0 && D % 32 != 0) continue;
        CAPTURE(H);
        CAPTURE(D);
        CAPTURE(dtype_name(type));
        FilledPool pool = filled_pool(type, P, T, H, KVH, D, block_size);
        fn(H, D, type, pool);
      }
}

}  // namespace

TEST_CASE("kv cache: a reduced-precision pool holds the rounded rows, and attention over it is the reference's") {
  const int64_t KVH = 2, D = 64, H = 4, block_size = 4, T = 7, start = 0, slot = KVH * D;
  const std::vector<int32_t> table = {1, 0};  // [2 blocks]
  auto k = scalar::random_vector(size_t(T * slot), 1), v = scalar::random_vector(size_t(T * slot), 2);
  auto q = scalar::random_vector(size_t(T * H * D), 3);
  for (DType type : kReducedKv) {
    CAPTURE(dtype_name(type));
    std::vector<std::byte> k_pool(size_t(dtype_bytes_for(type, 2 * block_size * slot)));
    std::vector<std::byte> v_pool(k_pool.size());
    cpu::kv_cache_write({k_pool.data(), type}, {v_pool.data(), type}, k.data(), v.data(), table.data(), T, start,
                        block_size, KVH, D);
    // the reference's f32 pools with the same rows, each rounded as the pool's type stores it
    std::vector<float> k_ref(size_t(2 * block_size * slot)), v_ref(k_ref.size());
    auto rounded = [&](const float* row) {
      std::vector<std::byte> stored(size_t(dtype_bytes_for(type, slot)));
      quant::quantize(type, row, stored.data(), slot);
      std::vector<float> back(static_cast<size_t>(slot));
      quant::dequantize(type, stored.data(), back.data(), slot);
      return back;
    };
    std::vector<float> k_rounded, v_rounded;  // [T, slot]
    for (int64_t t = 0; t < T; ++t) {
      auto kr = rounded(k.data() + t * slot), vr = rounded(v.data() + t * slot);
      k_rounded.insert(k_rounded.end(), kr.begin(), kr.end());
      v_rounded.insert(v_rounded.end(), vr.begin(), vr.end());
    }
    reference::kv_cache_write(k_ref.data(), v_ref.data(), k_rounded.data(), v_rounded.data(), table.data(), T, start,
                              block_size, KVH, D);
    std::vector<float> want(size_t(T * H * D)), got(want.size());
    reference::paged_attention(want.data(), q.data(), k_ref.data(), v_ref.data(), table.data(), T, start, block_size, H,
                               KVH, D, nullptr, nullptr);
    cpu::paged_attention(got.data(), q.data(), {k_pool.data(), type}, {v_pool.data(), type}, table.data(), T, start,
                         block_size, H, KVH, D, nullptr, nullptr, 2);
    CHECK(scalar::nmse(got, want) < 1e-10);  // only the summation order differs
    // and the rounding is real: against the unrounded rows the result differs
    reference::kv_cache_write(k_ref.data(), v_ref.data(), k.data(), v.data(), table.data(), T, start, block_size, KVH, D);
    reference::paged_attention(want.data(), q.data(), k_ref.data(), v_ref.data(), table.data(), T, start, block_size, H,
                               KVH, D, nullptr, nullptr);
    CHECK(scalar::nmse(got, want) > 1e-12);
  }
}

TEST_CASE("kv cache: f16, bf16 and q8_0 pools against f32 over a whole forward pass, within tolerance") {
  const ModelConfig config = kv_config();
  const auto model = testmodel::make_model(config, testmodel::random_values(config, 3));
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 88, 23, 61, 9};
  auto f32 = make_cpu_backend(model, {.threads = 2});
  const auto want = run(*f32, prompt, 5);
  // Rounding K and V: relative error per value up to 2^-11 (f16, 11-bit mantissa), 2^-8 (bf16), and
  // max|block of 32| / 254 (q8_0), i.e. NMSE of the values ~1e-7, ~5e-6 and ~3e-5; this model's
  // N(0, 0.2) weights make attention sharp, which amplifies them (measured logits NMSE: f16 4.2e-7,
  // bf16 2.2e-5, q8_0 2.9e-4). The bounds are ~4x the measured.
  const std::map<DType, double> tolerance = {{DType::F16, 2e-6}, {DType::BF16, 1e-4}, {DType::Q8_0, 1e-3}};
  for (DType type : kReducedKv) {
    CAPTURE(dtype_name(type));
    auto reduced = make_cpu_backend(model, {.threads = 2, .kv_dtype = type});
    const auto got = run(*reduced, prompt, 5);
    const double e = scalar::nmse(got, want);
    CHECK(e < tolerance.at(type));
    CHECK(e > 0.0);  // the pool really is rounded
    MESSAGE(dtype_name(type) << " KV: logits NMSE against f32 KV " << e);
    // the memory it saves
    const double ratio = double(reduced->kv_block_bytes(16)) / double(f32->kv_block_bytes(16));
    CHECK(ratio == doctest::Approx(type == DType::Q8_0 ? 34.0 / 128.0 : 0.5));
  }
}

TEST_CASE("kv cache: copy_kv_block copies a q8_0 block bit for bit; q8_0 needs whole blocks per head") {
  const ModelConfig config = kv_config();
  const auto model = testmodel::make_model(config, testmodel::random_values(config, 4));
  auto backend = make_cpu_backend(model, {.threads = 1, .kv_dtype = DType::Q8_0});
  backend->allocate_kv_cache(4, 4);
  ForwardBatch batch;
  batch.sequences.push_back({0, {1, 2, 3, 4}, 0, {0}, false});
  backend->forward(batch);
  backend->copy_kv_block(0, 2);  // the prompt's block, copied: decoding from either gives the same logits
  batch.sequences[0] = {0, {7}, 4, {0, 1}, false};
  const auto a = backend->forward(batch).logits;
  batch.sequences[0] = {0, {7}, 4, {2, 3}, false};
  const auto b = backend->forward(batch).logits;
  CHECK(a == b);

  const auto small = testmodel::random_model("llama");  // head_dim 8
  CHECK_THROWS_WITH_AS(make_cpu_backend(small, {.threads = 1, .kv_dtype = DType::Q8_0}),
                       doctest::Contains("head_dim to be a multiple of 32"), Error);
  CHECK_THROWS_WITH_AS(make_cpu_backend(small, {.threads = 1, .kv_dtype = DType::Q4_0}),
                       doctest::Contains("KV cache type q4_0 is not supported"), Error);
}

TEST_CASE("kv cache: the query heads of a kv head taken together give the bits of one head at a time") {
  // paged_attention takes the H / KVH query heads of a kv head together where there are at least as
  // many (kv head, query) pairs as threads, and otherwise the largest part of the group that gives
  // every thread an item, down to one head at a time (ops.cpp, attention_core): the same operations
  // in the same order, so the same bits.
  // 150 positions: two whole chunks of 64 and a partial one; D = 68 leaves a tail after the lanes.
  // A shuffled block table, and every pool type. Groups of 4 heads (the scores with the heads in
  // the vector lanes, kernels::kHeadLanesFrom) and of 2 (one head at a time, a row in the lanes).
  static_assert(cpu::kernels::kHeadLanesFrom == 4, "the groups below sit on either side of it");
  const int64_t KVH = 2, block_size = 16, start = 149, T = 1, P = start + T;
  for_each_pool({8, 4}, P, T, KVH, block_size, [&](int64_t H, int64_t D, DType type, FilledPool& pool) {
    const int64_t blocks = (P + block_size - 1) / block_size, slot = KVH * D;
    const std::vector<int32_t>& table = pool.table;
    const std::vector<float>& k = pool.k;
    const std::vector<float>& v = pool.v;
    const std::vector<float>& q = pool.q;
    std::vector<std::byte>& k_pool = pool.k_pool;
    std::vector<std::byte>& v_pool = pool.v_pool;
    std::vector<float> grouped(size_t(T * H * D)), by_head(grouped.size()), weights_grouped(size_t(H * T * P)),
        weights_by_head(weights_grouped.size());
    // 1 thread: KVH x T = 2 pairs >= 1, the groups whole; 3 threads: 2 < 3, halves of them (4 or 2
    // items); 8 threads: one head at a time
    cpu::paged_attention(grouped.data(), q.data(), {k_pool.data(), type}, {v_pool.data(), type}, table.data(), T,
                         start, block_size, H, KVH, D, nullptr, weights_grouped.data(), 1);
    for (const int threads : {3, 8}) {
      CAPTURE(threads);
      cpu::paged_attention(by_head.data(), q.data(), {k_pool.data(), type}, {v_pool.data(), type}, table.data(), T,
                           start, block_size, H, KVH, D, nullptr, weights_by_head.data(), threads);
      CHECK(std::memcmp(grouped.data(), by_head.data(), grouped.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(weights_grouped.data(), weights_by_head.data(), weights_grouped.size() * sizeof(float)) == 0);
    }
    // and both are attention: against the reference on the rows as the pool holds them
    std::vector<float> k_back(k.size()), v_back(v.size());
    for (int64_t p = 0; p < P; ++p) {
      auto back = [&](const float* row, float* out) {
        std::vector<std::byte> stored(size_t(dtype_bytes_for(type, slot)));
        if (type == DType::F32) return (void)std::memcpy(out, row, sizeof(float) * size_t(slot));
        quant::quantize(type, row, stored.data(), slot);
        quant::dequantize(type, stored.data(), out, slot);
      };
      back(k.data() + p * slot, k_back.data() + p * slot);
      back(v.data() + p * slot, v_back.data() + p * slot);
    }
    std::vector<float> k_ref(size_t(blocks * block_size * slot)), v_ref(k_ref.size()), want(grouped.size());
    reference::kv_cache_write(k_ref.data(), v_ref.data(), k_back.data(), v_back.data(), table.data(), P, 0, block_size,
                              KVH, D);
    reference::paged_attention(want.data(), q.data(), k_ref.data(), v_ref.data(), table.data(), T, start, block_size,
                               H, KVH, D, nullptr, nullptr);
    CHECK(scalar::nmse(grouped, want) < 1e-10);
  });
}

TEST_CASE("kv cache: a prefill's queries taken in tiles give the bits of each query alone") {
  // A prefill takes its queries kQueryTile at a time where the heads are in the vector lanes
  // (ops.cpp, attention_core): the scores kernel gets every (query, head) row of the tile at once,
  // blocks of 8 lanes sharing each K value, and a query's scores past its own last position are
  // computed and masked. Each score and each context value is still the same chain of FMAs, so a
  // query gives the bits it gives alone (a decode step at its position), on any number of threads
  // (fewer queries per tile where a thread would have nothing). 11 queries after 139 positions:
  // two whole tiles and one of 3; groups of 4 and 8 heads; D = 68 leaves a tail after the lanes.
  const int64_t KVH = 2, block_size = 16, start = 139, T = 11, P = start + T;
  for_each_pool({8, 16}, P, T, KVH, block_size, [&](int64_t H, int64_t D, DType type, FilledPool& pool) {
    const std::vector<int32_t>& table = pool.table;
    const std::vector<float>& q = pool.q;
    std::vector<std::byte>& k_pool = pool.k_pool;
    std::vector<std::byte>& v_pool = pool.v_pool;
    // each query alone: a decode step at its position
    std::vector<float> alone(size_t(T * H * D));
    std::vector<std::vector<float>> alone_weights(static_cast<size_t>(T));  // [T][H, start + t + 1]
    for (int64_t t = 0; t < T; ++t) {
      alone_weights[size_t(t)].resize(size_t(H * (start + t + 1)));
      cpu::paged_attention(alone.data() + t * H * D, q.data() + t * H * D, {k_pool.data(), type},
                           {v_pool.data(), type}, table.data(), 1, start + t, block_size, H, KVH, D, nullptr,
                           alone_weights[size_t(t)].data(), 1);
    }
    for (const int threads : {1, 2, 3, 8}) {
      CAPTURE(threads);
      std::vector<float> tiled(alone.size()), weights(size_t(H * T * P));  // [T, H * D], [H, T, P]
      cpu::paged_attention(tiled.data(), q.data(), {k_pool.data(), type}, {v_pool.data(), type}, table.data(), T,
                           start, block_size, H, KVH, D, nullptr, weights.data(), threads);
      CHECK(std::memcmp(tiled.data(), alone.data(), tiled.size() * sizeof(float)) == 0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t attended = start + t + 1;
          CHECK(std::memcmp(weights.data() + (h * T + t) * P, alone_weights[size_t(t)].data() + h * attended,
                            size_t(attended) * sizeof(float)) == 0);
        }
    }
  });
}
