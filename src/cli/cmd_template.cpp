// journey template — placeholder registration until the command lands.
#include "cli/commands.h"
#include "core/error.h"

namespace journey::cli {

void register_template(CLI::App& app) {
  auto* cmd = app.add_subcommand("template", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { fail("journey template is not implemented yet"); });
}

}  // namespace journey::cli
