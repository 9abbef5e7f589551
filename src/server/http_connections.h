// The connections of `journey serve`: how requests get from sockets to cpp-httplib's parser
// without letting one client hold a worker, stall the server or send an unbounded body.
//
// What cpp-httplib 0.11 (Debian's build, a compiled library) does on its own: its accept thread
// hands each socket to a worker of the task queue, which then blocks in recv until the request
// has arrived. The read timeout applies to each recv, not to the request, so a client that sends
// a header byte every few seconds holds its worker for ever, and ~64 of them stop the server. Its
// body limit (set_payload_max_length) checks Content-Length only: a chunked body is read without
// bound. The listen backlog (5) is compiled into the library.
//
// What GuardedHttpServer changes, through the one hook httplib offers (process_and_close_socket,
// a virtual called for every accepted socket) and its protected process_request:
//  - A poller thread holds every connection while its request headers arrive and reads them
//    itself, without blocking: slow clients cost a file descriptor each, no thread. Headers must
//    be complete within header_timeout and max_header_bytes (else 408 / 431, then close). An idle
//    keep-alive connection is closed after keep_alive_timeout. With max_connections open, the
//    connection that has waited longest for its headers is evicted to make room.
//  - Workers (`workers` of them) get a connection only once its headers are complete. They read
//    the body through a DeadlineStream: all of it within body_timeout, and at most
//    max_wire_body_bytes received on the wire, chunk framing included (the handler then checks
//    the decoded size against max_body_bytes). Then the handler runs, and the connection goes
//    back to the poller for its next request.
//  - The listen backlog is set again after binding, to `backlog`.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "server/metrics.h"

namespace journey::server {

struct ConnectionLimits {
  int workers = 64;                  // requests being read or handled at once
  int max_connections = 1024;        // open connections (waiting ones cost no thread)
  int backlog = 128;                 // listen(2) backlog
  std::chrono::milliseconds header_timeout{10'000};     // from the first byte to the blank line
  std::chrono::milliseconds keep_alive_timeout{5'000};  // idle between requests
  std::chrono::milliseconds body_timeout{30'000};       // the whole body, once headers are in
  std::chrono::milliseconds write_timeout{30'000};      // each write without progress
  std::size_t max_header_bytes = 64 * 1024;
  std::size_t max_wire_body_bytes = (1 << 20) + (1 << 18) + (64 << 10);  // body + chunk framing
  int max_requests_per_connection = 1000;
};

// Why the current worker's request could not be read (the error handler turns it into a status).
enum class ReadFailure { None, BodyTooLarge, Timeout };
ReadFailure current_read_failure();

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const ConnectionLimits& limits);
  ~GuardedHttpServer() override;

  // bind_to_port, then the backlog; false when the address cannot be bound.
  bool bind(const std::string& host, int port);
  // Serves until stop(); then closes waiting connections and waits for the workers.
  void serve();
  ConnectionStats stats() const;

  struct Connection;

 private:
  bool process_and_close_socket(socket_t sock) override;  // httplib's per-socket hook
  void poll_loop();
  void worker_loop();
  void give_back(std::unique_ptr<Connection> c);  // to the poller, for the next request
  void close_connection(std::unique_ptr<Connection> c, bool unread_input = false);
  void wake_poller();

  ConnectionLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::vector<std::unique_ptr<Connection>> incoming_;     // accepted or given back; the poller takes them
  std::deque<std::unique_ptr<Connection>> ready_;         // headers complete: for the workers
  ConnectionStats stats_;
  bool stopping_ = false;
  int wake_fds_[2] = {-1, -1};
  std::thread poller_;
  std::vector<std::thread> workers_;
};

}  // namespace journey::server
