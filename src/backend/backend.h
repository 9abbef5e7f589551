// The one seam between "what to run" (scheduler, generation loop, server) and "how to run it"
// (the literal reference in src/reference, the fast CPU path in src/cpu, the CUDA path in src/cuda).
// It sits in its own low module (it depends on core only) so that every backend and the engine
// include it without depending on each other. A backend runs one forward
// step over a batch of sequences whose K/V live in a paged cache: fixed-size blocks, and each
// sequence's block table maps its positions to slots (vLLM's vocabulary: block_table, slot).
// A contiguous per-sequence cache is the special case of one sequence owning blocks 0, 1, 2, ...
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/device_sampling.h"
#include "core/config.h"
#include "core/dtype.h"
#include "core/error.h"

namespace journey {

class TraceSink;

struct SequenceInput {
  int64_t seq_id = 0;
  std::vector<int32_t> tokens;       // [T] tokens fed this step (prefill chunk, or 1 for decode)
  int64_t start_position = 0;        // position of tokens[0]; positions [0, start) are already cached
  std::vector<int32_t> block_table;  // [n_blocks] KV blocks covering positions [0, start + T)
  bool all_logits = false;           // logits for every token (tests, traces) instead of the last only
};

struct ForwardBatch {
  std::vector<SequenceInput> sequences;
};

struct ForwardOutput {
  int64_t vocab_size = 0;
  std::vector<float> logits;          // [rows, vocab_size] row-major
  std::vector<int64_t> row_begin;     // per sequence: first row of its logits (size = sequences + 1)
  const float* row(int64_t r) const { return logits.data() + r * vocab_size; }
  // The logits of sequence i's last token.
  const float* last_row(size_t i) const { return row(row_begin[i + 1] - 1); }
};

// What every backend checks when it is built: positive sizes, whole query groups per KV head (GQA)
// and an even head_dim (RoPE rotates pairs). Returns head_dim (config's, else hidden / heads).
// Throws journey::Error naming `where` (the model path) and the offending fields.
inline int64_t validate_model_shape(const ModelConfig& c, const std::string& where) {
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 ||
      c.num_kv_heads <= 0 || c.vocab_size <= 0)
    fail(where, ": config has a non-positive size (hidden ", c.hidden_size, ", intermediate ", c.intermediate_size,
         ", layers ", c.num_layers, ", heads ", c.num_heads, ", kv heads ", c.num_kv_heads, ", vocab ", c.vocab_size,
         ")");
  if (c.num_heads % c.num_kv_heads != 0)
    fail(where, ": num_attention_heads (", c.num_heads, ") is not a multiple of num_key_value_heads (",
         c.num_kv_heads, ")");
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_heads;
  if (head_dim % 2 != 0) fail(where, ": head_dim ", head_dim, " is odd; rotary embeddings rotate pairs of dimensions");
  return head_dim;
}

// What every backend checks before a forward pass: a KV pool exists, every sequence feeds tokens
// with ids in [0, V), stays inside the context, and has a block table covering its positions with
// blocks inside the pool. Throws journey::Error naming the sequence, the field and the bound.
inline void validate_forward_batch(const ForwardBatch& batch, const ModelConfig& config, int64_t num_blocks,
                                   int64_t block_size) {
  if (num_blocks == 0) fail("forward: the KV cache is not allocated (call allocate_kv_cache first)");
  if (batch.sequences.empty()) fail("forward: the batch holds no sequences");
  const int64_t V = config.vocab_size;
  for (const SequenceInput& s : batch.sequences) {
    const int64_t T = int64_t(s.tokens.size());
    if (T == 0) fail("forward: sequence ", s.seq_id, " feeds no tokens");
    if (s.start_position < 0) fail("forward: sequence ", s.seq_id, " has start_position ", s.start_position);
    const int64_t end = s.start_position + T;
    if (config.max_position_embeddings > 0 && end > config.max_position_embeddings)
      fail("forward: sequence ", s.seq_id, " reaches position ", end - 1, " but the model's context is ",
           config.max_position_embeddings, " positions");
    for (int32_t id : s.tokens)
      if (id < 0 || id >= V) fail("forward: sequence ", s.seq_id, " has token id ", id, " outside [0, ", V, ")");
    const int64_t blocks_needed = (end + block_size - 1) / block_size;
    if (int64_t(s.block_table.size()) < blocks_needed)
      fail("forward: sequence ", s.seq_id, " covers positions [0, ", end, ") with block size ", block_size,
           " and needs ", blocks_needed, " blocks, but its block table has ", s.block_table.size());
    for (int64_t b = 0; b < blocks_needed; ++b)
      if (s.block_table[b] < 0 || s.block_table[b] >= num_blocks)
        fail("forward: sequence ", s.seq_id, " block table entry ", b, " is ", s.block_table[b],
             ", outside the pool [0, ", num_blocks, ")");
  }
}

// Told (bytes done, bytes in all) while a backend loads its weights, for a progress line
// (cli/backend_select.cpp's ProgressLine: on a terminal, when loading takes over a second). Called on the loading thread.
using LoadProgress = std::function<void(int64_t done, int64_t total)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "reference", "cpu", "cuda"
  // The type the matrices are multiplied in (f32 for the CPU backends; bf16 by default on CUDA):
  // traces record it so that a diff judges a bf16 run by bf16 tolerances.
  virtual DType weight_dtype() const { return DType::F32; }
  // The types the model stores its weights in, "q4_K x 133, q6_K x 23, f32 x 45" (assets'
  // weight_type_summary): a Q4_K_M run is not an f32 run even where it multiplies in f32, and a
  // trace must say so ("" where unknown).
  virtual std::string stored_weight_types() const { return ""; }
  virtual const ModelConfig& config() const = 0;
  // (Re)allocate the KV pool: num_blocks blocks of block_size token slots, for every layer.
  virtual void allocate_kv_cache(int64_t num_blocks, int64_t block_size) = 0;
  virtual int64_t kv_block_size() const = 0;
  virtual int64_t kv_num_blocks() const = 0;
  // Bytes one KV block takes over all layers (K and V), for sizing the pool from a memory budget.
  virtual int64_t kv_block_bytes(int64_t block_size) const = 0;
  // Copy-on-write support: duplicate the contents of block src into block dst (all layers).
  virtual void copy_kv_block(int32_t src, int32_t dst) = 0;
  // One step for all sequences of the batch, as one matrix-matrix pass over all their tokens.
  virtual ForwardOutput forward(const ForwardBatch& batch, TraceSink* sink = nullptr) = 0;

  // Sampling where the logits are: a backend whose logits live in another memory (a GPU) can draw
  // each sequence's next token there and send back only the ids instead of [rows, V] floats.
  // `params` holds one DeviceSampling per sequence (temperature, top-k, top-p and the host's
  // uniform draw u, so a seed picks the same token on every backend). The engine asks
  // samples_on_device() first and uses forward_sample only for requests whose sampling needs
  // nothing else (no penalties, min-p, logit bias or logprobs); the others take forward().
  virtual bool samples_on_device() const { return false; }
  virtual std::vector<int32_t> forward_sample(const ForwardBatch& batch, std::span<const DeviceSampling> params,
                                              TraceSink* sink = nullptr) {
    (void)batch, (void)params, (void)sink;
    fail("backend ", name(), " does not sample on its device; call forward() and sample on the host");
  }
};

}  // namespace journey
