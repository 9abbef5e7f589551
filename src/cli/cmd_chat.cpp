// journey chat — a REPL over the model's chat template.
//
// Each line read from stdin is a user turn: the whole history is rendered with the template and
// generated from (no cache is kept between turns: the loop stays the same as `generate`), the
// answer is streamed and appended to the history. "/reset" clears the history (the system message
// stays), "/exit" or end of input quits. At a terminal each turn starts with a "> " prompt; when
// stdin is a pipe or a file nobody reads prompts, so stdout holds only the answers, one per line
// (`printf 'Hi\n' | journey chat > answers.txt`). Notes and per-turn summaries go to stderr.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/generation_flags.h"
#include "core/error.h"
#include "text/chat_template.h"

namespace journey::cli {
namespace {

void run_chat(const GenerationFlags& flags) {
  ModelSession session = open_model(flags);
  SamplingParams sampling = sampling_params(flags, session.model.generation);
  ModelChatTemplate tmpl = load_chat_template(session.model.path);

  std::vector<ChatMessage> history;
  auto reset = [&] {
    history.clear();
    if (!flags.system.empty()) history.push_back({"system", flags.system});
  };
  reset();
  std::fprintf(stderr, "journey chat: %s, template %s. /reset clears the history, /exit quits.\n",
               session.model.path.string().c_str(), tmpl.chat_template->name().c_str());

  const bool interactive = isatty(STDIN_FILENO) == 1;  // prompts only for a person at a terminal
  std::string line;
  while (true) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) {
      if (interactive) std::fputs("\n", stdout);  // end of input: leave the terminal on a fresh line
      break;
    }
    if (line == "/exit") break;
    if (line == "/reset") {
      reset();
      std::fputs("(history cleared)\n", stderr);
      continue;
    }
    if (line.empty()) continue;

    history.push_back({"user", line});
    ChatTemplateInputs inputs;
    inputs.messages = history;
    const std::vector<int> ids = render_and_encode(tmpl, *session.tokenizer, std::move(inputs)).ids;

    GenerationRequest request;
    request.prompt_ids.assign(ids.begin(), ids.end());
    request.sampling = sampling;
    request.stop = session.stop;
    try {
      GenerationResult result = generate(*session.backend, *session.tokenizer, request, stream_to_stdout());
      std::fputs("\n", stdout);
      std::fflush(stdout);
      print_summary(result, sampling);
      history.push_back({"assistant", result.text});
    } catch (const Error& e) {
      // e.g. the history no longer fits the context: keep the REPL alive, drop this turn.
      history.pop_back();
      std::fprintf(stderr, "journey: error: %s (try /reset)\n", e.what());
    }
  }
}

}  // namespace

void register_chat(CLI::App& app) {
  auto flags = std::make_shared<GenerationFlags>();
  auto* cmd = app.add_subcommand("chat", "interactive chat with the model's chat template (reads stdin)");
  add_generation_flags(cmd, *flags);
  cmd->callback([flags] { run_chat(*flags); });
}

}  // namespace journey::cli
