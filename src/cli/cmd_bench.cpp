// journey bench — placeholder registration until the command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace journey::cli {

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { fail("journey bench is not implemented yet"); });
}

}  // namespace journey::cli
