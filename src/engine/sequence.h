// A Sequence is what the scheduler and the block manager see of a request: its tokens, how many
// of them already have K/V in the cache, and the block table that says where. Everything about
// HOW to sample or stream lives with the engine (llm_engine.h), not here.
#pragma once
#include <cstdint>
#include <vector>

namespace journey {

enum class SequenceStatus { Waiting, Running, Finished };

struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;          // [num_tokens] prompt, then generated tokens
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;      // leading tokens whose K/V are written in the cache
  int64_t max_total_tokens = 0;         // prompt + max new tokens: the most slots it can ever need
  std::vector<int32_t> block_table;     // [n_blocks] KV block of positions [i*B, (i+1)*B)
  std::vector<uint64_t> block_hashes;   // [n_full_computed_blocks] chain hash of each full, computed block
  SequenceStatus status = SequenceStatus::Waiting;
  int64_t num_cached_tokens = 0;        // tokens taken from the prefix cache at the last admission
  int num_preemptions = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // Tokens still to run through the model before the next token can be sampled.
  int64_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
};

}  // namespace journey
