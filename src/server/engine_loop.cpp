#include "server/engine_loop.h"

#include <cstdio>

#include "core/error.h"

namespace journey::server {

void RequestStream::push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

std::optional<StreamEvent> RequestStream::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

EngineLoop::EngineLoop(std::unique_ptr<LLMEngine> engine, Metrics& metrics)
    : engine_(std::move(engine)), metrics_(metrics) {
  metrics_.set_engine(engine_->stats());
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { shutdown(); }

EngineStats EngineLoop::shutdown() {
  if (final_stats_) return *final_stats_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    commands_.emplace_back(AbortAll{});
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  final_stats_ = engine_->stats();  // the thread is gone: the engine is ours to read
  return *final_stats_;
}

void EngineLoop::abort_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    commands_.emplace_back(AbortAll{});
  }
  wake_.notify_all();
}

std::vector<int64_t> EngineLoop::submit(std::vector<EngineRequest> requests, std::shared_ptr<RequestStream> stream) {
  Add add{std::move(requests), std::move(stream), {}};
  std::future<std::vector<int64_t>> ids = add.result.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    commands_.emplace_back(std::move(add));
  }
  wake_.notify_all();
  return ids.get();  // rethrows the engine's validation error
}

void EngineLoop::abort(const std::vector<int64_t>& ids) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    commands_.emplace_back(Abort{ids});
  }
  wake_.notify_all();
}

void EngineLoop::handle(Add& add) {
  std::vector<int64_t> ids;
  try {
    auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < add.requests.size(); ++i) {
      ids.push_back(engine_->add_request(add.requests[i]));
      tracked_[ids.back()] = Tracked{add.stream, i, now, now, false};
    }
    add.result.set_value(ids);
  } catch (...) {
    for (int64_t id : ids) {  // all or nothing
      engine_->abort_request(id);
      tracked_.erase(id);
    }
    add.result.set_exception(std::current_exception());
  }
}

void EngineLoop::handle(Abort& abort) {
  for (int64_t id : abort.ids) engine_->abort_request(id);  // unknown / finished ids are ignored
}

void EngineLoop::handle(AbortAll&) {
  for (const auto& [id, t] : tracked_) engine_->abort_request(id);
}

void EngineLoop::run() {
  while (true) {
    std::deque<Command> commands;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !commands_.empty() || engine_->has_unfinished(); });
      // Stopping: the last commands (shutdown() queued an AbortAll) still run, and the steps that
      // follow until the engine holds no sequence, so that every KV block is freed.
      if (stopping_ && commands_.empty() && !engine_->has_unfinished()) return;
      commands.swap(commands_);
    }
    for (Command& c : commands) std::visit([this](auto& cmd) { handle(cmd); }, c);

    std::vector<RequestOutput> outputs;
    const auto step_start = std::chrono::steady_clock::now();
    try {
      outputs = engine_->step();
    } catch (const std::exception& e) {
      // A backend failure must not take the server down silently: fail every open request.
      std::fprintf(stderr, "journey serve: engine step failed, aborting %zu open sequences: %s\n", tracked_.size(),
                   e.what());
      for (auto& [id, t] : tracked_) {
        RequestOutput out;
        out.request_id = id;
        out.aborted = true;
        out.text = cat("engine error: ", e.what());
        t.stream->push({t.choice, out});
        engine_->abort_request(id);
      }
      tracked_.clear();
      engine_->step();  // drain the abort outputs
      continue;
    }
    auto now = std::chrono::steady_clock::now();
    const EngineStats stats = engine_->stats();
    if (stats.steps != last_steps_) {  // a forward pass ran (not just abort outputs)
      int64_t sampled = 0;
      for (const RequestOutput& out : outputs) sampled += static_cast<int64_t>(out.tokens.size());
      metrics_.observe_step(std::chrono::duration<double>(now - step_start).count(),
                            stats.batched_tokens_total - last_batched_tokens_, sampled);
      last_steps_ = stats.steps;
      last_batched_tokens_ = stats.batched_tokens_total;
    }
    for (RequestOutput& out : outputs) {
      auto it = tracked_.find(out.request_id);
      if (it == tracked_.end()) continue;
      Tracked& t = it->second;
      if (!out.tokens.empty()) {
        double since_last = std::chrono::duration<double>(now - t.last_token).count();
        if (!t.first_token_seen) metrics_.observe_ttft(since_last);
        else metrics_.observe_itl(since_last);
        t.first_token_seen = true;
        t.last_token = now;
      }
      bool finished = out.finished();
      if (finished) {
        metrics_.observe_e2e(std::chrono::duration<double>(now - t.arrival).count());
        metrics_.count_finished(out.aborted ? "abort" : finish_reason_name(*out.finish_reason));
      }
      t.stream->push({t.choice, std::move(out)});
      if (finished) tracked_.erase(it);
    }
    metrics_.set_engine(stats);
  }
}

}  // namespace journey::server
