#include "engine/grammar_step.h"

#include "trace/sink.h"

namespace journey {

std::vector<float> masked_logits(GrammarMatcher& matcher, std::span<const float> logits, TraceSink* sink) {
  std::vector<float> masked(logits.begin(), logits.end());  // [V]
  matcher.apply(masked);
  if (sink != nullptr) record_grammar_mask(*sink, matcher.allowed(), static_cast<int64_t>(logits.size()));
  return masked;
}

void record_grammar_mask(TraceSink& sink, const TokenMask& mask, int64_t vocab_size) {
  if (!sink.wants(Stage::grammar_mask, -1)) return;
  std::vector<int32_t> words(static_cast<size_t>((vocab_size + 31) / 32));  // [ceil(V / 32)] bit i % 32 of word i / 32
  for (size_t w = 0; w < words.size(); ++w) {
    const uint64_t bits = mask.bits[w / 2];
    words[w] = static_cast<int32_t>(static_cast<uint32_t>(w % 2 == 0 ? bits : bits >> 32));
  }
  sink.record_ints(Stage::grammar_mask, -1, words, {static_cast<int64_t>(words.size())});
}

}  // namespace journey
