// journey inspect — placeholder registration until the command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace journey::cli {

void register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { fail("journey inspect is not implemented yet"); });
}

}  // namespace journey::cli
