// The token mask against a brute force: at several states of a grammar, every id of a real
// vocabulary is tried on its own (a fresh matcher fed the same text, then the id's bytes) and the
// mask must allow exactly the ids that brute force accepts. Run on stories260K's SentencePiece
// vocabulary (▁ as space, <0xNN> byte tokens) and Qwen2.5's byte-level BPE (151,643 pieces, many
// of them half a UTF-8 character), with a padded model vocabulary past the tokenizer's.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "grammar/token_mask.h"
#include "text/tokenizer.h"
#include "text/vectors.h"

namespace journey {
namespace {

using json = nlohmann::ordered_json;

const Tokenizer& stories() {
  static const auto t = load_tokenizer(test::source_data("stories260K/tok512.model"));
  return *t;
}
const Tokenizer& qwen() {
  static const auto t = load_tokenizer(test::build_data("hf/qwen2.5-instruct"));
  return *t;
}

// Checks the mask after `prefix` against trying every id by hand; returns the allowed count.
int64_t check_against_brute_force(const Grammar& g, const std::shared_ptr<const TokenTrie>& trie, const std::string& prefix,
                                  const std::vector<int32_t>& end_ids) {
  GrammarMatcher m(g, trie, end_ids);
  REQUIRE(m.accept_bytes(prefix));
  const TokenMask& mask = m.allowed();
  int64_t expected_count = 0;
  int mismatches = 0;
  for (int32_t id = 0; id < trie->mask_size(); ++id) {
    bool ok;
    if (std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end()) {
      ok = m.complete();
    } else {
      const std::string_view b = trie->bytes(id);
      GrammarMatcher fresh(g, nullptr, end_ids);
      ok = !b.empty() && fresh.accept_bytes(prefix) && fresh.accept_bytes(b);
    }
    expected_count += ok;
    if (ok != mask.allows(id) && ++mismatches <= 5)
      FAIL_CHECK("after ", json(prefix).dump(), ": id ", id, " bytes ", json(std::string(trie->bytes(id))).dump(-1, ' ', true,
                 json::error_handler_t::replace), " brute force ", ok, " mask ", mask.allows(id));
  }
  CHECK(mask.count == expected_count);
  CHECK(mask.ids().size() == size_t(mask.count));
  return mask.count;
}

TEST_CASE("token mask = brute force, stories260K (SentencePiece, byte fallback)") {
  auto trie = std::make_shared<const TokenTrie>(stories(), 512);
  Grammar g = Grammar::json_schema(json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
      "n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["name","n","ok"]})"), "schema");
  const std::vector<int32_t> eos = {2};
  int64_t at_start = check_against_brute_force(g, trie, "", eos);
  CHECK(at_start >= 1);
  CHECK(check_against_brute_force(g, trie, "{", eos) > at_start);  // whitespace or the key's quote
  check_against_brute_force(g, trie, "{\"name\":\"Tim", eos);
  check_against_brute_force(g, trie, "{\"name\":\"abcdefgh", eos);  // at maxLength: only the quote
  check_against_brute_force(g, trie, "{\"name\":\"a\",\"n\":12", eos);
  CHECK(check_against_brute_force(g, trie, "{\"name\":\"a\",\"n\":1,\"ok\":true}", eos) == 1);  // EOS only
  // An end id that has text of its own (a random model's config may name any id) is never text.
  int32_t quote_id = -1;
  for (int32_t id = 0; id < 512 && quote_id < 0; ++id)
    if (trie->bytes(id) == "\"") quote_id = id;
  REQUIRE(quote_id >= 0);
  GrammarMatcher m(g, trie, {quote_id});
  REQUIRE(m.accept_bytes("{\"name\":\"Tim"));
  CHECK_FALSE(m.allowed().allows(quote_id));
}

TEST_CASE("token mask = brute force, Qwen2.5 (byte-level BPE, padded vocabulary)") {
  const int64_t padded = 151936;  // Qwen2.5-0.5B's embedding rows; the tokenizer has 151,665 ids
  auto trie = std::make_shared<const TokenTrie>(qwen(), padded);
  CHECK(trie->bytes(151935).empty());
  const std::vector<int32_t> eos = {151645, 151643};
  Grammar obj = Grammar::json_object();
  check_against_brute_force(obj, trie, "", eos);
  const int64_t in_string = check_against_brute_force(obj, trie, "{\"text\": \"北", eos);
  CHECK(in_string > 100000);  // almost every piece can continue a string
  check_against_brute_force(obj, trie, "{\"text\": \"\xE5\x8C", eos);  // inside a UTF-8 character
  check_against_brute_force(obj, trie, "{\"a\": [1, {}", eos);
}

TEST_CASE("the matcher drives a generation: EOS only when complete, finished after the last byte") {
  auto trie = std::make_shared<const TokenTrie>(stories(), 512);
  GrammarMatcher m(Grammar::json_schema(json::parse(R"({"enum":["yes","no"]})"), "s"), trie, {2});
  CHECK_FALSE(m.allowed().allows(2));
  std::vector<float> logits(512, 0.0f);
  m.apply(logits);
  int64_t finite = 0;
  for (float x : logits) finite += std::isfinite(x);
  CHECK(finite == m.allowed().count);
  // feed "\"no\"" token by token with the first allowed id that keeps to it
  const std::string target = "\"no\"";
  std::string produced;
  while (!m.finished()) {
    int32_t pick = -1;
    for (int32_t id : m.allowed().ids()) {
      const std::string_view b = trie->bytes(id);
      if (!b.empty() && target.compare(produced.size(), b.size(), b) == 0) { pick = id; break; }
    }
    REQUIRE(pick >= 0);
    m.accept(pick);
    produced += trie->bytes(pick);
  }
  CHECK(produced == target);
  CHECK(m.allowed().count == 1);
  CHECK(m.allowed().allows(2));
  CHECK_THROWS_AS(m.accept(5), Error);
  m.accept(2);
  CHECK_THROWS_AS(m.accept(2), Error);
}

TEST_CASE("a token the mask forbids is refused") {
  auto trie = std::make_shared<const TokenTrie>(stories(), 512);
  GrammarMatcher m(Grammar::json_object(), trie, {2});
  const std::vector<int32_t> allowed = m.allowed().ids();
  int32_t forbidden = 0;
  while (m.allowed().allows(forbidden)) ++forbidden;
  CHECK_THROWS_WITH_AS(m.accept(forbidden), doctest::Contains("not allowed"), Error);
  CHECK_THROWS_AS(m.accept(2), Error);  // EOS before the object is complete
}

TEST_CASE("memo tables past their bound are rebuilt from the current state, which behaves the same") {
  // five strings of up to 4096 characters: every character position is a state of its own, so
  // feeding them interns more states than the matcher keeps (2^14) and forces rebuilds.
  json schema = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    schema["properties"][name] = {{"type", "string"}, {"maxLength", 4096}};
    schema["required"].push_back(name);
  }
  const Grammar g = Grammar::json_schema(schema, "schema");
  auto trie = std::make_shared<const TokenTrie>(stories(), 512);
  GrammarMatcher m(g, trie, {2});
  std::string text = "{";
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    if (text.size() > 1) text += ",";
    text += std::string("\"") + name + "\":\"";
    for (int i = 0; i < 4096; ++i) text += char('a' + i % 26);
    text += "\"";
  }
  int64_t masks = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    REQUIRE_MESSAGE(m.accept_bytes(text.substr(i, 1)), "refused byte ", i);
    if (i % 997 == 0) {
      masks += m.allowed().count > 0;
      CHECK(m.stats().states <= (int64_t{1} << 14) + 64);  // a walk adds a few states past the bound at most
    }
  }
  CHECK(masks > 0);
  CHECK(m.stats().table_resets >= 1);
  // at maxLength the string must close: one more character is refused, the quote closes it
  GrammarMatcher fresh(g, trie, {2});
  REQUIRE(fresh.accept_bytes(text.substr(0, text.size() - 1)));
  CHECK_FALSE(fresh.accept_bytes("x"));
  CHECK(m.accept_bytes("}"));
  CHECK(m.finished());
  CHECK(m.allowed().count == 1);
}

}  // namespace
}  // namespace journey
