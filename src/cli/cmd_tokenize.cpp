// journey tokenize — placeholder registration until the command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace journey::cli {

void register_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { fail("journey tokenize is not implemented yet"); });
}

}  // namespace journey::cli
