// journey serve — the OpenAI-compatible server (docs/serving.md).
//
//   journey serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
//                 [--served-model-name NAME] [--max-num-seqs N] [--max-num-batched-tokens N]
//                 [--drain-timeout SECONDS]
//                 [--block-size 16] [--kv-cache-memory BYTES | --num-kv-blocks N]
//                 [--rate-limit N] [--threads N] [--trace-dir DIR] [--chat-template FILE]
//                 [--allowed-origins A,B] [--replica-name NAME]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>


#include "assets/model.h"
#include "cli/backend_select.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/threads.h"
#include "server/http_server.h"
#include "server/openai_api.h"

namespace journey::cli {

namespace {
struct ServeArgs {
  std::string model;
  int threads = 0;
  BackendFlags backend;  // --kv-cache-dtype, --no-mmap
  std::string device = "cpu";
  server::ServerOptions server;
  EngineConfig engine;
  bool no_prefix_caching = false;
  std::string chat_template_file;
  bool print_fields = false;
};

// OpenMP threads that wait for work spin by default (libgomp: up to ~300k spins). The server
// shares its cores with HTTP threads, the client and whatever else runs, and a worker spinning
// at a barrier holds a core its team mate or the engine thread needs: on 2 busy cores the
// 0.5B model's batched step took 4.7x longer than with sleeping waits (docs/serving.md).
// libgomp reads OMP_WAIT_POLICY only when it loads, before main(), so the one way to choose it
// from inside is to start the program again with the variable set. A policy the user set wins.
void prefer_passive_openmp_waits() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  std::vector<std::string> words;  // argv, NUL-separated in /proc
  for (size_t begin = 0; begin < all.size();) {
    size_t end = all.find('\0', begin);
    if (end == std::string::npos) end = all.size();
    words.push_back(all.substr(begin, end - begin));
    begin = end + 1;
  }
  if (words.empty()) return;
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv.data());
  unsetenv("OMP_WAIT_POLICY");  // exec failed: carry on with the default policy
}

void run_serve(ServeArgs args) {
  if (args.print_fields) {  // docs/serving.md's table, from the table the server checks requests against
    std::fputs(server::api_fields_markdown().c_str(), stdout);
    return;
  }
  prefer_passive_openmp_waits();
  if (args.model.empty()) args.model = default_model_path();
  if (args.server.api_key.empty())
    if (const char* env = std::getenv("JOURNEY_API_KEY")) args.server.api_key = env;
  if (args.server.served_model_name.empty())
    args.server.served_model_name = std::filesystem::path(args.model).filename().string();
  args.engine.enable_prefix_caching = !args.no_prefix_caching;
  args.engine.sampling_threads = resolve_threads(args.threads);
  // Every open request holds an HTTP worker until it finishes, so the pool must outnumber the
  // sequences the engine can run at once; otherwise requests queue in the pool, not the scheduler.
  args.server.http_threads = static_cast<int>(
      std::max<int64_t>(args.server.http_threads, args.engine.scheduler.max_num_seqs + 16));
  BackendFlags flags = args.backend;
  flags.threads = args.threads;
  follow_if_tensor_parallel_follower(args.model, args.device, flags);  // --tensor-parallel: ranks 1.. never return
  server::run_server(args.server, [args](server::ServingParts& parts) {
    server::load_serving_parts(parts, args.model, args.engine, [&args](const LoadedModel& model) {
      BackendFlags flags = args.backend;
      flags.threads = args.threads;
      LoadInfo load;
      auto backend = make_backend(model, args.device, flags, &load);
      std::fprintf(stderr, "journey serve: %s; KV cache in %s\n", load_line(load).c_str(), flags.kv_cache_dtype.c_str());
      return backend;
    }, args.chat_template_file);
  });
}
}  // namespace

void register_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching and a paged KV cache");
  cmd->add_option("--model", args->model, "model directory or file (default: the shipped stories260K)");
  cmd->add_option("--host", args->server.host, "address to bind (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", args->server.port, "TCP port")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", args->server.api_key, "require 'Authorization: Bearer KEY' (or set JOURNEY_API_KEY)");
  cmd->add_option("--served-model-name", args->server.served_model_name, "model id clients use (default: directory name)");
  cmd->add_option("--max-num-seqs", args->engine.scheduler.max_num_seqs, "sequences per step")->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", args->engine.scheduler.max_num_batched_tokens,
                  "tokens per step (prefill chunks + decodes)")->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", args->engine.block_size, "tokens per KV block")->check(CLI::PositiveNumber);
  auto mem = cmd->add_option("--kv-cache-memory", args->engine.kv_cache_memory, "bytes for the KV pool")->check(CLI::PositiveNumber);
  cmd->add_option("--num-kv-blocks", args->engine.num_kv_blocks, "KV pool size in blocks")->check(CLI::PositiveNumber)->excludes(mem);
  cmd->add_option("--max-model-len", args->engine.max_model_len, "context length (default: the model's)")->check(CLI::PositiveNumber);
  cmd->add_flag("--no-prefix-caching", args->no_prefix_caching, "do not reuse KV blocks across requests");
  cmd->add_option("--rate-limit", args->server.rate_limit_per_minute, "requests per minute per API key (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-body-bytes", args->server.max_body_bytes, "largest request body accepted");
  cmd->add_option("--threads", args->threads, "CPU threads for the model (0 = all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", args->device, device_flag_help())->capture_default_str();
  add_backend_flags(cmd, args->backend);
  cmd->add_option("--drain-timeout", args->server.drain_timeout_seconds,
                  "after SIGTERM/SIGINT, seconds in-flight requests may take to finish before they are aborted")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();  // at most a day: the milliseconds stay in range
  cmd->add_option("--trace-dir", args->server.trace_dir,
                  "requests with \"journey_trace\": true write a trace dump to DIR/<request id>/ (default: off)");
  cmd->add_option("--chat-template", args->chat_template_file,
                  "a Jinja chat template file used instead of the model's own")->check(CLI::ExistingFile);
  cmd->add_option("--allowed-origins", args->server.allowed_origins,
                  "CORS: browser origins allowed to call the API, comma-separated (\"*\" = any; default: none)")
      ->delimiter(',');
  cmd->add_flag("--print-fields", args->print_fields,
               "print the table of request fields (implemented / refused) as Markdown and exit");
  cmd->add_option("--replica-name", args->server.replica_name, "a replica=\"NAME\" label on every metric");
  cmd->callback([args] { run_serve(*args); });
}

}  // namespace journey::cli
