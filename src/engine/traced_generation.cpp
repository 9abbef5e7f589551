#include "engine/traced_generation.h"

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "engine/logit_lens.h"
#include "text/tokenizer.h"

namespace journey {

nlohmann::json backend_manifest_settings(const Backend& backend) {
  nlohmann::json settings = {{"backend", backend.name()}, {"dtype", std::string(dtype_name(backend.weight_dtype()))}};
  if (std::string stored = backend.stored_weight_types(); !stored.empty()) settings["weights_as_stored"] = stored;
  return settings;
}

namespace {

// Forwards everything to the real backend; before each forward pass after the first, starts a new
// decode step in the sink; asks for every position's logits when the sink records logits.
class StepMarkingBackend final : public Backend {
 public:
  StepMarkingBackend(Backend& inner, DumpSink& sink) : inner_(inner), sink_(sink) {}

  std::string name() const override { return inner_.name(); }
  const ModelConfig& config() const override { return inner_.config(); }
  DType weight_dtype() const override { return inner_.weight_dtype(); }
  std::string stored_weight_types() const override { return inner_.stored_weight_types(); }
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override {
    inner_.allocate_kv_cache(num_blocks, block_size);
  }
  int64_t kv_block_size() const override { return inner_.kv_block_size(); }
  int64_t kv_num_blocks() const override { return inner_.kv_num_blocks(); }
  int64_t kv_block_bytes(int64_t block_size) const override { return inner_.kv_block_bytes(block_size); }
  void copy_kv_block(int32_t src, int32_t dst) override { inner_.copy_kv_block(src, dst); }

  ForwardOutput forward(const ForwardBatch& batch, TraceSink* sink) override {
    if (forward_calls_ > 0) {
      const SequenceInput& seq = batch.sequences.at(0);
      std::vector<int64_t> positions;  // [T]
      for (size_t i = 0; i < seq.tokens.size(); ++i) positions.push_back(seq.start_position + int64_t(i));
      sink_.set_step(forward_calls_, "decode", std::move(positions));
    }
    ++forward_calls_;
    if (!sink_.wants(Stage::logits, -1)) return inner_.forward(batch, sink);
    ForwardBatch all_rows = batch;  // every position's logits, as the goldens hold them
    for (auto& seq : all_rows.sequences) seq.all_logits = true;
    return inner_.forward(all_rows, sink);
  }

 private:
  Backend& inner_;
  DumpSink& sink_;
  int forward_calls_ = 0;
};

}  // namespace

std::vector<int64_t> prefill_positions(size_t prompt_tokens) {
  std::vector<int64_t> positions(prompt_tokens);  // [P]
  for (size_t i = 0; i < prompt_tokens; ++i) positions[i] = int64_t(i);
  return positions;
}

GenerationResult generate_traced(Backend& backend, const Tokenizer& tokenizer, const GenerationRequest& request,
                                 DumpSink& sink, const GenerationCallbacks& callbacks, const LogitLens* lens) {
  const bool started = std::any_of(sink.manifest().steps.begin(), sink.manifest().steps.end(),
                                   [](const ManifestStep& s) { return s.step == 0; });
  if (!started) sink.set_step(0, "prefill", prefill_positions(request.prompt_ids.size()));
  StepMarkingBackend marking(backend, sink);
  // The "sampled" stage lives in the manifest: each token with its probability and alternatives.
  GenerationCallbacks recording = callbacks;
  recording.on_token = [&](const SampledToken& token, int64_t position) {
    // ids past the tokenizer's vocabulary (a padded embedding table) have no piece
    auto piece = [&](int32_t id) { return id < tokenizer.vocab_size() ? tokenizer.piece(id) : std::string(); };
    ManifestSampled sampled{token.id, piece(token.id), token.prob, {}};
    for (const TokenLogprob& alt : token.top)
      sampled.top.push_back({alt.id, piece(alt.id), std::exp(double(alt.logprob))});
    sink.set_sampled(std::move(sampled));
    if (callbacks.on_token) callbacks.on_token(token, position);
  };
  if (!lens) return generate(marking, tokenizer, request, recording, &sink);
  LogitLensSink with_lens(sink, *lens);
  return generate(marking, tokenizer, request, recording, &with_lens);
}

}  // namespace journey
