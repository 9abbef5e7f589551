#include <doctest/doctest.h>

#include "core/error.h"
#include "trace/memory_sink.h"

using namespace journey;

TEST_CASE("memory sink: keeps what it is given in order, under the dump's names and steps") {
  MemorySink sink;
  CHECK(sink.wants(Stage::q, 7));
  CHECK(sink.wants(Stage::logits, -1));
  const std::vector<int32_t> ids = {1, 403};
  sink.record_ints(Stage::token_ids, -1, ids, {2});
  const std::vector<float> q = {1, 2, 3, 4, 5, 6};  // [T=1, H=2, D=3]
  sink.record(Stage::q, 3, TraceTensor{q, {1, 2, 3}});
  sink.set_step(1);
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f};
  sink.record(Stage::logits, -1, TraceTensor{logits, {1, 3}});
  sink.record(Stage::q, 3, TraceTensor{q, {1, 2, 3}});  // the same name in another step is fine

  REQUIRE(sink.entries().size() == 4);
  const auto& e = sink.entries();
  CHECK(e[0].name == "token_ids");
  CHECK(e[0].integers);
  CHECK(e[0].values == std::vector<float>{1, 403});
  CHECK(e[1].name == "L3.q");
  CHECK(e[1].layer == 3);
  CHECK(e[1].step == 0);
  CHECK(e[1].shape == std::vector<int64_t>{1, 2, 3});
  CHECK(e[1].values == q);
  CHECK(e[2].name == "logits");
  CHECK(e[2].step == 1);
  CHECK(sink.get("logits", 1).values == logits);
  CHECK(sink.find("logits", 0) == nullptr);
  CHECK(&sink.get("L3.q", 1) == &e[3]);
  CHECK_THROWS_WITH_AS(sink.get("L4.q", 0), doctest::Contains("nothing recorded as L4.q in step 0"), Error);
  CHECK_THROWS_WITH_AS(sink.record(Stage::logits, -1, TraceTensor{logits, {1, 3}}),
                       doctest::Contains("logits recorded twice in step 1"), Error);
  CHECK_THROWS_WITH_AS(sink.record(Stage::final_norm, -1, TraceTensor{logits, {2, 3}}),
                       doctest::Contains("3 values for shape [2, 3]"), Error);
  sink.clear();
  CHECK(sink.entries().empty());
}

TEST_CASE("memory sink: with filters it wants what `journey trace` would dump") {
  MemorySink sink(parse_filters("L*.attn_weights,logits", "0,2", "", "0"));
  CHECK(sink.wants(Stage::attn_weights, 0));
  CHECK(sink.wants(Stage::attn_weights, 2));
  CHECK_FALSE(sink.wants(Stage::attn_weights, 1));  // layer filter
  CHECK_FALSE(sink.wants(Stage::q, 0));             // stage filter
  CHECK(sink.wants(Stage::logits, -1));
  sink.set_step(1);
  CHECK_FALSE(sink.wants(Stage::logits, -1));       // step filter
}
