// Each `journey` subcommand registers itself on the CLI11 app from its own file (cmd_*.cpp),
// so commands can grow independently. main.cpp only lists them.
#pragma once
#include <CLI/CLI.hpp>

namespace journey::cli {

void register_inspect(CLI::App& app);
void register_convert(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_template(CLI::App& app);
void register_generate(CLI::App& app);
void register_chat(CLI::App& app);
void register_bench(CLI::App& app);
void register_serve(CLI::App& app);
void register_trace(CLI::App& app);
void register_quantize(CLI::App& app);
void register_perplexity(CLI::App& app);

// The model every command uses when --model is not given: the shipped stories260K.
const char* default_model_path();

}  // namespace journey::cli
