// Chapter 7 — the generation loop: stop rules, and why the KV cache matters.
// 1. generate() with a token limit, a stop string and EOS, reporting why each run stopped.
// 2. The same greedy continuation computed WITHOUT a KV cache (the whole sequence re-run at every
//    step) must give the same tokens; the chapter prints how much more work that took.
// 3. With --chat-model, a real chat model instead (SmolLM2-135M-Instruct, which
//    scripts/install-deps.sh fetches into models/): a system + user conversation through its chat
//    template, answered greedily token by token until the model itself emits its end-of-turn token
//    <|im_end|>; then the same with the end ids removed, to see what the model writes after it.
//
// usage: ch07_generation_loop [MODEL]                 (default data/stories260K)
//        ch07_generation_loop --chat-model PATH       (a GGUF file or a directory holding one)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "engine/generate.h"
#include "reference/reference_backend.h"
#include "sampling/processors.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

using namespace journey;

static double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The text with its line breaks shown, so that a template's structure stays on one line.
static std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

static int chat_model(const std::filesystem::path& path) {
  const LoadedModel model = load_model(path);  // a directory holding one .gguf resolves to it
  const auto tokenizer = load_tokenizer(model.path);
  auto backend = make_reference_backend(model);
  ChatTemplateInputs inputs;
  inputs.messages = {{"system", "You are a concise assistant. Answer in one sentence."},
                     {"user", "What is the capital of France?"}};
  const RenderedPrompt prompt = render_and_encode(load_chat_template(model.path), *tokenizer, inputs);

  GenerationRequest request;
  request.prompt_ids.assign(prompt.ids.begin(), prompt.ids.end());
  request.sampling.temperature = 0;
  request.stop.max_tokens = 64;
  request.stop.eos_ids = collect_eos_ids(model.generation, model.config, *tokenizer);

  std::cout << "# Chapter 7 on a chat model: " << model.path.filename().string() << "\n\nend ids:";
  for (int32_t id : request.stop.eos_ids) std::cout << " " << id << " " << tokenizer->piece(id);
  std::cout << "\nprompt: " << prompt.ids.size() << " tokens, \"" << one_line(prompt.text) << "\"\n\n";
  std::printf("  %4s  %-6s %-6s %s\n", "step", "id", "p", "piece");
  GenerationCallbacks print_tokens;
  int64_t step = 0;
  print_tokens.on_token = [&](const SampledToken& token, int64_t) {
    std::printf("  %4lld  %-6d %.3f  %s\n", (long long)step++, token.id, token.prob, tokenizer->piece(token.id).c_str());
  };
  const GenerationResult answer = generate(*backend, *tokenizer, request, print_tokens);
  const bool ended_by_model = answer.finish_reason == FinishReason::Stop && !answer.token_ids.empty() &&
                              std::find(request.stop.eos_ids.begin(), request.stop.eos_ids.end(),
                                        answer.token_ids.back()) != request.stop.eos_ids.end();
  std::printf("-> %lld tokens, finish_reason=%s (the model emitted an end id: %s); the user sees\n  \"%s\"\n",
              (long long)answer.generated_tokens, finish_reason_name(answer.finish_reason), ended_by_model ? "yes" : "NO",
              answer.text.c_str());

  // The same greedy run, blind to the end ids: the model's own end of turn is just another token.
  request.stop.eos_ids.clear();
  request.stop.max_tokens = answer.generated_tokens + 16;
  request.skip_special = false;  // show the markers it writes
  const GenerationResult blind = generate(*backend, *tokenizer, request);
  std::printf("\nwithout end ids -> %lld tokens, finish_reason=%s:\n  \"%s\"\n", (long long)blind.generated_tokens,
              finish_reason_name(blind.finish_reason), one_line(blind.text).c_str());
  return ended_by_model ? 0 : 1;
}

int main(int argc, char** argv) try {
  if (argc == 3 && std::string(argv[1]) == "--chat-model") return chat_model(argv[2]);
  const std::filesystem::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const LoadedModel model = load_model(model_path);
  const auto tokenizer = load_tokenizer(model_path);
  auto backend = make_reference_backend(model);
  const std::vector<int> prompt = tokenizer->encode("Once upon a time", /*add_special=*/true);

  GenerationRequest request;
  request.prompt_ids.assign(prompt.begin(), prompt.end());
  request.sampling.temperature = 0;  // greedy: the same text every run
  request.stop.eos_ids = collect_eos_ids(model.generation, model.config, *tokenizer);

  std::cout << "# Chapter 7: the generation loop\n";
  struct Case { const char* what; int64_t max_tokens; std::vector<std::string> stops; };
  for (const Case& c : {Case{"max_tokens 12", 12, {}}, Case{"stop string \"Lily\"", 200, {"Lily"}},
                        Case{"run to the token limit of 60", 60, {}}}) {
    request.stop.max_tokens = c.max_tokens;
    request.stop.stop_strings = c.stops;
    const GenerationResult r = generate(*backend, *tokenizer, request);
    std::printf("\n[%s] -> %lld tokens, finish_reason=%s%s\n  Once upon a time%s\n", c.what,
                (long long)r.generated_tokens, finish_reason_name(r.finish_reason),
                r.stop_string ? (" (matched \"" + *r.stop_string + "\", not printed)").c_str() : "", r.text.c_str());
  }

  // With the cache: generate() prefills once, then feeds ONE token per step.
  const int64_t n_new = 40;
  request.stop.max_tokens = n_new;
  request.stop.stop_strings.clear();
  request.stop.eos_ids.clear();  // force exactly n_new tokens for a fair comparison
  auto start = std::chrono::steady_clock::now();
  const GenerationResult cached = generate(*backend, *tokenizer, request);
  const double cached_s = seconds_since(start);

  // Without the cache: every step recomputes K and V for the whole sequence from scratch.
  std::vector<int32_t> sequence(prompt.begin(), prompt.end());
  const int64_t final_length = int64_t(sequence.size()) + n_new;
  backend->allocate_kv_cache(1, final_length);
  int64_t tokens_processed = 0;
  start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < n_new; ++step) {
    const ForwardOutput out = backend->forward(ForwardBatch{{SequenceInput{0, sequence, 0, {0}, false}}});
    tokens_processed += int64_t(sequence.size());
    sequence.push_back(argmax(std::span<const float>(out.last_row(0), size_t(out.vocab_size))));
  }
  const double uncached_s = seconds_since(start);
  const std::vector<int32_t> uncached(sequence.begin() + int64_t(prompt.size()), sequence.end());

  std::printf("\n%lld new tokens after a %zu-token prompt:\n", (long long)n_new, prompt.size());
  std::printf("  with the KV cache:    %6lld token-forwards  %8.1f ms\n",
              (long long)(int64_t(prompt.size()) + n_new - 1), cached_s * 1e3);
  std::printf("  without (recompute):  %6lld token-forwards  %8.1f ms\n", (long long)tokens_processed,
              uncached_s * 1e3);
  const bool same = uncached == cached.token_ids;
  std::printf("  same tokens: %s\n", same ? "yes" : "NO");
  if (!same) std::cerr << "MISMATCH: recomputing without the cache changed the greedy tokens\n";
  return same ? 0 : 1;
} catch (const journey::Error& e) {
  std::cerr << "ch07: " << e.what() << "\n";
  return 1;
}
