// Chapter 1 — what is in a model directory.
// Runs the same inspection as `journey inspect` and then checks the one fact every reader should
// be able to derive by hand: the parameter count follows from config.json alone.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "assets/inspect.h"
#include "core/error.h"

using namespace journey;

// Parameters a Llama-family decoder has, from its config alone (the lesson of this chapter).
static int64_t parameters_from_config(const ModelConfig& c) {
  const int64_t E = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t per_layer = 2 * E                          // input_layernorm + post_attention_layernorm
                            + E * c.q_dim()                // q_proj
                            + 2 * E * c.kv_dim()           // k_proj, v_proj
                            + c.q_dim() * E                // o_proj
                            + 3 * E * F                    // gate_proj, up_proj, down_proj
                            + (c.attention_bias ? c.q_dim() + 2 * c.kv_dim() : 0)  // Qwen2 biases
                            + (c.qk_norm ? 2 * c.head_dim : 0);                     // Qwen3 q/k norms
  return V * E                                  // embed_tokens
         + c.num_layers * per_layer + E         // layers + final norm
         + (c.tie_word_embeddings ? 0 : V * E);  // lm_head unless shared
}

int main(int argc, char** argv) try {
  const std::filesystem::path model = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const InspectReport report = inspect_model(model);
  const ModelConfig& c = report.config;

  std::cout << "# Chapter 1: what is in " << model.filename().string() << "\n\n";
  std::cout << "Files and what they are for:\n";
  for (const FileRole& f : report.files)
    std::printf("  %-28s %-18s %10llu bytes\n", f.path.filename().string().c_str(), f.role.c_str(),
                static_cast<unsigned long long>(f.bytes));

  std::cout << "\nThe architecture (config.json):\n";
  std::printf("  %s: %lld layers, hidden %lld, %lld query heads and %lld key/value heads of dim %lld,\n"
              "  FFN %lld, vocabulary %lld, context %lld, RoPE theta %.0f, embeddings %s\n",
              c.architecture.c_str(), (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads,
              (long long)c.num_kv_heads, (long long)c.head_dim, (long long)c.intermediate_size,
              (long long)c.vocab_size, (long long)c.max_position_embeddings, c.rope_theta,
              c.tie_word_embeddings ? "tied to the LM head" : "separate from the LM head");

  std::cout << "\nThe tensors of layer 0 and the global ones:\n";
  for (const TensorSummary& t : report.tensors) {
    if (t.name.find("layers.") != std::string::npos && t.name.find("layers.0.") == std::string::npos) continue;
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    std::printf("  %-46s [%s] %s\n", t.name.c_str(), shape.c_str(), std::string(dtype_name(t.dtype)).c_str());
  }

  const int64_t expected = parameters_from_config(c);
  std::printf("\nParameters: %lld in the file, %lld derived from config.json by hand.\n",
              (long long)report.parameters, (long long)expected);
  std::printf("Memory for the weights: f32 %.2f MB, bf16 %.2f MB, int8 (q8_0) %.2f MB, int4 (q4_0) %.2f MB\n",
              report.bytes_f32 / 1e6, report.bytes_bf16 / 1e6, report.bytes_q8_0 / 1e6, report.bytes_q4_0 / 1e6);
  if (expected != report.parameters) {
    std::cerr << "MISMATCH: the file holds a different number of parameters than the config implies\n";
    return 1;
  }
  return 0;
} catch (const journey::Error& e) {
  std::cerr << "ch01: " << e.what() << "\n";
  return 1;
}
