#include "sampling/processors.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace journey {
namespace {

// Divide by the sum so the probabilities add up to 1 again (sum in double for large vocabularies).
void renormalize(std::span<float> probs) {
  double total = 0.0;
  for (float p : probs) total += p;
  if (total <= 0.0) return;
  for (float& p : probs) p = static_cast<float>(p / total);
}

// Ids ordered by descending value, ties by ascending id: the order every filter ranks tokens in.
auto by_value_desc(std::span<const float> values) {
  return [values](int32_t a, int32_t b) { return values[a] > values[b] || (values[a] == values[b] && a < b); };
}

void check_id(int32_t id, size_t vocab_size, const char* what) {
  if (id < 0 || static_cast<size_t>(id) >= vocab_size)
    fail("sampling: ", what, ": token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
}

// exp(logits[i] - shift) into out[i] (when out is not null), and their sum in double. A
// vocabulary is 32k-152k logits per sequence per step, so this runs Eigen's vectorized exp, in
// fixed blocks of 16 so that every element takes the same code path wherever its buffer starts
// (a plain Map would peel unaligned leading elements into scalar code, and a probability's last
// bit would depend on the allocation). -inf logits give exactly 0.
// (GCC 12 reports the _mm512_undefined_ps() operand inside Eigen's AVX-512 exp as "maybe
// uninitialized" here; the masked-off lanes it fills are never read.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
double exp_shifted(std::span<const float> logits, float shift, float* out) {
  using Block = Eigen::Array<float, 16, 1>;
  const int64_t n = static_cast<int64_t>(logits.size());
  Eigen::Array<double, 16, 1> lane_totals = Eigen::Array<double, 16, 1>::Zero();  // summed in double
  auto one_block = [&](const float* in, float* dst) {
    // -inf must give exactly 0; Eigen's SSE2-only exp clamps its input near -88 and would
    // return a denormal (CI's generic build caught it)
    const Eigen::Map<const Block> x(in);
    const Block e = (x == -std::numeric_limits<float>::infinity()).select(0.0f, (x - shift).exp());
    lane_totals += e.cast<double>();
    if (dst) {
      Eigen::Map<Block> copy_to(dst);
      copy_to = e;
    }
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) one_block(logits.data() + i, out ? out + i : nullptr);
  if (i < n) {  // the tail, padded with -inf (exp = 0)
    float in[16], tail_out[16];
    std::fill(in, in + 16, -std::numeric_limits<float>::infinity());
    std::copy(logits.begin() + i, logits.end(), in);
    one_block(in, out ? tail_out : nullptr);
    if (out) std::copy(tail_out, tail_out + (n - i), out + i);
  }
  double total = 0.0;
  for (int lane = 0; lane < 16; ++lane) total += lane_totals[lane];
  return total;
}
#pragma GCC diagnostic pop

}  // namespace

void apply_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias) {
  for (const auto& [id, value] : bias) {
    check_id(id, logits.size(), "logit_bias");
    logits[static_cast<size_t>(id)] += value;
  }
}

void apply_repetition_penalty(std::span<float> logits, const std::unordered_set<int32_t>& seen, double penalty) {
  if (penalty == 1.0) return;
  for (int32_t id : seen) {
    check_id(id, logits.size(), "repetition_penalty");
    float& logit = logits[id];
    logit = logit > 0 ? static_cast<float>(logit / penalty) : static_cast<float>(logit * penalty);
  }
}

void apply_frequency_presence_penalties(std::span<float> logits, const std::unordered_map<int32_t, int>& output_counts,
                                        double frequency, double presence) {
  if (frequency == 0.0 && presence == 0.0) return;
  for (auto [id, count] : output_counts) {
    check_id(id, logits.size(), "frequency/presence penalty");
    logits[id] -= static_cast<float>(frequency * count + presence * (count > 0 ? 1.0 : 0.0));
  }
}

void apply_temperature(std::span<float> logits, double temperature) {
  for (float& logit : logits) logit = static_cast<float>(logit / temperature);
}

std::vector<float> softmax(std::span<const float> logits) {
  std::vector<float> probs(logits.size());  // [V]
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  const double total = exp_shifted(logits, max_logit, probs.data());
  const float inv_total = static_cast<float>(1.0 / total);
  for (float& p : probs) p *= inv_total;
  return probs;
}

std::vector<float> log_softmax(std::span<const float> logits) {
  const double log_z = log_normalizer(logits);
  std::vector<float> logprobs(logits.size());  // [V]
  for (size_t i = 0; i < logits.size(); ++i) logprobs[i] = static_cast<float>(double(logits[i]) - log_z);
  return logprobs;
}

double log_normalizer(std::span<const float> logits) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  return double(max_logit) + std::log(exp_shifted(logits, max_logit, nullptr));  // terms in [0, 1]
}

void keep_top_k(std::span<float> probs, int k) {
  if (k <= 0 || static_cast<size_t>(k) >= probs.size()) return;
  std::vector<int32_t> ids(probs.size());  // [V]
  std::iota(ids.begin(), ids.end(), 0);
  std::nth_element(ids.begin(), ids.begin() + (k - 1), ids.end(), by_value_desc(probs));
  // ids[k..] rank below the k-th token (nth_element partitions with the same ordering).
  for (size_t i = static_cast<size_t>(k); i < ids.size(); ++i) probs[ids[i]] = 0.0f;
  renormalize(probs);
}

void keep_top_p(std::span<float> probs, double top_p) {
  if (top_p >= 1.0) return;
  std::vector<int32_t> ids;  // [n nonzero] candidates, most probable first
  for (size_t i = 0; i < probs.size(); ++i)
    if (probs[i] > 0.0f) ids.push_back(static_cast<int32_t>(i));
  std::sort(ids.begin(), ids.end(), by_value_desc(probs));
  double mass_before = 0.0;  // mass of the tokens ranked above the current one
  size_t keep = 0;
  while (keep < ids.size() && mass_before < top_p) mass_before += probs[ids[keep++]];
  for (size_t i = keep; i < ids.size(); ++i) probs[ids[i]] = 0.0f;
  renormalize(probs);
}

void keep_min_p(std::span<float> probs, double min_p) {
  if (min_p <= 0.0) return;
  float threshold = static_cast<float>(min_p * *std::max_element(probs.begin(), probs.end()));
  for (float& p : probs)
    if (p < threshold) p = 0.0f;
  renormalize(probs);
}

int32_t argmax(std::span<const float> values) {
  // max_element returns the first of equal maxima: the lowest id.
  return static_cast<int32_t>(std::max_element(values.begin(), values.end()) - values.begin());
}

int32_t sample_from(std::span<const float> probs, float u) {
  double total = 0.0;
  for (float p : probs) total += p;
  double target = static_cast<double>(u) * total;
  double cumulative = 0.0;
  int32_t last_nonzero = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    cumulative += probs[i];
    last_nonzero = static_cast<int32_t>(i);
    if (cumulative > target) return last_nonzero;
  }
  return last_nonzero;  // rounding left u * total at the very end
}

std::vector<int32_t> top_n_ids(std::span<const float> values, int n) {
  n = std::clamp(n, 0, static_cast<int>(values.size()));
  if (n == 0) return {};
  std::vector<int32_t> ids(values.size());  // [V]
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), by_value_desc(values));
  ids.resize(static_cast<size_t>(n));
  return ids;
}

}  // namespace journey
