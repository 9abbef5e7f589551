// Stop strings on a token stream: held-back text, stop strings spanning tokens, the stop string
// itself never emitted.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/stop.h"

using namespace journey;

namespace {
// Feed the chunks one by one; return what was released after each push.
std::vector<std::string> feed(StopStringMatcher& matcher, const std::vector<std::string>& chunks) {
  std::vector<std::string> out;
  for (const std::string& chunk : chunks) out.push_back(matcher.push(chunk));
  return out;
}
}  // namespace

TEST_CASE("text that cannot start a stop string passes straight through") {
  StopStringMatcher matcher({"END"});
  CHECK(feed(matcher, {"Once", " upon", " a time"}) == std::vector<std::string>{"Once", " upon", " a time"});
  CHECK_FALSE(matcher.matched());
  CHECK(matcher.flush().empty());
}

TEST_CASE("a stop string spanning three tokens: its prefix is held back, then dropped") {
  StopStringMatcher matcher({"<|end|>"});
  // "Hi <|" : "<|" could begin "<|end|>" -> only "Hi " goes out.
  CHECK(matcher.push("Hi <|") == "Hi ");
  CHECK(matcher.held_back() == "<|");
  CHECK(matcher.push("end") == "");
  CHECK(matcher.held_back() == "<|end");
  // "|> more": the stop string is complete; nothing of it (or after it) is emitted.
  CHECK(matcher.push("|> more") == "");
  CHECK(matcher.matched());
  CHECK(*matcher.matched_stop() == "<|end|>");
  CHECK(matcher.push("ignored") == "");
  CHECK(matcher.flush().empty());
}

TEST_CASE("a false start is released once it cannot match any more") {
  StopStringMatcher matcher({"the end"});
  CHECK(matcher.push("in the") == "in ");     // "the" could be "the end"
  CHECK(matcher.push(" box") == "the box");   // "the b..." cannot
  CHECK_FALSE(matcher.matched());
}

TEST_CASE("text before the stop string inside the same token is emitted") {
  StopStringMatcher matcher({"\n\n"});
  CHECK(matcher.push("one.\n") == "one.");
  CHECK(matcher.push("\nTwo") == "");
  CHECK(matcher.matched());
}

TEST_CASE("with several stop strings the earliest match wins") {
  StopStringMatcher matcher({"dog", "cat"});
  CHECK(matcher.push("a cat and a dog") == "a ");
  CHECK(*matcher.matched_stop() == "cat");
}

TEST_CASE("held-back text of the longest possible prefix, overlapping stop strings") {
  // "ab" is a prefix of "abc" and "b" of "bd": hold the longer one.
  StopStringMatcher matcher({"abc", "bd"});
  CHECK(matcher.push("xab") == "x");
  CHECK(matcher.held_back() == "ab");
  CHECK(matcher.push("d") == "a");  // "abd": "bd" completes at 1, "a" is released
  CHECK(*matcher.matched_stop() == "bd");
}

TEST_CASE("end of stream releases the held-back text") {
  StopStringMatcher matcher({"STOP"});
  CHECK(matcher.push("go ST") == "go ");
  CHECK(matcher.flush() == "ST");
  CHECK_FALSE(matcher.matched());
}

TEST_CASE("UTF-8 stop strings never split a character") {
  // "é" is 0xC3 0xA9; the stop string "éclair" begins with it.
  StopStringMatcher matcher({"\xC3\xA9" "clair"});
  CHECK(matcher.push("caf\xC3\xA9") == "caf");
  CHECK(matcher.push(" ok") == "\xC3\xA9 ok");
}

TEST_CASE("no stop strings: everything passes") {
  StopStringMatcher matcher({});
  CHECK(matcher.push("abc") == "abc");
  CHECK(matcher.flush().empty());
}

TEST_CASE("invalid stop rules are rejected with a clear message") {
  CHECK_THROWS_WITH_AS(StopStringMatcher({"ok", ""}), doctest::Contains("stop string 1 is empty"), Error);
  StopRules rules;
  rules.max_tokens = 0;
  CHECK_THROWS_WITH_AS(validate(rules), doctest::Contains("max_tokens"), Error);
  rules.max_tokens = 5;
  rules.stop_strings = {""};
  CHECK_THROWS_WITH_AS(validate(rules), doctest::Contains("empty"), Error);
  CHECK(std::string(finish_reason_name(FinishReason::Stop)) == "stop");
  CHECK(std::string(finish_reason_name(FinishReason::Length)) == "length");
}
