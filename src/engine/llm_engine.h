// The serving engine (vLLM's LLMEngine, nano-vllm's llm_engine.py): requests in, per-request
// outputs out, one step at a time. A step is
//     plan = scheduler.schedule();        // what runs next (scheduler.h)
//     logits = runner.run(plan);          // one batched forward for every scheduled sequence
//     scheduler.commit(plan);             // their K/V are in the cache now
//     outputs = sample_and_stop(plan);    // each sequence: its own sampler, its own stop rules
// It is single-threaded by design: the server's engine thread is the only caller.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/block_manager.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/stop.h"
#include "grammar/grammar.h"
#include "sampling/params.h"
#include "sampling/sampler.h"

namespace journey {

class Tokenizer;
class IncrementalDetokenizer;
class DumpSink;
class TokenTrie;
class GrammarMatcher;

struct EngineConfig {
  int64_t block_size = 16;
  int64_t num_kv_blocks = 0;      // > 0: exactly this many blocks
  int64_t kv_cache_memory = 0;    // > 0 (and no num_kv_blocks): as many blocks as fit in these bytes
  int64_t max_model_len = 0;      // 0: the model's max_position_embeddings
  bool enable_prefix_caching = true;
  std::vector<int32_t> eos_token_ids;  // empty: the model config's (see collect_eos_ids in stop.h)
  SchedulerConfig scheduler;
  // Threads that draw the tokens of a step's sequences in parallel (each sequence has its own
  // sampler, so the draws are independent); `journey serve` uses the backend's thread count.
  int sampling_threads = 1;
};

struct EngineRequest {
  std::vector<int32_t> prompt;       // [P] token ids, P >= 1
  SamplingParams params;
  int64_t max_tokens = 16;           // new tokens at most
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids
  bool ignore_eos = false;
  std::vector<std::string> stop;     // stop strings (need a tokenizer); not part of the output
  // Non-null: trace this request (journey serve --trace-dir). The caller fills the manifest's
  // model, prompt and settings; the engine adds, per step it schedules this sequence, the step
  // (kind, positions, sampled token) with the fed token_ids and the kv_blocks stage (its block
  // table) plus the step's KV facts, and writes manifest.json before the final output is returned.
  // Untraced requests cost one null check per scheduled sequence.
  std::shared_ptr<DumpSink> trace;
  // Structured output (response_format): the text must match this grammar. Its mask is applied to
  // the logits before the sampler (engine/grammar_step.h), such a sequence is always drawn on the
  // host, and it finishes with "stop" once the grammar is complete and admits nothing more. Needs
  // a tokenizer. A grammar that admits no token ends the request with an error.
  std::optional<Grammar> grammar;
};


// What one step produced for one request.
struct RequestOutput {
  int64_t request_id = 0;
  std::vector<SampledToken> tokens;  // new tokens this step (0 or 1; 0 when only a prefill chunk ran)
  std::string text;                  // newly completed text (with a tokenizer; stop strings cut)
  std::optional<FinishReason> finish_reason;  // stop / length (stop.h), once finished
  bool aborted = false;                       // abort_request(): finished without a reason
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens served by the prefix cache
  int64_t output_tokens = 0;         // generated so far
  bool finished() const { return finish_reason.has_value() || aborted; }
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t prompt_tokens_total = 0;      // prompt tokens of admitted requests
  int64_t generation_tokens_total = 0;  // tokens sampled
  int64_t batched_tokens_total = 0;     // tokens fed to the model (prefill chunks + decodes)
  BlockManagerStats kv;
};

class LLMEngine {
 public:
  // tokenizer may be null (token ids only: no text, no stop strings).
  LLMEngine(Backend& backend, const EngineConfig& config, const Tokenizer* tokenizer = nullptr);
  ~LLMEngine();

  // Validates and queues a request; returns its id. Throws journey::Error (empty prompt, prompt
  // + max_tokens beyond the context, bad sampling parameters, a request the pool can never hold).
  int64_t add_request(EngineRequest request);
  // Stops a request now and frees its blocks; its last output (finish_reason Abort) comes from
  // the next step(). Unknown or finished ids are ignored.
  void abort_request(int64_t request_id);

  std::vector<RequestOutput> step();
  bool has_unfinished() const { return !requests_.empty(); }

  EngineStats stats() const;
  int64_t max_model_len() const { return max_model_len_; }
  int64_t num_kv_blocks() const { return blocks_.num_blocks(); }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  Backend& backend() { return backend_; }

 private:
  struct Request;
  RequestOutput emit(Request& r, const std::optional<SampledToken>& token);
  // Tracing (only for requests with a DumpSink): one step's block table and KV facts; the token
  // sampled at its end; the manifest written when the request ends, however it ends.
  void trace_step(Request& r, const SchedulerOutput& plan, size_t index);
  void trace_sampled(Request& r, const SampledToken& token);
  void trace_finish(Request& r, const RequestOutput& out);

  Backend& backend_;
  const Tokenizer* tokenizer_;
  int64_t max_model_len_ = 0;
  int sampling_threads_ = 1;
  std::vector<int32_t> eos_ids_;
  BlockManager blocks_;
  Scheduler scheduler_;
  ModelRunner runner_;
  std::unordered_map<int64_t, std::unique_ptr<Request>> requests_;
  std::vector<RequestOutput> aborted_;  // reported by the next step()
  std::shared_ptr<const TokenTrie> trie_;  // the tokenizer's bytes per id, made at the first grammar
  int64_t next_id_ = 0;
  int64_t steps_ = 0, prompt_tokens_total_ = 0, generation_tokens_total_ = 0, batched_tokens_total_ = 0;
};

// Number of KV blocks for a config: num_kv_blocks, else kv_cache_memory / kv_block_bytes, else
// enough for max_num_seqs full-length sequences but at most 1 GiB.
int64_t plan_kv_blocks(const Backend& backend, const EngineConfig& config, int64_t max_model_len);

}  // namespace journey
