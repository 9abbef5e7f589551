// journey chat — placeholder registration until the command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace journey::cli {

void register_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { fail("journey chat is not implemented yet"); });
}

}  // namespace journey::cli
