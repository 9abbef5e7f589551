// Plain scalar loops, accumulated in double, that the reference ops are checked against. They are
// written straight from the formulas (HF modeling_llama.py / llama2.c run.c), share no code with
// src/reference, and are deliberately slow.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/config.h"

namespace scalar {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Normalized mean squared error sum((a-b)^2) / sum(b^2), as llama.cpp's test-backend-ops reports it.
inline double nmse(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isinf(b[i]) && a[i] == b[i]) continue;  // both -inf (masked scores)
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den == 0 ? num : num / den;
}
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) { return nmse(a.data(), b.data(), b.size()); }

// y[t, o] = sum_i x[t, i] w[o, i] + bias[o]
inline std::vector<float> linear(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int64_t T,
                                 int64_t in, int64_t out) {
  std::vector<float> y(size_t(T * out));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += double(x[t * in + i]) * w[o * in + i];
      y[t * out + o] = float(acc);
    }
  return y;
}

inline std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w, int64_t R, int64_t N,
                                   double eps) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < N; ++i) ss += double(x[r * N + i]) * x[r * N + i];
    const double scale = 1.0 / std::sqrt(ss / double(N) + eps);
    for (int64_t i = 0; i < N; ++i) y[r * N + i] = float(x[r * N + i] * scale * w[i]);
  }
  return y;
}

// RoPE over [T, heads, D] in double: pair members (a, b) rotate by pos * theta^(-2i/D).
inline std::vector<float> rope(const std::vector<float>& x, const std::vector<int64_t>& positions, int64_t heads,
                               int64_t D, double theta, journey::RopeLayout layout) {
  std::vector<float> y = x;
  const int64_t T = int64_t(positions.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double angle = double(positions[t]) * std::pow(theta, -2.0 * double(i) / double(D));
        const int64_t a = layout == journey::RopeLayout::HalfSplit ? i : 2 * i;
        const int64_t b = layout == journey::RopeLayout::HalfSplit ? i + D / 2 : 2 * i + 1;
        const double x0 = x[(t * heads + h) * D + a], x1 = x[(t * heads + h) * D + b];
        y[(t * heads + h) * D + a] = float(x0 * std::cos(angle) - x1 * std::sin(angle));
        y[(t * heads + h) * D + b] = float(x0 * std::sin(angle) + x1 * std::cos(angle));
      }
  return y;
}

inline void softmax(float* x, int64_t n) {
  double max = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, double(x[i]));
  std::vector<double> e(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) sum += (e[i] = std::exp(double(x[i]) - max));
  for (int64_t i = 0; i < n; ++i) x[i] = float(e[i] / sum);
}

inline float silu_times(float g, float u) { return float(double(g) / (1.0 + std::exp(-double(g))) * u); }

struct AttentionResult {
  std::vector<float> context;  // [T, H*D]
  std::vector<float> scores;   // [H, T, P]
  std::vector<float> weights;  // [H, T, P]
};

// Causal GQA attention, written the naive way: q [T, H, D], k/v [P, KVH, D], query t at start + t.
inline AttentionResult attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                 int64_t T, int64_t start, int64_t H, int64_t KVH, int64_t D) {
  const int64_t P = start + T;
  AttentionResult r;
  r.context.assign(size_t(T * H * D), 0.0f);
  r.scores.assign(size_t(H * T * P), 0.0f);
  r.weights.assign(size_t(H * T * P), 0.0f);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kvh = h / (H / KVH);
    for (int64_t t = 0; t < T; ++t) {
      float* s = &r.scores[(h * T + t) * P];
      for (int64_t p = 0; p < P; ++p) {
        if (p > start + t) {
          s[p] = -std::numeric_limits<float>::infinity();
          continue;
        }
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(q[(t * H + h) * D + d]) * k[(p * KVH + kvh) * D + d];
        s[p] = float(dot / std::sqrt(double(D)));
      }
      float* w = &r.weights[(h * T + t) * P];
      for (int64_t p = 0; p < P; ++p) w[p] = s[p];
      softmax(w, P);
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t p = 0; p < P; ++p) acc += double(w[p]) * v[(p * KVH + kvh) * D + d];
        r.context[t * H * D + h * D + d] = float(acc);
      }
    }
  }
  return r;
}

}  // namespace scalar
