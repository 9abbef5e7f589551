// The UTF-8 helpers and the streaming detokenizer on hand-made byte sequences.
#include <doctest/doctest.h>

#include "text/special_tokens.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text/vectors.h"

using namespace journey;

namespace {

// A tokenizer whose token i is the single byte i: lets a test feed any byte sequence.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int> encode(std::string_view text, bool, bool) const override {
    std::vector<int> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string token_bytes(int id, int, bool) const override { return std::string(1, static_cast<char>(id)); }
  std::string piece(int id) const override { return token_bytes(id, -1, true); }
  int vocab_size() const override { return 256; }
  std::optional<int> bos_id() const override { return std::nullopt; }
  std::vector<int> eos_ids() const override { return {}; }
  bool is_special(int) const override { return false; }
  std::optional<int> token_id(std::string_view) const override { return std::nullopt; }
  std::string kind() const override { return "bytes"; }
};

std::vector<std::string> stream(const std::string& bytes) {
  ByteTokenizer t;
  IncrementalDetokenizer detok(t);
  std::vector<std::string> chunks;
  for (int id : t.encode(bytes, false, false)) chunks.push_back(detok.push(id));
  chunks.push_back(detok.flush());
  return chunks;
}

}  // namespace

TEST_CASE("utf8 validity rules") {
  CHECK(utf8::valid_char_length("a", 0) == 1);
  CHECK(utf8::valid_char_length("\xC3\xA9", 0) == 2);
  CHECK(utf8::valid_char_length("\xE4\xBD\xA0", 0) == 3);
  CHECK(utf8::valid_char_length("\xF0\x9F\x98\x80", 0) == 4);
  CHECK(utf8::valid_char_length("\xC0\xAF", 0) == 0);      // overlong
  CHECK(utf8::valid_char_length("\xED\xA0\x80", 0) == 0);  // surrogate
  CHECK(utf8::valid_char_length("\xF4\x90\x80\x80", 0) == 0);  // above U+10FFFF
  CHECK(utf8::is_truncated_prefix("\xE4\xBD", 0));
  CHECK_FALSE(utf8::is_truncated_prefix("\xE4\x41", 0));
  CHECK(utf8::sanitize("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
}

TEST_CASE("the detokenizer holds back a split character and releases it whole") {
  const auto chunks = stream("\xE4\xBD\xA0\xE5\xA5\xBD");  // 你好 as six byte tokens
  CHECK(chunks == std::vector<std::string>{"", "", "\xE4\xBD\xA0", "", "", "\xE5\xA5\xBD", ""});
}

TEST_CASE("invalid bytes become U+FFFD and never block later text") {
  const auto chunks = stream("a\x80" "b");
  CHECK(chunks == std::vector<std::string>{"a", "\xEF\xBF\xBD", "b", ""});
  // A lead byte followed by something that cannot continue it.
  CHECK(stream("\xE4" "x") == std::vector<std::string>{"", "\xEF\xBF\xBD" "x", ""});
  // A character cut off by the end of the stream is flushed as U+FFFD.
  CHECK(stream("ok\xF0\x9F") == std::vector<std::string>{"o", "k", "", "", "\xEF\xBF\xBD\xEF\xBF\xBD"});
}

TEST_CASE("added tokens are cut out leftmost-longest, with lstrip/rstrip/single_word") {
  const std::vector<AddedToken> tokens = {
      {"<|a|>", 10, true},
      {"<|a|><|a|>", 11, true},                    // longer match wins at the same position
      {"[L]", 12, true, /*lstrip=*/true, false},   // swallows spaces on its left
      {"[R]", 13, true, false, /*rstrip=*/true},   // ... and on its right
      {"cat", 14, false, false, false, /*single_word=*/true},
  };
  auto render = [](const std::vector<TextSegment>& segments) {
    std::string out;
    for (const TextSegment& s : segments) {
      if (s.token_id >= 0) {
        out += '#';
        out += std::to_string(s.token_id);
      } else {
        out += '\'';
        out += s.text;
        out += '\'';
      }
    }
    return out;
  };
  CHECK(render(split_on_added_tokens("x<|a|><|a|>y<|a|>", tokens, true)) == "'x'#11'y'#10");
  CHECK(render(split_on_added_tokens("x<|a|>y", tokens, false)) == "'x<|a|>y'");  // special: only with parse_special
  CHECK(render(split_on_added_tokens("a  [L]b", tokens, true)) == "'a'#12'b'");
  CHECK(render(split_on_added_tokens("a[R]  b", tokens, true)) == "'a'#13'b'");
  CHECK(render(split_on_added_tokens("cat concat cat.", tokens, false)) == "#14' concat '#14'.'");
}
