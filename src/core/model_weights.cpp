#include "core/model_weights.h"

#include "core/error.h"

namespace journey {

namespace {

constexpr WeightRole kLayerRoles[] = {
    WeightRole::attn_norm, WeightRole::q_proj,   WeightRole::k_proj,  WeightRole::v_proj,
    WeightRole::o_proj,    WeightRole::q_bias,   WeightRole::k_bias,  WeightRole::v_bias,
    WeightRole::q_norm,    WeightRole::k_norm,   WeightRole::ffn_norm, WeightRole::gate_proj,
    WeightRole::up_proj,   WeightRole::down_proj,
};

bool is_layer_role(WeightRole role) {
  return role != WeightRole::token_embedding && role != WeightRole::final_norm && role != WeightRole::lm_head;
}

}  // namespace

std::string_view weight_role_name(WeightRole role) {
  switch (role) {
    case WeightRole::token_embedding: return "token_embedding";
    case WeightRole::attn_norm: return "attn_norm";
    case WeightRole::q_proj: return "q_proj";
    case WeightRole::k_proj: return "k_proj";
    case WeightRole::v_proj: return "v_proj";
    case WeightRole::q_bias: return "q_bias";
    case WeightRole::k_bias: return "k_bias";
    case WeightRole::v_bias: return "v_bias";
    case WeightRole::q_norm: return "q_norm";
    case WeightRole::k_norm: return "k_norm";
    case WeightRole::o_proj: return "o_proj";
    case WeightRole::ffn_norm: return "ffn_norm";
    case WeightRole::gate_proj: return "gate_proj";
    case WeightRole::up_proj: return "up_proj";
    case WeightRole::down_proj: return "down_proj";
    case WeightRole::final_norm: return "final_norm";
    case WeightRole::lm_head: return "lm_head";
  }
  return "?";
}

bool has_weight(const ModelConfig& c, WeightRole role) {
  switch (role) {
    case WeightRole::q_bias:
    case WeightRole::k_bias:
    case WeightRole::v_bias: return c.attention_bias;
    case WeightRole::q_norm:
    case WeightRole::k_norm: return c.qk_norm;
    default: return true;
  }
}

WeightSpec weight_spec(const ModelConfig& c, WeightRole role, int layer) {
  if (!has_weight(c, role))
    fail(c.architecture, " has no ", weight_role_name(role), " tensor (attention_bias ", c.attention_bias,
         ", qk_norm ", c.qk_norm, ")");
  if (is_layer_role(role) && (layer < 0 || layer >= c.num_layers))
    fail("weight_spec: layer ", layer, " of ", weight_role_name(role), " outside [0, ", c.num_layers, ")");
  const int64_t E = c.hidden_size, F = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  const int64_t Q = c.q_dim(), KV = c.kv_dim();
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  switch (role) {
    case WeightRole::token_embedding: return {"model.embed_tokens.weight", {V, E}, role};
    case WeightRole::attn_norm: return {p + "input_layernorm.weight", {E}, role, layer};
    case WeightRole::q_proj: return {p + "self_attn.q_proj.weight", {Q, E}, role, layer};
    case WeightRole::k_proj: return {p + "self_attn.k_proj.weight", {KV, E}, role, layer};
    case WeightRole::v_proj: return {p + "self_attn.v_proj.weight", {KV, E}, role, layer};
    case WeightRole::q_bias: return {p + "self_attn.q_proj.bias", {Q}, role, layer};
    case WeightRole::k_bias: return {p + "self_attn.k_proj.bias", {KV}, role, layer};
    case WeightRole::v_bias: return {p + "self_attn.v_proj.bias", {KV}, role, layer};
    case WeightRole::q_norm: return {p + "self_attn.q_norm.weight", {D}, role, layer};
    case WeightRole::k_norm: return {p + "self_attn.k_norm.weight", {D}, role, layer};
    case WeightRole::o_proj: return {p + "self_attn.o_proj.weight", {E, Q}, role, layer};
    case WeightRole::ffn_norm: return {p + "post_attention_layernorm.weight", {E}, role, layer};
    case WeightRole::gate_proj: return {p + "mlp.gate_proj.weight", {F, E}, role, layer};
    case WeightRole::up_proj: return {p + "mlp.up_proj.weight", {F, E}, role, layer};
    case WeightRole::down_proj: return {p + "mlp.down_proj.weight", {E, F}, role, layer};
    case WeightRole::final_norm: return {"model.norm.weight", {E}, role};
    case WeightRole::lm_head: return {"lm_head.weight", {V, E}, role, -1, c.tie_word_embeddings};
  }
  fail("weight_spec: unknown role ", int(role));
}

std::vector<WeightSpec> model_weights(const ModelConfig& c) {
  std::vector<WeightSpec> out{weight_spec(c, WeightRole::token_embedding)};
  for (int l = 0; l < int(c.num_layers); ++l)
    for (WeightRole role : kLayerRoles)
      if (has_weight(c, role)) out.push_back(weight_spec(c, role, l));
  out.push_back(weight_spec(c, WeightRole::final_norm));
  out.push_back(weight_spec(c, WeightRole::lm_head));
  return out;
}

}  // namespace journey
