#include "parallel/tensor_parallel.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "core/error.h"

namespace journey {

namespace {

// One call from rank 0 to the followers: a fixed-size header, then `payload_words` int64 words.
enum class Call : int64_t { Stop = 0, AllocateKv = 1, CopyKvBlock = 2, Forward = 3 };

struct CallHeader {
  int64_t call = 0;           // Call
  int64_t payload_words = 0;  // int64 words that follow in a second broadcast (0: none)
  int64_t traced = 0;         // Forward: 1 when rank 0 records this step into a trace sink
};

// A forward batch as int64 words: S, then per sequence seq_id, start_position, all_logits, T,
// tokens[T], B, block_table[B].
std::vector<int64_t> encode(const ForwardBatch& batch) {
  std::vector<int64_t> words = {int64_t(batch.sequences.size())};
  for (const SequenceInput& s : batch.sequences) {
    words.insert(words.end(), {s.seq_id, s.start_position, s.all_logits ? 1 : 0, int64_t(s.tokens.size())});
    words.insert(words.end(), s.tokens.begin(), s.tokens.end());
    words.push_back(int64_t(s.block_table.size()));
    words.insert(words.end(), s.block_table.begin(), s.block_table.end());
  }
  return words;
}

// The inverse of encode; rank 0 sent it, but a count that runs past the words is still refused
// rather than read out of bounds.
ForwardBatch decode(const std::vector<int64_t>& words) {
  size_t at = 0;
  auto next = [&]() -> int64_t {
    if (at >= words.size()) fail("tensor parallel: a forward call from rank 0 ends early (", words.size(), " words)");
    return words[at++];
  };
  auto next_count = [&]() -> size_t {
    const int64_t n = next();
    if (n < 0 || size_t(n) > words.size() - at)
      fail("tensor parallel: a forward call from rank 0 has a count of ", n, " with ", words.size() - at, " words left");
    return size_t(n);
  };
  ForwardBatch batch;
  batch.sequences.resize(next_count());
  for (SequenceInput& s : batch.sequences) {
    s.seq_id = next();
    s.start_position = next();
    s.all_logits = next() != 0;
    s.tokens.resize(next_count());
    for (int32_t& t : s.tokens) t = int32_t(next());
    s.block_table.resize(next_count());
    for (int32_t& b : s.block_table) b = int32_t(next());
  }
  return batch;
}

// Rank 0's view of whether the followers are in their loop and not yet told to stop.
Communicator* waiting_followers = nullptr;

void send_call(Communicator& communicator, CallHeader header, const std::vector<int64_t>& payload) {
  communicator.broadcast(&header, sizeof header);
  if (!payload.empty())
    communicator.broadcast(const_cast<int64_t*>(payload.data()), int64_t(payload.size() * sizeof(int64_t)));
}

void stop_waiting_followers() {
  if (!waiting_followers) return;
  Communicator& communicator = *waiting_followers;
  waiting_followers = nullptr;
  send_call(communicator, {int64_t(Call::Stop), 0, 0}, {});
}

class TensorParallelBackend final : public Backend {
 public:
  TensorParallelBackend(std::unique_ptr<Backend> shard, Communicator& communicator, const std::string& transport)
      : shard_(std::move(shard)), communicator_(communicator) {
    stats_.transport = transport.empty() ? communicator.transport() : transport;
    if (communicator_.rank() != 0)
      fail("tensor parallel: the backend that drives the group runs on rank 0, not rank ", communicator_.rank());
    waiting_followers = &communicator_;
  }
  ~TensorParallelBackend() override {
    try {
      stop_waiting_followers();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "journey: rank 0: could not tell the other ranks to stop: %s\n", e.what());
    }
  }

  std::string name() const override { return shard_->name(); }
  DType weight_dtype() const override { return shard_->weight_dtype(); }
  std::string stored_weight_types() const override { return shard_->stored_weight_types(); }
  const ModelConfig& config() const override { return shard_->config(); }
  int64_t kv_block_size() const override { return shard_->kv_block_size(); }
  int64_t kv_num_blocks() const override { return shard_->kv_num_blocks(); }
  // Per rank: each rank's pool holds its own KV heads (and each rank has the memory it sizes it from).
  int64_t kv_block_bytes(int64_t block_size) const override { return shard_->kv_block_bytes(block_size); }

  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override {
    if (num_blocks <= 0 || block_size <= 0)
      fail("KV cache: num_blocks (", num_blocks, ") and block_size (", block_size, ") must be positive");
    send({int64_t(Call::AllocateKv), 2, 0}, {num_blocks, block_size});
    on_every_rank([&] { shard_->allocate_kv_cache(num_blocks, block_size); });
  }

  void copy_kv_block(int32_t src, int32_t dst) override {
    const int64_t n = shard_->kv_num_blocks();
    if (src < 0 || src >= n || dst < 0 || dst >= n)
      fail("copy_kv_block(", src, ", ", dst, "): block ids must lie in [0, ", n, ")");
    send({int64_t(Call::CopyKvBlock), 2, 0}, {src, dst});
    on_every_rank([&] { shard_->copy_kv_block(src, dst); });
  }

  ForwardOutput forward(const ForwardBatch& batch, TraceSink* sink) override {
    // Checked here, before the followers hear of it: a bad batch is an error for this caller
    // alone (a server answers it and goes on), not a call every rank has started.
    validate_forward_batch(batch, shard_->config(), shard_->kv_num_blocks(), shard_->kv_block_size());
    const std::vector<int64_t> words = encode(batch);
    send({int64_t(Call::Forward), int64_t(words.size()), sink != nullptr ? 1 : 0}, words);
    ForwardOutput out;
    on_every_rank([&] { out = shard_->forward(batch, sink); });
    stats_.forward_steps += 1;
    for (const SequenceInput& s : batch.sequences) stats_.tokens += int64_t(s.tokens.size());
    return out;
  }

  TensorParallelStats stats() const {
    TensorParallelStats s = stats_;
    s.communication = communicator_.counters();
    return s;
  }
  void reset_stats() {
    std::string transport = std::move(stats_.transport);  // (what the group is, not what it did)
    stats_ = {};
    stats_.transport = std::move(transport);
    communicator_.reset_counters();
  }

 private:
  void send(CallHeader header, const std::vector<int64_t>& payload) { send_call(communicator_, header, payload); }
  // A call the followers have started too: failing here half-way would leave them waiting in a
  // collective, so the whole group stops with the error.
  template <typename Fn>
  void on_every_rank(Fn&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "journey: rank 0: error during a call every rank runs, stopping all ranks: %s\n", e.what());
      communicator_.abort(1);
    }
  }

  std::unique_ptr<Backend> shard_;
  Communicator& communicator_;
  TensorParallelStats stats_;
};

}  // namespace

void expect_tensor_parallel_followers(Communicator& communicator) {
  if (communicator.rank() != 0 || communicator.size() < 2) return;
  waiting_followers = &communicator;
  static const bool registered = [] {
    // (registered after the communicator was made, so it runs before MPI is finalized)
    std::atexit([] {
      try {
        stop_waiting_followers();
      } catch (const std::exception&) {
      }
    });
    return true;
  }();
  (void)registered;
}

std::unique_ptr<Backend> make_tensor_parallel_backend(std::unique_ptr<Backend> shard, Communicator& communicator,
                                                      const std::string& transport) {
  return std::make_unique<TensorParallelBackend>(std::move(shard), communicator, transport);
}

std::optional<TensorParallelStats> tensor_parallel_stats(const Backend& backend) {
  if (auto* tp = dynamic_cast<const TensorParallelBackend*>(&backend)) return tp->stats();
  return std::nullopt;
}

void reset_tensor_parallel_stats(Backend& backend) {
  if (auto* tp = dynamic_cast<TensorParallelBackend*>(&backend)) tp->reset_stats();
}

void run_tensor_parallel_follower(Backend& shard, Communicator& communicator, const FollowerTraceSinks& sinks) {
  int64_t step = 0;
  for (;;) {
    CallHeader header;
    communicator.broadcast(&header, sizeof header);
    if (header.payload_words < 0 || header.payload_words > (int64_t(1) << 28)) {
      std::fprintf(stderr, "journey: rank %d: a call from rank 0 announces %lld words; stopping all ranks\n",
                   communicator.rank(), static_cast<long long>(header.payload_words));
      communicator.abort(1);
    }
    std::vector<int64_t> payload(size_t(header.payload_words));
    if (!payload.empty()) communicator.broadcast(payload.data(), int64_t(payload.size() * sizeof(int64_t)));
    try {
      switch (Call(header.call)) {
        case Call::Stop:
          return;
        case Call::AllocateKv:
          shard.allocate_kv_cache(payload.at(0), payload.at(1));
          break;
        case Call::CopyKvBlock:
          shard.copy_kv_block(int32_t(payload.at(0)), int32_t(payload.at(1)));
          break;
        case Call::Forward: {
          const ForwardBatch batch = decode(payload);
          TraceSink* sink = header.traced && sinks ? sinks(batch, step) : nullptr;
          shard.forward(batch, sink);
          ++step;
          break;
        }
        default:
          fail("unknown call ", header.call, " from rank 0");
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "journey: rank %d: error, stopping all ranks: %s\n", communicator.rank(), e.what());
      communicator.abort(1);
    }
  }
}

}  // namespace journey
