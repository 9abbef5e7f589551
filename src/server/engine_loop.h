// The one thread that runs the model. HTTP threads never touch the engine: they submit requests
// through a command queue and read what comes back from a per-request RequestStream.
//
//   HTTP thread ──submit()──► command queue ──► engine thread: add / abort, step(), push outputs
//   HTTP thread ◄──pop()───── RequestStream ◄──┘
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "engine/llm_engine.h"
#include "server/metrics.h"

namespace journey::server {

// What the engine thread hands one HTTP request: outputs of its n choices, in order.
struct StreamEvent {
  size_t choice = 0;  // index among the request's n sequences
  RequestOutput output;
};

class RequestStream {
 public:
  void push(StreamEvent event);
  // Waits up to `timeout` for the next event.
  std::optional<StreamEvent> pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
};

class EngineLoop {
 public:
  EngineLoop(std::unique_ptr<LLMEngine> engine, Metrics& metrics);
  ~EngineLoop();  // shutdown(), if not done

  // Queue the n sequences of one API request. Returns their engine ids, or throws the
  // journey::Error the engine raised for the first bad one (none of them is queued then).
  std::vector<int64_t> submit(std::vector<EngineRequest> requests, std::shared_ptr<RequestStream> stream);
  void abort(const std::vector<int64_t>& ids);
  // Abort every sequence the engine holds (a drain that ran out of time): each request's stream
  // gets its last output with `aborted` set.
  void abort_all();
  // Stops the thread: pending commands are handled, whatever still runs is aborted and stepped
  // out of the engine (its blocks freed), then the engine's final stats are returned, which the
  // drain's last log line reports (every KV block should be free).
  EngineStats shutdown();
  const LLMEngine& engine() const { return *engine_; }  // immutable facts only (tokenizer, lengths)

 private:
  struct Add {
    std::vector<EngineRequest> requests;
    std::shared_ptr<RequestStream> stream;
    std::promise<std::vector<int64_t>> result;
  };
  struct Abort {
    std::vector<int64_t> ids;
  };
  struct AbortAll {};
  using Command = std::variant<Add, Abort, AbortAll>;
  struct Tracked {
    std::shared_ptr<RequestStream> stream;
    size_t choice = 0;
    std::chrono::steady_clock::time_point arrival, last_token;
    bool first_token_seen = false;
  };

  void run();
  void handle(Add& add);
  void handle(Abort& abort);
  void handle(AbortAll&);

  std::unique_ptr<LLMEngine> engine_;
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Command> commands_;
  bool stopping_ = false;
  std::optional<EngineStats> final_stats_;  // set by shutdown()
  std::unordered_map<int64_t, Tracked> tracked_;  // engine thread only
  int64_t last_steps_ = 0, last_batched_tokens_ = 0;  // engine thread only: stats at the last step
  std::thread thread_;
};

}  // namespace journey::server
