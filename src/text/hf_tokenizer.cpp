// Reads a Hugging Face tokenizer.json into a BpeSpec. Only the "BPE" model is supported (that is
// what Llama 3, Qwen2/2.5/3, GPT-2, Mistral and Llama 2's converted tokenizers use); every
// normalizer, pre-tokenizer or decoder type not understood here is an error naming it, rather
// than a silently different tokenization.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/untrusted.h"
#include "text/bpe_tokenizer.h"
#include "text/loaders.h"

namespace journey {

namespace {

using nlohmann::json;

struct Reader {
  std::string source;

  void normalizers(const json& node, std::vector<NormalizerStep>& out) const {
    if (node.is_null()) return;
    const std::string type = node.value("type", "");
    if (type == "Sequence") {
      for (const json& child : node.at("normalizers")) normalizers(child, out);
    } else if (type == "NFC") {
      out.push_back({NormalizerStep::Kind::NFC, "", ""});
    } else if (type == "NFD") {
      out.push_back({NormalizerStep::Kind::NFD, "", ""});
    } else if (type == "NFKC") {
      out.push_back({NormalizerStep::Kind::NFKC, "", ""});
    } else if (type == "NFKD") {
      out.push_back({NormalizerStep::Kind::NFKD, "", ""});
    } else if (type == "Lowercase") {
      out.push_back({NormalizerStep::Kind::Lowercase, "", ""});
    } else if (type == "Prepend") {
      out.push_back({NormalizerStep::Kind::Prepend, "", node.at("prepend").get<std::string>()});
    } else if (type == "Replace") {
      const json& pattern = node.at("pattern");
      if (!pattern.contains("String"))
        fail(source, ": normalizer Replace with a regex pattern is not supported: ", excerpt_json(pattern));
      out.push_back({NormalizerStep::Kind::Replace, pattern.at("String").get<std::string>(),
                     node.at("content").get<std::string>()});
    } else {
      fail(source, ": normalizer type \"", excerpt(type), "\" is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, "
           "Lowercase, Prepend, Replace)");
    }
  }

  static PreTokenizerStep::Behavior behavior(const std::string& name, const std::string& source) {
    using B = PreTokenizerStep::Behavior;
    if (name == "Isolated") return B::Isolated;
    if (name == "Removed") return B::Removed;
    if (name == "MergedWithPrevious") return B::MergedWithPrevious;
    if (name == "MergedWithNext") return B::MergedWithNext;
    if (name == "Contiguous") return B::Contiguous;
    fail(source, ": Split behavior \"", excerpt(name), "\" is unknown");
  }

  void pre_tokenizers(const json& node, BpeSpec& spec) const {
    if (node.is_null()) return;
    const std::string type = node.value("type", "");
    PreTokenizerStep step{};
    if (type == "Sequence") {
      for (const json& child : node.at("pretokenizers")) pre_tokenizers(child, spec);
      return;
    } else if (type == "Split") {
      step.kind = PreTokenizerStep::Kind::Split;
      const json& pattern = node.at("pattern");
      if (pattern.contains("Regex")) {
        step.pattern = pattern.at("Regex").get<std::string>();
      } else {
        step.pattern = pattern.at("String").get<std::string>();
        step.literal = true;
      }
      step.behavior = behavior(node.at("behavior").get<std::string>(), source);
      step.invert = node.value("invert", false);
    } else if (type == "ByteLevel") {
      step.kind = PreTokenizerStep::Kind::ByteLevel;
      step.add_prefix_space = node.value("add_prefix_space", false);
      step.use_regex = node.value("use_regex", true);
      spec.byte_level = true;
    } else if (type == "Metaspace") {
      step.kind = PreTokenizerStep::Kind::Metaspace;
      step.replacement = node.value("replacement", std::string("\xE2\x96\x81"));
      if (node.contains("prepend_scheme")) step.prepend_scheme = node.at("prepend_scheme").get<std::string>();
      else step.prepend_scheme = node.value("add_prefix_space", true) ? "always" : "never";
      step.split = node.value("split", true);
    } else if (type == "Digits") {
      step.kind = PreTokenizerStep::Kind::Split;
      step.pattern = node.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)";
    } else if (type == "Whitespace") {
      step.kind = PreTokenizerStep::Kind::Split;
      step.pattern = R"(\w+|[^\w\s]+)";
      step.behavior = PreTokenizerStep::Behavior::Isolated;
      step.invert = false;
      spec.pre_tokenizers.push_back(step);
      // Whitespace keeps only the matches: drop the gaps with a second, inverted removal.
      step.pattern = R"(\s+)";
      step.behavior = PreTokenizerStep::Behavior::Removed;
    } else if (type == "WhitespaceSplit") {
      step.kind = PreTokenizerStep::Kind::Split;
      step.pattern = R"(\s+)";
      step.behavior = PreTokenizerStep::Behavior::Removed;
    } else {
      fail(source, ": pre-tokenizer type \"", excerpt(type), "\" is not supported (supported: Sequence, Split, ByteLevel, "
           "Metaspace, Digits, Whitespace, WhitespaceSplit)");
    }
    spec.pre_tokenizers.push_back(step);
  }

  void decoder(const json& node, BpeSpec& spec) const {
    if (node.is_null()) return;
    const std::string type = node.value("type", "");
    if (type == "Sequence") {
      for (const json& child : node.at("decoders")) decoder(child, spec);
    } else if (type == "ByteLevel") {
      spec.byte_level = true;
    } else if (type == "Metaspace") {
      spec.decode_metaspace = true;
      const std::string scheme = node.contains("prepend_scheme") ? node.at("prepend_scheme").get<std::string>()
                                 : node.value("add_prefix_space", true) ? "always" : "never";
      spec.decode_strip_first_space = scheme != "never";
    } else if (type == "Replace") {
      spec.decode_metaspace = true;  // Replace("▁", " "), the only Replace decoder in use
    } else if (type == "Strip") {
      spec.decode_strip_first_space = node.value("start", 0) > 0;
    } else if (type == "ByteFallback" || type == "Fuse") {
      // byte pieces decode to their byte and pieces are concatenated: what token_bytes does anyway
    } else {
      fail(source, ": decoder type \"", excerpt(type), "\" is not supported (supported: Sequence, ByteLevel, Metaspace, "
           "Replace, Strip, ByteFallback, Fuse)");
    }
  }
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& json_path, const TokenizerConfig& config) {
  const std::string source = json_path.string();
  const json root = read_untrusted_json_file(source);

  BpeSpec spec;
  spec.source = source;
  spec.kind = "bpe";
  spec.byte_level = false;
  Reader reader{source};
  try {
    const json& model = root.at("model");
    const std::string type = model.value("type", "BPE");
    if (type != "BPE") fail(source, ": model type \"", excerpt(type), "\" is not supported; only \"BPE\" is");

    // Vocabulary: piece -> id, with added tokens filling in ids above it. Ids index arrays
    // sized from them, so each is checked as a 64-bit integer against a bound known before any
    // allocation: ids are dense from 0, so none can reach the number of entries in the file.
    const json& vocab = model.at("vocab");
    if (!vocab.is_object()) fail(source, ": model.vocab must be an object of piece -> id, found ", vocab.type_name());
    const json added_tokens = root.value("added_tokens", json::array());
    if (!added_tokens.is_array()) fail(source, ": added_tokens must be a list, found ", added_tokens.type_name());
    const int64_t max_ids = static_cast<int64_t>(vocab.size() + added_tokens.size());
    auto token_id = [&](const json& id, const std::string& what) -> int {
      if (!id.is_number_integer())
        fail(source, ": ", what, ": the id must be an integer, found ", id.type_name(), " ", excerpt_json(id));
      if (id.is_number_unsigned() ? id.get<uint64_t>() >= static_cast<uint64_t>(max_ids)
                                  : (id.get<int64_t>() < 0 || id.get<int64_t>() >= max_ids))
        fail(source, ": ", what, ": id ", id.dump(), " is outside [0, ", max_ids,
             "): ids must be numbered from 0 without large gaps (", vocab.size(), " vocab entries + ",
             added_tokens.size(), " added tokens)");
      return static_cast<int>(id.get<int64_t>());
    };
    int size = 0;
    for (const auto& [piece, id] : vocab.items())
      size = std::max(size, token_id(id, cat("model.vocab[\"", excerpt(piece), "\"]")) + 1);
    for (const json& token : added_tokens)
      size = std::max(size, token_id(token.at("id"), "added_tokens") + 1);
    spec.pieces.assign(size, "");
    spec.special.assign(size, false);
    for (const auto& [piece, id] : vocab.items()) spec.pieces[id.get<int64_t>()] = piece;

    for (const json& merge : model.at("merges")) {
      if (merge.is_string()) {  // "a b"
        const std::string text = merge.get<std::string>();
        const size_t space = text.find(' ', 1);
        if (space == std::string::npos) fail(source, ": merge \"", excerpt(text), "\" has no space between its two pieces");
        spec.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
      } else {  // ["a", "b"]
        spec.merges.emplace_back(merge.at(0).get<std::string>(), merge.at(1).get<std::string>());
      }
    }
    spec.ignore_merges = model.value("ignore_merges", false);
    spec.byte_fallback = model.value("byte_fallback", false);
    for (const json& token : added_tokens) {
      AddedToken added;
      added.id = token_id(token.at("id"), "added_tokens");
      added.content = token.at("content").get<std::string>();
      added.special = token.value("special", false);
      added.lstrip = token.value("lstrip", false);
      added.rstrip = token.value("rstrip", false);
      added.single_word = token.value("single_word", false);
      spec.special[added.id] = added.special;
      spec.added.push_back(std::move(added));
    }
    if (model.contains("unk_token") && model.at("unk_token").is_string()) {
      const std::string unk = model.at("unk_token").get<std::string>();
      for (int id = 0; id < size; ++id) {
        if (spec.pieces[id] == unk) spec.unk = id;
      }
    }
    reader.normalizers(root.value("normalizer", json()), spec.normalizers);
    reader.pre_tokenizers(root.value("pre_tokenizer", json()), spec);
    reader.decoder(root.value("decoder", json()), spec);
  } catch (const json::exception& e) {
    fail(source, ": unexpected structure: ", excerpt(e.what()));
  }

  // BOS/EOS: tokenizer_config.json names them; add BOS when it says so, or when it names a BOS
  // and says nothing (Llama 3's early tokenizer.json does not add it itself, but the model needs it).
  auto find = [&](const std::string& text, const char* field) {
    for (const AddedToken& token : spec.added) {
      if (token.content == text) return token.id;
    }
    for (int id = 0; id < static_cast<int>(spec.pieces.size()); ++id) {
      if (spec.pieces[id] == text) return id;
    }
    fail(source, ": tokenizer_config.json names ", field, " \"", excerpt(text), "\", which is not in the vocabulary");
  };
  if (config.bos_token) spec.bos = find(*config.bos_token, "bos_token");
  if (config.eos_token) spec.eos.push_back(find(*config.eos_token, "eos_token"));
  spec.add_bos = spec.bos.has_value() && config.add_bos_token.value_or(true);
  spec.add_eos = !spec.eos.empty() && config.add_eos_token.value_or(false);
  return make_bpe_tokenizer(std::move(spec));
}

}  // namespace journey
