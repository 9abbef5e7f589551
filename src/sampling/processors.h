// The logits processors, one function each, applied by the Sampler in this order (vLLM's and
// Hugging Face's order):
//
//   logits [V] ─► logit bias ─► penalties ─► temperature ─► softmax ─► top-k ─► top-p ─► min-p ─► draw
//
// Penalties and temperature work on logits. From softmax on, the filters work on probabilities:
// a filtered-out token gets probability 0 and the survivors are renormalized to sum to 1, which is
// the same as setting its logit to -inf and taking the softmax again. Greedy decoding skips
// everything after the penalties and takes the argmax.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace journey {

// OpenAI logit_bias: logit[id] += bias for each (id, bias). Throws journey::Error for an id outside
// [0, V) (the server checks ids against the vocabulary first; this guards every other caller).
void apply_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias);

// HF RepetitionPenaltyLogitsProcessor: for every token in `seen` (prompt + output), a positive
// logit is divided by `penalty`, a negative one multiplied (so penalty > 1 always lowers it).
void apply_repetition_penalty(std::span<float> logits, const std::unordered_set<int32_t>& seen, double penalty);

// OpenAI / vLLM: logit[t] -= frequency * count[t] + presence * (count[t] > 0), over OUTPUT tokens.
void apply_frequency_presence_penalties(std::span<float> logits, const std::unordered_map<int32_t, int>& output_counts,
                                        double frequency, double presence);

// logits /= temperature (temperature > 0).
void apply_temperature(std::span<float> logits, double temperature);

// Numerically stable softmax (max subtracted, sums in double). -inf logits get probability 0.
std::vector<float> softmax(std::span<const float> logits);  // [V]

// log(softmax(logits)), computed as logit - max - log(sum exp(logit - max)).
std::vector<float> log_softmax(std::span<const float> logits);  // [V]

// The log of softmax's denominator, max + log(sum exp(logit - max)), so that
// log_softmax(logits)[i] = logits[i] - log_normalizer(logits). For when only a few entries of the
// log-softmax are needed (the chosen token and the top-N alternatives): one pass over the
// vocabulary and no [V] vector, which matters at 16 sequences x 151936 logits per step.
double log_normalizer(std::span<const float> logits);

// Keep exactly the k most probable tokens (ties broken by the lower id), renormalize.
// k <= 0 or k >= V: no change.
void keep_top_k(std::span<float> probs, int k);

// Nucleus: sort by probability (ties: lower id first) and keep the shortest prefix whose mass
// reaches top_p, INCLUDING the token that crosses the threshold; renormalize. top_p >= 1: no change.
void keep_top_p(std::span<float> probs, double top_p);

// Keep tokens whose probability is at least min_p times the largest one; renormalize.
void keep_min_p(std::span<float> probs, double min_p);

// Index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> values);

// Inverse-CDF draw: walk the ids in order, return the first whose cumulative probability exceeds
// u * total (u in [0, 1)). A token with probability 0 is never returned.
int32_t sample_from(std::span<const float> probs, float u);

// Token ids of the n largest values, largest first (ties: lower id first).
std::vector<int32_t> top_n_ids(std::span<const float> values, int n);

}  // namespace journey
