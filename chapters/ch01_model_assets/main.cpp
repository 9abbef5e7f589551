// Chapter 1 — what is in a model directory.
// Runs the same inspection as `journey inspect` and then checks the one fact every reader should
// be able to derive by hand: the parameter count follows from config.json alone. Then it plans
// memory for two models nobody here has downloaded, from their published config.json alone
// (Llama 2 7B and 70B): weights, KV cache per token, sequences that fit in a GPU.
#include <cstdio>
#include <filesystem>
#include <fstream>
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

  // Planning before downloading: config.json alone (Meta's published Llama 2 configurations).
  struct Planned { const char* name; const char* config; int64_t published; };
  const Planned planned[] = {
      {"llama-2-7b", R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
         "max_position_embeddings": 4096, "torch_dtype": "float16"})", 6738415616},
      {"llama-2-70b", R"({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
         "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 32000,
         "max_position_embeddings": 4096, "torch_dtype": "float16"})", 68976648192}};
  std::cout << "\nPlanning from config.json alone (bf16 weights, f16 KV cache, sequences of 4096 tokens):\n";
  bool plans_ok = true;
  for (const Planned& p : planned) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "journey-ch01" / p.name;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << p.config;
    const InspectReport plan = inspect_model(dir);  // no weights in dir: sizes from the config
    const int64_t by_hand = parameters_from_config(plan.config);
    std::printf("  %s: %.2f billion parameters -> %.2f GB of weights; KV cache %llu bytes per token, "
                "%.2f GB per sequence\n", p.name, plan.parameters / 1e9, plan.bytes_bf16 / 1e9,
                (unsigned long long)plan.kv_bytes_per_token_f16, plan.kv_bytes_per_token_f16 * 4096 / 1e9);
    for (const char* budget : {"24GB", "80GB"}) {
      const MemoryFit fit = fit_in_memory(parse_memory_size(budget), plan.bytes_bf16, plan.kv_bytes_per_token_f16, 4096);
      if (fit.weights_fit) std::printf("      in %s: %lld sequences\n", budget, (long long)fit.sequences);
      else std::printf("      in %s: the weights alone do not fit\n", budget);
    }
    plans_ok = plans_ok && plan.parameters == p.published && by_hand == p.published;
  }
  if (!plans_ok) {
    std::cerr << "MISMATCH: a planned parameter count differs from the published one\n";
    return 1;
  }
  return 0;
} catch (const journey::Error& e) {
  std::cerr << "ch01: " << e.what() << "\n";
  return 1;
}
