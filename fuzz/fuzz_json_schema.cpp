// The JSON-schema compiler and the grammar matcher (structured output, grammar/): the input is a
// schema; once it compiles, the matcher is fed the input's own bytes and asked for the token mask
// over stories260K's vocabulary (the trie walk), so compiler, automaton and walk all meet hostile
// input. Refusals are journey::Error (SchemaError is one).
#include <cstdint>

#include "core/untrusted.h"
#include "fuzz/fuzz_input.h"
#include "grammar/token_mask.h"
#include "text/tokenizer.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(JOURNEY_SOURCE_DIR "/data/stories260K");
  static const auto trie = std::make_shared<const TokenTrie>(*tokenizer, tokenizer->vocab_size());
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_journey_errors("json schema", [&] {
    const auto schema = parse_untrusted_json<nlohmann::ordered_json>(text, "schema");
    const Grammar grammar = Grammar::json_schema(schema, "schema");
    GrammarMatcher matcher(grammar, trie, {2});
    (void)matcher.allowed();
    for (size_t i = 0; i < text.size() && matcher.accept_bytes(text.substr(i, 1)); ++i) {
    }
    (void)matcher.complete();
  });
  return 0;
}
