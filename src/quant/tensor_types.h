// Which tensor gets which type: llama.cpp's rules (llama-quant.cpp, llama_tensor_get_type) for the
// llama architecture, so that `journey quantize --type X` writes the mix `llama-quantize IN OUT X` writes.
//
// A "file type" (llama.cpp's llama_ftype) names a recipe: a base type plus rules that give a few
// sensitive tensors more bits. The rules journey follows (no importance matrix, no experts):
//   - only 2-D weights are quantized; 1-D tensors (norms) and *_norm.weight keep their type;
//   - the output matrix (or the token embedding when it doubles as output) gets Q6_K, or Q8_0 when
//     its rows are not whole blocks of the base type or the base type is Q8_0;
//   - the _M mixes bump attn_v and ffn_down of some layers ("use_more_bits": the first and last
//     eighth and every third layer between) to Q6_K (Q4_K_M, Q5_K_M) or Q5_K/Q4_K (Q3_K_M), and
//     Q3_K_M gives attn_output Q4_K; Q2_K gives attn_v Q3_K (Q4_K with 4+ query heads per KV head),
//     ffn_down Q3_K and attn_output Q3_K;
//   - `pure` skips all of that: every quantizable matrix gets the base type;
//   - a row length that is not whole blocks falls back: Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0,
//     Q5_K -> Q5_1, Q6_K -> Q8_0, and to F16 if the fallback does not fit either. For legacy types
//     llama.cpp has no fallback and refuses the model; journey keeps such a tensor in F16 (stories260K's
//     ffn_down rows of 172 need this) and reports it.
// As in llama-quantize, "q3_k", "q4_k" and "q5_k" are the _M mixes; "f32", "f16" and "bf16" convert every
// quantizable matrix (no mix rules: llama.cpp applies them to quantized types only).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace journey::quant {

enum class Mix { None, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M };

struct FileTypeRecipe {
  std::string_view name;       // as given to --type: "q4_k_m"
  std::string_view file_type;  // GGUF general.file_type name (assets/gguf.h): "mostly q4_k_m"
  DType base;                  // the type most matrices get
  Mix mix;
};

// nullopt for names it does not know; recipe_names() lists them for messages.
std::optional<FileTypeRecipe> find_recipe(std::string_view name);
std::string recipe_names();  // "q8_0, q4_0, ..."

// What the rules need to know about one tensor (GGUF names and ggml's innermost-first dimensions).
struct TensorFacts {
  std::string gguf_name;     // "blk.3.attn_v.weight"
  int64_t row_length = 0;    // ne[0]: the number of weights per row
  int n_dims = 0;
  DType current = DType::F32;  // its type in the source
};

// What they need to know about the model.
struct ModelFacts {
  int64_t num_layers = 0;
  bool has_output = true;   // an output.weight exists (otherwise token_embd.weight is also the output)
  int64_t n_gqa = 1;        // query heads per KV head (Q2_K gives attn_v Q4_K instead of Q3_K from 4 on)
  bool is_70b = false;      // llama.cpp's LLM_TYPE_70B (80 layers with GQA): attn_v gets Q5_K for Q3_K/Q4_K
};

struct TypeChoice {
  DType type;
  bool quantized;            // false: the tensor keeps its type (norms, 1-D tensors)
  std::string fallback_note; // non-empty when the rows forced a fallback type ("row length 172 ...")
};

TypeChoice choose_tensor_type(const FileTypeRecipe& recipe, bool pure, const TensorFacts& tensor, const ModelFacts& model);

}  // namespace journey::quant
