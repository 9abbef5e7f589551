// journey perplexity — how well a model predicts a text, and how far it is from a base model.
//
//   journey perplexity --model M --file TEXT [--ctx N] [--kl-base M0 | --kl-base FILE]
//                      [--save-logprobs FILE] [--device reference|cpu] [--json]
//
// llama-perplexity's measurement (engine/perplexity.h): the text is tokenized with BOS, cut into
// windows of N tokens (default min(512, the model's context)), each window runs as a fresh sequence
// with BOS as its first token, and only its second half is scored. With --kl-base, the base model
// (a model path, computed in this run on the same device, or a file written earlier by
// --save-logprobs) scores the same windows and the report adds the KL divergence KL(base || model)
// per token (mean, median, 99th percentile, maximum) and how often both pick the same top token.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "assets/model.h"
#include "cli/backend_select.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/perplexity.h"
#include "text/tokenizer.h"

namespace journey::cli {
namespace {

constexpr uintmax_t kMaxTextBytes = 256ull << 20;  // a text beyond this is not an evaluation set

struct PerplexityArgs {
  std::string model = default_model_path();
  std::string tokenizer;  // empty: the model's
  std::string file;
  std::string kl_base;
  std::string save_logprobs;
  int64_t context = 0;
  std::string device = "cpu";
  int threads = 0;
  bool json = false;
};

std::string read_text(const std::filesystem::path& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(path.string(), ": cannot read the text (", ec.message(), ")");
  if (size > kMaxTextBytes) fail(path.string(), ": ", size, " bytes; journey perplexity reads texts up to ", kMaxTextBytes, " bytes");
  std::ifstream in(path, std::ios::binary);
  std::string text(size_t(size), '\0');
  if (!in.read(text.data(), std::streamsize(size))) fail(path.string(), ": error reading the text");
  if (text.empty()) fail(path.string(), ": the text is empty");
  return text;
}

std::vector<int32_t> encode(const Tokenizer& tokenizer, const std::string& text) {
  const std::vector<int> ids = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
  return {ids.begin(), ids.end()};
}

nlohmann::ordered_json report_json(const PerplexityArgs& a, const PerplexityReport& r, int64_t n_tokens) {
  nlohmann::ordered_json j = {{"model", a.model},
                              {"file", a.file},
                              {"device", a.device},
                              {"tokens", n_tokens},
                              {"context", r.windows.context},
                              {"windows", r.windows.count},
                              {"first_scored", r.windows.first_scored},
                              {"tokens_scored", r.tokens_scored},
                              {"ppl", r.ppl},
                              {"ppl_error", r.ppl_error},
                              {"mean_nll", r.mean_nll}};
  if (r.has_base) {
    j["kl_base"] = a.kl_base;
    j["base_ppl"] = r.base_ppl;
    j["mean_kl"] = r.mean_kl;
    j["kl_error"] = r.mean_kl > 0 ? r.kl_error : 0.0;
    j["kl_median"] = r.kl_median;
    j["kl_p99"] = r.kl_p99;
    j["kl_max"] = r.kl_max;
    j["top1_agreement"] = r.top1_agreement;
    j["top1_error"] = r.top1_error;
  }
  return j;
}

void run_perplexity(const PerplexityArgs& args) {
  const LoadedModel model = load_model(args.model);
  const auto tokenizer = load_tokenizer(args.tokenizer.empty() ? model.path : std::filesystem::path(args.tokenizer));
  const std::string text = read_text(args.file);
  const std::vector<int32_t> tokens = encode(*tokenizer, text);
  std::optional<int32_t> bos;
  if (!tokens.empty() && tokenizer->bos_id() && tokens.front() == *tokenizer->bos_id()) bos = *tokenizer->bos_id();

  std::unique_ptr<Backend> backend = make_backend(model, args.device, args.threads);
  const int64_t context = perplexity_context(args.context, model.config.max_position_embeddings);
  const PerplexityWindows plan = plan_windows(int64_t(tokens.size()), context);
  const int64_t V = model.config.vocab_size;

  PerplexityOptions options;
  options.context = context;
  options.bos = bos;
  LoadedModel base_model;
  std::unique_ptr<Backend> base_backend;
  std::optional<LogProbFile> base_file, save_file;
  if (!args.kl_base.empty()) {
    if (LogProbFile::looks_like(args.kl_base)) {
      base_file = LogProbFile::open(args.kl_base, plan, V, tokens);
      options.base_file = &*base_file;
    } else {
      base_model = load_model(args.kl_base);
      // the base must read the text as the same tokens, or the distributions are over different things
      const auto base_tokenizer = load_tokenizer(base_model.path);
      const std::vector<int32_t> base_tokens = encode(*base_tokenizer, text);
      if (base_tokens != tokens) {
        size_t i = 0;
        while (i < base_tokens.size() && i < tokens.size() && base_tokens[i] == tokens[i]) ++i;
        fail("--kl-base ", args.kl_base, ": its tokenizer reads ", args.file, " as ", base_tokens.size(),
             " tokens, the model's as ", tokens.size(), "; they first differ at token ", i);
      }
      base_backend = make_backend(base_model, args.device, args.threads);
      options.base = base_backend.get();
    }
  }
  if (!args.save_logprobs.empty()) {
    save_file = LogProbFile::create(args.save_logprobs + ".partial", plan, V, tokens);
    options.save = &*save_file;
  }

  std::fprintf(stderr, "perplexity: %s: %zu tokens (tokenizer: %s)\n", args.file.c_str(), tokens.size(),
               tokenizer->kind().c_str());
  std::fprintf(stderr,
               "perplexity: context %lld, %lld windows; the logits at positions %lld..%lld of each window predict the "
               "next token (%lld per window, %lld scored)%s\n",
               (long long)plan.context, (long long)plan.count, (long long)plan.first_scored,
               (long long)(plan.context - 2), (long long)plan.scored_per_window(), (long long)plan.scored_tokens(),
               bos ? "; each window starts with BOS" : "");
  FILE* progress = args.json ? stderr : stdout;
  options.on_window = [progress](const PerplexityProgress& p) {
    std::fprintf(progress, "[%lld]%.4f,", (long long)(p.window + 1), p.running_ppl);
    std::fflush(progress);
  };
  const PerplexityReport r = measure_perplexity(*backend, tokens, options);
  std::fprintf(progress, "\n");
  if (save_file) {
    save_file.reset();
    std::filesystem::rename(args.save_logprobs + ".partial", args.save_logprobs);
    std::fprintf(stderr, "perplexity: wrote the log-probabilities to %s (a base for --kl-base)\n", args.save_logprobs.c_str());
  }

  if (args.json) {
    std::printf("%s\n", report_json(args, r, int64_t(tokens.size())).dump(1).c_str());
    return;
  }
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_error);
  if (!r.has_base) return;
  std::printf("KL divergence KL(base || model) per token, base %s:\n", args.kl_base.c_str());
  std::printf("  Mean PPL(base)   : %10.4f\n", r.base_ppl);
  std::printf("  Mean KLD         : %10.6f +/- %.6f\n", r.mean_kl, r.kl_error);
  std::printf("  Median KLD       : %10.6f\n", r.kl_median);
  std::printf("  99.0%% KLD        : %10.6f\n", r.kl_p99);
  std::printf("  Maximum KLD      : %10.6f\n", r.kl_max);
  std::printf("  Same top token   : %10.3f +/- %.3f %%\n", 100 * r.top1_agreement, 100 * r.top1_error);
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto args = std::make_shared<PerplexityArgs>();
  auto* cmd = app.add_subcommand("perplexity",
                                 "perplexity of a text, and KL divergence / top-1 agreement against a base model "
                                 "(llama-perplexity's scoring: the second half of each window)");
  cmd->add_option("--model", args->model, "model directory or file (default: the shipped stories260K)");
  cmd->add_option("--file", args->file, "the text to score (UTF-8)")->required();
  cmd->add_option("--ctx", args->context, "tokens per window (0 = min(512, the model's context))")->capture_default_str();
  cmd->add_option("--kl-base", args->kl_base,
                  "base model (path: run here on the same device) or log-probability file (--save-logprobs)");
  cmd->add_option("--save-logprobs", args->save_logprobs, "write this model's log-probabilities, for --kl-base later");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer path, if not with the model");
  cmd->add_option("--device", args->device, device_flag_help())->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", args->json, "print the figures as one JSON object (progress goes to stderr)");
  cmd->callback([args] { run_perplexity(*args); });
}

}  // namespace journey::cli
