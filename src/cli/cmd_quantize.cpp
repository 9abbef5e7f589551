// journey quantize IN --type q4_k_m --out OUT.gguf [--pure] [--allow-requantize]
// Writes a GGUF file with GGML block types (quant/quantize_model.h does the work); on a terminal a
// progress bar follows the tensors, and the summary says what each tensor became.
//
// journey quantize DIR --type awq --calibration TRACE_DIR... --out OUT_DIR [--group-size 128] [--rtn]
// Writes an AutoAWQ checkpoint (quant/awq_model.h): INT4 with per-input-channel scales searched on the
// activations that `journey trace` recorded from the float model; the summary prints, per layer and
// group of linears, the alpha chosen and the output error against plain round-to-nearest.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "quant/awq_model.h"
#include "quant/quantize_model.h"
#include "quant/tensor_types.h"

namespace journey::cli {
namespace {

void draw_progress(const quant::QuantizeProgress& p) {
  constexpr int kWidth = 30;
  const double done = p.weights_total ? double(p.weights_done) / double(p.weights_total) : 1.0;
  const int filled = int(done * kWidth + 0.5);
  std::fprintf(stderr, "\r[%s%s] %3.0f%%  %zu/%zu  %-32.32s %s -> %-5s", std::string(size_t(filled), '#').c_str(),
               std::string(size_t(kWidth - filled), '.').c_str(), 100 * done, p.index + 1, p.count, p.tensor.c_str(),
               std::string(dtype_name(p.from)).c_str(), std::string(dtype_name(p.to)).c_str());
  if (p.index + 1 == p.count) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

void run_awq(const std::string& input, const std::string& output, const std::vector<std::string>& calibration,
             int64_t group, bool rtn) {
  quant::AwqQuantizeOptions options;
  options.input = input;
  options.output = output;
  for (const std::string& dir : calibration) options.calibration.push_back(dir);
  options.search.group = group;
  options.search.search = !rtn;
  if (::isatty(STDERR_FILENO))
    options.on_layer = [](int64_t l, int64_t n) {
      std::fprintf(stderr, "\rAWQ: layer %lld/%lld", (long long)(l + 1), (long long)n);
      if (l + 1 == n) std::fprintf(stderr, "\n");
    };
  const quant::AwqQuantizeReport r = quant::quantize_model_awq(options);
  if (r.calibration_tokens > 0)
    std::printf("calibration: %lld tokens in %zu sequences; error = mean squared difference from the float block's output, "
                "relative to its mean square\n",
                (long long)r.calibration_tokens, r.calibration_sequences);
  double rtn_total = 0, awq_total = 0;
  for (size_t l = 0; l < r.layers.size(); ++l)
    for (const quant::AwqScaleSearch& s : r.layers[l]) {
      if (!s.searched && s.errors.empty()) {
        std::printf("layer %zu %-22s skipped: %s\n", l, s.group.c_str(), s.skipped.c_str());
        continue;
      }
      const double power = s.output_power > 0 ? s.output_power : 1.0;
      rtn_total += s.rtn_error / power;
      awq_total += s.awq_error / power;
      std::printf("layer %zu %-22s error of %-9s RTN %.3e  %s %.3e  (alpha %.2f, x%.3f)%s\n", l, s.group.c_str(),
                  s.error_of.c_str(), s.rtn_error / power, rtn ? "RTN" : "AWQ", s.awq_error / power, s.alpha,
                  s.rtn_error > 0 ? s.awq_error / s.rtn_error : 1.0, s.skipped.empty() ? "" : "  [not scaled: GQA]");
    }
  if (!r.layers.empty())
    std::printf("sum of relative errors: RTN %.4e, %s %.4e (x%.3f)\n", rtn_total, rtn ? "RTN" : "AWQ", awq_total,
                rtn_total > 0 ? awq_total / rtn_total : 1.0);
  std::printf("wrote %s: %zu INT4 linear layers (group %lld, zero point, GEMM packing), %zu kept f16; %.2f MiB of "
              "tensors for %llu weights (%.2f bits per weight)\n",
              output.c_str(), r.quantized.size(), (long long)r.group, r.not_converted.size(),
              double(r.tensor_bytes) / (1 << 20), (unsigned long long)r.weights,
              r.weights ? 8.0 * double(r.tensor_bytes) / double(r.weights) : 0.0);
  for (const std::string& note : r.notes) std::printf("note: %s\n", note.c_str());
}

}  // namespace

void register_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "Write a model as a GGUF file with quantized weights (llama.cpp's types and rules)");
  struct Args {
    std::string input, output, type;
    bool pure = false, allow_requantize = false;
    int threads = 0;
    std::vector<std::string> calibration;  // awq
    int64_t group_size = 128;
    bool rtn = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("input", args->input, "a GGUF file, a Hugging Face directory or a llama2.c checkpoint")->required();
  cmd->add_option("--type", args->type, "file type: " + quant::recipe_names() + ", or awq (an AutoAWQ checkpoint directory)")->required();
  cmd->add_option("--out", args->output, "the .gguf file to write (awq: the directory)")->required();
  cmd->add_option("--calibration", args->calibration, "awq: journey trace dumps of the float model (attn_norm, attn_context, ffn_norm, act)");
  cmd->add_option("--group-size", args->group_size, "awq: input features per quantization group")->capture_default_str();
  cmd->add_flag("--rtn", args->rtn, "awq: no scale search, plain round-to-nearest INT4 in the same format (the baseline)");
  cmd->add_flag("--pure", args->pure, "every quantizable matrix gets the base type (no _M bumps, no Q6_K output)");
  cmd->add_flag("--allow-requantize", args->allow_requantize, "quantize tensors that are already quantized");
  cmd->add_option("--threads", args->threads, "threads that quantize a tensor's rows (0 = every core)")->check(CLI::NonNegativeNumber);
  cmd->callback([args] {
    if (args->type == "awq" || args->type == "AWQ") return run_awq(args->input, args->output, args->calibration, args->group_size, args->rtn);
    if (!args->calibration.empty() || args->rtn) fail("--calibration and --rtn belong to --type awq");
    quant::QuantizeOptions options;
    options.input = args->input;
    options.output = args->output;
    options.type = args->type;
    options.pure = args->pure;
    options.allow_requantize = args->allow_requantize;
    options.threads = args->threads;
    if (::isatty(STDERR_FILENO)) options.on_tensor_done = draw_progress;
    const quant::QuantizeReport r = quant::quantize_model(options);
    std::printf("wrote %s: %zu tensors, %llu weights, %.2f MiB of tensors from %.2f MiB (%.2f bits per weight)\n",
                args->output.c_str(), r.tensors, static_cast<unsigned long long>(r.weights), double(r.output_bytes) / (1 << 20),
                double(r.input_bytes) / (1 << 20), r.weights ? 8.0 * double(r.output_bytes) / double(r.weights) : 0.0);
    std::string types;
    for (const auto& [type, count] : r.type_counts) types += cat(types.empty() ? "" : ", ", dtype_name(type), " x ", count);
    std::printf("types: %s\n", types.c_str());
    for (const std::string& note : r.notes) std::printf("note: %s\n", note.c_str());
  });
}

}  // namespace journey::cli
