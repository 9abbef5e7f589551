// One prompt, one sequence, start to finish: the shortest honest generation loop (llama2.c's
// generate() is the model). Prefill the whole prompt in one forward pass, then feed one token per
// step; every sampled token goes through the detokenizer and the stop rules to the caller.
// The KV cache is the backend's paged pool used contiguously: the sequence owns blocks 0, 1, 2...
// The first generated token is decoded after the last prompt id (SentencePiece's leading-space
// rule depends on the previous token), so the text reads as a continuation of the prompt.
// Serving many sequences at once is the scheduler's job (engine/scheduler.h), not this loop's.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/stop.h"
#include "grammar/grammar.h"
#include "sampling/params.h"
#include "sampling/sampler.h"

namespace journey {

class Backend;
class Tokenizer;
class TraceSink;

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;  // [P] already encoded, BOS included if wanted; P >= 1
  SamplingParams sampling;
  StopRules stop;
  bool skip_special = true;         // do not emit the text of special tokens
  // Structured output: the text must match this grammar (grammar/grammar.h). Its mask runs before
  // the sampler (engine/grammar_step.h); the run stops with "stop" once the grammar is complete and
  // admits nothing more, and a grammar that admits no token is an Error.
  std::optional<Grammar> grammar;
};

struct GenerationResult {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double time_to_first_token_s = 0;  // start of prefill to the first sampled token
  double prefill_tokens_per_s = 0;   // prompt tokens / prefill time
  double decode_tokens_per_s = 0;    // tokens sampled after the first / decode time (0 if none)
  FinishReason finish_reason = FinishReason::Length;
  std::optional<std::string> stop_string;  // the stop string that ended it, if one did
  std::vector<int32_t> token_ids;    // [generated_tokens] including a final EOS / stop token
  std::string text;                  // everything emitted through on_text
  uint64_t seed = 0;                 // the sampler's seed (for reproducing a sampled run)
};

struct GenerationCallbacks {
  // Newly emitted text (after UTF-8 completion and stop-string hold-back); may be called with
  // chunks of any size, never with a stop string or EOS text.
  std::function<void(std::string_view text)> on_text;
  // Every sampled token with its probability and alternatives; position = where it will be fed.
  std::function<void(const SampledToken& token, int64_t position)> on_token;
};

// Runs the request to completion. Throws journey::Error on a bad request (empty prompt, a prompt
// longer than the context, an out-of-range id, invalid sampling or stop rules). The sink, when
// given, receives the backend's stages and the sampler's distributions at every step.
GenerationResult generate(Backend& backend, const Tokenizer& tokenizer, const GenerationRequest& request,
                          const GenerationCallbacks& callbacks = {}, TraceSink* sink = nullptr);

}  // namespace journey
