// CpuBackend: the reference forward pass (reference/reference_backend.cpp) step for step and
// stage for stage, over the fast ops of cpu/ops.h, over all tokens of all sequences of a step at once. The projections see the step's tokens as ONE matrix
// [N, E] (N = sum of the sequences' token counts), so each weight matrix is read once per step;
// attention is the only per-sequence part, because each sequence has its own history in the KV pool.
//
// Trace rule (docs/reference-path.md): every row-wise stage covers all N rows of the step, the
// sequences' rows concatenated in batch order. attn_scores / attn_weights ([H, T, P]) and kv_blocks
// have a per-sequence shape and are emitted only when the batch holds a single sequence.
#include "cpu/cpu_backend.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "core/error.h"
#include "core/model_weights.h"
#include "core/shape.h"
#include "cpu/huge_pages.h"
#include "cpu/kernels.h"
#include "core/threads.h"
#include "cpu/ops.h"
#include "parallel/communicator.h"
#include "parallel/shard.h"
#include "trace/sink.h"

namespace journey {

namespace {

// A weight matrix as the forward multiplies it: a view of its bytes as stored, in place in the
// file's memory map or in the backend's WeightArena (2 MiB pages, cpu/huge_pages.h).
struct StoredMatrix {
  cpu::WeightView view;
  std::unique_ptr<int16_t[]> block_sums;  // [out, in / 32] (view.block_sums: Q8_0 on AVX512-VNNI), or null
};

// Under tensor parallelism H, KVH and F are this rank's share (parallel/shard.h); otherwise the model's.
struct LayerWeights {
  HugePageFloats attn_norm;    // [E]
  StoredMatrix wq, wk, wv;     // [H*D, E], [KVH*D, E], [KVH*D, E]
  HugePageFloats bq, bk, bv;   // [H*D], [KVH*D], [KVH*D]   (Qwen2; empty otherwise)
  HugePageFloats q_norm;       // [D]                       (Qwen3; empty otherwise)
  HugePageFloats k_norm;       // [D]                       (Qwen3; empty otherwise)
  StoredMatrix wo;             // [E, H*D]
  HugePageFloats ffn_norm;     // [E]
  StoredMatrix w_gate;         // [F, E]
  StoredMatrix w_up;           // [F, E]
  StoredMatrix w_down;         // [E, F]
};

#if defined(__x86_64__) || !defined(__linux__)
constexpr size_t kPage = 4096;
#else
// arm64 kernels run with 4, 16 or 64 KiB pages, and madvise takes whole ones: the running kernel's
const size_t kPage = size_t(sysconf(_SC_PAGESIZE));
#endif

// Takes tensors from the store, checked against what the config implies (core/model_weights.h
// names them and gives their shapes), places each matrix (in place, or a slot of `arena`), and
// remembers what bring_into_memory must read in or copy.
class WeightLoader {
 public:
  WeightLoader(const WeightStore& weights, const ModelConfig& config, const CpuOptions& options,
               WeightPlacement placement, WeightArena& arena)
      : weights_(weights), config_(config), options_(options), placement_(placement), arena_(arena) {
    report_.placement = placement;
  }

  const TensorRef& checked(WeightRole role, int layer) const {
    const WeightSpec spec = weight_spec(config_, role, layer);
    const TensorRef& t = weights_.get(spec.name);
    if (t.shape != spec.shape)
      fail("tensor ", spec.name, " in ", t.source, ": expected shape ", shape_string(spec.shape),
           " (from the model config), found ", shape_string(t.shape));
    if (!dtype_is_weight(t.dtype))
      fail("tensor ", spec.name, " in ", t.source, ": expected a float or quantized weight type, found ",
           dtype_name(t.dtype));
    const int64_t row = t.shape.back(), block = dtype_block_size(t.dtype);
    if (row % block != 0)
      fail("tensor ", spec.name, " in ", t.source, " (", dtype_name(t.dtype), "): row length ", row,
           " is not a multiple of the ", dtype_name(t.dtype), " block size ", block);
    if (int64_t(t.nbytes) != dtype_bytes_for(t.dtype, t.numel()))
      fail("tensor ", spec.name, " in ", t.source, ": ", t.nbytes, " bytes do not hold ", t.numel(), " elements of ",
           dtype_name(t.dtype), " (", dtype_bytes_for(t.dtype, t.numel()), " bytes)");
    return t;
  }

  // A matrix as stored: in place when placed InPlace and its bytes are aligned for its type (f32:
  // 4 bytes, the others 2); otherwise one copy into the arena.
  // (the embedding table: read by rows, so never regrouped)
  StoredMatrix matrix(WeightRole role, int layer = -1) {
    const TensorRef& t = checked(role, layer);
    return rows_of(t, 0, t.shape[0], Use::RowGather);
  }

  // Output rows [begin, begin + n) of a matrix (a tensor-parallel shard of q/k/v, gate/up, the LM
  // head): whole rows are contiguous, so this is the same matrix starting `begin` rows later.
  StoredMatrix matrix_rows(WeightRole role, int layer, int64_t begin, int64_t n) {
    const TensorRef slice = shard_rows(checked(role, layer), begin, n);
    return rows_of(slice, 0, n, Use::Linear);
  }

  // Input columns [begin, begin + n) of every row (the tensor-parallel shard of o_proj and
  // down_proj): not contiguous, so copied row by row (parallel/shard.h cuts them, and refuses a
  // range that falls inside a stored block).
  StoredMatrix matrix_columns(WeightRole role, int layer, int64_t begin, int64_t n, int tp_size) {
    const TensorRef& t = checked(role, layer);
    if (begin == 0 && n == t.shape[1]) return rows_of(t, 0, t.shape[0], Use::Linear);
    StoredMatrix m;
    m.view.type = t.dtype;
    const size_t bytes = shard_columns_bytes(t, begin, n, tp_size);
    std::byte* slot = arena_slot(t, bytes);  // [rows, n] in the stored type
    shard_columns(t, begin, n, tp_size, slot);
    m.view.data = slot;
    report_.bytes_copied += int64_t(bytes);
    with_block_sums(m, t.shape[0], n);
    return m;
  }

  // A vector (norm weight, bias), widened to f32: small, read once per token.
  HugePageFloats vector(WeightRole role, int layer = -1) {
    const TensorRef& t = checked(role, layer);
    return vector_range(role, layer, 0, t.numel());
  }

  // Elements [begin, begin + n) of a vector (a bias's tensor-parallel shard), widened to f32.
  HugePageFloats vector_range(WeightRole role, int layer, int64_t begin, int64_t n) {
    const std::vector<float> widened = shard_rows(checked(role, layer), begin, n).to_f32();
    report_.bytes_copied += n * int64_t(sizeof(float));
    return HugePageFloats(widened.begin(), widened.end());
  }

  // Brings every in-place matrix's pages into memory now (MADV_POPULATE_READ, or one read per
  // page where the kernel lacks it) and makes the copies (giving the file's pages back behind
  // them), in chunks, reporting progress; so the first token does not pay for reading the file,
  // and the load time says what loading costs.
  void bring_into_memory() {
    int64_t total = 0, done = 0;
    for (const auto& [data, bytes] : mapped_) total += int64_t(bytes);
    for (const PendingCopy& c : copies_) total += int64_t(c.bytes);
    constexpr size_t kChunk = size_t(64) << 20;
    auto advance = [&](size_t n) {
      done += int64_t(n);
      if (options_.on_load_progress) options_.on_load_progress(done, total);
    };
    for (const auto& [data, bytes] : mapped_) {
      for (size_t offset = 0; offset < bytes; offset += kChunk) {
        const size_t n = std::min(kChunk, bytes - offset);
        populate(data + offset, n);
        advance(n);
      }
    }
    for (const PendingCopy& c : copies_) {
      // a grouped matrix moves whole groups of rows per chunk (cpu::kernels::rows_to_groups)
      const size_t group_bytes = size_t(cpu::kernels::kGroupRows) * c.row_bytes;
      const size_t chunk = c.row_groups ? std::max<size_t>(1, kChunk / group_bytes) * group_bytes : kChunk;
      for (size_t offset = 0; offset < c.bytes; offset += chunk) {
        const size_t n = std::min(chunk, c.bytes - offset);
        if (c.row_groups)
          cpu::kernels::rows_to_groups(c.type, cpu::kernels::group_layout(cpu::kernels::best_isa()), c.from + offset,
                                       int64_t(n / c.row_bytes), c.row_in, c.to + offset);
        else
          std::memcpy(c.to + offset, c.from + offset, n);
        if (c.file_mapped) drop_pages(c.from + offset, n);  // the file's pages are no longer needed here
        advance(n);
      }
    }
    copies_.clear();
    // Q8_0's block sums, from the matrices where they now lie (in place, copied or a shard's copy)
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = 0; i < block_sums_.size(); ++i) {
      const PendingSums& job = block_sums_[i];
      cpu::kernels::q8_0_block_sums(job.rows, job.count, job.in, job.sums);
    }
    block_sums_.clear();
  }

  CpuLoadReport report() const { return report_; }

 private:
  enum class Use { Linear, RowGather };
  // Whether a copied matrix is regrouped by 8 rows for the decode dot (kernels.h, has_row_group_dot).
  bool grouped(const TensorRef& t, int64_t rows, Use use) const {
    return use == Use::Linear && cpu::kernels::has_row_group_dot(t.dtype, cpu::kernels::best_isa()) &&
           std::find(options_.row_groups.begin(), options_.row_groups.end(), t.dtype) != options_.row_groups.end() &&
           rows % cpu::kernels::kGroupRows == 0 &&
           cpu::kernels::table(cpu::kernels::best_isa()).dot_row_groups != nullptr;
  }

  StoredMatrix rows_of(const TensorRef& t, int64_t begin, int64_t n, Use use) {
    const size_t row_bytes = size_t(dtype_bytes_for(t.dtype, t.shape.back()));
    const std::byte* data = t.data + size_t(begin) * row_bytes;
    const size_t bytes = size_t(n) * row_bytes;
    StoredMatrix m;
    m.view.type = t.dtype;
    const size_t alignment = t.dtype == DType::F32 ? 4 : 2;
    if (placement_ == WeightPlacement::InPlace && reinterpret_cast<uintptr_t>(data) % alignment == 0) {
      m.view.data = data;
      mapped_.push_back({data, bytes});
      report_.bytes_in_place += int64_t(bytes);
    } else {
      std::byte* slot = arena_slot(t, bytes);
      m.view.row_groups = grouped(t, n, use);
      // copied (or regrouped) by bring_into_memory, with the progress line
      copies_.push_back({data, slot, bytes, t.file_mapped, m.view.row_groups, t.dtype, row_bytes, t.shape.back()});
      m.view.data = slot;
      report_.bytes_copied += int64_t(bytes);
      if (m.view.row_groups) report_.bytes_grouped += int64_t(bytes);
    }
    if (use == Use::Linear) with_block_sums(m, n, t.shape.back());
    return m;
  }

  // A Q8_0 matrix as stored, where the CPU has kernels::dot_tokens_q8_0_sums: room for its block
  // sums, filled by bring_into_memory (batched decode: a third fewer instructions per block, for
  // 1/17 of the matrix's bytes more; docs/performance.md, "Q8_0 token lanes with the weights'
  // block sums").
  void with_block_sums(StoredMatrix& m, int64_t rows, int64_t in) {
    if (m.view.type != DType::Q8_0 || m.view.row_groups || !options_.q8_0_block_sums ||
        !cpu::kernels::table(cpu::kernels::best_isa()).dot_tokens_q8_0_sums)
      return;
    const int64_t count = rows * (in / dtype_block_size(DType::Q8_0));
    m.block_sums = std::make_unique<int16_t[]>(size_t(count));
    m.view.block_sums = m.block_sums.get();
    block_sums_.push_back({m.view.data, rows, in, m.block_sums.get()});
    report_.bytes_block_sums += count * int64_t(sizeof(int16_t));
  }

  std::byte* arena_slot(const TensorRef& t, size_t bytes) {
    std::byte* slot = arena_.take(bytes);
    if (!slot)  // the arena holds every tensor of the store: a matrix larger than its tensor is a bug here
      fail("internal: no room for ", bytes, " bytes of ", t.name, " in the weight arena (", arena_.used(), " of ",
           arena_.capacity(), " bytes used)");
    return slot;
  }

  static void populate(const std::byte* data, size_t bytes) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / kPage * kPage;
    const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
#if defined(__linux__) && defined(MADV_POPULATE_READ)
    if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0) return;
#endif
    volatile unsigned char sink = 0;
    for (uintptr_t page = begin; page < end; page += kPage) sink = sink + *reinterpret_cast<const unsigned char*>(page);
    (void)sink;
  }
  // Unmaps the whole pages inside [data, data + bytes) from this process (a private read-only
  // file mapping: the page cache keeps them, this process's resident memory no longer counts them).
  static void drop_pages(const std::byte* data, size_t bytes) {
#if defined(__linux__)
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kPage - 1) / kPage * kPage;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / kPage * kPage;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
#else
    (void)data, (void)bytes;
#endif
  }

  const WeightStore& weights_;
  const ModelConfig& config_;
  const CpuOptions& options_;
  const WeightPlacement placement_;  // InPlace or Copy
  WeightArena& arena_;
  std::vector<std::pair<const std::byte*, size_t>> mapped_;  // in-place matrices: bytes and length
  struct PendingCopy {
    const std::byte* from;
    std::byte* to;
    size_t bytes;
    bool file_mapped;  // from a file mapping (TensorRef::file_mapped), not owned storage
    bool row_groups;   // regrouped by 8 rows on the way (CpuOptions::row_groups)
    DType type;
    size_t row_bytes;
    int64_t row_in;    // values per row
  };
  std::vector<PendingCopy> copies_;  // matrices placed in the arena, not yet copied
  struct PendingSums {
    const void* rows;  // the matrix where it will lie once copied
    int64_t count, in;
    int16_t* sums;     // [count, in / 32]
  };
  std::vector<PendingSums> block_sums_;  // Q8_0 block sums to make once the matrices are in place
  CpuLoadReport report_;
};

template <typename Buffer>  // std::vector<float> or HugePageFloats
TraceTensor trace_view(const Buffer& buffer, std::vector<int64_t> shape) {
  return TraceTensor{std::span<const float>(buffer.data(), buffer.size()), std::move(shape)};
}

}  // namespace

// The measured default ("on"): Q4_0 everywhere; Q4_K on AMD CPUs with AVX512-VNNI only. On the Zen 4
// VM grouped Q4_K decoded 0-36 % faster (the gain where its memory outruns the stored kernel); on
// the 2-core Xeon (Sapphire Rapids class) it decoded 5-11 % slower and prefilled 5-20 % slower; on
// the Zen 3 VM (AVX2's own layout) it decoded 4-9 points of the bandwidth faster per step where the
// memory was fast, not faster where it was slow, and prefilled ~10 % slower (docs/performance.md,
// "Q4_K rows in groups by default", "The Xeon VM again", "The Zen 3 VM a third time").
std::vector<DType> measured_row_groups() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_is("amd") && cpu::kernels::best_isa() == cpu::kernels::Isa::Avx512)
    return {DType::Q4_0, DType::Q4_K};
#endif
  return {DType::Q4_0};
}

std::vector<DType> default_row_groups() {
  const char* value = std::getenv("JOURNEY_ROW_GROUPS");
  if (!value || std::strcmp(value, "on") == 0) return measured_row_groups();
  if (std::strcmp(value, "off") == 0) return {};
  std::vector<DType> types;
  const std::string_view list = value;
  for (size_t begin = 0; begin <= list.size();) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::optional<DType> type = dtype_from_name(list.substr(begin, end - begin));
    if (!type || !cpu::kernels::has_row_groups(*type))
      fail("JOURNEY_ROW_GROUPS='", value, "' is not a choice; expected on, off or a list of q4_0, q8_0, q4_k");
    types.push_back(*type);
    begin = end + 1;
  }
  return types;
}

bool default_q8_0_block_sums() {
  const char* value = std::getenv("JOURNEY_Q8_0_BLOCK_SUMS");
  if (!value || std::strcmp(value, "on") == 0) return true;
  if (std::strcmp(value, "off") == 0) return false;
  fail("JOURNEY_Q8_0_BLOCK_SUMS='", value, "' is not a choice; expected on or off");
}

const char* weight_placement_name(WeightPlacement placement) {
  switch (placement) {
    case WeightPlacement::InPlace: return "in place";
    case WeightPlacement::Copy: return "copied";
    default: return "auto";
  }
}

class CpuBackend : public Backend {
 public:
  CpuBackend(const LoadedModel& model, const CpuOptions& options, const CpuOps& ops);

  std::string name() const override { return "cpu"; }
  std::string stored_weight_types() const override { return stored_weight_types_; }
  const ModelConfig& config() const override { return config_; }
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override;
  int64_t kv_block_size() const override { return block_size_; }
  int64_t kv_num_blocks() const override { return num_blocks_; }
  int64_t kv_block_bytes(int64_t block_size) const override {
    return 2 * L_ * block_size * dtype_bytes_for(options_.kv_dtype, KVH_ * D_);
  }
  void copy_kv_block(int32_t src, int32_t dst) override;
  ForwardOutput forward(const ForwardBatch& batch, TraceSink* sink) override;

 private:
  void check_batch(const ForwardBatch& batch) const;
  void swiglu_in_parallel(float* act, const float* gate, const float* up, int64_t n);  // act = silu(gate) * up, [n]
  // fn(first, count) over rows [0, R) of `row_elements` values: one contiguous share per thread
  // when there is enough work, else all at once (the row-wise ops: RMSNorm, RoPE, the residual
  // adds; serial, they kept one thread of a 1.1B prefill waiting ~7 % of the time). Every row is
  // computed by the same code however the rows are shared, so the results do not change.
  template <typename Fn>
  void in_row_shares(int64_t R, int64_t row_elements, Fn&& fn);

  ModelConfig config_;
  std::string stored_weight_types_;  // as the file stores them (weight_type_summary)
  CpuOptions options_;
  CpuOps ops_;
  int threads_ = 1;
  // hidden, FFN columns, layers, heads, kv heads, head_dim, vocabulary: F_, H_, KVH_ are this
  // rank's share under tensor parallelism (shard_), the model's otherwise; V_ is always the model's.
  int64_t E_, F_, L_, H_, KVH_, D_, V_;
  TensorParallelShard shard_;            // the whole model when not tensor-parallel (rank 0 of 1)
  Communicator* communicator_ = nullptr; // null when not tensor-parallel

  std::vector<std::shared_ptr<const void>> mappings_;  // the files the in-place weights live in
  std::unique_ptr<WeightArena> arena_;                 // the copied weights (Copy, or misaligned)
  StoredMatrix embed_tokens_;        // [V, E]
  std::vector<LayerWeights> layers_; // [L]
  HugePageFloats final_norm_;        // [E]
  StoredMatrix lm_head_own_;         // [Vs, E] (unused when tied to embed_tokens_); Vs = shard_.vocab_rows
  cpu::WeightView lm_head_;          // [Vs, E] this rank's vocabulary rows (all V without tensor parallelism)

  int64_t num_blocks_ = 0, block_size_ = 0;
  // [L][num_blocks, block_size, KVH, D] in options_.kv_dtype (bytes: dtype_bytes_for per slot)
  std::vector<HugePageVector<std::byte>> k_pool_, v_pool_;
  cpu::KvPool pool(std::vector<HugePageVector<std::byte>>& pools, int64_t l) {
    return {pools[size_t(l)].data(), options_.kv_dtype};
  }
};

CpuBackend::CpuBackend(const LoadedModel& model, const CpuOptions& options, const CpuOps& ops)
    : config_(model.config), stored_weight_types_(weight_type_summary(model.weights)), options_(options), ops_(ops) {
  const ModelConfig& c = config_;
  const std::string where = model.path.empty() ? std::string("the model") : model.path.string();
  D_ = validate_model_shape(c, where);
  E_ = c.hidden_size, F_ = c.intermediate_size, L_ = c.num_layers, H_ = c.num_heads, KVH_ = c.num_kv_heads;
  V_ = c.vocab_size;
  config_.head_dim = D_;
  const bool parallel = options.communicator != nullptr && options.communicator->size() > 1;
  shard_ = plan_shard(config_, parallel ? options.communicator->rank() : 0, parallel ? options.communicator->size() : 1,
                      where);
  if (parallel) communicator_ = options.communicator;
  H_ = shard_.heads, KVH_ = shard_.kv_heads, F_ = shard_.ffn_columns;
  const TensorParallelShard& s = shard_;
  threads_ = resolve_threads(options.threads);
  // The ops split work across threads_ themselves; Eigen's own GEMM threading would add threads on
  // top (inside a one-thread region it still spawns its own), so it is switched off.
  Eigen::setNbThreads(1);

  cpu::check_kv_pool_type(options.kv_dtype, D_);
  const auto t0 = std::chrono::steady_clock::now();
  const WeightPlacement placement =
      options.weights != WeightPlacement::Auto     ? options.weights
      : transparent_huge_pages_available() ? WeightPlacement::Copy
                                           : WeightPlacement::InPlace;
  // (room for every tensor of the store: an upper bound on what is copied; never-written pages
  // of the reservation cost nothing)
  arena_ = std::make_unique<WeightArena>(model.weights.total_bytes() +
                                         model.weights.all().size() * WeightArena::kAlignment);
  WeightLoader load(model.weights, c, options, placement, *arena_);
  embed_tokens_ = load.matrix(WeightRole::token_embedding);
  layers_.resize(size_t(L_));
  for (int l = 0; l < int(L_); ++l) {
    LayerWeights& lw = layers_[size_t(l)];
    lw.attn_norm = load.vector(WeightRole::attn_norm, l);
    // (this rank's heads: rows of q/k/v, columns of o_proj; the whole matrices without tensor parallelism)
    lw.wq = load.matrix_rows(WeightRole::q_proj, l, s.head_begin * D_, s.heads * D_);
    lw.wk = load.matrix_rows(WeightRole::k_proj, l, s.kv_head_begin * D_, s.kv_heads * D_);
    lw.wv = load.matrix_rows(WeightRole::v_proj, l, s.kv_head_begin * D_, s.kv_heads * D_);
    if (c.attention_bias) {
      lw.bq = load.vector_range(WeightRole::q_bias, l, s.head_begin * D_, s.heads * D_);
      lw.bk = load.vector_range(WeightRole::k_bias, l, s.kv_head_begin * D_, s.kv_heads * D_);
      lw.bv = load.vector_range(WeightRole::v_bias, l, s.kv_head_begin * D_, s.kv_heads * D_);
    }
    if (c.qk_norm) {
      lw.q_norm = load.vector(WeightRole::q_norm, l);
      lw.k_norm = load.vector(WeightRole::k_norm, l);
    }
    lw.wo = load.matrix_columns(WeightRole::o_proj, l, s.head_begin * D_, s.heads * D_, s.size);
    lw.ffn_norm = load.vector(WeightRole::ffn_norm, l);
    lw.w_gate = load.matrix_rows(WeightRole::gate_proj, l, s.ffn_begin, s.ffn_columns);
    lw.w_up = load.matrix_rows(WeightRole::up_proj, l, s.ffn_begin, s.ffn_columns);
    lw.w_down = load.matrix_columns(WeightRole::down_proj, l, s.ffn_begin, s.ffn_columns, s.size);
  }
  final_norm_ = load.vector(WeightRole::final_norm);
  // Tied models reuse the embedding matrix as the LM head (logits = h embed_tokens^T).
  // (this rank's vocabulary rows of it: whole rows, so a view that starts vocab_begin rows later)
  if (c.tie_word_embeddings && !model.weights.has(weight_spec(c, WeightRole::lm_head).name)) {
    lm_head_ = embed_tokens_.view;
    lm_head_.data = static_cast<const std::byte*>(lm_head_.data) + dtype_bytes_for(lm_head_.type, s.vocab_begin * E_);
  } else {
    lm_head_own_ = load.matrix_rows(WeightRole::lm_head, -1, s.vocab_begin, s.vocab_rows);
    lm_head_ = lm_head_own_.view;
  }
  load.bring_into_memory();
  // the files stay mapped only while a matrix is used in place in them
  if (load.report().bytes_in_place > 0) mappings_ = model.weights.owners();
  if (options.report) {
    *options.report = load.report();
    options.report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  options_.report = nullptr;  // the caller's report is filled once, here
  options_.on_load_progress = nullptr;
}

// ops_.swiglu on the threads, in chunks that start at multiples of 16 elements (swiglu computes in
// fixed blocks of 16 from its start, so every element gets the same bits as in one call). One
// thread did it alone while the other waited: 4 % of a 16-stream decode step of the 1.1B shape.
void CpuBackend::swiglu_in_parallel(float* act, const float* gate, const float* up, int64_t n) {
  constexpr int64_t kMinParallel = 16384;  // below, a parallel region costs about what it saves
  if (threads_ == 1 || n < kMinParallel) return ops_.swiglu(act, gate, up, n);
  const int64_t chunk = (n / threads_ + 15) / 16 * 16;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int i = 0; i < threads_; ++i) {
    const int64_t begin = std::min(n, i * chunk), end = std::min(n, begin + chunk);
    if (end > begin) ops_.swiglu(act + begin, gate + begin, up + begin, end - begin);
  }
}

template <typename Fn>
void CpuBackend::in_row_shares(int64_t R, int64_t row_elements, Fn&& fn) {
  // values; below, a parallel region costs more than it saves: with sleeping OpenMP waits
  // (OMP_WAIT_POLICY=passive, journey serve's choice) its team mate must be woken, which took longer
  // than one thread's norm or RoPE over a 16-stream step's rows (16 x 2048 values; a 16-stream
  // step of the 1.1B shape 74-82 -> 71-74 ms, docs/performance.md, "Fewer parallel regions in a
  // batched step"); a prefill of 128 tokens still shares them
  constexpr int64_t kMinParallel = 1 << 18;
  if (threads_ == 1 || R < 2 || R * row_elements < kMinParallel) return fn(int64_t(0), R);
  const int64_t share = (R + threads_ - 1) / threads_;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int i = 0; i < threads_; ++i) {
    const int64_t first = std::min(R, i * share), count = std::min(R, first + share) - first;
    if (count > 0) fn(first, count);
  }
}

void CpuBackend::allocate_kv_cache(int64_t num_blocks, int64_t block_size) {
  if (num_blocks <= 0 || block_size <= 0)
    fail("KV cache: num_blocks (", num_blocks, ") and block_size (", block_size, ") must be positive");
  num_blocks_ = num_blocks, block_size_ = block_size;
  const size_t bytes = size_t(num_blocks * block_size * dtype_bytes_for(options_.kv_dtype, KVH_ * D_));
  k_pool_.assign(size_t(L_), HugePageVector<std::byte>(bytes, std::byte{0}));
  v_pool_.assign(size_t(L_), HugePageVector<std::byte>(bytes, std::byte{0}));
}

void CpuBackend::copy_kv_block(int32_t src, int32_t dst) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_)
    fail("copy_kv_block(", src, ", ", dst, "): block ids must lie in [0, ", num_blocks_, ")");
  const int64_t block_bytes = block_size_ * dtype_bytes_for(options_.kv_dtype, KVH_ * D_);
  for (int64_t l = 0; l < L_; ++l) {
    std::memcpy(k_pool_[l].data() + dst * block_bytes, k_pool_[l].data() + src * block_bytes, size_t(block_bytes));
    std::memcpy(v_pool_[l].data() + dst * block_bytes, v_pool_[l].data() + src * block_bytes, size_t(block_bytes));
  }
}

void CpuBackend::check_batch(const ForwardBatch& batch) const {
  validate_forward_batch(batch, config_, num_blocks_, block_size_);
}

ForwardOutput CpuBackend::forward(const ForwardBatch& batch, TraceSink* sink) {
  check_batch(batch);
  const ModelConfig& c = config_;
  const float eps = float(c.rms_norm_eps);
  const bool single = batch.sequences.size() == 1;  // per-sequence stages are traced only then
  const int64_t E = E_, F = F_, H = H_, KVH = KVH_, D = D_, V = V_;

  // The step's tokens, sequences concatenated: sequence i owns rows [first_row[i], first_row[i + 1]).
  std::vector<int64_t> first_row;  // [S + 1] first row of each sequence
  std::vector<int32_t> tokens;     // [N]
  std::vector<int64_t> positions;  // [N] absolute position of each row
  first_row.push_back(0);
  for (const SequenceInput& s : batch.sequences) {
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      tokens.push_back(s.tokens[t]);
      positions.push_back(s.start_position + int64_t(t));
    }
    first_row.push_back(int64_t(tokens.size()));
  }
  const int64_t N = int64_t(tokens.size());

  if (sink && sink->wants(Stage::token_ids, -1)) sink->record_ints(Stage::token_ids, -1, tokens, {N});
  if (single && sink && sink->wants(Stage::kv_blocks, -1)) {
    const auto& table = batch.sequences[0].block_table;
    sink->record_ints(Stage::kv_blocks, -1, table, {int64_t(table.size())});
  }

  // (cache-line aligned like every buffer the ops read, so that the results do not depend on
  // where the heap puts them: cpu/huge_pages.h)
  HugePageFloats x(size_t(N * E));               // [N, E] the residual stream
  HugePageFloats xn(size_t(N * E));              // [N, E] normalized input of a sublayer
  HugePageFloats q(size_t(N * H * D));           // [N, H, D]
  HugePageFloats k(size_t(N * KVH * D));         // [N, KVH, D]
  HugePageFloats v(size_t(N * KVH * D));         // [N, KVH, D]
  HugePageFloats context(size_t(N * H * D));     // [N, H*D] attention output, heads concatenated
  HugePageFloats attn_out(size_t(N * E));        // [N, E]
  HugePageFloats gate(size_t(N * F));            // [N, F]
  HugePageFloats up(size_t(N * F));              // [N, F]
  HugePageFloats act(size_t(N * F));             // [N, F]
  HugePageFloats ffn_out(size_t(N * E));         // [N, E]
  std::vector<float> scores, weights;                // [H, T, P] only when traced

  // embedding: one row of the table per token
  ops_.embedding_gather(x.data(), embed_tokens_.view, tokens.data(), N, E);
  JOURNEY_TRACE(sink, Stage::embeddings, -1, trace_view(x, {N, E}));

  for (int64_t l = 0; l < L_; ++l) {
    const LayerWeights& lw = layers_[size_t(l)];
    const int il = int(l);

    // attention sublayer: RMSNorm
    in_row_shares(N, E, [&](int64_t r, int64_t n) {
      ops_.rms_norm(xn.data() + r * E, x.data() + r * E, lw.attn_norm.data(), n, E, eps);
    });
    JOURNEY_TRACE(sink, Stage::attn_norm, il, trace_view(xn, {N, E}));

    // q, k, v projections (Qwen2 adds biases)
    // (one parallel region for the three: they share their input)
    const cpu::LinearTarget qkv[] = {{q.data(), lw.wq.view, lw.bq.empty() ? nullptr : lw.bq.data(), H * D},
                                     {k.data(), lw.wk.view, lw.bk.empty() ? nullptr : lw.bk.data(), KVH * D},
                                     {v.data(), lw.wv.view, lw.bv.empty() ? nullptr : lw.bv.data(), KVH * D}};
    ops_.linear_shared_input(xn.data(), N, E, std::span<const cpu::LinearTarget>(qkv), threads_);
    JOURNEY_TRACE(sink, Stage::q, il, trace_view(q, {N, H, D}));
    JOURNEY_TRACE(sink, Stage::k, il, trace_view(k, {N, KVH, D}));
    JOURNEY_TRACE(sink, Stage::v, il, trace_view(v, {N, KVH, D}));

    // Qwen3: RMSNorm over head_dim of every head of q and k, before RoPE
    if (c.qk_norm) {
      ops_.rms_norm(q.data(), q.data(), lw.q_norm.data(), N * H, D, eps);
      ops_.rms_norm(k.data(), k.data(), lw.k_norm.data(), N * KVH, D, eps);
      JOURNEY_TRACE(sink, Stage::q_norm, il, trace_view(q, {N, H, D}));
      JOURNEY_TRACE(sink, Stage::k_norm, il, trace_view(k, {N, KVH, D}));
    }

    // rotary position embedding of q and k
    in_row_shares(N, (H + KVH) * D, [&](int64_t t, int64_t n) {
      ops_.rope(q.data() + t * H * D, positions.data() + t, n, H, D, c.rope_theta, c.rope_layout);
      ops_.rope(k.data() + t * KVH * D, positions.data() + t, n, KVH, D, c.rope_theta, c.rope_layout);
    });
    JOURNEY_TRACE(sink, Stage::q_rope, il, trace_view(q, {N, H, D}));
    JOURNEY_TRACE(sink, Stage::k_rope, il, trace_view(k, {N, KVH, D}));

    // per sequence: store k, v in the pool, then attend over positions [0, start + T).
    // A batch of at least `threads_` sequences (batched decode) gives each thread whole sequences;
    // fewer (one prompt) split one sequence's heads across the threads instead. Either way a layer
    // wakes the threads once, not once per sequence.
    const int64_t num_sequences = int64_t(batch.sequences.size());
    const bool across_sequences = num_sequences >= threads_;
    auto attend = [&](int64_t i, int attention_threads) {
      const SequenceInput& s = batch.sequences[size_t(i)];
      const int64_t r0 = first_row[i], T = first_row[i + 1] - r0, start = s.start_position, P = start + T;
      ops_.kv_cache_write(pool(k_pool_, l), pool(v_pool_, l), k.data() + r0 * KVH * D, v.data() + r0 * KVH * D,
                          s.block_table.data(), T, start, block_size_, KVH, D);
      const bool trace_scores = single && sink && sink->wants(Stage::attn_scores, il);
      const bool trace_weights = single && sink && sink->wants(Stage::attn_weights, il);
      if (trace_scores) scores.assign(size_t(H * T * P), 0.0f);
      if (trace_weights) weights.assign(size_t(H * T * P), 0.0f);
      ops_.paged_attention(context.data() + r0 * H * D, q.data() + r0 * H * D, pool(k_pool_, l), pool(v_pool_, l),
                           s.block_table.data(), T, start, block_size_, H, KVH, D,
                           trace_scores ? scores.data() : nullptr, trace_weights ? weights.data() : nullptr,
                           attention_threads);
      if (trace_scores) sink->record(Stage::attn_scores, il, trace_view(scores, {H, T, P}));
      if (trace_weights) sink->record(Stage::attn_weights, il, trace_view(weights, {H, T, P}));
    };
    if (across_sequences) {
      // (only a single-sequence batch records scores/weights, so the threads never share a sink)
#pragma omp parallel for num_threads(threads_) schedule(dynamic)
      for (int64_t i = 0; i < num_sequences; ++i) attend(i, 1);
    } else {
      for (int64_t i = 0; i < num_sequences; ++i) attend(i, threads_);
    }
    JOURNEY_TRACE(sink, Stage::attn_context, il, trace_view(context, {N, H * D}));

    // output projection, then the residual connection
    ops_.linear(attn_out.data(), context.data(), lw.wo.view, nullptr, N, H * D, E, threads_);
    // tensor parallelism: each rank's product covers its heads only; the sum over ranks is the whole
    if (communicator_) {
      JOURNEY_TRACE(sink, Stage::attn_out_partial, il, trace_view(attn_out, {N, E}));
      communicator_->all_reduce_sum(attn_out.data(), N * E);
    }
    JOURNEY_TRACE(sink, Stage::attn_out, il, trace_view(attn_out, {N, E}));
    in_row_shares(N, E, [&](int64_t r, int64_t n) {
      ops_.residual_add(x.data() + r * E, x.data() + r * E, attn_out.data() + r * E, n * E);
    });
    JOURNEY_TRACE(sink, Stage::resid_attn, il, trace_view(x, {N, E}));

    // FFN sublayer: RMSNorm
    in_row_shares(N, E, [&](int64_t r, int64_t n) {
      ops_.rms_norm(xn.data() + r * E, x.data() + r * E, lw.ffn_norm.data(), n, E, eps);
    });
    JOURNEY_TRACE(sink, Stage::ffn_norm, il, trace_view(xn, {N, E}));

    // gate and up projections, SwiGLU, down projection
    const cpu::LinearTarget gate_up[] = {{gate.data(), lw.w_gate.view, nullptr, F},
                                         {up.data(), lw.w_up.view, nullptr, F}};
    ops_.linear_shared_input(xn.data(), N, E, std::span<const cpu::LinearTarget>(gate_up), threads_);
    JOURNEY_TRACE(sink, Stage::gate, il, trace_view(gate, {N, F}));
    JOURNEY_TRACE(sink, Stage::up, il, trace_view(up, {N, F}));
    swiglu_in_parallel(act.data(), gate.data(), up.data(), N * F);
    JOURNEY_TRACE(sink, Stage::act, il, trace_view(act, {N, F}));
    ops_.linear(ffn_out.data(), act.data(), lw.w_down.view, nullptr, N, F, E, threads_);
    // tensor parallelism: each rank's product covers its FFN columns only; the sum over ranks is the whole
    if (communicator_) {
      JOURNEY_TRACE(sink, Stage::ffn_out_partial, il, trace_view(ffn_out, {N, E}));
      communicator_->all_reduce_sum(ffn_out.data(), N * E);
    }
    JOURNEY_TRACE(sink, Stage::ffn_out, il, trace_view(ffn_out, {N, E}));

    // residual connection
    in_row_shares(N, E, [&](int64_t r, int64_t n) {
      ops_.residual_add(x.data() + r * E, x.data() + r * E, ffn_out.data() + r * E, n * E);
    });
    JOURNEY_TRACE(sink, Stage::layer_out, il, trace_view(x, {N, E}));
  }

  // final RMSNorm
  ops_.rms_norm(xn.data(), x.data(), final_norm_.data(), N, E, eps);
  JOURNEY_TRACE(sink, Stage::final_norm, -1, trace_view(xn, {N, E}));

  // LM head, only for the rows whose logits are wanted (the last of each sequence unless all_logits)
  ForwardOutput out;
  out.vocab_size = V;
  std::vector<int32_t> logit_rows;  // [R] rows of xn that get logits
  out.row_begin.push_back(0);
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const int64_t begin = batch.sequences[i].all_logits ? first_row[i] : first_row[i + 1] - 1;
    for (int64_t r = begin; r < first_row[i + 1]; ++r) logit_rows.push_back(int32_t(r));
    out.row_begin.push_back(int64_t(logit_rows.size()));
  }
  const int64_t R = int64_t(logit_rows.size());
  HugePageFloats head_in(size_t(R * E));  // [R, E] the rows of xn that get logits
  ops_.embedding_gather(head_in.data(), cpu::WeightView{xn.data(), DType::F32}, logit_rows.data(), R, E);  // a row gather, like the embedding
  if (!communicator_) {
    out.logits.resize(size_t(R * V));  // [R, V]
    ops_.linear(out.logits.data(), head_in.data(), lm_head_, nullptr, R, E, V, threads_);
    JOURNEY_TRACE(sink, Stage::logits, -1, trace_view(out.logits, {R, V}));
    return out;
  }
  // tensor parallelism: this rank's vocabulary slice, gathered side by side into [R, V] on rank 0;
  // the other ranks return their slice [R, Vs]. Every rank traces its slice; only rank 0 holds
  // (and traces) the whole logits.
  const int64_t Vs = shard_.vocab_rows;
  HugePageFloats slice(size_t(R * Vs));  // [R, Vs]
  ops_.linear(slice.data(), head_in.data(), lm_head_, nullptr, R, E, Vs, threads_);
  JOURNEY_TRACE(sink, Stage::logits_partial, -1, trace_view(slice, {R, Vs}));
  if (communicator_->rank() == 0) {
    out.logits.resize(size_t(R * V));  // [R, V]
    communicator_->gather_columns(out.logits.data(), slice.data(), R, Vs);
    JOURNEY_TRACE(sink, Stage::logits, -1, trace_view(out.logits, {R, V}));
  } else {
    communicator_->gather_columns(nullptr, slice.data(), R, Vs);
    out.vocab_size = Vs;
    out.logits.assign(slice.begin(), slice.end());
  }
  return out;
}

std::unique_ptr<Backend> make_cpu_backend(const LoadedModel& model, const CpuOptions& options) {
  return make_cpu_backend(model, options, CpuOps{});
}

std::unique_ptr<Backend> make_cpu_backend(const LoadedModel& model, const CpuOptions& options, const CpuOps& ops) {
  cpu::kernels::kernel_choice();  // JOURNEY_CPU_ISA is read here, outside any thread region: a bad value fails now
  return std::make_unique<CpuBackend>(model, options, ops);
}

}  // namespace journey
