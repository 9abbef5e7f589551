// journey perplexity's measurement (engine/perplexity.h): first on a backend whose logits the test
// sets, so that perplexity, KL divergence, its percentiles and top-1 agreement are numbers worked out
// by hand below; then on the real stories260K against the independent PyTorch reference
// (tools/quant/perplexity_reference.py: reference.py's float64 forward, SentencePiece's Python
// tokenizer, llama.cpp's scoring rule written again); then the command as a user runs it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/untrusted.h"
#include "assets/convert.h"
#include "assets/model.h"
#include "backend/backend.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/expected.h"
#include "engine/perplexity.h"
#include "reference/reference_backend.h"
#include "text/tokenizer.h"

using namespace journey;
namespace fs = std::filesystem;

namespace {

// A backend whose next-token distribution is a function of the token fed at that row: the test
// chooses the probabilities, so every figure can be worked out by hand. It records what it was fed.
class FixedLogitsBackend : public Backend {
 public:
  FixedLogitsBackend(int64_t vocab, int64_t context, std::function<std::vector<double>(int32_t)> probs_after)
      : probs_after_(std::move(probs_after)) {
    config_.architecture = "llama";
    config_.vocab_size = vocab;
    config_.max_position_embeddings = context;
  }
  std::string name() const override { return "fixed-logits"; }
  const ModelConfig& config() const override { return config_; }
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override { blocks_ = num_blocks, block_size_ = block_size; }
  int64_t kv_block_size() const override { return block_size_; }
  int64_t kv_num_blocks() const override { return blocks_; }
  int64_t kv_block_bytes(int64_t) const override { return 0; }
  void copy_kv_block(int32_t, int32_t) override {}
  ForwardOutput forward(const ForwardBatch& batch, TraceSink*) override {
    validate_forward_batch(batch, config_, blocks_, block_size_);
    const SequenceInput& s = batch.sequences.at(0);
    fed.push_back(s.tokens);
    starts.push_back(s.start_position);
    ForwardOutput out;
    out.vocab_size = config_.vocab_size;
    out.row_begin = {0, s.all_logits ? int64_t(s.tokens.size()) : 1};
    for (size_t t = s.all_logits ? 0 : s.tokens.size() - 1; t < s.tokens.size(); ++t)
      for (double p : probs_after_(s.tokens[t])) out.logits.push_back(float(std::log(p)));  // logits = log p
    return out;
  }
  std::vector<std::vector<int32_t>> fed;  // what each forward pass was fed
  std::vector<int64_t> starts;

 private:
  ModelConfig config_;
  std::function<std::vector<double>(int32_t)> probs_after_;
  int64_t blocks_ = 0, block_size_ = 16;
};

const std::vector<double> kRising = {0.1, 0.2, 0.3, 0.4};   // argmax 3
const std::vector<double> kFalling = {0.4, 0.3, 0.2, 0.1};  // argmax 0
// KL(rising || falling) = .1 ln(.1/.4) + .2 ln(.2/.3) + .3 ln(.3/.2) + .4 ln(.4/.1)
//                       = -0.138629 - 0.081093 + 0.121640 + 0.554518 = 0.456435
const double kKlRisingFalling = 0.1 * std::log(0.25) + 0.2 * std::log(2.0 / 3) + 0.3 * std::log(1.5) + 0.4 * std::log(4.0);

// Windows of 6 tokens: C/2 = 3, so the rows at positions 3 and 4 are scored (predicting the tokens
// at 4 and 5); 12 tokens make two windows, 4 scored predictions.
const std::vector<int32_t> kTokens = {1, 2, 2, 1, 0, 3, /**/ 2, 2, 1, 3, 1, 0};

fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::path(JOURNEY_BINARY_DIR) / "test-scratch" / "perplexity" / tag;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string run(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int raw = pclose(pipe);
  *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return output;
}

const char* kText = "data/texts/tinystories-original.txt";

}  // namespace

TEST_CASE("windows: llama.cpp's second-half rule, the tail dropped, too short a text refused") {
  const PerplexityWindows w = plan_windows(1100, 512);
  CHECK(w.count == 2);  // 1100 / 512; 76 tokens of tail are not scored
  CHECK(w.first_scored == 256);
  CHECK(w.scored_per_window() == 255);  // positions 256..510 predict 257..511
  CHECK(plan_windows(12, 6).scored_tokens() == 4);
  CHECK_THROWS_WITH_AS(plan_windows(1000, 512), doctest::Contains("the text has 1000 tokens; a context of 512 needs at least 1024"),
                       Error);
  CHECK_THROWS_WITH_AS(plan_windows(100, 3), doctest::Contains("a context of 3 tokens scores nothing"), Error);
  CHECK(perplexity_context(0, 256) == 256);
  CHECK(perplexity_context(0, 2048) == 512);
  CHECK_THROWS_WITH_AS(perplexity_context(1024, 512), doctest::Contains("--ctx 1024 is longer than the model's context of 512"), Error);
}

TEST_CASE("uniform logits: perplexity is the vocabulary size, and a model against itself has KL 0, top-1 1") {
  FixedLogitsBackend uniform(4, 64, [](int32_t) { return std::vector<double>(4, 0.25); });
  PerplexityOptions options;
  options.context = 6;
  const PerplexityReport alone = measure_perplexity(uniform, kTokens, options);
  CHECK(alone.tokens_scored == 4);
  CHECK(alone.ppl == doctest::Approx(4.0).epsilon(1e-6));
  CHECK_FALSE(alone.has_base);

  FixedLogitsBackend same(4, 64, [](int32_t) { return kRising; });
  FixedLogitsBackend base(4, 64, [](int32_t) { return kRising; });
  options.base = &base;
  const PerplexityReport r = measure_perplexity(same, kTokens, options);
  CHECK(r.has_base);
  CHECK(r.mean_kl == doctest::Approx(0.0));
  CHECK(r.kl_max == doctest::Approx(0.0));
  CHECK(r.top1_agreement == 1.0);
  CHECK(r.base_ppl == doctest::Approx(r.ppl));
}

TEST_CASE("worked by hand: perplexity, KL(base || model), its percentiles and top-1 agreement") {
  // The model: after an odd token it predicts `falling`, after an even one `rising`; the base always
  // predicts `rising`. Scored rows (fed token -> target): window 0: position 3 (1 -> 0), position 4
  // (0 -> 3); window 1: position 3 (3 -> 1), position 4 (1 -> 0).
  FixedLogitsBackend model(4, 64, [](int32_t t) { return t % 2 ? kFalling : kRising; });
  FixedLogitsBackend base(4, 64, [](int32_t) { return kRising; });
  PerplexityOptions options;
  options.context = 6;
  options.bos = 2;
  options.base = &base;
  const PerplexityReport r = measure_perplexity(model, kTokens, options);
  REQUIRE(r.tokens_scored == 4);
  // model: p(0 | falling) .4, p(3 | rising) .4, p(1 | falling) .3, p(0 | falling) .4
  // PPL = (.4 * .4 * .3 * .4)^(-1/4) = 0.0192^(-1/4) = 2.686425
  CHECK(r.ppl == doctest::Approx(2.686425).epsilon(1e-6));
  CHECK(r.mean_nll == doctest::Approx(-(3 * std::log(0.4) + std::log(0.3)) / 4).epsilon(1e-6));
  // base: p(0) .1, p(3) .4, p(1) .2, p(0) .1: PPL = 0.0008^(-1/4) = 5.946036
  CHECK(r.base_ppl == doctest::Approx(5.946036).epsilon(1e-6));
  // KL per row: 0.456435 where the model says `falling` (3 rows), 0 where it agrees (1 row)
  CHECK(r.mean_kl == doctest::Approx(3 * kKlRisingFalling / 4).epsilon(1e-6));  // 0.342326
  CHECK(r.kl_max == doctest::Approx(kKlRisingFalling).epsilon(1e-6));
  CHECK(r.kl_median == doctest::Approx(kKlRisingFalling).epsilon(1e-6));  // sorted {0, k, k, k}: between k and k
  CHECK(r.kl_p99 == doctest::Approx(kKlRisingFalling).epsilon(1e-6));
  CHECK(r.top1_agreement == doctest::Approx(0.25));  // only the row after token 0
  // every window ran as a fresh sequence of 6 tokens from position 0, BOS in front
  REQUIRE(model.fed.size() == 2);
  CHECK(model.fed[0] == std::vector<int32_t>{2, 2, 2, 1, 0, 3});
  CHECK(model.fed[1] == std::vector<int32_t>{2, 2, 1, 3, 1, 0});
  CHECK(model.starts == std::vector<int64_t>{0, 0});
  CHECK(r.running_ppl.size() == 2);
  CHECK(r.running_ppl[0] == doctest::Approx(std::pow(0.4 * 0.4, -0.5)).epsilon(1e-6));  // after window 0
}

TEST_CASE("percentile interpolates between sorted values (numpy's default)") {
  std::vector<double> v = {4, 1, 3, 2};
  CHECK(percentile(v, 0.5) == doctest::Approx(2.5));
  CHECK(percentile(v, 0.99) == doctest::Approx(3.97));
  CHECK(percentile(v, 0.0) == 1);
  CHECK(percentile(v, 1.0) == 4);
}

TEST_CASE("a saved log-probability file is a base: the same figures as the base model run alongside") {
  const fs::path dir = scratch("logprob-file");
  FixedLogitsBackend model(4, 64, [](int32_t t) { return t % 2 ? kFalling : kRising; });
  FixedLogitsBackend base(4, 64, [](int32_t) { return kRising; });
  const PerplexityWindows plan = plan_windows(int64_t(kTokens.size()), 6);
  {
    LogProbFile saved = LogProbFile::create(dir / "base.logprobs", plan, 4, kTokens);
    PerplexityOptions save;
    save.context = 6;
    save.save = &saved;
    measure_perplexity(base, kTokens, save);
  }
  CHECK(LogProbFile::looks_like(dir / "base.logprobs"));
  LogProbFile file = LogProbFile::open(dir / "base.logprobs", plan, 4, kTokens);
  PerplexityOptions options;
  options.context = 6;
  options.base_file = &file;
  const PerplexityReport from_file = measure_perplexity(model, kTokens, options);
  CHECK(from_file.mean_kl == doctest::Approx(3 * kKlRisingFalling / 4).epsilon(1e-6));
  CHECK(from_file.top1_agreement == doctest::Approx(0.25));
  CHECK(from_file.base_ppl == doctest::Approx(5.946036).epsilon(1e-6));

  // another text, another context, a damaged file: refused with the reason
  std::vector<int32_t> other = kTokens;
  other[7] = 0;
  CHECK_THROWS_WITH_AS(LogProbFile::open(dir / "base.logprobs", plan, 4, other),
                       doctest::Contains("token 7 is 2 in the file and 0 in this run"), Error);
  CHECK_THROWS_WITH_AS(LogProbFile::open(dir / "base.logprobs", plan_windows(12, 4), 4, kTokens),
                       doctest::Contains("saved with a context of 6"), Error);
  CHECK_THROWS_WITH_AS(LogProbFile::open(dir / "base.logprobs", plan, 5, kTokens),
                       doctest::Contains("saved over a vocabulary of 4 tokens, this model has 5"), Error);
  const std::string bytes = read_whole_file(dir / "base.logprobs");
  std::ofstream(dir / "short.logprobs", std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() - 4));
  CHECK_THROWS_WITH_AS(LogProbFile::open(dir / "short.logprobs", plan, 4, kTokens), doctest::Contains("bytes, but 2 windows"),
                       Error);
  std::ofstream(dir / "text.logprobs") << "not a log-probability file";
  CHECK_FALSE(LogProbFile::looks_like(dir / "text.logprobs"));
}

TEST_CASE("stories260K on the shipped text: journey's figures are the PyTorch reference's") {
  // tests/data/perplexity/stories260K-ctx256.json: tools/quant/perplexity_reference.py, float64, with
  // the f32 model as base and its bf16 conversion as the model (regenerate: see PROVENANCE.md there).
  const nlohmann::json golden = nlohmann::json::parse(read_whole_file("tests/data/perplexity/stories260K-ctx256.json"));
  const fs::path dir = scratch("bf16");
  convert_llama2c_to_hf({.checkpoint = "tests/data/models/stories260K/stories260K.bin",
                         .tokenizer_model = "tests/data/models/stories260K/tok512.model",
                         .out_dir = dir / "stories260K-bf16",
                         .dtype = DType::BF16});
  const LoadedModel f32 = load_model(journey::test::kStoriesModel);
  const LoadedModel bf16 = load_model(dir / "stories260K-bf16");
  const auto tokenizer = load_tokenizer(f32.path);
  const std::vector<int> ids = tokenizer->encode(read_whole_file(kText), true, false);
  const std::vector<int32_t> tokens(ids.begin(), ids.end());
  REQUIRE(int64_t(tokens.size()) == golden["tokens"].get<int64_t>());

  for (const char* device : {"reference", "cpu"}) {
    INFO("device ", std::string(device));
    auto model = std::string(device) == "reference" ? make_reference_backend(bf16) : make_cpu_backend(bf16, CpuOptions{.threads = 2});
    auto base = std::string(device) == "reference" ? make_reference_backend(f32) : make_cpu_backend(f32, CpuOptions{.threads = 2});
    PerplexityOptions options;
    options.context = golden["context"].get<int64_t>();
    options.bos = tokenizer->bos_id();
    options.base = base.get();
    const PerplexityReport r = measure_perplexity(*model, tokens, options);
    MESSAGE(std::string(device), ": PPL ", r.ppl, " (reference ", golden["ppl"].get<double>(), "), base PPL ", r.base_ppl, " (",
            golden["base_ppl"].get<double>(), "), mean KL ", r.mean_kl, " (", golden["mean_kl"].get<double>(), "), 99% KL ",
            r.kl_p99, " (", golden["kl_p99"].get<double>(), "), top-1 ", r.top1_agreement, " (",
            golden["top1_agreement"].get<double>(), ")");
    CHECK(r.tokens_scored == golden["tokens_scored"].get<int64_t>());
    if (std::string(device) == "reference") {
      // f32 against float64 on a 260K-parameter model: perplexities agree to 1e-5, KL (a difference of
      // nearly equal distributions, ~1e-4 nats) to 0.5 %
      CHECK(r.ppl == doctest::Approx(golden["ppl"].get<double>()).epsilon(1e-5));
      CHECK(r.base_ppl == doctest::Approx(golden["base_ppl"].get<double>()).epsilon(1e-5));
      CHECK(r.mean_kl == doctest::Approx(golden["mean_kl"].get<double>()).epsilon(5e-3));
      CHECK(r.kl_p99 == doctest::Approx(golden["kl_p99"].get<double>()).epsilon(2e-2));
      CHECK(r.kl_max == doctest::Approx(golden["kl_max"].get<double>()).epsilon(2e-2));
      // a near-tie may flip in f32: at most 2 of the scored positions
      CHECK(std::abs(r.top1_agreement - golden["top1_agreement"].get<double>()) * double(r.tokens_scored) <= 2.0);
    } else {
      // the fast backend may multiply bf16 weights by activations rounded to bf16 (llama.cpp does), which
      // adds its own small error to the bf16 model's: perplexity within 0.1 %, mean KL within a factor 2
      CHECK(r.ppl == doctest::Approx(golden["ppl"].get<double>()).epsilon(1e-3));
      CHECK(r.base_ppl == doctest::Approx(golden["base_ppl"].get<double>()).epsilon(1e-3));
      CHECK(r.mean_kl > 0.5 * golden["mean_kl"].get<double>());
      CHECK(r.mean_kl < 2.0 * golden["mean_kl"].get<double>());
    }
  }
}

TEST_CASE("journey perplexity: the command, its JSON, a saved base, and bad input") {
  const fs::path dir = scratch("cli");
  int status = 0;
  const std::string cli = JOURNEY_CLI;
  const std::string text = run(cli + " perplexity --file " + kText + " --ctx 128 --device reference", &status);
  CHECK(status == 0);
  CHECK(text.find("context 128, ") != std::string::npos);
  CHECK(text.find("the logits at positions 64..126 of each window predict the next token (63 per window") != std::string::npos);
  CHECK(text.find("Final estimate: PPL = ") != std::string::npos);

  // save the f32 model's log-probabilities, then use the file as the base of the same model: KL 0
  const std::string saved = (dir / "f32.logprobs").string();
  run(cli + " perplexity --file " + kText + " --ctx 128 --save-logprobs " + saved, &status);
  REQUIRE(status == 0);
  const std::string json_text = run(cli + " perplexity --file " + kText + " --ctx 128 --kl-base " + saved + " --json 2>/dev/null", &status);
  REQUIRE(status == 0);
  const nlohmann::json j = nlohmann::json::parse(json_text.substr(json_text.find('{')));
  CHECK(j["context"] == 128);
  CHECK(j["mean_kl"].get<double>() == doctest::Approx(0.0).epsilon(1e-9));
  CHECK(j["top1_agreement"].get<double>() == 1.0);
  CHECK(j["ppl"].get<double>() == doctest::Approx(j["base_ppl"].get<double>()));

  std::ofstream(dir / "short.txt") << "Once upon a time.";
  std::string out = run(cli + " perplexity --file " + (dir / "short.txt").string(), &status);
  CHECK(status == 1);
  CHECK(out.find("needs at least") != std::string::npos);
  out = run(cli + " perplexity --file " + (dir / "missing.txt").string(), &status);
  CHECK(status == 1);
  CHECK(out.find("missing.txt: cannot read the text") != std::string::npos);
  out = run(cli + " perplexity --file " + std::string(kText) + " --ctx 64 --kl-base " + saved, &status);
  CHECK(status == 1);
  CHECK(out.find("saved with a context of 128") != std::string::npos);
}
