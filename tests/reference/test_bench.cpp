// journey bench's accounting (no timing is asserted): the bytes a decode step reads must be
// exactly the model's weights minus the embedding table (read one row per token) unless the
// embeddings are tied and double as the LM head.
#include <doctest/doctest.h>

#include "core/error.h"
#include "random_model.h"
#include "reference/bench.h"
#include "reference/cpu_backend.h"

using namespace journey;

TEST_CASE("bench: bytes per decoded token = every weight except the (untied) embedding table, in f32") {
  for (std::string arch : {"llama", "qwen2", "qwen3"}) {
    CAPTURE(arch);
    auto model = testmodel::random_model(arch);
    double all = 0;
    for (const auto& [name, t] : model.weights.all()) all += double(t.numel());
    const double embed = double(model.weights.get("model.embed_tokens.weight").numel());
    const double expected = 4.0 * (model.config.tie_word_embeddings ? all : all - embed);
    auto backend = make_cpu_backend(model, {.threads = 1});
    BenchResult r = run_bench(*backend, {.prompt_tokens = 5, .gen_tokens = 3, .threads = 1, .runs = 1, .measure_ceilings = false});
    CHECK(r.decode_bytes_per_token == doctest::Approx(expected).epsilon(1e-12));
    CHECK(r.prefill_tok_s.min > 0);
    CHECK(r.decode_tok_s.min <= r.decode_tok_s.median);
    auto json = bench_json(r);
    CHECK(json["prompt_tokens"] == 5);
    CHECK(json.contains("decode_fraction_of_ceiling"));
  }
}

TEST_CASE("bench: a run longer than the model's context is refused with the numbers") {
  auto backend = make_cpu_backend(testmodel::random_model("llama"), {.threads = 1});
  CHECK_THROWS_WITH_AS(run_bench(*backend, {.prompt_tokens = 60, .gen_tokens = 10}),
                       doctest::Contains("60 prompt + 10 generated tokens exceed the model's context of 64"), Error);
}
