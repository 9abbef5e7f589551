// What a caller may ask of the sampler, one struct for the CLI, the server and the tracer.
// The defaults here are the neutral ones (vLLM's / the OpenAI API's): temperature 1, every filter
// and penalty off, so that `SamplingParams{}` samples from the model's own distribution.
// The CLI picks its own, llama.cpp-like defaults (see docs/sampling.md).
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace journey {

struct SamplingParams {
  double temperature = 1.0;         // 0 = greedy (argmax of the penalized logits)
  int top_k = 0;                    // keep the k most likely tokens; 0 or -1 = off
  double top_p = 1.0;               // keep the smallest set with mass >= top_p; 1 = off
  double min_p = 0.0;               // keep tokens with p >= min_p * p_max; 0 = off
  double repetition_penalty = 1.0;  // HF: over prompt + output tokens; 1 = off
  double frequency_penalty = 0.0;   // OpenAI: logit -= frequency * count (output tokens only)
  double presence_penalty = 0.0;    // OpenAI: logit -= presence * (count > 0) (output tokens only)
  std::optional<uint64_t> seed;     // absent = a fresh seed from the OS (reported by the sampler)
  int logprobs = 0;                 // how many top alternatives to return with each token
  // OpenAI logit_bias: added to the raw logits of these token ids before anything else; +100
  // forces a token, -100 bans it. [B] (token id, bias), ids distinct.
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool greedy() const { return temperature == 0.0; }
};

// Largest `logprobs` accepted (the OpenAI API's top_logprobs limit).
inline constexpr int kMaxLogprobs = 20;
// logit_bias: at most this many entries, each bias in [-kMaxLogitBias, kMaxLogitBias] (OpenAI's range).
inline constexpr int kMaxLogitBiasEntries = 1024;
inline constexpr double kMaxLogitBias = 100.0;

// Throws journey::Error naming the first field that is out of range, its range and its value.
void validate(const SamplingParams& params);

}  // namespace journey
