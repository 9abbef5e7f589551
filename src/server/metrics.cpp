#include "server/metrics.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace journey::server {

namespace {
std::string number(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}
void line(std::string& out, const std::string& name, const std::string& type, const std::string& labels,
          const std::string& help, double v) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + "{" + labels + "} " + number(v) + "\n";
}
// A label value in the Prometheus text format: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}
}  // namespace

void Histogram::observe(double value) {
  size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string before_le = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{" + before_le + "le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{" + before_le + "le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum{" + labels + "} " + number(sum_) + "\n" + name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

Metrics::Metrics(const std::string& model_name, const std::string& replica)
    : labels_("model_name=\"" + label_value(model_name) + "\"" +
              (replica.empty() ? "" : ",replica=\"" + label_value(replica) + "\"")),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
      itl_({0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5}),
      e2e_({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120}),
      step_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      step_tokens_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}),
      step_sampled_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void Metrics::set_engine(const EngineStats& stats) {
  std::lock_guard<std::mutex> lock(mutex_);
  engine_ = stats;
}
void Metrics::observe_ttft(double s) { std::lock_guard<std::mutex> lock(mutex_); ttft_.observe(s); }
void Metrics::observe_itl(double s) { std::lock_guard<std::mutex> lock(mutex_); itl_.observe(s); }
void Metrics::observe_e2e(double s) { std::lock_guard<std::mutex> lock(mutex_); e2e_.observe(s); }
void Metrics::observe_step(double seconds, int64_t batched_tokens, int64_t sampled_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_.observe(seconds);
  step_tokens_.observe(double(batched_tokens));
  step_sampled_.observe(double(sampled_tokens));
}
void Metrics::count_http_error() { std::lock_guard<std::mutex> lock(mutex_); ++http_errors_; }
void Metrics::count_finished(const char* reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::strcmp(reason, "stop") == 0) ++finished_stop_;
  else if (std::strcmp(reason, "length") == 0) ++finished_length_;
  else ++finished_abort_;
}
EngineStats Metrics::engine() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return engine_;
}

std::string Metrics::render(const ConnectionStats& connections) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const EngineStats& e = engine_;
  std::string out;
  line(out, "journey:num_requests_running", "gauge", labels_, "Sequences in the running batch.", e.running);
  line(out, "journey:num_requests_waiting", "gauge", labels_, "Sequences waiting to be admitted.", e.waiting);
  line(out, "journey:kv_blocks_total", "gauge", labels_, "KV cache blocks in the pool.", e.kv.num_blocks);
  line(out, "journey:kv_blocks_used", "gauge", labels_, "KV cache blocks referenced by a sequence.", e.kv.used_blocks);
  line(out, "journey:kv_blocks_free", "gauge", labels_, "KV cache blocks free (including cached prefixes).", e.kv.free_blocks);
  line(out, "journey:kv_blocks_cached_free", "gauge", labels_, "Free blocks still holding a reusable prefix.", e.kv.cached_free_blocks);
  line(out, "journey:kv_cache_usage_perc", "gauge", labels_, "Fraction of KV blocks in use.",
       e.kv.num_blocks ? double(e.kv.used_blocks) / double(e.kv.num_blocks) : 0.0);
  line(out, "journey:kv_slots_allocated", "gauge", labels_, "Token slots in used blocks.", e.kv.allocated_slots);
  line(out, "journey:kv_slots_filled", "gauge", labels_, "Token slots of used blocks that hold a computed token.", e.kv.filled_slots);
  line(out, "journey:prefix_cache_queries_total", "counter", labels_, "Prompt tokens looked up in the prefix cache.", e.kv.prefix_queries);
  line(out, "journey:prefix_cache_hits_total", "counter", labels_, "Prompt tokens served by the prefix cache.", e.kv.prefix_hits);
  line(out, "journey:prefix_cache_hit_rate", "gauge", labels_, "prefix_cache_hits_total / prefix_cache_queries_total.",
       e.kv.prefix_queries ? double(e.kv.prefix_hits) / double(e.kv.prefix_queries) : 0.0);
  line(out, "journey:kv_copy_on_writes_total", "counter", labels_, "Shared KV blocks copied before a write.", e.kv.copy_on_writes);
  line(out, "journey:num_preemptions_total", "counter", labels_, "Sequences preempted for lack of KV blocks.", e.preemptions);
  line(out, "journey:prompt_tokens_total", "counter", labels_, "Prompt tokens of admitted requests.", e.prompt_tokens_total);
  line(out, "journey:generation_tokens_total", "counter", labels_, "Generated tokens.", e.generation_tokens_total);
  line(out, "journey:engine_steps_total", "counter", labels_, "Engine steps (batched forward passes).", e.steps);
  out += "# HELP journey:request_success_total Finished requests by finish reason.\n"
         "# TYPE journey:request_success_total counter\n";
  out += "journey:request_success_total{" + labels_ + ",finished_reason=\"stop\"} " + std::to_string(finished_stop_) + "\n";
  out += "journey:request_success_total{" + labels_ + ",finished_reason=\"length\"} " + std::to_string(finished_length_) + "\n";
  out += "journey:request_success_total{" + labels_ + ",finished_reason=\"abort\"} " + std::to_string(finished_abort_) + "\n";
  line(out, "journey:http_errors_total", "counter", labels_, "Requests answered with an error status.", double(http_errors_));
  line(out, "journey:http_connections_open", "gauge", labels_, "Open client connections.", double(connections.open));
  line(out, "journey:http_connections_accepted_total", "counter", labels_, "Client connections accepted.", double(connections.accepted));
  line(out, "journey:http_connections_evicted_total", "counter", labels_,
       "Connections closed while waiting for headers to make room for new ones.", double(connections.evicted));
  line(out, "journey:http_header_timeouts_total", "counter", labels_, "Requests whose headers did not arrive in time (408).",
       double(connections.header_timeouts));
  line(out, "journey:http_headers_too_large_total", "counter", labels_, "Requests with headers over the limit (431).",
       double(connections.headers_too_large));
  line(out, "journey:http_body_timeouts_total", "counter", labels_, "Requests whose body did not arrive in time (408).",
       double(connections.body_timeouts));
  line(out, "journey:http_bodies_too_large_total", "counter", labels_, "Request bodies refused while being received (413).",
       double(connections.bodies_too_large));
  ttft_.write(out, "journey:time_to_first_token_seconds", "Time from arrival to the first generated token.", labels_);
  itl_.write(out, "journey:inter_token_latency_seconds", "Time between consecutive tokens of a request.", labels_);
  e2e_.write(out, "journey:e2e_request_latency_seconds", "Time from arrival to the last token.", labels_);
  step_.write(out, "journey:engine_step_seconds", "Wall time of one engine step (schedule, batched forward, sampling).", labels_);
  step_tokens_.write(out, "journey:engine_step_batched_tokens", "Tokens computed by one step's forward pass.", labels_);
  step_sampled_.write(out, "journey:engine_step_sampled_tokens", "Tokens sampled by one step (one per decoding sequence).", labels_);
  return out;
}

}  // namespace journey::server
