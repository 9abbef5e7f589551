// What `journey generate` and `journey chat` share: the model/sampling/stop flags, how their
// defaults are chosen, loading model + tokenizer + CPU backend, and the summary line.
// Header-only so that the two commands (one file each) can include it without a CMake change.
//
// Defaults (docs/sampling.md): llama.cpp's sampling defaults (temperature 0.8, top_k 40,
// top_p 0.95, min_p 0.05, no penalties); a model's generation_config.json overrides them (as vLLM
// does); a flag given on the command line overrides both.
#pragma once
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "assets/model.h"
#include "cli/backend_select.h"
#include "cli/commands.h"
#include "backend/backend.h"
#include "engine/generate.h"
#include "cpu/cpu_backend.h"
#include "core/untrusted.h"
#include "grammar/grammar.h"
#include "sampling/params.h"
#include "text/tokenizer.h"

namespace journey::cli {

struct GenerationFlags {
  std::string model = default_model_path();
  std::string tokenizer;  // empty = the model path
  int threads = 0;
  std::string device = "cpu";  // cpu | cuda | cuda:bf16 | cuda:f16 | cuda:f32
  int64_t max_tokens = 256;
  double temperature = 0.8, top_p = 0.95, min_p = 0.05;
  int top_k = 40;
  double repetition_penalty = 1.0, frequency_penalty = 0.0, presence_penalty = 0.0;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::string system;
  BackendFlags backend;  // --kv-cache-dtype, --no-mmap (threads: the field above)
  // Structured output (generate, trace): --json (any JSON object) or --json-schema FILE.
  bool json_object = false;
  std::string json_schema_file;

  // Filled by add_generation_flags: to tell "given on the command line" from "default".
  CLI::Option* temperature_opt = nullptr;
  CLI::Option* top_k_opt = nullptr;
  CLI::Option* top_p_opt = nullptr;
  CLI::Option* min_p_opt = nullptr;
  CLI::Option* repetition_penalty_opt = nullptr;
};

inline void add_generation_flags(CLI::App* cmd, GenerationFlags& f) {
  cmd->add_option("--model", f.model, "model directory or file (default: the shipped stories260K)");
  cmd->add_option("--tokenizer", f.tokenizer, "tokenizer path, if not with the model (e.g. llama2.c tokenizer.bin)");
  cmd->add_option("--threads", f.threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", f.device, device_flag_help())->capture_default_str();
  cmd->add_option("--max-tokens", f.max_tokens, "most tokens to generate")->capture_default_str();
  f.temperature_opt = cmd->add_option("--temperature", f.temperature, "0 = greedy")->capture_default_str();
  f.top_k_opt = cmd->add_option("--top-k", f.top_k, "keep the k most likely tokens (0 = off)")->capture_default_str();
  f.top_p_opt = cmd->add_option("--top-p", f.top_p, "nucleus mass, in (0, 1] (1 = off)")->capture_default_str();
  f.min_p_opt = cmd->add_option("--min-p", f.min_p, "keep p >= min_p * p_max (0 = off)")->capture_default_str();
  f.repetition_penalty_opt =
      cmd->add_option("--repetition-penalty", f.repetition_penalty, "HF repetition penalty (1 = off)")->capture_default_str();
  cmd->add_option("--frequency-penalty", f.frequency_penalty, "OpenAI frequency penalty in [-2, 2]")->capture_default_str();
  cmd->add_option("--presence-penalty", f.presence_penalty, "OpenAI presence penalty in [-2, 2]")->capture_default_str();
  cmd->add_option("--seed", f.seed, "random seed (default: a fresh one, printed in the summary)");
  cmd->add_option("--stop", f.stop, "stop string (repeatable)")->allow_extra_args(false);
  cmd->add_option("--system", f.system, "system message for the chat template");
  add_backend_flags(cmd, f.backend);
}

// --json / --json-schema FILE: the output must be a JSON object / match the schema (grammar/grammar.h).
inline void add_structured_output_flags(CLI::App* cmd, GenerationFlags& f) {
  auto* json = cmd->add_flag("--json", f.json_object, "constrain the output to one JSON object");
  cmd->add_option("--json-schema", f.json_schema_file,
                  "constrain the output to JSON valid under this JSON-schema file (docs/structured-output.md)")
      ->excludes(json);
}

// The grammar the flags ask for, if any. A schema file is read as untrusted JSON; an unsupported
// keyword is an Error naming its path inside the file.
inline std::optional<Grammar> grammar_from_flags(const GenerationFlags& f) {
  if (f.json_object) return Grammar::json_object();
  if (f.json_schema_file.empty()) return std::nullopt;
  const std::string text = read_whole_file(f.json_schema_file);
  return Grammar::json_schema(parse_untrusted_json<nlohmann::ordered_json>(text, f.json_schema_file), f.json_schema_file);
}

// CLI defaults < the model's generation_config.json < flags given on the command line.
inline SamplingParams sampling_params(const GenerationFlags& f, const GenerationConfig& model_defaults) {
  SamplingParams p;
  auto pick = [](auto& out, auto flag_value, const CLI::Option* opt, const auto& model_value) {
    if (opt->count() == 0 && model_value) out = *model_value;
    else out = flag_value;
  };
  pick(p.temperature, f.temperature, f.temperature_opt, model_defaults.temperature);
  pick(p.top_k, f.top_k, f.top_k_opt, model_defaults.top_k);
  pick(p.top_p, f.top_p, f.top_p_opt, model_defaults.top_p);
  p.min_p = f.min_p;
  pick(p.repetition_penalty, f.repetition_penalty, f.repetition_penalty_opt, model_defaults.repetition_penalty);
  p.frequency_penalty = f.frequency_penalty;
  p.presence_penalty = f.presence_penalty;
  p.seed = f.seed;
  if (p.top_k < 0) p.top_k = 0;
  validate(p);
  return p;
}

// Everything a generation needs, loaded once.
struct ModelSession {
  LoadedModel model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  StopRules stop;
  LoadInfo load;  // what loading the model and building the backend cost
};

inline ModelSession open_model(const GenerationFlags& f) {
  ModelSession s;
  const auto t0 = std::chrono::steady_clock::now();
  s.model = load_model(f.model);
  s.load.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.tokenizer = load_tokenizer(f.tokenizer.empty() ? s.model.path : std::filesystem::path(f.tokenizer));
  BackendFlags backend_flags = f.backend;
  backend_flags.threads = f.threads;
  s.backend = make_backend(s.model, f.device, backend_flags, &s.load);
  s.stop.eos_ids = collect_eos_ids(s.model.generation, s.model.config, *s.tokenizer);
  s.stop.stop_strings = f.stop;
  s.stop.max_tokens = f.max_tokens;
  validate(s.stop);
  return s;
}

// The one-line summary on stderr, after the text (with the load's time and resident memory when given).
inline void print_summary(const GenerationResult& r, const SamplingParams& params, const LoadInfo* load = nullptr) {
  std::fflush(stdout);  // the text (and its final newline) first, then the summary
  std::fprintf(stderr,
               "[%lld prompt tokens, %lld generated, time to first token %.3f s, prefill %.1f tok/s, "
               "decode %.1f tok/s, finish: %s",
               static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.generated_tokens),
               r.time_to_first_token_s, r.prefill_tokens_per_s, r.decode_tokens_per_s,
               finish_reason_name(r.finish_reason));
  if (r.stop_string) std::fprintf(stderr, " (stop string \"%s\")", r.stop_string->c_str());
  if (!params.greedy()) std::fprintf(stderr, ", seed %llu", static_cast<unsigned long long>(r.seed));
  if (load)
    std::fprintf(stderr, ", load %.1f s, resident %.2f GB", load->seconds, double(load->resident_bytes) / 1e9);
  std::fprintf(stderr, "]\n");
}

// Streams text to stdout, flushed per chunk so that it appears as it is generated.
inline GenerationCallbacks stream_to_stdout() {
  GenerationCallbacks callbacks;
  callbacks.on_text = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  return callbacks;
}

}  // namespace journey::cli
