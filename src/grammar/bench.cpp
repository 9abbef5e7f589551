#include "grammar/bench.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace journey {

GrammarBenchResult run_grammar_bench(const Grammar& grammar, std::shared_ptr<const TokenTrie> trie,
                                     const std::vector<int32_t>& end_ids, int64_t steps, uint64_t seed) {
  using Clock = std::chrono::steady_clock;
  GrammarBenchResult r;
  std::mt19937_64 rng(seed);
  std::vector<float> logits(static_cast<size_t>(trie->mask_size()));  // [V] a logits row to mask
  std::vector<double> ms;
  int64_t allowed_total = 0, cached = 0;
  auto matcher = std::make_unique<GrammarMatcher>(grammar, trie, end_ids);
  for (int64_t s = 0; s < steps; ++s) {
    if (matcher->finished()) {
      matcher = std::make_unique<GrammarMatcher>(grammar, trie, end_ids);
      ++r.outputs;
    }
    std::fill(logits.begin(), logits.end(), 0.0f);
    const int64_t cached_before = matcher->stats().masks_cached;
    const auto t0 = Clock::now();
    matcher->apply(logits);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    cached += matcher->stats().masks_cached - cached_before;
    const std::vector<int32_t> ids = matcher->allowed().ids();
    allowed_total += static_cast<int64_t>(ids.size());
    const int32_t pick = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    if (std::find(end_ids.begin(), end_ids.end(), pick) != end_ids.end()) {
      matcher = std::make_unique<GrammarMatcher>(grammar, trie, end_ids);
      ++r.outputs;
      continue;
    }
    matcher->accept(pick);
  }
  r.steps = steps;
  if (ms.empty()) return r;
  double sum = 0;
  for (double x : ms) sum += x;
  r.mean_ms = sum / double(ms.size());
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  r.median_ms = sorted[sorted.size() / 2];
  r.p90_ms = sorted[std::min(sorted.size() - 1, sorted.size() * 9 / 10)];
  r.max_ms = sorted.back();
  r.mean_allowed = double(allowed_total) / double(ms.size());
  r.cached_fraction = double(cached) / double(ms.size());
  return r;
}

}  // namespace journey
