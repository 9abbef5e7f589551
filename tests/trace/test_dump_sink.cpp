#include <doctest/doctest.h>

#include <numeric>

#include "core/error.h"
#include "trace/dump_sink.h"
#include "trace/npy.h"
#include "trace_test_util.h"

using namespace journey;

TEST_CASE("dump sink: writes one .npy per tensor and a manifest that lists them") {
  auto dir = test::fresh_dir("sink_basic");
  {
    DumpSink sink(dir);
    sink.manifest().prompt = "Once upon a time";
    sink.manifest().tokens = {{1, "<s>"}, {403, "Once"}};
    sink.set_step(0, "prefill", {0, 1});
    std::vector<int32_t> ids = {1, 403};
    REQUIRE(sink.wants(Stage::token_ids, -1));
    sink.record_ints(Stage::token_ids, -1, ids, {2});
    std::vector<float> q = test::random_values(2 * 4 * 3, 1);  // [T=2, H=4, D=3]
    sink.record(Stage::q, 3, TraceTensor{q, {2, 4, 3}});
    sink.set_sampled({407, " upon", 0.5, {{407, " upon", 0.5}, {261, " a", 0.25}}});
    sink.set_step(1, "decode", {2});
    std::vector<float> logits = {0.f, 1.f, 2.f};
    sink.record(Stage::logits, -1, TraceTensor{logits, {1, 3}});
    CHECK_THROWS_WITH_AS(sink.record(Stage::logits, -1, TraceTensor{logits, {1, 3}}),
                         doctest::Contains("logits recorded twice in step 1"), Error);
    CHECK_THROWS_WITH_AS(sink.record(Stage::final_norm, -1, TraceTensor{logits, {2, 3}}),
                         doctest::Contains("3 values for shape [2, 3]"), Error);
    sink.finish();
  }
  Manifest m = read_manifest(dir / "manifest.json");
  CHECK(m.format == "journey-trace");
  CHECK(m.version == 1);
  CHECK(m.prompt == "Once upon a time");
  REQUIRE(m.tokens.size() == 2);
  CHECK(m.tokens[1].piece == "Once");
  REQUIRE(m.steps.size() == 2);
  CHECK(m.steps[0].kind == "prefill");
  CHECK(m.steps[0].positions == std::vector<int64_t>{0, 1});
  REQUIRE(m.steps[0].sampled.has_value());
  CHECK(m.steps[0].sampled->top.size() == 2);
  CHECK(m.steps[1].kind == "decode");
  REQUIRE(m.tensors.size() == 3);
  const ManifestTensor* q = m.find("q", 3, 0);
  REQUIRE(q != nullptr);
  CHECK(q->name == "L3.q");
  CHECK(q->file == "s000.L3.q.npy");  // the file is named like the tensor
  CHECK(q->shape == std::vector<int64_t>{2, 4, 3});
  CHECK(read_npy(dir / q->file).f32 == test::random_values(24, 1));
  const ManifestTensor* ids = m.find("token_ids", -1, 0);
  REQUIRE(ids != nullptr);
  CHECK(ids->dtype == "i32");
  CHECK(read_npy(dir / ids->file).i32 == std::vector<int32_t>{1, 403});
  CHECK(m.find("logits", -1, 1)->file == "s001.logits.npy");
  // The stages used, in journey order, described from stages.def (no backend named: generic).
  std::vector<std::string> stage_names;
  for (const auto& s : m.stages) stage_names.push_back(s.name);
  CHECK(stage_names == std::vector<std::string>{"token_ids", "q", "logits", "sampled"});
  CHECK(m.stages[1].axes == std::vector<std::string>{"T", "H", "D"});
  CHECK(m.stages[1].scope == "layer");
  CHECK(m.stages[1].made_in == "the backend's forward(): linear(attn_norm, q_proj)");
  CHECK(m.stages[1].description == "query projection, before RoPE");
}

TEST_CASE("dump sink: filters decide wants() and the heads kept") {
  auto dir = test::fresh_dir("sink_filters");
  DumpSink sink(dir, parse_filters("L*.attn_weights,q_rope", "1", "1,3", "0"));
  sink.set_step(0, "prefill", {0, 1});
  CHECK(sink.wants(Stage::attn_weights, 1));
  CHECK_FALSE(sink.wants(Stage::attn_weights, 0));
  CHECK_FALSE(sink.wants(Stage::logits, -1));
  CHECK(sink.wants(Stage::q_rope, 1));
  CHECK(sink.wants(Stage::q_rope, 1));  // second answer comes from the cache, same result

  // attn_weights [H=4, T=2, P=2]: value = 100*h + 10*t + p, so kept heads are recognisable.
  std::vector<float> w(4 * 2 * 2);
  for (int h = 0; h < 4; ++h)
    for (int t = 0; t < 2; ++t)
      for (int p = 0; p < 2; ++p) w[(h * 2 + t) * 2 + p] = 100.f * h + 10.f * t + p;
  sink.record(Stage::attn_weights, 1, TraceTensor{w, {4, 2, 2}});
  // q_rope [T=2, H=4, D=2]: value = 100*t + 10*h + d.
  std::vector<float> q(2 * 4 * 2);
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 4; ++h)
      for (int d = 0; d < 2; ++d) q[(t * 4 + h) * 2 + d] = 100.f * t + 10.f * h + d;
  sink.record(Stage::q_rope, 1, TraceTensor{q, {2, 4, 2}});
  sink.finish();

  Manifest m = read_manifest(dir / "manifest.json");
  const ManifestTensor* tw = m.find("attn_weights", 1, 0);
  REQUIRE(tw != nullptr);
  CHECK(tw->heads == std::vector<int>{1, 3});
  CHECK(tw->shape == std::vector<int64_t>{2, 2, 2});
  CHECK(read_npy(dir / tw->file).f32 == std::vector<float>{100, 101, 110, 111, 300, 301, 310, 311});
  const ManifestTensor* tq = m.find("q_rope", 1, 0);
  REQUIRE(tq != nullptr);
  CHECK(tq->shape == std::vector<int64_t>{2, 2, 2});
  CHECK(read_npy(dir / tq->file).f32 == std::vector<float>{10, 11, 30, 31, 110, 111, 130, 131});

  sink.set_step(1, "decode", {2});
  CHECK_FALSE(sink.wants(Stage::attn_weights, 1));  // step 1 is outside --steps 0
  CHECK_THROWS_WITH_AS(sink.set_step(1, "decode", {2}), doctest::Contains("step 1 was already started"), Error);
}

TEST_CASE("manifest: bad manifests name the file and the field") {
  auto dir = test::fresh_dir("manifest_bad");
  std::ofstream(dir / "a.json") << R"({"format":"something-else","version":1})";
  CHECK_THROWS_WITH_AS(read_manifest(dir / "a.json"), doctest::Contains("expected \"journey-trace\""), Error);
  std::ofstream(dir / "b.json") << R"({"format":"journey-trace","version":7})";
  CHECK_THROWS_WITH_AS(read_manifest(dir / "b.json"), doctest::Contains("version 7 is not supported"), Error);
  std::ofstream(dir / "c.json") << R"({"format":"journey-trace","version":1,"tensors":[{"name":"L0.q","stage":"q","shape":"big","dtype":"f32","file":"x.npy"}]})";
  CHECK_THROWS_WITH_AS(read_manifest(dir / "c.json"), doctest::Contains("field \"shape\" of tensor \"L0.q\""), Error);
  std::ofstream(dir / "d.json") << "{ not json";
  CHECK_THROWS_WITH_AS(read_manifest(dir / "d.json"), doctest::Contains("not valid JSON"), Error);
  std::ofstream(dir / "e.json") << R"({"format":"journey-trace","version":1,"tensors":[{"name":"x","stage":"q","shape":[1],"dtype":"f32","file":"../../etc/passwd"}]})";
  CHECK_THROWS_WITH_AS(read_manifest(dir / "e.json"), doctest::Contains("outside the dump directory"), Error);
}

TEST_CASE("manifest: the model fingerprint is sha256 of config.json and weight file sizes") {
  if (!test::have_numpy()) {
    MESSAGE("SKIPPED: /usr/bin/python3 is not available to compute the expected sha256 independently");
    return;
  }
  auto dir = test::fresh_dir("fingerprint");
  std::ofstream(dir / "config.json") << R"({"model_type": "llama"})";
  std::ofstream(dir / "model.safetensors") << std::string(100, 'x');
  std::ofstream(dir / "a.safetensors") << std::string(7, 'y');
  std::ofstream(dir / "notes.txt") << "ignored";
  // Python's hashlib is the independent sha256; it writes the expected value for us to read.
  std::ofstream(dir / "hash.py") << "import hashlib\n"
                                 << "d = '" << dir.string() << "'\n"
                                 << "m = open(d + '/config.json', 'rb').read() + b'a.safetensors 7\\nmodel.safetensors 100\\n'\n"
                                 << "open(d + '/expected.txt', 'w').write('sha256:' + hashlib.sha256(m).hexdigest())\n";
  REQUIRE(test::run_python(dir / "hash.py") == 0);
  std::ifstream in(dir / "expected.txt");
  std::string expected;
  in >> expected;
  CHECK(model_fingerprint(dir) == expected);
}
