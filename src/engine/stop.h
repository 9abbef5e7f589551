// When generation ends. Four rules, checked after every sampled token:
//   - an end-of-sequence id was sampled          -> "stop" (the EOS token's text is not emitted)
//   - the text produced a stop string            -> "stop" (the stop string is not emitted)
//   - max_tokens tokens were generated           -> "length"
//   - the context window is full                 -> "length"
// Stop strings are matched on TEXT, not tokens: one may span several tokens, and a token may
// carry text past it. StopStringMatcher therefore holds back the tail of the stream that could
// still turn into a stop string, and releases it once it cannot.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace journey {

class Tokenizer;
class IncrementalDetokenizer;

enum class FinishReason { Stop, Length };

// "stop" / "length", the OpenAI API's finish_reason values.
const char* finish_reason_name(FinishReason reason);

struct StopRules {
  std::vector<int32_t> eos_ids;            // any of these ends the sequence
  std::vector<std::string> stop_strings;   // none may be empty
  int64_t max_tokens = 256;                // generated tokens (the EOS or stop token counts)
};

// The union of the end-of-sequence ids the model's generation_config.json, its config.json and
// its tokenizer declare (each source may be incomplete on its own).
std::vector<int32_t> collect_eos_ids(const GenerationConfig& generation, const ModelConfig& config,
                                     const Tokenizer& tokenizer);

// Throws journey::Error if max_tokens < 1 or a stop string is empty.
void validate(const StopRules& rules);

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Feed newly decoded text; returns the text that is now safe to emit. Once a stop string is
  // found, returns the text before it and ignores everything after (matched() turns true).
  std::string push(std::string_view text);
  // End of stream without a match: the held-back text, which can no longer become a stop string.
  std::string flush();

  bool matched() const { return matched_.has_value(); }
  const std::optional<std::string>& matched_stop() const { return matched_; }
  const std::string& held_back() const { return pending_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;                // text received but not yet released
  std::optional<std::string> matched_;
};

// What the stop rules make of one sampled token.
struct StopVerdict {
  std::string text;                   // text that is now safe to emit (maybe empty)
  std::optional<FinishReason> finish; // set when the sequence ends with this token
};

// The stop rules for one sampled token, in the one order both the generation loop (generate.cpp)
// and the serving engine (llm_engine.cpp) apply them:
//   1. an end id (EOS, or a stop token the request named) ends the sequence; its text is not emitted;
//   2. otherwise the token's text goes through the stop-string matcher; a match ends the sequence
//      and the stop string is not emitted;
//   3. otherwise a grammar that is complete and admits nothing more (structured output, after the
//      closing "}") ends it with "stop", the token's text emitted;
//   4. otherwise reaching the length limit (max_tokens or the context) ends it;
//   5. a sequence that ends without a stop string releases what the detokenizer and the matcher
//      still hold back.
// `detokenizer` may be null (a request served without a tokenizer: ids only); `has_text` is false
// for ids that have no text (the padding rows of an embedding table past the tokenizer's vocabulary).
StopVerdict apply_stop_rules(int32_t id, bool is_end_id, bool has_text, bool at_length_limit,
                             IncrementalDetokenizer* detokenizer, StopStringMatcher& matcher,
                             bool grammar_finished = false);

}  // namespace journey
