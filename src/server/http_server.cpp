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
#include "server/drain.h"
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

// One line on stderr per API request, written when its response is complete (streams and
// non-streaming answers: when the content provider ends; errors: at once):
//   journey serve: request chatcmpl-… POST /v1/chat/completions 200 prompt_tokens=12
//   completion_tokens=24 ttft_ms=35.1 total_ms=410.7 finish=length [user=…] [error="…"]
struct RequestLog {
  std::string id;
  std::string route;  // "POST /v1/completions"
  std::string user;
  Clock::time_point start = Clock::now();
  int status = 0;
  int64_t prompt_tokens = -1, completion_tokens = -1;  // -1: none (not a generation, or refused)
  double ttft_seconds = -1;
  std::string finish;  // finish reasons of the choices, comma-separated
  std::string error;   // the error message of a 4xx/5xx
  bool deferred = false;  // written by the response's releaser, not by the route wrapper
  std::atomic<bool> written{false};

  void write() {
    if (written.exchange(true)) return;
    const double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::string line = cat("journey serve: request ", id, " ", route, " ", status);
    if (prompt_tokens >= 0) line += cat(" prompt_tokens=", prompt_tokens, " completion_tokens=", completion_tokens);
    if (ttft_seconds >= 0) line += cat(" ttft_ms=", std::round(ttft_seconds * 1e4) / 10);
    line += cat(" total_ms=", std::round(total_ms * 10) / 10);
    if (!finish.empty()) line += " finish=" + finish;
    if (!user.empty()) line += " user=" + dump(json(user));
    if (!error.empty()) line += " error=" + dump(json(excerpt(error, 200)));
    std::fprintf(stderr, "%s\n", line.c_str());
  }
};

struct Server {
  ServerOptions options;
  Metrics metrics;
  RateLimiter limiter;
  RateLimiter auth_failures{kMaxAuthFailuresPerMinute};
  std::atomic<bool> ready{false};
  DrainGate drain;  // closed by the first SIGTERM/SIGINT (drain.h)
  ServingParts parts;
  ModelContext ctx;
  ManifestModel traced_model;  // the model entry of traced requests' manifests
  std::unique_ptr<EngineLoop> loop;

  explicit Server(const ServerOptions& o)
      : options(o), metrics(o.served_model_name, o.replica_name), limiter(o.rate_limit_per_minute) {}

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
  using ApiHandler = std::function<void(const httplib::Request&, httplib::Response&, const json& body,
                                        const std::shared_ptr<RequestLog>& log)>;
  httplib::Server::Handler api(ApiHandler handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      auto log = std::make_shared<RequestLog>();
      log->id = random_id("req-");
      log->route = req.method + " " + excerpt(req.path, 100);
      serve_api(req, res, handler, log);
      if (!log->deferred) {
        log->status = res.status < 0 ? 200 : res.status;
        if (log->status >= 400) log->error = error_message_of(res);
        log->write();
      }
    };
  }

  // The message of an error body written by send_error (for the log line).
  static std::string error_message_of(const httplib::Response& res) {
    try {
      json body = json::parse(res.body);
      return body.at("error").at("message").get<std::string>();
    } catch (const std::exception&) {
      return "";
    }
  }

  void serve_api(const httplib::Request& req, httplib::Response& res, const ApiHandler& handler,
                 const std::shared_ptr<RequestLog>& log) {
    {
      // Held while the handler runs; a completion takes a second one for its response (Exchange).
      DrainGate::Ticket admitted = drain.admit();
      if (!admitted) {
        // Draining: nothing was started, so the client (or a balancer: deploy/haproxy.cfg) can
        // send the request again, to another replica or to this one once it is back.
        res.set_header("Retry-After", "1");
        res.set_header("Connection", "close");
        send_error(res, 503, "The server is shutting down (draining): retry on another replica or after the restart",
                   "service_unavailable", "", "server_draining");
        return;
      }
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
        handler(req, res, body, log);
      } catch (const ApiError& e) {
        send_error(res, e.status, e.what(), e.type, e.param, e.code);
      } catch (const json::exception& e) {
        send_error(res, 400, cat("Unexpected JSON in the request body: ", e.what()), "invalid_request_error");
      } catch (const Error& e) {
        send_error(res, 400, e.what(), "invalid_request_error");
      } catch (const std::exception& e) {
        send_error(res, 500, cat("Internal error: ", e.what()), "internal_error");
      }
    }
  }

  void completions(const json& body, httplib::Response& res, bool chat, const std::shared_ptr<RequestLog>& log);
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
  DrainGate::Ticket open_response;    // a drain waits until this response has ended
  std::shared_ptr<RequestLog> log;    // the request's log line, written when the response ends
};

// OpenAI's streamed form of new tool calls: per call one delta with its index, id, type and name
// (arguments ""), then one with the arguments. index counts the choice's calls from 0.
void append_tool_call_deltas(json& deltas, const std::vector<ToolCall>& calls, size_t first_index) {
  for (size_t k = 0; k < calls.size(); ++k) {
    const ToolCall& call = calls[k];
    deltas.push_back({{"index", first_index + k}, {"id", call.id}, {"type", "function"},
                      {"function", {{"name", call.name}, {"arguments", ""}}}});
    deltas.push_back({{"index", first_index + k}, {"function", {{"arguments", call.arguments}}}});
  }
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json list = json::array();
  for (const ToolCall& call : calls)
    list.push_back({{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  return list;
}

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

// Takes one engine event into the exchange and, when chunk_choice is given, writes its stream
// chunk. Returns false when that chunk says nothing (tools offered and the text held back as a
// possible call): the stream skips it, as vLLM does.
bool absorb(Exchange& ex, const ModelContext& ctx, const StreamEvent& ev, json* chunk_choice) {
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
  if (!out.tokens.empty() && ex.log && ex.log->ttft_seconds < 0)
    ex.log->ttft_seconds = std::chrono::duration<double>(Clock::now() - ex.log->start).count();
  // With tools offered, the text goes through the choice's call parser: what it is sure is
  // content is content, complete calls become tool_calls.
  std::string content = text;
  json call_deltas = json::array();
  if (ex.api.parse_tool_calls()) {
    if (!c.tool_parser) c.tool_parser.emplace(ex.api.tool_format, ex.api.tools->names, ex.api.tools->parallel);
    ToolCallParser::Output piece = c.tool_parser->feed(text);
    if (out.finished()) {
      ToolCallParser::Output rest = c.tool_parser->finish();
      piece.content += rest.content;
      for (ToolCall& call : rest.calls) piece.calls.push_back(std::move(call));
    }
    content = piece.content;
    c.content += piece.content;
    append_tool_call_deltas(call_deltas, piece.calls, c.tool_calls.size());
    for (ToolCall& call : piece.calls) c.tool_calls.push_back(std::move(call));
  }
  if (chunk_choice) {
    json& ch = *chunk_choice;
    ch["index"] = ev.choice;
    if (ex.api.chat) {
      json delta = json::object();
      if (!ex.role_sent[ev.choice]) {
        delta["role"] = "assistant";
        ex.role_sent[ev.choice] = true;
      }
      if (!content.empty() || (!out.finished() && call_deltas.empty() && !ex.api.parse_tool_calls()))
        delta["content"] = content;
      if (!call_deltas.empty()) delta["tool_calls"] = call_deltas;
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
    if (!c.tool_calls.empty() && !out.aborted) c.finish_reason = "tool_calls";  // as vLLM: the model called
    ++ex.finished;
    if (chunk_choice) (*chunk_choice)["finish_reason"] = c.finish_reason;
  }
  return !(ex.api.parse_tool_calls() && chunk_choice && !out.finished() && content.empty() && call_deltas.empty() &&
           (*chunk_choice)["delta"].empty() && (*chunk_choice)["logprobs"].is_null());
}

void Server::completions(const json& body, httplib::Response& res, bool chat, const std::shared_ptr<RequestLog>& log) {
  auto ex = std::make_shared<Exchange>();
  ex->open_response = drain.open_response();
  ex->api = chat ? parse_chat_request(body, ctx) : parse_completion_request(body, ctx);
  log->user = ex->api.user;
  size_t n = ex->api.sequences.size();
  ex->choices.resize(n);
  ex->previous.assign(n, ex->api.sequences[0].prompt.back());
  ex->text_offset.assign(n, ex->api.echo ? ex->api.prompt_text.size() : 0);
  ex->role_sent.assign(n, false);
  ex->id = random_id(chat ? "chatcmpl-" : "cmpl-");
  int64_t prompt_tokens = static_cast<int64_t>(ex->api.sequences[0].prompt.size());
  if (ex->api.trace) ex->trace_dir = start_trace(ex->id, ex->api);
  ex->ids = loop->submit(ex->api.sequences, ex->stream);  // journey::Error -> 400
  // From here the response is a content provider: its releaser writes the log line.
  log->id = ex->id;
  log->deferred = true;
  ex->log = log;

  auto usage = [ex, prompt_tokens] {
    int64_t completion = 0;
    for (const ChoiceState& c : ex->choices) completion += c.completion_tokens;
    return usage_json(prompt_tokens, completion);
  };

  EngineLoop* engine_loop = loop.get();
  // Abort the sequences when the response ends before they finished (the client went away).
  auto release = [engine_loop, ex, prompt_tokens](bool) {
    const bool gone = ex->finished < static_cast<int>(ex->choices.size());
    if (gone) engine_loop->abort(ex->ids);
    RequestLog& log = *ex->log;
    log.status = 200;
    log.prompt_tokens = prompt_tokens;
    log.completion_tokens = 0;
    for (const ChoiceState& c : ex->choices) {
      log.completion_tokens += c.completion_tokens;
      log.finish += (log.finish.empty() ? "" : ",") + (c.finish_reason.empty() ? std::string("client_gone") : c.finish_reason);
    }
    if (!ex->error.empty()) log.error = ex->error;
    log.write();
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
              if (chat && ex->api.parse_tool_calls()) {
                json message = {{"role", "assistant"},
                                {"content", c.content.empty() && !c.tool_calls.empty() ? json(nullptr) : json(c.content)}};
                if (!c.tool_calls.empty()) message["tool_calls"] = tool_calls_json(c.tool_calls);
                choices.push_back({{"index", i}, {"message", message}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
              } else if (chat) {
                choices.push_back({{"index", i}, {"message", {{"role", "assistant"}, {"content", c.text}}},
                                   {"logprobs", lp}, {"finish_reason", c.finish_reason}});
              }
              if (!chat)
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
        if (!absorb(*ex, ctx, *ev, &choice)) return true;  // nothing to say yet
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

// httplib's stop() does nothing until serve() has started listening, and a stop that came too
// early (a signal or a load error in the first milliseconds) would leave serve() running for
// ever with nobody left to stop it: wait, bounded, until it listens.
void stop_when_listening(GuardedHttpServer& http) {
  for (int i = 0; i < 1000 && !http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  http.stop();
}

}  // namespace

void load_serving_parts(ServingParts& parts, const std::string& model_path, const EngineConfig& engine,
                        const std::function<std::unique_ptr<Backend>(const LoadedModel&)>& make_backend,
                        const std::string& chat_template_file) {
  parts.model_path = model_path;
  LoadedModel model = load_model(model_path);  // released once the backend holds its own copy
  parts.tokenizer = load_tokenizer(model.path);
  parts.chat_template = std::make_unique<ModelChatTemplate>(load_chat_template(model.path));
  if (!chat_template_file.empty()) {
    if (!std::filesystem::is_regular_file(chat_template_file))
      fail("--chat-template ", chat_template_file, ": no such file");
    parts.chat_template->chat_template = make_jinja_template(read_whole_file(chat_template_file), chat_template_file);
  }
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
    RequestLog log;
    log.id = random_id("req-");
    log.route = req.method + " " + excerpt(req.path, 100);
    log.status = res.status;
    log.error = message;
    log.write();
  });

  // A balancer's health check: 200 only while this replica takes new requests.
  http.Get("/health", [&state](const httplib::Request&, httplib::Response& res) {
    const char* status = state.drain.closed() ? "draining" : state.ready ? "ok" : "loading";
    res.status = std::string(status) == "ok" ? 200 : 503;
    res.set_content(cat("{\"status\":\"", status, "\"}"), "application/json");
  });
  http.Get("/metrics", [&state, &http](const httplib::Request&, httplib::Response& res) {
    res.set_content(state.metrics.render(http.stats()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", state.api([&state](const httplib::Request&, httplib::Response& res, const json&, const auto&) {
    json model = {{"id", state.options.served_model_name}, {"object", "model"}, {"created", unix_time()},
                  {"owned_by", "journey"}, {"max_model_len", state.ctx.max_model_len}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  }));
  using Request = httplib::Request;
  using Response = httplib::Response;
  using Log = std::shared_ptr<RequestLog>;
  http.Post("/v1/completions", state.api([&state](const Request&, Response& r, const json& b, const Log& log) { state.completions(b, r, false, log); }));
  http.Post("/v1/chat/completions", state.api([&state](const Request&, Response& r, const json& b, const Log& log) { state.completions(b, r, true, log); }));
  http.Post("/tokenize", state.api([&state](const Request&, Response& r, const json& b, const Log&) { state.tokenize(b, r); }));
  http.Post("/detokenize", state.api([&state](const Request&, Response& r, const json& b, const Log&) { state.detokenize(b, r); }));
  // What is running: no key needed (like /health), nothing secret in it.
  http.Get("/version", [&state](const httplib::Request&, httplib::Response& res) {
    json version = {{"version", JOURNEY_VERSION}, {"git_commit", JOURNEY_GIT_COMMIT[0] ? json(JOURNEY_GIT_COMMIT) : json(nullptr)},
                    {"model", state.options.served_model_name}};
    if (!state.options.replica_name.empty()) version["replica"] = state.options.replica_name;
    res.set_content(dump(version), "application/json");
  });

  // CORS. A browser page on another origin may call the API when its origin is listed
  // (--allowed-origins); the preflight OPTIONS is answered without a key (browsers send none),
  // the real request still needs one. An origin not listed gets no Access-Control-* header, so
  // the browser refuses to hand the answer to the page.
  auto allowed_origin = [&options](const httplib::Request& req) -> std::string {
    const std::string origin = req.get_header_value("Origin");
    if (origin.empty()) return "";
    for (const std::string& allowed : options.allowed_origins)
      if (allowed == "*" || allowed == origin) return allowed == "*" ? "*" : origin;
    return "";
  };
  http.Options(R"(/.*)", [allowed_origin](const httplib::Request& req, httplib::Response& res) {
    res.status = 204;
    const std::string origin = allowed_origin(req);
    if (origin.empty()) return;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : excerpt(asked, 1000));
    res.set_header("Access-Control-Max-Age", "600");
  });
  http.set_post_routing_handler([allowed_origin](const httplib::Request& req, httplib::Response& res) {
    const std::string origin = allowed_origin(req);
    if (origin.empty()) return;
    res.set_header("Access-Control-Allow-Origin", origin);
    if (origin != "*") res.set_header("Vary", "Origin");
  });

  if (!http.bind(options.host, options.port))
    fail("cannot listen on ", options.host, ":", options.port, " (address in use or not available)");

  // SIGINT/SIGTERM start a drain (drain.h); the thread that takes them exists before any other.
  std::signal(SIGPIPE, SIG_IGN);
  SignalDrain signal_drain(
      state.drain, std::chrono::milliseconds(static_cast<int64_t>(options.drain_timeout_seconds * 1000)),
      [&state] {
        if (state.ready) state.loop->abort_all();
      },
      [&http] { stop_when_listening(http); });

  std::string load_error;
  const auto load_start = Clock::now();
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
                   "journey serve: %s ready on http://%s:%d in %.1f s (%lld KV blocks of %lld tokens = %lld tokens in "
                   "%.1f MiB, context %lld)\n",
                   options.served_model_name.c_str(), options.host.c_str(), options.port,
                   std::chrono::duration<double>(Clock::now() - load_start).count(),
                   static_cast<long long>(engine->num_kv_blocks()),
                   static_cast<long long>(state.parts.engine_config.block_size), static_cast<long long>(kv_tokens),
                   double(kv_bytes) / double(1 << 20), static_cast<long long>(engine->max_model_len()));
      state.loop = std::make_unique<EngineLoop>(std::move(engine), state.metrics);
      state.ready = true;
    } catch (const std::exception& e) {
      load_error = e.what();
      stop_when_listening(http);
    }
  });
  std::fprintf(stderr, "journey serve: listening on http://%s:%d, loading %s\n", options.host.c_str(), options.port,
               state.parts.model_path.empty() ? "the model" : state.parts.model_path.c_str());
  http.serve();
  loader.join();
  const DrainReport drained = signal_drain.finish();
  std::optional<EngineStats> last;
  if (state.loop) last = state.loop->shutdown();  // stop the engine thread before the backend goes away
  state.loop.reset();
  if (!load_error.empty()) fail(load_error);
  if (!drained.signalled) return;
  const std::string summary = drain_summary(drained, last ? last->kv.used_blocks : 0, last ? last->kv.num_blocks : 0);
  // A drain that had to abort requests, or blocks still held, is not a clean exit: status 1 says so.
  if (drained.aborted > 0 || (last && last->kv.used_blocks != 0)) fail(summary);
  std::fprintf(stderr, "journey serve: %s\n", summary.c_str());
}

}  // namespace journey::server
