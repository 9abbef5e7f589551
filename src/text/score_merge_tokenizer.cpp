#include "text/score_merge_tokenizer.h"

#include <array>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "text/utf8.h"

namespace journey {

namespace {

class ScoreMergeTokenizer final : public Tokenizer {
 public:
  explicit ScoreMergeTokenizer(ScoreMergeVocab vocab) : v_(std::move(vocab)) {
    const size_t n = v_.pieces.size();
    if (v_.scores.size() != n || v_.special.size() != n || v_.byte_value.size() != n)
      fail(v_.source, ": vocabulary arrays disagree in length (pieces ", n, ", scores ", v_.scores.size(),
           ", types ", v_.special.size(), ")");
    byte_ids_.fill(-1);
    for (size_t id = 0; id < n; ++id) {
      ids_[v_.pieces[id]] = static_cast<int>(id);  // a later duplicate wins, as in llama.cpp
      if (v_.byte_value[id] >= 0 && byte_ids_[v_.byte_value[id]] < 0) byte_ids_[v_.byte_value[id]] = static_cast<int>(id);
    }
  }

  std::vector<int> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int> out;
    if (add_special && v_.add_bos && v_.bos) out.push_back(*v_.bos);
    bool previous_was_token = true;  // the dummy prefix goes at the start and after each added token
    for (const TextSegment& segment : split_on_added_tokens(text, v_.added, parse_special)) {
      if (segment.token_id >= 0) {
        out.push_back(segment.token_id);
        previous_was_token = true;
        continue;
      }
      std::string escaped;
      if (v_.add_space_prefix && previous_was_token) escaped = v_.space_symbol;
      for (char c : segment.text) {
        if (c == ' ') escaped += v_.space_symbol;
        else escaped += c;
      }
      merge(escaped, out);
      previous_was_token = false;
    }
    if (add_special && v_.add_eos && !v_.eos.empty()) out.push_back(v_.eos.front());
    return out;
  }

  std::string token_bytes(int id, int previous_id, bool skip_special) const override {
    check_id(id);
    if (v_.special[id]) return skip_special ? std::string() : v_.pieces[id];
    if (v_.byte_value[id] >= 0) return std::string(1, static_cast<char>(v_.byte_value[id]));
    std::string text;
    const std::string& piece = v_.pieces[id];
    for (size_t pos = 0; pos < piece.size();) {
      if (piece.compare(pos, v_.space_symbol.size(), v_.space_symbol) == 0) {
        text += ' ';
        pos += v_.space_symbol.size();
      } else {
        text += piece[pos++];
      }
    }
    // SentencePiece's dummy prefix: the first piece of the text drops its leading space.
    const bool at_start = previous_id < 0 || (v_.bos && previous_id == *v_.bos);
    if (v_.add_space_prefix && at_start && !text.empty() && text[0] == ' ') text.erase(0, 1);
    return text;
  }

  std::string piece(int id) const override {
    check_id(id);
    return v_.pieces[id];
  }
  int vocab_size() const override { return static_cast<int>(v_.pieces.size()); }
  std::optional<int> bos_id() const override { return v_.bos; }
  std::vector<int> eos_ids() const override { return v_.eos; }
  bool is_special(int id) const override { return id >= 0 && id < vocab_size() && v_.special[id]; }
  std::optional<int> token_id(std::string_view piece) const override {
    auto it = ids_.find(std::string(piece));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::string kind() const override { return v_.kind; }

 private:
  void check_id(int id) const {
    if (id < 0 || id >= vocab_size())
      fail(v_.source, ": token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
  }

  // One symbol of the text being merged: a byte range plus links to its live neighbours.
  struct Symbol {
    int prev;
    int next;
    size_t start;
    size_t length;  // 0 once merged into its left neighbour
  };
  struct Bigram {
    int left;
    int right;
    float score;
    size_t length;  // combined length when queued; a mismatch later means the entry is stale
  };
  struct LowerPriority {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  void merge(const std::string& text, std::vector<int>& out) const {
    std::vector<Symbol> symbols;  // [number of characters]
    for (size_t pos = 0; pos < text.size();) {
      size_t n = std::max(1, utf8::sequence_length(static_cast<unsigned char>(text[pos])));
      n = std::min(n, text.size() - pos);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({index - 1, index + 1, pos, n});
      pos += n;
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    std::priority_queue<Bigram, std::vector<Bigram>, LowerPriority> queue;
    auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const size_t length = symbols[left].length + symbols[right].length;
      auto it = ids_.find(text.substr(symbols[left].start, length));
      if (it == ids_.end()) return;
      queue.push({left, right, v_.scores[it->second], length});
    };
    for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

    while (!queue.empty()) {
      const Bigram bigram = queue.top();
      queue.pop();
      Symbol& left = symbols[bigram.left];
      Symbol& right = symbols[bigram.right];
      if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.length) continue;
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = bigram.left;
      try_add(left.prev, bigram.left);
      try_add(bigram.left, left.next);
    }

    for (int i = 0; i >= 0; i = symbols[i].next) {
      const std::string piece = text.substr(symbols[i].start, symbols[i].length);
      if (auto it = ids_.find(piece); it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (unsigned char byte : piece) {  // byte fallback
        if (byte_ids_[byte] >= 0) out.push_back(byte_ids_[byte]);
        else if (v_.unk) out.push_back(*v_.unk);
        else fail(v_.source, ": cannot encode byte 0x", std::hex, int(byte), ": no byte piece and no unknown token");
      }
    }
  }

  ScoreMergeVocab v_;
  std::unordered_map<std::string, int> ids_;
  std::array<int, 256> byte_ids_;  // [256] byte value -> id of its <0xHH> piece, -1 if none
};

}  // namespace

std::unique_ptr<Tokenizer> make_score_merge_tokenizer(ScoreMergeVocab vocab) {
  return std::make_unique<ScoreMergeTokenizer>(std::move(vocab));
}

}  // namespace journey
