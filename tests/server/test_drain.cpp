// The pieces of a drain without HTTP (test_graceful_shutdown.py drives the whole server):
//  - DrainGate: what it admits, what it counts, what it counts as drained;
//  - EngineLoop on the shipped stories260K: abort_all() ends every sequence, running or queued,
//    with an `aborted` output its stream receives; shutdown() with sequences still running aborts
//    them; in both cases every KV block is free afterwards;
//  - the drain's last log line.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "assets/model.h"
#include "cpu/cpu_backend.h"
#include "server/drain.h"
#include "server/engine_loop.h"
#include "server/metrics.h"

using namespace journey;
using namespace journey::server;

TEST_CASE("DrainGate: admits until closed; counts handlers and responses; drained = responses ended after close") {
  DrainGate gate;
  DrainGate::Ticket handler = gate.admit();
  REQUIRE(handler != nullptr);
  DrainGate::Ticket early = gate.open_response();
  DrainGate::Ticket late = gate.open_response();
  CHECK(gate.in_flight() == 3);
  CHECK(gate.responses_open() == 2);
  early.reset();  // ended before the drain: not a drained one
  handler.reset();
  CHECK(gate.in_flight() == 1);

  gate.close();
  CHECK(gate.closed());
  CHECK(gate.admit() == nullptr);  // refused: the caller answers 503
  CHECK(gate.in_flight() == 1);
  DrainGate::Ticket copy = late;  // a response's ticket is shared by its provider and releaser
  late.reset();
  CHECK(gate.responses_open() == 1);
  copy.reset();
  CHECK(gate.in_flight() == 0);
  CHECK(gate.responses_open() == 0);
  CHECK(gate.responses_ended_closed() == 1);
}

TEST_CASE("drain_summary: the line a drain ends with") {
  DrainReport clean;
  clean.signalled = true;
  clean.finished = 3;
  clean.seconds = 0.4213;
  CHECK(drain_summary(clean, 0, 512) == "drained 3 requests in 0.42 s, none aborted; KV blocks in use at exit: 0 of 512");
  DrainReport one = clean;
  one.finished = 1;
  CHECK(drain_summary(one, 0, 512) == "drained 1 request in 0.42 s, none aborted; KV blocks in use at exit: 0 of 512");
  DrainReport cut = clean;
  cut.ended_by = "the drain timeout (0.2 s)";
  cut.finished = 1;
  cut.aborted = 2;
  CHECK(drain_summary(cut, 2, 32) ==
        "drain ended by the drain timeout (0.2 s) after 0.42 s: 1 request finished, 2 aborted (finish_reason \"abort\"); "
        "KV blocks in use at exit: 2 of 32 (a leak: every sequence had ended)");
}

namespace {

struct Model {
  LoadedModel model = load_model(std::string(JOURNEY_SOURCE_DIR) + "/data/stories260K");
  std::unique_ptr<Backend> backend = make_cpu_backend(model, CpuOptions{1});
};

std::unique_ptr<EngineLoop> make_loop(Model& m, Metrics& metrics) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 1;  // one runs, the others wait in the queue
  return std::make_unique<EngineLoop>(std::make_unique<LLMEngine>(*m.backend, config), metrics);
}

std::vector<EngineRequest> long_requests(int n) {
  std::vector<EngineRequest> requests(n);
  for (EngineRequest& r : requests) {
    r.prompt = {1, 403, 407, 261};
    r.max_tokens = 400;
    r.ignore_eos = true;
  }
  return requests;
}

// Pops until each of `n` choices has finished; returns how many finished aborted.
int wait_finished(RequestStream& stream, int n) {
  int finished = 0, aborted = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (finished < n && std::chrono::steady_clock::now() < deadline)
    if (auto ev = stream.pop(std::chrono::milliseconds(100)); ev && ev->output.finished()) {
      ++finished;
      aborted += ev->output.aborted ? 1 : 0;
    }
  REQUIRE(finished == n);
  return aborted;
}

}  // namespace

TEST_CASE("EngineLoop::abort_all ends running and queued sequences; every KV block is freed") {
  Model m;
  Metrics metrics;
  auto loop = make_loop(m, metrics);
  auto stream = std::make_shared<RequestStream>();
  REQUIRE(loop->submit(long_requests(3), stream).size() == 3);
  loop->abort_all();
  CHECK(wait_finished(*stream, 3) == 3);
  const EngineStats stats = loop->shutdown();
  CHECK(stats.running == 0);
  CHECK(stats.waiting == 0);
  CHECK(stats.kv.used_blocks == 0);
  CHECK(stats.kv.num_blocks > 0);
}

TEST_CASE("EngineLoop::shutdown with sequences still running aborts them and frees their blocks") {
  Model m;
  Metrics metrics;
  auto loop = make_loop(m, metrics);
  auto stream = std::make_shared<RequestStream>();
  REQUIRE(loop->submit(long_requests(2), stream).size() == 2);
  // Wait until the first sequence holds blocks, so that there is something to free.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (metrics.engine().kv.used_blocks == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(metrics.engine().kv.used_blocks > 0);
  const EngineStats stats = loop->shutdown();
  CHECK(stats.kv.used_blocks == 0);
  CHECK(stats.running + stats.waiting == 0);
  CHECK(loop->shutdown().kv.used_blocks == 0);  // a second call returns the same final stats
}
