// journey: one binary, one subcommand per job. Errors from the library are journey::Error with a
// complete message; they are printed as "journey: error: ..." with exit status 1.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
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
    return app.exit(e);
  } catch (const journey::Error& e) {
    std::cerr << "journey: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "journey: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
