// `journey generate` and `journey chat` run as a user runs them: the real binary, stdin from a
// pipe, stdout and stderr captured separately.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "engine/expected.h"

using journey::test::expected_text;
using journey::test::read_bytes;

namespace {

struct Run {
  int status = -1;
  std::string out, err;
};

// Runs `journey ARGS < stdin_text` through the shell; the arguments are passed as written.
Run run_journey(const std::string& args, const std::string& stdin_text = "") {
  std::filesystem::path dir = std::filesystem::path(JOURNEY_BINARY_DIR) / "tests" / "engine" / "cli_runs";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "stdin.txt", std::ios::binary) << stdin_text;
  std::string command = std::string("'") + JOURNEY_CLI + "' " + args + " < '" + (dir / "stdin.txt").string() +
                        "' > '" + (dir / "stdout.txt").string() + "' 2> '" + (dir / "stderr.txt").string() + "'";
  int raw = std::system(command.c_str());
  Run run;
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  run.out = read_bytes((dir / "stdout.txt").string());
  run.err = read_bytes((dir / "stderr.txt").string());
  return run;
}

const std::string kModel = std::string("--model ") + journey::test::kStoriesModel + " --threads 1 ";

}  // namespace

TEST_CASE("journey generate, greedy, empty prompt: llama2.c's 200-step and 256-step texts byte for byte") {
  // journey prints the text and then one "\n", exactly like run.c; the upstream test strips it.
  Run r200 = run_journey("generate " + kModel + "--temperature 0 --max-tokens 200");
  INFO("stderr: ", r200.err);
  CHECK(r200.status == 0);
  CHECK(r200.out == expected_text(200) + "\n");
  CHECK(r200.err.find("1 prompt tokens, 200 generated") != std::string::npos);
  CHECK(r200.err.find("finish: length") != std::string::npos);

  Run r256 = run_journey("generate " + kModel + "--temperature 0 --max-tokens 256");
  CHECK(r256.status == 0);
  CHECK(r256.out == expected_text(256) + "\n");
}

TEST_CASE("journey generate echoes the prompt and stops at --stop strings") {
  std::string story = expected_text(256);
  Run r = run_journey("generate " + kModel + "\"Once upon a time\" --temperature 0 --stop Lily --stop dragon");
  INFO("stderr: ", r.err);
  CHECK(r.status == 0);
  CHECK(r.out == story.substr(0, story.find("Lily")) + "\n");
  CHECK(r.err.find("finish: stop (stop string \"Lily\")") != std::string::npos);
}

TEST_CASE("journey generate rejects bad sampling flags with the field's name") {
  Run r = run_journey("generate " + kModel + "--top-p 0");
  CHECK(r.status == 1);
  CHECK(r.err.find("top_p must be in (0, 1]") != std::string::npos);
  CHECK(r.out.empty());
  Run missing = run_journey("generate --model no/such/model");
  CHECK(missing.status == 1);
  CHECK(missing.err.find("no/such/model") != std::string::npos);
}

TEST_CASE("journey generate --json-schema / --json: the continuation is JSON; a bad schema names its path") {
  const std::string schema = std::string(JOURNEY_SOURCE_DIR) + "/chapters/ch15_structured_output/person.json";
  Run r = run_journey("generate " + kModel + "\"Once upon a time\" --seed 3 --json-schema '" + schema + "'");
  INFO("stdout: ", r.out, "stderr: ", r.err);
  CHECK(r.status == 0);
  REQUIRE(r.out.rfind("Once upon a time{", 0) == 0);
  const std::string answer = r.out.substr(std::string("Once upon a time").size());
  const nlohmann::json j = nlohmann::json::parse(answer);  // the trailing "\n" is whitespace
  CHECK(j.size() == 3);
  CHECK(j.at("age").is_number_integer());
  CHECK(r.err.find("finish: stop") != std::string::npos);
  Run object = run_journey("generate " + kModel + "\"\" --temperature 0 --json --max-tokens 20");
  CHECK(object.status == 0);
  CHECK(object.out.rfind("{", 0) == 0);

  const std::filesystem::path bad = std::filesystem::path(JOURNEY_BINARY_DIR) / "tests" / "engine" / "cli_runs" / "bad.json";
  std::ofstream(bad) << R"({"type":"object","properties":{"age":{"type":"integer","minimum":0}}})";
  Run refused = run_journey("generate " + kModel + "--json-schema '" + bad.string() + "'");
  CHECK(refused.status == 1);
  CHECK(refused.err.find(bad.string() + ".properties.age.minimum: 'minimum' is not supported") != std::string::npos);
  CHECK(refused.out.empty());
}

TEST_CASE("journey chat through a pipe: two turns, /reset, a turn again, EOF") {
  const std::string flags = "chat " + kModel + "--temperature 0 --max-tokens 12";
  Run r = run_journey(flags, "Tom had a red ball.\nWhere did it go?\n/reset\nTom had a red ball.\n");
  INFO("stdout: ", r.out, "\nstderr: ", r.err);
  CHECK(r.status == 0);
  // stdout from a pipe: the answers only, each followed by "\n" (no "> " prompts: nobody reads them).
  std::smatch m;
  std::regex shape("^([^\n]*)\n([^\n]*)\n([^\n]*)\n$");
  REQUIRE(std::regex_match(r.out, m, shape));
  std::string first = m[1], second = m[2], after_reset = m[3];
  CHECK(!first.empty());
  CHECK(!second.empty());
  CHECK(after_reset == first);  // greedy, same history after /reset -> the same answer

  // stderr: one summary per turn; the second turn's prompt holds the whole first exchange.
  std::regex summary("\\[(\\d+) prompt tokens, (\\d+) generated");
  std::vector<int> prompt_tokens;
  for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), summary); it != std::sregex_iterator(); ++it)
    prompt_tokens.push_back(std::stoi((*it)[1]));
  REQUIRE(prompt_tokens.size() == 3);
  CHECK(prompt_tokens[1] > prompt_tokens[0] + 5);
  CHECK(prompt_tokens[2] == prompt_tokens[0]);
  CHECK(r.err.find("(history cleared)") != std::string::npos);

  // The first answer is what `generate --chat` says for the same single message.
  Run single = run_journey("generate " + kModel + "--temperature 0 --max-tokens 12 --chat \"Tom had a red ball.\"");
  CHECK(single.out == first + "\n");

  // /exit ends the session before reading on.
  Run exited = run_journey(flags, "/exit\nnever read\n");
  CHECK(exited.status == 0);
  CHECK(exited.out.empty());
}
