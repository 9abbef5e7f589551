// AWQ's activation-aware scale search (Lin et al. 2023, "AWQ: Activation-aware Weight Quantization";
// AutoAWQ's AwqQuantizer._search_best_scale), written from AutoAWQ's source for journey's llama layers.
//
// A few input channels of a linear layer carry much larger activations than the rest, and the weights
// that multiply them matter most. AWQ multiplies every input column i of W by a scale s_i before
// quantizing and divides the layer's input by s_i (folded into the op before it: an RMSNorm's weight or
// the previous linear's rows), so the product is unchanged in exact arithmetic while the important
// columns get finer quantization steps:
//
//   y = W x = (W diag(s)) (diag(s)^-1 x)     and W diag(s) is what gets quantized to INT4
//
// The scales come from the calibration activations x (rows = tokens): s = mean_t |x_t|^alpha,
// normalized by sqrt(max(s) min(s)); alpha runs over a grid 0, 1/20, ..., 19/20, and the alpha whose
// quantized block gives the smallest mean squared error of its output against the float block wins.
// alpha = 0 gives s = 1, plain round-to-nearest (RTN), so the search can only improve on RTN over the
// calibration set; awq_error <= rtn_error is what the report shows.
//
// Four groups per llama layer (AutoAWQ's LlamaAWQForCausalLM.get_layers_for_scaling):
//   input_layernorm         -> q_proj, k_proj, v_proj   error of the whole attention block (o_proj float)
//   v_proj                  -> o_proj                   only when there is no GQA (v and o are [E, E])
//   post_attention_layernorm-> gate_proj, up_proj       error of the whole MLP (down_proj float)
//   up_proj                 -> down_proj                error of down_proj alone
// Every group is searched on the float layer's inputs, then all scales are applied at once, as AutoAWQ
// does. The inputs are what journey's own trace records: attn_norm (q/k/v's input), attn_context
// (o_proj's), ffn_norm (gate/up's), act (down_proj's), read from `journey trace` dumps of the float model.
//
// Not done here: AutoAWQ's clipping search (auto_clip: shrinking each row's range before quantizing) and
// its duo_scaling variant (s = x^alpha / w^(1-alpha)); this is the paper's s = x^alpha search.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/config.h"

namespace journey {
class Backend;
}

namespace journey::quant {

// The calibration activations of one decoder layer, rows of every calibration sequence concatenated.
struct AwqLayerInputs {
  int64_t rows = 0;                // N tokens
  std::vector<float> attn_norm;    // [N, E]    input of q_proj, k_proj, v_proj
  std::vector<float> attn_context; // [N, H*D]  input of o_proj
  std::vector<float> ffn_norm;     // [N, E]    input of gate_proj, up_proj
  std::vector<float> act;          // [N, F]    input of down_proj
};

// A set of `journey trace` dumps of the float model, read one layer at a time (a layer's inputs
// over all sequences are in memory at once, never the whole model's).
class AwqCalibration {
 public:
  // Checks every dump before anything is read: its manifest, that it was recorded from the model
  // at `model_path` (the manifest's model hash), that every step of one sequence is there (positions
  // 0, 1, 2, ... without gaps) and that the four stages exist for every layer and step with the
  // shapes `config` implies. Throws journey::Error naming the dump, step, stage and the numbers.
  static AwqCalibration open(const std::vector<std::filesystem::path>& dumps, const ModelConfig& config,
                             const std::filesystem::path& model_path);
  AwqLayerInputs layer(int64_t l) const;
  int64_t tokens() const { return tokens_; }
  // Rows of each sequence, in order: sequence i is rows [row_begin[i], row_begin[i+1]) at positions 0, 1, ...
  const std::vector<int64_t>& row_begin() const { return row_begin_; }
  size_t sequences() const { return dumps_.size(); }

 private:
  struct Dump {
    std::filesystem::path dir;
    std::vector<int> steps;  // step numbers in order
  };
  ModelConfig config_;
  std::vector<Dump> dumps_;
  std::vector<int64_t> row_begin_;
  int64_t tokens_ = 0;
};

// Records calibration dumps with a backend: each text window (token ids, BOS first) runs as one
// prefill, and its dump keeps attn_norm, attn_context, ffn_norm and act of every layer — what
// `journey trace PROMPT --stages attn_norm,attn_context,ffn_norm,act --max-tokens 1` writes.
// Returns the dump directories (out_dir/calib-000, ...).
std::vector<std::filesystem::path> record_awq_calibration(Backend& backend, const std::filesystem::path& model_path,
                                                          const std::vector<std::vector<int32_t>>& windows,
                                                          const std::filesystem::path& out_dir);

// The weights of one llama decoder layer in f32, [out, in] for the linears.
struct AwqLayerWeights {
  std::vector<float> attn_norm, ffn_norm;      // [E]
  std::vector<float> q, k, v, o;               // [H*D, E], [KVH*D, E], [KVH*D, E], [E, H*D]
  std::vector<float> gate, up, down;           // [F, E], [F, E], [E, F]
};

struct AwqSearchOptions {
  int64_t group = 128;  // inputs per quantization group
  int grid = 20;        // alpha = 0, 1/grid, ..., (grid-1)/grid
  bool search = true;   // false: every scale 1 (plain round-to-nearest INT4, the baseline)
};

// Which of the layer's seven linears will be stored in INT4 (in % group == 0 and out % 8 == 0);
// the others stay in f16 and are not counted in a group's error.
struct AwqQuantizable {
  bool q = false, k = false, v = false, o = false, gate = false, up = false, down = false;
};
AwqQuantizable awq_quantizable(const ModelConfig& config, int64_t group);

// One group of linears that share an input, and what the search found for it.
struct AwqScaleSearch {
  std::string group;            // "q_proj,k_proj,v_proj"
  std::string error_of;         // whose output the error is measured on: "self_attn", "mlp", "o_proj", "down_proj"
  bool searched = false;        // false: not searched (skipped says why)
  std::string skipped;
  int best = 0;                 // alpha = best / grid
  double alpha = 0;
  double rtn_error = 0;         // mean squared output error with every scale 1 (alpha = 0: plain RTN)
  double awq_error = 0;         // the same with the chosen scales
  double output_power = 0;      // mean square of the float output: error / output_power is the relative error
  std::vector<double> errors;   // [grid] the error at every alpha
  std::vector<float> scales;    // [in] (empty when not searched)
};

// Searches the layer's four groups on its calibration inputs and applies the scales to `w` in place:
// the norm weights (or v_proj's / up_proj's rows) are divided by s, the linears' columns multiplied.
// `row_begin` splits the rows into sequences for the attention block (each at positions 0, 1, ...).
std::vector<AwqScaleSearch> search_and_apply_awq_scales(AwqLayerWeights& w, const ModelConfig& config,
                                                        const AwqLayerInputs& inputs,
                                                        std::span<const int64_t> row_begin,
                                                        const AwqQuantizable& quantizable,
                                                        const AwqSearchOptions& options);

// W diag(s) quantized and divided by s again, [out, in]: what the block computes with during the search.
std::vector<float> awq_fake_quantize(std::span<const float> weight, int64_t out, int64_t in, std::span<const float> scales,
                                     int64_t group);

}  // namespace journey::quant
