// The whole forward pass of one sequence from position 0, written with the scalar loops of
// scalar_ops.h and no KV cache: the independent yardstick for CpuBackend::forward. It follows
// Hugging Face's modeling_llama / modeling_qwen2 / modeling_qwen3 step by step.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "random_model.h"
#include "scalar_ops.h"

namespace scalar {

inline std::vector<float> forward(const journey::ModelConfig& c, const testmodel::Values& values,
                                  const std::vector<int32_t>& tokens) {
  std::map<std::string, const std::vector<float>*> w;
  for (const auto& [t, v] : values) w[t.name] = &v;
  const int64_t T = int64_t(tokens.size()), E = c.hidden_size, F = c.intermediate_size, H = c.num_heads;
  const int64_t KVH = c.num_kv_heads, D = c.head_dim, V = c.vocab_size;
  std::vector<int64_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[t] = t;

  std::vector<float> x(size_t(T * E));  // [T, E]
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) x[t * E + e] = (*w["model.embed_tokens.weight"])[tokens[t] * E + e];

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto bias = [&](const std::string& n) { return w.count(n) ? w[n]->data() : nullptr; };
    auto xn = rms_norm(x, *w[p + "input_layernorm.weight"], T, E, c.rms_norm_eps);
    auto q = linear(xn, *w[p + "self_attn.q_proj.weight"], bias(p + "self_attn.q_proj.bias"), T, E, H * D);
    auto k = linear(xn, *w[p + "self_attn.k_proj.weight"], bias(p + "self_attn.k_proj.bias"), T, E, KVH * D);
    auto v = linear(xn, *w[p + "self_attn.v_proj.weight"], bias(p + "self_attn.v_proj.bias"), T, E, KVH * D);
    if (c.qk_norm) {
      q = rms_norm(q, *w[p + "self_attn.q_norm.weight"], T * H, D, c.rms_norm_eps);
      k = rms_norm(k, *w[p + "self_attn.k_norm.weight"], T * KVH, D, c.rms_norm_eps);
    }
    q = rope(q, positions, H, D, c.rope_theta, c.rope_layout);
    k = rope(k, positions, KVH, D, c.rope_theta, c.rope_layout);
    auto att = attention(q, k, v, T, 0, H, KVH, D);
    auto o = linear(att.context, *w[p + "self_attn.o_proj.weight"], nullptr, T, H * D, E);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    xn = rms_norm(x, *w[p + "post_attention_layernorm.weight"], T, E, c.rms_norm_eps);
    auto g = linear(xn, *w[p + "mlp.gate_proj.weight"], nullptr, T, E, F);
    auto u = linear(xn, *w[p + "mlp.up_proj.weight"], nullptr, T, E, F);
    for (size_t i = 0; i < g.size(); ++i) g[i] = silu_times(g[i], u[i]);
    auto down = linear(g, *w[p + "mlp.down_proj.weight"], nullptr, T, F, E);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  auto xn = rms_norm(x, *w["model.norm.weight"], T, E, c.rms_norm_eps);
  const auto& head = c.tie_word_embeddings ? *w["model.embed_tokens.weight"] : *w["lm_head.weight"];
  return linear(xn, head, nullptr, T, E, V);  // [T, V]
}

}  // namespace scalar
