// journey: one binary, one subcommand per job. Errors from the library are journey::Error with a
// complete message; they are printed as "journey: error: ..." with exit status 1. Command-line
// mistakes (an unknown command or option, a missing value) name the nearest valid word and exit
// with 2; exit statuses are listed in cli/usage.h and in `journey --help`.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/usage.h"
#include "core/error.h"

namespace journey::cli {

const char* default_model_path() {
  // JOURNEY_MODEL overrides; else the data/ of the source tree this binary was built from.
  if (const char* env = std::getenv("JOURNEY_MODEL")) return env;
  return JOURNEY_DEFAULT_MODEL;
}

}  // namespace journey::cli

int main(int argc, char** argv) {
  CLI::App app{"journey — follow one prompt through an LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "journey 0.1.0");
  app.footer(
      "exit status: 0 success; 1 an error in what was asked for (a file, a model, a value: the message names it);\n"
      "             2 a usage error (unknown command or option, missing argument); 3 an internal error (a bug)");
  journey::cli::register_inspect(app);
  journey::cli::register_convert(app);
  journey::cli::register_tokenize(app);
  journey::cli::register_template(app);
  journey::cli::register_generate(app);
  journey::cli::register_chat(app);
  journey::cli::register_bench(app);
  journey::cli::register_serve(app);
  journey::cli::register_trace(app);
  journey::cli::register_quantize(app);
  journey::cli::register_perplexity(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return journey::cli::report_parse_error(app, e, "journey", argc, argv);
  } catch (const journey::Error& e) {
    std::cerr << "journey: error: " << e.what() << "\n";
    return journey::cli::kExitError;
  } catch (const std::exception& e) {
    std::cerr << "journey: internal error: " << e.what() << "\n";
    return journey::cli::kExitInternal;
  }
  return journey::cli::kExitOk;
}
