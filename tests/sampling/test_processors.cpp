// Each logits processor on small distributions whose results are worked out by hand in the comments.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "sampling/params.h"
#include "sampling/processors.h"
#include "sampling/rng.h"

using namespace journey;

namespace {
void check_close(const std::vector<float>& got, std::initializer_list<double> want_list, double tol = 1e-6) {
  // Taken as initializer_list<double>: with GCC 12 a braced {0.5, 0.5, 0, 0} bound to a
  // const std::vector<double>& did not hold those four values.
  std::vector<double> want(want_list);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("index ", i, ": got ", got[i], ", want ", want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol);
  }
}
}  // namespace

TEST_CASE("softmax and log_softmax") {
  // exp([0, ln2, ln4]) = [1, 2, 4], sum 7.
  std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f)};
  check_close(softmax(logits), {1.0 / 7, 2.0 / 7, 4.0 / 7});
  check_close(log_softmax(logits), {std::log(1.0 / 7), std::log(2.0 / 7), std::log(4.0 / 7)});
  // Shift invariance and no overflow: +1000 on every logit changes nothing.
  std::vector<float> shifted = {1000.0f, 1000.0f + std::log(2.0f), 1000.0f + std::log(4.0f)};
  check_close(softmax(shifted), {1.0 / 7, 2.0 / 7, 4.0 / 7}, 1e-4);
  // The normalizer alone: log(1 + 2 + 4), and +1000 after the shift (no overflow of exp(1000)).
  CHECK(std::fabs(log_normalizer(logits) - std::log(7.0)) <= 1e-6);
  CHECK(std::fabs(log_normalizer(shifted) - (1000.0 + std::log(7.0))) <= 1e-4);
  // It is what log_softmax subtracts, on a larger random-looking row too.
  std::vector<float> row(1000);
  for (size_t i = 0; i < row.size(); ++i) row[i] = float(std::sin(double(i) * 12.9898) * 8.0);
  const std::vector<float> logprobs = log_softmax(row);
  const double log_z = log_normalizer(row);
  for (size_t i = 0; i < row.size(); i += 97) CHECK(std::fabs(double(row[i]) - log_z - logprobs[i]) <= 1e-5);
  // The vectorized softmax (blocks of 16, a padded tail: 1000 = 62 * 16 + 8) against double
  // arithmetic on every element, with masked (-inf) entries in the body and in the tail exactly 0.
  row[3] = row[997] = -std::numeric_limits<float>::infinity();
  const std::vector<float> probs = softmax(row);
  double max_logit = -1e300, z = 0.0;
  for (float v : row) max_logit = std::max(max_logit, double(v));
  for (float v : row) z += std::exp(double(v) - max_logit);
  double total = 0.0;
  for (size_t i = 0; i < row.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(probs[i] - std::exp(double(row[i]) - max_logit) / z) <= 1e-7);
    total += probs[i];
  }
  CHECK(probs[3] == 0.0f);
  CHECK(probs[997] == 0.0f);
  CHECK(std::fabs(total - 1.0) <= 1e-5);
}

TEST_CASE("temperature divides the logits") {
  // [0, ln2, ln4] / 0.5 = [0, ln4, ln16] -> exp = [1, 4, 16], sum 21.
  std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f)};
  apply_temperature(logits, 0.5);
  check_close(softmax(logits), {1.0 / 21, 4.0 / 21, 16.0 / 21});
  // Temperature 2: [0, ln2/2, ln4/2] -> exp = [1, sqrt2, 2], sum 3 + sqrt2.
  std::vector<float> warm = {0.0f, std::log(2.0f), std::log(4.0f)};
  apply_temperature(warm, 2.0);
  double s = 3.0 + std::sqrt(2.0);
  check_close(softmax(warm), {1.0 / s, std::sqrt(2.0) / s, 2.0 / s});
}

TEST_CASE("top-k keeps exactly k tokens, ties to the lower id") {
  // Keep 0.3 and 0.4; 0.7 left -> [0, 0, 3/7, 4/7].
  std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.4f};
  keep_top_k(probs, 2);
  check_close(probs, {0, 0, 3.0 / 7, 4.0 / 7});
  // Four equal tokens, k = 2: ids 0 and 1 stay.
  std::vector<float> flat = {0.25f, 0.25f, 0.25f, 0.25f};
  keep_top_k(flat, 2);
  check_close(flat, {0.5, 0.5, 0, 0});
  // 0 and k >= V are "off".
  std::vector<float> same = {0.1f, 0.2f, 0.3f, 0.4f};
  keep_top_k(same, 0);
  keep_top_k(same, 4);
  check_close(same, {0.1, 0.2, 0.3, 0.4});
}

TEST_CASE("top-p keeps the token that crosses the threshold") {
  // Sorted: 0.5 (id 3), 0.25 (id 2), 0.125, 0.125 (exact binary fractions).
  SUBCASE("p = 0.6: 0.5 is short of 0.6, so 0.25 (which crosses it) stays -> [0, 0, 1/3, 2/3]") {
    std::vector<float> probs = {0.125f, 0.125f, 0.25f, 0.5f};
    keep_top_p(probs, 0.6);
    check_close(probs, {0, 0, 1.0 / 3, 2.0 / 3});
  }
  SUBCASE("p = 0.5: 0.5 alone reaches it -> only id 3") {
    std::vector<float> probs = {0.125f, 0.125f, 0.25f, 0.5f};
    keep_top_p(probs, 0.5);
    check_close(probs, {0, 0, 0, 1});
  }
  SUBCASE("p = 0.8: 0.75 is short, the next token is a tie of two 0.125s: the lower id crosses") {
    std::vector<float> probs = {0.125f, 0.125f, 0.25f, 0.5f};
    keep_top_p(probs, 0.8);
    check_close(probs, {0.125 / 0.875, 0, 0.25 / 0.875, 0.5 / 0.875});
  }
  SUBCASE("p = 1 is off") {
    std::vector<float> probs = {0.125f, 0.125f, 0.25f, 0.5f};
    keep_top_p(probs, 1.0);
    check_close(probs, {0.125, 0.125, 0.25, 0.5});
  }
}

TEST_CASE("min-p keeps p >= min_p * p_max") {
  // p_max = 0.5, min_p = 0.3 -> threshold 0.15: 0.05 goes, 0.15 (equal) stays; sum 0.95.
  std::vector<float> probs = {0.05f, 0.15f, 0.3f, 0.5f};
  keep_min_p(probs, 0.3);
  check_close(probs, {0, 0.15 / 0.95, 0.3 / 0.95, 0.5 / 0.95});
  // min_p = 1 keeps only the maximum.
  std::vector<float> strict = {0.05f, 0.15f, 0.3f, 0.5f};
  keep_min_p(strict, 1.0);
  check_close(strict, {0, 0, 0, 1});
}

TEST_CASE("repetition penalty (HF): positive logits divided, negative multiplied, unseen untouched") {
  // seen {0, 1}, penalty 2: 2 -> 1, -2 -> -4; ids 2 and 3 unchanged.
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f};
  apply_repetition_penalty(logits, {0, 1}, 2.0);
  check_close(logits, {1.0, -4.0, 1.0, 0.5});
  // penalty < 1 encourages repetition: 2 / 0.5 = 4, -2 * 0.5 = -1.
  std::vector<float> encourage = {2.0f, -2.0f};
  apply_repetition_penalty(encourage, {0, 1}, 0.5);
  check_close(encourage, {4.0, -1.0});
  std::vector<float> small = {1.0f};
  CHECK_THROWS_AS(apply_repetition_penalty(small, {5}, 2.0), Error);
}

TEST_CASE("frequency and presence penalties (OpenAI): logit -= f * count + p * (count > 0)") {
  // counts {0: 2, 1: 1}, f = 0.5, p = 0.25: id0 1 - 1 - 0.25 = -0.25; id1 1 - 0.5 - 0.25 = 0.25; id2 unseen.
  std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  apply_frequency_presence_penalties(logits, {{0, 2}, {1, 1}}, 0.5, 0.25);
  check_close(logits, {-0.25, 0.25, 1.0});
}

TEST_CASE("logit bias adds to the named logits only; an id outside the vocabulary is an error") {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<std::pair<int32_t, float>> bias = {{0, 100.0f}, {3, -100.0f}};
  apply_logit_bias(logits, bias);
  check_close(logits, {101.0, 2.0, 3.0, -96.0});
  std::vector<std::pair<int32_t, float>> outside = {{4, 1.0f}};
  CHECK_THROWS_WITH_AS(apply_logit_bias(logits, outside), doctest::Contains("token id 4 is outside the vocabulary [0, 4)"),
                       Error);
}

TEST_CASE("argmax: ties go to the lowest id") {
  std::vector<float> values = {1.0f, 3.0f, 2.0f, 3.0f};
  CHECK(argmax(values) == 1);
  CHECK(top_n_ids(values, 3) == std::vector<int32_t>{1, 3, 2});
}

TEST_CASE("sample_from walks the cumulative distribution and never picks probability 0") {
  std::vector<float> probs = {0.0f, 0.5f, 0.0f, 0.5f};
  CHECK(sample_from(probs, 0.0f) == 1);
  CHECK(sample_from(probs, 0.49f) == 1);
  CHECK(sample_from(probs, 0.5f) == 3);
  CHECK(sample_from(probs, 0.999999f) == 3);
  std::vector<float> tail_zero = {0.25f, 0.75f, 0.0f};
  CHECK(sample_from(tail_zero, 0.99999994f) == 1);
}

TEST_CASE("Pcg32 reproduces the reference pcg32-demo stream (initstate 42, initseq 54)") {
  // Published output of pcg32-demo.c from pcg-c-basic (pcg-random.org), round 1.
  Pcg32 rng(42, 54);
  for (uint32_t want : {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu})
    CHECK(rng.next_u32() == want);
  Pcg32 floats(7);
  for (int i = 0; i < 1000; ++i) {
    float u = floats.next_float();
    CHECK((u >= 0.0f && u < 1.0f));
  }
}

TEST_CASE("validation names the field, its range and the value") {
  auto rejects = [](SamplingParams p, const char* field) {
    CHECK_THROWS_WITH_AS(validate(p), doctest::Contains(field), Error);
  };
  SamplingParams ok;
  CHECK_NOTHROW(validate(ok));
  SamplingParams p;
  p = ok; p.temperature = -0.1; rejects(p, "temperature");
  p = ok; p.temperature = NAN; rejects(p, "temperature");
  p = ok; p.top_k = -2; rejects(p, "top_k");
  p = ok; p.top_p = 0.0; rejects(p, "top_p must be in (0, 1]");
  p = ok; p.top_p = 1.5; rejects(p, "found 1.5");
  p = ok; p.min_p = -0.01; rejects(p, "min_p");
  p = ok; p.min_p = 1.01; rejects(p, "min_p");
  p = ok; p.repetition_penalty = 0.0; rejects(p, "repetition_penalty");
  p = ok; p.frequency_penalty = 2.5; rejects(p, "frequency_penalty");
  p = ok; p.presence_penalty = -3; rejects(p, "presence_penalty");
  p = ok; p.logprobs = -1; rejects(p, "logprobs");
  p = ok; p.logprobs = kMaxLogprobs + 1; rejects(p, "logprobs");
  p = ok; p.logit_bias = {{3, 100.5f}}; rejects(p, "logit_bias of token 3 must be in [-100, 100]");
  p = ok; p.logit_bias = {{-1, 1.0f}}; rejects(p, "logit_bias token id");
  p = ok; p.logit_bias.assign(kMaxLogitBiasEntries + 1, {0, 1.0f}); rejects(p, "at most 1024");
  // The edges of each range are accepted.
  p = ok; p.temperature = 0; p.top_k = -1; p.top_p = 1; p.min_p = 1; p.frequency_penalty = -2; p.presence_penalty = 2;
  CHECK_NOTHROW(validate(p));
}
