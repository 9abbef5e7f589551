// Which part of the model one rank of a tensor-parallel group holds (Megatron-LM's split, as vLLM
// and llama.cpp's row split do it):
//
//   q_proj, k_proj, v_proj  [H*D, E], [KVH*D, E]   output rows of this rank's heads / KV heads
//   o_proj                  [E, H*D]                input columns of this rank's heads
//   gate_proj, up_proj      [F, E]                  output rows [ffn_begin, ffn_begin + ffn_columns)
//   down_proj               [E, F]                  the same range of input columns
//   lm_head                 [V, E]                  vocabulary rows [vocab_begin, vocab_begin + vocab_rows)
//   embeddings, norms       replicated
//
// So each rank computes a partial sum of the attention output and of the FFN output ([N, E] each),
// and one all-reduce per sublayer adds them up. When there are more ranks than KV heads, each KV
// head is held by size / KVH ranks (the ranks whose query heads read it), as vLLM does.
#pragma once
#include <cstdint>
#include <string>

#include "assets/weights.h"
#include "core/config.h"

namespace journey {

struct TensorParallelShard {
  int rank = 0, size = 1;
  int64_t head_begin = 0, heads = 0;        // query heads [head_begin, head_begin + heads)
  int64_t kv_head_begin = 0, kv_heads = 0;  // KV heads [kv_head_begin, kv_head_begin + kv_heads)
  int64_t ffn_begin = 0, ffn_columns = 0;   // FFN columns (gate/up rows, down columns)
  int64_t vocab_begin = 0, vocab_rows = 0;  // LM head rows (vocabulary ids)
  bool kv_replicated = false;               // size > KVH: this rank's KV head is also on other ranks

  // "rank 1 of 2: heads 4-7, KV heads 2-3, FFN columns 86-171, vocabulary 256-511"
  std::string describe() const;
};

// The shard of `rank` in a group of `size` over the model `c` (head_dim already resolved). Throws
// journey::Error naming the numbers when the split is not whole: heads, KV heads (or size a
// multiple of them), FFN columns and vocabulary must divide by `size`. `where`: the model path.
TensorParallelShard plan_shard(const ModelConfig& c, int rank, int size, const std::string& where);

// A rank's slice of a stored weight, as a TensorRef that a backend's loader reads like the whole
// tensor (the CPU backend uses it in place or copies it; the CUDA backend uploads it). The split
// itself (which rows, which columns) comes from the shard above; these only cut the bytes.
//
// Output rows [begin, begin + n) of a matrix [rows, in] (q/k/v, gate/up, the LM head), or elements
// [begin, begin + n) of a vector (a bias): contiguous, so a view of the same bytes.
TensorRef shard_rows(const TensorRef& t, int64_t begin, int64_t n);
// Bytes of input columns [begin, begin + n) of every row of t (o_proj and down_proj): [rows, n] in
// the stored type. Fails naming the tensor, its type and the block size when the range would cut
// a stored block of 32 or 256 values (`tp_size`: the group size, for the message).
size_t shard_columns_bytes(const TensorRef& t, int64_t begin, int64_t n, int tp_size);
// Those columns, copied row by row into `storage` (shard_columns_bytes of them); the view points
// into it, so `storage` must outlive it.
TensorRef shard_columns(const TensorRef& t, int64_t begin, int64_t n, int tp_size, std::byte* storage);

}  // namespace journey
