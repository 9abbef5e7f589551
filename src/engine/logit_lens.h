// The logit lens (nostalgebraist, 2020; TransformerLens's `accumulated_resid` + `unembed`): what
// would the model say if it stopped after layer l? Apply the final RMSNorm and the LM head to the
// residual stream after that layer and read the softmax's most likely tokens. Early layers usually
// propose something generic; the answer sharpens layer by layer into the model's real prediction
// (after the last layer the lens IS the model's output).
//
// It is computed outside the backends, on the host, from the `layer_out` the backend hands to the
// trace sink: LogitLensSink sits between the backend and the dump, asks for layer_out whenever the
// dump wants the lens, and records the stages `logit_lens` (ids, i32) and `logit_lens_probs` (f32),
// both [T, K], without touching any forward pass. The arithmetic is the reference ops' (rms_norm,
// linear, softmax from src/reference/ops.h), in f32, with the model's own final-norm and LM-head
// weights, so a report of the dump needs no weights.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "trace/sink.h"

namespace journey {

struct LoadedModel;

class LogitLens {
 public:
  // The final norm and the LM head (the embedding matrix when tied) of `model`, widened to f32.
  static LogitLens from_model(const LoadedModel& model, int top_k = 5);
  LogitLens(std::vector<float> final_norm, std::vector<float> lm_head, int64_t hidden, int64_t vocab, double eps,
            int top_k);

  int top_k() const { return top_k_; }
  // For each of the T rows of x ([T, E], a residual stream): the top_k most likely next tokens under
  // softmax(lm_head(rms_norm(x))), most likely first. ids and probs become [T, top_k].
  void top_tokens(std::span<const float> x, int64_t T, std::vector<int32_t>& ids, std::vector<float>& probs) const;

 private:
  std::vector<float> final_norm_;  // [E]
  std::vector<float> lm_head_;     // [V, E]
  int64_t hidden_ = 0, vocab_ = 0;
  float eps_ = 1e-5f;
  int top_k_ = 5;
};

// A sink in front of `inner`: everything passes through; when `inner` wants L<l>.logit_lens (or
// its probs), L<l>.layer_out is asked for too and the lens of it is recorded into `inner`.
class LogitLensSink final : public TraceSink {
 public:
  LogitLensSink(TraceSink& inner, const LogitLens& lens) : inner_(inner), lens_(lens) {}
  bool wants(Stage stage, int layer) const override;
  void record(Stage stage, int layer, const TraceTensor& tensor) override;
  void record_ints(Stage stage, int layer, std::span<const int32_t> values, std::vector<int64_t> shape) override;

 private:
  bool wants_lens(int layer) const {
    return inner_.wants(Stage::logit_lens, layer) || inner_.wants(Stage::logit_lens_probs, layer);
  }
  TraceSink& inner_;
  const LogitLens& lens_;
};

}  // namespace journey
