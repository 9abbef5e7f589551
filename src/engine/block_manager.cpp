#include "engine/block_manager.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace journey {

namespace {
// splitmix64's finalizer: a cheap, well-mixed 64-bit step.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t hash_block_tokens(uint64_t parent_hash, const int32_t* tokens, int64_t count) {
  uint64_t h = mix64(parent_hash ^ 0x6a6f75726e6579ULL);  // "journey": the first block's parent is 0
  for (int64_t i = 0; i < count; ++i) h = mix64(h ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching) {
  if (num_blocks <= 0) fail("KV cache: need at least one block, got ", num_blocks);
  if (block_size <= 0) fail("KV cache: block size must be positive, got ", block_size);
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < static_cast<int32_t>(num_blocks); ++b) {
    free_list_.push_back(b);
    blocks_[b].free_position = std::prev(free_list_.end());
  }
}

std::vector<uint64_t> BlockManager::full_block_hashes(const Sequence& seq, int64_t n_blocks) const {
  std::vector<uint64_t> hashes;  // [n_blocks]
  hashes.reserve(static_cast<size_t>(n_blocks));
  uint64_t parent = 0;
  for (int64_t i = 0; i < n_blocks; ++i) {
    parent = i < static_cast<int64_t>(seq.block_hashes.size())
                 ? seq.block_hashes[i]
                 : hash_block_tokens(parent, seq.tokens.data() + i * block_size_, block_size_);
    hashes.push_back(parent);
  }
  return hashes;
}

int32_t BlockManager::lookup(uint64_t hash, const int32_t* tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return -1;
  const Block& block = blocks_[it->second];
  // A 64-bit collision is unlikely but would silently corrupt output: compare the tokens too.
  if (std::memcmp(block.tokens.data(), tokens, sizeof(int32_t) * block_size_) != 0) return -1;
  return it->second;
}

int32_t BlockManager::take_free_block() {
  if (free_list_.empty()) fail("KV cache: no free block (internal: caller must check first)");
  int32_t id = free_list_.front();
  free_list_.pop_front();
  Block& block = blocks_[id];
  if (block.hashed) {  // its cached prefix is evicted now
    auto it = cached_.find(block.hash);
    if (it != cached_.end() && it->second == id) cached_.erase(it);
    block.hashed = false;
    block.tokens.clear();
    ++evictions_;
  }
  block.ref_count = 1;
  block.filled = 0;
  return id;
}

void BlockManager::acquire_cached(int32_t id) {
  Block& block = blocks_[id];
  if (block.ref_count == 0) free_list_.erase(block.free_position);
  ++block.ref_count;
}

void BlockManager::release(int32_t id) {
  Block& block = blocks_[id];
  if (block.ref_count <= 0) fail("KV cache: block ", id, " released more often than acquired");
  if (--block.ref_count > 0) return;
  block.filled = 0;
  // Cached blocks queue up for eviction (later = kept longer); plain blocks are reused first.
  if (block.hashed) {
    free_list_.push_back(id);
    block.free_position = std::prev(free_list_.end());
  } else {
    free_list_.push_front(id);
    block.free_position = free_list_.begin();
  }
}

int64_t BlockManager::cached_prefix_tokens(const Sequence& seq) const {
  if (!enable_prefix_caching_) return 0;
  int64_t n_full = seq.num_tokens() / block_size_;
  std::vector<uint64_t> hashes = full_block_hashes(seq, n_full);
  int64_t hits = 0;
  while (hits < n_full && lookup(hashes[hits], seq.tokens.data() + hits * block_size_) >= 0) ++hits;
  return std::min(hits * block_size_, seq.num_tokens() - 1);
}

bool BlockManager::cow_needed(const Sequence& seq, int64_t num_new_tokens) const {
  (void)num_new_tokens;
  // Only the block holding position num_computed can be both in the table and written:
  // later table blocks do not exist yet, earlier ones are not written again.
  int64_t first = seq.num_computed_tokens / block_size_;
  return first < static_cast<int64_t>(seq.block_table.size()) && blocks_[seq.block_table[first]].ref_count > 1;
}

int64_t BlockManager::blocks_needed_to_append(const Sequence& seq, int64_t num_new_tokens) const {
  int64_t have = static_cast<int64_t>(seq.block_table.size());
  int64_t want = blocks_for_tokens(seq.num_computed_tokens + num_new_tokens);
  return std::max<int64_t>(0, want - have) + (cow_needed(seq, num_new_tokens) ? 1 : 0);
}

bool BlockManager::append_slots(Sequence& seq, int64_t num_new_tokens, std::vector<BlockCopy>& copies) {
  if (blocks_needed_to_append(seq, num_new_tokens) > num_free_blocks()) return false;
  if (cow_needed(seq, num_new_tokens)) {
    size_t index = static_cast<size_t>(seq.num_computed_tokens / block_size_);
    int32_t shared = seq.block_table[index];
    int32_t own = take_free_block();
    blocks_[own].filled = blocks_[shared].filled;
    copies.push_back({shared, own});
    release(shared);  // still referenced by the other readers
    seq.block_table[index] = own;
    ++copy_on_writes_;
  }
  int64_t want = blocks_for_tokens(seq.num_computed_tokens + num_new_tokens);
  while (static_cast<int64_t>(seq.block_table.size()) < want) seq.block_table.push_back(take_free_block());
  return true;
}

bool BlockManager::allocate(Sequence& seq, int64_t num_new_tokens, std::vector<BlockCopy>& copies) {
  if (!seq.block_table.empty()) fail("KV cache: sequence ", seq.id, " is allocated twice");
  if (seq.num_tokens() == 0) fail("KV cache: sequence ", seq.id, " has no tokens");
  // 1. Which leading full blocks are already cached?
  int64_t n_full = seq.num_tokens() / block_size_;
  std::vector<uint64_t> hashes = full_block_hashes(seq, n_full);  // [n_full]
  std::vector<int32_t> hits;                                      // [n_hit] cached block ids
  if (enable_prefix_caching_) {
    for (int64_t i = 0; i < n_full; ++i) {
      int32_t b = lookup(hashes[i], seq.tokens.data() + i * block_size_);
      if (b < 0) break;
      hits.push_back(b);
    }
  }
  int64_t n_hit = static_cast<int64_t>(hits.size());
  // At least one token runs through the model, so the last prompt position produces logits.
  int64_t cached = std::min(n_hit * block_size_, seq.num_tokens() - 1);
  int64_t rest = seq.num_tokens() - cached;
  int64_t n_new = num_new_tokens <= 0 ? rest : std::min(num_new_tokens, rest);
  // 2. Does the free pool cover it? Hit blocks sitting in the free list count against it.
  int64_t from_free = 0;
  for (int32_t b : hits) from_free += blocks_[b].ref_count == 0 ? 1 : 0;
  int64_t fresh = std::max<int64_t>(0, blocks_for_tokens(cached + n_new) - n_hit);
  bool rewrites_hit = cached < n_hit * block_size_;  // the last cached block gets position num_tokens-1 again
  bool cow = rewrites_hit && blocks_[hits.back()].ref_count > 0;
  if (from_free + fresh + (cow ? 1 : 0) > num_free_blocks()) return false;
  // 3. Commit.
  prefix_queries_ += seq.num_tokens();
  prefix_hits_ += cached;
  for (int32_t b : hits) {
    acquire_cached(b);
    seq.block_table.push_back(b);
  }
  seq.num_computed_tokens = cached;
  seq.num_cached_tokens = cached;
  seq.block_hashes.assign(hashes.begin(), hashes.begin() + cached / block_size_);
  bool ok = append_slots(seq, n_new, copies);
  if (!ok) fail("KV cache: internal accounting error while allocating sequence ", seq.id);
  return true;
}

void BlockManager::mark_computed(Sequence& seq) {
  int64_t computed = seq.num_computed_tokens;
  for (size_t i = 0; i < seq.block_table.size(); ++i) {
    int64_t filled = std::clamp<int64_t>(computed - static_cast<int64_t>(i) * block_size_, 0, block_size_);
    Block& block = blocks_[seq.block_table[i]];
    block.filled = std::max(block.filled, filled);
  }
  int64_t n_full = computed / block_size_;
  while (static_cast<int64_t>(seq.block_hashes.size()) < n_full) {
    size_t i = seq.block_hashes.size();
    uint64_t parent = i == 0 ? 0 : seq.block_hashes[i - 1];
    uint64_t h = hash_block_tokens(parent, seq.tokens.data() + i * block_size_, block_size_);
    seq.block_hashes.push_back(h);
    Block& block = blocks_[seq.block_table[i]];
    // Register a newly completed block, unless it already is, or an identical one is cached
    // (two equal prompts computed side by side: the first one stays the cached copy).
    if (enable_prefix_caching_ && !block.hashed && cached_.find(h) == cached_.end()) {
      block.hashed = true;
      block.hash = h;
      block.tokens.assign(seq.tokens.begin() + static_cast<int64_t>(i) * block_size_,
                          seq.tokens.begin() + static_cast<int64_t>(i + 1) * block_size_);
      cached_[h] = seq.block_table[i];
    }
  }
}

void BlockManager::free(Sequence& seq) {
  // Last block first: it is the least likely to be shared, so it should be evicted first.
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) release(*it);
  seq.block_table.clear();
  seq.block_hashes.clear();
  seq.num_computed_tokens = 0;
}

std::pair<int32_t, int64_t> BlockManager::locate(const Sequence& seq, int64_t position) const {
  int64_t index = position / block_size_;
  if (position < 0 || index >= static_cast<int64_t>(seq.block_table.size()))
    fail("KV cache: position ", position, " of sequence ", seq.id, " has no block (table holds ",
         seq.block_table.size(), " blocks of ", block_size_, ")");
  return {seq.block_table[index], position % block_size_};
}

int64_t BlockManager::slot(const Sequence& seq, int64_t position) const {
  auto [block, offset] = locate(seq, position);
  return static_cast<int64_t>(block) * block_size_ + offset;
}

BlockManagerStats BlockManager::stats() const {
  BlockManagerStats s;
  s.num_blocks = num_blocks();
  s.free_blocks = num_free_blocks();
  s.used_blocks = s.num_blocks - s.free_blocks;
  for (const Block& block : blocks_) {
    if (block.ref_count == 0 && block.hashed) ++s.cached_free_blocks;
    if (block.ref_count > 0) s.filled_slots += block.filled;
  }
  s.allocated_slots = s.used_blocks * block_size_;
  s.prefix_queries = prefix_queries_;
  s.prefix_hits = prefix_hits_;
  s.evictions = evictions_;
  s.copy_on_writes = copy_on_writes_;
  return s;
}

}  // namespace journey
