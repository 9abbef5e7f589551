#include "text/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "text/utf8.h"

namespace journey {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes are
// moved to U+0100.. so that every byte is a visible character (space 0x20 becomes "Ġ" U+0120).
struct ByteMap {
  std::array<std::string, 256> byte_to_char;     // [256] UTF-8 of the stand-in character
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  ByteMap() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? b : 256 + next++;
      byte_to_char[b] = utf8::encode(cp);
      char_to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// Decode one UTF-8 character (assumed valid) and report its length.
char32_t decode_char(std::string_view s, size_t pos, int* length) {
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos),
                                  static_cast<utf8proc_ssize_t>(s.size() - pos), &cp);
  if (n <= 0) {
    *length = 1;
    return 0xFFFFFFFF;
  }
  *length = static_cast<int>(n);
  return static_cast<char32_t>(cp);
}

// A compiled PCRE2 pattern in UTF + UCP mode (\p{L}, \s and friends follow Unicode, as in the
// Oniguruma/fancy-regex engines Hugging Face uses). Invalid UTF-8 in the input is tolerated.
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const std::string& source) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    if (literal) options = PCRE2_LITERAL | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                          nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      fail(source, ": pre-tokenizer regex does not compile at offset ", offset, ": ",
           reinterpret_cast<const char*>(message), "; pattern: ", pattern);
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // [start, end) of every non-empty match, left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> matches;
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t pos = 0;
    while (pos <= text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, 0, data, nullptr);
      if (rc < 0) break;  // PCRE2_ERROR_NOMATCH (or an error: treat the rest as unmatched)
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
      const size_t start = ovector[0], end = ovector[1];
      if (end > start) {
        matches.emplace_back(start, end);
        pos = end;
      } else {
        pos = start + 1;  // empty match: step over one byte (then to a character boundary)
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
    pcre2_match_data_free(data);
    return matches;
  }

 private:
  pcre2_code* code_ = nullptr;
};

// A piece of text moving through the pre-tokenizers; at_start marks the piece that begins the
// whole input (Metaspace's "first" prepend scheme needs it).
struct Piece {
  std::string text;
  bool at_start;
};

void split_by(const Regex& regex, PreTokenizerStep::Behavior behavior, bool invert, const Piece& piece,
              std::vector<Piece>& out) {
  using B = PreTokenizerStep::Behavior;
  // Cut the piece into alternating stretches, each flagged as "matched" or not.
  std::vector<std::pair<std::string_view, bool>> parts;
  const std::string_view text = piece.text;
  size_t last = 0;
  for (const auto& [start, end] : regex.find_all(text)) {
    if (start > last) parts.emplace_back(text.substr(last, start - last), invert);
    parts.emplace_back(text.substr(start, end - start), !invert);
    last = end;
  }
  if (last < text.size()) parts.emplace_back(text.substr(last), invert);

  std::vector<std::string> pieces;
  bool previous_matched = false;
  bool carry_to_next = false;
  for (const auto& [part, matched] : parts) {
    switch (behavior) {
      case B::Isolated:
        pieces.emplace_back(part);
        break;
      case B::Removed:
        if (!matched) pieces.emplace_back(part);
        break;
      case B::MergedWithPrevious:
        if (matched && !pieces.empty()) pieces.back() += part;
        else pieces.emplace_back(part);
        break;
      case B::MergedWithNext:
        if (carry_to_next) pieces.back() += part;
        else pieces.emplace_back(part);
        carry_to_next = matched;
        break;
      case B::Contiguous:
        if (matched && previous_matched) pieces.back() += part;
        else pieces.emplace_back(part);
        break;
    }
    previous_matched = matched;
  }
  for (size_t i = 0; i < pieces.size(); ++i) out.push_back({std::move(pieces[i]), piece.at_start && i == 0});
}

std::string normalize_unicode(std::string_view text, NormalizerStep::Kind kind) {
  int options = UTF8PROC_STABLE;
  switch (kind) {
    case NormalizerStep::Kind::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalizerStep::Kind::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalizerStep::Kind::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalizerStep::Kind::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    case NormalizerStep::Kind::Lowercase: options |= UTF8PROC_CASEFOLD; break;
    default: return std::string(text);
  }
  utf8proc_uint8_t* result = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &result,
                              static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(text);  // not valid UTF-8: leave it to byte-level handling
  std::string out(reinterpret_cast<char*>(result), static_cast<size_t>(n));
  std::free(result);
  return out;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(text.substr(pos));
  return out;
}

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec) : s_(std::move(spec)) {
    const size_t n = s_.pieces.size();
    if (s_.special.size() != n) fail(s_.source, ": ", n, " pieces but ", s_.special.size(), " token types");
    for (size_t id = 0; id < n; ++id) {
      if (!s_.pieces[id].empty()) model_ids_.emplace(s_.pieces[id], static_cast<int>(id));
    }
    for (const AddedToken& token : s_.added) added_by_id_[token.id] = &token;
    for (size_t rank = 0; rank < s_.merges.size(); ++rank) {
      const auto& [left, right] = s_.merges[rank];
      auto a = model_ids_.find(left), b = model_ids_.find(right), ab = model_ids_.find(left + right);
      if (a == model_ids_.end() || b == model_ids_.end() || ab == model_ids_.end())
        fail(s_.source, ": merge ", rank, " (\"", left, "\" \"", right, "\") names a piece that is not in the vocabulary");
      merges_.emplace(pair_key(a->second, b->second), Merge{static_cast<int>(rank), ab->second});
    }
    byte_ids_.fill(-1);
    if (s_.byte_fallback) {
      static const char* hex = "0123456789ABCDEF";
      for (int b = 0; b < 256; ++b) {
        const std::string piece = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
        if (auto it = model_ids_.find(piece); it != model_ids_.end()) {
          byte_ids_[b] = it->second;
          byte_of_id_[it->second] = static_cast<uint8_t>(b);
        }
      }
    }
    for (const PreTokenizerStep& step : s_.pre_tokenizers) {
      if (step.kind == PreTokenizerStep::Kind::Split)
        regexes_.push_back(std::make_unique<Regex>(step.pattern, step.literal, s_.source));
      else if (step.kind == PreTokenizerStep::Kind::ByteLevel && step.use_regex)
        regexes_.push_back(std::make_unique<Regex>(kGpt2Pattern, false, s_.source));
      else
        regexes_.push_back(nullptr);
    }
  }

  std::vector<int> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int> out;
    if (add_special && s_.add_bos && s_.bos) out.push_back(*s_.bos);
    for (const TextSegment& segment : split_on_added_tokens(text, s_.added, parse_special)) {
      if (segment.token_id >= 0) {
        out.push_back(segment.token_id);
        continue;
      }
      const bool at_start = segment.text.data() == text.data();
      for (const Piece& word : pre_tokenize(normalize(segment.text), at_start)) encode_word(word.text, out);
    }
    if (add_special && s_.add_eos && !s_.eos.empty()) out.push_back(s_.eos.front());
    return out;
  }

  std::string token_bytes(int id, int previous_id, bool skip_special) const override {
    check_id(id);
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      return skip_special && it->second->special ? std::string() : it->second->content;
    }
    if (s_.special[id]) return skip_special ? std::string() : s_.pieces[id];
    const std::string& piece = s_.pieces[id];
    if (s_.byte_level) {
      std::string bytes;
      for (size_t pos = 0; pos < piece.size();) {
        int n = 0;
        const char32_t cp = decode_char(piece, pos, &n);
        auto it = byte_map().char_to_byte.find(cp);
        if (it == byte_map().char_to_byte.end()) return piece;  // not a byte-level piece: its text as is
        bytes += static_cast<char>(it->second);
        pos += n;
      }
      return bytes;
    }
    if (auto it = byte_of_id_.find(id); it != byte_of_id_.end()) return std::string(1, static_cast<char>(it->second));
    std::string text = s_.decode_metaspace ? replace_all(piece, "\xE2\x96\x81", " ") : piece;
    const bool at_start = previous_id < 0 || (s_.bos && previous_id == *s_.bos);
    if (s_.decode_strip_first_space && at_start && !text.empty() && text[0] == ' ') text.erase(0, 1);
    return text;
  }

  std::string piece(int id) const override {
    check_id(id);
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return it->second->content;
    return s_.pieces[id];
  }
  int vocab_size() const override { return static_cast<int>(s_.pieces.size()); }
  std::optional<int> bos_id() const override { return s_.bos; }
  std::vector<int> eos_ids() const override { return s_.eos; }
  bool is_special(int id) const override {
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return it->second->special;
    return id >= 0 && id < vocab_size() && s_.special[id];
  }
  std::optional<int> token_id(std::string_view piece) const override {
    for (const AddedToken& token : s_.added) {
      if (token.content == piece) return token.id;
    }
    if (auto it = model_ids_.find(std::string(piece)); it != model_ids_.end()) return it->second;
    return std::nullopt;
  }
  std::string kind() const override { return s_.kind; }

 private:
  struct Merge {
    int rank;
    int result;  // id of the merged piece
  };
  static uint64_t pair_key(int a, int b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

  void check_id(int id) const {
    if (id < 0 || id >= vocab_size())
      fail(s_.source, ": token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
  }

  std::string normalize(std::string_view text) const {
    std::string out(text);
    for (const NormalizerStep& step : s_.normalizers) {
      switch (step.kind) {
        case NormalizerStep::Kind::Prepend: out = step.content + out; break;
        case NormalizerStep::Kind::Replace: out = replace_all(out, step.pattern, step.content); break;
        default: out = normalize_unicode(out, step.kind); break;
      }
    }
    return out;
  }

  std::vector<Piece> pre_tokenize(std::string text, bool at_start) const {
    std::vector<Piece> pieces{{std::move(text), at_start}};
    for (size_t i = 0; i < s_.pre_tokenizers.size(); ++i) {
      const PreTokenizerStep& step = s_.pre_tokenizers[i];
      std::vector<Piece> next;
      for (Piece& piece : pieces) {
        switch (step.kind) {
          case PreTokenizerStep::Kind::Split:
            split_by(*regexes_[i], step.behavior, step.invert, piece, next);
            break;
          case PreTokenizerStep::Kind::ByteLevel:
            if (step.add_prefix_space && (piece.text.empty() || piece.text[0] != ' ')) piece.text.insert(piece.text.begin(), ' ');
            if (regexes_[i]) split_by(*regexes_[i], PreTokenizerStep::Behavior::Isolated, false, piece, next);
            else next.push_back(std::move(piece));
            break;
          case PreTokenizerStep::Kind::Metaspace: {
            std::string replaced = replace_all(piece.text, " ", step.replacement);
            const bool prepend = step.prepend_scheme == "always" || (step.prepend_scheme == "first" && piece.at_start);
            if (prepend && replaced.compare(0, step.replacement.size(), step.replacement) != 0)
              replaced.insert(0, step.replacement);
            if (!step.split) {
              next.push_back({std::move(replaced), piece.at_start});
              break;
            }
            // Cut before every replacement character (HF: MergedWithNext on the replacement).
            size_t begin = 0;
            bool first = true;
            for (size_t hit = replaced.find(step.replacement, 1); hit != std::string::npos;
                 hit = replaced.find(step.replacement, hit + step.replacement.size())) {
              next.push_back({replaced.substr(begin, hit - begin), piece.at_start && first});
              first = false;
              begin = hit;
            }
            next.push_back({replaced.substr(begin), piece.at_start && first});
            break;
          }
        }
      }
      pieces = std::move(next);
    }
    return pieces;
  }

  // BPE on one word: its symbols start as single characters and merge by rank.
  void encode_word(const std::string& raw_word, std::vector<int>& out) const {
    if (raw_word.empty()) return;
    std::string word;
    if (s_.byte_level) {
      for (unsigned char b : raw_word) word += byte_map().byte_to_char[b];
    } else {
      word = raw_word;
    }
    if (s_.ignore_merges) {
      if (auto it = model_ids_.find(word); it != model_ids_.end()) {
        out.push_back(it->second);
        return;
      }
    }

    struct Symbol {
      int id;
      int prev;
      int next;
      bool can_merge;  // byte-fallback and unknown symbols never merge
    };
    std::vector<Symbol> symbols;  // [symbols in the word]
    auto add_symbol = [&](int id, bool can_merge) {
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({id, index - 1, index + 1, can_merge});
    };
    for (size_t pos = 0; pos < word.size();) {
      int n = 0;
      decode_char(word, pos, &n);
      const std::string character = word.substr(pos, n);
      pos += n;
      if (auto it = model_ids_.find(character); it != model_ids_.end()) {
        add_symbol(it->second, true);
        continue;
      }
      bool all_bytes = s_.byte_fallback;
      for (unsigned char b : character) all_bytes = all_bytes && byte_ids_[b] >= 0;
      if (all_bytes) {
        for (unsigned char b : character) add_symbol(byte_ids_[b], false);
      } else if (s_.unk) {
        add_symbol(*s_.unk, false);
      }
      // else: no unknown token to stand for it; Hugging Face drops the character too.
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    struct Candidate {
      int rank;
      int left;
      int left_id;
      int right_id;
    };
    auto later = [](const Candidate& a, const Candidate& b) {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
    auto consider = [&](int left) {
      if (left < 0) return;
      const int right = symbols[left].next;
      if (right < 0 || !symbols[left].can_merge || !symbols[right].can_merge) return;
      auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
      if (it != merges_.end()) queue.push({it->second.rank, left, symbols[left].id, symbols[right].id});
    };
    for (int i = 0; i < static_cast<int>(symbols.size()); ++i) consider(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& left = symbols[c.left];
      if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;  // stale
      Symbol& right = symbols[left.next];
      left.id = merges_.at(pair_key(c.left_id, c.right_id)).result;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = c.left;
      right.id = -1;
      consider(left.prev);
      consider(c.left);
    }
    for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
  }

  BpeSpec s_;
  std::unordered_map<std::string, int> model_ids_;
  std::unordered_map<int, const AddedToken*> added_by_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and result
  std::array<int, 256> byte_ids_;               // [256] byte -> id of "<0xHH>", -1 if none
  std::unordered_map<int, uint8_t> byte_of_id_;  // the same, id -> byte
  std::vector<std::unique_ptr<Regex>> regexes_; // [pre-tokenizer steps] compiled patterns
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeSpec spec) {
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace journey
