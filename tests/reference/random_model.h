// Small random models built in memory (no files), for tests of the CPU backend: the same tensor
// names and shapes as Hugging Face checkpoints, weights ~ N(0, 0.2) so that attention is far from
// uniform and a wrong index shows, norm weights ~ 1 + N(0, 0.1).
#pragma once
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/dtype.h"

namespace testmodel {

// tiny shapes of the three architectures; odd sizes on purpose (F = 37, V = 97)
inline journey::ModelConfig tiny_config(const std::string& arch) {
  journey::ModelConfig c;
  c.architecture = arch;
  c.hidden_size = 32;
  c.intermediate_size = 37;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = arch == "qwen3" ? 12 : 8;  // Qwen3: head_dim != hidden / heads
  c.vocab_size = 97;
  c.max_position_embeddings = 64;
  c.rope_theta = arch == "llama" ? 10000.0 : 1000000.0;
  c.rms_norm_eps = arch == "llama" ? 1e-5 : 1e-6;
  c.tie_word_embeddings = arch != "llama";
  c.attention_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  return c;
}

struct NamedShape {
  std::string name;
  std::vector<int64_t> shape;
  bool is_norm;
};

inline std::vector<NamedShape> tensor_shapes(const journey::ModelConfig& c) {
  const int64_t E = c.hidden_size, F = c.intermediate_size, D = c.head_dim, H = c.num_heads, KVH = c.num_kv_heads;
  std::vector<NamedShape> out = {{"model.embed_tokens.weight", {c.vocab_size, E}, false}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {E}, true});
    out.push_back({p + "self_attn.q_proj.weight", {H * D, E}, false});
    out.push_back({p + "self_attn.k_proj.weight", {KVH * D, E}, false});
    out.push_back({p + "self_attn.v_proj.weight", {KVH * D, E}, false});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {H * D}, false});
      out.push_back({p + "self_attn.k_proj.bias", {KVH * D}, false});
      out.push_back({p + "self_attn.v_proj.bias", {KVH * D}, false});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {D}, true});
      out.push_back({p + "self_attn.k_norm.weight", {D}, true});
    }
    out.push_back({p + "self_attn.o_proj.weight", {E, H * D}, false});
    out.push_back({p + "post_attention_layernorm.weight", {E}, true});
    out.push_back({p + "mlp.gate_proj.weight", {F, E}, false});
    out.push_back({p + "mlp.up_proj.weight", {F, E}, false});
    out.push_back({p + "mlp.down_proj.weight", {E, F}, false});
  }
  out.push_back({"model.norm.weight", {E}, true});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, E}, false});
  return out;
}

// f32 values of every tensor, by name
using Values = std::vector<std::pair<NamedShape, std::vector<float>>>;

inline Values random_values(const journey::ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Values out;
  for (const NamedShape& t : tensor_shapes(c)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> v(size_t(n), 0.0f);
    for (float& x : v) x = t.is_norm ? 1.0f + 0.1f * normal(rng) : 0.2f * normal(rng);
    out.emplace_back(t, std::move(v));
  }
  return out;
}

// A LoadedModel whose weights live in owned buffers, stored as `dtype` (F32, F16 or BF16).
inline journey::LoadedModel make_model(const journey::ModelConfig& c, const Values& values,
                                       journey::DType dtype = journey::DType::F32) {
  journey::LoadedModel m;
  m.config = c;
  for (const auto& [t, v] : values) {
    auto bytes = std::make_shared<std::vector<std::byte>>(size_t(journey::dtype_bytes_for(dtype, int64_t(v.size()))));
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype == journey::DType::F32) {
        std::memcpy(bytes->data() + 4 * i, &v[i], 4);
      } else {
        const uint16_t h = dtype == journey::DType::F16 ? journey::f32_to_f16(v[i]) : journey::f32_to_bf16(v[i]);
        std::memcpy(bytes->data() + 2 * i, &h, 2);
      }
    }
    journey::TensorRef ref;
    ref.name = t.name;
    ref.dtype = dtype;
    ref.shape = t.shape;
    ref.data = bytes->data();
    ref.nbytes = bytes->size();
    ref.source = "random test model";
    m.weights.add(std::move(ref), bytes);
  }
  return m;
}

inline journey::LoadedModel random_model(const std::string& arch, uint32_t seed = 42) {
  auto c = tiny_config(arch);
  return make_model(c, random_values(c, seed));
}

}  // namespace testmodel
