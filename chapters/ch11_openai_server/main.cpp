// Chapter 11 — the OpenAI-compatible server, from the outside.
// Starts the real server (server::run_server, the same code as `journey serve`) in a child process
// on a free loopback port, then talks to it over HTTP like any client: /health, /v1/models, a chat
// completion, a streamed completion (SSE), and /metrics. Fails if any answer is not what the API
// promises. The README shows the same with curl and the official openai client.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "server/http_server.h"

using namespace journey;
using nlohmann::json;

// A port the kernel reports free right now: bind to port 0, read the port back, close the socket.
// (Binding an httplib::Server for this leaves a listening socket open in this process, and with
// SO_REUSEPORT the kernel would then hand some connections to that dead socket.)
static int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0)
    fail("cannot find a free loopback port");
  close(fd);
  return ntohs(addr.sin_port);
}

static bool check(bool condition, const std::string& what) {
  std::cout << (condition ? "  ok    " : "  FAIL  ") << what << "\n";
  return condition;
}

int main(int argc, char** argv) {
  const std::string model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  server::ServerOptions options;
  options.port = free_port();
  options.api_key = "chapter-11-key";
  options.served_model_name = "stories260K";

  const pid_t child = fork();
  if (child == 0) {  // the server: exactly what `journey serve` runs
    try {
      server::run_server(options, [&](server::ServingParts& parts) {
        EngineConfig engine;
        server::load_serving_parts(parts, model_path, engine, [](const LoadedModel& model) {
          return make_cpu_backend(model, CpuOptions{.threads = 1});
        });
      });
    } catch (const journey::Error& e) {
      std::cerr << "server: " << e.what() << "\n";
      _exit(1);
    }
    _exit(0);
  }

  std::cout << std::unitbuf;  // interleave cleanly with the server child's output
  httplib::Client client("127.0.0.1", options.port);
  client.set_read_timeout(30);
  const httplib::Headers auth = {{"Authorization", "Bearer " + options.api_key}};
  bool ok = true;
  std::cout << "# Chapter 11: journey serve on http://127.0.0.1:" << options.port << "\n\n";

  // 1. /health answers 503 while the model loads and 200 once it is ready.
  int health = 0;
  for (int i = 0; i < 300 && health != 200; ++i) {
    if (auto res = client.Get("/health")) health = res->status;
    if (health != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ok = check(health == 200, "GET /health -> 200 once loaded") && ok;

  // 2. Without the key: 401 with an OpenAI-style error body.
  auto denied = client.Get("/v1/models");
  ok = check(denied && denied->status == 401 && json::parse(denied->body).contains("error"),
             "GET /v1/models without the API key -> 401 {\"error\": ...}") && ok;
  auto models = client.Get("/v1/models", auth);
  ok = check(models && models->status == 200 && json::parse(models->body)["data"][0]["id"] == "stories260K",
             "GET /v1/models -> the served model") && ok;

  // 3. A chat completion (the template is applied server-side; stories260K has the plain one).
  json chat = {{"model", "stories260K"},
               {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
               {"max_tokens", 24}, {"temperature", 0}};
  auto answer = client.Post("/v1/chat/completions", auth, chat.dump(), "application/json");
  json body = answer ? json::parse(answer->body) : json();
  if (answer && answer->status == 200) {
    std::cout << "\n  POST /v1/chat/completions:\n    \"" << body["choices"][0]["message"]["content"].get<std::string>()
              << "\"\n    finish_reason " << body["choices"][0]["finish_reason"] << ", usage " << body["usage"].dump()
              << "\n\n";
  }
  ok = check(answer && answer->status == 200 && body["usage"]["completion_tokens"] == 24 &&
                 body["choices"][0]["finish_reason"] == "length",
             "chat completion: 24 tokens, finish_reason length, usage counted") && ok;

  // 4. Streaming: Server-Sent Events, one `data: {...}` per chunk, ending with `data: [DONE]`.
  json stream = {{"model", "stories260K"}, {"prompt", "Lily saw a"}, {"max_tokens", 12}, {"temperature", 0},
                 {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  std::string events;
  auto streamed = client.Post("/v1/completions", auth, stream.dump(), "application/json");
  if (streamed) events = streamed->body;
  int chunks = 0;
  std::string text;
  std::istringstream lines(events);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json event = json::parse(line.substr(6));
    if (!event["choices"].empty()) { text += event["choices"][0]["text"].get<std::string>(); ++chunks; }
  }
  std::cout << "\n  POST /v1/completions (stream): " << chunks << " events -> \"Lily saw a" << text << "\"\n\n";
  ok = check(streamed && streamed->status == 200 && chunks > 0 && events.find("data: [DONE]") != std::string::npos,
             "streamed completion arrives as SSE chunks ending with data: [DONE]") && ok;

  // 5. /metrics: Prometheus text. The engine thread frees a finished sequence's blocks right after
  // its last event is queued, so the count may need a moment to reach 0: poll briefly.
  std::string metrics_text, kv_used_line;
  for (int attempt = 0; attempt < 40; ++attempt) {
    auto metrics = client.Get("/metrics", auth);
    if (!metrics) break;
    metrics_text = metrics->body;
    std::istringstream m(metrics_text);
    for (std::string line; std::getline(m, line);)
      if (line.rfind("journey:kv_blocks_used{", 0) == 0) kv_used_line = line;  // {model_name="..."} 0
    if (kv_used_line.size() > 1 && kv_used_line.substr(kv_used_line.rfind(' ') + 1) == "0") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cout << "\n  GET /metrics (a few lines):\n";
  std::istringstream m(metrics_text);
  for (std::string line; std::getline(m, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line.find("tokens_total") != std::string::npos || line.find("kv_blocks") != std::string::npos ||
        line.find("prefix_cache") != std::string::npos || line.find("requests_") != std::string::npos)
      std::cout << "    " << line << "\n";
  }
  std::cout << "\n";
  ok = check(!kv_used_line.empty() && kv_used_line.substr(kv_used_line.rfind(' ') + 1) == "0",
             "after the requests every KV block is free (" + kv_used_line + ")") && ok;

  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  return ok ? 0 : 1;
}
