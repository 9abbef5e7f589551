// llama.cpp's tensor type rules for the llama architecture (see tensor_types.h for the summary).
#include "quant/tensor_types.h"

#include <cstdio>

#include "core/error.h"

namespace journey::quant {
namespace {

constexpr FileTypeRecipe kRecipes[] = {
    {"q8_0", "mostly q8_0", DType::Q8_0, Mix::None},
    {"q4_0", "mostly q4_0", DType::Q4_0, Mix::None},
    {"q4_1", "mostly q4_1", DType::Q4_1, Mix::None},
    {"q5_0", "mostly q5_0", DType::Q5_0, Mix::None},
    {"q5_1", "mostly q5_1", DType::Q5_1, Mix::None},
    {"q2_k", "mostly q2_k", DType::Q2_K, Mix::Q2_K},
    {"q3_k", "mostly q3_k_m", DType::Q3_K, Mix::Q3_K_M},  // llama-quantize: "alias for Q3_K_M"
    {"q3_k_m", "mostly q3_k_m", DType::Q3_K, Mix::Q3_K_M},
    {"q4_k", "mostly q4_k_m", DType::Q4_K, Mix::Q4_K_M},  // "alias for Q4_K_M"
    {"q4_k_m", "mostly q4_k_m", DType::Q4_K, Mix::Q4_K_M},
    {"q5_k", "mostly q5_k_m", DType::Q5_K, Mix::Q5_K_M},  // "alias for Q5_K_M"
    {"q5_k_m", "mostly q5_k_m", DType::Q5_K, Mix::Q5_K_M},
    {"q6_k", "mostly q6_k", DType::Q6_K, Mix::None},
    // llama-quantize's float targets: every 2-D weight converted, no mix rules (it applies them only
    // to quantized types), norms stay F32
    {"f32", "all f32", DType::F32, Mix::None},
    {"f16", "mostly f16", DType::F16, Mix::None},
    {"bf16", "mostly bf16", DType::BF16, Mix::None},
};

enum class Category { TokenEmbd, AttnV, AttnOutput, FfnDown, Output, Other };

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight") return Category::TokenEmbd;
  if (name.find("attn_v.weight") != std::string::npos) return Category::AttnV;
  if (name.find("attn_output.weight") != std::string::npos) return Category::AttnOutput;
  if (name.find("ffn_down") != std::string::npos) return Category::FfnDown;
  return Category::Other;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one between.
bool use_more_bits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

int64_t layer_of(const std::string& name) {
  int layer = -1;
  std::sscanf(name.c_str(), "blk.%d.", &layer);
  return layer;
}

bool allows_quantization(const TensorFacts& t) {
  if (t.n_dims < 2) return false;
  const std::string& n = t.gguf_name;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  return n.find("_norm.weight") == std::string::npos;
}

// The mix rules (llama_tensor_get_type_impl), for the file types journey offers.
DType mix_rules(const FileTypeRecipe& r, const TensorFacts& t, const ModelFacts& m) {
  DType type = r.base;
  const Category c = category_of(t.gguf_name);
  const int64_t layer = layer_of(t.gguf_name), n = m.num_layers;
  if (c == Category::Output || (!m.has_output && c == Category::TokenEmbd)) {
    if (t.row_length % dtype_block_size(type) != 0) return DType::Q8_0;
    return type == DType::Q8_0 ? DType::Q8_0 : DType::Q6_K;
  }
  switch (c) {
    case Category::AttnV:
      if (r.mix == Mix::Q2_K) type = m.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
      else if (r.mix == Mix::Q3_K_M) type = layer < 2 ? DType::Q5_K : DType::Q4_K;
      else if ((r.mix == Mix::Q4_K_M || r.mix == Mix::Q5_K_M) && use_more_bits(layer, n)) type = DType::Q6_K;
      if (m.is_70b && (type == DType::Q3_K || type == DType::Q4_K)) type = DType::Q5_K;
      return type;
    case Category::FfnDown:
      if (r.mix == Mix::Q2_K) return DType::Q3_K;
      if (r.mix == Mix::Q3_K_M) return layer < n / 16 ? DType::Q5_K : DType::Q4_K;
      if ((r.mix == Mix::Q4_K_M || r.mix == Mix::Q5_K_M) && use_more_bits(layer, n)) return DType::Q6_K;
      return type;
    case Category::AttnOutput:
      if (r.mix == Mix::Q2_K) return DType::Q3_K;
      if (r.mix == Mix::Q3_K_M) return DType::Q4_K;
      return type;
    default:
      return type;
  }
}

// tensor_type_fallback: rows that are not whole blocks of the chosen type.
DType fallback_for(DType type, int64_t row_length, std::string* note) {
  if (row_length % dtype_block_size(type) == 0) return type;
  DType next;
  switch (type) {
    case DType::Q2_K: case DType::Q3_K: next = DType::Q4_0; break;
    case DType::Q4_K: next = DType::Q5_0; break;
    case DType::Q5_K: next = DType::Q5_1; break;
    case DType::Q6_K: next = DType::Q8_0; break;
    default: next = DType::F16; break;  // legacy types: llama.cpp refuses; journey keeps F16
  }
  if (row_length % dtype_block_size(next) != 0) next = DType::F16;
  *note = cat("row length ", row_length, " is not a multiple of the ", dtype_name(type), " block size ",
              dtype_block_size(type), ": ", dtype_name(next), " instead");
  return next;
}

}  // namespace

std::optional<FileTypeRecipe> find_recipe(std::string_view name) {
  for (const FileTypeRecipe& r : kRecipes) {
    if (r.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i)
      same &= r.name[i] == ((name[i] >= 'A' && name[i] <= 'Z') ? char(name[i] - 'A' + 'a') : name[i]);
    if (same) return r;
  }
  return std::nullopt;
}

std::string recipe_names() {
  std::string out;
  for (const FileTypeRecipe& r : kRecipes) out += cat(out.empty() ? "" : ", ", r.name);
  return out;
}

TypeChoice choose_tensor_type(const FileTypeRecipe& recipe, bool pure, const TensorFacts& tensor, const ModelFacts& model) {
  if (!allows_quantization(tensor)) return {tensor.current, false, ""};
  const bool base_only = pure || !dtype_is_quantized(recipe.base);  // llama.cpp: mixes only for quantized types
  TypeChoice choice{base_only ? recipe.base : mix_rules(recipe, tensor, model), true, ""};
  choice.type = fallback_for(choice.type, tensor.row_length, &choice.fallback_note);
  return choice;
}

}  // namespace journey::quant
