// journey convert llama2c CHECKPOINT.bin --tokenizer tokenizer.model --out DIR [--dtype f32|f16|bf16]
// Turns a llama2.c checkpoint into a Hugging Face Llama directory (see assets/convert.h for the
// RoPE row permutation this involves).
#include <iostream>

#include "assets/convert.h"
#include "cli/commands.h"
#include "core/error.h"

namespace journey::cli {

void register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Convert a model into a Hugging Face directory");
  cmd->require_subcommand(1);

  auto* llama2c = cmd->add_subcommand("llama2c", "llama2.c checkpoint (.bin, version 0/1/2) -> Hugging Face Llama directory");
  struct Args {
    std::string checkpoint, tokenizer, out, dtype = "f32";
  };
  auto args = std::make_shared<Args>();
  llama2c->add_option("checkpoint", args->checkpoint, "llama2.c checkpoint (.bin)")->required();
  llama2c->add_option("--tokenizer", args->tokenizer, "SentencePiece tokenizer.model to copy into the directory");
  llama2c->add_option("--out", args->out, "output directory")->required();
  llama2c->add_option("--dtype", args->dtype, "dtype of model.safetensors")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  llama2c->callback([args] {
    ConvertLlama2cOptions options;
    options.checkpoint = args->checkpoint;
    if (!args->tokenizer.empty()) options.tokenizer_model = args->tokenizer;
    options.out_dir = args->out;
    options.dtype = args->dtype == "f16" ? DType::F16 : args->dtype == "bf16" ? DType::BF16 : DType::F32;
    for (const auto& path : convert_llama2c_to_hf(options)) std::cout << "wrote " << path.string() << "\n";
    if (args->tokenizer.empty()) std::cout << "note: no --tokenizer given; the directory has no tokenizer\n";
  });
}

}  // namespace journey::cli
