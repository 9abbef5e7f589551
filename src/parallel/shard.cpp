#include "parallel/shard.h"

#include <cstring>

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

TensorRef shard_rows(const TensorRef& t, int64_t begin, int64_t n) {
  if (t.shape.empty()) fail("tensor ", t.name, " in ", t.source, ": a scalar has no rows to split");
  const int64_t rows = t.shape[0];
  if (begin < 0 || n < 0 || begin + n > rows)
    fail("tensor ", t.name, " in ", t.source, ": rows [", begin, ", ", begin + n, ") lie outside its ", rows, " rows");
  // (a vector's "rows" are its elements: one value each)
  const int64_t row_length = t.shape.size() == 1 ? 1 : t.numel() / rows;
  TensorRef slice = t;
  slice.shape[0] = n;
  if (t.shape.size() == 1 && dtype_block_size(t.dtype) != 1)
    fail("tensor ", t.name, " in ", t.source, " (", dtype_name(t.dtype), "): a vector of stored blocks cannot be split");
  const size_t row_bytes = size_t(dtype_bytes_for(t.dtype, row_length));
  slice.data = t.data + size_t(begin) * row_bytes;
  slice.nbytes = size_t(n) * row_bytes;
  return slice;
}

size_t shard_columns_bytes(const TensorRef& t, int64_t begin, int64_t n, int tp_size) {
  if (t.shape.size() != 2) fail("tensor ", t.name, " in ", t.source, ": only a matrix has input columns to split");
  const int64_t rows = t.shape[0], in = t.shape[1], block = dtype_block_size(t.dtype);
  if (begin < 0 || n < 0 || begin + n > in)
    fail("tensor ", t.name, " in ", t.source, ": columns [", begin, ", ", begin + n, ") lie outside its ", in,
         " input columns");
  if (begin % block != 0 || n % block != 0)
    fail("tensor ", t.name, " in ", t.source, " (", dtype_name(t.dtype), "): --tensor-parallel ", tp_size,
         " splits its ", in, " input columns into ", n, " per rank, which is not a multiple of the ",
         dtype_name(t.dtype), " block size ", block, "; a stored block cannot be split across ranks (choose a size ",
         "that leaves a whole number of blocks per rank)");
  return size_t(dtype_bytes_for(t.dtype, n)) * size_t(rows);
}

TensorRef shard_columns(const TensorRef& t, int64_t begin, int64_t n, int tp_size, std::byte* storage) {
  const size_t bytes = shard_columns_bytes(t, begin, n, tp_size);
  const int64_t rows = t.shape[0], in = t.shape[1];
  const size_t row_bytes = size_t(dtype_bytes_for(t.dtype, in));
  const size_t skip = size_t(dtype_bytes_for(t.dtype, begin)), keep = size_t(dtype_bytes_for(t.dtype, n));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(storage + size_t(r) * keep, t.data + size_t(r) * row_bytes + skip, keep);
  TensorRef slice = t;
  slice.shape[1] = n;
  slice.data = storage;
  slice.nbytes = bytes;
  return slice;
}

}  // namespace journey
