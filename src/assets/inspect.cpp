#include "assets/inspect.h"

#include "assets/hf_config.h"
#include "core/error.h"
#include "core/model_weights.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>

namespace journey {
namespace {

namespace fs = std::filesystem;

// The directory to plan from when `path` is a Hugging Face directory with config.json but no
// weights (or that config.json itself); nothing otherwise.
std::optional<fs::path> config_only_directory(const fs::path& path) {
  std::error_code ec;
  fs::path dir = path;
  if (fs::is_regular_file(path, ec) && path.filename() == "config.json") dir = path.parent_path().empty() ? "." : path.parent_path();
  if (!fs::is_directory(dir, ec) || !fs::is_regular_file(dir / "config.json", ec)) return std::nullopt;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".safetensors" || entry.path().extension() == ".gguf" ||
        name == "model.safetensors.index.json")
      return std::nullopt;
  }
  return dir;
}

// The report of a config.json alone: every tensor model_weights() implies, stored in the dtype
// the config declares (bf16 when it declares none, as checkpoints are published).
InspectReport inspect_config(const fs::path& dir) {
  InspectReport r;
  r.path = dir;
  r.format = ModelFormat::HuggingFace;
  r.config_only = true;
  r.config = read_hf_config(dir / "config.json", &r.notes);
  if (fs::is_regular_file(dir / "generation_config.json")) {
    r.generation = read_generation_config(dir / "generation_config.json");
  } else {
    r.generation.bos_token_id = r.config.bos_token_id;
    r.generation.eos_token_ids = r.config.eos_token_ids;
  }
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) {
      const std::string name = entry.path().filename().string();
      const std::string role = name == "config.json" ? "config" : name == "generation_config.json" ? "generation config"
                             : name.rfind("tokenizer", 0) == 0 ? "tokenizer" : "other";
      r.files.push_back({entry.path(), role, uint64_t(entry.file_size())});
    }
  std::sort(r.files.begin(), r.files.end(), [](const FileRole& a, const FileRole& b) { return a.path < b.path; });
  const std::string& declared = r.config.torch_dtype;
  const DType dtype = declared == "float32" ? DType::F32 : declared == "float16" ? DType::F16 : DType::BF16;
  for (const WeightSpec& w : model_weights(r.config)) {
    if (w.optional && w.role == WeightRole::lm_head && r.config.tie_word_embeddings) continue;  // tied: not stored
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    r.tensors.push_back({w.name, w.shape, dtype, uint64_t(dtype_bytes_for(dtype, n))});
  }
  r.notes.push_back(cat("config.json only: no weights read; the tensors are those the config implies, stored as ",
                        dtype_name(dtype), declared.empty() ? " (no torch_dtype declared)" : cat(" (torch_dtype ", declared, ")")));
  return r;
}

void fill_sizes(InspectReport& r) {
  for (const auto& t : r.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const uint64_t blocks = (uint64_t(n) + 31) / 32;
    r.parameters += n;
    r.stored_bytes += t.bytes;
    r.bytes_f32 += uint64_t(n) * 4;
    r.bytes_bf16 += uint64_t(n) * 2;
    r.bytes_q8_0 += blocks * 34;
    r.bytes_q4_0 += blocks * 18;
  }
  const ModelConfig& c = r.config;
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : (c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  const uint64_t values = uint64_t(2 * c.num_layers * c.num_kv_heads * head_dim);  // K and V, all layers
  r.kv_bytes_per_token_f32 = values * 4;
  r.kv_bytes_per_token_f16 = values * 2;
}

}  // namespace

MemoryFit fit_in_memory(uint64_t budget, uint64_t weight_bytes, uint64_t kv_bytes_per_token, int64_t seq_len) {
  MemoryFit f;
  f.budget = budget;
  f.weights = weight_bytes;
  f.kv_per_sequence = kv_bytes_per_token * uint64_t(std::max<int64_t>(seq_len, 0));
  f.weights_fit = weight_bytes <= budget;
  f.left_for_kv = f.weights_fit ? budget - weight_bytes : 0;
  f.sequences = f.kv_per_sequence > 0 ? int64_t(f.left_for_kv / f.kv_per_sequence) : 0;
  return f;
}

uint64_t parse_memory_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  static const std::map<std::string, double> kUnits = {
      {"", 1}, {"b", 1}, {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3}, {"m", 1048576.0}, {"mib", 1048576.0},
      {"mb", 1e6}, {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9}, {"t", 1099511627776.0},
      {"tib", 1099511627776.0}, {"tb", 1e12}};
  auto it = kUnits.find(unit);
  if (used == 0 || it == kUnits.end() || !(value >= 0) || value * it->second > 1.8e19)
    fail("memory size \"", text, "\" is not understood: write a number with an optional unit, e.g. 24GiB, 80GB, 16G (GiB), 512MiB");
  return uint64_t(std::llround(value * it->second));
}

InspectReport inspect_model(const std::filesystem::path& path) {
  if (const auto dir = config_only_directory(path)) {
    InspectReport r = inspect_config(*dir);
    fill_sizes(r);
    return r;
  }
  LoadedModel model = load_model(path);
  InspectReport r;
  r.path = model.path;
  r.format = model.format;
  r.config = model.config;
  r.generation = model.generation;
  r.files = model.files;
  r.notes = model.notes;

  // Order tensors the way the model uses them; anything unexpected goes last, by name.
  std::map<std::string, size_t> rank;
  for (const WeightSpec& e : model_weights(model.config)) rank.emplace(e.name, rank.size());
  for (const auto& [name, t] : model.weights.all()) r.tensors.push_back({name, t.shape, t.dtype, t.nbytes});
  std::stable_sort(r.tensors.begin(), r.tensors.end(), [&](const TensorSummary& a, const TensorSummary& b) {
    const size_t ra = rank.count(a.name) ? rank[a.name] : rank.size();
    const size_t rb = rank.count(b.name) ? rank[b.name] : rank.size();
    return ra != rb ? ra < rb : a.name < b.name;
  });

  if (r.config.tie_word_embeddings && !model.weights.has("lm_head.weight"))
    r.notes.push_back("the LM head is tied: it reuses model.embed_tokens.weight (no lm_head.weight stored)");
  fill_sizes(r);
  return r;
}

nlohmann::ordered_json to_json(const InspectReport& r) {
  using nlohmann::ordered_json;
  const ModelConfig& c = r.config;
  ordered_json j;
  j["path"] = r.path.string();
  j["format"] = std::string(format_name(r.format));
  ordered_json files = ordered_json::array();
  for (const auto& f : r.files) files.push_back({{"path", f.path.string()}, {"role", f.role}, {"bytes", f.bytes}});
  j["files"] = files;
  j["architecture"] = {
      {"model_type", c.architecture},
      {"layers", c.num_layers},
      {"hidden_size", c.hidden_size},
      {"heads", c.num_heads},
      {"kv_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"intermediate_size", c.intermediate_size},
      {"vocab_size", c.vocab_size},
      {"context_length", c.max_position_embeddings},
      {"rope_theta", c.rope_theta},
      {"rope_layout", c.rope_layout == RopeLayout::HalfSplit ? "half-split" : "interleaved"},
      {"rms_norm_eps", c.rms_norm_eps},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"qk_norm", c.qk_norm},
      {"torch_dtype", c.torch_dtype},
  };
  ordered_json gen;
  if (r.generation.bos_token_id) gen["bos_token_id"] = *r.generation.bos_token_id;
  gen["eos_token_ids"] = r.generation.eos_token_ids;
  if (r.generation.temperature) gen["temperature"] = *r.generation.temperature;
  if (r.generation.top_p) gen["top_p"] = *r.generation.top_p;
  if (r.generation.top_k) gen["top_k"] = *r.generation.top_k;
  if (r.generation.repetition_penalty) gen["repetition_penalty"] = *r.generation.repetition_penalty;
  if (r.generation.do_sample) gen["do_sample"] = *r.generation.do_sample;
  j["generation"] = gen;
  ordered_json tensors = ordered_json::array();
  for (const auto& t : r.tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", std::string(dtype_name(t.dtype))}, {"bytes", t.bytes}});
  j["tensors"] = tensors;
  j["parameters"] = r.parameters;
  j["stored_bytes"] = r.stored_bytes;
  j["memory_bytes"] = {{"f32", r.bytes_f32}, {"bf16", r.bytes_bf16}, {"int8_q8_0", r.bytes_q8_0}, {"int4_q4_0", r.bytes_q4_0}};
  j["kv_cache_bytes_per_token"] = {{"f32", r.kv_bytes_per_token_f32}, {"f16", r.kv_bytes_per_token_f16}};
  j["config_only"] = r.config_only;
  j["notes"] = r.notes;
  return j;
}

}  // namespace journey
