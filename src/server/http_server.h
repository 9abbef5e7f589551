// `journey serve`: the OpenAI-compatible HTTP front end. It listens at once (GET /health says 503
// until the model is loaded), then hands every generation request to the EngineLoop and streams
// what comes back. Auth (Bearer key, constant-time compare), a per-key rate limit, a body size
// limit and strict request validation sit in front of the engine.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "assets/model.h"
#include "engine/llm_engine.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace journey::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;             // empty: no auth
  std::string served_model_name;   // "id" in /v1/models; requests naming another model get 404
  int rate_limit_per_minute = 0;   // per API key (or client address); 0 = off
  double drain_timeout_seconds = 30;  // after SIGTERM/SIGINT: in-flight requests get this long, then are aborted
  size_t max_body_bytes = 1 << 20;
  int http_threads = 64;           // every open request holds one (cmd_serve: >= max_num_seqs + 16)
  std::string trace_dir;           // non-empty: requests with "journey_trace": true dump to trace_dir/<id>/
  std::vector<std::string> allowed_origins;  // CORS: browser origins answered with Access-Control-* ("*" = any); empty = none
  std::string replica_name;        // non-empty: a replica="..." label on every metric
};


// The pieces the loader fills in (see cmd_serve.cpp).
struct ServingParts {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ModelChatTemplate> chat_template;
  EngineConfig engine_config;
  std::string model_path;
};

// Fill parts from a model path: the model, its tokenizer and chat template, a backend made by
// make_backend (the caller picks CPU or CUDA), and the engine config with the model's EOS ids.
// chat_template_file (optional): a Jinja file used instead of the model's template (the model's
// BOS/EOS strings are kept); a syntax error names the file and line.
void load_serving_parts(ServingParts& parts, const std::string& model_path, const EngineConfig& engine,
                        const std::function<std::unique_ptr<Backend>(const LoadedModel&)>& make_backend,
                        const std::string& chat_template_file = "");

// Blocks until the process is told to stop (SIGINT/SIGTERM), then drains (drain.h): returns once
// every in-flight request has finished. Throws journey::Error when the address cannot be bound,
// the model cannot be loaded, or the drain had to abort requests (the message says how many).
void run_server(const ServerOptions& options, std::function<void(ServingParts&)> load);

}  // namespace journey::server
