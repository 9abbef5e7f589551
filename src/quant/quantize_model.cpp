// quantize_model: source (GGUF, or any model load_model reads) -> tensor types -> GGUF file.
#include "quant/quantize_model.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "assets/convert.h"
#include "assets/gguf.h"
#include "assets/gguf_writer.h"
#include "assets/model.h"
#include "core/error.h"
#include "core/model_weights.h"
#include "core/threads.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "quant/tensor_types.h"
#include "text/tokenizer.h"

namespace journey::quant {
namespace fs = std::filesystem;
namespace {

// What the type rules need to know about a model of this configuration (llama.cpp's LLM_TYPE_70B is
// the 80-layer llama with GQA).
ModelFacts model_facts(const ModelConfig& c, bool has_output) {
  ModelFacts facts;
  facts.num_layers = c.num_layers;
  facts.n_gqa = c.num_kv_heads > 0 ? c.num_heads / c.num_kv_heads : 1;
  facts.is_70b = c.num_layers == 80 && c.num_heads != c.num_kv_heads;
  facts.has_output = has_output;
  return facts;
}

constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION: the K-quant layouts of blocks.h

// One tensor to write, as the source holds it.
struct SourceTensor {
  std::string name;                           // GGUF name
  std::vector<int64_t> shape;                 // outermost first
  DType dtype = DType::F32;                   // as stored in the source
  const std::byte* bytes = nullptr;           // as stored (copied unchanged when the type stays)
  size_t nbytes = 0;
  std::function<std::vector<float>()> to_f32; // [numel] in GGUF order (Q/K rows interleaved)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct Source {
  GgufWriter writer;  // metadata filled in; tensors added later
  std::vector<SourceTensor> tensors;
  ModelFacts facts;
  std::vector<std::string> notes;
  std::shared_ptr<const void> keep_alive;  // the mapped source files
  std::optional<fs::path> tokenizer_source;  // what load_tokenizer reads the source's tokenizer from
};

// Quantize a tensor's rows on `threads` threads, each a contiguous range of whole rows. Rows are
// quantized independently, so the bytes do not depend on the thread count.
void quantize_rows(DType type, const float* values /*[rows, row]*/, std::byte* out, int64_t rows, int64_t row, int threads) {
  const int64_t row_bytes = dtype_bytes_for(type, row);
  const int64_t per_thread = (rows + threads - 1) / threads;
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    const int64_t r0 = t * per_thread, r1 = std::min(rows, r0 + per_thread);
    if (r0 >= r1) break;
    pool.emplace_back([&, t, r0, r1] {
      try {
        quantize(type, values + r0 * row, out + r0 * row_bytes, (r1 - r0) * row);
      } catch (...) {
        errors[size_t(t)] = std::current_exception();
      }
    });
  }
  for (auto& thread : pool) thread.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// llama.cpp's weight_name_comparer: tensors outside the layers first (by name), then layer by layer.
bool llama_cpp_order(const std::string& a, const std::string& b) {
  int la = -1, lb = -1;
  std::sscanf(a.c_str(), "blk.%d.", &la);
  std::sscanf(b.c_str(), "blk.%d.", &lb);
  if (la != lb) return la < lb;
  return a < b;
}

Source from_gguf(const fs::path& path) {
  auto gguf = std::make_shared<GgufFile>(GgufFile::open(path));
  Source s;
  s.keep_alive = gguf;
  for (const std::string& key : gguf->keys()) s.writer.set(key, gguf->value(key));
  const std::string arch = gguf->get_string("general.architecture");
  s.facts.num_layers = gguf->get_int(arch + ".block_count");
  const int64_t heads = gguf->get_int(arch + ".attention.head_count");
  const int64_t kv_heads = gguf->has(arch + ".attention.head_count_kv") ? gguf->get_int(arch + ".attention.head_count_kv") : heads;
  s.facts.n_gqa = kv_heads > 0 ? heads / kv_heads : 1;
  s.facts.is_70b = arch == "llama" && s.facts.num_layers == 80 && heads != kv_heads;
  s.facts.has_output = false;
  for (const GgufTensorInfo& info : gguf->tensors()) {
    s.facts.has_output |= info.name == "output.weight";
    SourceTensor t;
    t.name = info.name;
    t.shape = info.shape;
    t.dtype = info.dtype;
    t.bytes = gguf->tensor_data(info);
    t.nbytes = info.nbytes;
    t.to_f32 = [gguf, &info, n = t.numel()] {
      std::vector<float> values(static_cast<size_t>(n));  // [numel]
      dequantize(info.dtype, gguf->tensor_data(info), values.data(), n);
      return values;
    };
    s.tensors.push_back(std::move(t));
  }
  return s;
}

// tokenizer_config.json's "chat_template": a string, or a list of {name, template} with a "default".
std::string chat_template_source(const fs::path& dir) {
  if (fs::is_regular_file(dir / "chat_template.jinja")) {
    std::ifstream in(dir / "chat_template.jinja", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  if (!fs::is_regular_file(dir / "tokenizer_config.json")) return "";
  std::ifstream in(dir / "tokenizer_config.json");
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (!config.is_object() || !config.contains("chat_template")) return "";
  const auto& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& entry : t)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") && entry["template"].is_string())
        return entry["template"].get<std::string>();
  return "";
}

std::optional<bool> tokenizer_config_flag(const fs::path& dir, const char* key) {
  if (!fs::is_regular_file(dir / "tokenizer_config.json")) return std::nullopt;
  std::ifstream in(dir / "tokenizer_config.json");
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (!config.is_object() || !config.contains(key) || !config[key].is_boolean()) return std::nullopt;
  return config[key].get<bool>();
}

// A SentencePiece tokenizer.model as GGUF's "llama" vocabulary (what convert_hf_to_gguf.py writes):
// pieces, scores and token types (llama.cpp's numbering), padded to the model's vocab size.
void add_sentencepiece_vocab(GgufWriter& w, const fs::path& model_file, const ModelConfig& c, const fs::path& dir) {
  sentencepiece::SentencePieceProcessor sp;
  if (const auto status = sp.Load(model_file.string()); !status.ok())
    fail(model_file.string(), ": cannot load as a SentencePiece model: ", status.ToString());
  enum { kNormal = 1, kUnknown = 2, kControl = 3, kUnused = 5, kByte = 6 };  // llama_token_type
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    tokens.push_back(sp.IdToPiece(id));
    scores.push_back(sp.GetScore(id));
    types.push_back(sp.IsUnknown(id) ? kUnknown : sp.IsControl(id) ? kControl : sp.IsUnused(id) ? kUnused
                    : sp.IsByte(id) ? kByte : kNormal);
  }
  if (int64_t(tokens.size()) > c.vocab_size)
    fail(model_file.string(), " has ", tokens.size(), " pieces but the model's vocab_size is ", c.vocab_size);
  for (int64_t id = int64_t(tokens.size()); id < c.vocab_size; ++id) {  // as convert_hf_to_gguf.py: unused padding
    tokens.push_back(cat("[PAD", id, "]"));
    scores.push_back(-1000.0f);
    types.push_back(kUnused);
  }
  w.set("tokenizer.ggml.model", gguf_string("llama"));
  w.set("tokenizer.ggml.pre", gguf_string("default"));
  w.set("tokenizer.ggml.tokens", gguf_string_array(tokens));
  w.set("tokenizer.ggml.scores", gguf_f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf_i32_array(types));
  const int bos = c.bos_token_id.value_or(sp.bos_id());
  const int eos = c.eos_token_ids.empty() ? sp.eos_id() : c.eos_token_ids.front();
  if (bos >= 0) w.set("tokenizer.ggml.bos_token_id", gguf_u32(uint32_t(bos)));
  if (eos >= 0) w.set("tokenizer.ggml.eos_token_id", gguf_u32(uint32_t(eos)));
  if (sp.unk_id() >= 0) w.set("tokenizer.ggml.unknown_token_id", gguf_u32(uint32_t(sp.unk_id())));
  if (sp.pad_id() >= 0) w.set("tokenizer.ggml.padding_token_id", gguf_u32(uint32_t(sp.pad_id())));
  if (auto add_bos = tokenizer_config_flag(dir, "add_bos_token")) w.set("tokenizer.ggml.add_bos_token", gguf_bool(*add_bos));
  if (auto add_eos = tokenizer_config_flag(dir, "add_eos_token")) w.set("tokenizer.ggml.add_eos_token", gguf_bool(*add_eos));
}

// GGUF's name for a byte-level BPE pre-tokenizer (tokenizer.ggml.pre; llama.cpp keys its regexes by it),
// told by the digits rule of the Split regex: Llama 3 splits digits in runs of up to three, Qwen2 one by
// one, GPT-2 has no Split and lets ByteLevel apply its own regex. check_tokenizer() confirms the choice.
std::string bpe_pre_name(const nlohmann::json& pre, const std::string& where) {
  std::vector<nlohmann::json> steps;
  if (pre.is_object() && pre.value("type", "") == "Sequence") steps = pre.value("pretokenizers", std::vector<nlohmann::json>{});
  else if (pre.is_object()) steps = {pre};
  std::vector<std::string> splits;
  bool byte_level = false, byte_level_regex = false;
  for (const auto& step : steps) {
    const std::string type = step.value("type", "");
    if (type == "ByteLevel") {
      byte_level = true;
      byte_level_regex = step.value("use_regex", true);
    } else if (type == "Split" && step.contains("pattern") && step["pattern"].contains("Regex")) {
      splits.push_back(step["pattern"]["Regex"].get<std::string>());
    }
  }
  if (!byte_level) fail(where, ": the pre-tokenizer is not byte-level BPE (GGUF \"gpt2\" vocabularies are)");
  if (splits.empty() && byte_level_regex) return "gpt-2";
  if (splits.size() == 1 && splits[0].find("\\p{N}{1,3}") != std::string::npos) return "llama-bpe";
  if (splits.size() == 1 && splits[0].find("\\p{N}") != std::string::npos) return "qwen2";
  fail(where, ": its pre-tokenizer (", pre.dump().substr(0, 200), ") is none journey can name in GGUF (gpt-2, llama-bpe, qwen2)");
}

// A byte-level BPE tokenizer.json as GGUF's "gpt2" vocabulary: pieces by id (added tokens included,
// padded to vocab_size), merges, token types (special added tokens are control tokens, the others
// user-defined), the pre-tokenizer's name and the special ids.
void add_bpe_vocab(GgufWriter& w, const fs::path& json_path, const ModelConfig& c, const fs::path& dir) {
  const std::string where = json_path.string();
  std::ifstream in(json_path);
  const nlohmann::json root = nlohmann::json::parse(in, nullptr, false);
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) fail(where, ": not a tokenizer.json");
  const nlohmann::json& model = root["model"];
  if (model.value("type", "BPE") != "BPE") fail(where, ": model type ", model.value("type", ""), " (GGUF gpt2 vocabularies are BPE)");
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") || !model["merges"].is_array())
    fail(where, ": model.vocab or model.merges missing");
  const std::string pre = bpe_pre_name(root.value("pre_tokenizer", nlohmann::json()), where);
  enum { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };  // llama_token_type
  int64_t size = c.vocab_size;
  for (const auto& [piece, id] : model["vocab"].items()) size = std::max<int64_t>(size, id.get<int64_t>() + 1);
  const auto added = root.value("added_tokens", nlohmann::json::array());
  for (const auto& token : added) size = std::max<int64_t>(size, token.at("id").get<int64_t>() + 1);
  if (size > c.vocab_size) fail(where, " holds ids up to ", size - 1, " but the model's vocab_size is ", c.vocab_size);
  std::vector<std::string> tokens(static_cast<size_t>(size));
  std::vector<int32_t> types(static_cast<size_t>(size), kUnused);
  for (const auto& [piece, id] : model["vocab"].items()) {
    tokens[id.get<size_t>()] = piece;
    types[id.get<size_t>()] = kNormal;
  }
  for (const auto& token : added) {
    const size_t id = token.at("id").get<size_t>();
    tokens[id] = token.at("content").get<std::string>();
    types[id] = token.value("special", false) ? kControl : kUserDefined;
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    if (types[id] == kUnused) tokens[id] = cat("[PAD", id, "]");
  std::vector<std::string> merges;
  for (const auto& merge : model["merges"])
    merges.push_back(merge.is_string() ? merge.get<std::string>() : cat(merge.at(0).get<std::string>(), " ", merge.at(1).get<std::string>()));
  w.set("tokenizer.ggml.model", gguf_string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf_string(pre));
  w.set("tokenizer.ggml.tokens", gguf_string_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf_i32_array(types));
  w.set("tokenizer.ggml.merges", gguf_string_array(merges));
  // BOS/EOS as journey's tokenizer.json reader takes them: named by tokenizer_config.json (config.json's
  // ids when there is none); BOS is added when tokenizer_config.json names one and does not say no.
  std::optional<nlohmann::json> tokenizer_config;
  if (fs::is_regular_file(dir / "tokenizer_config.json")) {
    std::ifstream config_in(dir / "tokenizer_config.json");
    tokenizer_config = nlohmann::json::parse(config_in, nullptr, false);
  }
  auto named_id = [&](const char* key) -> std::optional<int64_t> {
    if (!tokenizer_config || !tokenizer_config->is_object() || !tokenizer_config->contains(key)) return std::nullopt;
    const nlohmann::json& v = (*tokenizer_config)[key];
    const std::string content = v.is_string() ? v.get<std::string>() : v.is_object() ? v.value("content", "") : "";
    if (content.empty()) return std::nullopt;
    for (size_t id = 0; id < tokens.size(); ++id)
      if (tokens[id] == content) return int64_t(id);
    fail(dir.string(), "/tokenizer_config.json names ", key, " \"", content, "\", which is not in the vocabulary");
  };
  std::optional<int64_t> bos = named_id("bos_token"), eos = named_id("eos_token");
  if (!tokenizer_config) {
    if (c.bos_token_id) bos = *c.bos_token_id;
    if (!c.eos_token_ids.empty()) eos = c.eos_token_ids.front();
  }
  if (bos) w.set("tokenizer.ggml.bos_token_id", gguf_u32(uint32_t(*bos)));
  if (eos) w.set("tokenizer.ggml.eos_token_id", gguf_u32(uint32_t(*eos)));
  w.set("tokenizer.ggml.add_bos_token", gguf_bool(bos.has_value() && tokenizer_config_flag(dir, "add_bos_token").value_or(true)));
  if (auto add_eos = tokenizer_config_flag(dir, "add_eos_token")) w.set("tokenizer.ggml.add_eos_token", gguf_bool(*add_eos));
}

// The written vocabulary must tokenize like the source's tokenizer; texts chosen for the cases
// converters get wrong (digits, punctuation, non-Latin scripts, emoji; whitespace runs for BPE).
// Whitespace runs are left out for SentencePiece: its normalizer collapses them (remove_extra_whitespaces)
// and GGUF's "llama" vocabularies, as llama.cpp reads them, do not — a property of the format, not of
// this conversion.
void check_tokenizer(const fs::path& source, const fs::path& gguf, bool sentencepiece) {
  const auto expected = load_tokenizer(source);
  const auto got = load_tokenizer(gguf);
  std::vector<std::string> texts = {"Once upon a time, there was a little girl named Lily.",
                                    "digits 1 12 123 1234 12345 3.14159", "caf\xC3\xA9 na\xC3\xAFve \xC3\x9C" "ber",
                                    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C", "emoji \xF0\x9F\x99\x82 ok",
                                    "Hello World! I'm here, you're there; it's done.\nNext line.", ""};
  if (!sentencepiece) texts.push_back("  two  spaces\tand a tab\n\n  new lines   ");
  for (const std::string& text : texts) {
    const std::vector<int> a = expected->encode(text, true), b = got->encode(text, true);
    if (a != b) {
      std::string as, bs;
      for (int id : a) as += cat(as.empty() ? "" : " ", id);
      for (int id : b) bs += cat(bs.empty() ? "" : " ", id);
      fail("quantize: the GGUF vocabulary written to ", gguf.string(), " tokenizes \"", text, "\" as [", bs,
           "] but the source's tokenizer gives [", as, "]; not writing a file whose tokenizer differs");
    }
  }
}

Source from_model(const fs::path& path) {
  auto model = std::make_shared<LoadedModel>(load_model(path));
  const ModelConfig& c = model->config;
  const std::string where = path.string();
  if (c.architecture != "llama" && c.architecture != "mistral")
    fail(where, ": architecture ", c.architecture, " cannot be written as GGUF by journey yet (it writes llama and mistral)");
  if (c.attention_bias || c.qk_norm)
    fail(where, ": q/k/v biases or q/k norms are not part of GGUF's llama architecture");
  if (c.head_dim * c.num_heads != c.hidden_size)
    fail(where, ": head_dim ", c.head_dim, " x ", c.num_heads, " heads != hidden size ", c.hidden_size,
         " (GGUF llama files written by journey derive head_dim from them)");
  Source s;
  s.keep_alive = model;
  GgufWriter& w = s.writer;
  w.set("general.architecture", gguf_string("llama"));
  w.set("general.name", gguf_string((fs::is_directory(path) ? path : path.parent_path()).filename().string()));
  w.set("llama.context_length", gguf_u32(uint32_t(c.max_position_embeddings)));
  w.set("llama.embedding_length", gguf_u32(uint32_t(c.hidden_size)));
  w.set("llama.feed_forward_length", gguf_u32(uint32_t(c.intermediate_size)));
  w.set("llama.block_count", gguf_u32(uint32_t(c.num_layers)));
  w.set("llama.attention.head_count", gguf_u32(uint32_t(c.num_heads)));
  w.set("llama.attention.head_count_kv", gguf_u32(uint32_t(c.num_kv_heads)));
  w.set("llama.rope.dimension_count", gguf_u32(uint32_t(c.head_dim)));
  w.set("llama.rope.freq_base", gguf_f32(float(c.rope_theta)));
  w.set("llama.attention.layer_norm_rms_epsilon", gguf_f32(float(c.rms_norm_eps)));
  w.set("llama.vocab_size", gguf_u32(uint32_t(c.vocab_size)));

  const fs::path dir = fs::is_directory(path) ? path : path.parent_path();
  // tokenizer.json when it is byte-level BPE (load_tokenizer prefers it too), else tokenizer.model
  std::optional<fs::path> sentencepiece;
  for (const FileRole& f : model->files)
    if (f.role == "tokenizer" && f.path.extension() == ".model") sentencepiece = f.path;
  const fs::path tokenizer_json = dir / "tokenizer.json";
  bool byte_level_json = false;
  if (fs::is_regular_file(tokenizer_json)) {
    std::ifstream in(tokenizer_json);
    const nlohmann::json root = nlohmann::json::parse(in, nullptr, false);
    byte_level_json = root.is_object() && root.contains("pre_tokenizer") && root["pre_tokenizer"].dump().find("\"ByteLevel\"") != std::string::npos;
  }
  if (byte_level_json) add_bpe_vocab(w, tokenizer_json, c, dir);
  else if (sentencepiece) add_sentencepiece_vocab(w, *sentencepiece, c, dir);
  else if (fs::is_regular_file(tokenizer_json))
    fail(where, ": its tokenizer.json is not byte-level BPE and there is no tokenizer.model to write a GGUF vocabulary from");
  else s.notes.push_back("no tokenizer found: the GGUF file has no vocabulary");
  if (byte_level_json) s.tokenizer_source = tokenizer_json;  // the file converted, to check the conversion
  else if (sentencepiece) s.tokenizer_source = *sentencepiece;
  if (const std::string tmpl = chat_template_source(dir); !tmpl.empty()) w.set("tokenizer.chat_template", gguf_string(tmpl));

  s.facts = model_facts(c, model->weights.has("lm_head.weight"));
  for (const auto& [hf_name, ref] : model->weights.all()) {
    const std::string name = hf_to_gguf_name(hf_name);
    if (name == hf_name) {
      s.notes.push_back(cat("tensor ", hf_name, " has no GGUF name; not written"));
      continue;
    }
    if (!dtype_is_weight(ref.dtype)) fail(where, ": tensor ", hf_name, " has dtype ", dtype_name(ref.dtype), ", not a weight type");
    SourceTensor t;
    t.name = name;
    t.shape = ref.shape;
    t.dtype = ref.dtype;
    t.bytes = ref.data;
    t.nbytes = ref.nbytes;
    // GGUF's llama keeps Q/K rows in Meta's interleaved RoPE order; Hugging Face checkpoints in half-split order.
    const bool permute = c.rope_layout == RopeLayout::HalfSplit && (name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight"));
    if (permute) t.bytes = nullptr;  // never copied as is
    const int64_t heads = name.ends_with("attn_q.weight") ? c.num_heads : c.num_kv_heads;
    t.to_f32 = [ref = &ref, permute, heads] {
      std::vector<float> values = ref->to_f32();  // ref->shape
      if (permute) values = permute_half_split_to_interleaved(values, heads, ref->shape[0], ref->shape[1]);
      return values;
    };
    s.tensors.push_back(std::move(t));
  }
  return s;
}

}  // namespace

QuantizeReport quantize_model(const QuantizeOptions& options) {
  const auto recipe = find_recipe(options.type);
  if (!recipe) fail("quantize: unknown type \"", options.type, "\" (known: ", recipe_names(), ")");
  if (fs::exists(options.output) && fs::equivalent(options.output, options.input))
    fail("quantize: the output ", options.output.string(), " is the input");
  Source source = is_gguf_file(options.input) ? from_gguf(options.input) : from_model(options.input);
  std::sort(source.tensors.begin(), source.tensors.end(),
            [](const SourceTensor& a, const SourceTensor& b) { return llama_cpp_order(a.name, b.name); });

  QuantizeReport report;
  report.notes = source.notes;
  const bool from_hf = !is_gguf_file(options.input);
  for (const SourceTensor& t : source.tensors) {
    TensorFacts facts{t.name, t.shape.back(), int(t.shape.size()), t.dtype};
    // convert_hf_to_gguf.py writes 1-D tensors (norms) as F32, whatever the checkpoint's dtype
    if (from_hf && t.shape.size() == 1) facts.current = DType::F32;
    const TypeChoice choice = choose_tensor_type(*recipe, options.pure, facts, source.facts);
    if (!choice.fallback_note.empty()) report.notes.push_back(cat(t.name, ": ", choice.fallback_note));
    if (choice.type != t.dtype && dtype_is_quantized(t.dtype) && !options.allow_requantize)
      fail("quantize: tensor ", t.name, " is already ", dtype_name(t.dtype), "; quantizing it to ", dtype_name(choice.type),
           " loses precision twice (pass --allow-requantize to do it anyway, or start from an f32/f16/bf16 model)");
    source.writer.add_tensor({t.name, choice.type, t.shape});
    report.weights += uint64_t(t.numel());
    report.input_bytes += t.nbytes;
    report.type_counts[choice.type] += 1;
  }
  report.tensors = source.tensors.size();
  source.writer.set("general.quantization_version", gguf_u32(kQuantizationVersion));
  source.writer.set("general.file_type", gguf_u32(uint32_t(gguf_file_type_number(recipe->file_type))));

  uint64_t weights_done = 0;
  const int threads = resolve_threads(options.threads);
  source.writer.write(options.output, [&](size_t i, std::vector<std::byte>& out) {
    const SourceTensor& t = source.tensors[i];
    const DType to = source.writer.tensors()[i].dtype;
    const int64_t n = t.numel();
    if (to == t.dtype && t.bytes != nullptr) {
      out.assign(t.bytes, t.bytes + t.nbytes);
    } else {
      const std::vector<float> values = t.to_f32();  // [numel]
      out.resize(size_t(dtype_bytes_for(to, n)));
      const int64_t row = t.shape.back();
      quantize_rows(to, values.data(), out.data(), n / row, row, threads);
    }
    report.output_bytes += out.size();
    weights_done += uint64_t(n);
    if (options.on_tensor_done)
      options.on_tensor_done({i, source.tensors.size(), t.name, t.dtype, to, weights_done, report.weights});
  });
  if (source.tokenizer_source) {
    try {
      check_tokenizer(*source.tokenizer_source, options.output, source.tokenizer_source->extension() == ".model");
    } catch (...) {
      std::error_code ignored;
      fs::remove(options.output, ignored);
      throw;
    }
  }
  return report;
}

std::vector<PlannedTensor> plan_quantized_model(const ModelConfig& config, const std::string& type, bool pure) {
  const auto recipe = find_recipe(type);
  if (!recipe) fail("quantize: unknown type \"", type, "\" (known: ", recipe_names(), ")");
  const ModelFacts facts = model_facts(config, !config.tie_word_embeddings);
  std::vector<PlannedTensor> plan;
  for (const WeightSpec& spec : model_weights(config)) {
    if (spec.optional && config.tie_word_embeddings) continue;  // the tied LM head is the embedding
    PlannedTensor t{hf_to_gguf_name(spec.name), spec.shape, DType::F32, 0};
    const TensorFacts tensor{t.gguf_name, spec.shape.back(), int(spec.shape.size()), DType::F32};
    t.type = choose_tensor_type(*recipe, pure, tensor, facts).type;
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    t.bytes = uint64_t(dtype_bytes_for(t.type, n));
    plan.push_back(std::move(t));
  }
  return plan;
}

}  // namespace journey::quant
