// Tracing a served request (EngineRequest::trace, journey serve --trace-dir): two requests run
// concurrently on the real CPU backend and the shipped stories260K model; the second shares the
// first's leading prompt blocks. The dumps are read back through the dump format's own readers
// (read_manifest, read_npy) and checked against what the engine reported from outside the trace:
// the tokens it returned, the prefix-cache hit it reported, and the positions a request must feed.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <random>

#include "assets/model.h"
#include "engine/llm_engine.h"
#include "cpu/cpu_backend.h"
#include "text/tokenizer.h"
#include "trace/dump_sink.h"
#include "trace/manifest.h"
#include "trace/npy.h"

using namespace journey;
namespace fs = std::filesystem;

namespace {

struct TraceFixture {
  LoadedModel model = load_model(std::string(JOURNEY_SOURCE_DIR) + "/data/stories260K");
  std::unique_ptr<Backend> backend = make_cpu_backend(model, CpuOptions{1});
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model.path);
};

// The kv_blocks table of every step of a dump, in step order.
std::vector<std::vector<int32_t>> block_tables(const fs::path& dir, const Manifest& m) {
  std::vector<std::vector<int32_t>> tables;
  for (const ManifestStep& s : m.steps) {
    const ManifestTensor* t = m.find("kv_blocks", -1, s.step);
    REQUIRE_MESSAGE(t != nullptr, "step ", s.step, " has no kv_blocks tensor");
    NpyArray a = read_npy(dir / t->file);
    REQUIRE(a.dtype == NpyDType::I32);
    REQUIRE(a.shape.size() == 1);
    REQUIRE(a.shape == t->shape);
    tables.push_back(a.i32);
  }
  return tables;
}

}  // namespace

TEST_CASE("a traced request's dump records every step with its block table; a shared prefix shows up as shared blocks") {
  TraceFixture f;
  const int64_t B = 4;
  EngineConfig config;
  config.block_size = B;
  config.num_kv_blocks = 64;
  config.scheduler.max_num_batched_tokens = 8;  // A's 12-token prompt is prefilled in two chunks
  LLMEngine engine(*f.backend, config, f.tokenizer.get());

  const fs::path root = fs::path(JOURNEY_BINARY_DIR) / "test_engine_trace";
  fs::remove_all(root);

  std::mt19937 rng(7);
  const int64_t V = f.backend->config().vocab_size;
  std::vector<int32_t> prompt_a;  // [12] three full blocks
  for (int i = 0; i < 12; ++i) prompt_a.push_back(static_cast<int32_t>(1 + rng() % (V - 1)));
  std::vector<int32_t> prompt_b(prompt_a.begin(), prompt_a.begin() + 8);  // A's first two blocks ...
  for (int i = 0; i < 3; ++i) prompt_b.push_back(static_cast<int32_t>(1 + rng() % (V - 1)));  // ... then its own

  auto traced = [&](std::vector<int32_t> prompt, const char* name, int64_t max_tokens) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.params.temperature = 0.0;
    r.params.logprobs = 3;
    r.trace = std::make_shared<DumpSink>(root / name);
    return r;
  };
  std::map<int64_t, std::vector<SampledToken>> returned;
  std::map<int64_t, int64_t> reported_cached;
  auto step = [&] {
    for (const RequestOutput& out : engine.step()) {
      for (const SampledToken& t : out.tokens) returned[out.request_id].push_back(t);
      reported_cached[out.request_id] = out.cached_prompt_tokens;
    }
  };

  const int64_t a = engine.add_request(traced(prompt_a, "A", 10));
  EngineRequest untraced;  // runs in the same batches; must leave no dump and cost nothing else
  untraced.prompt = {5, 6, 7};
  untraced.max_tokens = 6;
  const int64_t c = engine.add_request(untraced);
  step();
  step();  // A's prompt is computed now, its full blocks are in the prefix cache
  REQUIRE(returned[a].size() == 1);
  const int64_t b = engine.add_request(traced(prompt_b, "B", 5));
  for (int guard = 0; engine.has_unfinished(); ++guard) {
    REQUIRE(guard < 1000);
    step();
  }
  REQUIRE(returned[a].size() == 10);
  REQUIRE(returned[b].size() == 5);
  REQUIRE(returned[c].size() == 6);
  CHECK(reported_cached[b] == 8);  // the engine's own account: two blocks from the cache

  // Only the two traced requests left dumps.
  int dumps = 0;
  for (const auto& entry : fs::directory_iterator(root)) dumps += entry.is_directory() ? 1 : 0;
  CHECK(dumps == 2);

  const Manifest ma = read_manifest(root / "A" / "manifest.json");
  const Manifest mb = read_manifest(root / "B" / "manifest.json");
  CHECK(ma.settings.at("engine_request_id") == a);
  CHECK(mb.settings.at("kv_cache").at("block_size") == B);

  // Every step is recorded: the positions fed, concatenated, are 0 .. last position (A) and
  // 8 .. last position (B: the cached 8 are not fed), each step's kind follows from what it fed,
  // and every sampled token is the one the engine returned, in order.
  auto check_steps = [&](const Manifest& m, int64_t first_fed, const std::vector<int32_t>& prompt,
                         const std::vector<SampledToken>& tokens, int64_t prefill_steps) {
    const int64_t P = static_cast<int64_t>(prompt.size());
    REQUIRE(m.steps.size() == static_cast<size_t>(prefill_steps) + tokens.size() - 1);
    int64_t next = first_fed;
    size_t sampled = 0;
    for (size_t i = 0; i < m.steps.size(); ++i) {
      const ManifestStep& s = m.steps[i];
      CHECK(s.step == static_cast<int>(i));
      REQUIRE(!s.positions.empty());
      for (int64_t p : s.positions) CHECK(p == next++);
      CHECK(s.kind == (static_cast<int64_t>(i) < prefill_steps ? "prefill" : "decode"));
      if (s.sampled) {
        REQUIRE(sampled < tokens.size());
        CHECK(s.sampled->id == tokens[sampled].id);
        CHECK(s.sampled->prob > 0.0);
        CHECK(s.sampled->top.size() == 3);
        ++sampled;
      } else {
        CHECK(s.positions.back() < P - 1);  // only a prefill chunk before the last samples nothing
      }
      // The kv facts: slots used = tokens computed after the step; the table covers them.
      const auto& kv = s.kv_cache;
      REQUIRE(kv.is_object());
      CHECK(kv.at("slots_used") == s.positions.back() + 1);
      CHECK(kv.at("blocks") == (s.positions.back() + B) / B);
      CHECK(kv.at("block_size") == B);
    }
    CHECK(sampled == tokens.size());
    CHECK(next == P + static_cast<int64_t>(tokens.size()) - 1);  // the last token is never fed
    // token_ids of the first step are the prompt tokens it fed.
    const ManifestTensor* ids = m.find("token_ids", -1, 0);
    REQUIRE(ids != nullptr);
    NpyArray fed = read_npy(fs::path(root) / (m.settings.at("engine_request_id") == a ? "A" : "B") / ids->file);
    REQUIRE(fed.i32.size() == m.steps[0].positions.size());
    for (size_t k = 0; k < fed.i32.size(); ++k) CHECK(fed.i32[k] == prompt[first_fed + k]);
  };
  check_steps(ma, 0, prompt_a, returned[a], 2);
  check_steps(mb, 8, prompt_b, returned[b], 1);

  // Block tables: a step's table extends the previous one (same ids in front) and grows as
  // decoding crosses block boundaries.
  const auto ta = block_tables(root / "A", ma);
  const auto tb = block_tables(root / "B", mb);
  for (const auto* tables : {&ta, &tb}) {
    for (size_t i = 1; i < tables->size(); ++i) {
      const auto& prev = (*tables)[i - 1];
      const auto& cur = (*tables)[i];
      REQUIRE(cur.size() >= prev.size());
      CHECK(std::equal(prev.begin(), prev.end(), cur.begin()));
    }
    CHECK(tables->back().size() > tables->front().size());
  }
  CHECK(ta.back().size() == static_cast<size_t>((12 + 10 - 1 + B - 1) / B));

  // B's first two blocks ARE A's first two (the prefix cache), the manifest says they came from
  // the cache and that they are shared (A still holds them: ref count 2); B's third block is its own.
  REQUIRE(tb[0].size() == 3);
  CHECK(tb[0][0] == ta.back()[0]);
  CHECK(tb[0][1] == ta.back()[1]);
  CHECK(tb[0][2] != ta.back()[2]);
  const auto& kv0 = mb.steps[0].kv_cache;
  CHECK(kv0.at("cached_prompt_tokens") == 8);
  std::vector<int32_t> shared_ids;
  for (const auto& s : kv0.at("shared_blocks")) {
    shared_ids.push_back(s.at("block").get<int32_t>());
    CHECK(s.at("ref_count") == 2);
  }
  CHECK(shared_ids == std::vector<int32_t>{tb[0][0], tb[0][1]});
  // A's own first step (before B existed) shared nothing.
  CHECK(ma.steps[0].kv_cache.at("shared_blocks").empty());
  CHECK(ma.settings.at("finish_reason") == "length");

  fs::remove_all(root);
}
