// The one seam between "what to run" (scheduler, generation loop, server) and "how to run it"
// (the CPU reference in src/reference, the CUDA path in src/cuda). A backend runs one forward
// step over a batch of sequences whose K/V live in a paged cache: fixed-size blocks, and each
// sequence's block table maps its positions to slots (vLLM's vocabulary: block_table, slot).
// A contiguous per-sequence cache is the special case of one sequence owning blocks 0, 1, 2, ...
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"

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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
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
};

}  // namespace journey
