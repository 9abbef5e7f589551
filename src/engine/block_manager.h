// The paged KV cache's bookkeeping (vLLM's BlockManager / KVCacheManager, nano-vllm's
// block_manager.py). The backend owns the memory: num_blocks blocks of block_size token slots.
// This class only decides which block holds which positions of which sequence:
//
//  - a sequence's block_table[i] is the block holding its positions [i*B, (i+1)*B);
//    slot(position) = block_table[position / B] * B + position % B  (vLLM's slot_mapping);
//  - blocks carry reference counts, so several sequences can read the same block;
//  - automatic prefix caching: a FULL block whose K/V are computed is registered under a chain
//    hash (hash of the previous block's hash and its own tokens). A new sequence whose leading
//    full blocks hash the same reuses them instead of recomputing them. Freed blocks keep their
//    hash and stay reusable until the allocator needs them (least recently freed goes first);
//  - copy-on-write: a block about to be written while another sequence reads it is copied first.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/sequence.h"

namespace journey {

// Chain hash of one full block: depends on every token before it through parent_hash.
uint64_t hash_block_tokens(uint64_t parent_hash, const int32_t* tokens, int64_t count);

struct BlockManagerStats {
  int64_t num_blocks = 0;
  int64_t used_blocks = 0;          // ref_count > 0
  int64_t free_blocks = 0;          // ref_count == 0 (some of them still hold cached prefixes)
  int64_t cached_free_blocks = 0;   // free blocks that still hold a reusable prefix
  int64_t prefix_queries = 0;       // prompt tokens looked up in the prefix cache (admissions)
  int64_t prefix_hits = 0;          // of those, tokens found cached
  int64_t evictions = 0;            // cached blocks handed out for new content
  int64_t copy_on_writes = 0;
  int64_t allocated_slots = 0;      // used_blocks * block_size
  int64_t filled_slots = 0;         // slots of used blocks that hold a computed token
};

// A block copy the backend must perform before the next forward (copy-on-write).
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching = true);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_list_.size()); }
  int64_t blocks_for_tokens(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Admission of a sequence with an empty block table. Looks up its leading full blocks in the
  // prefix cache and takes those (always leaving at least one token to compute, so logits exist),
  // then allocates fresh blocks so that positions [0, num_computed + num_new_tokens) are covered.
  // Returns false and changes nothing when the free pool cannot cover it.
  // num_new_tokens <= 0 means "the whole uncached rest of the sequence".
  bool allocate(Sequence& seq, int64_t num_new_tokens, std::vector<BlockCopy>& copies);

  // How many tokens of seq the prefix cache would supply right now (no side effects).
  int64_t cached_prefix_tokens(const Sequence& seq) const;

  // Grow a running sequence's table so the next num_new_tokens positions have slots; copy a
  // shared block that would be written (appending to copies). False (and nothing changed) when
  // the pool is short; the scheduler then preempts.
  bool append_slots(Sequence& seq, int64_t num_new_tokens, std::vector<BlockCopy>& copies);
  // Blocks append_slots would need from the free pool.
  int64_t blocks_needed_to_append(const Sequence& seq, int64_t num_new_tokens) const;

  // After a forward pass computed seq's tokens up to seq.num_computed_tokens: record fill levels
  // and register newly completed full blocks in the prefix cache.
  void mark_computed(Sequence& seq);

  // Release every block of seq (finished, aborted or preempted). Hashed blocks stay cached.
  void free(Sequence& seq);

  // (block, offset) of a position of seq, and its flat slot index block * B + offset.
  std::pair<int32_t, int64_t> locate(const Sequence& seq, int64_t position) const;
  int64_t slot(const Sequence& seq, int64_t position) const;

  int32_t ref_count(int32_t block) const { return blocks_.at(block).ref_count; }
  BlockManagerStats stats() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    bool hashed = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // [block_size] the tokens it holds once hashed (verifies hits)
    int64_t filled = 0;           // slots holding a computed token
    std::list<int32_t>::iterator free_position;  // where it sits in free_list_ (ref_count == 0)
  };

  // Chain hashes of the first n_blocks full blocks of seq's tokens.
  std::vector<uint64_t> full_block_hashes(const Sequence& seq, int64_t n_blocks) const;
  // The cached block holding exactly these tokens under this hash, or -1.
  int32_t lookup(uint64_t hash, const int32_t* tokens) const;
  int32_t take_free_block();         // least recently freed; drops its stale hash
  void acquire_cached(int32_t block);  // ref_count++ (leaving the free list if it was there)
  void release(int32_t block);
  bool cow_needed(const Sequence& seq, int64_t num_new_tokens) const;

  int64_t block_size_;
  bool enable_prefix_caching_;
  std::vector<Block> blocks_;                       // [num_blocks]
  std::list<int32_t> free_list_;                    // front = evicted first
  std::unordered_map<uint64_t, int32_t> cached_;    // chain hash -> block
  int64_t prefix_queries_ = 0, prefix_hits_ = 0, evictions_ = 0, copy_on_writes_ = 0;
};

}  // namespace journey
