#include "backends/op_check.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/numeric.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "reference/ops.h"

namespace journey::optest {

namespace {

constexpr int64_t kGuard = 16;           // floats of sentinel before and after every output
constexpr float kSentinel = -7777.25f;   // a value no op produces from our inputs
constexpr double kExact = 0.0;           // copies: bit for bit
constexpr double kElementwise = 1e-12;   // exp/pow/sin may differ in the last ulp between libraries
constexpr double kReordered = 1e-10;     // sums in another order (blocked, SIMD, tree reductions)

std::vector<float> random_floats(size_t n, uint32_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// An output buffer between two guard regions; poisoned with NaN (or set to an input for in-place ops).
class Guarded {
 public:
  explicit Guarded(size_t n) : n_(n), buffer_(n + 2 * kGuard, kSentinel) {
    std::fill(data(), data() + n_, std::numeric_limits<float>::quiet_NaN());
  }
  Guarded(const std::vector<float>& initial) : Guarded(initial.size()) {
    std::copy(initial.begin(), initial.end(), data());
  }
  float* data() { return buffer_.data() + kGuard; }
  std::vector<float> values() const { return {buffer_.begin() + kGuard, buffer_.begin() + kGuard + long(n_)}; }
  bool guards_intact() const {
    for (int64_t i = 0; i < kGuard; ++i)
      if (buffer_[size_t(i)] != kSentinel || buffer_[size_t(kGuard) + n_ + size_t(i)] != kSentinel) return false;
    return true;
  }

 private:
  size_t n_;
  std::vector<float> buffer_;
};

// A weight matrix in `type` and the f32 values the reference multiplies by.
struct TestMatrix {
  DType type;
  std::vector<uint8_t> bytes;  // stored form
  std::vector<float> widened;  // [rows, cols]
  int64_t rows, cols;
  HostMatrix view() const { return {type, bytes.data(), rows, cols}; }
};

// Stored with the quant module's reference quantizer (llama.cpp's, bit for bit) and widened back
// with its reference dequantizer: the values the reference multiplies by are exactly the file's.
TestMatrix make_matrix(const std::vector<float>& values, int64_t rows, int64_t cols, DType type) {
  TestMatrix m{type, {}, values, rows, cols};
  const int64_t n = rows * cols;
  m.bytes.resize(size_t(dtype_bytes_for(type, n)));
  quant::quantize(type, values.data(), m.bytes.data(), n);
  quant::dequantize(type, m.bytes.data(), m.widened.data(), n);
  return m;
}

// Row lengths for a weight type: the odd sizes for the plain types, whole blocks otherwise
// (1, 3 and 17 blocks: one block, a few, and more than a 16-group chunk of the integer kernel).
std::vector<int64_t> row_lengths(DType type, std::initializer_list<int64_t> plain) {
  const int64_t block = dtype_block_size(type);
  if (block == 1) return plain;
  return {block, 3 * block, 17 * block};
}

std::string sizes(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::ostringstream s;
  bool first = true;
  for (auto [name, value] : dims) s << (first ? "" : " ") << name << "=" << value, first = false;
  return s.str();
}

class Checker {
 public:
  explicit Checker(OpBackend& b) : b_(b) {}
  std::vector<OpFailure> failures;

  // ours (in guards) against the reference's values
  void compare(const std::string& op, const std::string& where, const Guarded& ours, const std::vector<float>& want,
               double tolerance, const char* output = "") {
    const std::vector<float> got = ours.values();
    const std::string label = *output ? std::string(" (") + output + ")" : std::string();
    if (!ours.guards_intact()) failures.push_back({op, where, "wrote outside its output" + label});
    const double e = nmse(got, want);
    if (!(e <= tolerance)) {
      std::ostringstream what;
      what << "NMSE " << e << " > " << tolerance << label;
      for (size_t i = 0; i < got.size(); ++i)
        if (!(got[i] == want[i]) && !(std::abs(got[i] - want[i]) <= 1e-6f * std::abs(want[i]))) {
          what << "; first difference at [" << i << "]: " << got[i] << " vs reference " << want[i];
          break;
        }
      failures.push_back({op, where, what.str()});
    }
  }

  // A product y = x W^T against the reference's. f32 weights: NMSE (only the summation order
  // differs). Stored types round the activations, and a single output can be a near-cancelling sum
  // whose own magnitude says nothing about the error's, so the error is measured against the power
  // the outputs have when their terms do not cancel, sum_k (sum_t x[t,k]^2) (sum_o W[o,k]^2): for an
  // error from rounding x that is the NMSE of the rounded x, whatever the cancellation; a wrong
  // weight (nibble, scale, minimum) gives ~1 (op_check.h gives the bounds).
  void compare_product(const std::string& op, const std::string& where, const Guarded& ours,
                       const std::vector<float>& want, const std::vector<float>& x, const TestMatrix& w,
                       double tolerance, const char* output = "") {
    if (w.type == DType::F32) return compare(op, where, ours, want, tolerance, output);
    const std::vector<float> got = ours.values();
    const int64_t in = w.cols, T = int64_t(x.size()) / in;
    double error = 0, power = 0;
    for (size_t i = 0; i < got.size(); ++i) error += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    for (int64_t k = 0; k < in; ++k) {
      double x_power = 0, w_power = 0;
      for (int64_t t = 0; t < T; ++t) x_power += double(x[size_t(t * in + k)]) * x[size_t(t * in + k)];
      for (int64_t o = 0; o < w.rows; ++o) w_power += double(w.widened[size_t(o * in + k)]) * w.widened[size_t(o * in + k)];
      power += x_power * w_power;
    }
    const double relative = error / power;
    worst_[w.type] = std::max(worst_[w.type], relative);
    // the guards and the NaN poison as compare() checks them, with an infinite NMSE bound
    compare(op, where, ours, want, std::numeric_limits<double>::infinity(), output);
    if (!(relative <= tolerance)) {
      std::ostringstream what;
      what << "relative error " << relative << " > " << tolerance << (*output ? std::string(" (") + output + ")" : "");
      for (size_t i = 0; i < got.size(); ++i)
        if (!(std::abs(got[i] - want[i]) <= 1e-6f * std::abs(want[i]))) {
          what << "; first difference at [" << i << "]: " << got[i] << " vs reference " << want[i];
          break;
        }
      failures.push_back({op, where, what.str()});
    }
  }

  // The largest error of a product seen per stored type (compare_product's measure).
  const std::map<DType, double>& worst() const { return worst_; }

  void embedding_gather() {
    for (int64_t V : {1, 17, 63})
      for (DType type : b_.weight_types())
        for (int64_t E : row_lengths(type, {1, 3, 17, 63, 4097}))
          for (int64_t T : {1, 3, 17}) {
            const std::string where = sizes({{"V", V}, {"E", E}, {"T", T}}) + " " + std::string(dtype_name(type));
            TestMatrix table = make_matrix(random_floats(size_t(V * E), seed()), V, E, type);
            std::vector<int32_t> tokens(static_cast<size_t>(T));
            for (int64_t t = 0; t < T; ++t) tokens[size_t(t)] = int32_t((t * 7 + 3) % V);
            Guarded out(static_cast<size_t>(T * E));
            b_.embedding_gather(out.data(), table.view(), tokens.data(), T, E);
            std::vector<float> want(static_cast<size_t>(T * E));
            reference::embedding_gather(want.data(), table.widened.data(), tokens.data(), T, E);
            compare("embedding_gather", where, out, want, kExact);
          }
  }

  void rms_norm() {
    for (int64_t R : {1, 3, 17})
      for (int64_t N : {1, 3, 17, 63, 4097})
        for (bool in_place : {false, true}) {
          const std::string where = sizes({{"R", R}, {"N", N}}) + (in_place ? " in place" : "");
          auto x = random_floats(size_t(R * N), seed(), 3.0f);
          auto w = random_floats(size_t(N), seed(), 0.1f, 1.0f);
          std::vector<float> want(x.size());
          reference::rms_norm(want.data(), x.data(), w.data(), R, N, 1e-5f);
          if (in_place) {
            Guarded inout(x);
            b_.rms_norm(inout.data(), inout.data(), w.data(), R, N, 1e-5f);
            compare("rms_norm", where, inout, want, kElementwise);
          } else {
            Guarded out(x.size());
            b_.rms_norm(out.data(), x.data(), w.data(), R, N, 1e-5f);
            compare("rms_norm", where, out, want, kElementwise);
          }
        }
  }

  void rope() {
    for (int64_t T : {1, 3, 17})
      for (int64_t heads : {1, 3})
        for (int64_t D : {2, 4, 64, 130})
          for (RopeLayout layout : {RopeLayout::HalfSplit, RopeLayout::Interleaved})
            for (double theta : {10000.0, 1000000.0}) {
              const std::string where = sizes({{"T", T}, {"heads", heads}, {"D", D}}) +
                                        (layout == RopeLayout::HalfSplit ? " half-split" : " interleaved") +
                                        " theta=" + std::to_string(int64_t(theta));
              auto x = random_floats(size_t(T * heads * D), seed());
              std::vector<int64_t> positions(static_cast<size_t>(T));
              for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = (t * 613 + 5) % 4097;  // up to 4096
              std::vector<float> want = x;
              reference::rope(want.data(), positions.data(), T, heads, D, theta, layout);
              Guarded inout(x);
              b_.rope(inout.data(), positions.data(), T, heads, D, theta, layout);
              // The angle pos * theta^(-2i/D) is an f32 product: one ulp of difference in powf between
              // math libraries (CUDA's vs glibc's) moves the angle at position ~4096 by up to ~2e-4
              // rad, so backends on other libraries agree to NMSE ~1e-9 (measured on the H200: 2.4e-10
              // at D = 130); the same library gives ~0. A wrong pairing or position gives ~1.
              compare("rope", where, inout, want, 1e-8);
            }
  }

  void linear() {
    int variant = 0;
    for (DType type : b_.weight_types())
      for (int64_t in : row_lengths(type, {1, 3, 17, 63, 96, 4097}))  // 96: a multiple of 32 (AMX tiles)
        for (int64_t out : {1, 3, 17, 63, 257}) {
          // one matrix for every token count (the K types' quantizer searches, so it is not cheap)
          const TestMatrix w = make_matrix(random_floats(size_t(out * in), seed(), 0.5f), out, in, type);
          const auto bias = random_floats(size_t(out), seed());
          for (int64_t T : {1, 2, 3, 6, 9, 16, 17, 33}) {  // 6, 9, 16: batched decode in token lanes
            const bool with_bias = (variant++ % 2) == 1;
            const std::string where = sizes({{"T", T}, {"in", in}, {"out", out}}) + " " + std::string(dtype_name(type)) +
                                      (with_bias ? " +bias" : "");
            auto x = random_floats(size_t(T * in), seed());
            std::vector<float> want(static_cast<size_t>(T * out));
            reference::linear(want.data(), x.data(), w.widened.data(), with_bias ? bias.data() : nullptr, T, in, out);
            Guarded y(static_cast<size_t>(T * out));
            b_.linear(y.data(), x.data(), w.view(), with_bias ? bias.data() : nullptr, T, in, out);
            compare_product("linear", where, y, want, x, w, weight_tolerance(type, T));
          }
        }
  }

  void linear_shared_input() {
    if (!b_.has_linear_shared_input()) return;
    for (int64_t T : {1, 3, 16, 17})
      for (DType type : b_.weight_types())
        for (int64_t in : row_lengths(type, {17, 4097})) {
          const std::string where = sizes({{"T", T}, {"in", in}}) + " outs=17,3,257 " + std::string(dtype_name(type));
          const std::vector<int64_t> outs = {17, 3, 257};
          auto x = random_floats(size_t(T * in), seed());
          std::vector<TestMatrix> weights;
          std::vector<std::vector<float>> biases;
          std::vector<Guarded> ys;
          ys.reserve(outs.size());
          std::vector<HostTarget> targets;
          for (size_t i = 0; i < outs.size(); ++i) {
            weights.push_back(make_matrix(random_floats(size_t(outs[i] * in), seed(), 0.5f), outs[i], in, type));
            biases.push_back(random_floats(size_t(outs[i]), seed()));
            ys.emplace_back(size_t(T * outs[i]));
          }
          for (size_t i = 0; i < outs.size(); ++i)
            targets.push_back({ys[i].data(), weights[i].view(), i == 1 ? nullptr : biases[i].data()});
          b_.linear_shared_input(x.data(), T, in, targets);
          for (size_t i = 0; i < outs.size(); ++i) {
            std::vector<float> want(static_cast<size_t>(T * outs[i]));
            reference::linear(want.data(), x.data(), weights[i].widened.data(), i == 1 ? nullptr : biases[i].data(), T,
                              in, outs[i]);
            compare_product("linear_shared_input", where, ys[i], want, x, weights[i], weight_tolerance(type, T),
                            i == 0 ? "target 0" : i == 1 ? "target 1" : "target 2");
          }
        }
  }

  void softmax() {
    for (int64_t R : {1, 3})
      for (int64_t N : {1, 3, 17, 63, 4097}) {
        const std::string where = sizes({{"R", R}, {"N", N}}) + " with -inf entries";
        auto x = random_floats(size_t(R * N), seed(), 4.0f);
        for (int64_t r = 0; r < R; ++r)  // every third entry masked, never a whole row
          for (int64_t i = 1; i < N; i += 3) x[size_t(r * N + i)] = -std::numeric_limits<float>::infinity();
        std::vector<float> want = x;
        reference::softmax(want.data(), R, N);
        Guarded inout(x);
        b_.softmax(inout.data(), R, N);
        compare("softmax", where, inout, want, kReordered);  // a sum over N entries
        const std::vector<float> got = inout.values();
        for (size_t i = 0; i < x.size(); ++i)
          if (std::isinf(x[i]) && got[i] != 0.0f) {
            failures.push_back({"softmax", where, "a masked (-inf) entry did not become exactly 0"});
            break;
          }
      }
  }

  void elementwise() {
    for (int64_t n : {1, 3, 17, 63, 4097}) {
      const std::string where = sizes({{"n", n}});
      auto gate = random_floats(size_t(n), seed(), 4.0f), up = random_floats(size_t(n), seed());
      gate[0] = -100.0f;  // exp(-g) overflows: silu's limit -0
      std::vector<float> want(static_cast<size_t>(n));
      reference::swiglu(want.data(), gate.data(), up.data(), n);
      Guarded act(static_cast<size_t>(n));
      b_.swiglu(act.data(), gate.data(), up.data(), n);
      compare("swiglu", where, act, want, kElementwise);

      reference::residual_add(want.data(), gate.data(), up.data(), n);
      Guarded sum(static_cast<size_t>(n));
      b_.residual_add(sum.data(), gate.data(), up.data(), n);
      compare("residual_add", where, sum, want, kExact);
      Guarded inout(gate);  // out aliases a
      b_.residual_add(inout.data(), inout.data(), up.data(), n);
      compare("residual_add", where + " in place", inout, want, kExact);
    }
  }

  void attention() {
    for (int64_t T : {1, 3, 17})
      for (int64_t start : {0, 5, 63})
        for (auto [H, KVH] : {std::pair<int64_t, int64_t>{1, 1}, {4, 2}, {6, 3}})
          for (int64_t D : {2, 17, 64}) {
            const int64_t P = start + T;
            const std::string where = sizes({{"T", T}, {"start", start}, {"H", H}, {"KVH", KVH}, {"D", D}});
            auto q = random_floats(size_t(T * H * D), seed());
            auto k = random_floats(size_t(P * KVH * D), seed());
            auto v = random_floats(size_t(P * KVH * D), seed());
            std::vector<float> want(static_cast<size_t>(T * H * D)), want_scores(static_cast<size_t>(H * T * P)), want_weights(static_cast<size_t>(H * T * P));
            reference::attention(want.data(), q.data(), k.data(), v.data(), T, start, H, KVH, D, want_scores.data(),
                                 want_weights.data());
            Guarded context(want.size()), scores(want_scores.size()), weights(want_weights.size());
            b_.attention(context.data(), q.data(), k.data(), v.data(), T, start, H, KVH, D, scores.data(),
                         weights.data());
            compare("attention", where, context, want, kReordered, "context");
            compare("attention", where, scores, want_scores, kReordered, "scores");
            compare("attention", where, weights, want_weights, kReordered, "weights");
          }
  }

  void paged() {
    // a scattered block table; the prefix [0, start) written by an earlier call, then this step's rows
    for (int64_t block_size : {1, 3, 16})
      for (int64_t T : {1, 3, 17})
        for (int64_t start : {0, 5, 40})
          for (auto [H, KVH] : {std::pair<int64_t, int64_t>{4, 2}, {3, 3}}) {
            const int64_t D = 17, P = start + T, blocks = (P + block_size - 1) / block_size, pool = 2 * blocks + 1;
            const std::string where = sizes({{"block_size", block_size}, {"T", T}, {"start", start}, {"H", H}, {"KVH", KVH}});
            std::vector<int32_t> table(static_cast<size_t>(blocks));  // block b of the sequence -> pool block 2b+1, reversed
            for (int64_t b = 0; b < blocks; ++b) table[size_t(b)] = int32_t(2 * (blocks - 1 - b) + 1);
            const int64_t slot = KVH * D;
            auto k = random_floats(size_t(P * slot), seed()), v = random_floats(size_t(P * slot), seed());
            auto q = random_floats(size_t(T * H * D), seed());
            std::vector<float> want_k(static_cast<size_t>(pool * block_size * slot), kSentinel), want_v = want_k;
            reference::kv_cache_write(want_k.data(), want_v.data(), k.data(), v.data(), table.data(), start, 0,
                                      block_size, KVH, D);
            reference::kv_cache_write(want_k.data(), want_v.data(), k.data() + start * slot, v.data() + start * slot,
                                      table.data(), T, start, block_size, KVH, D);
            // the pools start as all sentinels (unused slots must stay so): no NaN poison here
            Guarded k_pool(std::vector<float>(want_k.size(), kSentinel)), v_pool(std::vector<float>(want_v.size(), kSentinel));
            if (start > 0)
              b_.kv_cache_write(k_pool.data(), v_pool.data(), k.data(), v.data(), table.data(), start, 0, block_size,
                                KVH, D, pool);
            b_.kv_cache_write(k_pool.data(), v_pool.data(), k.data() + start * slot, v.data() + start * slot,
                              table.data(), T, start, block_size, KVH, D, pool);
            compare("kv_cache_write", where, k_pool, want_k, kExact, "k pool");
            compare("kv_cache_write", where, v_pool, want_v, kExact, "v pool");

            std::vector<float> want(static_cast<size_t>(T * H * D)), want_w(static_cast<size_t>(H * T * P));
            reference::paged_attention(want.data(), q.data(), want_k.data(), want_v.data(), table.data(), T, start,
                                       block_size, H, KVH, D, nullptr, want_w.data());
            Guarded context(want.size()), weights(want_w.size());
            b_.paged_attention(context.data(), q.data(), want_k.data(), want_v.data(), table.data(), T, start,
                               block_size, H, KVH, D, nullptr, weights.data(), pool);
            compare("paged_attention", where, context, want, kReordered, "context");
            compare("paged_attention", where, weights, want_w, kReordered, "weights");
          }
  }

 private:
  uint32_t seed() { return next_seed_++; }
  std::map<DType, double> worst_;
  OpBackend& b_;
  uint32_t next_seed_ = 1;
};

}  // namespace

double weight_tolerance(DType type, int64_t T) {
  switch (type) {
    case DType::F32: return kReordered;
    case DType::F16: return T > 16 ? 1e-4 : 1e-6;  // prefill on AMX tiles rounds x to bf16, as for bf16
    case DType::BF16: return 1e-4;
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
      return 5e-4;  // x quantized to Q8_0 (up to 16 tokens): ~2.7e-5 on average (op_check.h)
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return 1e-3;  // x quantized to Q8_K (one scale per 256): ~5e-5 on average
    default: fail("op test: no tolerance for weights of type ", dtype_name(type), " yet");
  }
}

std::vector<OpFailure> check_ops(OpBackend& backend, std::map<DType, double>* worst_product_error) {
  Checker c(backend);
  auto guarded = [&](const char* op, auto&& run) {
    try {
      run();
    } catch (const std::exception& e) {
      c.failures.push_back({op, "", std::string("threw: ") + e.what()});
    }
  };
  guarded("embedding_gather", [&] { c.embedding_gather(); });
  guarded("rms_norm", [&] { c.rms_norm(); });
  guarded("rope", [&] { c.rope(); });
  guarded("linear", [&] { c.linear(); });
  guarded("linear_shared_input", [&] { c.linear_shared_input(); });
  guarded("softmax", [&] { c.softmax(); });
  guarded("swiglu/residual_add", [&] { c.elementwise(); });
  guarded("attention", [&] { c.attention(); });
  guarded("kv_cache_write/paged_attention", [&] { c.paged(); });
  if (worst_product_error) *worst_product_error = c.worst();
  return c.failures;
}

std::string describe(const std::vector<OpFailure>& failures) {
  std::ostringstream s;
  for (const OpFailure& f : failures) s << f.op << " [" << f.where << "]: " << f.what << "\n";
  return s.str();
}

}  // namespace journey::optest
