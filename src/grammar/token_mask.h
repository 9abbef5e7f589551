// Structured output, part 2: which TOKENS the grammar allows next.
//
// TokenTrie holds every token's bytes (the tokenizer's own token_bytes of that one id, so byte-level
// BPE pieces that are half a UTF-8 character, SentencePiece's "▁" and byte-fallback <0xNN> tokens
// all count as the bytes they add to the text) in a prefix tree stored in pre-order. It is built
// once per tokenizer and shared by every matcher.
//
// GrammarMatcher is one sequence's position in a Grammar: a set of parse stacks (a pushdown
// automaton run on all alternatives at once, like llama.cpp's grammar stacks). Stacks and sets of
// stacks are interned, so a state is one integer, and the byte transitions of a state are
// memoized. The mask of a step walks the trie with the automaton: a byte the grammar refuses cuts
// the node's whole subtree, and every token whose node is reached is allowed. Masks are cached by
// state: inside a long string the state repeats, and the mask is computed once.
//
//   GrammarMatcher m(grammar, trie, eos_ids);
//   loop: const TokenMask& mask = m.allowed();   // throws Error when the grammar admits no token
//         m.apply(logits);                        // -inf for every id not in the mask
//         id = sample(logits); m.accept(id);      // advance (throws if id was not allowed)
//         if (m.finished()) stop;                 // complete, and nothing more may follow
//
// End ids (EOS) are allowed exactly when the text so far is complete; once the grammar can go no
// further (after the closing "}" of an object) they are the only ids allowed, and finished() is
// true so a caller may stop without waiting for the model's EOS.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace journey {

class Tokenizer;

// Deepest parse stack the matcher follows (nested objects/arrays, recursive $ref). A path deeper
// than this is dropped, which can only remove alternatives, never admit invalid text.
inline constexpr int kMaxGrammarStackDepth = 128;
// Most parse stacks alive at once (a wildly ambiguous grammar is refused at that point).
inline constexpr int kMaxGrammarStacksPerState = 4096;

class TokenTrie {
 public:
  // mask_size: the model's vocabulary (its logits row), which may exceed the tokenizer's (padded
  // embedding tables): ids past the tokenizer, special tokens and tokens without bytes are never
  // allowed by a grammar (end ids are handled by the matcher).
  TokenTrie(const Tokenizer& tokenizer, int64_t mask_size);

  struct Node {
    uint32_t skip = 0;         // index of the first node after this node's subtree
    uint32_t first_token = 0;  // tokens ending here: token_ids()[first_token, first_token + num_tokens)
    uint32_t num_tokens = 0;
    uint16_t depth = 0;        // 1 for a token's first byte
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }        // [N] pre-order
  const std::vector<int32_t>& token_ids() const { return ids_; }   // [tokens with bytes] by node
  std::string_view bytes(int32_t id) const;                        // empty when the id has none
  int64_t mask_size() const { return mask_size_; }
  int max_depth() const { return max_depth_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  std::vector<uint32_t> byte_offsets_;  // [mask_size + 1] into byte_blob_
  std::string byte_blob_;
  int64_t mask_size_ = 0;
  int max_depth_ = 0;
};

// Allowed ids of one step as a bitmask over the model's vocabulary.
struct TokenMask {
  std::vector<uint64_t> bits;  // [ceil(V / 64)]
  int64_t count = 0;           // ids allowed
  bool allows(int64_t id) const { return id >= 0 && (id >> 6) < int64_t(bits.size()) && ((bits[size_t(id >> 6)] >> (id & 63)) & 1); }
  std::vector<int32_t> ids() const;  // the allowed ids, ascending
};

class GrammarMatcher {
 public:
  GrammarMatcher(Grammar grammar, std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_ids);

  // The ids allowed next. Throws Error when none is (a grammar that admits nothing here).
  const TokenMask& allowed();
  // logits[id] = -inf for every id the grammar does not allow now.
  void apply(std::span<float> logits);
  // Advance by one sampled id; throws Error if the grammar does not allow it.
  void accept(int32_t id);

  // Advance by raw bytes (tests, prompts that pre-fill part of the output): false, and no change,
  // when the grammar refuses them.
  bool accept_bytes(std::string_view bytes);
  bool complete() const;  // the text so far is a whole sentence of the grammar
  bool finished() const;  // complete and nothing more can follow (or an end id was accepted)

  const Grammar& grammar() const { return grammar_; }
  // How much the memo tables hold (the chapter and the benchmark print it).
  struct Stats {
    int64_t stacks = 0, states = 0, masks_computed = 0, masks_cached = 0, trie_nodes_visited = 0;
    int64_t table_resets = 0;  // times the memo tables were dropped and rebuilt (bounded memory)
  };
  Stats stats() const { return stats_; }

 private:
  struct StackNode {
    uint32_t position;  // grammar element to continue at
    int32_t below;      // the rest of the stack (0 = empty)
    int32_t depth;
  };
  int32_t intern_stack(uint32_t position, int32_t below);
  void expand(uint32_t position, int32_t below, std::vector<int32_t>& out, int guard);
  int32_t intern_state(std::vector<int32_t> stacks);
  int32_t step(int32_t state, uint8_t byte);  // -1: the byte is refused
  void reset_tables_if_large();

  Grammar grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  bool ended_ = false;  // an end id was accepted

  std::vector<StackNode> stacks_;                        // [stacks] 0 = the empty stack
  std::unordered_map<uint64_t, int32_t> stack_ids_;      // (position, below) -> id
  std::vector<std::vector<int32_t>> states_;             // [states] sorted stack ids
  std::unordered_map<std::string, int32_t> state_ids_;   // stack ids as bytes -> state id
  std::vector<std::vector<int32_t>> transitions_;        // [states][256 or empty] -2 unknown, -1 refused
  std::unordered_map<int32_t, TokenMask> masks_;         // state -> mask
  int32_t state_ = 0;
  Stats stats_;
};

}  // namespace journey
