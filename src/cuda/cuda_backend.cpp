// CudaBackend: reference/cpu_backend.cpp moved onto the GPU. The forward pass below is the CPU one
// line for line (same steps, same stage names at the same points), with each ops:: call replaced
// by the cuda:: launcher of the same name. Two things are new:
//  - tracing copies a tensor device -> host only when the sink wants that stage (wants() first);
//  - the fast path fuses "residual add + next RMSNorm" into one kernel, but whenever a trace asks
//    for either stage of a fused pair, the unfused kernels run, so the trace shows real tensors.
//
// Plain C++20 compiled by the host compiler: all CUDA code lives in kernels.cu.
#include "cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "cuda/kernels.h"
#include "trace/sink.h"

namespace journey {

namespace {

using cuda::check_cuda;
#define CUDA_CHECK(call) JOURNEY_CUDA_CHECK(call)

// Device memory that frees itself; grow() keeps the allocation when it is already big enough.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { grow(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = nullptr, other.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      ptr_ = other.ptr_, bytes_ = other.bytes_;
      other.ptr_ = nullptr, other.bytes_ = 0;
    }
    return *this;
  }
  void grow(size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    const cudaError_t status = cudaMalloc(&ptr_, bytes);
    if (status != cudaSuccess) {
      ptr_ = nullptr;
      fail("CUDA: cannot allocate ", bytes, " bytes of device memory: ", cudaGetErrorString(status));
    }
    bytes_ = bytes;
  }
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr, bytes_ = 0;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  float* f() const { return static_cast<float*>(ptr_); }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A weight matrix on the device, in the backend's weight type.
struct DeviceMatrix {
  DeviceBuffer data;
  DType type = DType::F32;
  const void* ptr() const { return data.get(); }
};

struct LayerWeights {
  DeviceBuffer attn_norm;             // [E] f32
  DeviceMatrix wq, wk, wv;            // [H*D, E], [KVH*D, E], [KVH*D, E]
  DeviceBuffer bq, bk, bv;            // [H*D], [KVH*D], [KVH*D] f32 (Qwen2; empty otherwise)
  DeviceBuffer q_norm, k_norm;        // [D] f32 (Qwen3; empty otherwise)
  DeviceMatrix wo;                    // [E, H*D]
  DeviceBuffer ffn_norm;              // [E] f32
  DeviceMatrix w_gate, w_up, w_down;  // [F, E], [F, E], [E, F]
};

std::string show_shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const TensorRef& checked_tensor(const WeightStore& weights, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorRef& t = weights.get(name);
  if (t.shape != shape)
    fail("tensor ", name, " in ", t.source, ": expected shape ", show_shape(shape), " (from the model config), found ",
         show_shape(t.shape));
  if (!dtype_is_float(t.dtype) && t.dtype != DType::Q8_0 && t.dtype != DType::Q4_0)
    fail("tensor ", name, " in ", t.source, ": expected a float or quantized weight type, found ", dtype_name(t.dtype));
  return t;
}

// f32 vectors (norm weights, biases) go up as f32.
DeviceBuffer upload_f32(const WeightStore& weights, const std::string& name, const std::vector<int64_t>& shape) {
  const std::vector<float> values = checked_tensor(weights, name, shape).to_f32();
  DeviceBuffer buffer(values.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(buffer.get(), values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
  return buffer;
}

// Matrices go up in the backend's weight type: copied as they are when the file already holds that
// type, otherwise widened to f32 and rounded to nearest even on the host.
DeviceMatrix upload_matrix(const WeightStore& weights, const std::string& name, const std::vector<int64_t>& shape,
                           DType type) {
  const TensorRef& t = checked_tensor(weights, name, shape);
  DeviceMatrix m;
  m.type = type;
  const size_t n = size_t(t.numel());
  const size_t element = type == DType::F32 ? 4 : 2;
  m.data.grow(n * element);
  if (t.dtype == type) {
    CUDA_CHECK(cudaMemcpy(m.data.get(), t.data, n * element, cudaMemcpyHostToDevice));
    return m;
  }
  const std::vector<float> values = t.to_f32();
  if (type == DType::F32) {
    CUDA_CHECK(cudaMemcpy(m.data.get(), values.data(), n * 4, cudaMemcpyHostToDevice));
  } else {
    std::vector<uint16_t> narrow(n);
    for (size_t i = 0; i < n; ++i) narrow[i] = type == DType::BF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
    CUDA_CHECK(cudaMemcpy(m.data.get(), narrow.data(), n * 2, cudaMemcpyHostToDevice));
  }
  return m;
}

template <typename T>
void upload(DeviceBuffer& buffer, const std::vector<T>& values, cudaStream_t stream) {
  buffer.grow(std::max<size_t>(1, values.size()) * sizeof(T));
  if (!values.empty())
    CUDA_CHECK(cudaMemcpyAsync(buffer.get(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
}

}  // namespace

int cuda_device_count() { return cuda::device_count(); }

class CudaBackendImpl : public CudaBackend {
 public:
  CudaBackendImpl(const LoadedModel& model, const CudaOptions& options);
  ~CudaBackendImpl() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return config_; }
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size) override;
  int64_t kv_block_size() const override { return block_size_; }
  int64_t kv_num_blocks() const override { return num_blocks_; }
  int64_t kv_block_bytes(int64_t block_size) const override {
    return 2 * L_ * block_size * KVH_ * D_ * int64_t(sizeof(float));
  }
  void copy_kv_block(int32_t src, int32_t dst) override;
  ForwardOutput forward(const ForwardBatch& batch, TraceSink* sink) override;
  bool samples_on_device() const override { return true; }
  std::vector<int32_t> forward_sample(const ForwardBatch& batch, std::span<const DeviceSampling> params,
                                      TraceSink* sink) override;
  DType weight_dtype() const override { return options_.dtype; }
  std::string device_name() const override { return device_name_; }

 private:
  void check_batch(const ForwardBatch& batch) const;
  // Runs the forward pass and leaves the logits [R, V] in logits_; returns row_begin (see ForwardOutput).
  std::vector<int64_t> forward_device(const ForwardBatch& batch, TraceSink* sink);
  void linear(float* y, const float* x, const DeviceMatrix& w, const DeviceBuffer* bias, int64_t T, int64_t in,
              int64_t out);
  // Copies a device tensor to the host and records it, only when the sink wants the stage.
  void trace(TraceSink* sink, Stage stage, int layer, const float* device, std::vector<int64_t> shape);
  static bool wants(TraceSink* sink, Stage stage, int layer) { return sink != nullptr && sink->wants(stage, layer); }

  ModelConfig config_;
  CudaOptions options_;
  std::string device_name_;
  int64_t E_, F_, L_, H_, KVH_, D_, V_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;

  DeviceMatrix embed_tokens_;           // [V, E]
  std::vector<LayerWeights> layers_;    // [L]
  DeviceBuffer final_norm_;             // [E] f32
  DeviceMatrix lm_head_own_;            // [V, E] (empty when tied)
  const DeviceMatrix* lm_head_ = nullptr;

  int64_t num_blocks_ = 0, block_size_ = 0;
  std::vector<DeviceBuffer> k_pool_, v_pool_;  // [L] of [num_blocks, block_size, KVH, D] f32

  // Per-step buffers, grown to the largest step seen.
  DeviceBuffer tokens_, positions_, q_positions_, block_tables_, logit_rows_;  // i32 / i64 inputs
  DeviceBuffer x_, xn_, q_, k_, v_, context_, attn_out_, gate_, up_, act_, ffn_out_;  // f32 activations
  DeviceBuffer head_in_, logits_, probs_, scores_, weights_, scratch_;
  DeviceBuffer sampling_params_, sampled_;
};

CudaBackendImpl::CudaBackendImpl(const LoadedModel& model, const CudaOptions& options)
    : config_(model.config), options_(options) {
  const ModelConfig& c = config_;
  const std::string where = model.path.empty() ? std::string("the model") : model.path.string();
  const int devices = cuda::device_count();
  if (devices == 0) fail("no CUDA device visible (cudaGetDeviceCount found none)");
  if (options.device < 0 || options.device >= devices)
    fail("CUDA device ", options.device, " requested, but only ", devices, " visible");
  if (options.dtype != DType::BF16 && options.dtype != DType::F16 && options.dtype != DType::F32)
    fail("CUDA backend: weight type must be bf16, f16 or f32, found ", dtype_name(options.dtype));
  if (options.gemv_version < 1 || options.gemv_version > 3)
    fail("CUDA backend: gemv_version must be 1, 2 or 3, found ", options.gemv_version);
  D_ = validate_model_shape(c, where);
  E_ = c.hidden_size, F_ = c.intermediate_size, L_ = c.num_layers, H_ = c.num_heads, KVH_ = c.num_kv_heads;
  V_ = c.vocab_size;
  config_.head_dim = D_;

  CUDA_CHECK(cudaSetDevice(options.device));
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, options.device));
  device_name_ = props.name;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  JOURNEY_CUBLAS_CHECK(cublasCreate(&cublas_));
  JOURNEY_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));

  const WeightStore& w = model.weights;
  const DType type = options.dtype;
  embed_tokens_ = upload_matrix(w, "model.embed_tokens.weight", {V_, E_}, type);
  layers_.resize(size_t(L_));
  for (int64_t i = 0; i < L_; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& lw = layers_[size_t(i)];
    lw.attn_norm = upload_f32(w, p + "input_layernorm.weight", {E_});
    lw.wq = upload_matrix(w, p + "self_attn.q_proj.weight", {H_ * D_, E_}, type);
    lw.wk = upload_matrix(w, p + "self_attn.k_proj.weight", {KVH_ * D_, E_}, type);
    lw.wv = upload_matrix(w, p + "self_attn.v_proj.weight", {KVH_ * D_, E_}, type);
    if (c.attention_bias) {
      lw.bq = upload_f32(w, p + "self_attn.q_proj.bias", {H_ * D_});
      lw.bk = upload_f32(w, p + "self_attn.k_proj.bias", {KVH_ * D_});
      lw.bv = upload_f32(w, p + "self_attn.v_proj.bias", {KVH_ * D_});
    }
    if (c.qk_norm) {
      lw.q_norm = upload_f32(w, p + "self_attn.q_norm.weight", {D_});
      lw.k_norm = upload_f32(w, p + "self_attn.k_norm.weight", {D_});
    }
    lw.wo = upload_matrix(w, p + "self_attn.o_proj.weight", {E_, H_ * D_}, type);
    lw.ffn_norm = upload_f32(w, p + "post_attention_layernorm.weight", {E_});
    lw.w_gate = upload_matrix(w, p + "mlp.gate_proj.weight", {F_, E_}, type);
    lw.w_up = upload_matrix(w, p + "mlp.up_proj.weight", {F_, E_}, type);
    lw.w_down = upload_matrix(w, p + "mlp.down_proj.weight", {E_, F_}, type);
  }
  final_norm_ = upload_f32(w, "model.norm.weight", {E_});
  if (c.tie_word_embeddings && !w.has("lm_head.weight")) {
    lm_head_ = &embed_tokens_;  // tied: logits = h embed_tokens^T
  } else {
    lm_head_own_ = upload_matrix(w, "lm_head.weight", {V_, E_}, type);
    lm_head_ = &lm_head_own_;
  }
}

CudaBackendImpl::~CudaBackendImpl() {
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackendImpl::allocate_kv_cache(int64_t num_blocks, int64_t block_size) {
  if (num_blocks <= 0 || block_size <= 0)
    fail("KV cache: num_blocks (", num_blocks, ") and block_size (", block_size, ") must be positive");
  k_pool_.clear(), v_pool_.clear();  // free the old pool before allocating the new one
  num_blocks_ = num_blocks, block_size_ = block_size;
  const size_t bytes = size_t(num_blocks * block_size * KVH_ * D_) * sizeof(float);
  for (int64_t l = 0; l < L_; ++l) {
    k_pool_.emplace_back(bytes);
    v_pool_.emplace_back(bytes);
    CUDA_CHECK(cudaMemsetAsync(k_pool_.back().get(), 0, bytes, stream_));
    CUDA_CHECK(cudaMemsetAsync(v_pool_.back().get(), 0, bytes, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackendImpl::copy_kv_block(int32_t src, int32_t dst) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_)
    fail("copy_kv_block(", src, ", ", dst, "): block ids must lie in [0, ", num_blocks_, ")");
  const size_t block_bytes = size_t(block_size_ * KVH_ * D_) * sizeof(float);
  for (int64_t l = 0; l < L_; ++l) {
    CUDA_CHECK(cudaMemcpyAsync(k_pool_[l].get<char>() + dst * block_bytes, k_pool_[l].get<char>() + src * block_bytes,
                               block_bytes, cudaMemcpyDeviceToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(v_pool_[l].get<char>() + dst * block_bytes, v_pool_[l].get<char>() + src * block_bytes,
                               block_bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackendImpl::check_batch(const ForwardBatch& batch) const {
  validate_forward_batch(batch, config_, num_blocks_, block_size_);
}

void CudaBackendImpl::linear(float* y, const float* x, const DeviceMatrix& w, const DeviceBuffer* bias, int64_t T,
                             int64_t in, int64_t out) {
  cuda::LinearContext context;
  context.stream = stream_;
  context.cublas = cublas_;
  context.scratch = scratch_.get();
  context.scratch_bytes = scratch_.bytes();
  context.gemv = cuda::GemvVersion(options_.gemv_version);
  cuda::linear(y, x, w.ptr(), w.type, bias && !bias->empty() ? bias->f() : nullptr, T, in, out, context);
}

void CudaBackendImpl::trace(TraceSink* sink, Stage stage, int layer, const float* device, std::vector<int64_t> shape) {
  if (!wants(sink, stage, layer)) return;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> host(static_cast<size_t>(n));  // [shape...]
  CUDA_CHECK(cudaMemcpyAsync(host.data(), device, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  sink->record(stage, layer, TraceTensor{std::span<const float>(host.data(), host.size()), std::move(shape)});
}

std::vector<int64_t> CudaBackendImpl::forward_device(const ForwardBatch& batch, TraceSink* sink) {
  check_batch(batch);
  const ModelConfig& c = config_;
  const float eps = float(c.rms_norm_eps);
  const bool single = batch.sequences.size() == 1;
  const int64_t E = E_, F = F_, H = H_, KVH = KVH_, D = D_, V = V_;
  cudaStream_t s = stream_;

  // The step's tokens, sequences concatenated (as the CPU backend), and their block tables.
  std::vector<int64_t> first_row{0};     // [S + 1]
  std::vector<int32_t> tokens;           // [N]
  std::vector<int64_t> positions;        // [N]
  std::vector<int32_t> tables;           // [sum of table sizes] block tables, concatenated
  std::vector<int64_t> table_offset;     // [S] where each sequence's table starts in `tables`
  for (const SequenceInput& seq : batch.sequences) {
    for (size_t t = 0; t < seq.tokens.size(); ++t) {
      tokens.push_back(seq.tokens[t]);
      positions.push_back(seq.start_position + int64_t(t));
    }
    first_row.push_back(int64_t(tokens.size()));
    table_offset.push_back(int64_t(tables.size()));
    tables.insert(tables.end(), seq.block_table.begin(), seq.block_table.end());
  }
  const int64_t N = int64_t(tokens.size());

  if (sink && sink->wants(Stage::token_ids, -1)) sink->record_ints(Stage::token_ids, -1, tokens, {N});
  if (single && sink && sink->wants(Stage::kv_blocks, -1)) {
    const auto& table = batch.sequences[0].block_table;
    sink->record_ints(Stage::kv_blocks, -1, table, {int64_t(table.size())});
  }

  // Logit rows: the last of each sequence unless all_logits.
  std::vector<int64_t> row_begin{0};
  std::vector<int32_t> logit_rows;  // [R]
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const int64_t begin = batch.sequences[i].all_logits ? first_row[i] : first_row[i + 1] - 1;
    for (int64_t r = begin; r < first_row[i + 1]; ++r) logit_rows.push_back(int32_t(r));
    row_begin.push_back(int64_t(logit_rows.size()));
  }
  const int64_t R = int64_t(logit_rows.size());

  upload(tokens_, tokens, s);
  upload(positions_, positions, s);
  upload(block_tables_, tables, s);
  upload(logit_rows_, logit_rows, s);
  const int32_t* d_tokens = tokens_.get<int32_t>();
  const int64_t* d_positions = positions_.get<int64_t>();

  const size_t f = sizeof(float);
  x_.grow(size_t(N * E) * f);               // [N, E] the residual stream
  xn_.grow(size_t(N * E) * f);              // [N, E]
  q_.grow(size_t(N * H * D) * f);           // [N, H, D]
  k_.grow(size_t(N * KVH * D) * f);         // [N, KVH, D]
  v_.grow(size_t(N * KVH * D) * f);         // [N, KVH, D]
  context_.grow(size_t(N * H * D) * f);     // [N, H*D]
  attn_out_.grow(size_t(N * E) * f);        // [N, E]
  gate_.grow(size_t(N * F) * f);            // [N, F]
  up_.grow(size_t(N * F) * f);              // [N, F]
  act_.grow(size_t(N * F) * f);             // [N, F]
  ffn_out_.grow(size_t(N * E) * f);         // [N, E]
  head_in_.grow(size_t(R * E) * f);         // [R, E]
  logits_.grow(size_t(R * V) * f);          // [R, V]
  // activations narrowed to bf16/f16 for cuBLAS: the widest matrix input is [N, max(E, F, H*D)]
  scratch_.grow(size_t(std::max(N, R) * std::max({E, F, H * D})) * 2);

  float *x = x_.f(), *xn = xn_.f(), *q = q_.f(), *k = k_.f(), *v = v_.f(), *context = context_.f();
  float *attn_out = attn_out_.f(), *gate = gate_.f(), *up = up_.f(), *act = act_.f(), *ffn_out = ffn_out_.f();

  const int64_t* d_q_positions = d_positions;
  // (the CPU backend's planted-bug offset is a CPU-only test hook; the CUDA path has none)

  // embedding
  cuda::embedding_gather(x, embed_tokens_.ptr(), embed_tokens_.type, d_tokens, N, E, s);
  trace(sink, Stage::embeddings, -1, x, {N, E});

  // Fusion: residual add + the RMSNorm after it run as one kernel unless a trace wants either.
  auto fused = [&](Stage add_stage, int add_layer, Stage norm_stage, int norm_layer) {
    return options_.fuse && !wants(sink, add_stage, add_layer) && !wants(sink, norm_stage, norm_layer);
  };
  bool attn_norm_done = false;  // layer l's attn_norm already computed by the previous layer's fused kernel

  for (int64_t l = 0; l < L_; ++l) {
    const LayerWeights& lw = layers_[size_t(l)];
    const int il = int(l);

    if (!attn_norm_done) cuda::rms_norm(xn, x, lw.attn_norm.f(), N, E, eps, s);
    trace(sink, Stage::attn_norm, il, xn, {N, E});

    linear(q, xn, lw.wq, &lw.bq, N, E, H * D);
    linear(k, xn, lw.wk, &lw.bk, N, E, KVH * D);
    linear(v, xn, lw.wv, &lw.bv, N, E, KVH * D);
    trace(sink, Stage::q, il, q, {N, H, D});
    trace(sink, Stage::k, il, k, {N, KVH, D});
    trace(sink, Stage::v, il, v, {N, KVH, D});

    if (c.qk_norm) {
      cuda::rms_norm(q, q, lw.q_norm.f(), N * H, D, eps, s);
      cuda::rms_norm(k, k, lw.k_norm.f(), N * KVH, D, eps, s);
      trace(sink, Stage::q_norm, il, q, {N, H, D});
      trace(sink, Stage::k_norm, il, k, {N, KVH, D});
    }

    cuda::rope(q, d_q_positions, N, H, D, c.rope_theta, c.rope_layout, s);
    cuda::rope(k, d_positions, N, KVH, D, c.rope_theta, c.rope_layout, s);
    trace(sink, Stage::q_rope, il, q, {N, H, D});
    trace(sink, Stage::k_rope, il, k, {N, KVH, D});

    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const SequenceInput& seq = batch.sequences[i];
      const int64_t r0 = first_row[i], T = first_row[i + 1] - r0, start = seq.start_position, P = start + T;
      const int32_t* d_table = block_tables_.get<int32_t>() + table_offset[i];
      cuda::kv_cache_write(k_pool_[l].f(), v_pool_[l].f(), k + r0 * KVH * D, v + r0 * KVH * D, d_table, T, start,
                           block_size_, KVH, D, s);
      const bool trace_scores = single && wants(sink, Stage::attn_scores, il);
      const bool trace_weights = single && wants(sink, Stage::attn_weights, il);
      if (trace_scores) scores_.grow(size_t(H * T * P) * f);
      if (trace_weights) weights_.grow(size_t(H * T * P) * f);
      cuda::paged_attention(context + r0 * H * D, q + r0 * H * D, k_pool_[l].f(), v_pool_[l].f(), d_table, T, start,
                            block_size_, H, KVH, D, trace_scores ? scores_.f() : nullptr,
                            trace_weights ? weights_.f() : nullptr, s);
      if (trace_scores) trace(sink, Stage::attn_scores, il, scores_.f(), {H, T, P});
      if (trace_weights) trace(sink, Stage::attn_weights, il, weights_.f(), {H, T, P});
    }
    trace(sink, Stage::attn_context, il, context, {N, H * D});

    linear(attn_out, context, lw.wo, nullptr, N, H * D, E);
    trace(sink, Stage::attn_out, il, attn_out, {N, E});
    if (fused(Stage::resid_attn, il, Stage::ffn_norm, il)) {
      cuda::residual_add_rms_norm(x, xn, attn_out, lw.ffn_norm.f(), N, E, eps, s);
    } else {
      cuda::residual_add(x, x, attn_out, N * E, s);
      trace(sink, Stage::resid_attn, il, x, {N, E});
      cuda::rms_norm(xn, x, lw.ffn_norm.f(), N, E, eps, s);
      trace(sink, Stage::ffn_norm, il, xn, {N, E});
    }

    linear(gate, xn, lw.w_gate, nullptr, N, E, F);
    linear(up, xn, lw.w_up, nullptr, N, E, F);
    trace(sink, Stage::gate, il, gate, {N, F});
    trace(sink, Stage::up, il, up, {N, F});
    cuda::swiglu(act, gate, up, N * F, s);
    trace(sink, Stage::act, il, act, {N, F});
    linear(ffn_out, act, lw.w_down, nullptr, N, F, E);
    trace(sink, Stage::ffn_out, il, ffn_out, {N, E});

    // residual, fused with the next RMSNorm (the next layer's attn_norm, or the final norm)
    const bool last_layer = l + 1 == L_;
    const Stage next_stage = last_layer ? Stage::final_norm : Stage::attn_norm;
    const int next_layer = last_layer ? -1 : il + 1;
    const float* next_norm = last_layer ? final_norm_.f() : layers_[size_t(l + 1)].attn_norm.f();
    if (fused(Stage::layer_out, il, next_stage, next_layer)) {
      cuda::residual_add_rms_norm(x, xn, ffn_out, next_norm, N, E, eps, s);
      attn_norm_done = true;
    } else {
      cuda::residual_add(x, x, ffn_out, N * E, s);
      trace(sink, Stage::layer_out, il, x, {N, E});
      attn_norm_done = false;
    }
  }

  if (!attn_norm_done) cuda::rms_norm(xn, x, final_norm_.f(), N, E, eps, s);
  trace(sink, Stage::final_norm, -1, xn, {N, E});

  // LM head over the rows that get logits (a row gather is an embedding lookup in an f32 table)
  cuda::embedding_gather(head_in_.f(), xn, DType::F32, logit_rows_.get<int32_t>(), R, E, s);
  linear(logits_.f(), head_in_.f(), *lm_head_, nullptr, R, E, V);
  trace(sink, Stage::logits, -1, logits_.f(), {R, V});
  return row_begin;
}

ForwardOutput CudaBackendImpl::forward(const ForwardBatch& batch, TraceSink* sink) {
  ForwardOutput out;
  out.row_begin = forward_device(batch, sink);
  out.vocab_size = V_;
  const int64_t R = out.row_begin.back();
  out.logits.resize(size_t(R * V_));  // [R, V]
  CUDA_CHECK(cudaMemcpyAsync(out.logits.data(), logits_.get(), out.logits.size() * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

std::vector<int32_t> CudaBackendImpl::forward_sample(const ForwardBatch& batch,
                                                     std::span<const DeviceSampling> params, TraceSink* sink) {
  if (params.size() != batch.sequences.size())
    fail("forward_sample: ", params.size(), " sampling parameter sets for ", batch.sequences.size(), " sequences");
  for (const DeviceSampling& p : params)
    if (p.temperature < 0 || p.top_k < 0 || !(p.top_p > 0 && p.top_p <= 1) || !(p.u >= 0 && p.u < 1))
      fail("forward_sample: need temperature >= 0, top_k >= 0, top_p in (0, 1], u in [0, 1); found temperature ",
           p.temperature, ", top_k ", p.top_k, ", top_p ", p.top_p, ", u ", p.u);
  const std::vector<int64_t> row_begin = forward_device(batch, sink);
  const int64_t S = int64_t(batch.sequences.size());
  // The logits of each sequence's last row: gather them when some sequence asked for all rows.
  const float* last_rows = logits_.f();
  if (row_begin.back() != S) {
    std::vector<int32_t> rows;  // [S]
    for (int64_t i = 0; i < S; ++i) rows.push_back(int32_t(row_begin[i + 1] - 1));
    DeviceBuffer d_rows;
    upload(d_rows, rows, stream_);
    head_in_.grow(size_t(S * V_) * sizeof(float));
    cuda::embedding_gather(head_in_.f(), logits_.f(), DType::F32, d_rows.get<int32_t>(), S, V_, stream_);
    last_rows = head_in_.f();
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // d_rows is freed at the end of this scope
  }
  std::vector<DeviceSampling> host_params(params.begin(), params.end());
  upload(sampling_params_, host_params, stream_);
  sampled_.grow(size_t(S) * sizeof(int32_t));
  probs_.grow(size_t(S * V_) * sizeof(float));
  cuda::sample_rows(sampled_.get<int32_t>(), last_rows, sampling_params_.get<DeviceSampling>(), probs_.f(), S,
                    V_, stream_);
  std::vector<int32_t> ids(static_cast<size_t>(S));  // [S]
  CUDA_CHECK(cudaMemcpyAsync(ids.data(), sampled_.get(), ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return ids;
}

std::unique_ptr<CudaBackend> make_cuda_backend(const LoadedModel& model, const CudaOptions& options) {
  return std::make_unique<CudaBackendImpl>(model, options);
}

}  // namespace journey
