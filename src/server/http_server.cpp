#include "server/http_server.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include <httplib.h>
#include <pthread.h>

#include "core/error.h"
#include "core/untrusted.h"
#include "engine/stop.h"
#include "engine/traced_generation.h"
#include "server/engine_loop.h"
#include "server/http_connections.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "trace/dump_sink.h"

namespace journey::server {

namespace {

using Clock = std::chrono::steady_clock;

// Compare secrets byte for byte (a NUL is a byte like any other) without an early exit, so the
// time taken does not reveal how many leading characters matched.
bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// Sliding one-minute window per client key: at most `per_minute` events in any minute. Used for
// the request rate limit (per API key, or per address without a key; off unless --rate-limit)
// and, always on, for failed authentications per client address.
class RateLimiter {
 public:
  explicit RateLimiter(int per_minute) : per_minute_(per_minute) {}
  // 0 when allowed (and counted), else seconds until a slot frees up.
  int check(const std::string& key) { return check_and_count(key, true); }
  // 0 while the key is under its limit (counting nothing), else seconds until it is again.
  int blocked(const std::string& key) { return check_and_count(key, false); }
  void count(const std::string& key) { (void)check_and_count(key, true, /*force=*/true); }

 private:
  int check_and_count(const std::string& key, bool count, bool force = false) {
    if (per_minute_ <= 0) return 0;
    std::lock_guard<std::mutex> lock(mutex_);
    auto now = Clock::now();
    if (windows_.size() > kMaxKeys) forget_quiet_keys(now);
    std::deque<Clock::time_point>& q = windows_[key];
    while (!q.empty() && now - q.front() >= std::chrono::minutes(1)) q.pop_front();
    if (force || static_cast<int>(q.size()) < per_minute_) {
      if (count) q.push_back(now);
      if (static_cast<int>(q.size()) > per_minute_) q.pop_front();  // forced: the window stays bounded
      return 0;
    }
    auto wait = std::chrono::duration_cast<std::chrono::seconds>(q.front() + std::chrono::minutes(1) - now).count();
    return static_cast<int>(std::max<int64_t>(1, wait + 1));
  }
  // Keys (addresses) come from clients: the table may not grow without bound.
  void forget_quiet_keys(Clock::time_point now) {
    std::erase_if(windows_, [&](const auto& entry) {
      return entry.second.empty() || now - entry.second.back() >= std::chrono::minutes(1);
    });
    if (windows_.size() > kMaxKeys) windows_.clear();  // a flood of fresh addresses: start over
  }
  static constexpr size_t kMaxKeys = 10000;
  int per_minute_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::deque<Clock::time_point>> windows_;
};

// Failed authentications allowed per client address per minute; beyond them every request from
// that address is answered 429 until the oldest failure is a minute old.
constexpr int kMaxAuthFailuresPerMinute = 10;

// The bearer token exactly as sent: all bytes of the one Authorization header. (httplib's
// get_header_value goes through a C string and would stop at a NUL: "Bearer k1\0" read as "k1".)
// nullopt when absent or sent more than once.
std::optional<std::string> bearer_token(const httplib::Request& req, bool* present) {
  auto [begin, end] = req.headers.equal_range("Authorization");
  *present = begin != end;
  if (begin == end || std::next(begin) != end) return std::nullopt;
  const std::string& value = begin->second;
  const std::string prefix = "Bearer ";
  if (value.size() < prefix.size() || value.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  return value.substr(prefix.size());
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct Server {
  ServerOptions options;
  Metrics metrics;
  RateLimiter limiter;
  RateLimiter auth_failures{kMaxAuthFailuresPerMinute};
  std::atomic<bool> ready{false};
  ServingParts parts;
  ModelContext ctx;
  ManifestModel traced_model;  // the model entry of traced requests' manifests
  std::unique_ptr<EngineLoop> loop;

  explicit Server(const ServerOptions& o) : options(o), limiter(o.rate_limit_per_minute) {}

  // Every error answer goes through here: the message is cut to a bounded excerpt, whatever a
  // request or a model file put into it.
  void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type,
                  const std::string& param = "", const std::string& code = "") {
    res.status = status;
    res.set_content(dump(error_body(excerpt(message, 1000), type, excerpt(param), code)), "application/json");
    metrics.count_http_error();
  }

  // Auth (with failed-auth throttling per address), rate limit, readiness, the body (size and
  // JSON nesting checked, parsed once) and error mapping around every API handler.
  using ApiHandler = std::function<void(const httplib::Request&, httplib::Response&, const json& body)>;
  httplib::Server::Handler api(ApiHandler handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      std::string client = req.remote_addr;
      if (!options.api_key.empty()) {
        if (int retry = auth_failures.blocked(req.remote_addr)) {
          res.set_header("Retry-After", std::to_string(retry));
          send_error(res, 429, cat("Too many failed authentications from ", req.remote_addr, " (more than ",
                                   kMaxAuthFailuresPerMinute, " a minute); retry in ", retry, " s"),
                     "rate_limit_error", "", "too_many_auth_failures");
          return;
        }
        bool present = false;
        std::optional<std::string> given = bearer_token(req, &present);
        if (!given || !constant_time_equal(*given, options.api_key)) {
          auth_failures.count(req.remote_addr);
          send_error(res, 401, present ? "Incorrect API key provided" : "Missing API key: send 'Authorization: Bearer <key>'",
                     "invalid_request_error", "", "invalid_api_key");
          return;
        }
        client = *given;
      }
      if (int retry = limiter.check(client)) {
        res.set_header("Retry-After", std::to_string(retry));
        send_error(res, 429, cat("Rate limit reached: ", options.rate_limit_per_minute,
                                 " requests per minute; retry in ", retry, " s"),
                   "rate_limit_error", "", "rate_limit_exceeded");
        return;
      }
      if (!ready) {
        send_error(res, 503, "The model is still loading", "service_unavailable");
        return;
      }
      try {
        // httplib bounds a Content-Length body itself; a chunked one arrives decoded, at most
        // ConnectionLimits::max_wire_body_bytes on the wire: its decoded size is checked here.
        if (req.body.size() > options.max_body_bytes) {
          res.set_header("Connection", "close");
          send_error(res, 413, cat("The request body is larger than ", options.max_body_bytes, " bytes"),
                     "invalid_request_error");
          return;
        }
        json body = req.method == "POST" ? parse_request_body(req.body) : json();
        handler(req, res, body);
      } catch (const ApiError& e) {
        send_error(res, e.status, e.what(), e.type, e.param, e.code);
      } catch (const json::exception& e) {
        send_error(res, 400, cat("Unexpected JSON in the request body: ", e.what()), "invalid_request_error");
      } catch (const Error& e) {
        send_error(res, 400, e.what(), "invalid_request_error");
      } catch (const std::exception& e) {
        send_error(res, 500, cat("Internal error: ", e.what()), "internal_error");
      }
    };
  }

  void completions(const json& body, httplib::Response& res, bool chat);
  std::string start_trace(const std::string& id, ApiRequest& api);
  void tokenize(const json& body, httplib::Response& res);
  void detokenize(const json& body, httplib::Response& res);
};

// cpp-httplib calls content providers without a try block, so an exception escaping one would
// end the process. A provider that throws ends its response instead (the releaser then aborts
// the request's sequences).
httplib::ContentProviderWithoutLength guarded(httplib::ContentProviderWithoutLength provider) {
  return [provider = std::move(provider)](size_t offset, httplib::DataSink& sink) {
    try {
      return provider(offset, sink);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "journey serve: response aborted: %s\n", e.what());
      return false;
    }
  };
}

// Everything one HTTP request accumulates while its choices run.
struct Exchange {
  ApiRequest api;
  std::shared_ptr<RequestStream> stream = std::make_shared<RequestStream>();
  std::vector<int64_t> ids;
  std::vector<ChoiceState> choices;
  std::vector<int32_t> previous;      // [n] last token of each choice (for token texts)
  std::vector<size_t> text_offset;    // [n]
  std::vector<bool> role_sent;        // [n] chat streams open with a role delta
  int finished = 0;
  bool done = false;
  std::string id;
  int64_t created = unix_time();
  std::string error;                  // engine failure text, if any
  std::string trace_dir;              // the request's dump directory when traced
};

// A traced request's dump directory, with the manifest fields only the server knows (model,
// prompt, template, settings); the engine adds the steps (llm_engine.h). Returns the directory.
std::string Server::start_trace(const std::string& id, ApiRequest& api) {
  if (options.trace_dir.empty())
    throw ApiError(400, "'journey_trace' needs the server started with --trace-dir DIR", "journey_trace");
  const std::filesystem::path dir = std::filesystem::path(options.trace_dir) / id;
  auto sink = std::make_shared<DumpSink>(dir);
  EngineRequest& r = api.sequences.at(0);
  if (r.params.logprobs == 0) r.params.logprobs = 5;  // alternatives for the manifest; the response shows them only if asked
  Manifest& m = sink->manifest();
  m.generated_by_tool = "journey serve";
  m.generated_by_command = api.chat ? "POST /v1/chat/completions" : "POST /v1/completions";
  m.model = traced_model;
  m.prompt = api.prompt_text;
  m.template_text = api.template_text;
  for (int32_t t : r.prompt) m.tokens.push_back({t, t < ctx.tokenizer->vocab_size() ? ctx.tokenizer->piece(t) : ""});
  const SamplingParams& p = r.params;
  m.settings = backend_manifest_settings(*parts.backend);
  m.settings.update({{"request_id", id},
                {"endpoint", api.chat ? "chat" : "completions"},
                {"sampling",
                 {{"temperature", p.temperature}, {"top_k", p.top_k}, {"top_p", p.top_p}, {"min_p", p.min_p},
                  {"repetition_penalty", p.repetition_penalty}, {"frequency_penalty", p.frequency_penalty},
                  {"presence_penalty", p.presence_penalty}, {"seed", p.seed ? json(*p.seed) : json(nullptr)},
                  {"greedy", p.greedy()}}},
                {"max_tokens", r.max_tokens},
                {"stop", r.stop},
                {"ignore_eos", r.ignore_eos},
                {"prefix_caching", parts.engine_config.enable_prefix_caching},
                {"batched", "activations of batched steps are not recorded (docs/serving.md)"}});
  r.trace = std::move(sink);
  return dir.string();
}

void absorb(Exchange& ex, const ModelContext& ctx, const StreamEvent& ev, json* chunk_choice) {
  ChoiceState& c = ex.choices[ev.choice];
  const RequestOutput& out = ev.output;
  c.prompt_tokens = out.prompt_tokens;
  c.completion_tokens += static_cast<int64_t>(out.tokens.size());
  std::string text = out.text;
  if (out.aborted && !out.text.empty() && out.text.rfind("engine error: ", 0) == 0) {
    ex.error = out.text;
    text.clear();
  }
  c.text += text;
  if (chunk_choice) {
    json& ch = *chunk_choice;
    ch["index"] = ev.choice;
    if (ex.api.chat) {
      json delta = json::object();
      if (!ex.role_sent[ev.choice]) {
        delta["role"] = "assistant";
        ex.role_sent[ev.choice] = true;
      }
      if (!text.empty() || !out.finished()) delta["content"] = text;
      ch["delta"] = delta;
    } else {
      ch["text"] = text;
    }
    ch["logprobs"] = nullptr;
    if (ex.api.logprobs && !out.tokens.empty())
      ch["logprobs"] = logprobs_json(ex.api, ctx, out.tokens, ex.previous[ev.choice], ex.text_offset[ev.choice]);
    ch["finish_reason"] = nullptr;
  }
  for (const SampledToken& t : out.tokens) {
    c.tokens.push_back(t);
    ex.text_offset[ev.choice] += token_text(ctx, t.id, ex.previous[ev.choice]).size();
    ex.previous[ev.choice] = t.id;
  }
  if (out.finished()) {
    c.finish_reason = out.aborted ? "abort" : finish_reason_name(*out.finish_reason);
    ++ex.finished;
    if (chunk_choice) (*chunk_choice)["finish_reason"] = c.finish_reason;
  }
}

void Server::completions(const json& body, httplib::Response& res, bool chat) {
  auto ex = std::make_shared<Exchange>();
  ex->api = chat ? parse_chat_request(body, ctx) : parse_completion_request(body, ctx);
  size_t n = ex->api.sequences.size();
  ex->choices.resize(n);
  ex->previous.assign(n, ex->api.sequences[0].prompt.back());
  ex->text_offset.assign(n, ex->api.echo ? ex->api.prompt_text.size() : 0);
  ex->role_sent.assign(n, false);
  ex->id = random_id(chat ? "chatcmpl-" : "cmpl-");
  int64_t prompt_tokens = static_cast<int64_t>(ex->api.sequences[0].prompt.size());
  if (ex->api.trace) ex->trace_dir = start_trace(ex->id, ex->api);
  ex->ids = loop->submit(ex->api.sequences, ex->stream);  // journey::Error -> 400

  auto usage = [ex, prompt_tokens] {
    int64_t completion = 0;
    for (const ChoiceState& c : ex->choices) completion += c.completion_tokens;
    return usage_json(prompt_tokens, completion);
  };

  EngineLoop* engine_loop = loop.get();
  // Abort the sequences when the response ends before they finished (the client went away).
  auto release = [engine_loop, ex](bool) {
    if (ex->finished < static_cast<int>(ex->choices.size())) engine_loop->abort(ex->ids);
  };

  if (!ex->api.stream) {
    // Non-streaming answers are sent through a content provider too, although they are one JSON
    // body: a handler that blocked until the sequences finished could not notice a client that
    // hung up (cpp-httplib 0.11 gives handlers no view of the socket), and its sequences would
    // run to max_tokens for nobody. Only a write reveals a closed connection, so while the
    // sequences run the provider sends one space every half second: JSON allows whitespace
    // before the value, so clients parse the body as usual. The second write after the client
    // left fails, the provider returns false and the releaser aborts. The price: the body is
    // sent chunked and the status is 200 before the result exists, so an engine failure
    // mid-request comes back as an OpenAI error object in a 200 response.
    std::string model = options.served_model_name;
    res.set_chunked_content_provider(
        "application/json",
        guarded([this, ex, n, chat, model, usage](size_t, httplib::DataSink& sink) {
          auto until = Clock::now() + std::chrono::milliseconds(500);
          while (ex->finished < static_cast<int>(n) && Clock::now() < until)
            if (auto ev = ex->stream->pop(std::chrono::milliseconds(50))) absorb(*ex, ctx, *ev, nullptr);
          if (ex->finished < static_cast<int>(n)) return sink.write(" ", 1);  // heartbeat: is the client there?
          std::string body;
          if (!ex->error.empty()) {
            body = dump(error_body(ex->error, "internal_error", "", "internal_error"));
          } else {
            json choices = json::array();
            for (size_t i = 0; i < n; ++i) {
              const ChoiceState& c = ex->choices[i];
              json lp = nullptr;
              if (ex->api.logprobs)
                lp = logprobs_json(ex->api, ctx, c.tokens, ex->api.sequences[0].prompt.back(),
                                   ex->api.echo ? ex->api.prompt_text.size() : 0);
              if (chat)
                choices.push_back({{"index", i}, {"message", {{"role", "assistant"}, {"content", c.text}}},
                                   {"logprobs", lp}, {"finish_reason", c.finish_reason}});
              else
                choices.push_back({{"index", i}, {"text", (ex->api.echo ? ex->api.prompt_text : "") + c.text},
                                   {"logprobs", lp}, {"finish_reason", c.finish_reason}});
            }
            json response = {{"id", ex->id}, {"object", chat ? "chat.completion" : "text_completion"},
                             {"created", ex->created}, {"model", model}, {"choices", choices}, {"usage", usage()}};
            if (!ex->trace_dir.empty()) response["journey_trace"] = ex->trace_dir;
            body = dump(response);
          }
          bool written = sink.write(body.data(), body.size());
          sink.done();
          return written;
        }),
        release);
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  const char* object = chat ? "chat.completion.chunk" : "text_completion";
  std::string model = options.served_model_name;
  auto last_write = std::make_shared<Clock::time_point>(Clock::now());
  res.set_chunked_content_provider(
      "text/event-stream",
      guarded([this, ex, n, object, model, usage, last_write](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          *last_write = Clock::now();
          return sink.write(s.data(), s.size());
        };
        auto chunk = [&](json choices) {
          json c = {{"id", ex->id}, {"object", object}, {"created", ex->created}, {"model", model}, {"choices", choices}};
          if (ex->api.include_usage) c["usage"] = nullptr;
          return c;
        };
        if (ex->done) {
          sink.done();
          return true;
        }
        // The echo of a completion prompt goes first.
        if (ex->api.echo && !ex->api.prompt_text.empty() && ex->text_offset.size() && ex->choices[0].tokens.empty() &&
            !ex->role_sent[0]) {
          ex->role_sent[0] = true;  // reused as "echo sent" for completions
          json choices = json::array();
          for (size_t i = 0; i < n; ++i)
            choices.push_back({{"index", i}, {"text", ex->api.prompt_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
          if (!write("data: " + dump(chunk(choices)) + "\n\n")) return false;
          for (size_t i = 0; i < n; ++i) ex->role_sent[i] = true;
        }
        auto ev = ex->stream->pop(std::chrono::milliseconds(200));
        if (!ev) {
          // Idle (waiting for a slot): a comment line keeps proxies calm and detects a gone client.
          if (Clock::now() - *last_write > std::chrono::seconds(2) && !write(": keep-alive\n\n")) return false;
          return sink.is_writable();
        }
        json choice;
        absorb(*ex, ctx, *ev, &choice);
        json data = chunk(json::array({choice}));
        // The dump is complete once the request finished: the chunk that says so names it.
        if (!ex->trace_dir.empty() && ex->finished == static_cast<int>(n)) data["journey_trace"] = ex->trace_dir;
        if (!ex->error.empty()) {
          write("data: " + dump(error_body(ex->error, "internal_error", "", "")) + "\n\n");
        } else if (!write("data: " + dump(data) + "\n\n")) {
          return false;  // the client is gone: the releaser aborts the sequences
        }
        if (ex->finished == static_cast<int>(n)) {
          if (ex->api.include_usage) {
            json last = chunk(json::array());
            last["usage"] = usage();
            if (!ex->trace_dir.empty()) last["journey_trace"] = ex->trace_dir;
            if (!write("data: " + dump(last) + "\n\n")) return false;
          }
          if (!write("data: [DONE]\n\n")) return false;
          ex->done = true;
          sink.done();
        }
        return true;
      }),
      release);
}

void Server::tokenize(const json& body, httplib::Response& res) {
  std::vector<int32_t> ids = parse_tokenize_request(body, ctx);
  json tokens = ids;
  res.set_content(dump({{"tokens", tokens}, {"count", ids.size()}, {"max_model_len", ctx.max_model_len}}),
                  "application/json");
}

void Server::detokenize(const json& body, httplib::Response& res) {
  res.set_content(dump({{"prompt", ctx.tokenizer->decode(parse_detokenize_request(body, ctx))}}), "application/json");
}

}  // namespace

void load_serving_parts(ServingParts& parts, const std::string& model_path, const EngineConfig& engine,
                        const std::function<std::unique_ptr<Backend>(const LoadedModel&)>& make_backend) {
  parts.model_path = model_path;
  LoadedModel model = load_model(model_path);  // released once the backend holds its own copy
  parts.tokenizer = load_tokenizer(model.path);
  parts.chat_template = std::make_unique<ModelChatTemplate>(load_chat_template(model.path));
  parts.backend = make_backend(model);
  parts.engine_config = engine;
  parts.engine_config.eos_token_ids = collect_eos_ids(model.generation, model.config, *parts.tokenizer);
}

void run_server(const ServerOptions& options, std::function<void(ServingParts&)> load) {
  Server state(options);
  ConnectionLimits limits;
  limits.workers = options.http_threads;
  // Connections queue in the kernel between accepts: room for every sequence the engine can run
  // (http_threads = max_num_seqs + 16 or more) to connect at once, twice over.
  limits.backlog = std::max(128, 2 * options.http_threads);
  limits.max_wire_body_bytes = options.max_body_bytes + options.max_body_bytes / 4 + (64 << 10);
  GuardedHttpServer http(limits);
  http.set_payload_max_length(options.max_body_bytes);
  // Every SSE event is one small write; with Nagle's algorithm a write waits for the ACK of the
  // previous one, which the client may delay (delayed ACK), so tokens would arrive in bursts.
  http.set_tcp_nodelay(true);
  http.set_error_handler([&state, &options, &limits](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    // A request the connection layer stopped reading (http_connections.h) arrives here as a 400.
    switch (current_read_failure()) {
      case ReadFailure::BodyTooLarge: res.status = 413; break;
      case ReadFailure::Timeout: res.status = 408; break;
      case ReadFailure::None: break;
    }
    std::string message = res.status == 413 ? cat("The request body is larger than ", options.max_body_bytes, " bytes")
                          : res.status == 408 ? cat("The request body did not arrive within ", limits.body_timeout.count(), " ms")
                          : res.status == 404 ? cat("No route for ", req.method, " ", excerpt(req.path))
                                              : cat("HTTP error ", res.status);
    res.set_content(dump(error_body(message, "invalid_request_error", "", "")), "application/json");
    state.metrics.count_http_error();
  });

  http.Get("/health", [&state](const httplib::Request&, httplib::Response& res) {
    res.status = state.ready ? 200 : 503;
    res.set_content(state.ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}", "application/json");
  });
  http.Get("/metrics", [&state, &http](const httplib::Request&, httplib::Response& res) {
    res.set_content(state.metrics.render(http.stats()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", state.api([&state](const httplib::Request&, httplib::Response& res, const json&) {
    json model = {{"id", state.options.served_model_name}, {"object", "model"}, {"created", unix_time()},
                  {"owned_by", "journey"}, {"max_model_len", state.ctx.max_model_len}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  }));
  using Request = httplib::Request;
  using Response = httplib::Response;
  http.Post("/v1/completions", state.api([&state](const Request&, Response& r, const json& b) { state.completions(b, r, false); }));
  http.Post("/v1/chat/completions", state.api([&state](const Request&, Response& r, const json& b) { state.completions(b, r, true); }));
  http.Post("/tokenize", state.api([&state](const Request&, Response& r, const json& b) { state.tokenize(b, r); }));
  http.Post("/detokenize", state.api([&state](const Request&, Response& r, const json& b) { state.detokenize(b, r); }));

  if (!http.bind(options.host, options.port))
    fail("cannot listen on ", options.host, ":", options.port, " (address in use or not available)");

  // SIGINT/SIGTERM are taken by one thread with sigwait, which then stops the server cleanly.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::thread signal_thread([&http, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != 0) http.stop();
  });

  std::string load_error;
  std::thread loader([&] {
    try {
      load(state.parts);
      state.ctx.served_model_name = options.served_model_name;
      state.ctx.tokenizer = state.parts.tokenizer.get();
      state.ctx.chat_template = state.parts.chat_template.get();
      auto engine = std::make_unique<LLMEngine>(*state.parts.backend, state.parts.engine_config, state.parts.tokenizer.get());
      state.ctx.max_model_len = engine->max_model_len();
      state.ctx.eos_ids = state.parts.engine_config.eos_token_ids;
      if (!options.trace_dir.empty()) {
        state.traced_model = manifest_model(state.parts.model_path, state.parts.backend->config());
        std::fprintf(stderr, "journey serve: requests with \"journey_trace\": true dump to %s/<id>/\n",
                     options.trace_dir.c_str());
      }
      const int64_t kv_tokens = engine->num_kv_blocks() * state.parts.engine_config.block_size;
      const int64_t kv_bytes = engine->num_kv_blocks() * state.parts.backend->kv_block_bytes(state.parts.engine_config.block_size);
      std::fprintf(stderr,
                   "journey serve: %s ready on http://%s:%d (%lld KV blocks of %lld tokens = %lld tokens in %.1f MiB, "
                   "context %lld)\n",
                   options.served_model_name.c_str(), options.host.c_str(), options.port,
                   static_cast<long long>(engine->num_kv_blocks()),
                   static_cast<long long>(state.parts.engine_config.block_size), static_cast<long long>(kv_tokens),
                   double(kv_bytes) / double(1 << 20), static_cast<long long>(engine->max_model_len()));
      state.loop = std::make_unique<EngineLoop>(std::move(engine), state.metrics);
      state.ready = true;
    } catch (const std::exception& e) {
      load_error = e.what();
      http.stop();
    }
  });
  std::fprintf(stderr, "journey serve: listening on http://%s:%d, loading %s\n", options.host.c_str(), options.port,
               state.parts.model_path.empty() ? "the model" : state.parts.model_path.c_str());
  http.serve();
  loader.join();
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  state.loop.reset();  // stop the engine thread before the backend goes away
  if (!load_error.empty()) fail(load_error);
}

}  // namespace journey::server
