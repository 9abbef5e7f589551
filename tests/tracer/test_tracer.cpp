// The tracer as a user runs it: `journey trace` on the shipped stories260K, then `journey-trace`
// render / report / diff / golden on the dumps. Expected values come from outside the code under
// test: the golden dump of the independent PyTorch reference (tokens, greedy tokens, every stage),
// the stage list and the model's shape, the PNG/SVG formats, and the dumps checked against each
// other (a filtered dump must hold exactly the slices of the full one).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "trace/dump_sink.h"
#include "trace/manifest.h"
#include "trace/npy.h"

namespace fs = std::filesystem;
using namespace journey;

namespace {

struct Run {
  int status = -1;
  std::string output;  // stdout and stderr
};

Run run(const std::string& command) {
  Run r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

const fs::path kWork = fs::path(JOURNEY_BINARY_DIR) / "tracer-test";
const std::string kJourney = JOURNEY_CLI;
const std::string kTracer = JOURNEY_TRACE_TOOL;
const std::string kModel = "data/stories260K";
const fs::path kGolden = "tests/golden/stories260K";

// A greedy trace of the golden's prompt: prefill + 3 decode steps, the golden's shape of run.
fs::path greedy_dump(const std::string& name, const std::string& extra = "") {
  const fs::path dir = kWork / name;
  fs::remove_all(dir);
  Run r = run(kJourney + " trace --model " + kModel + " 'Once upon a time' --out " + dir.string() +
              " --max-tokens 4 --temperature 0 " + extra);
  INFO(r.output);
  REQUIRE(r.status == 0);
  return dir;
}

// The same run on the fast backend with a RoPE bug planted in its ops table (test-only program).
fs::path planted_bug_dump(const std::string& name) {
  const fs::path dir = kWork / name;
  fs::remove_all(dir);
  Run r = run(std::string(JOURNEY_PLANTED_BUG_TRACE) + " " + kModel + " " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  return dir;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("journey trace writes a manifest and one .npy per tensor, every stage of every step") {
  const fs::path dir = greedy_dump("full");
  const Manifest ours = read_manifest(dir / "manifest.json");
  const Manifest golden = read_manifest(kGolden / "manifest.json");

  CHECK(ours.format == "journey-trace");
  CHECK(ours.version == 1);
  CHECK(ours.generated_by_tool == "journey trace");
  CHECK(ours.model.hash == golden.model.hash);  // same model, fingerprinted by the same rule
  // Tokenized by our tokenizer; the golden's were tokenized by the SentencePiece Python package.
  REQUIRE(ours.tokens.size() == golden.tokens.size());
  for (size_t i = 0; i < ours.tokens.size(); ++i) {
    CHECK(ours.tokens[i].id == golden.tokens[i].id);
    CHECK(ours.tokens[i].piece == golden.tokens[i].piece);
  }
  // Steps: the prefill at positions 0..4, then one decode step per position, each with its token.
  REQUIRE(ours.steps.size() == 4);
  CHECK(ours.steps[0].kind == "prefill");
  CHECK(ours.steps[0].positions == std::vector<int64_t>{0, 1, 2, 3, 4});
  for (int s = 1; s < 4; ++s) {
    CHECK(ours.steps[s].step == s);
    CHECK(ours.steps[s].kind == "decode");
    CHECK(ours.steps[s].positions == std::vector<int64_t>{4 + s});
  }
  for (size_t s = 0; s < 4; ++s) {
    REQUIRE(ours.steps[s].sampled.has_value());
    REQUIRE(golden.steps[s].sampled.has_value());
    CHECK(ours.steps[s].sampled->id == golden.steps[s].sampled->id);  // greedy = the reference's argmax
    CHECK(ours.steps[s].sampled->prob == doctest::Approx(golden.steps[s].sampled->prob).epsilon(1e-4));
    const auto& top = ours.steps[s].sampled->top;
    REQUIRE(top.size() == 5);
    CHECK(top[0].id == ours.steps[s].sampled->id);
    for (size_t i = 1; i < top.size(); ++i) CHECK(top[i].prob <= top[i - 1].prob);
  }

  // Every layer stage of a llama (no q_norm/k_norm) at every layer and step, and the globals.
  const int layers = 5;
  std::set<std::string> expected;
  const std::vector<std::string> layer_stages = {"attn_norm", "q", "k", "v", "q_rope", "k_rope", "attn_scores",
                                                 "attn_weights", "attn_context", "attn_out", "resid_attn", "ffn_norm",
                                                 "gate", "up", "act", "ffn_out", "layer_out"};
  for (int step = 0; step < 4; ++step) {
    for (const char* g : {"token_ids", "kv_blocks", "embeddings", "final_norm", "logits", "probs_penalized"})
      expected.insert(std::to_string(step) + ":" + g);
    for (int l = 0; l < layers; ++l)
      for (const auto& st : layer_stages) expected.insert(std::to_string(step) + ":" + tensor_name(st, l));
  }
  std::set<std::string> listed;
  for (const auto& t : ours.tensors) {
    listed.insert(std::to_string(t.step) + ":" + t.name);
    const NpyArray a = read_npy(dir / t.file);  // the file exists, parses, and matches the manifest
    CHECK(a.shape == t.shape);
    CHECK((a.dtype == NpyDType::I32) == (t.dtype == "i32"));
  }
  for (const auto& name : expected) CHECK_MESSAGE(listed.count(name) == 1, name);

  // The prefill's logits are every row, as in the golden: [T, V].
  const ManifestTensor* logits = ours.find("logits", -1, 0);
  REQUIRE(logits != nullptr);
  CHECK(logits->shape == std::vector<int64_t>{5, 512});
  // The recorded probability of the greedy token is softmax(last logits row) at it.
  const NpyArray l = read_npy(dir / logits->file);
  double max = -INFINITY, sum = 0;
  for (int v = 0; v < 512; ++v) max = std::max<double>(max, l.f32[4 * 512 + v]);
  for (int v = 0; v < 512; ++v) sum += std::exp(l.f32[4 * 512 + v] - max);
  CHECK(ours.steps[0].sampled->prob ==
        doctest::Approx(std::exp(l.f32[4 * 512 + ours.steps[0].sampled->id] - max) / sum).epsilon(1e-5));
  // KV cache: one 16-slot block covers positions 0..7, block ids 0, 1, ... in order.
  const NpyArray blocks = read_npy(dir / ours.find("kv_blocks", -1, 3)->file);
  CHECK(blocks.i32 == std::vector<int32_t>{0});
}

TEST_CASE("a sampled trace records the processed distributions and the token drawn from them") {
  const fs::path dir = kWork / "sampled";
  fs::remove_all(dir);
  Run r = run(kJourney + " trace --model " + kModel + " 'Once upon a time' --out " + dir.string() +
              " --max-tokens 3 --temperature 0.8 --top-k 5 --top-p 0.9 --min-p 0.05 --seed 7");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const Manifest m = read_manifest(dir / "manifest.json");
  CHECK(m.settings["sampling"]["seed"] == 7);
  for (const auto& step : m.steps) {
    for (const char* stage : {"probs_temperature", "probs_top_k", "probs_top_p", "probs_min_p"})
      CHECK_MESSAGE(m.find(stage, -1, step.step) != nullptr, stage);
    const NpyArray top_k = read_npy(dir / m.find("probs_top_k", -1, step.step)->file);
    const NpyArray final_p = read_npy(dir / m.find("probs_min_p", -1, step.step)->file);
    int nonzero = 0;
    double sum = 0;
    for (float p : top_k.f32) nonzero += p > 0;
    for (float p : final_p.f32) sum += p;
    CHECK(nonzero <= 5);
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
    REQUIRE(step.sampled.has_value());
    CHECK(final_p.f32[step.sampled->id] > 0);  // drawn from what was kept
  }
}

TEST_CASE("filters keep exactly what was asked, sliced out of the full trace") {
  const fs::path full = greedy_dump("full-for-filters");
  const fs::path dir = greedy_dump("filtered", "--stages 'L*.attn_weights,logits' --layers 0,4 --heads 0-3 --steps 0-1");
  const Manifest f = read_manifest(dir / "manifest.json");
  const Manifest all = read_manifest(full / "manifest.json");
  std::set<std::string> names;
  for (const auto& t : f.tensors) names.insert(std::to_string(t.step) + ":" + t.name);
  CHECK(names == std::set<std::string>{"0:L0.attn_weights", "0:L4.attn_weights", "0:logits", "1:L0.attn_weights",
                                       "1:L4.attn_weights", "1:logits"});
  for (const auto& t : f.tensors) {
    const NpyArray kept = read_npy(dir / t.file);
    const NpyArray whole = read_npy(full / all.find(t.stage, t.layer, t.step)->file);
    if (t.stage == "logits") {
      CHECK(kept.f32 == whole.f32);
      continue;
    }
    CHECK(t.heads == std::vector<int>{0, 1, 2, 3});
    REQUIRE(kept.shape.size() == 3);
    CHECK(kept.shape[0] == 4);
    CHECK(whole.shape[0] == 8);
    const int64_t per_head = kept.shape[1] * kept.shape[2];
    // Heads 0-3 are the first four [T, P] planes of the full [8, T, P] tensor.
    CHECK(std::equal(kept.f32.begin(), kept.f32.end(), whole.f32.begin()));
    CHECK(int64_t(kept.f32.size()) == 4 * per_head);
  }
  // The steps filter did not stop the generation: all four tokens were still sampled.
  CHECK(f.steps.size() == 4);
  Run bad = run(kJourney + " trace --model " + kModel + " hi --out " + (kWork / "bad").string() + " --layers 3-1");
  CHECK(bad.status == 1);
  CHECK(bad.output.find("--layers") != std::string::npos);
  Run unknown = run(kJourney + " trace --model " + kModel + " hi --out " + (kWork / "bad").string() + " --stages 'nosuch*'");
  CHECK(unknown.status == 1);
  CHECK(unknown.output.find("nosuch") != std::string::npos);
}

TEST_CASE("render writes a valid SVG and PNG of the journey") {
  const fs::path dir = greedy_dump("render");
  Run svg = run(kTracer + " render " + dir.string() + " --out " + (dir / "j.svg").string() + " --layer 2");
  INFO(svg.output);
  REQUIRE(svg.status == 0);
  const std::string text = read_file(dir / "j.svg");
  CHECK(text.find("<svg") != std::string::npos);
  CHECK(text.rfind("</svg>") != std::string::npos);
  // The expanded layer is drawn stage by stage, the others collapsed; every part of the journey is there.
  CHECK(text.find("L2.q_rope") != std::string::npos);
  CHECK(text.find("L0.q_rope") == std::string::npos);
  for (const char* part : {"text", "template", "tokens", "embeddings", "layer 0", "layer 4", "final_norm", "logits",
                           "sampling", "output tokens", "KV cache", "[5, 8, 8]"})
    CHECK_MESSAGE(text.find(part) != std::string::npos, part);

  Run png = run(kTracer + " render " + dir.string() + " --out " + (dir / "j.png").string());
  INFO(png.output);
  REQUIRE(png.status == 0);
  const std::string bytes = read_file(dir / "j.png");
  REQUIRE(bytes.size() > 24);
  CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(bytes.substr(12, 4) == "IHDR");
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
           (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
  };
  CHECK(be32(16) > 200);  // width
  CHECK(be32(20) > 400);  // height: a tall journey

  Run not_a_dump = run(kTracer + " render " + kWork.string());
  CHECK(not_a_dump.status == 2);
  CHECK(not_a_dump.output.find("manifest.json") != std::string::npos);
  Run bad_ext = run(kTracer + " render " + dir.string() + " --out " + (dir / "j.bmp").string());
  CHECK(bad_ext.status == 2);
}

TEST_CASE("diff: a dump against itself passes; the planted RoPE bug is found at L0.q_rope") {
  const fs::path good = greedy_dump("diff-good");
  Run same = run(kTracer + " diff " + good.string() + " " + good.string());
  INFO(same.output);
  CHECK(same.status == 0);
  CHECK(same.output.find("SAME") != std::string::npos);
  CHECK(same.output.find("argmax agrees on 5/5 rows") != std::string::npos);

  const fs::path buggy = planted_bug_dump("diff-bug");
  const fs::path svg = kWork / "diff-bug.svg";
  Run diff = run(kTracer + " diff " + buggy.string() + " " + good.string() + " --svg " + svg.string());
  INFO(diff.output);
  CHECK(diff.status == 1);
  CHECK(diff.output.find("DIVERGED: first at L0.q_rope (step 0)") != std::string::npos);
  // Everything before q_rope in layer 0 matched.
  CHECK(diff.output.find("L0.q   ") != std::string::npos);
  const std::string drawn = read_file(svg);
  CHECK(drawn.find("FIRST DIVERGENCE") != std::string::npos);
  CHECK(drawn.find("#ff6b6b") != std::string::npos);  // the first divergence's colour
}

TEST_CASE("golden: journey trace matches the PyTorch reference's stories260K dump; the bug does not") {
  const fs::path dir = greedy_dump("golden");
  Run ok = run(kTracer + " golden " + dir.string() + " --against " + kGolden.string());
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK(ok.output.find("GOLDEN OK") != std::string::npos);

  const fs::path buggy = planted_bug_dump("golden-bug");
  Run bad = run(kTracer + " golden " + buggy.string() + " --against " + kGolden.string());
  INFO(bad.output);
  CHECK(bad.status == 1);
  CHECK(bad.output.find("first at L0.q_rope (step 0)") != std::string::npos);
}

TEST_CASE("report is one self-contained HTML file") {
  const fs::path dir = greedy_dump("report");
  Run r = run(kTracer + " report " + dir.string() + " --out " + (dir / "r.html").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string html = read_file(dir / "r.html");
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("id=\"data\"") != std::string::npos);
  // Nothing fetched: no external scripts, stylesheets, images or fonts.
  for (const char* external : {"<script src", "<link", "<img", "@import", "url(http", "src=\"http"})
    CHECK_MESSAGE(html.find(external) == std::string::npos, external);

  // A prompt that looks like markup stays data: the page has only its own two script elements.
  const fs::path hostile = kWork / "report-hostile";
  fs::remove_all(hostile);
  Run t = run(kJourney + " trace --model " + kModel + " '</script><!--<script>x' --out " + hostile.string() +
              " --max-tokens 2 --temperature 0");
  REQUIRE(t.status == 0);
  REQUIRE(run(kTracer + " report " + hostile.string()).status == 0);
  const std::string page = read_file(hostile / "report.html");
  size_t closing = 0;
  for (size_t at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) ++closing;
  CHECK(closing == 2);
  CHECK(page.find("<!--<script>") == std::string::npos);
}

namespace {

// One rank's dump of a tensor-parallel group of 2, written by hand (no MPI needed): one layer, one
// prefill step of 2 tokens, hidden size 2, vocabulary 4 (rank r holds ids [2r, 2r + 2)). Rank 0's
// dump also holds the combined stages it is given.
struct RankTensors {
  std::vector<float> attn_out_partial, ffn_out_partial;  // [2, 2] each
  std::vector<float> logits_partial;                     // [1, 2]
  std::vector<float> attn_out, ffn_out, logits;          // [2, 2], [2, 2], [1, 4]; rank 0 only
};

void write_rank_dump(const fs::path& dir, int rank, const RankTensors& t) {
  fs::remove_all(dir);
  DumpSink sink(dir);
  sink.set_step(0, "prefill", {0, 1});
  sink.record(Stage::attn_out_partial, 0, TraceTensor{t.attn_out_partial, {2, 2}});
  sink.record(Stage::ffn_out_partial, 0, TraceTensor{t.ffn_out_partial, {2, 2}});
  sink.record(Stage::logits_partial, -1, TraceTensor{t.logits_partial, {1, 2}});
  if (rank == 0) {
    sink.record(Stage::attn_out, 0, TraceTensor{t.attn_out, {2, 2}});
    sink.record(Stage::ffn_out, 0, TraceTensor{t.ffn_out, {2, 2}});
    sink.record(Stage::logits, -1, TraceTensor{t.logits, {1, 4}});
  }
  auto range = [](int64_t begin, int64_t end) { return nlohmann::json::array({begin, end}); };
  sink.manifest().tensor_parallel = ManifestTensorParallel{
      rank, 2,
      {{"heads", range(rank, rank + 1)}, {"kv_heads", range(rank, rank + 1)}, {"ffn_columns", range(2 * rank, 2 * rank + 2)},
       {"vocabulary", range(2 * rank, 2 * rank + 2)}, {"kv_heads_shared", false}},
      {{"attn_out_partial", "heads"}, {"ffn_out_partial", "ffn_columns"}, {"logits_partial", "vocabulary"}}};
  sink.finish();
}

// The report's data (the JSON the page embeds) of the dump in `dir`.
nlohmann::json report_json(const fs::path& dir) {
  Run r = run(kTracer + " report " + dir.string() + " --out " + (dir / "r.html").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string html = read_file(dir / "r.html");
  const std::string open = "<script type=\"application/json\" id=\"data\">";
  const size_t begin = html.find(open), end = html.find("</script>", begin);
  REQUIRE(begin != std::string::npos);
  return nlohmann::json::parse(html.substr(begin + open.size(), end - begin - open.size()));
}

}  // namespace

TEST_CASE("report: the tensor-parallel panel shows each rank's share, the combined stage and their difference") {
  // Shares chosen so the norms are known by hand: |rank 0's attn share| = |(3, 0, 0, 4)| = 5,
  // |rank 1's| = |(0, 1, 2, 2)| = 3, their sum (3, 1, 2, 6) has norm sqrt(50).
  RankTensors zero{{3, 0, 0, 4}, {1, 0, 0, 0}, {1, 2}, {3, 1, 2, 6}, {1, 0, 0, 2}, {1, 2, 3, 4}};
  const RankTensors one{{0, 1, 2, 2}, {0, 0, 0, 2}, {3, 4}, {}, {}, {}};
  const fs::path dir = kWork / "tp-partials";
  write_rank_dump(dir, 0, zero);
  write_rank_dump(dir / "rank1", 1, one);
  // rows: [stage index (attn_out, ffn_out, logits), layer, [each rank's share's norm], combined norm, check]
  auto rows_of = [](const nlohmann::json& data) {
    REQUIRE(data.contains("tensor_parallel"));
    REQUIRE(data["tensor_parallel"].contains("partials"));
    const auto& p = data["tensor_parallel"]["partials"];
    REQUIRE(p["steps"].size() == 1);
    return p["steps"][0];
  };
  {
    const nlohmann::json data = report_json(dir);
    CHECK(data["tensor_parallel"]["partials"]["ranks"] == nlohmann::json::array({0, 1}));
    const nlohmann::json rows = rows_of(data);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0][0] == 0);
    CHECK(rows[0][1] == 0);
    CHECK(rows[0][2][0].get<double>() == doctest::Approx(5.0));
    CHECK(rows[0][2][1].get<double>() == doctest::Approx(3.0));
    CHECK(rows[0][3].get<double>() == doctest::Approx(std::sqrt(50.0)).epsilon(1e-3));
    CHECK(rows[0][4].get<double>() == 0.0);  // the sum of the shares is the combined stage exactly
    CHECK(rows[1][4].get<double>() == 0.0);
    CHECK(rows[2][1] == -1);                 // logits: a global stage
    CHECK(rows[2][4].get<double>() == 0.0);  // rank 1's slice is ids 2-3 of the gathered logits
  }
  // A combined stage that is not the sum of the shares, and logits gathered in the wrong order:
  // the check column says by how much.
  zero.attn_out[3] += 0.25f;
  zero.logits = {1, 2, 4, 3};
  write_rank_dump(dir, 0, zero);
  write_rank_dump(dir / "rank1", 1, one);
  {
    const nlohmann::json rows = rows_of(report_json(dir));
    REQUIRE(rows.size() == 3);
    CHECK(rows[0][4].get<double>() == doctest::Approx(0.25));
    CHECK(rows[1][4].get<double>() == 0.0);
    CHECK(rows[2][4].get<double>() == doctest::Approx(1.0));
  }
  // A follower's report sees its own shares only: no check without every rank.
  {
    const nlohmann::json data = report_json(dir / "rank1");
    CHECK(data["tensor_parallel"]["partials"]["ranks"] == nlohmann::json::array({1}));
    const nlohmann::json rows = rows_of(data);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0][2][0].get<double>() == doctest::Approx(3.0));
    CHECK(rows[0][3].is_null());
    CHECK(rows[0][4].is_null());
  }
}
