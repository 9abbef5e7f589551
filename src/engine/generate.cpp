#include "engine/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "backend/backend.h"
#include "engine/grammar_step.h"
#include "text/tokenizer.h"

namespace journey {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Block size of the pool when this loop allocates it (any size works for a contiguous cache).
constexpr int64_t kBlockSize = 16;

// The identity block table covering positions [0, num_positions): blocks 0, 1, 2, ...
std::vector<int32_t> contiguous_blocks(int64_t num_positions, int64_t block_size) {
  std::vector<int32_t> table(static_cast<size_t>((num_positions + block_size - 1) / block_size));  // [n_blocks]
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  return table;
}

}  // namespace

GenerationResult generate(Backend& backend, const Tokenizer& tokenizer, const GenerationRequest& request,
                          const GenerationCallbacks& callbacks, TraceSink* sink) {
  const ModelConfig& config = backend.config();
  const int64_t context = config.max_position_embeddings;
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_ids.size());
  validate(request.stop);
  if (prompt_len == 0) fail("the prompt is empty: at least one token (usually BOS) is needed to start");
  if (prompt_len > context)
    fail("the prompt has ", prompt_len, " tokens but the model's context is ", context, " tokens");
  for (int32_t id : request.prompt_ids)
    if (id < 0 || id >= config.vocab_size)
      fail("prompt token id ", id, " is outside the vocabulary [0, ", config.vocab_size, ")");

  // A sampled token is fed back at the next position, so the last one we may sample is the one
  // after position context - 1 (llama2.c: steps <= seq_len). Only fed tokens need cache slots.
  const int64_t max_new = std::min(request.stop.max_tokens, context - prompt_len + 1);
  const int64_t positions_needed = prompt_len + max_new - 1;
  if (backend.kv_num_blocks() * backend.kv_block_size() < positions_needed)
    backend.allocate_kv_cache((positions_needed + kBlockSize - 1) / kBlockSize, kBlockSize);
  const int64_t block_size = backend.kv_block_size();

  Sampler sampler(request.sampling, request.prompt_ids);
  IncrementalDetokenizer detokenizer(tokenizer, request.prompt_ids.back(), request.skip_special);
  StopStringMatcher stop_matcher(request.stop.stop_strings);
  GenerationResult result;
  result.prompt_tokens = prompt_len;
  result.seed = sampler.seed();
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (callbacks.on_text) callbacks.on_text(text);
  };

  std::unique_ptr<GrammarMatcher> grammar;  // structured output: the mask before the sampler
  if (request.grammar)
    grammar = std::make_unique<GrammarMatcher>(*request.grammar, std::make_shared<const TokenTrie>(tokenizer, config.vocab_size),
                                               request.stop.eos_ids);

  // One forward pass, then the next token: drawn on the backend's device when it samples there and
  // nothing but temperature/top-k/top-p is asked (only the id comes back), else on the host.
  const bool on_device = sink == nullptr && !grammar && backend.samples_on_device() && sampler.can_draw_on_device();
  auto forward_and_sample = [&](const ForwardBatch& step_batch) {
    if (on_device) {
      const DeviceSampling draw = sampler.device_draw();
      return sampler.accept_device_draw(backend.forward_sample(step_batch, std::span<const DeviceSampling>(&draw, 1))[0]);
    }
    const ForwardOutput output = backend.forward(step_batch, sink);
    const std::span<const float> logits(output.last_row(0), static_cast<size_t>(output.vocab_size));
    if (!grammar) return sampler.sample(logits, sink);
    const SampledToken token = sampler.sample(masked_logits(*grammar, logits, sink), sink);
    grammar->accept(token.id);
    return token;
  };

  // Prefill: the whole prompt in one forward pass; only the last position's logits are needed.
  Clock::time_point start = Clock::now();
  ForwardBatch batch;
  batch.sequences.push_back(SequenceInput{0, request.prompt_ids, 0, contiguous_blocks(prompt_len, block_size)});
  int64_t position = prompt_len;  // where the next token will be fed
  SampledToken token = forward_and_sample(batch);
  double prefill_s = seconds_since(start);
  result.time_to_first_token_s = prefill_s;
  result.prefill_tokens_per_s = prompt_len / std::max(prefill_s, 1e-9);

  Clock::time_point decode_start = Clock::now();
  while (true) {
    result.token_ids.push_back(token.id);
    if (callbacks.on_token) callbacks.on_token(token, position);
    const bool is_eos = std::find(request.stop.eos_ids.begin(), request.stop.eos_ids.end(), token.id) !=
                        request.stop.eos_ids.end();
    const bool at_limit = static_cast<int64_t>(result.token_ids.size()) >= max_new;
    // ids past the tokenizer's vocabulary (a padded embedding table) have no text, as in the engine
    const bool has_text = token.id < tokenizer.vocab_size();
    StopVerdict verdict = apply_stop_rules(token.id, is_eos, has_text, at_limit, &detokenizer, stop_matcher,
                                           grammar && grammar->finished());
    emit(verdict.text);
    if (verdict.finish) {
      result.finish_reason = *verdict.finish;
      if (stop_matcher.matched()) result.stop_string = stop_matcher.matched_stop();
      break;
    }
    // Decode: feed the token at its position, sample the next one.
    batch.sequences[0] = SequenceInput{0, {token.id}, position, contiguous_blocks(position + 1, block_size)};
    ++position;
    token = forward_and_sample(batch);
  }

  result.generated_tokens = static_cast<int64_t>(result.token_ids.size());
  double decode_s = seconds_since(decode_start);
  if (result.generated_tokens > 1) result.decode_tokens_per_s = (result.generated_tokens - 1) / std::max(decode_s, 1e-9);
  return result;
}

}  // namespace journey
