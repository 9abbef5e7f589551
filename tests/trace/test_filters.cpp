#include <doctest/doctest.h>

#include "core/error.h"
#include "trace/filters.h"

using namespace journey;

TEST_CASE("filters: glob matching") {
  CHECK(glob_match("q*", "q"));
  CHECK(glob_match("q*", "q_rope"));
  CHECK_FALSE(glob_match("q*", "k_rope"));
  CHECK(glob_match("L*.attn_weights", "L12.attn_weights"));
  CHECK_FALSE(glob_match("L*.attn_weights", "attn_weights"));
  CHECK(glob_match("L?.q", "L3.q"));
  CHECK_FALSE(glob_match("L?.q", "L13.q"));
  CHECK(glob_match("*", ""));
  CHECK(glob_match("a*b*c", "aXXbYbZc"));
  CHECK_FALSE(glob_match("a*b*c", "aXXbYbZ"));
}

TEST_CASE("filters: stages by bare name or layer-qualified name") {
  TraceFilters f = parse_filters("L*.attn_weights,logits", "", "", "");
  CHECK(f.wants(Stage::attn_weights, 0, 0));
  CHECK(f.wants(Stage::attn_weights, 7, 3));
  CHECK(f.wants(Stage::logits, -1, 0));
  CHECK_FALSE(f.wants(Stage::attn_scores, 0, 0));
  CHECK_FALSE(f.wants(Stage::embeddings, -1, 0));

  TraceFilters q = parse_filters("q*", "", "", "");
  CHECK(q.wants(Stage::q, 2, 0));
  CHECK(q.wants(Stage::q_norm, 2, 0));
  CHECK(q.wants(Stage::q_rope, 2, 0));
  CHECK_FALSE(q.wants(Stage::k_rope, 2, 0));

  TraceFilters one = parse_filters("L3.q", "", "", "");
  CHECK(one.wants(Stage::q, 3, 0));
  CHECK_FALSE(one.wants(Stage::q, 4, 0));
}

TEST_CASE("filters: layers, heads and steps as lists and ranges") {
  TraceFilters f = parse_filters("", "0,4", "1-2", "0-3");
  CHECK(f.wants(Stage::q, 0, 0));
  CHECK(f.wants(Stage::q, 4, 3));
  CHECK_FALSE(f.wants(Stage::q, 1, 0));
  CHECK_FALSE(f.wants(Stage::q, 4, 4));      // step outside 0-3
  CHECK(f.wants(Stage::logits, -1, 2));      // global stages ignore the layer filter
  CHECK(f.heads.list(8) == std::vector<int>{1, 2});
  CHECK(parse_index_set("0-3", "--layers").list(10) == std::vector<int>{0, 1, 2, 3});
  CHECK(parse_index_set("", "--layers").all());
  CHECK(parse_index_set("all", "--layers").all());
  CHECK(parse_index_set("2, 5", "--layers").list(10) == std::vector<int>{2, 5});
}

TEST_CASE("filters: bad specs are rejected with the option, the item and the reason") {
  CHECK_THROWS_WITH_AS(parse_filters("", "3-1", "", ""), doctest::Contains("--layers: range '3-1' ends before it starts"), Error);
  CHECK_THROWS_WITH_AS(parse_filters("", "x", "", ""), doctest::Contains("--layers: 'x' is not a non-negative integer"), Error);
  CHECK_THROWS_WITH_AS(parse_filters("", "", "-1", ""), doctest::Contains("--heads"), Error);
  CHECK_THROWS_WITH_AS(parse_filters("", "", "", "1,,2"), doctest::Contains("--steps: empty item"), Error);
  CHECK_THROWS_WITH_AS(parse_filters("atten_weights", "", "", ""), doctest::Contains("'atten_weights' matches no stage"), Error);
  CHECK_THROWS_WITH_AS(parse_filters("L*.logits", "", "", ""), doctest::Contains("matches no stage"), Error);
}

TEST_CASE("filters: the heads axis of per-head stages") {
  CHECK(heads_axis(Stage::attn_weights) == 0);
  CHECK(heads_axis(Stage::attn_scores) == 0);
  CHECK(heads_axis(Stage::q_rope) == 1);
  CHECK(heads_axis(Stage::k_rope) == -1);  // KV heads are not query heads
  CHECK(heads_axis(Stage::logits) == -1);
}
