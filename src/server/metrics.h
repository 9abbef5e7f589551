// Server metrics in the Prometheus text format (GET /metrics). Counters and latency histograms
// are recorded by the engine thread; gauges are a snapshot of the engine taken after each step.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/llm_engine.h"

namespace journey::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double value);
  // "# TYPE name histogram" and the _bucket / _sum / _count lines; labels ("a=\"x\",b=\"y\"" or "")
  // go on every line, before le.
  void write(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const;

 private:
  std::vector<double> bounds_;    // [B] upper bounds, ascending
  std::vector<uint64_t> counts_;  // [B + 1] per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What the connection layer (http_connections.h) counts, shown by /metrics.
struct ConnectionStats {
  long long accepted = 0, open = 0, header_timeouts = 0, headers_too_large = 0, evicted = 0, body_timeouts = 0,
            bodies_too_large = 0;
};

class Metrics {
 public:
  // Every series carries model_name="..." (vLLM's label) and, when replica is not empty,
  // replica="..." (several replicas behind one load balancer, scraped into one Prometheus).
  explicit Metrics(const std::string& model_name = "", const std::string& replica = "");
  void set_engine(const EngineStats& stats);  // after each step
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_e2e(double seconds);
  // One engine step: its wall time, the tokens its forward pass computed, the tokens it sampled
  // (= sequences that produced a token). Batching shows here: under 16 streams a step should
  // sample ~16 tokens in not much more time than a step of one.
  void observe_step(double seconds, int64_t batched_tokens, int64_t sampled_tokens);
  void count_finished(const char* reason);    // "stop", "length", "abort"
  void count_http_error();
  std::string render(const ConnectionStats& connections = {}) const;
  EngineStats engine() const;

 private:
  std::string labels_;  // model_name="…"[,replica="…"], escaped
  mutable std::mutex mutex_;
  EngineStats engine_;
  Histogram ttft_, itl_, e2e_, step_, step_tokens_, step_sampled_;
  uint64_t finished_stop_ = 0, finished_length_ = 0, finished_abort_ = 0, http_errors_ = 0;
};

}  // namespace journey::server
