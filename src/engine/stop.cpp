#include "engine/stop.h"

#include <algorithm>

#include "core/error.h"
#include "text/tokenizer.h"

namespace journey {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
  }
  return "?";
}

std::vector<int32_t> collect_eos_ids(const GenerationConfig& generation, const ModelConfig& config,
                                     const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  auto add = [&ids](int id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  for (int id : generation.eos_token_ids) add(id);
  for (int id : config.eos_token_ids) add(id);
  for (int id : tokenizer.eos_ids()) add(id);
  return ids;
}

void validate(const StopRules& rules) {
  if (rules.max_tokens < 1) fail("max_tokens must be >= 1, found ", rules.max_tokens);
  for (size_t i = 0; i < rules.stop_strings.size(); ++i)
    if (rules.stop_strings[i].empty()) fail("stop string ", i, " is empty (an empty stop string would match at once)");
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
  for (size_t i = 0; i < stops_.size(); ++i)
    if (stops_[i].empty()) fail("stop string ", i, " is empty (an empty stop string would match at once)");
}

std::string StopStringMatcher::push(std::string_view text) {
  if (matched_) return {};
  pending_ += text;

  // 1. A complete stop string in the pending text: release what precedes the earliest one.
  size_t earliest = std::string::npos;
  for (const std::string& stop : stops_) {
    size_t at = pending_.find(stop);
    if (at < earliest) {
      earliest = at;
      matched_ = stop;
    }
  }
  if (matched_) {
    std::string before = pending_.substr(0, earliest);
    pending_.clear();
    return before;
  }

  // 2. Hold back the longest tail of the pending text that is the beginning of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t n = longest; n > hold; --n) {
      if (pending_.compare(pending_.size() - n, n, stop, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  std::string released = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return released;
}

std::string StopStringMatcher::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

StopVerdict apply_stop_rules(int32_t id, bool is_end_id, bool has_text, bool at_length_limit,
                             IncrementalDetokenizer* detokenizer, StopStringMatcher& matcher,
                             bool grammar_finished) {
  StopVerdict v;
  if (is_end_id) {
    v.finish = FinishReason::Stop;  // 1. the end token itself adds no text
  } else if (detokenizer && has_text) {
    v.text = matcher.push(detokenizer->push(id));  // 2. stop strings are matched on text
    if (matcher.matched()) v.finish = FinishReason::Stop;
  }
  if (!v.finish && grammar_finished) v.finish = FinishReason::Stop;  // 3.
  if (!v.finish && at_length_limit) v.finish = FinishReason::Length;  // 4.
  if (v.finish && detokenizer && !matcher.matched()) {  // 5. release the held-back text
    v.text += matcher.push(detokenizer->flush());
    if (matcher.matched()) v.finish = FinishReason::Stop;  // the flushed bytes completed a stop string
    else v.text += matcher.flush();
  }
  (void)id;
  return v;
}

}  // namespace journey
