#include "sampling/params.h"

#include <cmath>

#include "core/error.h"

namespace journey {

void validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0)
    fail("sampling: temperature must be >= 0 (0 = greedy), found ", p.temperature);
  if (p.top_k < -1) fail("sampling: top_k must be >= 1, or 0 / -1 to turn it off, found ", p.top_k);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) fail("sampling: top_p must be in (0, 1] (1 = off), found ", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) fail("sampling: min_p must be in [0, 1] (0 = off), found ", p.min_p);
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0)
    fail("sampling: repetition_penalty must be > 0 (1 = off), found ", p.repetition_penalty);
  if (!(p.frequency_penalty >= -2.0 && p.frequency_penalty <= 2.0))
    fail("sampling: frequency_penalty must be in [-2, 2] (0 = off), found ", p.frequency_penalty);
  if (!(p.presence_penalty >= -2.0 && p.presence_penalty <= 2.0))
    fail("sampling: presence_penalty must be in [-2, 2] (0 = off), found ", p.presence_penalty);
  if (p.logprobs < 0 || p.logprobs > kMaxLogprobs)
    fail("sampling: logprobs must be in [0, ", kMaxLogprobs, "], found ", p.logprobs);
  if (p.logit_bias.size() > static_cast<size_t>(kMaxLogitBiasEntries))
    fail("sampling: logit_bias may hold at most ", kMaxLogitBiasEntries, " tokens, found ", p.logit_bias.size());
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) fail("sampling: logit_bias token id must be >= 0, found ", id);
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias))
      fail("sampling: logit_bias of token ", id, " must be in [", -kMaxLogitBias, ", ", kMaxLogitBias, "], found ", bias);
  }
}

}  // namespace journey
