// Structured output in both generation loops on the shipped stories260K (a model that knows no
// JSON): every answer under a schema parses and has the schema's shape, finishes with "stop" once
// the grammar is complete, and the serving engine gives the same answer as generate() for the
// same seed — alone, beside unconstrained requests, and through preemption by a tiny KV pool
// (the matcher's state lives with the request, not with its blocks).
#include <doctest/doctest.h>

#include <map>

#include "assets/model.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/generate.h"
#include "engine/llm_engine.h"
#include "text/tokenizer.h"

using namespace journey;

namespace {

struct GrammarFixture {
  LoadedModel model = load_model(std::string(JOURNEY_SOURCE_DIR) + "/data/stories260K");
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model.path);
  std::unique_ptr<Backend> backend = make_cpu_backend(model, CpuOptions{1});
};
GrammarFixture& grammar_fixture() {
  static GrammarFixture f;
  return f;
}

Grammar person() {
  return Grammar::json_schema(nlohmann::ordered_json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":10},"age":{"type":"integer"},"pets":{"type":"array","items":{"enum":["cat","dog"]},
      "maxItems":2}},"required":["name","age","pets"]})"), "schema");
}

void check_person(const std::string& text) {
  INFO(text);
  const nlohmann::json j = nlohmann::json::parse(text);  // throws (fails the test) if not JSON
  REQUIRE(j.is_object());
  CHECK(j.size() == 3);
  CHECK(j.at("name").is_string());
  CHECK(j.at("name").get<std::string>().size() <= 40);  // 10 characters, up to 4 bytes each
  CHECK(j.at("age").is_number_integer());
  CHECK(j.at("pets").size() <= 2);
}

}  // namespace

TEST_CASE("structured output: generate() and the engine agree, every answer has the schema's shape") {
  GrammarFixture& f = grammar_fixture();
  const std::vector<int> prompt_ids = f.tokenizer->encode("Once upon a time", true, false);
  const std::vector<int32_t> prompt(prompt_ids.begin(), prompt_ids.end());
  const std::vector<int32_t> eos = collect_eos_ids(f.model.generation, f.model.config, *f.tokenizer);
  constexpr int kSeeds = 8;

  std::map<int, std::string> by_generate;
  for (int seed = 0; seed < kSeeds; ++seed) {
    GenerationRequest request;
    request.prompt_ids = prompt;
    request.sampling.seed = seed;
    request.stop.eos_ids = eos;
    request.stop.max_tokens = 300;
    request.grammar = person();
    const GenerationResult r = generate(*f.backend, *f.tokenizer, request);
    CHECK(r.finish_reason == FinishReason::Stop);
    check_person(r.text);
    by_generate[seed] = r.text;
  }

  // The same requests in one engine, between unconstrained neighbours, with a pool so small that
  // sequences are preempted and recomputed.
  EngineConfig config;
  config.block_size = 4;
  config.num_kv_blocks = 90;  // one request needs up to 77; sixteen at once cannot all fit
  config.enable_prefix_caching = false;
  config.eos_token_ids = eos;
  LLMEngine engine(*f.backend, config, f.tokenizer.get());
  std::map<int64_t, int> seed_of;
  std::map<int64_t, std::string> text;
  std::map<int64_t, FinishReason> finish;
  for (int seed = 0; seed < kSeeds; ++seed) {
    EngineRequest r;
    r.prompt = prompt;
    r.params.seed = seed;
    r.max_tokens = 300;
    r.grammar = person();
    seed_of[engine.add_request(r)] = seed;
    EngineRequest plain;
    plain.prompt = prompt;
    plain.params.seed = 100 + seed;
    plain.max_tokens = 40;
    plain.ignore_eos = true;
    engine.add_request(plain);
  }
  int64_t guard = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      REQUIRE_FALSE(out.aborted);
      text[out.request_id] += out.text;
      if (out.finish_reason) finish[out.request_id] = *out.finish_reason;
    }
    REQUIRE(++guard < 100000);
  }
  CHECK(engine.stats().preemptions > 0);
  for (const auto& [id, seed] : seed_of) {
    CHECK(finish.at(id) == FinishReason::Stop);
    CHECK(text.at(id) == by_generate.at(seed));
  }
}

TEST_CASE("structured output needs a tokenizer; a grammar that admits nothing is refused") {
  GrammarFixture& f = grammar_fixture();
  EngineConfig config;
  config.num_kv_blocks = 16;
  LLMEngine no_tokenizer(*f.backend, config, nullptr);
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.grammar = Grammar::json_object();
  CHECK_THROWS_WITH_AS(no_tokenizer.add_request(r), doctest::Contains("needs a tokenizer"), Error);
  LLMEngine engine(*f.backend, config, f.tokenizer.get());
  r.grammar = Grammar::json_schema(nlohmann::json::parse(R"({"$ref":"#"})"), "schema");
  CHECK_THROWS_WITH_AS(engine.add_request(r), doctest::Contains("admits no text"), Error);
}
