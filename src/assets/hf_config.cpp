#include "assets/hf_config.h"

#include "core/error.h"
#include "core/untrusted.h"

namespace journey {
namespace {

using nlohmann::json;

// What a field held, for an error message: its type and a bounded excerpt (a value from a
// model file may be megabytes long or nested thousands deep).
std::string found(const json& v) { return cat(v.type_name(), " ", excerpt_json(v)); }

int64_t require_int(const json& c, const char* key, const std::string& where) {
  if (!c.contains(key)) fail(where, ": required field \"", key, "\" is missing");
  const json& v = c[key];
  if (!v.is_number_integer()) fail(where, ": field \"", key, "\" must be an integer, found ", found(v));
  return v.get<int64_t>();
}

int64_t positive_int(const json& c, const char* key, const std::string& where) {
  const int64_t v = require_int(c, key, where);
  if (v <= 0) fail(where, ": field \"", key, "\" must be positive, found ", v);
  return v;
}

std::optional<int64_t> optional_int(const json& c, const char* key, const std::string& where) {
  if (!c.contains(key) || c[key].is_null()) return std::nullopt;
  return require_int(c, key, where);
}

std::optional<double> optional_number(const json& c, const char* key, const std::string& where) {
  if (!c.contains(key) || c[key].is_null()) return std::nullopt;
  if (!c[key].is_number()) fail(where, ": field \"", key, "\" must be a number, found ", found(c[key]));
  return c[key].get<double>();
}

std::optional<bool> optional_bool(const json& c, const char* key, const std::string& where) {
  if (!c.contains(key) || c[key].is_null()) return std::nullopt;
  if (!c[key].is_boolean()) fail(where, ": field \"", key, "\" must be true or false, found ", found(c[key]));
  return c[key].get<bool>();
}

// eos_token_id may be one integer or a list of integers.
std::vector<int> int_or_list(const json& c, const char* key, const std::string& where) {
  std::vector<int> out;
  if (!c.contains(key) || c[key].is_null()) return out;
  const json& v = c[key];
  if (v.is_number_integer()) return {v.get<int>()};
  if (!v.is_array()) fail(where, ": field \"", key, "\" must be an integer or a list of integers, found ", found(v));
  for (const auto& item : v) {
    if (!item.is_number_integer()) fail(where, ": field \"", key, "\" must list integers, found ", found(item));
    out.push_back(item.get<int>());
  }
  return out;
}

}  // namespace

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = {"llama", "mistral", "qwen2", "qwen3"};
  return names;
}

json read_json_file(const std::filesystem::path& path) { return read_untrusted_json_file(path.string()); }

ModelConfig parse_hf_config(const json& c, const std::string& where, std::vector<std::string>* notes) {
  if (!c.is_object()) fail(where, ": expected a JSON object, found ", c.type_name());
  if (!c.contains("model_type")) fail(where, ": required field \"model_type\" is missing");
  if (!c["model_type"].is_string()) fail(where, ": field \"model_type\" must be a string, found ", found(c["model_type"]));
  ModelConfig m;
  m.architecture = c["model_type"].get<std::string>();
  bool known = false;
  for (const auto& a : supported_architectures()) known |= (a == m.architecture);
  if (!known) {
    std::string list;
    for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
    fail(where, ": unknown architecture model_type \"", m.architecture, "\" (journey supports: ", list, ")");
  }

  m.hidden_size = positive_int(c, "hidden_size", where);
  m.intermediate_size = positive_int(c, "intermediate_size", where);
  m.num_layers = positive_int(c, "num_hidden_layers", where);
  m.num_heads = positive_int(c, "num_attention_heads", where);
  m.num_kv_heads = optional_int(c, "num_key_value_heads", where).value_or(m.num_heads);
  m.vocab_size = positive_int(c, "vocab_size", where);
  m.max_position_embeddings = positive_int(c, "max_position_embeddings", where);
  if (m.num_kv_heads <= 0 || m.num_heads % m.num_kv_heads != 0)
    fail(where, ": num_attention_heads ", m.num_heads, " is not a multiple of num_key_value_heads ", m.num_kv_heads);
  if (auto head_dim = optional_int(c, "head_dim", where)) {
    m.head_dim = *head_dim;
  } else {
    if (m.hidden_size % m.num_heads != 0)
      fail(where, ": hidden_size ", m.hidden_size, " is not divisible by num_attention_heads ", m.num_heads, " and no head_dim is given");
    m.head_dim = m.hidden_size / m.num_heads;
  }
  if (m.head_dim <= 0 || m.head_dim % 2 != 0) fail(where, ": head_dim must be positive and even for RoPE, found ", m.head_dim);
  m.rope_theta = optional_number(c, "rope_theta", where).value_or(10000.0);
  m.rms_norm_eps = optional_number(c, "rms_norm_eps", where).value_or(1e-6);  // the HF default for all four
  m.tie_word_embeddings = optional_bool(c, "tie_word_embeddings", where).value_or(false);

  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
    fail(where, ": rope_scaling ", excerpt_json(c["rope_scaling"]), " is unsupported (journey implements plain RoPE only)");
  if (c.contains("hidden_act")) {
    if (!c["hidden_act"].is_string()) fail(where, ": field \"hidden_act\" must be a string, found ", found(c["hidden_act"]));
    const std::string act = c["hidden_act"].get<std::string>();
    if (act != "silu") fail(where, ": hidden_act \"", act, "\" is unsupported (journey implements SwiGLU with silu)");
  }

  if (m.architecture == "qwen2") {
    m.attention_bias = true;  // Qwen2 hard-codes biases on q/k/v (there is no config field)
  } else {
    m.attention_bias = optional_bool(c, "attention_bias", where).value_or(false);
  }
  m.qk_norm = (m.architecture == "qwen3");
  if (m.attention_bias && m.architecture != "qwen2")
    fail(where, ": attention_bias true is only supported for qwen2 (journey loads q/k/v biases for qwen2 only)");

  const bool sliding = optional_bool(c, "use_sliding_window", where).value_or(m.architecture == "mistral");
  if (notes && c.contains("sliding_window") && !c["sliding_window"].is_null() && sliding)
    notes->push_back(cat("sliding_window ", excerpt_json(c["sliding_window"]),
                         " is ignored: journey attends over the whole context (exact while the context stays below the window)"));

  m.rope_layout = RopeLayout::HalfSplit;  // Hugging Face checkpoints rotate with rotate_half
  if (c.contains("torch_dtype") && c["torch_dtype"].is_string()) m.torch_dtype = c["torch_dtype"].get<std::string>();
  if (auto bos = optional_int(c, "bos_token_id", where)) m.bos_token_id = int(*bos);
  m.eos_token_ids = int_or_list(c, "eos_token_id", where);
  return m;
}

ModelConfig read_hf_config(const std::filesystem::path& path, std::vector<std::string>* notes) {
  return parse_hf_config(read_json_file(path), path.string(), notes);
}

GenerationConfig parse_generation_config(const json& c, const std::string& where) {
  if (!c.is_object()) fail(where, ": expected a JSON object, found ", c.type_name());
  GenerationConfig g;
  if (auto bos = optional_int(c, "bos_token_id", where)) g.bos_token_id = int(*bos);
  g.eos_token_ids = int_or_list(c, "eos_token_id", where);
  g.temperature = optional_number(c, "temperature", where);
  g.top_p = optional_number(c, "top_p", where);
  g.repetition_penalty = optional_number(c, "repetition_penalty", where);
  if (auto k = optional_int(c, "top_k", where)) g.top_k = int(*k);
  g.do_sample = optional_bool(c, "do_sample", where);
  return g;
}

GenerationConfig read_generation_config(const std::filesystem::path& path) {
  return parse_generation_config(read_json_file(path), path.string());
}

}  // namespace journey
