// What the token mask costs per generated token: a constrained "generation" that draws each next
// id uniformly among the ids the mask allows (what random weights do, and the worst case for the
// mask's cache: the walk goes wherever the grammar lets it), timing GrammarMatcher::allowed() and
// apply() on a logits row of the vocabulary's size. A finished output starts a new one, so every
// step is a real mask. `journey bench --json-schema FILE` runs it beside the model's decode step.
#pragma once
#include <cstdint>
#include <vector>

#include "grammar/token_mask.h"

namespace journey {

struct GrammarBenchResult {
  int64_t steps = 0, outputs = 0;           // masks measured, outputs completed
  double trie_build_ms = 0;                 // the vocabulary's trie, once per tokenizer
  double mean_ms = 0, median_ms = 0, p90_ms = 0, max_ms = 0;  // per token: mask + apply
  double mean_allowed = 0;                  // ids allowed per step
  double cached_fraction = 0;               // steps whose mask came from the state cache
};

// trie_build_ms is the caller's to fill (it built the trie).
GrammarBenchResult run_grammar_bench(const Grammar& grammar, std::shared_ptr<const TokenTrie> trie,
                                     const std::vector<int32_t>& end_ids, int64_t steps, uint64_t seed);

}  // namespace journey
