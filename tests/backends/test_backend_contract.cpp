// The contract every backend keeps, checked on each one compiled for the CPU (the literal
// reference and the fast cpu backend; tests/cuda runs the same comparisons on a GPU): forward
// against the scalar forward of tests/reference/scalar_forward.h, and against itself run in ways
// that must agree — whole prompt vs token by token, paged vs contiguous, batched vs alone — plus
// the trace stages and shapes, and the errors on bad input.
// Tolerances (NMSE, see docs/reference-path.md): 1e-8 where only the f32 summation order differs
// (GEMM vs GEMV kernels, double-accumulated scalar loops); 0 where the same float operations run
// on the same values in the same order.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"
#include "backends/backends_under_test.h"
#include "reference/scalar_forward.h"
#include "trace/sink.h"

using namespace journey;

namespace {

constexpr double kOrderTolerance = 1e-8;

std::vector<int32_t> prompt(size_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(n);
  for (auto& t : out) t = int32_t(rng() % uint32_t(vocab));
  return out;
}

std::vector<int32_t> identity_table(int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return t;
}

// One sequence's whole prompt in one step, logits for every position.
std::vector<float> prefill_all(Backend& backend, const std::vector<int32_t>& tokens, std::vector<int32_t> table) {
  ForwardBatch batch;
  batch.sequences.push_back({0, tokens, 0, std::move(table), true});
  return backend.forward(batch).logits;
}

int argmax(const float* row, int64_t n) { return int(std::max_element(row, row + n) - row); }

// Records copies of every stage it is offered.
struct CaptureSink : TraceSink {
  std::map<std::pair<Stage, int>, std::pair<std::vector<float>, std::vector<int64_t>>> tensors;
  std::vector<int32_t> token_ids;
  bool wants(Stage, int) const override { return true; }
  void record(Stage s, int layer, const TraceTensor& t) override {
    tensors[{s, layer}] = {std::vector<float>(t.data.begin(), t.data.end()), t.shape};
  }
  void record_ints(Stage s, int, std::span<const int32_t> v, std::vector<int64_t>) override {
    if (s == Stage::token_ids) token_ids.assign(v.begin(), v.end());
  }
};

// Wants nothing; counts how often it was handed a tensor anyway.
struct RefusingSink : TraceSink {
  mutable int asked = 0;
  int recorded = 0;
  bool wants(Stage, int) const override { return ++asked, false; }
  void record(Stage, int, const TraceTensor&) override { ++recorded; }
  void record_ints(Stage, int, std::span<const int32_t>, std::vector<int64_t>) override { ++recorded; }
};

}  // namespace

TEST_CASE("forward equals the scalar forward (llama, qwen2 with biases, qwen3 with q/k norms)") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    for (std::string arch : {"llama", "qwen2", "qwen3"}) {
      CAPTURE(arch);
      auto config = testmodel::tiny_config(arch);
      auto values = testmodel::random_values(config, 7);
      auto backend = make_backend_under_test(kind, testmodel::make_model(config, values));
      backend->allocate_kv_cache(4, 4);
      auto tokens = prompt(11, 97, 1);
      auto logits = prefill_all(*backend, tokens, identity_table(3));
      auto expected = scalar::forward(config, values, tokens);
      CHECK(scalar::nmse(logits, expected) < kOrderTolerance);
      for (size_t t = 0; t < tokens.size(); ++t) CHECK(argmax(&logits[t * 97], 97) == argmax(&expected[t * 97], 97));
    }
  }
}

TEST_CASE("prefill of a whole prompt equals feeding it token by token through the KV cache") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    for (std::string arch : {"llama", "qwen2", "qwen3"}) {
      CAPTURE(arch);
      auto model = testmodel::random_model(arch);
      auto tokens = prompt(13, 97, 2);
      auto whole = make_backend_under_test(kind, model);
      whole->allocate_kv_cache(8, 4);
      auto expected = prefill_all(*whole, tokens, identity_table(4));

      auto stepwise = make_backend_under_test(kind, model);
      stepwise->allocate_kv_cache(8, 4);
      for (size_t t = 0; t < tokens.size(); ++t) {
        ForwardBatch batch;
        batch.sequences.push_back({0, {tokens[t]}, int64_t(t), identity_table(4), false});
        auto out = stepwise->forward(batch);
        REQUIRE(out.logits.size() == 97);
        CHECK(scalar::nmse(out.logits.data(), &expected[t * 97], 97) < kOrderTolerance);
        CHECK(argmax(out.last_row(0), 97) == argmax(&expected[t * 97], 97));
      }
    }
  }
}

TEST_CASE("a prompt in two chunks (chunked prefill) equals the prompt in one step") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    auto model = testmodel::random_model("qwen3");
    auto tokens = prompt(10, 97, 3);
    auto backend = make_backend_under_test(kind, model);
    backend->allocate_kv_cache(8, 4);
    auto expected = prefill_all(*backend, tokens, identity_table(3));
    ForwardBatch first, second;
    first.sequences.push_back({0, {tokens.begin(), tokens.begin() + 6}, 0, identity_table(3), true});
    second.sequences.push_back({0, {tokens.begin() + 6, tokens.end()}, 6, identity_table(3), true});
    backend->forward(first);
    auto out = backend->forward(second);
    CHECK(scalar::nmse(out.logits.data(), &expected[6 * 97], 4 * 97) < kOrderTolerance);
  }
}

TEST_CASE("paged KV (scattered blocks of 4) equals contiguous KV (identity block table)") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    auto model = testmodel::random_model("llama");
    auto tokens = prompt(14, 97, 4);
    auto run = [&](std::vector<int32_t> table) {
      auto backend = make_backend_under_test(kind, model);
      backend->allocate_kv_cache(12, 4);
      std::vector<float> all;
      ForwardBatch prefill;  // 9 tokens, then 5 decode steps
      prefill.sequences.push_back({0, {tokens.begin(), tokens.begin() + 9}, 0, table, true});
      all = backend->forward(prefill).logits;
      for (size_t t = 9; t < tokens.size(); ++t) {
        ForwardBatch step;
        step.sequences.push_back({0, {tokens[t]}, int64_t(t), table, false});
        auto out = backend->forward(step);
        all.insert(all.end(), out.logits.begin(), out.logits.end());
      }
      return all;
    };
    auto contiguous = run(identity_table(4));
    auto paged = run({9, 2, 11, 5});
    CHECK(scalar::nmse(paged, contiguous) == 0.0);
  }
}

TEST_CASE("a batch of sequences (prefill and decode mixed) equals each sequence alone") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    auto model = testmodel::random_model("qwen2");
    auto a = prompt(7, 97, 5), b = prompt(5, 97, 6), c = prompt(9, 97, 7);
    // alone: each sequence in its own backend, contiguous blocks
    auto alone = [&](const std::vector<int32_t>& toks, int64_t cached) {
      auto backend = make_backend_under_test(kind, model);
      backend->allocate_kv_cache(4, 4);
      if (cached > 0) {
        ForwardBatch pre;
        pre.sequences.push_back({0, {toks.begin(), toks.begin() + cached}, 0, identity_table(3), false});
        backend->forward(pre);
      }
      ForwardBatch rest;
      rest.sequences.push_back({0, {toks.begin() + cached, toks.end()}, cached, identity_table(3), true});
      return backend->forward(rest).logits;
    };
    // together: a and c have their prefixes cached already, b is a fresh prompt; one shared pool
    auto shared = make_backend_under_test(kind, model);
    shared->allocate_kv_cache(10, 4);
    std::vector<int32_t> table_a = {3, 0}, table_b = {7, 1}, table_c = {2, 9, 4};
    ForwardBatch pre;
    pre.sequences.push_back({1, {a.begin(), a.begin() + 6}, 0, table_a, false});
    pre.sequences.push_back({3, {c.begin(), c.begin() + 4}, 0, table_c, false});
    shared->forward(pre);
    ForwardBatch step;
    step.sequences.push_back({1, {a[6]}, 6, table_a, true});
    step.sequences.push_back({2, b, 0, table_b, true});
    step.sequences.push_back({3, {c.begin() + 4, c.end()}, 4, table_c, true});
    auto out = shared->forward(step);
    REQUIRE(out.row_begin == std::vector<int64_t>{0, 1, 6, 11});
    auto ea = alone(a, 6), eb = alone(b, 0), ec = alone(c, 4);
    CHECK(scalar::nmse(out.row(0), ea.data(), ea.size()) < kOrderTolerance);
    CHECK(scalar::nmse(out.row(1), eb.data(), eb.size()) < kOrderTolerance);
    CHECK(scalar::nmse(out.row(6), ec.data(), ec.size()) < kOrderTolerance);
    CHECK(argmax(out.last_row(2), 97) == argmax(&ec[4 * 97], 97));
  }
}

TEST_CASE("interleaved RoPE on Meta-order weights equals half-split RoPE on HF-permuted weights") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    auto hf_config = testmodel::tiny_config("llama");
    auto meta_config = hf_config;
    meta_config.rope_layout = RopeLayout::Interleaved;
    auto meta_values = testmodel::random_values(meta_config, 11);
    // HF's permute(): within each head, output row c*D/2 + i of the HF matrix is Meta row 2i + c.
    auto hf_values = meta_values;
    const int64_t D = hf_config.head_dim, E = hf_config.hidden_size;
    for (auto& [t, v] : hf_values) {
      const bool is_q = t.name.find("q_proj.weight") != std::string::npos;
      const bool is_k = t.name.find("k_proj.weight") != std::string::npos;
      if (!is_q && !is_k) continue;
      const auto& src = std::find_if(meta_values.begin(), meta_values.end(), [&](auto& p) { return p.first.name == t.name; })->second;
      const int64_t heads = t.shape[0] / D;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < D / 2; ++i)
          for (int64_t c = 0; c < 2; ++c)
            std::copy_n(&src[(h * D + 2 * i + c) * E], E, &v[(h * D + c * D / 2 + i) * E]);
    }
    auto tokens = prompt(12, 97, 8);
    auto meta = make_backend_under_test(kind, testmodel::make_model(meta_config, meta_values));
    auto hf = make_backend_under_test(kind, testmodel::make_model(hf_config, hf_values));
    meta->allocate_kv_cache(3, 4);
    hf->allocate_kv_cache(3, 4);
    auto a = prefill_all(*meta, tokens, identity_table(3));
    auto b = prefill_all(*hf, tokens, identity_table(3));
    CHECK(scalar::nmse(a, b) < 1e-10);
    // and the layouts are not interchangeable: Meta weights with half-split RoPE give other logits
    auto wrong = make_backend_under_test(kind, testmodel::make_model(hf_config, meta_values));
    wrong->allocate_kv_cache(3, 4);
    CHECK(scalar::nmse(prefill_all(*wrong, tokens, identity_table(3)), a) > 1e-4);
  }
}

TEST_CASE("f16 and bf16 weights are widened exactly: same logits as f32 weights of the rounded values") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    auto config = testmodel::tiny_config("qwen3");
    auto values = testmodel::random_values(config, 12);
    auto tokens = prompt(6, 97, 9);
    for (DType dtype : {DType::F16, DType::BF16}) {
      auto rounded = values;
      for (auto& [t, v] : rounded)
        for (float& x : v) x = dtype == DType::F16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
      auto narrow = make_backend_under_test(kind, testmodel::make_model(config, values, dtype));
      auto wide = make_backend_under_test(kind, testmodel::make_model(config, rounded));
      narrow->allocate_kv_cache(2, 4);
      wide->allocate_kv_cache(2, 4);
      CHECK(scalar::nmse(prefill_all(*narrow, tokens, identity_table(2)), prefill_all(*wide, tokens, identity_table(2))) ==
            0.0);
    }
  }
}

TEST_CASE("trace: every stage with its shape; q_norm only for Qwen3; attention maps only for one sequence") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    for (std::string arch : {"llama", "qwen3"}) {
      CAPTURE(arch);
      auto config = testmodel::tiny_config(arch);
      auto backend = make_backend_under_test(kind, testmodel::make_model(config, testmodel::random_values(config, 1)));
      backend->allocate_kv_cache(4, 4);
      ForwardBatch pre, batch;
      pre.sequences.push_back({0, {5, 6, 7}, 0, {0, 1}, false});
      backend->forward(pre);
      batch.sequences.push_back({0, {8, 9}, 3, {0, 1}, true});
      CaptureSink sink;
      auto out = backend->forward(batch, &sink);
      const int64_t T = 2, P = 5, H = 4, KVH = 2, D = config.head_dim, E = 32, F = 37, V = 97;
      CHECK(sink.token_ids == std::vector<int32_t>{8, 9});
      using S = std::vector<int64_t>;
      std::map<std::pair<Stage, int>, S> expected = {
          {{Stage::embeddings, -1}, {T, E}}, {{Stage::final_norm, -1}, {T, E}}, {{Stage::logits, -1}, {T, V}}};
      for (int l = 0; l < 2; ++l) {
        for (Stage s : {Stage::attn_norm, Stage::attn_out, Stage::resid_attn, Stage::ffn_norm, Stage::ffn_out,
                        Stage::layer_out})
          expected[{s, l}] = {T, E};
        for (Stage s : {Stage::gate, Stage::up, Stage::act}) expected[{s, l}] = {T, F};
        expected[{Stage::q, l}] = expected[{Stage::q_rope, l}] = {T, H, D};
        expected[{Stage::k, l}] = expected[{Stage::k_rope, l}] = expected[{Stage::v, l}] = {T, KVH, D};
        if (arch == "qwen3") expected[{Stage::q_norm, l}] = {T, H, D}, expected[{Stage::k_norm, l}] = {T, KVH, D};
        expected[{Stage::attn_scores, l}] = expected[{Stage::attn_weights, l}] = {H, T, P};
        expected[{Stage::attn_context, l}] = {T, H * D};
      }
      CHECK(sink.tensors.size() == expected.size());
      for (const auto& [key, shape] : expected) {
        CAPTURE(stage_name(key.first));
        CAPTURE(key.second);
        REQUIRE(sink.tensors.count(key) == 1);
        CHECK(sink.tensors[key].second == shape);
        int64_t n = 1;
        for (auto d : shape) n *= d;
        CHECK(int64_t(sink.tensors[key].first.size()) == n);
      }
      CHECK(sink.tensors[{Stage::logits, -1}].first == out.logits);
      // two sequences: row-wise stages cover both, the per-sequence attention maps are not emitted
      ForwardBatch two;
      two.sequences.push_back({0, {10}, 5, {0, 1}, false});
      two.sequences.push_back({1, {1, 2, 3}, 0, {2}, false});
      CaptureSink sink2;
      backend->forward(two, &sink2);
      CHECK(sink2.tensors[{Stage::q, 1}].second == S{4, H, D});
      CHECK(sink2.tensors.count({Stage::attn_scores, 0}) == 0);
      CHECK(sink2.tensors[{Stage::logits, -1}].second == S{2, V});
    }
  }
}

TEST_CASE("a sink that wants nothing is asked but handed nothing; results equal an untraced run") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    auto model = testmodel::random_model("llama");
    auto backend = make_backend_under_test(kind, model);
    backend->allocate_kv_cache(2, 4);
    auto untraced = prefill_all(*backend, {1, 2, 3}, {0});
    RefusingSink sink;
    ForwardBatch batch;
    batch.sequences.push_back({0, {1, 2, 3}, 0, {0}, true});
    auto traced = backend->forward(batch, &sink).logits;
    CHECK(sink.asked > 0);
    CHECK(sink.recorded == 0);
    CHECK(traced == untraced);
  }
}

TEST_CASE("bad input is a journey::Error that names the problem") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    auto model = testmodel::random_model("llama");
    auto backend = make_backend_under_test(kind, model);
    ForwardBatch batch;
    batch.sequences.push_back({0, {1, 2}, 0, {0}, false});
    CHECK_THROWS_WITH_AS(backend->forward(batch), doctest::Contains("not allocated"), Error);
    backend->allocate_kv_cache(4, 4);
    batch.sequences[0].tokens = {1, 97};
    CHECK_THROWS_WITH_AS(backend->forward(batch), doctest::Contains("token id 97 outside [0, 97)"), Error);
    batch.sequences[0].tokens = {1, 2, 3, 4, 5};
    CHECK_THROWS_WITH_AS(backend->forward(batch), doctest::Contains("needs 2 blocks, but its block table has 1"), Error);
    batch.sequences[0].block_table = {0, 4};
    CHECK_THROWS_WITH_AS(backend->forward(batch), doctest::Contains("entry 1 is 4, outside the pool [0, 4)"), Error);
    batch.sequences[0] = {0, {1}, 64, {0}, false};
    CHECK_THROWS_WITH_AS(backend->forward(batch), doctest::Contains("context is 64"), Error);
    batch.sequences[0].tokens.clear();
    CHECK_THROWS_WITH_AS(backend->forward(batch), doctest::Contains("feeds no tokens"), Error);
    CHECK_THROWS_WITH_AS(backend->copy_kv_block(0, 4), doctest::Contains("[0, 4)"), Error);

    auto config = testmodel::tiny_config("llama");
    auto values = testmodel::random_values(config, 1);
    values.erase(values.begin() + 3);  // model.layers.0.self_attn.k_proj.weight
    CHECK_THROWS_WITH_AS(make_backend_under_test(kind, testmodel::make_model(config, values)),
                         doctest::Contains("missing tensor model.layers.0.self_attn.k_proj.weight"), Error);
    auto wide = config;
    wide.intermediate_size = 38;  // the weights were made for 37
    auto mismatched = testmodel::make_model(config, testmodel::random_values(config, 1));
    mismatched.config = wide;
    CHECK_THROWS_WITH_AS(make_backend_under_test(kind, mismatched),
                         doctest::Contains("model.layers.0.mlp.gate_proj.weight in random test model: expected shape [38, 32] "
                                           "(from the model config), found [37, 32]"),
                         Error);
  }
}

TEST_CASE("copy_kv_block duplicates a block: a sequence reading the copy sees the same history") {
  for (const std::string& kind : kCpuBackends) {
    CAPTURE(kind);
    auto model = testmodel::random_model("llama");
    auto backend = make_backend_under_test(kind, model);
    backend->allocate_kv_cache(4, 4);
    ForwardBatch pre;
    pre.sequences.push_back({0, {3, 1, 4, 1}, 0, {2}, false});
    backend->forward(pre);
    backend->copy_kv_block(2, 3);
    ForwardBatch original, copy;
    original.sequences.push_back({0, {5}, 4, {2, 0}, false});
    copy.sequences.push_back({1, {5}, 4, {3, 1}, false});
    CHECK(backend->forward(original).logits == backend->forward(copy).logits);
  }
}
