// The reference ops, each the literal formula of reference/ops.h. Eigen's Map views a raw array as
// a vector or a row-major matrix without copying, so `y = x W^T` is written as exactly that.
#include "reference/ops.h"

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace journey::reference {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::Map<Eigen::VectorXf>;
using ConstVector = Eigen::Map<const Eigen::VectorXf>;
using Matrix = Eigen::Map<RowMatrix>;
using ConstMatrix = Eigen::Map<const RowMatrix>;

}  // namespace

void embedding_gather(float* out, const float* table, const int32_t* tokens, int64_t T, int64_t E) {
  for (int64_t t = 0; t < T; ++t) std::memcpy(out + t * E, table + int64_t(tokens[t]) * E, sizeof(float) * E);
}

void rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps) {
  for (int64_t r = 0; r < R; ++r) {
    ConstVector row(x + r * N, N);                                     // [N]
    const float inv_rms = 1.0f / std::sqrt(row.squaredNorm() / float(N) + eps);
    Vector(out + r * N, N) = (row * inv_rms).cwiseProduct(ConstVector(weight, N));
  }
}

void rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta, RopeLayout layout) {
  const int64_t half = D / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // pair i turns by the same angle in every head
      const float inv_freq = 1.0f / std::pow(float(theta), float(2 * i) / float(D));  // theta^(-2i/D)
      const float angle = float(positions[t]) * inv_freq;
      const float cos_a = std::cos(angle), sin_a = std::sin(angle);
      // the two members of pair i
      const int64_t a = layout == RopeLayout::HalfSplit ? i : 2 * i;
      const int64_t b = layout == RopeLayout::HalfSplit ? i + half : 2 * i + 1;
      for (int64_t h = 0; h < heads; ++h) {
        float* head = x + (t * heads + h) * D;  // [D]
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * cos_a - x1 * sin_a;
        head[b] = x0 * sin_a + x1 * cos_a;
      }
    }
  }
}

void linear(float* y, const float* x, const float* weight, const float* bias, int64_t T, int64_t in, int64_t out) {
  ConstMatrix X(x, T, in);         // [T, in]
  ConstMatrix W(weight, out, in);  // [out, in]
  Matrix Y(y, T, out);             // [T, out]
  Y.noalias() = X * W.transpose();
  if (bias) Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias, out);
}

void softmax(float* x, int64_t R, int64_t N) {
  for (int64_t r = 0; r < R; ++r) {
    float* row = x + r * N;  // [N]
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < N; ++i) max = std::max(max, row[i]);  // subtracted so that exp never overflows
    float sum = 0.0f;
    for (int64_t i = 0; i < N; ++i) {
      row[i] = std::exp(row[i] - max);  // exp(-inf) = 0: masked entries drop out
      sum += row[i];
    }
    for (int64_t i = 0; i < N; ++i) row[i] /= sum;
  }
}

void swiglu(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void residual_add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void attention(float* context, const float* q, const float* k, const float* v, int64_t T, int64_t start, int64_t H,
               int64_t KVH, int64_t D, float* scores_out, float* weights_out) {
  const int64_t P = start + T;
  const int64_t group = H / KVH;  // query heads per KV head
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> row(static_cast<size_t>(P));  // [P] the scores, then the weights, of one (head, query)
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kv_head = h / group;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t last = start + t;  // causal: query t sees positions [0, last]
      ConstVector query(q + (t * H + h) * D, D);  // [D]
      // scores = q.k / sqrt(D), -inf after the query's own position
      for (int64_t p = 0; p < P; ++p)
        row[p] = p <= last ? query.dot(ConstVector(k + (p * KVH + kv_head) * D, D)) * scale
                           : -std::numeric_limits<float>::infinity();
      if (scores_out) std::memcpy(scores_out + (h * T + t) * P, row.data(), sizeof(float) * P);
      // weights = softmax(scores)
      softmax(row.data(), 1, P);
      if (weights_out) std::memcpy(weights_out + (h * T + t) * P, row.data(), sizeof(float) * P);
      // context = sum over positions of weight * v
      Vector out(context + t * H * D + h * D, D);  // [D]
      out.setZero();
      for (int64_t p = 0; p <= last; ++p) out += row[p] * ConstVector(v + (p * KVH + kv_head) * D, D);
    }
  }
}

void kv_cache_write(float* k_pool, float* v_pool, const float* k, const float* v, const int32_t* block_table,
                    int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D) {
  const int64_t row = KVH * D;  // floats per slot
  for (int64_t t = 0; t < T; ++t) {
    const int64_t position = start + t;
    const int64_t slot = int64_t(block_table[position / block_size]) * block_size + position % block_size;
    std::memcpy(k_pool + slot * row, k + t * row, sizeof(float) * row);
    std::memcpy(v_pool + slot * row, v + t * row, sizeof(float) * row);
  }
}

void paged_attention(float* context, const float* q, const float* k_pool, const float* v_pool,
                     const int32_t* block_table, int64_t T, int64_t start, int64_t block_size, int64_t H, int64_t KVH,
                     int64_t D, float* scores_out, float* weights_out) {
  // Gather the sequence's K and V rows from their slots into contiguous arrays, then attend.
  const int64_t P = start + T, row = KVH * D;
  std::vector<float> k(static_cast<size_t>(P * row)), v(static_cast<size_t>(P * row));  // [P, KVH, D] each
  for (int64_t p = 0; p < P; ++p) {
    const int64_t slot = int64_t(block_table[p / block_size]) * block_size + p % block_size;
    std::memcpy(k.data() + p * row, k_pool + slot * row, sizeof(float) * row);
    std::memcpy(v.data() + p * row, v_pool + slot * row, sizeof(float) * row);
  }
  attention(context, q, k.data(), v.data(), T, start, H, KVH, D, scores_out, weights_out);
}

}  // namespace journey::reference
