// The one description of a model's weights: every tensor a Llama/Qwen2/Qwen3-style decoder has,
// with its Hugging Face name, the shape its config implies, its role in the forward pass and
// whether it may be absent. The loader checks files against it (assets/model.cpp), and every
// backend (reference, cpu, cuda) asks it for the name and shape of what it uploads — so a new
// tensor, or a new architecture's optional one, is written down here once.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace journey {

enum class WeightRole {
  token_embedding,  // model.embed_tokens.weight       [V, E]
  attn_norm,        // layers.L.input_layernorm        [E]
  q_proj,           // layers.L.self_attn.q_proj       [H*D, E]
  k_proj,           // layers.L.self_attn.k_proj       [KVH*D, E]
  v_proj,           // layers.L.self_attn.v_proj       [KVH*D, E]
  q_bias,           // layers.L.self_attn.q_proj.bias  [H*D]     (Qwen2)
  k_bias,           // layers.L.self_attn.k_proj.bias  [KVH*D]   (Qwen2)
  v_bias,           // layers.L.self_attn.v_proj.bias  [KVH*D]   (Qwen2)
  q_norm,           // layers.L.self_attn.q_norm       [D]       (Qwen3)
  k_norm,           // layers.L.self_attn.k_norm       [D]       (Qwen3)
  o_proj,           // layers.L.self_attn.o_proj       [E, H*D]
  ffn_norm,         // layers.L.post_attention_layernorm [E]
  gate_proj,        // layers.L.mlp.gate_proj          [F, E]
  up_proj,          // layers.L.mlp.up_proj            [F, E]
  down_proj,        // layers.L.mlp.down_proj          [E, F]
  final_norm,       // model.norm.weight               [E]
  lm_head,          // lm_head.weight                  [V, E]   (absent when tied to the embedding)
};

std::string_view weight_role_name(WeightRole role);  // "q_proj", ...

struct WeightSpec {
  std::string name;            // as in Hugging Face checkpoints: "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // the shape config.json implies, outermost first
  WeightRole role;
  int layer = -1;              // -1 for the tensors outside the layers
  bool optional = false;       // may be absent (lm_head when embeddings are tied)
  bool is_matrix() const { return shape.size() == 2; }
};

// Whether this architecture has a tensor of `role` at all (biases only for attention_bias,
// q/k norms only for qk_norm).
bool has_weight(const ModelConfig& config, WeightRole role);

// The tensor of `role` in `layer` (ignored for the global roles). Throws journey::Error when the
// architecture has no such tensor.
WeightSpec weight_spec(const ModelConfig& config, WeightRole role, int layer = -1);

// Every tensor of the model, in checkpoint order: the embedding, each layer's tensors, the final
// norm and the LM head (marked optional when tie_word_embeddings).
std::vector<WeightSpec> model_weights(const ModelConfig& config);

}  // namespace journey
