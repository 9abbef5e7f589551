// The scheduler driven by a toy "model" whose KV cache stores the token itself in each slot.
// Each step writes the fed tokens into their slots (through the block tables, after the
// copy-on-write copies), then rebuilds every sampled sequence's history by READING the slots.
// If a block table pointed at a block another sequence overwrote, or a prefix hit returned the
// wrong block, the history read back would differ from the sequence's tokens and the next
// token (a hash of the history) would differ from the one computed directly.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>

#include "core/error.h"
#include "engine/scheduler.h"

using namespace journey;

namespace {

int32_t toy_next_token(const std::vector<int32_t>& history) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : history) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ULL;
  return static_cast<int32_t>(h % 997);
}

struct Request {
  std::vector<int32_t> prompt;
  int64_t max_new = 0;
};

struct RunResult {
  std::map<int64_t, std::vector<int32_t>> outputs;  // request index -> generated tokens
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t mixed_steps = 0;  // steps that ran a prefill chunk and a decode together
  int64_t max_seqs_seen = 0;
  int64_t max_tokens_seen = 0;
  BlockManagerStats final_stats;
};

RunResult run_toy(const std::vector<Request>& requests, int64_t num_blocks, int64_t block_size,
                  SchedulerConfig config, int64_t arrive_per_step = 1000) {
  BlockManager bm(num_blocks, block_size);
  Scheduler scheduler(config, bm);
  std::vector<int32_t> kv(static_cast<size_t>(num_blocks * block_size), -1);  // [num_blocks * B] the toy cache
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::map<const Sequence*, size_t> index_of;
  RunResult result;
  size_t next_arrival = 0;
  while (next_arrival < requests.size() || scheduler.has_work()) {
    for (int64_t k = 0; k < arrive_per_step && next_arrival < requests.size(); ++k, ++next_arrival) {
      auto seq = std::make_unique<Sequence>();
      seq->id = static_cast<int64_t>(next_arrival);
      seq->tokens = requests[next_arrival].prompt;
      seq->num_prompt_tokens = seq->num_tokens();
      seq->max_total_tokens = seq->num_tokens() + requests[next_arrival].max_new;
      index_of[seq.get()] = next_arrival;
      scheduler.add(seq.get());
      seqs.push_back(std::move(seq));
    }
    SchedulerOutput plan = scheduler.schedule();
    REQUIRE_MESSAGE(!plan.empty(), "the scheduler stalled with work left");
    ++result.steps;
    result.max_seqs_seen = std::max<int64_t>(result.max_seqs_seen, plan.scheduled.size());
    result.max_tokens_seen = std::max(result.max_tokens_seen, plan.num_batched_tokens);
    bool has_prefill = false, has_decode = false;
    // "Forward": copies first, then write every fed token into its slot.
    for (const BlockCopy& c : plan.copies)
      std::copy_n(kv.begin() + c.src * block_size, block_size, kv.begin() + c.dst * block_size);
    for (const ScheduledSequence& s : plan.scheduled) {
      for (int64_t p = s.seq->num_computed_tokens; p < s.seq->num_computed_tokens + s.num_tokens; ++p)
        kv[static_cast<size_t>(bm.slot(*s.seq, p))] = s.seq->tokens[static_cast<size_t>(p)];
      (s.seq->num_computed_tokens < s.seq->num_prompt_tokens ? has_prefill : has_decode) = true;
    }
    if (has_prefill && has_decode) ++result.mixed_steps;
    scheduler.commit(plan);
    for (const ScheduledSequence& s : plan.scheduled) {
      Sequence& seq = *s.seq;
      if (seq.num_computed_tokens < seq.num_tokens()) continue;  // prefill chunk: nothing to sample
      std::vector<int32_t> history;  // [num_tokens] read back from the paged cache
      for (int64_t p = 0; p < seq.num_tokens(); ++p) history.push_back(kv[static_cast<size_t>(bm.slot(seq, p))]);
      REQUIRE(history == seq.tokens);
      seq.tokens.push_back(toy_next_token(history));
      if (seq.num_tokens() >= seq.max_total_tokens) {
        result.outputs[static_cast<int64_t>(index_of[&seq])] =
            std::vector<int32_t>(seq.tokens.begin() + seq.num_prompt_tokens, seq.tokens.end());
        scheduler.finish(&seq);
      }
    }
    REQUIRE(result.steps < 100000);
  }
  result.preemptions = scheduler.num_preemptions();
  result.final_stats = bm.stats();
  return result;
}

std::vector<int32_t> expected_output(const Request& r) {
  std::vector<int32_t> tokens = r.prompt, out;
  for (int64_t i = 0; i < r.max_new; ++i) {
    int32_t t = toy_next_token(tokens);
    tokens.push_back(t);
    out.push_back(t);
  }
  return out;
}

std::vector<Request> mixed_requests(int n, uint32_t seed, bool shared_prefix) {
  std::mt19937 rng(seed);
  std::vector<int32_t> system_prompt;
  for (int i = 0; i < 37; ++i) system_prompt.push_back(static_cast<int32_t>(rng() % 500));
  std::vector<Request> requests;
  for (int i = 0; i < n; ++i) {
    Request r;
    if (shared_prefix) r.prompt = system_prompt;
    int64_t len = 1 + rng() % 90;
    for (int64_t k = 0; k < len; ++k) r.prompt.push_back(static_cast<int32_t>(rng() % 500));
    r.max_new = 1 + rng() % 40;
    requests.push_back(r);
  }
  return requests;
}

void check_outputs(const std::vector<Request>& requests, const RunResult& result) {
  REQUIRE(result.outputs.size() == requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    INFO("request " << i);
    CHECK(result.outputs.at(static_cast<int64_t>(i)) == expected_output(requests[i]));
  }
  CHECK(result.final_stats.used_blocks == 0);
  CHECK(result.final_stats.free_blocks == result.final_stats.num_blocks);
}

}  // namespace

TEST_CASE("16 mixed requests with a roomy pool: every output right, every block back") {
  auto requests = mixed_requests(16, 7, false);
  RunResult r = run_toy(requests, 256, 16, {16, 128});
  check_outputs(requests, r);
  CHECK(r.preemptions == 0);
  CHECK(r.max_seqs_seen <= 16);
  CHECK(r.max_tokens_seen <= 128);
  CHECK(r.mixed_steps > 0);  // continuous batching: prefill chunks ride along with decodes
}

TEST_CASE("a tiny pool forces preemption; everything still completes with the same output") {
  auto requests = mixed_requests(16, 11, false);
  RunResult r = run_toy(requests, 18, 8, {16, 64});  // 144 slots for 16 requests of up to 130 tokens
  check_outputs(requests, r);
  CHECK(r.preemptions > 0);
}

TEST_CASE("shared system prompt: later requests hit the prefix cache; preemption and COW stay correct") {
  auto requests = mixed_requests(24, 3, true);
  RunResult roomy = run_toy(requests, 400, 4, {8, 64}, /*arrive_per_step=*/2);
  check_outputs(requests, roomy);
  CHECK(roomy.final_stats.prefix_hits >= 36 * 20);  // 9 full blocks of the 37-token prefix, most requests
  RunResult tight = run_toy(requests, 40, 4, {8, 64}, 2);
  check_outputs(requests, tight);
  CHECK(tight.preemptions > 0);
}

TEST_CASE("identical prompts arriving at once: the fully cached prompt triggers copy-on-write") {
  Request r{{1, 2, 3, 4, 5, 6, 7, 8}, 6};
  std::vector<Request> requests(5, r);
  // Arrivals one per step: the first computes both blocks, the rest hit them fully.
  RunResult result = run_toy(requests, 64, 4, {8, 64}, 1);
  check_outputs(requests, result);
  CHECK(result.final_stats.prefix_hits > 0);
  CHECK(result.final_stats.copy_on_writes > 0);
}

TEST_CASE("chunked prefill: a long prompt is fed in budget-sized chunks") {
  std::vector<Request> requests{{std::vector<int32_t>(100, 5), 3}};
  for (int i = 0; i < 100; ++i) requests[0].prompt[static_cast<size_t>(i)] = i;
  RunResult r = run_toy(requests, 64, 16, {4, 32});
  check_outputs(requests, r);
  CHECK(r.steps == 4 + 2);  // ceil(100 / 32) prefill steps (the last samples token 1), then 2 decodes
}

TEST_CASE("a request that can never fit is refused at once") {
  BlockManager bm(4, 4);
  Scheduler scheduler({4, 64}, bm);
  Sequence s;
  s.tokens.assign(10, 1);
  s.num_prompt_tokens = 10;
  s.max_total_tokens = 30;  // 8 blocks > 4
  CHECK_THROWS_AS(scheduler.add(&s), Error);
  CHECK_THROWS_AS(Scheduler({0, 64}, bm), Error);
}

TEST_CASE("slot accounting: filled slots equal the computed tokens of private sequences") {
  BlockManager bm(64, 16);
  Scheduler scheduler({8, 256}, bm);
  std::vector<Sequence> seqs(3);
  int64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    seqs[i].id = i;
    for (int k = 0; k < 20 + 7 * i; ++k) seqs[i].tokens.push_back(1000 * i + k);
    seqs[i].num_prompt_tokens = seqs[i].num_tokens();
    seqs[i].max_total_tokens = seqs[i].num_tokens() + 4;
    total += seqs[i].num_tokens();
    scheduler.add(&seqs[i]);
  }
  SchedulerOutput plan = scheduler.schedule();
  scheduler.commit(plan);
  BlockManagerStats st = bm.stats();
  CHECK(st.filled_slots == total);
  CHECK(st.allocated_slots == 16 * (2 + 2 + 3));  // 20, 27, 34 tokens
}
