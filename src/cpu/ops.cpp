// The fast ops: Eigen for the arithmetic, the kernels of kernels.h for the products on stored
// weight types (typed_linear.h), OpenMP (when CMake found it) to split work across threads. Each
// function is the formula from ops.h; speed comes from not doing anything twice (weights are read
// once per linear(), attention reads each K/V row once per query) and from the kernels.
#include "cpu/ops.h"

#include "core/error.h"
#include "cpu/huge_pages.h"
#include "cpu/kernels.h"
#include "cpu/typed_linear.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace journey::cpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;

// Attention for one sequence, with K/V rows at key_row(p, kv_head) / value_row(p, kv_head) (D
// values of type k_type / v_type where they lie in the cache: f32, f16, bf16 or q8_0, widened by the
// kernels as they read them): the one loop both attention() and paged_attention() run, so they
// cannot drift apart.
//
// Every row is looked up once per call, not once per (query head, query) — a 128-token prefill of
// the 1.1B shape looked each row up ~1000 times (attention 26.6 -> 19.4 ms of a 184 ms prefill) —
// into tables of row addresses [kv heads, P] shared by the H / KVH query heads of a kv head and by
// every query.
//
// The query heads that share a kv head (H / KVH of them: 8 in TinyLlama-1.1B) are taken together.
// Where there are kernels::kHeadLanesFrom or more, the scores kernel reads each K row once for all
// of them (attention_scores_heads: the heads in its vector lanes); otherwise it takes one head at a
// time, kAttentionChunk positions at a time, so that the chunk's K rows come from L1 for the other
// heads. The mix goes kAttentionChunk positions at a time: each chunk's V rows are read from
// memory once and from L1 for the group's other heads, where one head at a time read the kv head's
// whole K and V again for each of them (a 1.1B decode step at 1,024 positions: ~1 MB per head from
// L2). Every score and every context value is computed by the same operations in the same order
// however many heads are taken — the scores kernel is chosen by the model's heads per kv head and
// its sums are per head, the chunks start on multiples of the kernels' lane count and the mix's
// sums go on from one chunk to the next (KernelTable::attention_mix's `accumulate`) — so the
// results are the same bits either way; with fewer (kv head, query) pairs than threads a group is
// split into the largest parts that give every thread an item (a decode step of a model with few
// kv heads on many threads), the same loop. A prefill takes its queries kQueryTile at a time the
// same way (their heads are rows of the same scores call; a query's sums are its own): the same
// bits as each query alone.
constexpr int64_t kAttentionChunk = 64;  // positions: a multiple of every kernel's lane count
constexpr int64_t kQueryTile = 4;        // a prefill's queries taken together (4 x 8 heads: 4 blocks of lanes)

template <typename KeyRow, typename ValueRow>
void attention_core(float* context, const float* q, KeyRow key_row, DType k_type, ValueRow value_row, DType v_type,
                    int64_t T, int64_t start, int64_t H, int64_t KVH, int64_t D, float* scores_out,
                    float* weights_out, int threads) {
  const int64_t P = start + T;
  const int64_t group = H / KVH;  // query heads per kv head
  const float scale = 1.0f / std::sqrt(float(D));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const kernels::KernelTable& k = kernels::table(kernels::best_isa());  // the dot products at the CPU's width
  std::vector<const void*> key_rows(size_t(KVH * P)), value_rows(size_t(KVH * P));  // [KVH, P]
  // scores -> weights of query t and head h (its own positions [0, start + t]; the rest masked)
  // (the masked positions are written only for the trace's copies: the mix reads [0, last]; a
  // prefill's rows are half masked on average)
  auto finish_row = [&](float* row, int64_t h, int64_t t) {
    const int64_t last = start + t;  // causal: attend positions [0, last]
    if (scores_out) {
      for (int64_t p = last + 1; p < P; ++p) row[p] = neg_inf;
      std::memcpy(scores_out + (h * T + t) * P, row, sizeof(float) * P);
    }
    // weights = softmax(scores) over the positions attended; the masked ones are exactly 0
    k.softmax_row(row, last + 1);
    if (weights_out) {
      for (int64_t p = last + 1; p < P; ++p) row[p] = 0.0f;
      std::memcpy(weights_out + (h * T + t) * P, row, sizeof(float) * P);
    }
  };
  // The scores kernel, by the model's heads per kv head (not by `together`, which depends on the
  // threads): the two sum in different orders.
  const bool heads_in_lanes = group >= kernels::kHeadLanesFrom;
  // A prefill's queries go kQueryTile at a time where the heads are in the lanes: the scores kernel
  // then reads each K row once for the tile's (query, head) rows and broadcasts each value once for
  // up to 4 blocks of 8 lanes (one broadcast per FMA with one query), and the mix finds a chunk's V
  // rows in L1 for the tile's other queries (the 1.1B shape's attention over 512 new positions, two
  // threads: 9.0-10.6 -> 7.7-9.9 ms a layer; bench_paged_attention). Fewer queries a tile where
  // that would leave a thread without work.
  int64_t tile = heads_in_lanes ? std::min(kQueryTile, T) : 1;
  while (tile > 1 && KVH * ((T + tile - 1) / tile) < threads) --tile;
  const int64_t tiles = (T + tile - 1) / tile;
  // The heads taken together: a kv head's whole group, or the largest part of it (a divisor) that
  // still gives every thread an item where there are fewer (kv head, tile) pairs than threads.
  // Item i covers heads [i * together, (i + 1) * together).
  int64_t together = group;
  while (together > 1 && H / together * tiles < threads) {
    --together;
    while (group % together != 0) --together;
  }
  const int64_t items = H / together;
  const int64_t k_row_bytes = dtype_bytes_for(k_type, D), v_row_bytes = dtype_bytes_for(v_type, D);
#pragma omp parallel num_threads(threads)
  {
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < KVH; ++n)
      for (int64_t p = 0; p < P; ++p) {
        key_rows[size_t(n * P + p)] = key_row(p, n);
        value_rows[size_t(n * P + p)] = value_row(p, n);
      }
    // (the implicit barrier: every row's address is in place before any query reads it)
    HugePageFloats rows(static_cast<size_t>(tile * together * P));  // [tile, together, P] scores, then weights
    HugePageFloats tile_q(static_cast<size_t>(tile * together * D));  // [tile, together, D] the tile's q rows
#pragma omp for collapse(2) schedule(static)
    for (int64_t i = 0; i < items; ++i) {
      for (int64_t tile_index = 0; tile_index < tiles; ++tile_index) {
        const int64_t h0 = i * together, n = h0 / group;  // the first head, and its kv head's rows in the tables
        const int64_t t0 = tile_index * tile, queries = std::min(tile, T - t0);
        const int64_t count = start + t0 + queries;  // positions the tile's last query attends
        const void* const* keys = key_rows.data() + n * P;
        const void* const* values = value_rows.data() + n * P;
        // scores = q.k / sqrt(D): every head of every query of the tile at once (each K row read
        // once for all of them), or a chunk of positions for every head taken; a query's scores past
        // its own last position are computed and then masked (finish_row)
        if (heads_in_lanes) {
          for (int64_t j = 0; j < queries; ++j)
            std::memcpy(tile_q.data() + j * together * D, q + ((t0 + j) * H + h0) * D, sizeof(float) * together * D);
          k.attention_scores_heads(k_type, tile_q.data(), D, int(queries * together), keys, count, D, scale,
                                   rows.data(), P, T == 1 && v_type == k_type ? values : nullptr);  // (a decode step's rows: in memory)
        } else {
          for (int64_t c0 = 0; c0 < count; c0 += kAttentionChunk) {
            // A decode step's rows are in memory: the next chunk's, K and V, asked for into L2 (as
            // attention_scores_heads does; H 9, KVH 3, 1,056 positions, 44 layers' pools in turn,
            // two threads: 131-133 -> 108-111 us a layer; with the rows in cache, one thread, 59 -> 65)
            if (T == 1)
              for (int64_t p = c0 + kAttentionChunk; p < std::min(count, c0 + 2 * kAttentionChunk); ++p) {
                kernels::fetch_into_l2(keys[p], k_row_bytes);
                kernels::fetch_into_l2(values[p], v_row_bytes);
              }
            for (int64_t j = 0; j < queries; ++j)
              for (int64_t g = 0; g < together; ++g)
                k.attention_scores(k_type, q + ((t0 + j) * H + h0 + g) * D, keys + c0,
                                   std::min(kAttentionChunk, count - c0), D, scale,
                                   rows.data() + (j * together + g) * P + c0);
          }
        }
        for (int64_t j = 0; j < queries; ++j)
          for (int64_t g = 0; g < together; ++g) finish_row(rows.data() + (j * together + g) * P, h0 + g, t0 + j);
        // context = sum_p weights[p] * v[p], the chunks' sums added on in order; each chunk's V
        // rows for every query of the tile in turn
        for (int64_t c0 = 0; c0 < count; c0 += kAttentionChunk)
          for (int64_t j = 0; j < queries; ++j) {
            const int64_t attended = start + t0 + j + 1;
            if (c0 >= attended) continue;
            k.attention_mix(v_type, rows.data() + j * together * P + c0, P, values + c0,
                            std::min(kAttentionChunk, attended - c0), D, context + ((t0 + j) * H + h0) * D, D,
                            int(together), /*accumulate=*/c0 > 0);
          }
      }
    }
  }
}

}  // namespace

void embedding_gather(float* out, WeightView table, const int32_t* tokens, int64_t T, int64_t E) {
  const size_t row_bytes = size_t(dtype_bytes_for(table.type, E));
  const auto* bytes = static_cast<const std::byte*>(table.data);
  for (int64_t t = 0; t < T; ++t) {
    const std::byte* row = bytes + int64_t(tokens[t]) * int64_t(row_bytes);
    if (table.type == DType::F32) std::memcpy(out + t * E, row, row_bytes);
    else quant::dequantize(table.type, row, out + t * E, E);
  }
}

void rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps) {
  ConstVectorMap w(weight, N);
  for (int64_t r = 0; r < R; ++r) {
    ConstVectorMap in(x + r * N, N);
    const float inv_rms = 1.0f / std::sqrt(in.squaredNorm() / float(N) + eps);
    VectorMap(out + r * N, N) = (in * inv_rms).cwiseProduct(w);
  }
}

void rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta, RopeLayout layout) {
  const int64_t half = D / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));  // [D/2] theta^(-2i/D), in f32 like HF's inv_freq
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0f / std::pow(float(theta), float(2 * i) / float(D));
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));  // [D/2] for one position
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(positions[t]) * inv_freq[i];
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* head = x + (t * heads + h) * D;  // [D]
      for (int64_t i = 0; i < half; ++i) {
        // the two members of pair i
        const int64_t a = layout == RopeLayout::HalfSplit ? i : 2 * i;
        const int64_t b = layout == RopeLayout::HalfSplit ? i + half : 2 * i + 1;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * cos_t[i] - x1 * sin_t[i];
        head[b] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

namespace {

// How a product's output rows are cut: `count` contiguous blocks (at most one per thread), each
// a multiple of 16 rows wide so that block edges stay aligned to SIMD width.
struct RowSplit {
  int64_t count, rows;
};
RowSplit split_rows(int64_t out, int threads) {
  const int64_t count = std::max<int64_t>(1, std::min<int64_t>(threads, out / 16));
  return {count, ((out + count - 1) / count + 15) / 16 * 16};
}

// Decode (one token) on every stored type but f32: each output row is one dot product computed by
// one call whatever rows it is called with, so which thread computes a row cannot change its bits.
// (f32 goes through Eigen's GEMV, whose grouping of rows is its own.)
// Batched decode (2 .. kSmallBatchTokens tokens) on the block types: each row x token is computed
// by one call of the token-lane kernels (dot_tokens_stored, dot_tokens, dot_tokens_grouped) or of
// the fused dot per token, whose value for a row does not depend on the other rows of the call.
bool rows_are_independent(int64_t T, std::span<const LinearTarget> targets) {
  if (T < 1 || T > kSmallBatchTokens) return false;
  for (const LinearTarget& target : targets)
    if (T == 1 ? target.weight.type == DType::F32 : !dtype_is_quantized(target.weight.type)) return false;
  return true;
}

// JOURNEY_DECODE_STEAL: on (unset), off, or alternate (ops.h, DecodeProductTimes)
enum class StealChoice { On, Off, Alternate };
StealChoice steal_choice() {
  static const StealChoice choice = [] {
    const char* v = std::getenv("JOURNEY_DECODE_STEAL");
    if (v && std::strcmp(v, "off") == 0) return StealChoice::Off;
    if (v && std::strcmp(v, "alternate") == 0) return StealChoice::Alternate;
    return StealChoice::On;
  }();
  return choice;
}

// Whether this decode product (one token, or a batch of up to kSmallBatchTokens) shares its rows by stealing.
bool decode_stealing() {
  switch (steal_choice()) {
    case StealChoice::On: return true;
    case StealChoice::Off: return false;
    default: {
      static std::atomic<uint64_t> products{0};  // numbers the alternating products
      const uint64_t number = products.fetch_add(1, std::memory_order_relaxed);
      return (number * 0x9E3779B97F4A7C15ull) >> 63;  // a fixed pseudo-random half
    }
  }
}

// JOURNEY_PREFILL_STEAL=off: prefill keeps the static split (ops.h), to measure the difference.
bool prefill_stealing() {
  static const bool on = [] {
    const char* v = std::getenv("JOURNEY_PREFILL_STEAL");
    return !(v && std::strcmp(v, "off") == 0);
  }();
  return on;
}

// The decode product timer (ops.h): its sums, added by the calling thread of each product.
struct ProductTimer {
  std::atomic<bool> on{false};
  std::atomic<double> seconds[2], bytes[2];
  std::atomic<int64_t> count[2];
  // prefill (ops.h, PrefillProductTimes)
  std::atomic<bool> prefill_on{false};
  std::atomic<double> prefill_seconds{0}, prefill_flops{0}, prefill_thread_seconds{0}, prefill_capacity{0};
  std::atomic<int64_t> prefill_count{0};
};
ProductTimer& product_timer() {
  static ProductTimer timer;
  return timer;
}

constexpr int64_t kMaxStealingTeam = 64;

// The static blocks of split_rows (block b of every product to thread b, each one stream front
// to back), cut into chunks of kChunkRows rows; a thread that has finished its own chunks takes the
// unfinished ones of another thread from the back, so neither waits at the end of the region for
// the other's last rows. Decode is one read of the weights with a barrier after every product, and
// the memory serves the threads' streams unevenly: on the 2-core AMD Zen 4 VM the two threads of a
// 1.1B Q4_0 decode spent 14.7 % of their samples waiting in libgomp, 5.0 % with stealing (perf),
// and the products ran 0-3 % faster (JOURNEY_DECODE_STEAL=alternate; docs/performance.md).
//
// Prefill shares its rows the same way, in chunks of kPrefillChunkRows: a multiple of every
// prefill kernel's panel (f32 panels 24 or 48 rows, bf16 panels 48, AMX 32, token lanes 4), so a
// chunk's panels are the static block's panels and each row's value is the one the static split
// gives it, whichever thread computes it. (Prefill's threads were busy 87-92 % of the products'
// time with the static split: journey bench's "prefill products" line, docs/performance.md.)
class StealingShares {
 public:
  static constexpr int64_t kDecodeChunkRows = 16, kPrefillChunkRows = 96;

  StealingShares(std::span<const LinearTarget> targets, int threads, int64_t team, int64_t chunk_rows)
      : targets_(targets), threads_(threads), team_(team), chunk_rows_(chunk_rows) {
    for (int64_t b = 0; b < team; ++b) {
      int64_t chunks = 0;
      for (const LinearTarget& target : targets) chunks += chunks_of(target, b);
      cursor_[b].range.store(uint64_t(chunks) << 32, std::memory_order_relaxed);  // front 0, back = chunks
    }
  }

  template <typename Fn>
  void run(int64_t self, Fn&& fn) {
    int64_t chunk;
    while ((chunk = take(self, /*from_front=*/true)) >= 0) run_chunk(self, chunk, fn);
    for (int64_t other = 1; other < team_; ++other) {
      const int64_t victim = (self + other) % team_;
      while ((chunk = take(victim, /*from_front=*/false)) >= 0) run_chunk(victim, chunk, fn);
    }
  }

 private:
  struct alignas(64) Cursor {
    std::atomic<uint64_t> range{0};  // low 32 bits: the next chunk from the front; high: one past the last
  };

  int64_t chunks_of(const LinearTarget& target, int64_t b) const {
    const RowSplit split = split_rows(target.out, threads_);
    if (b >= split.count) return 0;
    const int64_t rows = std::min(target.out, (b + 1) * split.rows) - b * split.rows;
    return (std::max<int64_t>(rows, 0) + chunk_rows_ - 1) / chunk_rows_;
  }

  // The owner takes from the front (its stream goes on), a thief from the back; -1 when none is left.
  int64_t take(int64_t owner, bool from_front) {
    std::atomic<uint64_t>& range = cursor_[owner].range;
    uint64_t seen = range.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = seen & 0xFFFFFFFFu, back = seen >> 32;
      if (front >= back) return -1;
      const uint64_t next = from_front ? seen + 1 : ((back - 1) << 32) | front;
      if (range.compare_exchange_weak(seen, next, std::memory_order_relaxed)) return int64_t(from_front ? front : back - 1);
    }
  }

  template <typename Fn>
  void run_chunk(int64_t owner, int64_t chunk, Fn& fn) const {
    for (const LinearTarget& target : targets_) {
      const int64_t chunks = chunks_of(target, owner);
      if (chunk < chunks) {
        const RowSplit split = split_rows(target.out, threads_);
        const int64_t block_end = std::min(target.out, (owner + 1) * split.rows);
        const int64_t begin = owner * split.rows + chunk * chunk_rows_;
        return fn(target, begin, std::min(block_end, begin + chunk_rows_));
      }
      chunk -= chunks;
    }
  }

  std::span<const LinearTarget> targets_;
  int threads_;
  int64_t team_, chunk_rows_;
  Cursor cursor_[kMaxStealingTeam];
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Prefill timing (busy_seconds set): this thread's own time in its rows since t0 added, and the
// team's size noted by its first thread.
void note_busy(std::atomic<double>* busy_seconds, int* threads_used, Clock::time_point t0, int thread, int team_threads) {
  if (!busy_seconds) return;
  *busy_seconds += seconds_since(t0);
  if (thread == 0) *threads_used = team_threads;
}

// linear_shared_input with the rows of a one-token product shared by stealing or not; whether
// they were (asked for, and possible for these products).
// busy_seconds (prefill timing): each thread's own time in its rows added to it; threads_used: the
// threads the region ran on.
bool linear_shared_input_on(const float* x, int64_t T, int64_t in, std::span<const LinearTarget> targets,
                            int threads, bool stealing, std::atomic<double>* busy_seconds = nullptr,
                            int* threads_used = nullptr) {
  // x in the forms the targets' weight types multiply (quantized to 8 bits, rounded to bf16)
  const PreparedInput input(x, T, in, targets, threads);
  int64_t team = 1;  // threads that get work: one per block of the most finely split product
  for (const LinearTarget& target : targets) team = std::max(team, split_rows(target.out, threads).count);
  // Block b of every product goes to thread b, the same static assignment as one
  // `omp parallel for` per product, so the sums (and their rounding) do not change.
  auto thread_work = [&](int64_t b) {
    for (const LinearTarget& target : targets) {
      const RowSplit split = split_rows(target.out, threads);
      if (b < split.count) input.run_block(target, b * split.rows, std::min(target.out, (b + 1) * split.rows));
    }
  };
  if (team == 1) {
    const auto t0 = Clock::now();
    thread_work(0);  // no parallel region: Eigen then follows Eigen::setNbThreads (CpuBackend sets 1)
    note_busy(busy_seconds, threads_used, t0, 0, 1);
    return false;
  }
#ifdef _OPENMP
  // Decode: the rows handed out by work stealing where that cannot change a result
  // (rows_are_independent); prefill: in chunks of whole panels, each row as the static split's
  const bool prefill = T > kSmallBatchTokens;
  if (stealing && (prefill || rows_are_independent(T, targets)) && team <= kMaxStealingTeam) {
    StealingShares shares(targets, threads, team,
                          prefill ? StealingShares::kPrefillChunkRows : StealingShares::kDecodeChunkRows);
    std::atomic<bool> stole{true};
#pragma omp parallel num_threads(int(team))
    {
      const auto t0 = Clock::now();
      if (omp_get_num_threads() == team) {
        shares.run(omp_get_thread_num(), [&](const LinearTarget& target, int64_t begin, int64_t end) {
          input.run_block(target, begin, end);
        });
      } else {  // fewer threads than asked: the static blocks, each computed once
        stole.store(false, std::memory_order_relaxed);
        for (int64_t b = omp_get_thread_num(); b < team; b += omp_get_num_threads()) thread_work(b);
      }
      note_busy(busy_seconds, threads_used, t0, omp_get_thread_num(), omp_get_num_threads());
    }
    return stole.load(std::memory_order_relaxed);
  }
#pragma omp parallel num_threads(int(team))
  {
    const auto t0 = Clock::now();
    // OpenMP may hand out fewer threads than asked (OMP_DYNAMIC, OMP_THREAD_LIMIT, a nested
    // region): then a thread takes several blocks, so every block is still computed once.
    for (int64_t b = omp_get_thread_num(); b < team; b += omp_get_num_threads()) thread_work(b);
    note_busy(busy_seconds, threads_used, t0, omp_get_thread_num(), omp_get_num_threads());
  }
#else
  const auto t0 = Clock::now();
  for (int64_t b = 0; b < team; ++b) thread_work(b);
  note_busy(busy_seconds, threads_used, t0, 0, 1);
#endif
  return false;
}

}  // namespace

void start_timing_decode_products() {
  ProductTimer& timer = product_timer();
  for (int i = 0; i < 2; ++i) timer.seconds[i] = 0, timer.bytes[i] = 0, timer.count[i] = 0;
  timer.on = true;
}

DecodeProductSplit stop_timing_decode_products() {
  ProductTimer& timer = product_timer();
  timer.on = false;
  auto sums = [&](int i) { return DecodeProductTimes{timer.seconds[i].load(), timer.bytes[i].load(), timer.count[i].load()}; };
  return {sums(0), sums(1)};
}

void start_timing_prefill_products() {
  ProductTimer& timer = product_timer();
  timer.prefill_seconds = 0, timer.prefill_flops = 0, timer.prefill_thread_seconds = 0, timer.prefill_capacity = 0;
  timer.prefill_count = 0;
  timer.prefill_on = true;
}

PrefillProductTimes stop_timing_prefill_products() {
  ProductTimer& timer = product_timer();
  timer.prefill_on = false;
  return {timer.prefill_seconds.load(), timer.prefill_flops.load(), timer.prefill_thread_seconds.load(),
          timer.prefill_capacity.load(), timer.prefill_count.load()};
}

void linear_shared_input(const float* x, int64_t T, int64_t in, std::span<const LinearTarget> targets, int threads) {
  ProductTimer& timer = product_timer();
  if (T > kSmallBatchTokens) {  // prefill: chunks of whole panels shared by stealing (StealingShares)
    if (!timer.prefill_on.load(std::memory_order_relaxed)) {
      linear_shared_input_on(x, T, in, targets, threads, prefill_stealing());
      return;
    }
    std::atomic<double> busy{0};
    int threads_used = 1;
    const auto t0 = Clock::now();
    linear_shared_input_on(x, T, in, targets, threads, prefill_stealing(), &busy, &threads_used);
    const double seconds = seconds_since(t0);
    double flops = 0;
    for (const LinearTarget& target : targets) flops += 2.0 * double(T) * double(in) * double(target.out);
    timer.prefill_seconds += seconds;
    timer.prefill_flops += flops;
    timer.prefill_thread_seconds += busy.load();
    timer.prefill_capacity += seconds * threads_used;
    timer.prefill_count += 1;
    return;
  }
  if (T != 1) {  // batched decode steals too (rows_are_independent)
    linear_shared_input_on(x, T, in, targets, threads, decode_stealing());
    return;
  }
  const bool stealing = decode_stealing();
  if (!timer.on.load(std::memory_order_relaxed)) {
    linear_shared_input_on(x, T, in, targets, threads, stealing);
    return;
  }
  const auto t0 = Clock::now();
  const bool stole = linear_shared_input_on(x, T, in, targets, threads, stealing);
  const double seconds = seconds_since(t0);
  double bytes = 0;
  for (const LinearTarget& target : targets) bytes += double(dtype_bytes_for(target.weight.type, in)) * double(target.out);
  timer.seconds[stole] += seconds;
  timer.bytes[stole] += bytes;
  timer.count[stole] += 1;
}

void linear(float* y, const float* x, WeightView weight, const float* bias, int64_t T, int64_t in, int64_t out,
            int threads) {
  const LinearTarget target{y, weight, bias, out};
  linear_shared_input(x, T, in, std::span<const LinearTarget>(&target, 1), threads);
}

void softmax(float* x, int64_t R, int64_t N) {
  // at the CPU's vector width (kernels::softmax_row; Eigen's exp here ran 4 lanes wide): masked
  // (-inf) entries come out exactly 0
  const kernels::KernelTable& k = kernels::table(kernels::best_isa());
  for (int64_t r = 0; r < R; ++r) k.softmax_row(x + r * N, N);
}

void swiglu(float* out, const float* gate, const float* up, int64_t n) {
  // kernels::silu_mul: every element through the same vector code (the tail padded), so a value's
  // bits do not depend on where its buffer starts or how the threads split it; exp(-g) overflows
  // to +inf for g < -88, and g / inf = -0 as silu's limit wants.
  kernels::table(kernels::best_isa()).silu_mul(gate, up, out, n);
}

void residual_add(float* out, const float* a, const float* b, int64_t n) {
  VectorMap(out, n) = ConstVectorMap(a, n) + ConstVectorMap(b, n);
}

void attention(float* context, const float* q, const float* k, const float* v, int64_t T, int64_t start, int64_t H,
               int64_t KVH, int64_t D, float* scores_out, float* weights_out, int threads) {
  auto key_row = [&](int64_t p, int64_t kv_head) { return k + (p * KVH + kv_head) * D; };
  auto value_row = [&](int64_t p, int64_t kv_head) { return v + (p * KVH + kv_head) * D; };
  attention_core(context, q, key_row, DType::F32, value_row, DType::F32, T, start, H, KVH, D, scores_out, weights_out,
                 threads);
}

void check_kv_pool_type(DType type, int64_t D) {
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16 && type != DType::Q8_0)
    fail("KV cache type ", dtype_name(type), " is not supported (expected f32, f16, bf16 or q8_0)");
  if (type == DType::Q8_0 && D % 32 != 0)
    fail("KV cache type q8_0 needs head_dim to be a multiple of 32 (its blocks), but head_dim is ", D);
}

void kv_cache_write(KvPool k_pool, KvPool v_pool, const float* k, const float* v, const int32_t* block_table,
                    int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D) {
  const int64_t row = KVH * D;  // values per slot
  auto store = [&](KvPool pool, int64_t slot, const float* values) {
    const int64_t slot_bytes = dtype_bytes_for(pool.type, row);
    std::byte* dst = static_cast<std::byte*>(pool.data) + slot * slot_bytes;
    if (pool.type == DType::F32) std::memcpy(dst, values, size_t(slot_bytes));
    else quant::quantize(pool.type, values, dst, row);  // f16/bf16: nearest even; q8_0: llama.cpp's blocks
  };
  for (int64_t t = 0; t < T; ++t) {
    const int64_t position = start + t;
    const int64_t slot = int64_t(block_table[position / block_size]) * block_size + position % block_size;
    store(k_pool, slot, k + t * row);
    store(v_pool, slot, v + t * row);
  }
}

namespace {
void paged_attention_untimed(float* context, const float* q, KvPool k_pool, KvPool v_pool, const int32_t* block_table,
                             int64_t T, int64_t start, int64_t block_size, int64_t H, int64_t KVH, int64_t D,
                             float* scores_out, float* weights_out, int threads) {
  // The pool slot of every position, looked up once (attention reads each position's K and V
  // once per query head; this saves a division per read, ~1 % of a 16-sequence step at most).
  const int64_t P = start + T;
  std::vector<int64_t> slot(static_cast<size_t>(P));  // [P] position -> slot in the pool
  for (int64_t p = 0; p < P; ++p) slot[size_t(p)] = int64_t(block_table[p / block_size]) * block_size + p % block_size;
  // one head's row of a slot, in the pool's type, where it lies: rows of D values are whole blocks
  // (check_kv_pool_type), so row r of the pool starts r row sizes in
  const int64_t k_row_bytes = dtype_bytes_for(k_pool.type, D), v_row_bytes = dtype_bytes_for(v_pool.type, D);
  auto key_row = [&](int64_t p, int64_t kv_head) -> const void* {
    return static_cast<const std::byte*>(k_pool.data) + (slot[size_t(p)] * KVH + kv_head) * k_row_bytes;
  };
  auto value_row = [&](int64_t p, int64_t kv_head) -> const void* {
    return static_cast<const std::byte*>(v_pool.data) + (slot[size_t(p)] * KVH + kv_head) * v_row_bytes;
  };
  attention_core(context, q, key_row, k_pool.type, value_row, v_pool.type, T, start, H, KVH, D, scores_out,
                 weights_out, threads);
}

struct AttentionTimer {
  std::atomic<bool> on{false};
  std::atomic<double> seconds{0}, flops{0}, kv_bytes{0};
  std::atomic<int64_t> calls{0};
};
AttentionTimer& attention_timer() {
  static AttentionTimer timer;
  return timer;
}
}  // namespace

void start_timing_attention() {
  AttentionTimer& timer = attention_timer();
  timer.seconds = 0, timer.flops = 0, timer.kv_bytes = 0, timer.calls = 0;
  timer.on = true;
}

AttentionTimes stop_timing_attention() {
  AttentionTimer& timer = attention_timer();
  timer.on = false;
  return {timer.seconds.load(), timer.flops.load(), timer.kv_bytes.load(), timer.calls.load()};
}

void paged_attention(float* context, const float* q, KvPool k_pool, KvPool v_pool, const int32_t* block_table,
                     int64_t T, int64_t start, int64_t block_size, int64_t H, int64_t KVH, int64_t D,
                     float* scores_out, float* weights_out, int threads) {
  AttentionTimer& timer = attention_timer();
  const bool timed = timer.on.load(std::memory_order_relaxed);
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  paged_attention_untimed(context, q, k_pool, v_pool, block_table, T, start, block_size, H, KVH, D, scores_out,
                          weights_out, threads);
  if (!timed) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // query t attends start + t + 1 positions
  const double attended = double(T) * double(start) + double(T) * double(T + 1) / 2.0;
  const double P = double(start + T);
  timer.seconds.fetch_add(seconds, std::memory_order_relaxed);
  timer.flops.fetch_add(4.0 * double(H) * double(D) * attended, std::memory_order_relaxed);
  timer.kv_bytes.fetch_add(P * double(KVH) * double(dtype_bytes_for(k_pool.type, D) + dtype_bytes_for(v_pool.type, D)),
                           std::memory_order_relaxed);
  timer.calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace journey::cpu
