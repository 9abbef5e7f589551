#include "assets/inspect.h"

#include "core/model_weights.h"

#include <algorithm>
#include <map>

namespace journey {

InspectReport inspect_model(const std::filesystem::path& path) {
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
  j["notes"] = r.notes;
  return j;
}

}  // namespace journey
