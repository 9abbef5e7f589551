#include "parallel/shard.h"

#include "core/error.h"

namespace journey {

std::string TensorParallelShard::describe() const {
  auto range = [](int64_t begin, int64_t n) { return cat(begin, "-", begin + n - 1); };
  return cat("rank ", rank, " of ", size, ": heads ", range(head_begin, heads), ", KV heads ",
             range(kv_head_begin, kv_heads), kv_replicated ? " (shared with other ranks)" : "", ", FFN columns ",
             range(ffn_begin, ffn_columns), ", vocabulary ", range(vocab_begin, vocab_rows));
}

TensorParallelShard plan_shard(const ModelConfig& c, int rank, int size, const std::string& where) {
  if (size < 1 || rank < 0 || rank >= size) fail("tensor parallel: rank ", rank, " is outside a group of ", size);
  const std::string group = cat("--tensor-parallel ", size);
  if (c.num_heads % size != 0)
    fail(where, ": num_attention_heads (", c.num_heads, ") is not divisible by ", group,
         "; each rank must hold whole heads (choose a size that divides ", c.num_heads, ")");
  if (c.num_kv_heads % size != 0 && size % c.num_kv_heads != 0)
    fail(where, ": num_key_value_heads (", c.num_kv_heads, ") and ", group,
         " do not divide each other; each rank must hold whole KV heads, or one KV head shared by ",
         "a whole number of ranks");
  if (c.intermediate_size % size != 0)
    fail(where, ": intermediate_size (", c.intermediate_size, ") is not divisible by ", group,
         "; each rank holds an equal share of the FFN columns");
  if (c.vocab_size % size != 0)
    fail(where, ": vocab_size (", c.vocab_size, ") is not divisible by ", group,
         "; each rank holds an equal share of the LM head's vocabulary rows");
  TensorParallelShard s;
  s.rank = rank, s.size = size;
  s.heads = c.num_heads / size;
  s.head_begin = rank * s.heads;
  const int64_t group_size = c.num_heads / c.num_kv_heads;  // query heads per KV head
  s.kv_replicated = size > c.num_kv_heads;
  s.kv_heads = s.kv_replicated ? 1 : c.num_kv_heads / size;
  s.kv_head_begin = s.head_begin / group_size;  // the KV head of this rank's first query head
  s.ffn_columns = c.intermediate_size / size;
  s.ffn_begin = rank * s.ffn_columns;
  s.vocab_rows = c.vocab_size / size;
  s.vocab_begin = rank * s.vocab_rows;
  return s;
}

}  // namespace journey
