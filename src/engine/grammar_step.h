// Structured output in the generation loop: the grammar's mask is a logits processor that runs
// first, before penalties and temperature (vLLM and llama.cpp apply theirs there too), so every
// later processor and the draw only ever see tokens the grammar allows:
//
//   logits [V] ─► grammar mask (disallowed ids -> -inf) ─► penalties ─► temperature ─► ... ─► draw
//              ─► the drawn id advances the matcher
//
// Both loops (engine/generate.cpp for one sequence, engine/llm_engine.cpp for the server) call
// masked_logits, then GrammarMatcher::accept with the drawn id. A sequence without a grammar never
// gets here: the unconstrained path is unchanged and pays nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/token_mask.h"

namespace journey {

class TraceSink;

// A copy of one row of logits [V] with every id the grammar forbids at -inf; records
// Stage::grammar_mask when the sink wants it. Throws Error when the grammar allows no id.
std::vector<float> masked_logits(GrammarMatcher& matcher, std::span<const float> logits, TraceSink* sink);

// Records Stage::grammar_mask (when the sink wants it): the mask as [ceil(V / 32)] i32 words.
void record_grammar_mask(TraceSink& sink, const TokenMask& mask, int64_t vocab_size);

}  // namespace journey
