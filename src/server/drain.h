// Graceful shutdown of `journey serve` (docs/serving.md, "Replicas"): what a replica behind a load
// balancer needs so that a restart loses no request.
//
//   first SIGTERM/SIGINT ─► the gate closes: new API requests get 503 + Retry-After, /health says
//                           503 {"status":"draining"} (the balancer stops sending), while every
//                           admitted request (streams included) runs to its last byte
//   nothing in flight    ─► the server stops and the process exits 0 with the drain's figures
//   --drain-timeout, or a second signal ─► what is still running is aborted (clients see
//                           finish_reason "abort"), then the server stops and the exit says so
//
// The server keeps listening while it drains: a balancer's health check must get its 503 (a
// refused connection would look like a crash), and a request that reaches a draining replica gets
// an answer the balancer may retry elsewhere (deploy/haproxy.cfg: retry-on 503).
#pragma once
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace journey::server {

// Counts what is in flight and refuses new requests once closed. A request holds a ticket while
// its handler runs; a response that outlives its handler (a completion, streamed or not) holds
// another until its last byte is written or its client left. Taking the response's ticket inside
// the handler (while the handler's is held) leaves no moment at which a running request counts 0.
class DrainGate {
 public:
  using Ticket = std::shared_ptr<void>;  // the count drops when the last copy goes

  Ticket admit();          // nullptr once closed: the caller answers 503
  Ticket open_response();  // for a response that outlives its handler; never refused
  bool closed() const;
  void close();
  int64_t in_flight() const;               // handlers running + responses open
  int64_t responses_open() const;          // responses not yet ended
  int64_t responses_ended_closed() const;  // responses that ended after close()

 private:
  Ticket ticket(bool response);
  mutable std::mutex mutex_;
  bool closed_ = false;
  int64_t in_flight_ = 0;
  int64_t responses_ = 0;
  int64_t responses_ended_closed_ = 0;
};

// What happened between the first signal and the stop.
struct DrainReport {
  bool signalled = false;   // false: the server stopped for another reason (a load error)
  int signal = 0;           // the first signal
  int64_t in_flight_at_signal = 0;  // responses open at the first signal
  int64_t finished = 0;     // responses that ended during the drain before any abort
  int64_t aborted = 0;      // responses still open when the drain gave up
  double seconds = 0;       // from the first signal to the stop
  std::string ended_by;     // "" (drained), "a second signal", "the drain timeout (N s)"
};

// The thread that takes SIGINT/SIGTERM (blocked in every thread of the process: construct it
// before any other thread starts, they inherit the mask) and runs the drain. abort_in_flight
// aborts every running sequence (their streams then end with finish_reason "abort");
// stop_server makes the HTTP server's serve() return.
class SignalDrain {
 public:
  SignalDrain(DrainGate& gate, std::chrono::milliseconds timeout, std::function<void()> abort_in_flight,
              std::function<void()> stop_server);
  ~SignalDrain();  // finish(), if not done
  // Ends the thread (whether or not a signal came) and returns the report.
  DrainReport finish();

 private:
  void run();
  bool take_signal(std::chrono::milliseconds wait, int* sig);  // false: none within `wait`

  DrainGate& gate_;
  std::chrono::milliseconds timeout_;
  std::function<void()> abort_in_flight_, stop_server_;
  sigset_t signals_;
  std::atomic<bool> exiting_{false};
  DrainReport report_;
  std::thread thread_;
};

// The line the process ends with, e.g. "drained 3 requests in 0.42 s, none aborted; KV blocks in
// use at exit: 0 of 512".
std::string drain_summary(const DrainReport& report, int64_t kv_blocks_used, int64_t kv_blocks_total);

}  // namespace journey::server
