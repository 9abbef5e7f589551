// Command-line manners shared by `journey` and `journey-trace`: what a user who mistypes gets back.
// CLI11 reports a mistyped subcommand or an unknown option as "The following argument was not
// expected" with its own exit codes (106, 109, ...). Here every command-line mistake becomes one
// line naming the word that was not understood, the nearest valid word when one is close, where
// to find the list, and exit status 2; --help and --version keep status 0.
//
// Exit status of both programs (also in their --help):
//   0  success
//   1  an error in what was asked for: a file, a model, a request, a value out of range (the
//      message names it); for `journey-trace diff|golden`: a stage diverges
//   2  a usage error: unknown command or option, a missing or malformed argument
//      (`journey-trace` also uses 2 for an unreadable dump)
//   3  an internal error (a bug in journey: please report it with the command line)
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace journey::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

// Levenshtein distance (insertions, deletions, substitutions), for "did you mean".
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);  // [|b| + 1] distances of a's prefix to b's prefixes
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `word`, if it is close enough to be what was meant: within a third of
// the word's length (at least 2 edits), or a candidate that starts with the word.
inline std::optional<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (word.size() >= 3 && c.rfind(word, 0) == 0) d = std::min<size_t>(d, 1);  // "--temp" -> "--temperature"
    if (d < best_distance) best_distance = d, best = c;
  }
  return best;
}

inline std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

inline const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->check_name(name)) return sub;
  return nullptr;
}

inline std::vector<std::string> long_option_names(const CLI::App& app) {
  std::vector<std::string> names{"--help"};
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& name : opt->get_lnames()) names.push_back("--" + name);
  return names;
}

inline std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (size_t k = 0; k < words.size(); ++k) out += (k ? ", " : "") + words[k];
  return out;
}

// Finds the first word of argv the program does not know: a command name that is none of its
// commands, or an option ("--name", "-x") that the chosen command does not have. Returns the
// message for it ("unknown ...; did you mean ...?"), or nothing when every word is known (the
// error was something else: a missing or malformed value). Words after "--" and values that do
// not look like options (negative numbers, prompts) are never judged.
inline std::optional<std::string> unknown_word_message(const CLI::App& app, const std::string& program, int argc,
                                                       const char* const* argv) {
  const CLI::App* command = &app;
  std::string command_path = program;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    const bool is_option = word.size() > 1 && word[0] == '-' &&
                           (std::isalpha(static_cast<unsigned char>(word[1])) || (word.size() > 2 && word[1] == '-'));
    if (!is_option) {
      if (const CLI::App* sub = find_subcommand(*command, word)) {
        command = sub;
        command_path += " " + sub->get_name();
        continue;
      }
      // The first word must be a command when the program has commands and none was named yet.
      if (command == &app && !subcommand_names(app).empty()) {
        std::string m = "unknown command '" + word + "'";
        if (auto near = nearest(word, subcommand_names(app))) m += "; did you mean '" + *near + "'?";
        return m + " (commands: " + joined(subcommand_names(app)) + ")";
      }
      continue;  // a positional argument or an option's value
    }
    const std::string name = word.substr(0, word.find('='));
    if (command->get_option_no_throw(name) != nullptr || name == "--help" || name == "-h") continue;
    if (command == &app && name == "--version") continue;
    std::string m = "unknown option '" + name + "' for '" + command_path + "'";
    if (auto near = nearest(name, long_option_names(*command))) m += "; did you mean '" + *near + "'?";
    return m;
  }
  return std::nullopt;
}

// What main() does with a CLI11 parse error: help and version print as CLI11 prints them (status
// 0); anything else is one "PROGRAM: error: ..." line, a hint where the options are listed, and
// status 2.
inline int report_parse_error(CLI::App& app, const CLI::ParseError& e, const std::string& program, int argc,
                              const char* const* argv) {
  if (e.get_exit_code() == 0) return app.exit(e);
  std::string message = unknown_word_message(app, program, argc, argv).value_or(e.what());
  std::string help = program + " --help";
  for (int i = 1; i < argc; ++i)
    if (const CLI::App* sub = find_subcommand(app, argv[i])) {
      help = program + " " + sub->get_name() + " --help";
      break;
    }
  std::cerr << program << ": error: " << message << "\n(run '" << help << "' for the list)\n";
  return kExitUsage;
}

}  // namespace journey::cli
