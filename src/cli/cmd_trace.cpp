// journey trace — run one generation and keep every stage of the prompt's journey on disk.
//
//   journey trace [--model DIR] PROMPT --out DIR [--max-tokens N] [sampling flags as generate]
//                 [--chat --system S] [--stages 'L*.attn_weights,logits'] [--layers 0,4]
//                 [--heads 0-3] [--steps 0-3] [--kv-block-size N]
//
// The dump (docs/dump-format.md) is what `journey-trace render|report|diff|golden` read: one .npy
// per tensor and a manifest.json with the model, the settings, the rendered template, the prompt
// tokens and, for every step (the prefill is step 0, each decode step one more), the positions fed
// and the token sampled with its probability and the top alternatives.
//
// generate() does not know about steps, so the backend is wrapped: before every forward pass after
// the first it tells the sink which step begins. The wrapper also asks for every row of logits
// when the logits are traced, so a prefill's logits are [T, V] like the goldens'.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/generation_flags.h"
#include "core/error.h"
#include "backend/backend.h"
#include "engine/logit_lens.h"
#include "engine/traced_generation.h"
#include "engine/generate.h"
#include "parallel/tensor_parallel.h"
#include "text/chat_template.h"
#include "trace/dump_sink.h"
#include "trace/filters.h"

namespace journey::cli {
namespace {

struct TraceArgs {
  GenerationFlags flags;
  std::string prompt;
  bool chat = false;
  std::string out;
  std::string stages, layers, heads, steps;
  int64_t kv_block_size = 16;
  int top_alternatives = 5;
};

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The command line that reproduces this dump (seed included, so a sampled run repeats exactly).
std::string reproduce_command(const TraceArgs& a, const SamplingParams& p, uint64_t seed) {
  std::ostringstream cmd;
  cmd << "journey trace --model " << shell_quote(a.flags.model) << " " << shell_quote(a.prompt) << " --out "
      << shell_quote(a.out) << " --max-tokens " << a.flags.max_tokens << " --temperature " << p.temperature
      << " --top-k " << p.top_k << " --top-p " << p.top_p << " --min-p " << p.min_p << " --repetition-penalty "
      << p.repetition_penalty << " --frequency-penalty " << p.frequency_penalty << " --presence-penalty "
      << p.presence_penalty << " --seed " << seed << " --kv-block-size " << a.kv_block_size;
  if (a.chat) cmd << " --chat";
  if (a.flags.json_object) cmd << " --json";
  if (!a.flags.json_schema_file.empty()) cmd << " --json-schema " << shell_quote(a.flags.json_schema_file);
  if (!a.flags.system.empty()) cmd << " --system " << shell_quote(a.flags.system);
  if (!a.stages.empty()) cmd << " --stages " << shell_quote(a.stages);
  if (!a.layers.empty()) cmd << " --layers " << shell_quote(a.layers);
  if (!a.heads.empty()) cmd << " --heads " << shell_quote(a.heads);
  if (!a.steps.empty()) cmd << " --steps " << shell_quote(a.steps);
  return cmd.str();
}

void run_trace(const TraceArgs& args) {
  const TraceFilters filters = parse_filters(args.stages, args.layers, args.heads, args.steps);
  if (args.kv_block_size < 1) fail("--kv-block-size must be at least 1, got ", args.kv_block_size);
  GenerationFlags flags = args.flags;
  flags.backend.follower_trace_dir = args.out;  // --tensor-parallel: ranks 1.. dump to OUT/rank<r>/
  flags.backend.follower_trace_filters = filters;
  ModelSession session = open_model(flags);

  // The text the tokenizer sees: the prompt (plain, BOS added) or the rendered chat template.
  std::string template_text;
  std::vector<int> ids;
  if (args.chat) {
    ChatTemplateInputs inputs;
    if (!args.flags.system.empty()) inputs.messages.push_back({"system", args.flags.system});
    inputs.messages.push_back({"user", args.prompt});
    RenderedPrompt prompt = render_and_encode(load_chat_template(session.model.path), *session.tokenizer, std::move(inputs));
    template_text = std::move(prompt.text);
    ids = std::move(prompt.ids);
  } else {
    ids = session.tokenizer->encode(args.prompt, /*add_special=*/true, /*parse_special=*/false);
  }

  GenerationRequest request;
  request.sampling = sampling_params(args.flags, session.model.generation);
  request.sampling.logprobs = args.top_alternatives;
  request.stop = session.stop;
  request.prompt_ids.assign(ids.begin(), ids.end());
  request.grammar = grammar_from_flags(args.flags);

  // A pool of the requested block size, large enough for the whole run (generate() keeps it).
  const int64_t context = session.model.config.max_position_embeddings;
  const int64_t positions = std::min<int64_t>(context, int64_t(ids.size()) + args.flags.max_tokens);
  session.backend->allocate_kv_cache((positions + args.kv_block_size - 1) / args.kv_block_size, args.kv_block_size);

  DumpSink sink(args.out, filters);
  sink.set_step(0, "prefill", prefill_positions(ids.size()));  // before the template text, which belongs to step 0
  if (args.chat && sink.wants(Stage::template_text, -1)) {
    std::vector<int32_t> bytes(template_text.begin(), template_text.end());  // [n_bytes]
    for (auto& b : bytes) b = static_cast<unsigned char>(b);
    sink.record_ints(Stage::template_text, -1, bytes, {int64_t(bytes.size())});
  }

  const Tokenizer& tokenizer = *session.tokenizer;
  GenerationCallbacks callbacks = stream_to_stdout();

  if (!args.chat) {
    std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
    std::fflush(stdout);
  }
  // The logit lens of every layer, on the host from each layer_out (engine/logit_lens.h); only
  // when the filters keep it, since it costs one LM-head product per layer and step.
  std::optional<LogitLens> lens;
  for (int layer = 0; layer < session.model.config.num_layers && !lens; ++layer)
    if (filters.layers.contains(layer) &&
        (filters.stage_matches(Stage::logit_lens, layer) || filters.stage_matches(Stage::logit_lens_probs, layer)))
      lens = LogitLens::from_model(session.model);
  GenerationResult result =
      generate_traced(*session.backend, tokenizer, request, sink, callbacks, lens ? &*lens : nullptr);
  std::fputs("\n", stdout);

  Manifest& m = sink.manifest();
  m.generated_by_tool = "journey trace";
  m.generated_by_command = reproduce_command(args, request.sampling, result.seed);
  m.model = manifest_model(session.model.path, session.backend->config());
  m.prompt = args.prompt;
  m.template_text = template_text;
  for (int id : ids) m.tokens.push_back({id, tokenizer.piece(id)});
  m.settings = backend_manifest_settings(*session.backend);
  if (args.flags.backend.tensor_parallel > 1) {
    const auto group = tensor_parallel_stats(*session.backend);
    m.tensor_parallel = manifest_tensor_parallel(session.backend->config(), 0, args.flags.backend.tensor_parallel,
                                                 group ? group->transport : "");
  }
  m.settings.update({{"sampling",
                 {{"temperature", request.sampling.temperature},
                  {"top_k", request.sampling.top_k},
                  {"top_p", request.sampling.top_p},
                  {"min_p", request.sampling.min_p},
                  {"repetition_penalty", request.sampling.repetition_penalty},
                  {"frequency_penalty", request.sampling.frequency_penalty},
                  {"presence_penalty", request.sampling.presence_penalty},
                  {"seed", result.seed},
                  {"greedy", request.sampling.greedy()}}},
                {"max_tokens", args.flags.max_tokens},
                {"chat", args.chat},
                {"system", args.flags.system},
                {"kv_cache", {{"block_size", session.backend->kv_block_size()},
                              {"num_blocks", session.backend->kv_num_blocks()}}},
                {"filters", {{"stages", args.stages}, {"layers", args.layers}, {"heads", args.heads}, {"steps", args.steps}}},
                {"generated_text", result.text},
                {"finish_reason", finish_reason_name(result.finish_reason)}});
  if (request.grammar)  // structured output: what the grammar_mask stage enforced
    m.settings["grammar"] = args.flags.json_object ? std::string("json_object") : "json_schema " + args.flags.json_schema_file;
  // ids past the tokenizer's vocabulary (a padded embedding table, or a model traced with a smaller
  // tokenizer than its own) have no piece
  sink.finish([&tokenizer](int32_t id) { return id < tokenizer.vocab_size() ? tokenizer.piece(id) : std::string(); });
  print_summary(result, request.sampling);
  std::fprintf(stderr, "[trace: %zu tensors over %zu steps in %s]\n", m.tensors.size(), m.steps.size(),
               args.out.c_str());
}

}  // namespace

void register_trace(CLI::App& app) {
  auto args = std::make_shared<TraceArgs>();
  auto* cmd = app.add_subcommand("trace", "generate from a prompt and dump every stage (.npy + manifest.json)");
  cmd->add_option("prompt", args->prompt, "the prompt")->required();
  cmd->add_option("--out", args->out, "dump directory (created; files of the same names are overwritten)")->required();
  add_generation_flags(cmd, args->flags);
  add_structured_output_flags(cmd, args->flags);
  args->flags.max_tokens = 8;  // a trace is for reading, not for long texts
  cmd->get_option("--max-tokens")->default_str("8");
  cmd->add_flag("--chat", args->chat, "wrap the prompt in the model's chat template (with --system)");
  cmd->add_option("--stages", args->stages, "stages to keep, comma-separated globs (\"L*.attn_weights,logits\"); default all");
  cmd->add_option("--layers", args->layers, "layers to keep (\"0,4\", \"0-3\"); default all");
  cmd->add_option("--heads", args->heads, "query heads kept in per-head stages (\"0-3\"); default all");
  cmd->add_option("--steps", args->steps, "steps to keep (0 = prefill, then one per decode step); default all");
  cmd->add_option("--kv-block-size", args->kv_block_size, "token slots per KV-cache block")->capture_default_str();
  cmd->add_option("--top", args->top_alternatives, "alternatives recorded with each sampled token")
      ->capture_default_str()
      ->check(CLI::Range(0, 20));
  cmd->callback([args] { run_trace(*args); });
}

}  // namespace journey::cli
