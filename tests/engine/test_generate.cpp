// The single-sequence generation loop on the real stories260K model, against llama2.c's published
// greedy outputs (tests/data/expected/stories260K).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/stop.h"
#include "engine/expected.h"
#include "cpu/cpu_backend.h"
#include "text/tokenizer.h"
#include "trace/sink.h"

using namespace journey;
using journey::test::expected_ids;
using journey::test::expected_text;

namespace {

struct Stories {
  LoadedModel model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
};

// Loaded once; every test reuses the backend (and so its KV pool) like a CLI session would.
Stories& stories() {
  static Stories s = [] {
    Stories loaded;
    loaded.model = load_model(journey::test::kStoriesModel);
    loaded.tokenizer = load_tokenizer(loaded.model.path);
    loaded.backend = make_cpu_backend(loaded.model, CpuOptions{.threads = 1});
    return loaded;
  }();
  return s;
}

GenerationRequest greedy_from_bos(int64_t max_tokens) {
  GenerationRequest request;
  request.prompt_ids = {1};  // BOS, as run.c encodes the empty prompt
  request.sampling.temperature = 0.0;
  request.stop.max_tokens = max_tokens;
  return request;
}

std::vector<int32_t> head(const std::vector<int32_t>& ids, size_t n) { return {ids.begin(), ids.begin() + n}; }

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

TEST_CASE("stories260K greedy, 256 steps from BOS: llama2.c's ids and text, exactly") {
  std::string streamed;
  GenerationCallbacks callbacks;
  callbacks.on_text = [&](std::string_view t) { streamed += t; };
  GenerationResult r = generate(*stories().backend, *stories().tokenizer, greedy_from_bos(256), callbacks);
  CHECK(r.token_ids == expected_ids());
  CHECK(r.text == expected_text(256));
  CHECK(streamed == r.text);
  CHECK(r.prompt_tokens == 1);
  CHECK(r.generated_tokens == 256);
  CHECK(r.finish_reason == FinishReason::Length);
}

TEST_CASE("stories260K greedy, 200 steps from BOS: test_all.py's text") {
  GenerationResult r = generate(*stories().backend, *stories().tokenizer, greedy_from_bos(200));
  CHECK(r.text == expected_text(200));
  CHECK(r.token_ids == head(expected_ids(), 200));
}

TEST_CASE("a multi-token prompt is prefilled in one pass and greedy continues the same story") {
  // EXPECTED.md: "Once upon a time" -> [1, 403, 407, 261, 378], the first four ids of the BOS run.
  GenerationRequest request = greedy_from_bos(12);
  std::vector<int> ids = stories().tokenizer->encode("Once upon a time", /*add_special=*/true, false);
  request.prompt_ids.assign(ids.begin(), ids.end());
  REQUIRE(request.prompt_ids == std::vector<int32_t>{1, 403, 407, 261, 378});
  GenerationResult r = generate(*stories().backend, *stories().tokenizer, request);
  std::vector<int32_t> all = expected_ids();
  CHECK(r.token_ids == std::vector<int32_t>(all.begin() + 4, all.begin() + 16));
  // Decoded after "time" (not after BOS), so the leading space of ", there" ... is kept as text.
  CHECK(starts_with(expected_text(256), "Once upon a time" + r.text));
}

TEST_CASE("a stop string spanning two tokens ends generation; neither it nor later text is emitted") {
  GenerationRequest request = greedy_from_bos(100);
  request.stop.stop_strings = {"little girl"};
  std::vector<std::string> chunks;
  GenerationCallbacks callbacks;
  callbacks.on_text = [&](std::string_view t) { chunks.emplace_back(t); };
  GenerationResult r = generate(*stories().backend, *stories().tokenizer, request, callbacks);
  CHECK(r.text == "Once upon a time, there was a ");
  CHECK(r.finish_reason == FinishReason::Stop);
  REQUIRE(r.stop_string.has_value());
  CHECK(*r.stop_string == "little girl");
  for (const std::string& chunk : chunks) CHECK(chunk.find("little") == std::string::npos);
  // The tokens up to the one that completed the stop string were generated, no more: the first
  // n greedy ids whose decoded text (by the tokenizer alone) contains it.
  std::vector<int32_t> all = expected_ids();
  size_t n = 1;
  while (stories().tokenizer->decode({all.begin(), all.begin() + n}).find("little girl") == std::string::npos) ++n;
  CHECK(r.token_ids == head(all, n));
}

TEST_CASE("an EOS id ends generation with 'stop' and its text is not emitted") {
  std::vector<int32_t> all = expected_ids();
  GenerationRequest request = greedy_from_bos(100);
  request.stop.eos_ids = {all[14]};  // pretend the 15th greedy token were EOS
  GenerationResult r = generate(*stories().backend, *stories().tokenizer, request);
  CHECK(r.finish_reason == FinishReason::Stop);
  CHECK(r.token_ids == head(all, 15));
  CHECK(r.generated_tokens == 15);
  // The text is what the first 14 tokens say: a proper prefix of the story.
  GenerationResult first14 = generate(*stories().backend, *stories().tokenizer, greedy_from_bos(14));
  CHECK(r.text == first14.text);
}

TEST_CASE("a llama2.c model ends its story on BOS, where run.c stops (`if (next == 1) break;`)") {
  // The model's own end ids (generation_config.json of the converted model) include BOS.
  const std::vector<int32_t> end_ids =
      collect_eos_ids(stories().model.generation, stories().model.config, *stories().tokenizer);
  CHECK(std::find(end_ids.begin(), end_ids.end(), 1) != end_ids.end());
  GenerationRequest with_model_ids = greedy_from_bos(511);
  with_model_ids.stop.eos_ids = end_ids;
  const GenerationResult stopped = generate(*stories().backend, *stories().tokenizer, with_model_ids);
  // With EOS alone the model samples BOS and runs on into a new story.
  GenerationRequest eos_only = greedy_from_bos(511);
  eos_only.stop.eos_ids = {2};
  const GenerationResult runs_on = generate(*stories().backend, *stories().tokenizer, eos_only);
  const auto bos = std::find(runs_on.token_ids.begin(), runs_on.token_ids.end(), 1);
  REQUIRE(bos != runs_on.token_ids.end());
  const size_t through_bos = size_t(bos - runs_on.token_ids.begin()) + 1;
  CHECK(through_bos > 256);  // llama2.c's published 256 steps never reach it
  CHECK(stopped.finish_reason == FinishReason::Stop);
  CHECK(stopped.token_ids == head(runs_on.token_ids, through_bos));
  CHECK(head(stopped.token_ids, 256) == expected_ids());
  CHECK(starts_with(runs_on.text, stopped.text));  // the same story, without the next one
  CHECK(stopped.text.size() < runs_on.text.size());
}

TEST_CASE("max_tokens and the context length both end with 'length'") {
  GenerationResult ten = generate(*stories().backend, *stories().tokenizer, greedy_from_bos(10));
  CHECK(ten.token_ids == head(expected_ids(), 10));
  CHECK(ten.finish_reason == FinishReason::Length);
  CHECK(starts_with(expected_text(256), ten.text));

  // Context 512: from BOS, positions 0..511 are fed, so 512 tokens can be sampled (run.c -n 512).
  GenerationResult full = generate(*stories().backend, *stories().tokenizer, greedy_from_bos(100000));
  CHECK(full.generated_tokens == stories().model.config.max_position_embeddings);
  CHECK(full.finish_reason == FinishReason::Length);
  CHECK(head(full.token_ids, 256) == expected_ids());

  // A prompt that fills the context exactly still gets its one token.
  GenerationRequest filled = greedy_from_bos(5);
  filled.prompt_ids = head(full.token_ids, 512);
  filled.prompt_ids[0] = 1;
  CHECK(generate(*stories().backend, *stories().tokenizer, filled).generated_tokens == 1);
}

TEST_CASE("bad requests get clear errors") {
  GenerationRequest request = greedy_from_bos(5);
  request.prompt_ids.assign(513, 300);
  CHECK_THROWS_WITH_AS(generate(*stories().backend, *stories().tokenizer, request),
                       doctest::Contains("513 tokens but the model's context is 512"), Error);
  request.prompt_ids.clear();
  CHECK_THROWS_WITH_AS(generate(*stories().backend, *stories().tokenizer, request), doctest::Contains("empty"), Error);
  request.prompt_ids = {1, 512};
  CHECK_THROWS_WITH_AS(generate(*stories().backend, *stories().tokenizer, request),
                       doctest::Contains("token id 512 is outside the vocabulary"), Error);
  request = greedy_from_bos(0);
  CHECK_THROWS_WITH_AS(generate(*stories().backend, *stories().tokenizer, request), doctest::Contains("max_tokens"), Error);
  request = greedy_from_bos(5);
  request.sampling.top_p = 2.0;
  CHECK_THROWS_WITH_AS(generate(*stories().backend, *stories().tokenizer, request), doctest::Contains("top_p"), Error);
}

TEST_CASE("sampling through the whole stack: a seed reproduces the run, another seed differs") {
  auto run = [](uint64_t seed) {
    GenerationRequest request = greedy_from_bos(60);
    request.sampling.temperature = 1.0;
    request.sampling.seed = seed;
    return generate(*stories().backend, *stories().tokenizer, request);
  };
  GenerationResult a = run(133742), b = run(133742), c = run(7);
  CHECK(a.token_ids == b.token_ids);
  CHECK(a.text == b.text);
  CHECK(a.seed == 133742);
  CHECK(a.token_ids != c.token_ids);
}

namespace {
class StageCounter : public TraceSink {
 public:
  bool wants(Stage stage, int) const override { return stage == Stage::logits || stage == Stage::probs_min_p; }
  void record(Stage stage, int, const TraceTensor& t) override {
    ++count[stage];
    shapes[stage] = t.shape;
  }
  std::map<Stage, int> count;
  std::map<Stage, std::vector<int64_t>> shapes;
};
}  // namespace

TEST_CASE("per-token callback and trace sink see every step") {
  GenerationRequest request = greedy_from_bos(5);
  request.sampling.temperature = 0.5;
  request.sampling.seed = 1;
  request.sampling.logprobs = 3;
  std::vector<int64_t> positions;
  std::vector<int32_t> ids;
  GenerationCallbacks callbacks;
  callbacks.on_token = [&](const SampledToken& token, int64_t position) {
    positions.push_back(position);
    ids.push_back(token.id);
    CHECK(token.top.size() == 3);
    CHECK(token.logprob <= 0.0f);
    CHECK((token.prob > 0.0f && token.prob <= 1.0f));
  };
  StageCounter sink;
  GenerationResult r = generate(*stories().backend, *stories().tokenizer, request, callbacks, &sink);
  CHECK(ids == r.token_ids);
  CHECK(positions == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK(sink.count[Stage::probs_min_p] == 5);                        // one distribution per sampled token
  CHECK(sink.shapes[Stage::probs_min_p] == std::vector<int64_t>{512});
  CHECK(sink.count[Stage::logits] == 5);                             // prefill + 4 decode steps
}
