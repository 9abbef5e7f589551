// ReferenceBackend::forward is the whole model. A step feeds the tokens of one or more sequences;
// they are stacked into one matrix of N rows (sequence i owns rows [first_row[i], first_row[i+1])),
// so every stage but attention is one op over all N rows. Attention is per sequence: each one reads
// its own history from the paged KV pool.
//
// Trace rule (docs/reference-path.md): row-wise stages cover all N rows; attn_scores,
// attn_weights and kv_blocks have a per-sequence shape and are recorded only for a one-sequence step.
#include "reference/reference_backend.h"

#include <cstring>

#include "core/error.h"
#include "core/model_weights.h"
#include "core/shape.h"
#include "reference/ops.h"
#include "trace/sink.h"

namespace journey {

namespace {

using Floats = std::vector<float>;

struct LayerWeights {
  Floats attn_norm;   // [E]
  Floats wq;          // [H*D, E]
  Floats wk;          // [KVH*D, E]
  Floats wv;          // [KVH*D, E]
  Floats bq, bk, bv;  // [H*D], [KVH*D], [KVH*D]   Qwen2 only (empty otherwise)
  Floats q_norm;      // [D]                      Qwen3 only
  Floats k_norm;      // [D]                      Qwen3 only
  Floats wo;          // [E, H*D]
  Floats ffn_norm;    // [E]
  Floats w_gate;      // [F, E]
  Floats w_up;        // [F, E]
  Floats w_down;      // [E, F]
};

const float* or_null(const Floats& v) { return v.empty() ? nullptr : v.data(); }

TraceTensor view(const Floats& buffer, std::vector<int64_t> shape) {
  return TraceTensor{std::span<const float>(buffer.data(), buffer.size()), std::move(shape)};
}

class ReferenceBackend : public Backend {
 public:
  ReferenceBackend(const LoadedModel& model, const LoadProgress& on_progress);

  std::string name() const override { return "reference"; }
  std::string stored_weight_types() const override { return stored_weight_types_; }
  const ModelConfig& config() const override { return config_; }
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override;
  int64_t kv_block_size() const override { return block_size_; }
  int64_t kv_num_blocks() const override { return num_blocks_; }
  int64_t kv_block_bytes(int64_t block_size) const override {
    return 2 * L_ * block_size * KVH_ * D_ * int64_t(sizeof(float));
  }
  void copy_kv_block(int32_t src, int32_t dst) override;
  ForwardOutput forward(const ForwardBatch& batch, TraceSink* sink) override;

 private:
  // One tensor of the model as f32, after checking that its shape is the one the config implies.
  Floats load(const WeightStore& weights, WeightRole role, int layer = -1);

  ModelConfig config_;
  std::string stored_weight_types_;  // as the file stores them; this backend widens them to f32
  int64_t E_, F_, L_, H_, KVH_, D_, V_;  // hidden, FFN, layers, heads, KV heads, head_dim, vocabulary
  LoadProgress on_progress_;             // told the stored bytes widened so far, of all the model's
  int64_t widened_bytes_ = 0, stored_bytes_ = 0;

  Floats embed_tokens_;               // [V, E]
  std::vector<LayerWeights> layers_;  // [L]
  Floats final_norm_;                 // [E]
  Floats lm_head_;                    // [V, E] (a copy of embed_tokens_ when tied)

  int64_t num_blocks_ = 0, block_size_ = 0;
  std::vector<Floats> k_pool_, v_pool_;  // [L] of [num_blocks, block_size, KVH, D]
};

Floats ReferenceBackend::load(const WeightStore& weights, WeightRole role, int layer) {
  const WeightSpec spec = weight_spec(config_, role, layer);
  const TensorRef& t = weights.get(spec.name);
  if (t.shape != spec.shape)
    fail("tensor ", spec.name, " in ", t.source, ": expected shape ", shape_string(spec.shape),
         " (from the model config), found ", shape_string(t.shape));
  Floats values = t.to_f32();
  widened_bytes_ += int64_t(t.nbytes);
  if (on_progress_) on_progress_(widened_bytes_, stored_bytes_);
  return values;
}

ReferenceBackend::ReferenceBackend(const LoadedModel& model, const LoadProgress& on_progress)
    : config_(model.config), stored_weight_types_(weight_type_summary(model.weights)), on_progress_(on_progress) {
  stored_bytes_ = int64_t(model.weights.total_bytes());
  const ModelConfig& c = config_;
  D_ = validate_model_shape(c, model.path.empty() ? std::string("the model") : model.path.string());
  E_ = c.hidden_size, F_ = c.intermediate_size, L_ = c.num_layers, H_ = c.num_heads, KVH_ = c.num_kv_heads;
  V_ = c.vocab_size;
  config_.head_dim = D_;

  const WeightStore& w = model.weights;
  embed_tokens_ = load(w, WeightRole::token_embedding);
  layers_.resize(size_t(L_));
  for (int l = 0; l < int(L_); ++l) {
    LayerWeights& lw = layers_[size_t(l)];
    lw.attn_norm = load(w, WeightRole::attn_norm, l);
    lw.wq = load(w, WeightRole::q_proj, l);
    lw.wk = load(w, WeightRole::k_proj, l);
    lw.wv = load(w, WeightRole::v_proj, l);
    if (c.attention_bias) {
      lw.bq = load(w, WeightRole::q_bias, l);
      lw.bk = load(w, WeightRole::k_bias, l);
      lw.bv = load(w, WeightRole::v_bias, l);
    }
    if (c.qk_norm) {
      lw.q_norm = load(w, WeightRole::q_norm, l);
      lw.k_norm = load(w, WeightRole::k_norm, l);
    }
    lw.wo = load(w, WeightRole::o_proj, l);
    lw.ffn_norm = load(w, WeightRole::ffn_norm, l);
    lw.w_gate = load(w, WeightRole::gate_proj, l);
    lw.w_up = load(w, WeightRole::up_proj, l);
    lw.w_down = load(w, WeightRole::down_proj, l);
  }
  final_norm_ = load(w, WeightRole::final_norm);
  // tied embeddings: the LM head is the embedding matrix (logits = h embed_tokens^T)
  const bool tied = c.tie_word_embeddings && !w.has(weight_spec(c, WeightRole::lm_head).name);
  lm_head_ = tied ? embed_tokens_ : load(w, WeightRole::lm_head);
  on_progress_ = nullptr;  // it may refer to the caller's stack; loading is over
}

void ReferenceBackend::allocate_kv_cache(int64_t num_blocks, int64_t block_size) {
  if (num_blocks <= 0 || block_size <= 0)
    fail("KV cache: num_blocks (", num_blocks, ") and block_size (", block_size, ") must be positive");
  num_blocks_ = num_blocks, block_size_ = block_size;
  const size_t floats = size_t(num_blocks * block_size * KVH_ * D_);
  k_pool_.assign(size_t(L_), Floats(floats, 0.0f));
  v_pool_.assign(size_t(L_), Floats(floats, 0.0f));
}

void ReferenceBackend::copy_kv_block(int32_t src, int32_t dst) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_)
    fail("copy_kv_block(", src, ", ", dst, "): block ids must lie in [0, ", num_blocks_, ")");
  const int64_t block = block_size_ * KVH_ * D_;  // floats per block
  for (int64_t l = 0; l < L_; ++l) {
    std::memcpy(k_pool_[l].data() + dst * block, k_pool_[l].data() + src * block, sizeof(float) * block);
    std::memcpy(v_pool_[l].data() + dst * block, v_pool_[l].data() + src * block, sizeof(float) * block);
  }
}

ForwardOutput ReferenceBackend::forward(const ForwardBatch& batch, TraceSink* sink) {
  validate_forward_batch(batch, config_, num_blocks_, block_size_);
  const ModelConfig& c = config_;
  const int64_t E = E_, F = F_, H = H_, KVH = KVH_, D = D_, V = V_;
  const float eps = float(c.rms_norm_eps);
  const bool one_sequence = batch.sequences.size() == 1;

  // the step's tokens, sequences stacked: sequence i owns rows [first_row[i], first_row[i + 1])
  std::vector<int64_t> first_row = {0};  // [S + 1]
  std::vector<int32_t> tokens;           // [N]
  std::vector<int64_t> positions;        // [N] the position of each row in its sequence
  for (const SequenceInput& s : batch.sequences) {
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      tokens.push_back(s.tokens[t]);
      positions.push_back(s.start_position + int64_t(t));
    }
    first_row.push_back(int64_t(tokens.size()));
  }
  const int64_t N = int64_t(tokens.size());
  if (sink && sink->wants(Stage::token_ids, -1)) sink->record_ints(Stage::token_ids, -1, tokens, {N});
  if (one_sequence && sink && sink->wants(Stage::kv_blocks, -1)) {
    const std::vector<int32_t>& table = batch.sequences[0].block_table;
    sink->record_ints(Stage::kv_blocks, -1, table, {int64_t(table.size())});
  }

  Floats x(size_t(N * E));            // [N, E] the residual stream
  Floats xn(size_t(N * E));           // [N, E] the normalized input of a sublayer
  Floats q(size_t(N * H * D));        // [N, H, D]
  Floats k(size_t(N * KVH * D));      // [N, KVH, D]
  Floats v(size_t(N * KVH * D));      // [N, KVH, D]
  Floats context(size_t(N * H * D));  // [N, H*D] attention output, heads side by side
  Floats attn_out(size_t(N * E));     // [N, E]
  Floats gate(size_t(N * F));         // [N, F]
  Floats up(size_t(N * F));           // [N, F]
  Floats act(size_t(N * F));          // [N, F]
  Floats ffn_out(size_t(N * E));      // [N, E]
  Floats scores, weights;             // [H, T, P] of one sequence, only when traced

  // token embedding: row tokens[t] of the embedding matrix
  reference::embedding_gather(x.data(), embed_tokens_.data(), tokens.data(), N, E);
  JOURNEY_TRACE(sink, Stage::embeddings, -1, view(x, {N, E}));

  for (int64_t l = 0; l < L_; ++l) {
    const LayerWeights& lw = layers_[size_t(l)];
    const int il = int(l);

    // attention: RMSNorm of the residual stream
    reference::rms_norm(xn.data(), x.data(), lw.attn_norm.data(), N, E, eps);
    JOURNEY_TRACE(sink, Stage::attn_norm, il, view(xn, {N, E}));

    // q, k, v projections (Qwen2 adds biases)
    reference::linear(q.data(), xn.data(), lw.wq.data(), or_null(lw.bq), N, E, H * D);
    reference::linear(k.data(), xn.data(), lw.wk.data(), or_null(lw.bk), N, E, KVH * D);
    reference::linear(v.data(), xn.data(), lw.wv.data(), or_null(lw.bv), N, E, KVH * D);
    JOURNEY_TRACE(sink, Stage::q, il, view(q, {N, H, D}));
    JOURNEY_TRACE(sink, Stage::k, il, view(k, {N, KVH, D}));
    JOURNEY_TRACE(sink, Stage::v, il, view(v, {N, KVH, D}));

    // Qwen3: RMSNorm over each head of q and k, before RoPE
    if (c.qk_norm) {
      reference::rms_norm(q.data(), q.data(), lw.q_norm.data(), N * H, D, eps);
      reference::rms_norm(k.data(), k.data(), lw.k_norm.data(), N * KVH, D, eps);
      JOURNEY_TRACE(sink, Stage::q_norm, il, view(q, {N, H, D}));
      JOURNEY_TRACE(sink, Stage::k_norm, il, view(k, {N, KVH, D}));
    }

    // rotary position embedding of q and k
    reference::rope(q.data(), positions.data(), N, H, D, c.rope_theta, c.rope_layout);
    reference::rope(k.data(), positions.data(), N, KVH, D, c.rope_theta, c.rope_layout);
    JOURNEY_TRACE(sink, Stage::q_rope, il, view(q, {N, H, D}));
    JOURNEY_TRACE(sink, Stage::k_rope, il, view(k, {N, KVH, D}));

    // per sequence: store its k, v in the pool, then attend over its positions [0, start + T)
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const SequenceInput& s = batch.sequences[i];
      const int64_t r0 = first_row[i], T = first_row[i + 1] - r0, start = s.start_position, P = start + T;
      reference::kv_cache_write(k_pool_[l].data(), v_pool_[l].data(), k.data() + r0 * KVH * D,
                                v.data() + r0 * KVH * D, s.block_table.data(), T, start, block_size_, KVH, D);
      const bool trace_scores = one_sequence && sink && sink->wants(Stage::attn_scores, il);
      const bool trace_weights = one_sequence && sink && sink->wants(Stage::attn_weights, il);
      if (trace_scores) scores.assign(size_t(H * T * P), 0.0f);
      if (trace_weights) weights.assign(size_t(H * T * P), 0.0f);
      reference::paged_attention(context.data() + r0 * H * D, q.data() + r0 * H * D, k_pool_[l].data(),
                                 v_pool_[l].data(), s.block_table.data(), T, start, block_size_, H, KVH, D,
                                 trace_scores ? scores.data() : nullptr, trace_weights ? weights.data() : nullptr);
      if (trace_scores) sink->record(Stage::attn_scores, il, view(scores, {H, T, P}));
      if (trace_weights) sink->record(Stage::attn_weights, il, view(weights, {H, T, P}));
    }
    JOURNEY_TRACE(sink, Stage::attn_context, il, view(context, {N, H * D}));

    // output projection, then the residual connection
    reference::linear(attn_out.data(), context.data(), lw.wo.data(), nullptr, N, H * D, E);
    JOURNEY_TRACE(sink, Stage::attn_out, il, view(attn_out, {N, E}));
    reference::residual_add(x.data(), x.data(), attn_out.data(), N * E);
    JOURNEY_TRACE(sink, Stage::resid_attn, il, view(x, {N, E}));

    // FFN: RMSNorm of the residual stream
    reference::rms_norm(xn.data(), x.data(), lw.ffn_norm.data(), N, E, eps);
    JOURNEY_TRACE(sink, Stage::ffn_norm, il, view(xn, {N, E}));

    // gate and up projections, SwiGLU, down projection
    reference::linear(gate.data(), xn.data(), lw.w_gate.data(), nullptr, N, E, F);
    reference::linear(up.data(), xn.data(), lw.w_up.data(), nullptr, N, E, F);
    JOURNEY_TRACE(sink, Stage::gate, il, view(gate, {N, F}));
    JOURNEY_TRACE(sink, Stage::up, il, view(up, {N, F}));
    reference::swiglu(act.data(), gate.data(), up.data(), N * F);
    JOURNEY_TRACE(sink, Stage::act, il, view(act, {N, F}));
    reference::linear(ffn_out.data(), act.data(), lw.w_down.data(), nullptr, N, F, E);
    JOURNEY_TRACE(sink, Stage::ffn_out, il, view(ffn_out, {N, E}));

    // the residual connection
    reference::residual_add(x.data(), x.data(), ffn_out.data(), N * E);
    JOURNEY_TRACE(sink, Stage::layer_out, il, view(x, {N, E}));
  }

  // final RMSNorm
  reference::rms_norm(xn.data(), x.data(), final_norm_.data(), N, E, eps);
  JOURNEY_TRACE(sink, Stage::final_norm, -1, view(xn, {N, E}));

  // the rows that get logits: each sequence's last, or all of its rows when it asks (all_logits)
  ForwardOutput out;
  out.vocab_size = V;
  out.row_begin = {0};
  std::vector<int32_t> logit_rows;  // [R] row numbers in xn
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const int64_t begin = batch.sequences[i].all_logits ? first_row[i] : first_row[i + 1] - 1;
    for (int64_t r = begin; r < first_row[i + 1]; ++r) logit_rows.push_back(int32_t(r));
    out.row_begin.push_back(int64_t(logit_rows.size()));
  }
  const int64_t R = int64_t(logit_rows.size());
  Floats head_in(size_t(R * E));  // [R, E]
  reference::embedding_gather(head_in.data(), xn.data(), logit_rows.data(), R, E);

  // LM head: logits = h W_vocab^T
  out.logits.resize(size_t(R * V));  // [R, V]
  reference::linear(out.logits.data(), head_in.data(), lm_head_.data(), nullptr, R, E, V);
  JOURNEY_TRACE(sink, Stage::logits, -1, view(out.logits, {R, V}));
  return out;
}

}  // namespace

std::unique_ptr<Backend> make_reference_backend(const LoadedModel& model, const LoadProgress& on_progress) {
  return std::make_unique<ReferenceBackend>(model, on_progress);
}

}  // namespace journey
