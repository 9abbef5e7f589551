#include "sampling/sampler.h"

#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "sampling/processors.h"
#include "trace/sink.h"

namespace journey {
namespace {

uint64_t seed_or_fresh(const SamplingParams& params) {
  if (params.seed) return *params.seed;
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

const SamplingParams& validated(const SamplingParams& params) {
  validate(params);
  return params;
}

[[maybe_unused]] TraceTensor vector_tensor(const std::vector<float>& values) {
  return TraceTensor{values, {static_cast<int64_t>(values.size())}};
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt_ids)
    : params_(validated(params)), seed_(seed_or_fresh(params)), rng_(seed_), seen_(prompt_ids.begin(), prompt_ids.end()) {}

SampledToken Sampler::sample(std::span<const float> logits, TraceSink* sink) {
  SampledToken chosen;
  // What the model itself says: log_softmax(logits)[id] = logits[id] - raw_log_z. Only the chosen
  // token's and the top-N alternatives' entries are ever read, so no [V] vector is built.
  const double raw_log_z = log_normalizer(logits);

  // 1. logit bias and penalties, on a copy of the logits
  std::vector<float> penalized(logits.begin(), logits.end());  // [V]
  apply_logit_bias(penalized, params_.logit_bias);
  apply_repetition_penalty(penalized, seen_, params_.repetition_penalty);
  apply_frequency_presence_penalties(penalized, output_counts_, params_.frequency_penalty, params_.presence_penalty);
  JOURNEY_TRACE(sink, Stage::probs_penalized, -1, vector_tensor(penalized));
  const bool penalties_active = !params_.logit_bias.empty() ||
      params_.repetition_penalty != 1.0 || params_.frequency_penalty != 0.0 || params_.presence_penalty != 0.0;

  if (params_.greedy()) {
    // 2'. greedy: the most likely token after the penalties; its probability under the softmax of
    // the penalized logits (the raw normalizer when no penalty changed them)
    chosen.id = argmax(penalized);
    const double penalized_log_z = penalties_active ? log_normalizer(penalized) : raw_log_z;
    chosen.prob = static_cast<float>(std::exp(double(penalized[chosen.id]) - penalized_log_z));
  } else {
    // 2. temperature, then the distribution
    apply_temperature(penalized, params_.temperature);
    std::vector<float> probs = softmax(penalized);  // [V]
    JOURNEY_TRACE(sink, Stage::probs_temperature, -1, vector_tensor(probs));
    // 3. top-k, 4. top-p, 5. min-p: each zeroes tokens and renormalizes
    keep_top_k(probs, params_.top_k);
    JOURNEY_TRACE(sink, Stage::probs_top_k, -1, vector_tensor(probs));
    keep_top_p(probs, params_.top_p);
    JOURNEY_TRACE(sink, Stage::probs_top_p, -1, vector_tensor(probs));
    keep_min_p(probs, params_.min_p);
    JOURNEY_TRACE(sink, Stage::probs_min_p, -1, vector_tensor(probs));
    // 6. draw
    chosen.id = sample_from(probs, rng_.next_float());
    chosen.prob = probs[chosen.id];
  }

  auto raw_logprob = [&](int32_t id) { return static_cast<float>(double(logits[id]) - raw_log_z); };
  chosen.logprob = raw_logprob(chosen.id);
  // the logits rank tokens exactly as their log-softmax does (a shift by one constant)
  for (int32_t id : top_n_ids(logits, params_.logprobs)) chosen.top.push_back({id, raw_logprob(id)});
#if JOURNEY_TRACE_HOOKS
  if (sink != nullptr && sink->wants(Stage::sampled, -1)) {
    int32_t id = chosen.id;
    sink->record_ints(Stage::sampled, -1, std::span<const int32_t>(&id, 1), {1});
  }
#endif

  seen_.insert(chosen.id);
  ++output_counts_[chosen.id];
  return chosen;
}

bool Sampler::can_draw_on_device() const {
  return params_.repetition_penalty == 1.0 && params_.frequency_penalty == 0.0 && params_.presence_penalty == 0.0 &&
         params_.min_p == 0.0 && params_.logprobs == 0 && params_.logit_bias.empty();
}

DeviceSampling Sampler::device_draw() {
  if (!can_draw_on_device())
    fail("this request cannot be sampled on the device: it uses penalties, min-p, logprobs or logit_bias");
  DeviceSampling d;
  d.temperature = params_.temperature;
  d.top_k = params_.top_k > 0 ? params_.top_k : 0;
  d.top_p = params_.top_p;
  d.u = params_.greedy() ? 0.0f : rng_.next_float();  // the host path draws exactly one number per sampled token
  return d;
}

SampledToken Sampler::accept_device_draw(int32_t id) {
  SampledToken chosen;
  chosen.id = id;
  chosen.prob = chosen.logprob = std::numeric_limits<float>::quiet_NaN();
  seen_.insert(id);
  ++output_counts_[id];
  return chosen;
}

}  // namespace journey
