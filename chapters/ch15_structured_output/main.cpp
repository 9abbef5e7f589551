// Chapter 15 — structured output: a JSON schema becomes a grammar, the grammar a mask over the
// vocabulary at every step, the mask a changed distribution, and the answer always parses.
//
//   ch15_structured_output [MODEL]      (default: the shipped stories260K)
//
// A model with a chat template (SmolLM2-135M-Instruct from scripts/install-deps.sh) is asked in a
// conversation; a base model (stories260K) continues a plain prompt. Everything printed comes from
// the library: grammar/grammar.h (the schema compiler), grammar/token_mask.h (the trie and the
// matcher), engine/grammar_step.h (the mask as a logits processor), engine/generate.h (the loop).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "core/untrusted.h"
#include "engine/generate.h"
#include "engine/grammar_step.h"
#include "engine/stop.h"
#include "grammar/token_mask.h"
#include "reference/reference_backend.h"
#include "sampling/processors.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

using namespace journey;
using json = nlohmann::ordered_json;

namespace {

// The schema the chapter follows (also what the README's journey generate / trace commands use).
const std::filesystem::path kSchemaFile = JOURNEY_SOURCE_DIR "/chapters/ch15_structured_output/person.json";

// A piece as a reader sees it: its text in quotes, newlines and tabs escaped.
std::string shown(const std::string& bytes) {
  std::string out = "\"";
  for (char c : bytes) out += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : c == '"' ? std::string("\\\"") : std::string(1, c);
  return out + "\"";
}

void show_mask(GrammarMatcher& m, const TokenTrie& trie, const Tokenizer& tok, const std::string& text_so_far) {
  const TokenMask& mask = m.allowed();
  std::printf("  after %-22s %6lld of %lld ids allowed:", shown(text_so_far).c_str(), (long long)mask.count,
              (long long)trie.mask_size());
  int shown_ids = 0;
  for (int32_t id : mask.ids()) {
    if (shown_ids++ == 6) { std::printf(" ..."); break; }
    const std::string_view b = trie.bytes(id);
    std::printf(" %s", b.empty() ? tok.piece(id).c_str() : shown(std::string(b)).c_str());
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) try {
  const std::filesystem::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const LoadedModel model = load_model(model_path);
  const auto tokenizer = load_tokenizer(model.path);
  auto backend = make_reference_backend(model);
  const std::vector<int32_t> eos = collect_eos_ids(model.generation, model.config, *tokenizer);

  // The prompt: a conversation through the model's template, or plain text for a base model.
  const ModelChatTemplate chat = load_chat_template(model.path);
  const bool is_chat = chat.chat_template->name() != "builtin:plain";
  std::vector<int32_t> prompt;
  if (is_chat) {
    ChatTemplateInputs inputs;
    inputs.messages = {{"system", "You answer in JSON."}, {"user", "Invent a person with a name, an age and pets."}};
    const RenderedPrompt rendered = render_and_encode(chat, *tokenizer, inputs);
    prompt.assign(rendered.ids.begin(), rendered.ids.end());
  } else {
    const std::vector<int> ids = tokenizer->encode("Once upon a time, a girl named", true, false);
    prompt.assign(ids.begin(), ids.end());
  }
  std::cout << "# Chapter 15 on " << model.path.filename().string() << " (" << (is_chat ? "chat template" : "plain prompt")
            << ", " << prompt.size() << " prompt tokens, vocabulary " << model.config.vocab_size << ")\n\n";

  // 1. The schema becomes a grammar.
  const json schema = parse_untrusted_json<json>(read_whole_file(kSchemaFile.string()), kSchemaFile.string());
  const Grammar grammar = Grammar::json_schema(schema, "schema");
  std::cout << "## 1. The schema becomes a grammar\n\nchapters/ch15_structured_output/person.json: " << schema.dump() << "\n\n"
            << grammar.rules().size() << " rules, " << grammar.size() << " elements; from the root:\n";
  std::istringstream rules(grammar.describe(100000));
  std::string line;
  for (int i = 0; i < 9 && std::getline(rules, line); ++i) std::cout << "  " << line.substr(0, 150) << (line.size() > 150 ? " ..." : "") << "\n";

  // 2. The grammar becomes a mask: the trie of the vocabulary walked with the matcher.
  auto trie = std::make_shared<const TokenTrie>(*tokenizer, model.config.vocab_size);
  std::cout << "\n## 2. The grammar becomes a mask\n\n" << trie->token_ids().size() << " ids have bytes, in a trie of "
            << trie->nodes().size() << " nodes; the end ids:";
  for (int32_t id : eos) std::cout << " " << id << " " << tokenizer->piece(id);
  std::cout << "\n";
  {
    GrammarMatcher m(grammar, trie, eos);
    std::string text;
    for (const char* next : {"", "{", "\"name\": \"Li", "ly\", \"age\": 7", ", \"pets\": [\"cat\"]", "}"}) {
      if (!m.accept_bytes(next)) throw Error("the walk-through text does not match the schema");
      text += next;
      show_mask(m, *trie, *tokenizer, text.size() > 20 ? "..." + text.substr(text.size() - 17) : text);
    }
  }

  // 3. The mask changes the distribution: step 0's logits before and after.
  std::cout << "\n## 3. The mask changes the distribution (the first answer token)\n\n";
  {
    ForwardBatch batch;
    std::vector<int32_t> blocks(static_cast<size_t>((prompt.size() + 15) / 16));  // [n_blocks] 0, 1, 2, ...
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);
    backend->allocate_kv_cache(static_cast<int64_t>(blocks.size()), 16);
    batch.sequences.push_back(SequenceInput{0, prompt, 0, blocks});
    const ForwardOutput out = backend->forward(batch);
    const std::span<const float> logits(out.last_row(0), static_cast<size_t>(out.vocab_size));  // [V]
    GrammarMatcher m(grammar, trie, eos);
    const std::vector<float> masked = masked_logits(m, logits, nullptr);  // [V] forbidden ids at -inf
    const std::vector<float> p = softmax(logits), q = softmax(masked);     // [V] each
    std::printf("  %-22s %8s   %-22s %8s\n", "the model wants", "p", "the grammar allows", "p");
    const std::vector<int32_t> top_p = top_n_ids(p, 5), top_q = top_n_ids(q, 5);
    for (size_t i = 0; i < 5; ++i) {
      const int32_t a = top_p[i], b = top_q[i];
      char right[96] = "";
      if (q[size_t(b)] > 0) std::snprintf(right, sizeof right, "%-22s %8.4f", shown(tokenizer->token_bytes(b, 0)).c_str(), q[size_t(b)]);
      std::printf("  %-22s %8.4f   %s\n", (shown(tokenizer->token_bytes(a, 0)) + (m.allowed().allows(a) ? "" : " (x)")).c_str(),
                  p[size_t(a)], right);
    }
    double allowed_mass = 0;
    for (int32_t id : m.allowed().ids()) allowed_mass += p[size_t(id)];
    std::printf("  (x) = forbidden. The %lld allowed ids held %.3g of the model's probability; the mask renormalizes them to 1.\n",
                (long long)m.allowed().count, allowed_mass);
  }

  // 4. The answer, without and with the grammar (greedy, so both are reproducible).
  std::cout << "\n## 4. The answer\n\n";
  GenerationRequest request;
  request.prompt_ids = prompt;
  request.sampling.temperature = 0;
  request.stop.eos_ids = eos;
  request.stop.max_tokens = 40;
  const GenerationResult free_answer = generate(*backend, *tokenizer, request);
  request.grammar = grammar;
  request.stop.max_tokens = 200;
  const GenerationResult json_answer = generate(*backend, *tokenizer, request);
  std::cout << "without a grammar (" << free_answer.generated_tokens << " tokens, " << finish_reason_name(free_answer.finish_reason)
            << "):\n  " << shown(free_answer.text) << "\nwith the schema (" << json_answer.generated_tokens << " tokens, "
            << finish_reason_name(json_answer.finish_reason) << "):\n  " << json_answer.text << "\n";
  const json parsed = json::parse(json_answer.text);  // throws if it were not JSON
  std::cout << "parsed: name " << parsed.at("name") << ", age " << parsed.at("age") << ", pets " << parsed.at("pets").dump() << "\n";
  return json_answer.finish_reason == FinishReason::Stop ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "ch15_structured_output: " << e.what() << "\n";
  return 1;
}
