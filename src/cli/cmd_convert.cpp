// journey convert — placeholder registration until the command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace journey::cli {

void register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { fail("journey convert is not implemented yet"); });
}

}  // namespace journey::cli
