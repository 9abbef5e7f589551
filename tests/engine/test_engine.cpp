// The engine on the real CPU reference backend and the shipped stories260K model:
//  - paged attention reads the same K/V through a scattered block table as through a
//    contiguous one, and a prefill gives the same logits as feeding the tokens one by one;
//  - a request gives the same greedy tokens alone and inside a batch of 16 mixed requests
//    (chunked prefill, sampled neighbours, shared prefixes), also when a tiny pool forces
//    preemption; afterwards every KV block is free.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>

#include "assets/model.h"
#include "core/error.h"
#include "engine/llm_engine.h"
#include "cpu/cpu_backend.h"

using namespace journey;

namespace {

std::string model_path() {
  // Override only to try another model by hand; the test reads the shipped copy.
  if (const char* env = std::getenv("JOURNEY_SERVING_TEST_MODEL")) return env;
  return std::string(JOURNEY_SOURCE_DIR) + "/data/stories260K";
}

struct Fixture {
  LoadedModel model = load_model(model_path());
  std::unique_ptr<Backend> backend = make_cpu_backend(model, CpuOptions{1});
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(1 + rng() % (vocab - 1)));
  return p;
}

float max_abs_diff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Runs requests to completion; returns the tokens of each request (by index).
std::map<size_t, std::vector<int32_t>> run_all(LLMEngine& engine, const std::vector<EngineRequest>& requests,
                                               std::map<size_t, std::vector<float>>* logprobs = nullptr) {
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) index[engine.add_request(requests[i])] = i;
  std::map<size_t, std::vector<int32_t>> tokens;
  int64_t guard = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step())
      for (const SampledToken& t : out.tokens) {
        tokens[index.at(out.request_id)].push_back(t.id);
        if (logprobs) (*logprobs)[index.at(out.request_id)].push_back(t.logprob);
      }
    REQUIRE(++guard < 100000);
  }
  return tokens;
}

}  // namespace

TEST_CASE("paged attention: a scattered block table gives the same logits as a contiguous one") {
  Backend& backend = *fixture().backend;
  const int64_t V = backend.config().vocab_size;
  backend.allocate_kv_cache(32, 4);
  std::mt19937 rng(1);
  std::vector<int32_t> tokens = random_prompt(rng, 22, V);  // 6 blocks of 4

  auto run = [&](std::vector<int32_t> table) {
    ForwardBatch batch;
    batch.sequences.push_back({1, tokens, 0, table, /*all_logits=*/true});
    return backend.forward(batch);
  };
  ForwardOutput contiguous = run({0, 1, 2, 3, 4, 5});     // [22, V]
  ForwardOutput scattered = run({17, 3, 29, 8, 22, 11});  // [22, V]
  REQUIRE(contiguous.logits.size() == static_cast<size_t>(22 * V));
  REQUIRE(scattered.logits.size() == contiguous.logits.size());
  // Same arithmetic, only the addresses differ: equal up to float noise.
  CHECK(max_abs_diff(contiguous.logits.data(), scattered.logits.data(), 22 * V) <= 1e-5f);

  // Feeding the same tokens one at a time through the scattered table (a decode loop over the
  // paged cache) reproduces every row of the prefill.
  std::vector<int32_t> table{5, 30, 12, 0, 19, 26};
  float worst = 0;
  for (int64_t p = 0; p < 22; ++p) {
    ForwardBatch batch;
    batch.sequences.push_back({1, {tokens[p]}, p, std::vector<int32_t>(table.begin(), table.begin() + p / 4 + 1), false});
    ForwardOutput step = backend.forward(batch);
    worst = std::max(worst, max_abs_diff(step.last_row(0), contiguous.row(p), V));
  }
  CHECK(worst <= 1e-4f);

  // Two sequences in one batch, tables interleaved in the pool, equal their solo runs.
  std::vector<int32_t> other = random_prompt(rng, 9, V);
  ForwardBatch both;
  both.sequences.push_back({1, tokens, 0, {2, 4, 6, 8, 10, 12}, true});
  both.sequences.push_back({2, other, 0, {3, 5, 7}, true});
  ForwardOutput together = backend.forward(both);
  ForwardBatch alone;
  alone.sequences.push_back({2, other, 0, {20, 21, 22}, true});
  ForwardOutput solo = backend.forward(alone);
  // A batch of 31 rows runs the projections with another blocking (and, below 17 rows, another
  // kernel) than 22 or 9 rows, so sums are ordered differently: the same 1e-4 as the decode loop.
  CHECK(max_abs_diff(together.row(0), contiguous.row(0), 22 * V) <= 1e-4f);
  CHECK(max_abs_diff(together.row(together.row_begin[1]), solo.row(0), 9 * V) <= 1e-4f);
}

TEST_CASE("continuous batching: greedy tokens alone == inside a batch of 16 mixed requests") {
  Backend& backend = *fixture().backend;
  const int64_t V = backend.config().vocab_size;
  std::mt19937 rng(42);
  std::vector<int32_t> shared = random_prompt(rng, 20, V);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 16; ++i) {
    EngineRequest r;
    r.prompt = i % 3 == 0 ? shared : std::vector<int32_t>{};
    auto tail = random_prompt(rng, 1 + rng() % 60, V);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.max_tokens = 4 + rng() % 40;
    r.ignore_eos = true;
    r.params.temperature = i % 4 == 1 ? 0.8 : 0.0;  // some neighbours sample (seeded)
    r.params.seed = 1000 + i;
    requests.push_back(r);
  }

  EngineConfig solo_config;
  solo_config.block_size = 16;
  solo_config.enable_prefix_caching = false;
  std::map<size_t, std::vector<int32_t>> alone;
  std::map<size_t, std::vector<float>> alone_lp;
  for (size_t i = 0; i < requests.size(); ++i) {
    LLMEngine engine(backend, solo_config);
    std::map<size_t, std::vector<float>> lp;
    alone[i] = run_all(engine, {requests[i]}, &lp)[0];
    alone_lp[i] = lp[0];
    CHECK(engine.stats().kv.used_blocks == 0);
  }

  SUBCASE("roomy pool, small token budget (chunked prefill), prefix caching on") {
    EngineConfig config;
    config.block_size = 16;
    config.scheduler = {16, 64};
    LLMEngine engine(backend, config);
    std::map<size_t, std::vector<float>> lp;
    auto batched = run_all(engine, requests, &lp);
    for (size_t i = 0; i < requests.size(); ++i) {
      INFO("request " << i << (requests[i].params.greedy() ? " (greedy)" : " (sampled)"));
      CHECK(batched[i] == alone[i]);
      // Logprobs of the chosen tokens agree to float noise (batching changes summation order).
      if (batched[i] == alone[i])
        CHECK(max_abs_diff(lp[i].data(), alone_lp[i].data(), static_cast<int64_t>(lp[i].size())) <= 1e-3f);
    }
    EngineStats st = engine.stats();
    CHECK(st.kv.used_blocks == 0);
    CHECK(st.kv.free_blocks == st.kv.num_blocks);
    CHECK(st.kv.prefix_hits > 0);  // the shared 20-token prefix: its first full block
    CHECK(st.preemptions == 0);
  }

  SUBCASE("the draws of a step made in parallel give exactly what one thread gives") {
    // Each request has its own sampler and RNG, so drawing the 16 sequences of a step on 3
    // threads must not change a single token or logprob bit (seeded sampled neighbours included).
    // Bit equality also needs the forward itself to be reproducible from run to run: its buffers
    // are cache-line aligned wherever the heap is (core/huge_pages.h); with plain std::vector
    // buffers the logprobs of two identical runs differed in their last bits.
    auto run_with = [&](int sampling_threads, std::map<size_t, std::vector<float>>& lp) {
      EngineConfig config;
      config.block_size = 16;
      config.scheduler = {16, 64};
      config.sampling_threads = sampling_threads;
      LLMEngine engine(backend, config);
      auto tokens = run_all(engine, requests, &lp);
      CHECK(engine.stats().kv.used_blocks == 0);
      return tokens;
    };
    std::map<size_t, std::vector<float>> lp_one, lp_three;
    auto one = run_with(1, lp_one);
    auto three = run_with(3, lp_three);
    for (size_t i = 0; i < requests.size(); ++i) {
      INFO("request " << i);
      CHECK(three[i] == one[i]);
      CHECK(lp_three[i] == lp_one[i]);
      CHECK(three[i] == alone[i]);
    }
  }

  SUBCASE("a tiny pool forces preemption and every request still completes identically") {
    EngineConfig config;
    config.block_size = 4;
    config.num_kv_blocks = 32;  // 128 slots for 16 requests of up to ~124 tokens
    config.scheduler = {16, 96};
    LLMEngine engine(backend, config);
    auto batched = run_all(engine, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      INFO("request " << i);
      CHECK(batched[i] == alone[i]);
    }
    EngineStats st = engine.stats();
    CHECK(st.preemptions > 0);
    CHECK(st.kv.used_blocks == 0);
  }
}

TEST_CASE("prefix cache on the real model: reused blocks give the same greedy continuation") {
  Backend& backend = *fixture().backend;
  std::mt19937 rng(7);
  EngineRequest r;
  r.prompt = random_prompt(rng, 32, backend.config().vocab_size);  // exactly 2 full blocks of 16
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.params.temperature = 0;
  EngineConfig config;
  LLMEngine engine(backend, config);
  auto first = run_all(engine, {r})[0];
  // The second time the whole prompt is cached; the last token is recomputed in place.
  int64_t id = engine.add_request(r);
  std::vector<int32_t> second;
  int64_t cached = -1;
  while (engine.has_unfinished())
    for (const RequestOutput& out : engine.step()) {
      if (out.request_id != id) continue;
      cached = out.cached_prompt_tokens;
      for (const SampledToken& t : out.tokens) second.push_back(t.id);
    }
  CHECK(cached == 31);
  CHECK(second == first);
  CHECK(engine.stats().kv.used_blocks == 0);
}

TEST_CASE("abort frees the blocks; bad requests are refused with a clear error") {
  Backend& backend = *fixture().backend;
  EngineConfig config;
  LLMEngine engine(backend, config);
  EngineRequest r;
  r.prompt = {1, 2, 3, 4, 5};
  r.max_tokens = 100;
  r.ignore_eos = true;
  int64_t id = engine.add_request(r);
  engine.step();
  engine.step();
  CHECK(engine.stats().kv.used_blocks > 0);
  engine.abort_request(id);
  CHECK(engine.stats().kv.used_blocks == 0);
  auto outs = engine.step();
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].aborted);
  CHECK_FALSE(engine.has_unfinished());

  EngineRequest too_long;
  too_long.prompt.assign(static_cast<size_t>(engine.max_model_len()), 1);
  CHECK_THROWS_WITH_AS(engine.add_request(too_long), doctest::Contains("context"), Error);
  EngineRequest too_many;
  too_many.prompt = {1, 2};
  too_many.max_tokens = engine.max_model_len();
  CHECK_THROWS_WITH_AS(engine.add_request(too_many), doctest::Contains("max_tokens"), Error);
  EngineRequest empty;
  CHECK_THROWS_AS(engine.add_request(empty), Error);
  EngineRequest bad_id;
  bad_id.prompt = {static_cast<int32_t>(backend.config().vocab_size)};
  CHECK_THROWS_AS(engine.add_request(bad_id), Error);
  EngineRequest bad_temp;
  bad_temp.prompt = {1};
  bad_temp.params.temperature = -1;
  CHECK_THROWS_AS(engine.add_request(bad_temp), Error);
  CHECK_FALSE(engine.has_unfinished());
}

TEST_CASE("max_tokens ends a request with finish_reason length") {
  Backend& backend = *fixture().backend;
  LLMEngine engine(backend, EngineConfig{});
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 5;
  r.ignore_eos = true;
  r.params.temperature = 0;
  engine.add_request(r);
  std::vector<RequestOutput> all;
  while (engine.has_unfinished())
    for (auto& o : engine.step()) all.push_back(o);
  REQUIRE(all.size() == 5);
  CHECK(all.back().finish_reason == FinishReason::Length);
  CHECK(all.back().output_tokens == 5);
}
