// How much a model (a quantized one, say) loses: perplexity over a text and, against a base model,
// the KL divergence of its next-token distributions and how often both pick the same top token.
// This is what llama.cpp's llama-perplexity measures (with --kl-divergence), scored the same way:
//
//   tokens = tokenize(text) with BOS
//   the tokens are cut into windows of `context` tokens: window w = tokens[w*C, (w+1)*C); the tail
//   that does not fill a window is dropped (llama.cpp's n_chunk = n_tokens / n_ctx)
//   each window is one fresh sequence (an empty KV cache) whose first token is replaced by BOS
//   only the second half of each window is scored: the logits at positions j = C/2 .. C-2 predict
//   the tokens at j + 1, so every scored prediction has seen at least C/2 tokens of context;
//   that is C - 1 - C/2 predictions per window (127 for C = 256, 255 for C = 512)
//
//   PPL       = exp(mean over scored tokens of -log p_model(next token))
//   KL        = per scored token, KL(base || model) = sum_v p_base(v) (log p_base(v) - log p_model(v)),
//               reported as its mean, its 99th percentile and its maximum
//   top-1     = the fraction of scored positions where both models' most likely token is the same
//
// The base's log-probabilities come from a second backend in the same run or from a file saved by an
// earlier run (llama.cpp's --kl-divergence-base): `LogProbFile`. Memory is one window at a time.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace journey {

class Backend;

// How a token sequence is cut into scored windows.
struct PerplexityWindows {
  int64_t context = 0;       // C: tokens per window
  int64_t first_scored = 0;  // C / 2: the first position whose prediction is scored
  int64_t count = 0;         // windows = n_tokens / C
  int64_t scored_per_window() const { return context - 1 - first_scored; }
  int64_t scored_tokens() const { return count * scored_per_window(); }
};

// Throws journey::Error when context < 4 (nothing would be scored) or the text has fewer than
// 2 * context tokens (llama.cpp's own minimum), naming both numbers.
PerplexityWindows plan_windows(int64_t n_tokens, int64_t context);

// The log-probabilities of one window's scored predictions and the tokens they predict.
struct WindowLogProbs {
  int64_t vocab = 0;
  std::vector<float> log_probs;  // [scored_per_window, V] log_softmax of the logits at positions C/2 .. C-2
  std::vector<int32_t> targets;  // [scored_per_window] the tokens at positions C/2 + 1 .. C-1
};

// Runs window `w` of `tokens` through the backend as one sequence (its first token replaced by
// `bos` when given) and returns its scored rows. Allocates the backend's KV cache if it is too small.
WindowLogProbs window_log_probs(Backend& backend, std::span<const int32_t> tokens, const PerplexityWindows& plan,
                                int64_t w, std::optional<int32_t> bos);

// The figures, accumulated window by window.
struct PerplexityReport {
  PerplexityWindows windows;
  int64_t tokens_scored = 0;
  double mean_nll = 0;        // mean of -log p(next token), nats
  double ppl = 0;             // exp(mean_nll)
  double ppl_error = 0;       // llama.cpp's +/-: ppl * sqrt(var(nll) / (n - 1))
  std::vector<double> running_ppl;  // [windows] the estimate after each window (llama.cpp's [1]x,[2]y,...)
  // Against a base (has_base): the same figures for the base and the comparison.
  bool has_base = false;
  double base_ppl = 0, base_mean_nll = 0;
  double mean_kl = 0, kl_error = 0;  // mean KL(base || model) per token, nats, +/- its standard error
  double kl_median = 0, kl_p99 = 0, kl_max = 0;
  double top1_agreement = 0;         // fraction of scored positions with the same argmax
  double top1_error = 0;             // its standard error, sqrt(f (1 - f) / (n - 1))
};

// Accumulates scored windows; report() can be called at any time.
class PerplexityAccumulator {
 public:
  explicit PerplexityAccumulator(const PerplexityWindows& windows) : windows_(windows) {}
  // base may be null (perplexity only); when given it must cover the same targets.
  void add_window(const WindowLogProbs& model, const WindowLogProbs* base);
  PerplexityReport report() const;

 private:
  PerplexityWindows windows_;
  std::vector<double> nll_, base_nll_, kl_;  // [tokens scored so far]
  int64_t same_top1_ = 0;
  std::vector<double> running_ppl_;
};

// The percentile of values at fraction q in [0, 1], interpolating linearly between the sorted
// values (numpy's default, llama.cpp's percentile()). `values` is sorted in place.
double percentile(std::vector<double>& values, double q);

// A file of log-probabilities saved by one run and read as the base by another (llama.cpp's
// --kl-divergence-base file; its is compressed to 16 bits, this one keeps f32):
//   "JRNYLOGP" | u32 version = 1 | i64 context, first_scored, windows, vocab, n_tokens |
//   i32 tokens[n_tokens] | per window: f32 log_probs[scored_per_window * vocab]
// The tokens are stored so that a run on another text, or with another tokenizer, is refused.
class LogProbFile {
 public:
  static bool looks_like(const std::filesystem::path& path);  // starts with the magic
  // Writing: the header and tokens now, then append() once per window in order.
  static LogProbFile create(const std::filesystem::path& path, const PerplexityWindows& plan, int64_t vocab,
                            std::span<const int32_t> tokens);
  void append(const WindowLogProbs& window);
  // Reading: checks the header against what this run will score; throws journey::Error naming the
  // file and the field that differs (context, vocabulary, tokens).
  static LogProbFile open(const std::filesystem::path& path, const PerplexityWindows& plan, int64_t vocab,
                          std::span<const int32_t> tokens);
  WindowLogProbs read(int64_t w, std::span<const int32_t> tokens);

 private:
  std::filesystem::path path_;
  std::fstream file_;
  PerplexityWindows plan_;
  int64_t vocab_ = 0;
  std::streamoff data_begin_ = 0;  // byte offset of window 0's log-probs
  int64_t next_window_ = 0;
};

struct PerplexityProgress {
  int64_t window = 0, windows = 0;
  double running_ppl = 0;
};

struct PerplexityOptions {
  int64_t context = 0;              // 0: min(512, the model's context) — llama.cpp's default is 512
  std::optional<int32_t> bos;       // replaces each window's first token (llama.cpp does when add_bos)
  Backend* base = nullptr;          // base model computed in this run, or
  LogProbFile* base_file = nullptr; // base log-probabilities read from a file
  LogProbFile* save = nullptr;      // write this model's log-probabilities (to be a base later)
  std::function<void(const PerplexityProgress&)> on_window;
};

// The whole measurement over tokens (already tokenized, BOS first when the model adds one).
PerplexityReport measure_perplexity(Backend& model, std::span<const int32_t> tokens, const PerplexityOptions& options);

// The context measure_perplexity uses for `requested` (0 = default) on a model of `model_context`;
// throws if requested exceeds the model's context.
int64_t perplexity_context(int64_t requested, int64_t model_context);

}  // namespace journey
