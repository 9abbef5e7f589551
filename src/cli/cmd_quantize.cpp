// journey quantize IN --type q4_k_m --out OUT.gguf [--pure] [--allow-requantize]
// Writes a GGUF file with GGML block types (quant/quantize_model.h does the work); on a terminal a
// progress bar follows the tensors, and the summary says what each tensor became.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
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

}  // namespace

void register_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "Write a model as a GGUF file with quantized weights (llama.cpp's types and rules)");
  struct Args {
    std::string input, output, type;
    bool pure = false, allow_requantize = false;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("input", args->input, "a GGUF file, a Hugging Face directory or a llama2.c checkpoint")->required();
  cmd->add_option("--type", args->type, "file type: " + quant::recipe_names())->required();
  cmd->add_option("--out", args->output, "the .gguf file to write")->required();
  cmd->add_flag("--pure", args->pure, "every quantizable matrix gets the base type (no _M bumps, no Q6_K output)");
  cmd->add_flag("--allow-requantize", args->allow_requantize, "quantize tensors that are already quantized");
  cmd->add_option("--threads", args->threads, "threads that quantize a tensor's rows (0 = every core)")->check(CLI::NonNegativeNumber);
  cmd->callback([args] {
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
