// Perplexity, KL divergence and top-1 agreement over windows of a text (see perplexity.h).
#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "backend/backend.h"
#include "core/error.h"
#include "sampling/processors.h"

namespace journey {
namespace {

constexpr char kLogProbMagic[8] = {'J', 'R', 'N', 'Y', 'L', 'O', 'G', 'P'};
constexpr uint32_t kLogProbVersion = 1;
constexpr int64_t kBlockSize = 16;  // KV block size when this code allocates the pool

// mean and the standard error of the mean, sqrt(var / (n - 1)), as llama.cpp reports them
std::pair<double, double> mean_and_error(const std::vector<double>& values) {
  const double n = double(values.size());
  if (values.empty()) return {0.0, 0.0};
  double sum = 0, sum2 = 0;
  for (double v : values) sum += v, sum2 += v * v;
  const double mean = sum / n;
  const double var = sum2 / n - mean * mean;
  return {mean, (n > 1 && var > 0) ? std::sqrt(var / (n - 1)) : 0.0};
}

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

template <typename T>
void write_pod(std::fstream& f, const T& v) { f.write(reinterpret_cast<const char*>(&v), sizeof(T)); }
template <typename T>
T read_pod(std::fstream& f) {
  T v{};
  f.read(reinterpret_cast<char*>(&v), sizeof(T));
  return v;
}

}  // namespace

PerplexityWindows plan_windows(int64_t n_tokens, int64_t context) {
  if (context < 4) fail("perplexity: a context of ", context, " tokens scores nothing; use at least 4");
  if (n_tokens < 2 * context)
    fail("perplexity: the text has ", n_tokens, " tokens; a context of ", context, " needs at least ", 2 * context,
         " (two windows), as llama-perplexity does — use a longer text or a smaller --ctx");
  return PerplexityWindows{context, context / 2, n_tokens / context};
}

int64_t perplexity_context(int64_t requested, int64_t model_context) {
  if (requested < 0) fail("perplexity: --ctx ", requested, " is negative");
  if (requested == 0) return model_context > 0 ? std::min<int64_t>(512, model_context) : 512;
  if (model_context > 0 && requested > model_context)
    fail("perplexity: --ctx ", requested, " is longer than the model's context of ", model_context, " positions");
  return requested;
}

WindowLogProbs window_log_probs(Backend& backend, std::span<const int32_t> tokens, const PerplexityWindows& plan,
                                int64_t w, std::optional<int32_t> bos) {
  const int64_t C = plan.context, first = plan.first_scored;
  if (w < 0 || w >= plan.count || (w + 1) * C > int64_t(tokens.size()))
    fail("perplexity: window ", w, " is outside the ", plan.count, " windows of ", C, " tokens");
  if (backend.kv_num_blocks() * backend.kv_block_size() < C)
    backend.allocate_kv_cache((C + kBlockSize - 1) / kBlockSize, kBlockSize);
  const int64_t block_size = backend.kv_block_size();

  SequenceInput sequence;
  sequence.tokens.assign(tokens.begin() + w * C, tokens.begin() + (w + 1) * C);  // [C]
  if (bos) sequence.tokens[0] = *bos;
  sequence.start_position = 0;  // a fresh sequence: nothing of the previous window is attended
  sequence.all_logits = true;
  for (int64_t b = 0; b < (C + block_size - 1) / block_size; ++b) sequence.block_table.push_back(int32_t(b));
  ForwardBatch batch;
  batch.sequences.push_back(std::move(sequence));
  const ForwardOutput out = backend.forward(batch);
  if (out.row_begin.size() != 2 || out.row_begin[1] - out.row_begin[0] != C)
    fail("perplexity: backend ", backend.name(), " returned ", out.row_begin.size() == 2 ? out.row_begin[1] : -1,
         " rows of logits for a window of ", C, " tokens asked with all_logits");

  WindowLogProbs result;
  result.vocab = out.vocab_size;
  const int64_t V = out.vocab_size, n = plan.scored_per_window();
  result.log_probs.resize(size_t(n * V));  // [n, V]
  result.targets.resize(size_t(n));        // [n]
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = first + i;  // the logits at position j predict the token at j + 1
    const std::vector<float> lp = log_softmax(std::span<const float>(out.row(out.row_begin[0] + j), size_t(V)));
    std::copy(lp.begin(), lp.end(), result.log_probs.begin() + i * V);
    result.targets[size_t(i)] = tokens[size_t(w * C + j + 1)];
  }
  return result;
}

void PerplexityAccumulator::add_window(const WindowLogProbs& model, const WindowLogProbs* base) {
  const int64_t V = model.vocab, n = int64_t(model.targets.size());
  if (base && (base->vocab != V || base->targets != model.targets))
    fail("perplexity: the base scores a different window (vocabulary ", base->vocab, " vs ", V,
         base->targets != model.targets ? ", different target tokens" : "", ")");
  for (int64_t i = 0; i < n; ++i) {
    const float* lp = model.log_probs.data() + i * V;  // [V]
    const int32_t target = model.targets[size_t(i)];
    nll_.push_back(-double(lp[target]));
    if (!base) continue;
    const float* lb = base->log_probs.data() + i * V;  // [V]
    base_nll_.push_back(-double(lb[target]));
    double kl = 0;  // sum_v p_base (log p_base - log p_model); terms with p_base = 0 contribute 0
    for (int64_t v = 0; v < V; ++v) {
      const double pb = std::exp(double(lb[v]));
      if (pb > 0) kl += pb * (double(lb[v]) - double(lp[v]));
    }
    kl_.push_back(std::max(kl, 0.0));  // >= 0 mathematically; rounding can leave -1e-17
    same_top1_ += argmax(lp, V) == argmax(lb, V);
  }
  double sum = 0;
  for (double v : nll_) sum += v;
  running_ppl_.push_back(std::exp(sum / double(nll_.size())));
}

double percentile(std::vector<double>& values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  if (q <= 0) return values.front();
  if (q >= 1) return values.back();
  const double p = q * double(values.size() - 1);
  const size_t i = size_t(p);
  const double frac = p - double(i);
  return (1 - frac) * values[i] + frac * values[std::min(i + 1, values.size() - 1)];
}

PerplexityReport PerplexityAccumulator::report() const {
  PerplexityReport r;
  r.windows = windows_;
  r.tokens_scored = int64_t(nll_.size());
  const auto [mean_nll, nll_error] = mean_and_error(nll_);
  r.mean_nll = mean_nll;
  r.ppl = std::exp(mean_nll);
  r.ppl_error = r.ppl * nll_error;
  r.running_ppl = running_ppl_;
  if (kl_.empty()) return r;
  r.has_base = true;
  r.base_mean_nll = mean_and_error(base_nll_).first;
  r.base_ppl = std::exp(r.base_mean_nll);
  std::tie(r.mean_kl, r.kl_error) = mean_and_error(kl_);
  std::vector<double> sorted = kl_;
  r.kl_median = percentile(sorted, 0.5);
  r.kl_p99 = percentile(sorted, 0.99);
  r.kl_max = sorted.back();
  const double n = double(kl_.size());
  r.top1_agreement = double(same_top1_) / n;
  r.top1_error = n > 1 ? std::sqrt(r.top1_agreement * (1 - r.top1_agreement) / (n - 1)) : 0.0;
  return r;
}

PerplexityReport measure_perplexity(Backend& model, std::span<const int32_t> tokens, const PerplexityOptions& options) {
  const int64_t context = perplexity_context(options.context, model.config().max_position_embeddings);
  const PerplexityWindows plan = plan_windows(int64_t(tokens.size()), context);
  if (options.base && options.base_file) fail("perplexity: give the base as a model or as a file, not both");
  if (options.base) {
    const ModelConfig& a = model.config();
    const ModelConfig& b = options.base->config();
    if (a.vocab_size != b.vocab_size)
      fail("perplexity: the base model has a vocabulary of ", b.vocab_size, " tokens, the model ", a.vocab_size,
           "; KL divergence compares distributions over the same vocabulary");
    if (b.max_position_embeddings > 0 && context > b.max_position_embeddings)
      fail("perplexity: --ctx ", context, " is longer than the base model's context of ", b.max_position_embeddings);
  }
  PerplexityAccumulator totals(plan);
  for (int64_t w = 0; w < plan.count; ++w) {
    const WindowLogProbs scored = window_log_probs(model, tokens, plan, w, options.bos);
    if (options.save) options.save->append(scored);
    std::optional<WindowLogProbs> base;
    if (options.base) base = window_log_probs(*options.base, tokens, plan, w, options.bos);
    if (options.base_file) base = options.base_file->read(w, tokens);
    totals.add_window(scored, base ? &*base : nullptr);
    if (options.on_window) {
      const PerplexityReport so_far = totals.report();
      options.on_window(PerplexityProgress{w, plan.count, so_far.running_ppl.back()});
    }
  }
  return totals.report();
}

// ---- the log-probability file -------------------------------------------------------------------

bool LogProbFile::looks_like(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  return in.read(magic, 8) && std::memcmp(magic, kLogProbMagic, 8) == 0;
}

LogProbFile LogProbFile::create(const std::filesystem::path& path, const PerplexityWindows& plan, int64_t vocab,
                                std::span<const int32_t> tokens) {
  LogProbFile f;
  f.path_ = path;
  f.plan_ = plan;
  f.vocab_ = vocab;
  f.file_.open(path, std::ios::binary | std::ios::out | std::ios::trunc);
  if (!f.file_) fail(path.string(), ": cannot create the log-probability file");
  f.file_.write(kLogProbMagic, 8);
  write_pod(f.file_, kLogProbVersion);
  for (int64_t v : {plan.context, plan.first_scored, plan.count, vocab, int64_t(tokens.size())}) write_pod(f.file_, v);
  f.file_.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * sizeof(int32_t)));
  if (!f.file_) fail(path.string(), ": error writing the header");
  return f;
}

void LogProbFile::append(const WindowLogProbs& window) {
  if (window.vocab != vocab_ || int64_t(window.targets.size()) != plan_.scored_per_window())
    fail(path_.string(), ": window of ", window.targets.size(), " x ", window.vocab, " log-probs, expected ",
         plan_.scored_per_window(), " x ", vocab_);
  file_.write(reinterpret_cast<const char*>(window.log_probs.data()),
              std::streamsize(window.log_probs.size() * sizeof(float)));
  file_.flush();
  if (!file_) fail(path_.string(), ": error writing window ", next_window_);
  ++next_window_;
}

LogProbFile LogProbFile::open(const std::filesystem::path& path, const PerplexityWindows& plan, int64_t vocab,
                              std::span<const int32_t> tokens) {
  const std::string where = path.string();
  LogProbFile f;
  f.path_ = path;
  f.file_.open(path, std::ios::binary | std::ios::in);
  if (!f.file_) fail(where, ": cannot open the base log-probability file");
  char magic[8] = {};
  f.file_.read(magic, 8);
  if (!f.file_ || std::memcmp(magic, kLogProbMagic, 8) != 0)
    fail(where, ": not a journey log-probability file (expected the magic \"JRNYLOGP\", written by journey perplexity --save-logprobs)");
  const uint32_t version = read_pod<uint32_t>(f.file_);
  if (version != kLogProbVersion) fail(where, ": version ", version, ", this build reads version ", kLogProbVersion);
  int64_t header[5];
  for (int64_t& v : header) v = read_pod<int64_t>(f.file_);
  if (!f.file_) fail(where, ": the header is truncated");
  const auto [context, first, windows, file_vocab, n_tokens] = std::tuple(header[0], header[1], header[2], header[3], header[4]);
  if (context != plan.context || first != plan.first_scored)
    fail(where, ": saved with a context of ", context, " (scoring from ", first, "), this run uses ", plan.context,
         " (from ", plan.first_scored, ")");
  if (file_vocab != vocab) fail(where, ": saved over a vocabulary of ", file_vocab, " tokens, this model has ", vocab);
  if (n_tokens != int64_t(tokens.size()) || windows != plan.count)
    fail(where, ": saved for ", n_tokens, " tokens (", windows, " windows), this run has ", tokens.size(), " (",
         plan.count, " windows): another text or another tokenizer");
  std::vector<int32_t> saved(static_cast<size_t>(n_tokens));  // [n_tokens]
  f.file_.read(reinterpret_cast<char*>(saved.data()), std::streamsize(saved.size() * sizeof(int32_t)));
  if (!f.file_) fail(where, ": the token list is truncated");
  for (size_t i = 0; i < saved.size(); ++i)
    if (saved[i] != tokens[i])
      fail(where, ": token ", i, " is ", saved[i], " in the file and ", tokens[i],
           " in this run: another text or another tokenizer");
  f.data_begin_ = f.file_.tellg();
  const uint64_t expected = uint64_t(f.data_begin_) + uint64_t(windows) * uint64_t(plan.scored_per_window()) *
                                                          uint64_t(vocab) * sizeof(float);
  const uint64_t size = std::filesystem::file_size(path);
  if (size != expected)
    fail(where, ": ", size, " bytes, but ", windows, " windows of ", plan.scored_per_window(), " x ", vocab,
         " log-probs after the header need ", expected);
  f.plan_ = plan;
  f.vocab_ = vocab;
  return f;
}

WindowLogProbs LogProbFile::read(int64_t w, std::span<const int32_t> tokens) {
  const int64_t n = plan_.scored_per_window();
  WindowLogProbs out;
  out.vocab = vocab_;
  out.log_probs.resize(size_t(n * vocab_));  // [n, V]
  file_.seekg(data_begin_ + std::streamoff(w * n * vocab_ * int64_t(sizeof(float))));
  file_.read(reinterpret_cast<char*>(out.log_probs.data()), std::streamsize(out.log_probs.size() * sizeof(float)));
  if (!file_) fail(path_.string(), ": cannot read window ", w);
  out.targets.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    out.targets[size_t(i)] = tokens[size_t(w * plan_.context + plan_.first_scored + i + 1)];
  return out;
}

}  // namespace journey
