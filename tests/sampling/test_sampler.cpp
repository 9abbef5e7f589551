// The Sampler: the order of its processors (observed through the trace hooks), greedy, seeds,
// penalties across steps, and the logprobs it reports.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "core/error.h"
#include "sampling/processors.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"
#include "trace/sink.h"

using namespace journey;

namespace {

// Keeps a copy of every [V] distribution the sampler records.
class RecordingSink : public TraceSink {
 public:
  bool wants(Stage, int) const override { return true; }
  void record(Stage stage, int, const TraceTensor& t) override {
    seen[stage] = std::vector<float>(t.data.begin(), t.data.end());
  }
  void record_ints(Stage stage, int, std::span<const int32_t> values, std::vector<int64_t>) override {
    ints[stage] = std::vector<int32_t>(values.begin(), values.end());
  }
  std::map<Stage, std::vector<float>> seen;
  std::map<Stage, std::vector<int32_t>> ints;
};

void check_close(const std::vector<float>& got, std::initializer_list<double> want_list, double tol = 1e-5) {
  // Taken as initializer_list<double>: with GCC 12 a braced {0.5, 0.5, 0, 0} bound to a
  // const std::vector<double>& did not hold those four values.
  std::vector<double> want(want_list);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("index ", i, ": got ", got[i], ", want ", want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol);
  }
}

std::vector<float> random_logits(Pcg32& rng, int vocab) {
  std::vector<float> logits(vocab);  // [V]
  for (float& l : logits) l = 8.0f * rng.next_float() - 4.0f;
  return logits;
}

}  // namespace

TEST_CASE("the processors run in order: penalties, temperature, top-k, top-p, min-p") {
  // Raw logits ln[1, 2, 3, 4]; the prompt holds id 3 and repetition_penalty = 2, so id 3's
  // positive logit ln4 becomes ln4 / 2 = ln2:        penalized = ln[1, 2, 3, 2]
  // temperature 0.5 squares the odds:                [1, 4, 9, 4] / 18
  // top_k 3 drops id 0:                              [0, 4, 9, 4] / 17
  // top_p 0.7: 9/17 = 0.53 is short, the tie 4/17 goes to id 1 (13/17 = 0.76 >= 0.7), id 3 goes:
  //                                                  [0, 4, 9, 0] / 13
  // min_p 0.5: threshold 0.5 * 9/13 = 0.346 > 4/13:  [0, 0, 1, 0]
  // Had top-p run before temperature (on [1,2,3,4]/10: 0.4, 0.3 -> 0.7) two tokens would be left.
  SamplingParams params;
  params.temperature = 0.5;
  params.top_k = 3;
  params.top_p = 0.7;
  params.min_p = 0.5;
  params.repetition_penalty = 2.0;
  params.seed = 1;
  std::vector<int32_t> prompt = {3};
  Sampler sampler(params, prompt);
  RecordingSink sink;
  std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  SampledToken token = sampler.sample(logits, &sink);

  check_close(sink.seen.at(Stage::probs_penalized), {0.0, std::log(2.0), std::log(3.0), std::log(2.0)});
  check_close(sink.seen.at(Stage::probs_temperature), {1.0 / 18, 4.0 / 18, 9.0 / 18, 4.0 / 18});
  check_close(sink.seen.at(Stage::probs_top_k), {0, 4.0 / 17, 9.0 / 17, 4.0 / 17});
  check_close(sink.seen.at(Stage::probs_top_p), {0, 4.0 / 13, 9.0 / 13, 0});
  check_close(sink.seen.at(Stage::probs_min_p), {0, 0, 1, 0});
  CHECK(token.id == 2);
  CHECK(token.prob == doctest::Approx(1.0));
  CHECK(sink.ints.at(Stage::sampled) == std::vector<int32_t>{2});
}

TEST_CASE("logprobs are the log-softmax of the raw logits, not of the processed distribution") {
  // Raw [0, ln2, ln4] -> softmax [1, 2, 4] / 7 whatever temperature and filters do.
  SamplingParams params;
  params.temperature = 0.5;
  params.top_k = 1;
  params.logprobs = 2;
  Sampler sampler(params, {});
  std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f)};
  SampledToken token = sampler.sample(logits);
  CHECK(token.id == 2);
  CHECK(token.prob == doctest::Approx(1.0));  // top_k 1 left one token
  CHECK(token.logprob == doctest::Approx(std::log(4.0 / 7)));
  REQUIRE(token.top.size() == 2);
  CHECK(token.top[0].id == 2);
  CHECK(token.top[0].logprob == doctest::Approx(std::log(4.0 / 7)));
  CHECK(token.top[1].id == 1);
  CHECK(token.top[1].logprob == doctest::Approx(std::log(2.0 / 7)));
}

TEST_CASE("greedy is the argmax with lowest-id ties and equals top_k = 1") {
  SamplingParams greedy;
  greedy.temperature = 0.0;
  Sampler tie_breaker(greedy, {});
  std::vector<float> tied = {0.5f, 2.0f, 2.0f};
  SampledToken tie = tie_breaker.sample(tied);
  CHECK(tie.id == 1);
  // prob for greedy: softmax of the penalized logits, here e^2 / (e^0.5 + 2 e^2).
  CHECK(tie.prob == doctest::Approx(std::exp(2.0) / (std::exp(0.5) + 2 * std::exp(2.0))));

  SamplingParams top1;
  top1.temperature = 0.7;
  top1.top_k = 1;
  top1.seed = 99;
  Sampler a(greedy, {}), b(top1, {});
  Pcg32 rng(2024);
  for (int step = 0; step < 200; ++step) {
    std::vector<float> logits = random_logits(rng, 257);
    CHECK(a.sample(logits).id == b.sample(logits).id);
  }
}

TEST_CASE("a seed reproduces the draws; different seeds differ") {
  SamplingParams params;
  params.temperature = 1.0;
  auto draws = [&](uint64_t seed) {
    params.seed = seed;
    Sampler sampler(params, {});
    Pcg32 rng(5);  // the same logits for every run
    std::vector<int32_t> ids;
    for (int step = 0; step < 100; ++step) ids.push_back(sampler.sample(random_logits(rng, 100)).id);
    return ids;
  };
  CHECK(draws(42) == draws(42));
  CHECK(draws(42) != draws(43));
  Sampler unseeded(SamplingParams{}, {});
  Sampler unseeded2(SamplingParams{}, {});
  CHECK(unseeded.seed() != unseeded2.seed());  // fresh seeds from the OS (2^-64 chance to collide)
}

TEST_CASE("logit_bias +100 forces a token and -100 bans it; logprobs stay those of the raw logits") {
  Pcg32 rng(11);
  SamplingParams forced;
  forced.temperature = 1.0;
  forced.seed = 5;
  forced.logit_bias = {{17, 100.0f}};
  Sampler force(forced, {});
  for (int step = 0; step < 50; ++step) {
    std::vector<float> logits = random_logits(rng, 64);  // values in a few units: +100 dominates
    SampledToken t = force.sample(logits);
    CHECK(t.id == 17);
    CHECK(t.logprob == doctest::Approx(log_softmax(logits)[17]));
    // greedy with the argmax banned picks the runner-up
    const int32_t best = argmax(logits);
    Sampler ban_best(SamplingParams{.temperature = 0.0, .logit_bias = {{best, -100.0f}}}, {});
    std::vector<float> without = logits;
    without[best] = -std::numeric_limits<float>::infinity();
    CHECK(ban_best.sample(logits).id == argmax(without));
  }
  CHECK_FALSE(force.can_draw_on_device());
}

TEST_CASE("draws follow the distribution") {
  // 40000 draws from [0.1, 0.2, 0.3, 0.4]: each frequency within 0.01 (about 4 standard deviations).
  SamplingParams params;
  params.seed = 7;
  Sampler sampler(params, {});
  std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  std::vector<int> counts(4, 0);
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[sampler.sample(logits).id];
  for (int id = 0; id < 4; ++id) {
    INFO("id ", id, " count ", counts[id]);
    CHECK(std::fabs(counts[id] / double(n) - 0.1 * (id + 1)) < 0.01);
  }
}

TEST_CASE("frequency penalty grows with the count, presence penalty does not") {
  std::vector<float> logits = {1.0f, 0.9f, 0.5f};
  SUBCASE("frequency 0.2: 1.0 -> 0.8 after one use, so the two alternate") {
    // step1: id0 (1.0). step2: id0 0.8 < id1 0.9 -> id1. step3: id0 0.8 > id1 0.7 -> id0.
    // step4: id0 0.6 < id1 0.7 -> id1.
    SamplingParams params;
    params.temperature = 0;
    params.frequency_penalty = 0.2;
    Sampler sampler(params, {});
    std::vector<int32_t> ids;
    for (int i = 0; i < 4; ++i) ids.push_back(sampler.sample(logits).id);
    CHECK(ids == std::vector<int32_t>{0, 1, 0, 1});
  }
  SUBCASE("presence 0.3: a flat 0.3 once a token was used") {
    // step1: id0. step2: id0 0.7 < id1 0.9 -> id1. step3: 0.7, 0.6, 0.5 -> id0. step4: still 0.7 -> id0.
    SamplingParams params;
    params.temperature = 0;
    params.presence_penalty = 0.3;
    Sampler sampler(params, {});
    std::vector<int32_t> ids;
    for (int i = 0; i < 4; ++i) ids.push_back(sampler.sample(logits).id);
    CHECK(ids == std::vector<int32_t>{0, 1, 0, 0});
  }
  SUBCASE("they ignore the prompt (OpenAI: output tokens only)") {
    SamplingParams params;
    params.temperature = 0;
    params.frequency_penalty = 2.0;
    params.presence_penalty = 2.0;
    std::vector<int32_t> prompt = {0, 0, 0};
    Sampler sampler(params, prompt);
    CHECK(sampler.sample(logits).id == 0);
  }
}

TEST_CASE("repetition penalty covers prompt and output (HF)") {
  SamplingParams params;
  params.temperature = 0;
  params.repetition_penalty = 1.5;
  SUBCASE("positive logit divided: 2.0 / 1.5 = 1.33 < 1.5") {
    std::vector<int32_t> prompt = {0};
    Sampler sampler(params, prompt);
    std::vector<float> logits = {2.0f, 1.5f};
    CHECK(sampler.sample(logits).id == 1);
  }
  SUBCASE("negative logit multiplied: -1.0 * 1.5 = -1.5 < -1.2") {
    std::vector<int32_t> prompt = {0};
    Sampler sampler(params, prompt);
    std::vector<float> logits = {-1.0f, -1.2f};
    CHECK(sampler.sample(logits).id == 1);
  }
  SUBCASE("output tokens count too, once each however often they appear") {
    Sampler sampler(params, {});
    std::vector<float> logits = {2.0f, 1.5f, 1.4f};
    // step1: id0. step2: id0 1.33 < 1.5 -> id1. step3: id0 1.33, id1 1.0, id2 1.4 -> id2.
    // step4: 1.33, 1.0, 0.93 -> id0 (penalized once, not twice).
    std::vector<int32_t> ids;
    for (int i = 0; i < 4; ++i) ids.push_back(sampler.sample(logits).id);
    CHECK(ids == std::vector<int32_t>{0, 1, 2, 0});
  }
}

TEST_CASE("the sampler validates its params and the prompt ids") {
  SamplingParams bad;
  bad.top_p = 0;
  CHECK_THROWS_WITH_AS(Sampler(bad, {}), doctest::Contains("top_p"), Error);
  SamplingParams params;
  params.repetition_penalty = 1.2;
  std::vector<int32_t> prompt = {7};
  Sampler sampler(params, prompt);
  std::vector<float> logits = {0.0f, 1.0f};
  CHECK_THROWS_WITH_AS(sampler.sample(logits), doctest::Contains("outside the vocabulary"), Error);
}
