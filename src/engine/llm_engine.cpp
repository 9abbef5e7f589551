#include "engine/llm_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "engine/grammar_step.h"
#include "text/tokenizer.h"
#include "trace/dump_sink.h"

namespace journey {

// Everything the engine keeps per request beyond what the scheduler sees.
struct LLMEngine::Request {
  Sequence seq;
  EngineRequest request;
  Sampler sampler;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  StopStringMatcher stop;     // holds back text that may still become a stop string
  std::unique_ptr<GrammarMatcher> grammar;  // structured output only
  int trace_steps = 0;        // steps recorded so far (traced requests only)
  Request(EngineRequest req, int64_t id)
      : request(std::move(req)), sampler(request.params, request.prompt), stop(request.stop) {
    seq.id = id;
    seq.tokens = request.prompt;
    seq.num_prompt_tokens = seq.num_tokens();
    seq.max_total_tokens = seq.num_tokens() + request.max_tokens;
  }
};

int64_t plan_kv_blocks(const Backend& backend, const EngineConfig& config, int64_t max_model_len) {
  if (config.num_kv_blocks > 0) return config.num_kv_blocks;
  int64_t block_bytes = backend.kv_block_bytes(config.block_size);
  if (block_bytes <= 0) fail("KV cache: backend reports ", block_bytes, " bytes per block");
  if (config.kv_cache_memory > 0) {
    int64_t n = config.kv_cache_memory / block_bytes;
    if (n < 1)
      fail("KV cache: --kv-cache-memory ", config.kv_cache_memory, " bytes holds no block (one block of ",
           config.block_size, " tokens takes ", block_bytes, " bytes)");
    return n;
  }
  int64_t per_seq = (max_model_len + config.block_size - 1) / config.block_size;
  int64_t wanted = per_seq * std::max<int64_t>(1, config.scheduler.max_num_seqs);
  int64_t cap = std::max<int64_t>(per_seq, (int64_t{1} << 30) / block_bytes);
  return std::min(wanted, cap);
}

namespace {
int64_t model_len(const Backend& backend, const EngineConfig& config) {
  int64_t model_max = backend.config().max_position_embeddings;
  if (config.max_model_len > 0) return model_max > 0 ? std::min(config.max_model_len, model_max) : config.max_model_len;
  if (model_max <= 0) fail("model config: max_position_embeddings is ", model_max, "; pass max_model_len");
  return model_max;
}
int64_t allocate_pool(Backend& backend, const EngineConfig& config, int64_t max_model_len) {
  if (config.block_size <= 0) fail("--block-size must be positive, got ", config.block_size);
  int64_t n = plan_kv_blocks(backend, config, max_model_len);
  backend.allocate_kv_cache(n, config.block_size);
  return n;
}
}  // namespace

LLMEngine::LLMEngine(Backend& backend, const EngineConfig& config, const Tokenizer* tokenizer)
    : backend_(backend),
      tokenizer_(tokenizer),
      max_model_len_(model_len(backend, config)),
      sampling_threads_(std::max(1, config.sampling_threads)),
      blocks_(allocate_pool(backend, config, max_model_len_), config.block_size, config.enable_prefix_caching),
      scheduler_(config.scheduler, blocks_),
      runner_(backend) {
  eos_ids_ = config.eos_token_ids;
  if (eos_ids_.empty())
    for (int id : backend.config().eos_token_ids) eos_ids_.push_back(id);
}

LLMEngine::~LLMEngine() = default;

int64_t LLMEngine::add_request(EngineRequest request) {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) fail("the prompt is empty (it must hold at least one token)");
  if (request.max_tokens < 1) fail("max_tokens must be at least 1, got ", request.max_tokens);
  if (prompt_len >= max_model_len_)
    fail("the prompt has ", prompt_len, " tokens but the model's context is ", max_model_len_,
         " tokens (at least one must be left to generate)");
  if (prompt_len + request.max_tokens > max_model_len_)
    fail("prompt (", prompt_len, " tokens) + max_tokens (", request.max_tokens, ") = ",
         prompt_len + request.max_tokens, " exceeds the model's context of ", max_model_len_, " tokens");
  const int64_t vocab = backend_.config().vocab_size;
  for (int32_t t : request.prompt)
    if (t < 0 || t >= vocab) fail("prompt token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  if (!request.stop.empty() && tokenizer_ == nullptr) fail("stop strings need a tokenizer");
  for (const std::string& s : request.stop)
    if (s.empty()) fail("stop strings must not be empty");

  if (request.grammar && tokenizer_ == nullptr) fail("structured output (a grammar) needs a tokenizer");

  int64_t id = next_id_++;
  auto r = std::make_unique<Request>(std::move(request), id);  // validates the sampling params
  if (r->request.grammar) {
    if (!trie_) trie_ = std::make_shared<const TokenTrie>(*tokenizer_, backend_.config().vocab_size);
    std::vector<int32_t> end_ids = r->request.stop_token_ids;
    if (!r->request.ignore_eos) end_ids.insert(end_ids.end(), eos_ids_.begin(), eos_ids_.end());
    r->grammar = std::make_unique<GrammarMatcher>(*r->request.grammar, trie_, std::move(end_ids));
  }
  if (tokenizer_ != nullptr) r->detokenizer = std::make_unique<IncrementalDetokenizer>(*tokenizer_, r->seq.tokens.back());
  scheduler_.add(&r->seq);  // throws when the pool can never hold it
  if (r->request.trace) {
    nlohmann::json& settings = r->request.trace->manifest().settings;
    settings["engine_request_id"] = id;
    settings["kv_cache"] = {{"block_size", blocks_.block_size()}, {"num_blocks", blocks_.num_blocks()}};
  }
  prompt_tokens_total_ += prompt_len;
  requests_.emplace(id, std::move(r));
  return id;
}

void LLMEngine::abort_request(int64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  Request& r = *it->second;
  RequestOutput out;
  out.request_id = request_id;
  out.aborted = true;
  out.prompt_tokens = r.seq.num_prompt_tokens;
  out.output_tokens = r.seq.num_output_tokens();
  scheduler_.finish(&r.seq);
  if (r.request.trace) trace_finish(r, out);
  aborted_.push_back(std::move(out));
  requests_.erase(it);
}

void LLMEngine::trace_step(Request& r, const SchedulerOutput& plan, size_t index) {
  DumpSink& sink = *r.request.trace;
  const Sequence& seq = r.seq;
  const int64_t fed = plan.scheduled[index].num_tokens;
  const int64_t start = seq.num_computed_tokens - fed;  // commit() already advanced it
  // A decode feeds the one token sampled last; anything else (a prefill chunk, the recompute
  // after a preemption) feeds prompt or earlier tokens and counts as a prefill step.
  const bool decode = fed == 1 && start >= seq.num_prompt_tokens;
  std::vector<int64_t> positions(static_cast<size_t>(fed));  // [T]
  for (int64_t i = 0; i < fed; ++i) positions[static_cast<size_t>(i)] = start + i;
  sink.set_step(r.trace_steps++, decode ? "decode" : "prefill", std::move(positions));

  const auto begin = seq.tokens.begin() + start;
  std::vector<int32_t> fed_ids(begin, begin + fed);  // [T]
  if (sink.wants(Stage::token_ids, -1)) sink.record_ints(Stage::token_ids, -1, fed_ids, {fed});
  const int64_t n_blocks = static_cast<int64_t>(seq.block_table.size());
  if (sink.wants(Stage::kv_blocks, -1)) sink.record_ints(Stage::kv_blocks, -1, seq.block_table, {n_blocks});

  nlohmann::json shared = nlohmann::json::array();  // blocks other sequences (or the cache) also hold
  for (int32_t b : seq.block_table)
    if (blocks_.ref_count(b) > 1) shared.push_back({{"block", b}, {"ref_count", blocks_.ref_count(b)}});
  sink.manifest().steps.back().kv_cache = {
      {"engine_step", steps_},
      {"batch_sequences", plan.scheduled.size()},
      {"batch_tokens", plan.num_batched_tokens},
      {"block_size", blocks_.block_size()},
      {"blocks", n_blocks},
      {"slots_used", seq.num_computed_tokens},
      {"slots_allocated", n_blocks * blocks_.block_size()},
      {"cached_prompt_tokens", std::min(seq.num_cached_tokens, seq.num_prompt_tokens)},
      {"shared_blocks", shared},
      {"preemptions", seq.num_preemptions},
  };
}

void LLMEngine::trace_sampled(Request& r, const SampledToken& token) {
  auto piece = [this](int32_t id) {
    return tokenizer_ != nullptr && id >= 0 && id < tokenizer_->vocab_size() ? tokenizer_->piece(id) : std::string();
  };
  ManifestSampled sampled{token.id, piece(token.id), token.prob, {}};
  for (const TokenLogprob& alt : token.top) sampled.top.push_back({alt.id, piece(alt.id), std::exp(double(alt.logprob))});
  r.request.trace->set_sampled(std::move(sampled));
}

void LLMEngine::trace_finish(Request& r, const RequestOutput& out) {
  DumpSink& sink = *r.request.trace;
  nlohmann::json& settings = sink.manifest().settings;
  settings["finish_reason"] = out.aborted ? std::string("abort") : std::string(finish_reason_name(*out.finish_reason));
  settings["output_tokens"] = r.seq.num_output_tokens();
  if (out.aborted && !out.text.empty()) settings["error"] = out.text;
  try {
    sink.finish();
  } catch (const std::exception& e) {  // a full disk must not take the engine down
    std::fprintf(stderr, "journey: writing the trace of request %lld failed: %s\n", static_cast<long long>(r.seq.id),
                 e.what());
  }
}


// Append the sampled token (if any), decode it, apply the stop rules, and say what is new.
RequestOutput LLMEngine::emit(Request& r, const std::optional<SampledToken>& token) {
  RequestOutput out;
  out.request_id = r.seq.id;
  out.prompt_tokens = r.seq.num_prompt_tokens;
  out.cached_prompt_tokens = std::min(r.seq.num_cached_tokens, r.seq.num_prompt_tokens);
  if (!token) return out;
  const int32_t id = token->id;
  r.seq.tokens.push_back(id);
  out.tokens.push_back(*token);
  out.output_tokens = r.seq.num_output_tokens();

  const bool is_eos = !r.request.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
  const bool is_stop_id = std::find(r.request.stop_token_ids.begin(), r.request.stop_token_ids.end(), id) !=
                          r.request.stop_token_ids.end();
  // Ids past the tokenizer's vocabulary (the embedding table is often padded: Qwen2.5 has 151936
  // rows for 151665 tokens) have no text; a trained model all but never samples them, a random-
  // weight one does. They count as output tokens and add no text.
  const bool has_text = tokenizer_ != nullptr && id < tokenizer_->vocab_size();
  const bool at_limit = r.seq.num_output_tokens() >= r.request.max_tokens || r.seq.num_tokens() >= max_model_len_;
  StopVerdict verdict = apply_stop_rules(id, is_eos || is_stop_id, has_text, at_limit, r.detokenizer.get(), r.stop,
                                         r.grammar && r.grammar->finished());
  out.text = std::move(verdict.text);
  out.finish_reason = verdict.finish;
  return out;
}

std::vector<RequestOutput> LLMEngine::step() {
  std::vector<RequestOutput> outputs = std::move(aborted_);
  aborted_.clear();
  SchedulerOutput plan = scheduler_.schedule();
  if (plan.empty()) return outputs;
  // Which sequences draw a token this step: those whose prompt is done after it (a prefill that
  // finishes, or a decode); a prefill chunk only fills the cache.
  const size_t n = plan.scheduled.size();
  std::vector<char> draws_token(n);
  for (size_t i = 0; i < n; ++i) {
    const Sequence& seq = *plan.scheduled[i].seq;
    draws_token[i] = seq.num_computed_tokens + plan.scheduled[i].num_tokens == seq.num_tokens();
  }
  // On a backend that samples on its device, draw there when every drawing sequence asks for
  // nothing else (no penalties, min-p, logprobs, grammar or trace): then only the ids come back.
  bool on_device = runner_.backend().samples_on_device();
  for (size_t i = 0; i < n && on_device; ++i) {
    const Request& r = *requests_.at(plan.scheduled[i].seq->id);
    if (draws_token[i] && (r.request.trace || r.grammar || !r.sampler.can_draw_on_device())) on_device = false;
  }
  ForwardOutput logits;                 // [sequences, V] when drawn on the host
  std::vector<int32_t> device_ids;      // [sequences] when drawn on the device
  if (on_device) {
    std::vector<DeviceSampling> params(n);  // a sequence that draws nothing gets a greedy draw, ignored
    for (size_t i = 0; i < n; ++i)
      if (draws_token[i]) params[i] = requests_.at(plan.scheduled[i].seq->id)->sampler.device_draw();
    device_ids = runner_.run_sample(plan, params);
  } else {
    logits = runner_.run(plan);  // one forward pass for the whole batch
  }
  scheduler_.commit(plan);
  ++steps_;
  batched_tokens_total_ += plan.num_batched_tokens;

  // Draw a token for every sequence whose prompt is done (prefill finished, or a decode). Each
  // request has its own sampler (RNG, history), so the draws are independent and run in parallel:
  // with 16 sequences of 151936 logits they are a noticeable part of a step on one thread.
  struct Draw {
    std::optional<SampledToken> token;
    std::string error;  // non-empty: sampling failed for this request only
    std::optional<TokenMask> grammar_mask;  // traced requests with a grammar: recorded after trace_step
  };
  const int64_t scheduled = static_cast<int64_t>(plan.scheduled.size());
  std::vector<Draw> draws(plan.scheduled.size());
#pragma omp parallel for num_threads(sampling_threads_) schedule(dynamic) if (scheduled > 1)
  for (int64_t i = 0; i < scheduled; ++i) {
    const Sequence& seq = *plan.scheduled[size_t(i)].seq;
    if (!draws_token[size_t(i)]) continue;  // a prefill chunk: nothing to draw yet
    Request& r = *requests_.at(seq.id);
    try {
      if (on_device) {
        draws[size_t(i)].token = r.sampler.accept_device_draw(device_ids[size_t(i)]);
        continue;
      }
      const std::span<const float> row(logits.last_row(size_t(i)), static_cast<size_t>(logits.vocab_size));
      if (!r.grammar) {
        draws[size_t(i)].token = r.sampler.sample(row);
        continue;
      }
      if (r.request.trace) draws[size_t(i)].grammar_mask = r.grammar->allowed();
      draws[size_t(i)].token = r.sampler.sample(masked_logits(*r.grammar, row, nullptr));
      r.grammar->accept(draws[size_t(i)].token->id);
    } catch (const std::exception& e) {
      draws[size_t(i)].error = e.what();
    }
  }

  for (size_t i = 0; i < plan.scheduled.size(); ++i) {
    Sequence& seq = *plan.scheduled[i].seq;
    Request& r = *requests_.at(seq.id);
    std::optional<SampledToken> token;
    RequestOutput out;
    try {
      if (r.request.trace) trace_step(r, plan, i);
      if (draws[i].grammar_mask) record_grammar_mask(*r.request.trace, *draws[i].grammar_mask, backend_.config().vocab_size);
      if (!draws[i].error.empty()) fail(draws[i].error);
      token = std::move(draws[i].token);
      if (token) {
        ++generation_tokens_total_;
        if (r.request.trace) trace_sampled(r, *token);
      }
      out = emit(r, token);
    } catch (const std::exception& e) {
      // Sampling or decoding failed for this request only: end it with the reason, keep the others.
      out = RequestOutput{};
      out.request_id = seq.id;
      out.aborted = true;
      out.text = cat("engine error: ", e.what());
      out.prompt_tokens = seq.num_prompt_tokens;
      out.output_tokens = seq.num_output_tokens();
      scheduler_.finish(&seq);
      if (r.request.trace) trace_finish(r, out);
      outputs.push_back(std::move(out));
      requests_.erase(seq.id);
      continue;
    }
    if (!token) continue;  // a prefill chunk: nothing to report yet
    if (out.finished()) {
      scheduler_.finish(&seq);
      if (r.request.trace) trace_finish(r, out);
      outputs.push_back(std::move(out));
      requests_.erase(seq.id);
    } else {
      outputs.push_back(std::move(out));
    }
  }
  return outputs;
}

EngineStats LLMEngine::stats() const {
  EngineStats s;
  s.running = scheduler_.num_running();
  s.waiting = scheduler_.num_waiting();
  s.preemptions = scheduler_.num_preemptions();
  s.steps = steps_;
  s.prompt_tokens_total = prompt_tokens_total_;
  s.generation_tokens_total = generation_tokens_total_;
  s.batched_tokens_total = batched_tokens_total_;
  s.kv = blocks_.stats();
  return s;
}

}  // namespace journey
