#include "grammar/token_mask.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "text/tokenizer.h"

namespace journey {

namespace {
using Kind = GrammarElement::Kind;
constexpr int32_t kUnknown = -2;
constexpr int32_t kRefused = -1;
// Memo tables beyond these sizes are dropped between steps (and rebuilt from the current state),
// so a long generation with a large grammar keeps bounded memory.
constexpr size_t kMaxInternedStacks = size_t{1} << 18;  // ~12 MB of stacks and their index
constexpr size_t kMaxInternedStates = size_t{1} << 14;  // up to 16 MB of 256-entry transition rows
constexpr size_t kMaxCachedMasks = 64;
}  // namespace

// ---- the vocabulary as a trie ------------------------------------------------------------------

TokenTrie::TokenTrie(const Tokenizer& tokenizer, int64_t mask_size) : mask_size_(mask_size) {
  if (mask_size <= 0 || mask_size > std::numeric_limits<int32_t>::max()) fail("TokenTrie: bad vocabulary size ", mask_size);
  const int vocab = std::min<int64_t>(tokenizer.vocab_size(), mask_size);
  // token_bytes depends on the previous id only at the start of a text (SentencePiece drops the
  // leading space after BOS); a mask is for text in the middle of a sequence, so any other id will do.
  const std::optional<int> bos = tokenizer.bos_id();
  const int mid_text_previous = bos && *bos == 0 ? 1 : 0;
  byte_offsets_.assign(static_cast<size_t>(mask_size) + 1, 0);
  std::vector<int32_t> with_bytes;  // ids that can appear in grammar-constrained text
  for (int id = 0; id < static_cast<int>(mask_size); ++id) {
    byte_offsets_[size_t(id)] = static_cast<uint32_t>(byte_blob_.size());
    if (id >= vocab || tokenizer.is_special(id)) continue;
    const std::string b = tokenizer.token_bytes(id, mid_text_previous, /*skip_special=*/true);
    if (b.empty() || b.size() > 0xFFFF) continue;
    byte_blob_ += b;
    with_bytes.push_back(id);
  }
  byte_offsets_[size_t(mask_size)] = static_cast<uint32_t>(byte_blob_.size());
  std::sort(with_bytes.begin(), with_bytes.end(), [&](int32_t a, int32_t b) {
    const std::string_view x = bytes(a), y = bytes(b);
    return x != y ? x < y : a < b;
  });
  // Pre-order construction over the sorted strings: keep the path of open nodes; a new string
  // closes the nodes past its common prefix with the previous one and opens the rest.
  std::vector<uint32_t> path;  // node index at each depth - 1
  std::string_view previous;
  for (int32_t id : with_bytes) {
    const std::string_view b = bytes(id);
    size_t common = 0;
    while (common < b.size() && common < previous.size() && b[common] == previous[common]) ++common;
    while (path.size() > common) {
      nodes_[path.back()].skip = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < b.size(); ++d) {
      Node n;
      n.byte = static_cast<uint8_t>(b[d]);
      n.depth = static_cast<uint16_t>(d + 1);
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    Node& last = nodes_[path.back()];
    if (last.num_tokens == 0) last.first_token = static_cast<uint32_t>(ids_.size());
    ids_.push_back(id);
    ++last.num_tokens;
    max_depth_ = std::max(max_depth_, static_cast<int>(b.size()));
    previous = b;
  }
  while (!path.empty()) {
    nodes_[path.back()].skip = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
}

std::string_view TokenTrie::bytes(int32_t id) const {
  if (id < 0 || id >= mask_size_) return {};
  return std::string_view(byte_blob_).substr(byte_offsets_[size_t(id)], byte_offsets_[size_t(id) + 1] - byte_offsets_[size_t(id)]);
}

std::vector<int32_t> TokenMask::ids() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(count));
  for (size_t w = 0; w < bits.size(); ++w)
    for (uint64_t word = bits[w]; word != 0; word &= word - 1) out.push_back(static_cast<int32_t>(w * 64 + __builtin_ctzll(word)));
  return out;
}

// ---- the matcher -------------------------------------------------------------------------------

GrammarMatcher::GrammarMatcher(Grammar grammar, std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_ids)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), end_ids_(std::move(end_ids)) {
  stacks_.push_back({0, 0, 0});  // id 0: the empty stack (everything matched)
  std::vector<int32_t> initial;
  for (uint32_t start : grammar_.rules()[grammar_.root()]) expand(start, 0, initial, 0);
  state_ = intern_state(std::move(initial));
  if (states_[size_t(state_)].empty()) fail("the grammar admits no text at all (e.g. a schema whose every branch is refused)");
}

int32_t GrammarMatcher::intern_stack(uint32_t position, int32_t below) {
  const uint64_t key = (uint64_t{position} << 32) | static_cast<uint32_t>(below);
  auto [it, inserted] = stack_ids_.try_emplace(key, static_cast<int32_t>(stacks_.size()));
  if (inserted) stacks_.push_back({position, below, stacks_[size_t(below)].depth + 1});
  return it->second;
}

// The stack "continue at `position`, then `below`" brought to a form whose top is a byte set (or
// the empty stack): `end` pops, a rule reference pushes each of its alternatives. A reference that
// is the last symbol of its alternative pushes no return frame (a tail call), so right-recursive
// repetition runs in constant stack. `guard` stops a rule that refers to itself without consuming.
void GrammarMatcher::expand(uint32_t position, int32_t below, std::vector<int32_t>& out, int guard) {
  if (guard > 2 * kMaxGrammarStackDepth) return;
  const GrammarElement e = grammar_.elements()[position];
  if (e.kind == Kind::end) {
    if (below == 0) out.push_back(0);
    else expand(stacks_[size_t(below)].position, stacks_[size_t(below)].below, out, guard + 1);
    return;
  }
  if (e.kind == Kind::bytes) {
    out.push_back(intern_stack(position, below));
    return;
  }
  const bool tail = grammar_.elements()[position + 1].kind == Kind::end;
  const int32_t return_to = tail ? below : intern_stack(position + 1, below);
  if (stacks_[size_t(return_to)].depth >= kMaxGrammarStackDepth) return;
  for (uint32_t start : grammar_.rules()[e.index]) expand(start, return_to, out, guard + 1);
  if (out.size() > size_t(kMaxGrammarStacksPerState))
    fail("the grammar is too ambiguous: more than ", kMaxGrammarStacksPerState, " parse stacks at once");
}

int32_t GrammarMatcher::intern_state(std::vector<int32_t> stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  std::string key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(int32_t));
  auto [it, inserted] = state_ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (inserted) {
    states_.push_back(std::move(stacks));
    transitions_.emplace_back();
  }
  return it->second;
}

int32_t GrammarMatcher::step(int32_t state, uint8_t byte) {
  std::vector<int32_t>& row = transitions_[size_t(state)];
  if (row.empty()) row.assign(256, kUnknown);
  if (row[byte] != kUnknown) return row[byte];
  std::vector<int32_t> next;
  for (int32_t s : states_[size_t(state)]) {
    if (s == 0) continue;  // the empty stack accepts no more bytes
    const StackNode node = stacks_[size_t(s)];
    if (grammar_.byte_sets()[grammar_.elements()[node.position].index].has(byte)) expand(node.position + 1, node.below, next, 0);
  }
  const int32_t result = next.empty() ? kRefused : intern_state(std::move(next));
  transitions_[size_t(state)][byte] = result;  // `row` may have moved: intern_state grows transitions_
  return result;
}

bool GrammarMatcher::complete() const {
  const std::vector<int32_t>& stacks = states_[size_t(state_)];
  return ended_ || (!stacks.empty() && stacks.front() == 0);
}

bool GrammarMatcher::finished() const {
  return ended_ || (states_[size_t(state_)].size() == 1 && states_[size_t(state_)][0] == 0);
}

void GrammarMatcher::reset_tables_if_large() {
  if (stacks_.size() < kMaxInternedStacks && states_.size() < kMaxInternedStates) return;
  // Keep the current state: each of its stacks as the positions from the top down.
  std::vector<std::vector<uint32_t>> current;
  for (int32_t s : states_[size_t(state_)]) {
    std::vector<uint32_t> positions;
    for (int32_t k = s; k != 0; k = stacks_[size_t(k)].below) positions.push_back(stacks_[size_t(k)].position);
    current.push_back(std::move(positions));
  }
  ++stats_.table_resets;
  stacks_.resize(1);
  stack_ids_.clear();
  states_.clear();
  state_ids_.clear();
  transitions_.clear();
  masks_.clear();
  std::vector<int32_t> stacks;
  for (const auto& positions : current) {
    int32_t below = 0;
    for (size_t i = positions.size(); i-- > 0;) below = intern_stack(positions[i], below);
    stacks.push_back(below);
  }
  state_ = intern_state(std::move(stacks));
}

const TokenMask& GrammarMatcher::allowed() {
  if (!trie_) fail("GrammarMatcher: no vocabulary (this matcher was made for bytes only)");
  reset_tables_if_large();
  if (auto it = masks_.find(state_); it != masks_.end()) {
    ++stats_.masks_cached;
    return it->second;
  }
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();
  TokenMask mask;
  mask.bits.assign(static_cast<size_t>((trie_->mask_size() + 63) / 64), 0);
  if (!ended_) {
    // Walk the trie in pre-order with the automaton; state_at[d] is the state after d bytes.
    const std::vector<TokenTrie::Node>& nodes = trie_->nodes();
    const std::vector<int32_t>& ids = trie_->token_ids();
    std::vector<int32_t> state_at(static_cast<size_t>(trie_->max_depth()) + 1);  // [max token bytes + 1]
    state_at[0] = state_;
    size_t i = 0;
    int64_t visited = 0;
    while (i < nodes.size()) {
      const TokenTrie::Node& node = nodes[i];
      ++visited;
      const int32_t next = step(state_at[node.depth - 1u], node.byte);
      if (next < 0) {  // refused: no token below this node can be allowed
        i = node.skip;
        continue;
      }
      state_at[node.depth] = next;
      for (uint32_t k = 0; k < node.num_tokens; ++k) {
        const int32_t id = ids[node.first_token + k];
        mask.bits[size_t(id >> 6)] |= uint64_t{1} << (id & 63);
      }
      ++i;
    }
    stats_.trie_nodes_visited += visited;
  }
  // An end id ends the sequence whatever its bytes (a model may declare "#" its EOS): allowed only
  // when the text is complete, never as text.
  for (int32_t id : end_ids_) {
    if (id < 0 || id >= trie_->mask_size()) continue;
    const uint64_t bit = uint64_t{1} << (id & 63);
    mask.bits[size_t(id >> 6)] = complete() ? mask.bits[size_t(id >> 6)] | bit : mask.bits[size_t(id >> 6)] & ~bit;
  }
  for (uint64_t w : mask.bits) mask.count += __builtin_popcountll(w);
  if (mask.count == 0)
    fail(complete() ? "the output is complete but the model has no end-of-sequence id to end it with"
                    : "the grammar admits no token of the vocabulary at this point (no token's bytes continue the text)");
  ++stats_.masks_computed;
  stats_.stacks = static_cast<int64_t>(stacks_.size());
  stats_.states = static_cast<int64_t>(states_.size());
  return masks_.emplace(state_, std::move(mask)).first->second;
}

void GrammarMatcher::apply(std::span<float> logits) {
  const TokenMask& mask = allowed();
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (size_t id = 0; id < logits.size(); ++id)
    if (!mask.allows(static_cast<int64_t>(id))) logits[id] = minus_inf;
}

void GrammarMatcher::accept(int32_t id) {
  if (ended_) fail("the grammar has already ended; token ", id, " cannot follow");
  if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) {
    if (!complete()) fail("end-of-sequence id ", id, " came before the grammar was complete");
    ended_ = true;
    return;
  }
  const std::string_view b = trie_ ? trie_->bytes(id) : std::string_view();
  if (b.empty()) fail("token ", id, " has no text the grammar could accept");
  if (!accept_bytes(b)) fail("token ", id, " (", b.size(), " bytes) is not allowed by the grammar here");
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  reset_tables_if_large();
  int32_t s = state_;
  for (char c : bytes) {
    s = step(s, static_cast<uint8_t>(c));
    if (s < 0) return false;
  }
  state_ = s;
  return true;
}

}  // namespace journey
