// The architecture of a decoder-only transformer, as journey understands it. Every loader
// (HF config.json, llama2.c header, GGUF metadata) fills this one struct; every backend reads it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace journey {

// How rotary embeddings pair up the dimensions of a head.
//  - HalfSplit:   dimension i rotates with i + head_dim/2 (Hugging Face checkpoints, "rotate_half").
//  - Interleaved: dimension 2i rotates with 2i+1 (Meta / llama2.c checkpoints, GGUF).
// The loader decides; converting between them permutes the rows of q_proj/k_proj.
enum class RopeLayout { HalfSplit, Interleaved };

struct ModelConfig {
  std::string architecture;       // "llama", "mistral", "qwen2", "qwen3" (HF model_type)
  int64_t hidden_size = 0;        // dim of the residual stream
  int64_t intermediate_size = 0;  // FFN hidden dim
  int64_t num_layers = 0;
  int64_t num_heads = 0;          // query heads
  int64_t num_kv_heads = 0;       // key/value heads (GQA when < num_heads)
  int64_t head_dim = 0;           // usually hidden_size / num_heads (Qwen3 sets it explicitly)
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;  // context length
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;  // LM head shares the token embedding matrix
  bool attention_bias = false;       // Qwen2: q/k/v projections carry biases
  bool qk_norm = false;              // Qwen3: per-head RMSNorm on q and k before RoPE
  RopeLayout rope_layout = RopeLayout::HalfSplit;
  std::string torch_dtype;           // as declared by the checkpoint ("float32", "bfloat16", ...), informative
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
};

// Sampling defaults a checkpoint ships in generation_config.json (all optional).
struct GenerationConfig {
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<bool> do_sample;
};

}  // namespace journey
