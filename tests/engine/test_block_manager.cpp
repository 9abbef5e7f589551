// BlockManager on its own: slot mapping, reference counts, the chain-hashed prefix cache,
// LRU eviction of freed cached blocks and copy-on-write.
#include <doctest/doctest.h>

#include <numeric>
#include <set>

#include "core/error.h"
#include "engine/block_manager.h"

using namespace journey;

namespace {
Sequence make_seq(int64_t id, std::vector<int32_t> tokens, int64_t max_new = 8) {
  Sequence s;
  s.id = id;
  s.tokens = std::move(tokens);
  s.num_prompt_tokens = s.num_tokens();
  s.max_total_tokens = s.num_tokens() + max_new;
  return s;
}
std::vector<int32_t> range_tokens(int32_t first, int64_t count) {
  std::vector<int32_t> t(static_cast<size_t>(count));
  std::iota(t.begin(), t.end(), first);
  return t;
}
// Pretend the forward pass ran over everything allocated so far.
void compute_all(BlockManager& bm, Sequence& s) {
  s.num_computed_tokens = s.num_tokens();
  bm.mark_computed(s);
}
}  // namespace

TEST_CASE("slot mapping follows the block table") {
  BlockManager bm(8, 4);
  Sequence s = make_seq(1, range_tokens(100, 10));
  std::vector<BlockCopy> copies;
  REQUIRE(bm.allocate(s, 0, copies));
  CHECK(copies.empty());
  REQUIRE(s.block_table.size() == 3);  // ceil(10 / 4)
  for (int64_t p = 0; p < 10; ++p) {
    auto [block, offset] = bm.locate(s, p);
    CHECK(block == s.block_table[p / 4]);
    CHECK(offset == p % 4);
    CHECK(bm.slot(s, p) == block * 4 + offset);
  }
  CHECK_THROWS_AS(bm.locate(s, 12), Error);  // no block yet
  std::set<int32_t> distinct(s.block_table.begin(), s.block_table.end());
  CHECK(distinct.size() == 3);
  CHECK(bm.num_free_blocks() == 5);
  bm.free(s);
  CHECK(bm.num_free_blocks() == 8);
  CHECK(s.block_table.empty());
}

TEST_CASE("allocation fails cleanly when the pool is short, and changes nothing") {
  BlockManager bm(2, 4);
  Sequence s = make_seq(1, range_tokens(0, 9));  // needs 3 blocks
  std::vector<BlockCopy> copies;
  CHECK_FALSE(bm.allocate(s, 0, copies));
  CHECK(s.block_table.empty());
  CHECK(bm.num_free_blocks() == 2);
  // A chunk that fits is fine: only the first 8 positions get blocks.
  CHECK(bm.allocate(s, 8, copies));
  CHECK(s.block_table.size() == 2);
  CHECK(bm.blocks_needed_to_append(s, 9) == 1);
}

TEST_CASE("prefix cache: a shared prompt prefix reuses full blocks") {
  BlockManager bm(16, 16);
  std::vector<BlockCopy> copies;
  Sequence a = make_seq(1, range_tokens(1000, 40));
  REQUIRE(bm.allocate(a, 0, copies));
  compute_all(bm, a);
  CHECK(a.block_hashes.size() == 2);  // two full blocks registered

  // b shares a's first 35 tokens: the two full blocks (32 tokens) come from the cache.
  std::vector<int32_t> tb = range_tokens(1000, 35);
  for (int32_t t : range_tokens(5000, 10)) tb.push_back(t);
  Sequence b = make_seq(2, tb);
  CHECK(bm.cached_prefix_tokens(b) == 32);
  REQUIRE(bm.allocate(b, 0, copies));
  CHECK(b.num_computed_tokens == 32);
  CHECK(b.block_table[0] == a.block_table[0]);
  CHECK(b.block_table[1] == a.block_table[1]);
  CHECK(b.block_table[2] != a.block_table[2]);  // the partial third block is private
  CHECK(bm.ref_count(a.block_table[0]) == 2);
  CHECK(copies.empty());

  // The same 16 tokens in a different position (after another first block) are NOT a hit:
  // the hash chains over everything before the block.
  std::vector<int32_t> tc = range_tokens(7000, 16);
  for (int32_t t : range_tokens(1016, 16)) tc.push_back(t);
  tc.push_back(1);
  Sequence c = make_seq(3, tc);
  CHECK(bm.cached_prefix_tokens(c) == 0);

  BlockManagerStats st = bm.stats();
  CHECK(st.prefix_queries == 40 + 45);
  CHECK(st.prefix_hits == 32);
  bm.free(a);
  bm.free(b);
  CHECK(bm.num_free_blocks() == 16);
}

TEST_CASE("prefix cache: a fully cached prompt recomputes its last token, with copy-on-write") {
  BlockManager bm(8, 4);
  std::vector<BlockCopy> copies;
  Sequence a = make_seq(1, range_tokens(10, 8));  // exactly two full blocks
  REQUIRE(bm.allocate(a, 0, copies));
  compute_all(bm, a);
  a.tokens.push_back(99);  // a decodes on into a third block
  REQUIRE(bm.append_slots(a, 1, copies));
  CHECK(copies.empty());

  Sequence b = make_seq(2, range_tokens(10, 8));
  REQUIRE(bm.allocate(b, 0, copies));
  CHECK(b.num_computed_tokens == 7);  // one token is always computed so logits exist
  CHECK(b.block_table[0] == a.block_table[0]);
  // Position 7 lives in a's second block, which a still reads: b must get its own copy.
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].src == a.block_table[1]);
  CHECK(copies[0].dst == b.block_table[1]);
  CHECK(b.block_table[1] != a.block_table[1]);
  CHECK(bm.ref_count(a.block_table[1]) == 1);
  CHECK(bm.stats().copy_on_writes == 1);

  // When nobody else holds the cached block, b may rewrite it in place (same token, same slot).
  bm.free(a);
  bm.free(b);
  copies.clear();
  Sequence c = make_seq(3, range_tokens(10, 8));
  REQUIRE(bm.allocate(c, 0, copies));
  CHECK(c.num_computed_tokens == 7);
  CHECK(copies.empty());
  bm.free(c);
  CHECK(bm.num_free_blocks() == 8);
}

TEST_CASE("freed cached blocks stay reusable until evicted, least recently freed first") {
  BlockManager bm(4, 4);
  std::vector<BlockCopy> copies;
  Sequence a = make_seq(1, range_tokens(0, 8));
  REQUIRE(bm.allocate(a, 0, copies));
  compute_all(bm, a);
  bm.free(a);
  CHECK(bm.num_free_blocks() == 4);
  CHECK(bm.stats().cached_free_blocks == 2);

  Sequence again = make_seq(2, range_tokens(0, 9));
  CHECK(bm.cached_prefix_tokens(again) == 8);

  // Two blocks of new content use the two never-cached blocks first: a's prefix survives.
  Sequence other = make_seq(3, range_tokens(500, 8));
  REQUIRE(bm.allocate(other, 0, copies));
  CHECK(bm.cached_prefix_tokens(again) == 8);
  CHECK(bm.stats().evictions == 0);
  // Two more blocks must evict a's blocks: the prefix is gone.
  Sequence third = make_seq(4, range_tokens(900, 8));
  REQUIRE(bm.allocate(third, 0, copies));
  CHECK(bm.stats().evictions == 2);
  CHECK(bm.cached_prefix_tokens(again) == 0);
  bm.free(other);
  bm.free(third);
  CHECK(bm.num_free_blocks() == 4);
}

TEST_CASE("prefix caching can be switched off") {
  BlockManager bm(8, 4, /*enable_prefix_caching=*/false);
  std::vector<BlockCopy> copies;
  Sequence a = make_seq(1, range_tokens(0, 8));
  REQUIRE(bm.allocate(a, 0, copies));
  compute_all(bm, a);
  Sequence b = make_seq(2, range_tokens(0, 8));
  CHECK(bm.cached_prefix_tokens(b) == 0);
  REQUIRE(bm.allocate(b, 0, copies));
  CHECK(b.num_computed_tokens == 0);
}

TEST_CASE("bad configurations are errors") {
  CHECK_THROWS_AS(BlockManager(0, 16), Error);
  CHECK_THROWS_AS(BlockManager(4, 0), Error);
}
