// journey generate — one prompt in, streamed text out, one summary line on stderr.
//
//   journey generate [--model DIR] [PROMPT] [--max-tokens N] [--temperature T] ... [--chat]
//
// Plain mode encodes the prompt with BOS (like llama2.c's run.c; an empty prompt is just BOS) and
// echoes it before the continuation. --chat renders the model's chat template around the prompt
// instead and prints only the answer. stdout ends with one "\n" after the text, as run.c does.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/generation_flags.h"
#include "core/error.h"
#include "text/chat_template.h"

namespace journey::cli {
namespace {

struct GenerateArgs {
  GenerationFlags flags;
  std::string prompt;
  bool chat = false;
};

// The prompt as the model should see it: plain text with BOS, or the rendered chat template.
std::vector<int32_t> encode_prompt(const GenerateArgs& args, const ModelSession& session) {
  if (!args.chat) {
    std::vector<int> ids = session.tokenizer->encode(args.prompt, /*add_special=*/true, /*parse_special=*/false);
    return {ids.begin(), ids.end()};
  }
  ChatTemplateInputs inputs;
  if (!args.flags.system.empty()) inputs.messages.push_back({"system", args.flags.system});
  inputs.messages.push_back({"user", args.prompt});
  const RenderedPrompt prompt =
      render_and_encode(load_chat_template(session.model.path), *session.tokenizer, std::move(inputs));
  return {prompt.ids.begin(), prompt.ids.end()};
}

void run_generate(const GenerateArgs& args) {
  ModelSession session = open_model(args.flags);
  GenerationRequest request;
  request.sampling = sampling_params(args.flags, session.model.generation);
  request.stop = session.stop;
  request.prompt_ids = encode_prompt(args, session);
  request.grammar = grammar_from_flags(args.flags);

  if (!args.chat) {
    std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
    std::fflush(stdout);
  }
  GenerationResult result = generate(*session.backend, *session.tokenizer, request, stream_to_stdout());
  std::fputs("\n", stdout);
  std::fflush(stdout);
  print_summary(result, request.sampling, &session.load);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "generate text from a prompt, streamed to stdout");
  cmd->add_option("prompt", args->prompt, "the prompt (default: empty = BOS only)");
  add_generation_flags(cmd, args->flags);
  add_structured_output_flags(cmd, args->flags);
  cmd->add_flag("--chat", args->chat, "wrap the prompt in the model's chat template (with --system)");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace journey::cli
