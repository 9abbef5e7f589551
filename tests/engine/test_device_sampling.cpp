// The engine's path through Backend::forward_sample — the one a GPU backend takes to draw tokens
// where its logits are — tested without a GPU: HostDrawingBackend wraps the fast CPU backend and
// says it samples "on its device", drawing each sequence's token from the u it is handed with the
// host processors (temperature, top-k, top-p, inverse CDF), as the CUDA kernel does. The engine
// must then give exactly the tokens of the ordinary host path for the same seeds, route requests
// that need more (penalties, logprobs) to the host path, and never call forward_sample for them.
#include <doctest/doctest.h>

#include "assets/model.h"
#include "cpu/cpu_backend.h"
#include "engine/expected.h"
#include "engine/generate.h"
#include "engine/llm_engine.h"
#include "sampling/processors.h"
#include "text/tokenizer.h"

using namespace journey;

namespace {

class HostDrawingBackend final : public Backend {
 public:
  explicit HostDrawingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "host-drawing"; }
  const ModelConfig& config() const override { return inner_->config(); }
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override { inner_->allocate_kv_cache(num_blocks, block_size); }
  int64_t kv_block_size() const override { return inner_->kv_block_size(); }
  int64_t kv_num_blocks() const override { return inner_->kv_num_blocks(); }
  int64_t kv_block_bytes(int64_t block_size) const override { return inner_->kv_block_bytes(block_size); }
  void copy_kv_block(int32_t src, int32_t dst) override { inner_->copy_kv_block(src, dst); }
  ForwardOutput forward(const ForwardBatch& batch, TraceSink* sink) override {
    ++forward_calls;
    return inner_->forward(batch, sink);
  }
  bool samples_on_device() const override { return true; }
  std::vector<int32_t> forward_sample(const ForwardBatch& batch, std::span<const DeviceSampling> params,
                                      TraceSink* sink) override {
    ++forward_sample_calls;
    REQUIRE(params.size() == batch.sequences.size());
    const ForwardOutput out = inner_->forward(batch, sink);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<float> logits(out.last_row(i), out.last_row(i) + out.vocab_size);  // [V]
      if (params[i].temperature == 0.0) {
        ids.push_back(argmax(logits));
        continue;
      }
      apply_temperature(logits, params[i].temperature);
      std::vector<float> probs = softmax(logits);
      keep_top_k(probs, params[i].top_k);
      keep_top_p(probs, params[i].top_p);
      ids.push_back(sample_from(probs, params[i].u));
    }
    return ids;
  }
  int forward_calls = 0, forward_sample_calls = 0;

 private:
  std::unique_ptr<Backend> inner_;
};

struct Stories {
  LoadedModel model = load_model(journey::test::kStoriesModel);
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model.path);
};

Stories& stories() {
  static Stories s;
  return s;
}

GenerationRequest request(double temperature, uint64_t seed) {
  GenerationRequest r;
  r.prompt_ids = {1, 403, 407};
  r.sampling.temperature = temperature;
  r.sampling.top_k = 40;
  r.sampling.top_p = 0.9;
  r.sampling.seed = seed;
  r.stop.max_tokens = 40;
  return r;
}

}  // namespace

TEST_CASE("generate(): drawing through forward_sample gives the host path's tokens, greedy and seeded") {
  Stories& s = stories();
  for (double temperature : {0.0, 0.8, 1.3}) {
    for (uint64_t seed : {1u, 7u, 42u}) {
      CAPTURE(temperature); CAPTURE(seed);
      auto host = make_cpu_backend(s.model, CpuOptions{.threads = 1});
      HostDrawingBackend device(make_cpu_backend(s.model, CpuOptions{.threads = 1}));
      const GenerationResult a = generate(*host, *s.tokenizer, request(temperature, seed));
      const GenerationResult b = generate(device, *s.tokenizer, request(temperature, seed));
      CHECK(a.token_ids == b.token_ids);
      CHECK(a.text == b.text);
      CHECK(device.forward_sample_calls == int(b.token_ids.size()));  // every token drawn "on the device"
      CHECK(device.forward_calls == 0);
    }
  }
}

TEST_CASE("generate(): a request the device cannot draw (penalties, logprobs) takes the host path") {
  Stories& s = stories();
  HostDrawingBackend device(make_cpu_backend(s.model, CpuOptions{.threads = 1}));
  GenerationRequest r = request(0.8, 3);
  r.sampling.repetition_penalty = 1.2;
  generate(device, *s.tokenizer, r);
  CHECK(device.forward_sample_calls == 0);
  CHECK(device.forward_calls > 0);
}

TEST_CASE("LLMEngine: a batch drawn through forward_sample equals the host path; a mixed batch falls back") {
  Stories& s = stories();
  auto run = [&](Backend& backend, bool with_penalty) {
    EngineConfig config;
    config.num_kv_blocks = 64;
    LLMEngine engine(backend, config, s.tokenizer.get());
    std::map<int64_t, std::vector<int32_t>> tokens;
    for (int i = 0; i < 6; ++i) {
      EngineRequest r;
      r.prompt = {1, int32_t(400 + i), 407};
      r.params.temperature = i % 3 == 0 ? 0.0 : 0.9;
      r.params.top_k = 50;
      r.params.seed = uint64_t(100 + i);
      if (with_penalty && i == 4) r.params.presence_penalty = 0.5;
      r.max_tokens = 24;
      engine.add_request(r);
    }
    while (engine.has_unfinished())
      for (const RequestOutput& out : engine.step())
        for (const SampledToken& t : out.tokens) tokens[out.request_id].push_back(t.id);
    return tokens;
  };
  auto host = make_cpu_backend(s.model, CpuOptions{.threads = 1});
  HostDrawingBackend device(make_cpu_backend(s.model, CpuOptions{.threads = 1}));
  CHECK(run(*host, false) == run(device, false));
  CHECK(device.forward_sample_calls > 0);
  CHECK(device.forward_calls == 0);

  HostDrawingBackend mixed(make_cpu_backend(s.model, CpuOptions{.threads = 1}));
  CHECK(run(*host, true) == run(mixed, true));
  CHECK(mixed.forward_calls > 0);  // steps holding the request with a penalty went to the host
}
