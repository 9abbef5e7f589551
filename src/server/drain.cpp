#include "server/drain.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "core/error.h"

namespace journey::server {

using Clock = std::chrono::steady_clock;

DrainGate::Ticket DrainGate::ticket(bool response) {
  // Any non-null pointer will do: the ticket is its deleter.
  return Ticket(static_cast<void*>(this), [this, response](void*) {
    std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
    if (response) {
      --responses_;
      if (closed_) ++responses_ended_closed_;
    }
  });
}

DrainGate::Ticket DrainGate::admit() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return nullptr;
    ++in_flight_;
  }
  return ticket(false);
}

DrainGate::Ticket DrainGate::open_response() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++in_flight_;
    ++responses_;
  }
  return ticket(true);
}

bool DrainGate::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

void DrainGate::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
}

int64_t DrainGate::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_;
}

int64_t DrainGate::responses_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return responses_;
}

int64_t DrainGate::responses_ended_closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return responses_ended_closed_;
}

namespace {
const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
std::string requests(int64_t n) { return cat(n, n == 1 ? " request" : " requests"); }
}  // namespace

SignalDrain::SignalDrain(DrainGate& gate, std::chrono::milliseconds timeout, std::function<void()> abort_in_flight,
                         std::function<void()> stop_server)
    : gate_(gate), timeout_(timeout), abort_in_flight_(std::move(abort_in_flight)), stop_server_(std::move(stop_server)) {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  thread_ = std::thread([this] { run(); });
}

SignalDrain::~SignalDrain() { finish(); }

DrainReport SignalDrain::finish() {
  exiting_ = true;
  if (thread_.joinable()) thread_.join();
  return report_;
}

bool SignalDrain::take_signal(std::chrono::milliseconds wait, int* sig) {
  const long long ms = std::max<long long>(0, wait.count());
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  int got = sigtimedwait(&signals_, nullptr, &ts);
  if (got < 0) return false;  // EAGAIN (none in time) or EINTR
  *sig = got;
  return true;
}

// The thread polls (sigtimedwait) instead of blocking in sigwait so that finish() can end it
// without sending the process a signal, and so that during the drain one loop watches the
// in-flight count, the deadline and a second signal together.
void SignalDrain::run() {
  int sig = 0;
  while (!take_signal(std::chrono::milliseconds(200), &sig))
    if (exiting_) return;
  if (exiting_) return;  // the server is already stopping for another reason

  const Clock::time_point start = Clock::now();
  gate_.close();
  report_.signalled = true;
  report_.signal = sig;
  report_.in_flight_at_signal = gate_.responses_open();
  const double timeout_s = std::chrono::duration<double>(timeout_).count();
  std::fprintf(stderr,
               "journey serve: %s: draining %s in flight (new requests get 503, /health says draining; "
               "--drain-timeout %g s; a second signal aborts them)\n",
               signal_name(sig), requests(report_.in_flight_at_signal).c_str(), timeout_s);

  const Clock::time_point deadline = start + timeout_;
  while (gate_.in_flight() > 0 && !exiting_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      report_.ended_by = cat("the drain timeout (", timeout_s, " s)");
      break;
    }
    int second = 0;
    if (take_signal(std::min(left, std::chrono::milliseconds(50)), &second)) {
      report_.ended_by = cat("a second signal (", signal_name(second), ")");
      break;
    }
  }
  if (!report_.ended_by.empty()) {
    report_.finished = gate_.responses_ended_closed();
    report_.aborted = gate_.responses_open();
    std::fprintf(stderr, "journey serve: %s: aborting %s still in flight (finish_reason \"abort\")\n",
                 report_.ended_by.c_str(), requests(report_.aborted).c_str());
    abort_in_flight_();
    // The aborted streams still send their last chunk and [DONE]: a bounded moment for that.
    const Clock::time_point grace = Clock::now() + std::chrono::seconds(5);
    int third = 0;
    while (gate_.in_flight() > 0 && Clock::now() < grace && !exiting_)
      if (take_signal(std::chrono::milliseconds(20), &third)) break;
  }
  if (report_.ended_by.empty()) report_.finished = gate_.responses_ended_closed();
  report_.seconds = seconds_since(start);
  stop_server_();
}

std::string drain_summary(const DrainReport& r, int64_t kv_blocks_used, int64_t kv_blocks_total) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", r.seconds);
  std::string kv = cat("KV blocks in use at exit: ", kv_blocks_used, " of ", kv_blocks_total,
                       kv_blocks_used == 0 ? "" : " (a leak: every sequence had ended)");
  if (r.ended_by.empty())
    return cat("drained ", requests(r.finished), " in ", seconds, " s, none aborted; ", kv);
  return cat("drain ended by ", r.ended_by, " after ", seconds, " s: ", requests(r.finished), " finished, ",
             r.aborted, " aborted (finish_reason \"abort\"); ", kv);
}

}  // namespace journey::server
