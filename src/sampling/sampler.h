// The sampler of one sequence: it remembers the prompt and what it has produced (for the
// penalties) and owns the sequence's random generator, so two sequences with the same seed draw
// the same tokens whatever else runs beside them. Every backend's logits go through this one class.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/device_sampling.h"
#include "sampling/params.h"
#include "sampling/rng.h"

namespace journey {

class TraceSink;

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;  // log-softmax of the RAW logits (before penalties and temperature)
};

struct SampledToken {
  int32_t id = 0;
  // Probability of `id` in the distribution it was drawn from (after every processor). Greedy
  // draws from no distribution: there it is softmax of the penalized logits at temperature 1.
  float prob = 0.0f;
  float logprob = 0.0f;            // log-softmax of the raw logits at `id`
  std::vector<TokenLogprob> top;   // [params.logprobs] most likely tokens under the raw logits
};

class Sampler {
 public:
  // Validates params (journey::Error). prompt_ids take part in the repetition penalty.
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt_ids);

  // Pick the next token from one row of logits [V] and remember it as output. When a sink wants
  // them, the intermediate distributions are recorded (Stage::probs_penalized ... probs_min_p).
  SampledToken sample(std::span<const float> logits, TraceSink* sink = nullptr);

  // Drawing on the backend's device (Backend::forward_sample) applies temperature, top-k and top-p
  // only. A sequence can be drawn there when it asks for nothing else: no penalties, no min-p, no
  // logprobs, no logit_bias. device_draw() gives the parameters of its next draw, with the uniform number this
  // sampler would have drawn on the host (greedy draws none), so a seed picks the same token on
  // either side; accept_device_draw() then records the drawn id as output. The returned token's
  // prob and logprob are NaN: its distribution stayed on the device.
  bool can_draw_on_device() const;
  DeviceSampling device_draw();
  SampledToken accept_device_draw(int32_t id);

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }  // the seed in use (drawn from the OS if none was given)

 private:
  SamplingParams params_;
  uint64_t seed_ = 0;
  Pcg32 rng_;
  std::unordered_set<int32_t> seen_;                 // prompt + output ids (repetition penalty)
  std::unordered_map<int32_t, int> output_counts_;   // output id -> count (frequency/presence)
};

}  // namespace journey
