#include "server/http_connections.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace journey::server {

using Clock = std::chrono::steady_clock;

struct GuardedHttpServer::Connection {
  int fd = -1;
  std::string data;          // received and not yet consumed: data[pos..]
  std::size_t pos = 0;
  std::size_t scanned = 0;   // bytes of data[pos..] already searched for the end of the headers
  std::size_t header_bytes = 0;  // once complete: the request line and headers, blank line included
  Clock::time_point since;       // when it began waiting for these headers (eviction order)
  Clock::time_point deadline;
  bool idle = false;         // between requests, no byte of the next one yet
  int requests = 0;

  std::size_t available() const { return data.size() - pos; }
  void compact() {
    if (pos > 0 && (pos == data.size() || pos > 64 * 1024)) {
      data.erase(0, pos);
      pos = 0;
    }
  }
  // True once data[pos..] holds a blank line; sets header_bytes.
  bool headers_complete() {
    const std::size_t from = pos + (scanned > 3 ? scanned - 3 : 0);
    for (std::size_t i = from; i < data.size(); ++i) {
      if (data[i] != '\n') continue;
      const bool crlf = i >= pos + 3 && data.compare(i - 3, 4, "\r\n\r\n") == 0;
      const bool lf = i >= pos + 1 && data[i - 1] == '\n';
      if (crlf || lf) {
        header_bytes = i + 1 - pos;
        return true;
      }
    }
    scanned = available();
    return false;
  }
};

namespace {

void send_now(int fd, const std::string& text) {
  // Best effort, never blocking: the connection is about to be closed.
  (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

std::string status_response(int status, const char* reason, const std::string& message) {
  std::string body = "{\"error\":{\"message\":\"" + message + "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1000 * 1000));
}

// The stream httplib's request parser reads from and writes to while a worker has the connection:
// bytes already received come first, then the socket, under the body deadline and wire limit.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(GuardedHttpServer::Connection& c, const ConnectionLimits& limits)
      : c_(c), limits_(limits), body_deadline_(Clock::now() + limits.body_timeout), header_bytes_(c.header_bytes) {}

  ReadFailure failure() const { return failure_; }
  bool broken() const { return broken_; }

  bool is_readable() const override {
    if (c_.available() > 0) return true;
    pollfd p{c_.fd, POLLIN, 0};
    return ::poll(&p, 1, remaining_ms(body_deadline_)) > 0;
  }

  bool is_writable() const override {
    if (broken_) return false;
    pollfd p{c_.fd, POLLOUT | POLLIN, 0};
    if (::poll(&p, 1, 0) < 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
    if (p.revents & POLLIN) {  // readable while we answer: data (pipelined) or the client's FIN
      char byte;
      if (::recv(c_.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return false;
    }
    if (p.revents & POLLOUT) return true;
    pollfd w{c_.fd, POLLOUT, 0};
    return ::poll(&w, 1, static_cast<int>(limits_.write_timeout.count())) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (failure_ != ReadFailure::None || broken_) return -1;
    if (c_.available() == 0 && !fill()) return -1;
    const std::size_t n = std::min(size, c_.available());
    std::memcpy(ptr, c_.data.data() + c_.pos, n);
    c_.pos += n;
    c_.compact();
    consumed_ += n;
    if (consumed_ > header_bytes_ + limits_.max_wire_body_bytes) {
      failure_ = ReadFailure::BodyTooLarge;
      return -1;
    }
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    std::size_t done = 0;
    while (done < size && !broken_) {
      pollfd p{c_.fd, POLLOUT, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(limits_.write_timeout.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) break;
      const ssize_t k = ::send(c_.fd, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (k <= 0) break;
      done += static_cast<std::size_t>(k);
    }
    if (done < size) {
      broken_ = true;
      return -1;
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(c_.fd, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(c_.fd, false, ip, port); }
  socket_t socket() const override { return c_.fd; }

 private:
  // Wait for more bytes until the body deadline; false on timeout, close or error.
  bool fill() {
    for (;;) {
      pollfd p{c_.fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, remaining_ms(body_deadline_));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        failure_ = ReadFailure::Timeout;
        return false;
      }
      if (ready < 0) break;
      char buffer[16 * 1024];
      const ssize_t n = ::recv(c_.fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) break;
      c_.data.append(buffer, static_cast<std::size_t>(n));
      return true;
    }
    broken_ = true;
    return false;
  }

  static void address(int fd, bool peer, std::string& ip, int& port) {
    sockaddr_storage a{};
    socklen_t length = sizeof a;
    const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &length)
                        : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
    if (rc != 0) return;
    char text[INET6_ADDRSTRLEN] = {0};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  GuardedHttpServer::Connection& c_;
  const ConnectionLimits& limits_;
  const Clock::time_point body_deadline_;
  const std::size_t header_bytes_;
  std::size_t consumed_ = 0;
  ReadFailure failure_ = ReadFailure::None;
  bool broken_ = false;
};

thread_local const DeadlineStream* current_stream = nullptr;

// httplib's accept loop enqueues one task per socket; ours only registers the socket with the
// poller, so it runs on the accept thread itself.
class InlineTaskQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

ReadFailure current_read_failure() { return current_stream ? current_stream->failure() : ReadFailure::None; }

GuardedHttpServer::GuardedHttpServer(const ConnectionLimits& limits) : limits_(limits) {
  new_task_queue = [] { return new InlineTaskQueue; };
  if (::pipe2(wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0) wake_fds_[0] = wake_fds_[1] = -1;
}

GuardedHttpServer::~GuardedHttpServer() {
  for (int fd : wake_fds_)
    if (fd >= 0) ::close(fd);
}

bool GuardedHttpServer::bind(const std::string& host, int port) {
  if (!bind_to_port(host, port)) return false;
  // listen(2) again on a listening socket changes its backlog (Linux): httplib's is 5.
  ::listen(svr_sock_, limits_.backlog);
  return true;
}

void GuardedHttpServer::serve() {
  stopping_ = false;
  poller_ = std::thread([this] { poll_loop(); });
  for (int i = 0; i < limits_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  listen_after_bind();  // returns after stop()
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_poller();
  ready_cv_.notify_all();
  poller_.join();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& c : incoming_) ::close(c->fd);
  for (auto& c : ready_) ::close(c->fd);
  incoming_.clear();
  ready_.clear();
}

ConnectionStats GuardedHttpServer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const int one = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto c = std::make_unique<Connection>();
  c->fd = sock;
  c->since = Clock::now();
  c->deadline = c->since + limits_.header_timeout;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      ::close(sock);
      return false;
    }
    ++stats_.accepted;
    ++stats_.open;
    incoming_.push_back(std::move(c));
  }
  wake_poller();
  return true;
}

void GuardedHttpServer::wake_poller() {
  const char byte = 1;
  if (wake_fds_[1] >= 0) (void)::write(wake_fds_[1], &byte, 1);
}

void GuardedHttpServer::close_connection(std::unique_ptr<Connection> c, bool unread_input) {
  if (unread_input) {
    // The client may still be sending the body we refused. Closing with unread data would reset
    // the connection and could destroy our answer (413/408) before the client reads it: stop
    // writing, then discard what arrives for a short, bounded while (a lingering close).
    ::shutdown(c->fd, SHUT_WR);
    const Clock::time_point until = Clock::now() + std::chrono::seconds(2);
    std::size_t discarded = 0;
    char buffer[16 * 1024];
    while (discarded < (8u << 20)) {
      pollfd p{c->fd, POLLIN, 0};
      if (::poll(&p, 1, remaining_ms(until)) <= 0) break;
      const ssize_t n = ::recv(c->fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n <= 0) break;
      discarded += static_cast<std::size_t>(n);
    }
  }
  ::close(c->fd);
  std::lock_guard<std::mutex> lock(mutex_);
  --stats_.open;
}

void GuardedHttpServer::give_back(std::unique_ptr<Connection> c) {
  c->idle = c->available() == 0;
  c->scanned = 0;
  c->header_bytes = 0;
  c->since = Clock::now();
  c->deadline = c->since + (c->idle ? limits_.keep_alive_timeout : limits_.header_timeout);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.push_back(std::move(c));
  }
  wake_poller();
}

void GuardedHttpServer::poll_loop() {
  std::vector<std::unique_ptr<Connection>> waiting;
  std::vector<pollfd> fds;
  for (;;) {
    std::vector<std::unique_ptr<Connection>> dispatch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) break;
      for (auto& c : incoming_) waiting.push_back(std::move(c));
      incoming_.clear();
      // Over the limit: the connection that has waited longest for its headers makes room.
      while (stats_.open > limits_.max_connections && !waiting.empty()) {
        auto oldest = std::min_element(waiting.begin(), waiting.end(),
                                       [](const auto& a, const auto& b) { return a->since < b->since; });
        ::close((*oldest)->fd);
        waiting.erase(oldest);
        --stats_.open;
        ++stats_.evicted;
      }
    }
    // Given back with the next request already buffered (pipelining): no need to wait.
    for (auto& c : waiting)
      if (c->available() > 0 && c->headers_complete()) dispatch.push_back(std::move(c));
    std::erase(waiting, nullptr);

    if (dispatch.empty()) {
      fds.assign(1, pollfd{wake_fds_[0], POLLIN, 0});
      Clock::time_point next = Clock::now() + std::chrono::seconds(1);
      for (const auto& c : waiting) {
        fds.push_back(pollfd{c->fd, POLLIN, 0});
        next = std::min(next, c->deadline);
      }
      ::poll(fds.data(), fds.size(), remaining_ms(next) + 1);
      if (fds[0].revents & POLLIN) {
        char drain[256];
        while (::read(wake_fds_[0], drain, sizeof drain) > 0) {
        }
      }
      const Clock::time_point now = Clock::now();
      for (std::size_t i = 0; i < waiting.size(); ++i) {
        auto& c = waiting[i];
        enum { Pending, Complete, Closed, TooLarge } state = Pending;
        if (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) {
          char buffer[16 * 1024];
          for (;;) {
            const ssize_t n = ::recv(c->fd, buffer, sizeof buffer, MSG_DONTWAIT);
            if (n > 0) {
              if (c->idle) {  // the next request began: its headers get the full header timeout
                c->idle = false;
                c->since = now;
                c->deadline = now + limits_.header_timeout;
              }
              c->data.append(buffer, static_cast<std::size_t>(n));
              if (c->headers_complete()) {
                state = Complete;
                break;
              }
              if (c->available() > limits_.max_header_bytes) {
                state = TooLarge;
                break;
              }
              continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            if (n < 0 && errno == EINTR) continue;
            state = Closed;
            break;
          }
        }
        if (state == Complete) {
          dispatch.push_back(std::move(c));
          continue;
        }
        if (state == Pending && now < c->deadline) continue;
        std::lock_guard<std::mutex> lock(mutex_);
        if (state == TooLarge) {
          send_now(c->fd, status_response(431, "Request Header Fields Too Large",
                                          "the request line and headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes"));
          ++stats_.headers_too_large;
        } else if (state == Pending && !c->idle) {
          send_now(c->fd, status_response(408, "Request Timeout", "the request headers did not arrive within " +
                                                                     std::to_string(limits_.header_timeout.count()) + " ms"));
          ++stats_.header_timeouts;
        }
        ::close(c->fd);
        --stats_.open;
        c.reset();
      }
      std::erase(waiting, nullptr);
    }
    if (!dispatch.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& c : dispatch) ready_.push_back(std::move(c));
      ready_cv_.notify_all();
    }
  }
  for (auto& c : waiting) ::close(c->fd);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.open -= static_cast<long long>(waiting.size());
}

void GuardedHttpServer::worker_loop() {
  const std::function<void(httplib::Request&)> no_setup;
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      c = std::move(ready_.front());
      ready_.pop_front();
    }
    ++c->requests;
    const bool last = c->requests >= limits_.max_requests_per_connection;
    DeadlineStream stream(*c, limits_);
    current_stream = &stream;
    bool connection_closed = false;
    const bool ok = process_request(stream, last, connection_closed, no_setup);
    current_stream = nullptr;
    if (stream.failure() != ReadFailure::None) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++(stream.failure() == ReadFailure::Timeout ? stats_.body_timeouts : stats_.bodies_too_large);
    }
    if (!ok || connection_closed || last || stream.broken() || stream.failure() != ReadFailure::None) {
      close_connection(std::move(c), stream.failure() != ReadFailure::None && !stream.broken());
    } else {
      give_back(std::move(c));
    }
  }
}

}  // namespace journey::server
