#include "engine/logit_lens.h"

#include <algorithm>
#include <numeric>

#include "assets/model.h"
#include "core/error.h"
#include "core/model_weights.h"
#include "reference/ops.h"

namespace journey {

LogitLens LogitLens::from_model(const LoadedModel& model, int top_k) {
  const ModelConfig& c = model.config;
  const std::string head = weight_spec(c, WeightRole::lm_head).name;
  // Tied embeddings: the LM head is the embedding matrix, as in every backend.
  const std::string head_source = model.weights.has(head) ? head : weight_spec(c, WeightRole::token_embedding).name;
  return LogitLens(model.weights.get(weight_spec(c, WeightRole::final_norm).name).to_f32(),
                   model.weights.get(head_source).to_f32(), c.hidden_size, c.vocab_size, c.rms_norm_eps, top_k);
}

LogitLens::LogitLens(std::vector<float> final_norm, std::vector<float> lm_head, int64_t hidden, int64_t vocab,
                     double eps, int top_k)
    : final_norm_(std::move(final_norm)), lm_head_(std::move(lm_head)), hidden_(hidden), vocab_(vocab),
      eps_(static_cast<float>(eps)), top_k_(top_k) {
  if (top_k_ < 1 || top_k_ > vocab_) fail("logit lens: top_k ", top_k_, " is outside [1, ", vocab_, "]");
  if (int64_t(final_norm_.size()) != hidden_ || int64_t(lm_head_.size()) != vocab_ * hidden_)
    fail("logit lens: the final norm has ", final_norm_.size(), " values and the LM head ", lm_head_.size(),
         "; expected ", hidden_, " and ", vocab_, " x ", hidden_);
}

void LogitLens::top_tokens(std::span<const float> x, int64_t T, std::vector<int32_t>& ids,
                           std::vector<float>& probs) const {
  if (int64_t(x.size()) != T * hidden_) fail("logit lens: ", x.size(), " values are not ", T, " rows of ", hidden_);
  std::vector<float> normed(x.size());                // [T, E]
  reference::rms_norm(normed.data(), x.data(), final_norm_.data(), T, hidden_, eps_);
  std::vector<float> logits(size_t(T * vocab_));     // [T, V]
  reference::linear(logits.data(), normed.data(), lm_head_.data(), nullptr, T, hidden_, vocab_);
  reference::softmax(logits.data(), T, vocab_);      // in place: [T, V] probabilities
  ids.assign(size_t(T * top_k_), 0);                 // [T, K]
  probs.assign(size_t(T * top_k_), 0.0f);            // [T, K]
  std::vector<int32_t> order(static_cast<size_t>(vocab_));  // [V]
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits.data() + t * vocab_;
    std::iota(order.begin(), order.end(), 0);
    // Most likely first; equal probabilities by the lower id, as argmax does.
    std::partial_sort(order.begin(), order.begin() + top_k_, order.end(),
                      [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int k = 0; k < top_k_; ++k) {
      ids[size_t(t * top_k_ + k)] = order[size_t(k)];
      probs[size_t(t * top_k_ + k)] = row[order[size_t(k)]];
    }
  }
}

bool LogitLensSink::wants(Stage stage, int layer) const {
  if (stage == Stage::layer_out && wants_lens(layer)) return true;
  return inner_.wants(stage, layer);
}

void LogitLensSink::record(Stage stage, int layer, const TraceTensor& tensor) {
  if (stage == Stage::layer_out && wants_lens(layer)) {
    const int64_t T = tensor.shape.empty() ? 0 : tensor.shape.front();
    std::vector<int32_t> ids;  // [T, K]
    std::vector<float> probs;  // [T, K]
    lens_.top_tokens(tensor.data, T, ids, probs);
    const std::vector<int64_t> shape{T, lens_.top_k()};
    if (inner_.wants(Stage::logit_lens, layer)) inner_.record_ints(Stage::logit_lens, layer, ids, shape);
    if (inner_.wants(Stage::logit_lens_probs, layer))
      inner_.record(Stage::logit_lens_probs, layer, TraceTensor{probs, shape});
  }
  if (inner_.wants(stage, layer)) inner_.record(stage, layer, tensor);
}

void LogitLensSink::record_ints(Stage stage, int layer, std::span<const int32_t> values, std::vector<int64_t> shape) {
  inner_.record_ints(stage, layer, values, std::move(shape));
}

}  // namespace journey
