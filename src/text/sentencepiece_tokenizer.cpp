// SentencePiece models (tokenizer.model) run by libsentencepiece itself, so encoding is exactly
// SentencePiece's. What the library does not do is added/special tokens in the text and the
// per-token decode with the leading-space rule; those are done here.
#include <sentencepiece_processor.h>

#include <map>

#include "core/error.h"
#include "core/untrusted.h"
#include "text/loaders.h"

namespace journey {

namespace {

const std::string kSpaceSymbol = "\xE2\x96\x81";  // "▁"

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::filesystem::path& path, const TokenizerConfig& config) : source_(path.string()) {
    // libsentencepiece reports most bad files through its status, but its trie builder (Darts)
    // throws on some (a zero-length piece: fuzz/crashes/sentencepiece): both become our error
    sentencepiece::util::Status status;
    try {
      status = sp_.Load(path.string());
    } catch (const std::exception& e) {
      fail(source_, ": cannot load as a SentencePiece model: ", excerpt(e.what()));
    }
    if (!status.ok()) fail(source_, ": cannot load as a SentencePiece model: ", status.ToString());
    piece_count_ = sp_.GetPieceSize();

    for (const AddedToken& token : config.added_tokens) added_by_id_[token.id] = token;
    if (config.present && !config.added_tokens.empty()) {
      added_ = config.added_tokens;
    } else {
      // No config: the model's own control pieces (<s>, </s>) are the special tokens.
      for (int id = 0; id < piece_count_; ++id) {
        if (sp_.IsControl(id)) added_.push_back({sp_.IdToPiece(id), id, true});
      }
    }

    bos_ = config.bos_token ? find_token(*config.bos_token, "bos_token") : optional_id(sp_.bos_id());
    if (config.eos_token) eos_.push_back(find_token(*config.eos_token, "eos_token"));
    else if (sp_.eos_id() >= 0) eos_.push_back(sp_.eos_id());
    add_bos_ = config.add_bos_token.value_or(true) && bos_.has_value();
    add_eos_ = config.add_eos_token.value_or(false) && !eos_.empty();

    // Whether the model prepends "▁" (add_dummy_prefix): then the first piece's space is not text.
    std::vector<std::string> probe;
    if (sp_.Encode("a", &probe).ok() && !probe.empty()) dummy_prefix_ = probe[0].rfind(kSpaceSymbol, 0) == 0;
  }

  std::vector<int> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int> out;
    if (add_special && add_bos_) out.push_back(*bos_);
    for (const TextSegment& segment : split_on_added_tokens(text, added_, parse_special)) {
      if (segment.token_id >= 0) {
        out.push_back(segment.token_id);
        continue;
      }
      std::vector<int> ids;
      const auto status = sp_.Encode(segment.text, &ids);
      if (!status.ok()) fail(source_, ": SentencePiece encode failed: ", status.ToString());
      out.insert(out.end(), ids.begin(), ids.end());
    }
    if (add_special && add_eos_) out.push_back(eos_.front());
    return out;
  }

  std::string token_bytes(int id, int previous_id, bool skip_special) const override {
    check_id(id);
    if (auto it = added_by_id_.find(id); it != added_by_id_.end() && (id >= piece_count_ || it->second.special)) {
      return skip_special && it->second.special ? std::string() : it->second.content;
    }
    if (sp_.IsControl(id)) return skip_special ? std::string() : sp_.IdToPiece(id);
    if (sp_.IsUnknown(id)) return " \xE2\x81\x87 ";  // SentencePiece's surface for <unk>: " ⁇ "
    const std::string& piece = sp_.IdToPiece(id);
    if (sp_.IsByte(id)) return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    std::string text;
    for (size_t pos = 0; pos < piece.size();) {
      if (piece.compare(pos, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
        text += ' ';
        pos += kSpaceSymbol.size();
      } else {
        text += piece[pos++];
      }
    }
    const bool at_start = previous_id < 0 || (bos_ && previous_id == *bos_);
    if (dummy_prefix_ && at_start && !text.empty() && text[0] == ' ') text.erase(0, 1);
    return text;
  }

  std::string piece(int id) const override {
    check_id(id);
    if (id >= piece_count_) return added_by_id_.at(id).content;
    return sp_.IdToPiece(id);
  }
  int vocab_size() const override {
    return added_by_id_.empty() ? piece_count_ : std::max(piece_count_, added_by_id_.rbegin()->first + 1);
  }
  std::optional<int> bos_id() const override { return bos_; }
  std::vector<int> eos_ids() const override { return eos_; }
  bool is_special(int id) const override {
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return it->second.special;
    return id >= 0 && id < piece_count_ && sp_.IsControl(id);
  }
  std::optional<int> token_id(std::string_view piece) const override {
    for (const auto& [id, token] : added_by_id_) {
      if (token.content == piece) return id;
    }
    const int id = sp_.PieceToId(piece);
    if (id == sp_.unk_id() && piece != sp_.IdToPiece(id)) return std::nullopt;
    return id;
  }
  std::string kind() const override { return "sentencepiece"; }

 private:
  void check_id(int id) const {
    if (id < 0 || id >= vocab_size() || (id >= piece_count_ && !added_by_id_.count(id)))
      fail(source_, ": token id ", id, " is not in the vocabulary (", vocab_size(), " tokens)");
  }
  static std::optional<int> optional_id(int id) { return id >= 0 ? std::optional<int>(id) : std::nullopt; }
  int find_token(const std::string& text, const char* field) const {
    if (auto id = token_id(text)) return *id;
    fail(source_, ": tokenizer_config.json names ", field, " \"", text, "\", which is not a piece of the model");
  }

  std::string source_;
  sentencepiece::SentencePieceProcessor sp_;
  int piece_count_ = 0;
  std::map<int, AddedToken> added_by_id_;  // tokenizer_config.json's added_tokens_decoder
  std::vector<AddedToken> added_;          // what is matched in the text
  std::optional<int> bos_;
  std::vector<int> eos_;
  bool add_bos_ = true;
  bool add_eos_ = false;
  bool dummy_prefix_ = true;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& model_path,
                                                        const TokenizerConfig& config) {
  return std::make_unique<SentencePieceTokenizer>(model_path, config);
}

}  // namespace journey
