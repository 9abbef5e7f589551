// journey generate — placeholder registration until the command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace journey::cli {

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { fail("journey generate is not implemented yet"); });
}

}  // namespace journey::cli
