// A Hugging Face model into an AutoAWQ GEMM checkpoint (see awq_model.h).
#include "quant/awq_model.h"

#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "assets/model.h"
#include "assets/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/model_weights.h"
#include "quant/awq.h"

namespace journey::quant {
namespace {

namespace fs = std::filesystem;

// The files of a Hugging Face directory that travel with the weights unchanged.
constexpr const char* kCompanionFiles[] = {"tokenizer.json",        "tokenizer.model",    "tokenizer_config.json",
                                           "special_tokens_map.json", "added_tokens.json", "vocab.json",
                                           "merges.txt",            "generation_config.json", "chat_template.jinja",
                                           "chat_template.json"};

// Owns the bytes of the tensors to be written, in checkpoint order.
class TensorList {
 public:
  template <typename T>
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<T> values) {
    auto& bytes = storage_.emplace_back(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    TensorRef t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = bytes.data();
    t.nbytes = bytes.size();
    tensors_.push_back(std::move(t));
  }
  void add_f16(std::string name, std::vector<int64_t> shape, const std::vector<float>& values) {
    std::vector<uint16_t> half(values.size());
    for (size_t i = 0; i < values.size(); ++i) half[i] = f32_to_f16(values[i]);
    add(std::move(name), DType::F16, std::move(shape), std::move(half));
  }
  const std::vector<TensorRef>& tensors() const { return tensors_; }
  uint64_t bytes() const {
    uint64_t total = 0;
    for (const TensorRef& t : tensors_) total += t.nbytes;
    return total;
  }

 private:
  std::deque<std::vector<std::byte>> storage_;
  std::vector<TensorRef> tensors_;
};

std::string module_of(const std::string& weight_name) {  // "x.q_proj.weight" -> "x.q_proj"
  return weight_name.substr(0, weight_name.size() - std::string(".weight").size());
}

}  // namespace

AwqQuantizeReport quantize_model_awq(const AwqQuantizeOptions& o) {
  const std::string where = o.input.string();
  if (!fs::is_directory(o.input) || !fs::exists(o.input / "config.json"))
    fail(where, ": AWQ quantizes Hugging Face directories (config.json + safetensors), as AutoAWQ does; convert a "
                "llama2.c checkpoint first with `journey convert llama2c`");
  if (read_awq_config(o.input / "config.json")) fail(where, ": already an AWQ checkpoint");
  if (fs::exists(o.output)) fail(o.output.string(), ": already exists; AWQ writes a new directory (remove it or choose another --out)");
  const LoadedModel model = load_model(o.input);
  const ModelConfig& c = model.config;
  if (c.architecture != "llama" && c.architecture != "mistral")
    fail(where, ": model_type ", c.architecture, "; AWQ here handles llama and mistral layers");
  if (o.search.group <= 0) fail("AWQ: group size ", o.search.group, " must be positive");

  AwqQuantizeReport report;
  report.group = o.search.group;
  std::optional<AwqCalibration> calibration;
  if (!o.calibration.empty()) calibration = AwqCalibration::open(o.calibration, c, o.input);
  else if (o.search.search) fail("AWQ: the scale search needs calibration dumps (--calibration); --rtn quantizes without");
  if (calibration) {
    report.calibration_tokens = calibration->tokens();
    report.calibration_sequences = calibration->sequences();
  }
  const AwqQuantizable qz = awq_quantizable(c, o.search.group);

  TensorList out;
  // the tensors outside the layers: f16, unquantized (AutoAWQ keeps them in the model's dtype);
  // checkpoint order: the embedding, the layers, the final norm and the LM head
  auto add_global = [&](bool embedding) {
    for (const WeightSpec& spec : model_weights(c)) {
      if (spec.layer >= 0 || (spec.role == WeightRole::token_embedding) != embedding) continue;
      if (spec.optional && !model.weights.has(spec.name)) continue;
      out.add_f16(spec.name, spec.shape, model.weights.get(spec.name).to_f32());
    }
  };
  for (const WeightSpec& spec : model_weights(c)) {
    if (spec.optional && !model.weights.has(spec.name)) continue;
    report.weights += uint64_t(model.weights.get(spec.name).numel());
  }
  add_global(true);

  for (int64_t l = 0; l < c.num_layers; ++l) {
    auto get = [&](WeightRole role) { return model.weights.get(weight_spec(c, role, int(l)).name).to_f32(); };
    AwqLayerWeights w{get(WeightRole::attn_norm), get(WeightRole::ffn_norm), get(WeightRole::q_proj),
                      get(WeightRole::k_proj),    get(WeightRole::v_proj),   get(WeightRole::o_proj),
                      get(WeightRole::gate_proj), get(WeightRole::up_proj),  get(WeightRole::down_proj)};
    if (calibration)
      report.layers.push_back(
          search_and_apply_awq_scales(w, c, calibration->layer(l), calibration->row_begin(), qz, o.search));
    const std::map<WeightRole, std::pair<std::vector<float>*, bool>> values = {
        {WeightRole::attn_norm, {&w.attn_norm, false}}, {WeightRole::ffn_norm, {&w.ffn_norm, false}},
        {WeightRole::q_proj, {&w.q, qz.q}},             {WeightRole::k_proj, {&w.k, qz.k}},
        {WeightRole::v_proj, {&w.v, qz.v}},             {WeightRole::o_proj, {&w.o, qz.o}},
        {WeightRole::gate_proj, {&w.gate, qz.gate}},    {WeightRole::up_proj, {&w.up, qz.up}},
        {WeightRole::down_proj, {&w.down, qz.down}}};
    for (const WeightSpec& spec : model_weights(c)) {
      if (spec.layer != int(l)) continue;
      const auto it = values.find(spec.role);
      if (it == values.end()) fail(where, ": ", spec.name, " (", weight_role_name(spec.role), ") is not a llama layer tensor AWQ knows");
      const auto [weights, quantized] = it->second;
      if (!spec.is_matrix()) {
        out.add_f16(spec.name, spec.shape, *weights);
        continue;
      }
      const std::string module = module_of(spec.name);
      if (!quantized) {
        out.add_f16(spec.name, spec.shape, *weights);
        report.not_converted.push_back(module);
        continue;
      }
      const int64_t rows = spec.shape[0], cols = spec.shape[1];
      const AwqGemmTensors packed = pack_awq_gemm(quantize_awq_linear(weights->data(), rows, cols, o.search.group));
      out.add(module + ".qweight", DType::I32, {cols, rows / 8}, packed.qweight);
      out.add(module + ".qzeros", DType::I32, {cols / o.search.group, rows / 8}, packed.qzeros);
      out.add(module + ".scales", DType::F16, {cols / o.search.group, rows}, packed.scales);
      report.quantized.push_back(module);
    }
    if (o.on_layer) o.on_layer(l, c.num_layers);
  }
  add_global(false);
  report.tensor_bytes = out.bytes();

  // written as OUT.partial and renamed when complete; a failure leaves nothing behind
  const fs::path partial = o.output.string() + ".partial";
  fs::remove_all(partial);
  fs::create_directories(partial);
  try {
    write_safetensors(partial / "model.safetensors", out.tensors(), {{"format", "pt"}, {"quant_method", "awq"}});
    nlohmann::ordered_json config = nlohmann::ordered_json::parse(std::ifstream(o.input / "config.json"), nullptr, false);
    if (config.is_discarded() || !config.is_object()) fail(where, "/config.json: not a JSON object");
    nlohmann::ordered_json not_converted = nullptr;
    if (!report.not_converted.empty()) not_converted = report.not_converted;
    config["torch_dtype"] = "float16";
    config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4},         {"group_size", o.search.group},
                                     {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", not_converted}};
    std::ofstream(partial / "config.json") << config.dump(2) << "\n";
    if (!std::ofstream(partial / "config.json", std::ios::app)) fail(partial.string(), "/config.json: cannot be written");
    for (const char* name : kCompanionFiles)
      if (fs::exists(o.input / name)) fs::copy_file(o.input / name, partial / name);
    fs::rename(partial, o.output);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    throw;
  }
  report.file_bytes = fs::file_size(o.output / "model.safetensors");
  if (!report.not_converted.empty())
    report.notes.push_back(cat(report.not_converted.size(), " linear layers stay f16: inputs not a multiple of the group size ",
                               o.search.group, " or outputs not a multiple of 8 (listed in modules_to_not_convert)"));
  return report;
}

uint64_t awq_checkpoint_bytes(const ModelConfig& c, int64_t group) {
  const AwqQuantizable qz = awq_quantizable(c, group);
  const std::map<WeightRole, bool> int4 = {{WeightRole::q_proj, qz.q},       {WeightRole::k_proj, qz.k},
                                           {WeightRole::v_proj, qz.v},       {WeightRole::o_proj, qz.o},
                                           {WeightRole::gate_proj, qz.gate}, {WeightRole::up_proj, qz.up},
                                           {WeightRole::down_proj, qz.down}};
  uint64_t bytes = 0;
  for (const WeightSpec& spec : model_weights(c)) {
    if (spec.optional && c.tie_word_embeddings) continue;
    const auto it = int4.find(spec.role);
    if (it != int4.end() && it->second) {
      const uint64_t out = uint64_t(spec.shape[0]), in = uint64_t(spec.shape[1]), groups = in / uint64_t(group);
      bytes += in * out / 2 + groups * out / 2 + groups * out * 2;
    } else {
      uint64_t n = 1;
      for (int64_t d : spec.shape) n *= uint64_t(d);
      bytes += 2 * n;
    }
  }
  return bytes;
}

}  // namespace journey::quant
