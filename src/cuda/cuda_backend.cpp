// CudaBackend: the fast CPU backend's forward pass moved onto the GPU. forward_plain() below is the
// CPU one line for line (same steps, same stage names at the same points), with each CPU op
// replaced by the cuda:: launcher of the same name. What is new:
//  - tracing goes through JOURNEY_TRACE (trace/sink.h), whose last argument copies the tensor
//    device -> host, so the copy happens only when the sink wants the stage;
//  - "residual add + next RMSNorm" runs as one kernel, unless a trace asks for either stage;
//  - decode steps (every sequence feeds one token, no trace) run forward_decode(): batched decode
//    kernels reading positions and block tables from device memory, the fused GEMVs, and the
//    whole step captured in a CUDA graph per (batch size, block-table width) and replayed;
//  - the step's inputs go up in ONE copy from pinned memory, results come back in one copy, and
//    the host waits once per step; device buffers grow to the largest step and stay (no per-step
//    allocation), and any growth retires the graphs that captured the old addresses.
//
// Plain C++20 compiled by the host compiler: all CUDA code lives in kernels.cu.
#include "cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/shape.h"
#include "cuda/device_collectives.h"
#include "cuda/kernels.h"
#include "parallel/communicator.h"
#include "parallel/shard.h"
#include "trace/sink.h"

namespace journey {

namespace {

#define CUDA_CHECK(call) JOURNEY_CUDA_CHECK(call)

// Device memory that frees itself; grow() keeps the allocation when it is already big enough and
// says whether it moved (a moved buffer invalidates the graphs that captured its address).
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
  bool grow(size_t bytes) {
    if (bytes <= bytes_) return false;
    release();
    const cudaError_t status = cudaMalloc(&ptr_, bytes);
    if (status != cudaSuccess) {
      ptr_ = nullptr;
      fail("CUDA: cannot allocate ", bytes, " bytes of device memory: ", cudaGetErrorString(status));
    }
    bytes_ = bytes;
    return true;
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

// Page-locked host memory: copies from and to it are true DMA transfers that run asynchronously;
// from pageable memory the driver would first copy through a staging buffer of its own.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void grow(size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    bytes = std::max<size_t>(bytes, 4096);
    const cudaError_t status = cudaHostAlloc(&ptr_, bytes, cudaHostAllocDefault);
    if (status != cudaSuccess) {
      ptr_ = nullptr;
      fail("CUDA: cannot allocate ", bytes, " bytes of pinned host memory: ", cudaGetErrorString(status));
    }
    bytes_ = bytes;
  }
  void release() {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr, bytes_ = 0;
  }
  template <typename T>
  T* at(size_t offset) const { return reinterpret_cast<T*>(static_cast<char*>(ptr_) + offset); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A weight matrix on the device, in the backend's weight type.
struct DeviceMatrix {
  DeviceBuffer data;
  DType type = DType::F32;
  cuda::WeightView view() const { return {data.get(), type}; }
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

const float* or_null(const DeviceBuffer& b) { return b.empty() ? nullptr : b.f(); }

const TensorRef& checked_tensor(const WeightStore& weights, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorRef& t = weights.get(name);
  if (t.shape != shape)
    fail("tensor ", name, " in ", t.source, ": expected shape ", shape_string(shape), " (from the model config), found ",
         shape_string(t.shape));
  if (!dtype_is_weight(t.dtype))
    fail("tensor ", name, " in ", t.source, ": expected a float or quantized weight type, found ", dtype_name(t.dtype));
  return t;
}

bool kept_as_stored(DType type) {
  const std::vector<DType> kept = cuda_weight_types();
  return std::find(kept.begin(), kept.end(), type) != kept.end();
}

// f32 vectors (norm weights, biases) go up as f32: the whole tensor, or a shard's slice of it.
DeviceBuffer upload_f32(const TensorRef& t) {
  const std::vector<float> values = t.to_f32();
  DeviceBuffer buffer(values.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(buffer.get(), values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
  return buffer;
}

// Matrices go up in the backend's weight type: copied as they are when the file already holds that
// type, otherwise widened to f32 and rounded to nearest even on the host. Quantized matrices of a
// block type the kernels read (cuda_weight_types) are copied as stored, blocks and all, unless
// keep_quantized is off; other block types (q5_0, q2_K, ...) are dequantized and then rounded.
// `t`: the whole checked tensor, or a tensor-parallel shard's slice of it (parallel/shard.h).
DeviceMatrix upload_matrix(const TensorRef& t, DType type, bool keep_quantized) {
  const std::string& name = t.name;
  DeviceMatrix m;
  if (keep_quantized && dtype_is_quantized(t.dtype) && kept_as_stored(t.dtype)) {
    m.type = t.dtype;
    const size_t bytes = size_t(dtype_bytes_for(t.dtype, t.numel()));
    if (bytes != t.nbytes)
      fail("tensor ", name, " in ", t.source, ": ", t.nbytes, " bytes do not hold ", t.numel(), " weights of ",
           dtype_name(t.dtype), " (", bytes, " bytes)");
    m.data.grow(bytes);
    CUDA_CHECK(cudaMemcpy(m.data.get(), t.data, bytes, cudaMemcpyHostToDevice));
    return m;
  }
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

// Where each input of a step lies in the one block that goes host -> device.
struct StepLayout {
  size_t tokens = 0;      // [N] i32
  size_t positions = 0;   // [N] i64
  size_t tables = 0;      // plain: [sum of table sizes] i32; decode: [S, table_stride] i32
  size_t logit_rows = 0;  // plain: [R] i32
  size_t params = 0;      // decode with sampling: [S] DeviceSampling
  size_t bytes = 0;
};

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

StepLayout step_layout(int64_t N, int64_t table_entries, int64_t R, int64_t sampled_rows) {
  StepLayout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at = align16(at + bytes);
    return offset;
  };
  l.tokens = take(size_t(N) * sizeof(int32_t));
  l.positions = take(size_t(N) * sizeof(int64_t));
  l.tables = take(size_t(table_entries) * sizeof(int32_t));
  l.logit_rows = take(size_t(R) * sizeof(int32_t));
  l.params = take(size_t(sampled_rows) * sizeof(DeviceSampling));
  l.bytes = std::max<size_t>(at, 16);
  return l;
}

}  // namespace

int cuda_device_count() { return cuda::device_count(); }

std::vector<DType> cuda_weight_types() {
  return {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K};
}

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
  // (under tensor parallelism each rank holds a slice of the vocabulary: rank 0 samples on the host
  // from the gathered logits)
  bool samples_on_device() const override { return collectives_ == nullptr; }
  std::vector<int32_t> forward_sample(const ForwardBatch& batch, std::span<const DeviceSampling> params,
                                      TraceSink* sink) override;
  DType weight_dtype() const override { return options_.dtype; }
  std::string stored_weight_types() const override { return stored_weight_types_; }
  std::string device_name() const override { return device_name_; }
  CudaStats stats() const override { return stats_; }
  int64_t weight_bytes_per_token() const override;
  std::vector<std::pair<DType, int64_t>> weight_bytes_by_type() const override;

 private:
  // A decode graph is valid for one batch size, one block-table width and one output (logits, or
  // sampled ids), and only while no buffer it captured has moved (epoch).
  using GraphKey = std::tuple<int64_t, int64_t, bool>;  // (S, table_stride, samples)
  struct DecodeGraph {
    cudaGraphExec_t exec = nullptr;
    uint64_t epoch = 0;
  };

  // Grows a buffer; a move retires every captured graph.
  void ensure(DeviceBuffer& buffer, size_t bytes) {
    if (buffer.grow(bytes)) ++epoch_;
  }
  void size_activations(int64_t N, int64_t R);
  void upload_step(const StepLayout& layout);
  template <typename T>
  T* device_input(size_t offset) const { return reinterpret_cast<T*>(step_inputs_.get<char>() + offset); }
  cuda::LinearContext linear_context(bool early) const;
  // Copies a device tensor to the host for the trace: the last argument of JOURNEY_TRACE, so it
  // runs only when the sink wants the stage.
  TraceTensor host_copy(const float* device, std::vector<int64_t> shape);
  bool is_decode_step(const ForwardBatch& batch, TraceSink* sink) const;

  // The plain path: leaves the logits [R, V] in logits_ and returns row_begin (see ForwardOutput).
  std::vector<int64_t> forward_plain(const ForwardBatch& batch, TraceSink* sink);
  // The decode path: logits [S, V] in logits_; with params, the sampled ids [S] in sampled_.
  void forward_decode(const ForwardBatch& batch, std::span<const DeviceSampling> params);
  // Enqueues one decode step on stream_ (kernels only: graph capture records exactly this).
  void enqueue_decode(int64_t S, const StepLayout& layout, int64_t table_stride, bool samples);
  void run_captured(const GraphKey& key, const StepLayout& layout);
  void release_graphs();
  // The LM head's output for `rows` rows: logits_ [rows, V] on one process; under tensor
  // parallelism this rank's slice logits_slice_ [rows, Vs], which the caller then gathers.
  float* head_output() const { return collectives_ ? logits_slice_.f() : logits_.f(); }
  // Tensor parallelism: the vocabulary slices of `rows` rows gathered into rank 0's logits_ [rows, V].
  void gather_logits(int64_t rows) {
    if (collectives_)
      collectives_->gather_columns(logits_.f(), logits_slice_.f(), rows, Vs_, gather_staging_.f(), stream_);
  }
  // Tensor parallelism: the partial sums [rows, E] of this rank's heads or FFN columns become the whole.
  void all_reduce(float* partial, int64_t rows) {
    if (collectives_) collectives_->all_reduce_sum(partial, rows * E_, stream_);
  }
  // The vocabulary width of the logits this rank returns: V, or under tensor parallelism Vs on ranks other than 0.
  int64_t returned_vocab() const { return collectives_ && communicator_->rank() != 0 ? Vs_ : V_; }

  ModelConfig config_;
  std::string stored_weight_types_;  // as the file stores them (weight_type_summary)
  CudaOptions options_;
  std::string device_name_;
  // hidden, FFN columns, layers, heads, kv heads, head_dim, vocabulary, vocabulary rows of the LM
  // head: F_, H_, KVH_, Vs_ are this rank's share under tensor parallelism (shard_), the model's
  // otherwise; V_ is always the model's.
  int64_t E_, F_, L_, H_, KVH_, D_, V_, Vs_;
  TensorParallelShard shard_;        // the whole model when not tensor-parallel (rank 0 of 1)
  Communicator* communicator_ = nullptr;               // null when not tensor-parallel
  std::unique_ptr<DeviceCollectives> collectives_;     // null when not tensor-parallel
  bool decode_kernels_fit_ = true;  // paged_attention_decode handles this head_dim
  bool early_launch_ = false;       // options_.early_launch on a device that has it (sm_90+)
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer cublas_workspace_;   // set on the handle so that graph capture never makes cuBLAS allocate
  DeviceBuffer weight_scratch_;     // bf16 copy of one quantized matrix for cuBLAS (empty: no quantized weights)

  DeviceMatrix embed_tokens_;           // [V, E]
  std::vector<LayerWeights> layers_;    // [L]
  DeviceBuffer final_norm_;             // [E] f32
  DeviceMatrix lm_head_own_;            // [Vs, E] (empty when tied and not tensor-parallel)
  const DeviceMatrix* lm_head_ = nullptr;

  int64_t num_blocks_ = 0, block_size_ = 0;
  std::vector<DeviceBuffer> k_pool_, v_pool_;  // [L] of [num_blocks, block_size, KVH, D] f32

  // Per-step buffers, grown to the largest step seen (epoch_ counts the moves).
  uint64_t epoch_ = 1;
  PinnedBuffer host_inputs_, host_outputs_;  // pinned staging of the step's inputs and results
  PinnedBuffer host_sample_inputs_;          // a plain step's sampling inputs
  DeviceBuffer step_inputs_;                 // the device copy of host_inputs_ (StepLayout)
  DeviceBuffer x_, xn_, q_, k_, v_, context_, attn_out_, gate_, up_, act_, ffn_out_;  // f32 activations
  DeviceBuffer logits_slice_, gather_staging_;  // tensor parallelism: [R, Vs] this rank's, [size, R, Vs] NCCL's all-gather
  DeviceBuffer head_in_, logits_, last_rows_, probs_, scores_, weights_, scratch_, sampled_, plain_params_;
  std::vector<float> trace_host_;  // the host copy handed to a trace sink

  std::map<GraphKey, DecodeGraph> graphs_;
  std::set<GraphKey> seen_;  // keys run once eagerly (the warm-up before a capture)
  CudaStats stats_;
};

CudaBackendImpl::CudaBackendImpl(const LoadedModel& model, const CudaOptions& options)
    : config_(model.config), stored_weight_types_(weight_type_summary(model.weights)), options_(options) {
  const ModelConfig& c = config_;
  const std::string where = model.path.empty() ? std::string("the model") : model.path.string();
  const int devices = cuda::device_count();
  if (devices == 0) fail("no CUDA device visible (cudaGetDeviceCount found none)");
  if (options.device < 0 || options.device >= devices)
    fail("CUDA device ", options.device, " requested, but only ", devices, " visible");
  if (options.dtype != DType::BF16 && options.dtype != DType::F16 && options.dtype != DType::F32)
    fail("CUDA backend: weight type must be bf16, f16 or f32, found ", dtype_name(options.dtype));
  if (options.gemv_version < 1 || options.gemv_version > 4)
    fail("CUDA backend: gemv_version must be 1, 2, 3 or 4, found ", options.gemv_version);
  D_ = validate_model_shape(c, where);
  E_ = c.hidden_size, F_ = c.intermediate_size, L_ = c.num_layers, H_ = c.num_heads, KVH_ = c.num_kv_heads;
  V_ = c.vocab_size;
  config_.head_dim = D_;
  const bool parallel = options.communicator != nullptr && options.communicator->size() > 1;
  shard_ = plan_shard(config_, parallel ? options.communicator->rank() : 0, parallel ? options.communicator->size() : 1,
                      where);
  if (parallel) communicator_ = options.communicator;
  H_ = shard_.heads, KVH_ = shard_.kv_heads, F_ = shard_.ffn_columns, Vs_ = shard_.vocab_rows;
  const TensorParallelShard& sh = shard_;
  decode_kernels_fit_ = D_ % 4 == 0 ? D_ / 4 <= 256 : D_ <= 256;

  CUDA_CHECK(cudaSetDevice(options.device));
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, options.device));
  device_name_ = props.name;
  early_launch_ = options.early_launch && props.major >= 9;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  JOURNEY_CUBLAS_CHECK(cuda::cublas().create(&cublas_));
  JOURNEY_CUBLAS_CHECK(cuda::cublas().set_stream(cublas_, stream_));
  const size_t workspace_bytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper
  cublas_workspace_.grow(workspace_bytes);
  JOURNEY_CUBLAS_CHECK(cuda::cublas().set_workspace(cublas_, cublas_workspace_.get(), workspace_bytes));
  if (parallel) {
    // collective: every rank of the group is here at once (the device ids go round, NCCL joins)
    collectives_ = make_device_collectives(*communicator_, options.device, options.tp_transport);
    stats_.tp_transport = collectives_->describe();
    if (!collectives_->capturable() && options_.graphs) {
      options_.graphs = false;
      stats_.graph_error = cat("CUDA graphs off: tensor parallelism over ", collectives_->describe(),
                               " waits on the host for MPI in the middle of the step, which a graph cannot hold");
    }
  }

  const WeightStore& w = model.weights;
  const DType type = options.dtype;
  const bool keep = options.keep_quantized;
  const int64_t stored_bytes = int64_t(w.total_bytes());  // of all the model's tensors, for the progress line
  int64_t uploaded_bytes = 0;
  // The whole tensor, checked against the config's shape; counted as uploaded once asked for (the
  // upload follows at once), so the line reaches the total with the last one.
  auto tensor = [&](const std::string& name, const std::vector<int64_t>& shape) -> const TensorRef& {
    const TensorRef& t = checked_tensor(w, name, shape);
    uploaded_bytes += int64_t(t.nbytes);
    if (options.on_load_progress) options.on_load_progress(std::min(uploaded_bytes, stored_bytes), stored_bytes);
    return t;
  };
  // This rank's output rows / input columns of a matrix (the whole matrix without tensor parallelism).
  auto rows = [&](const std::string& name, const std::vector<int64_t>& shape, int64_t begin, int64_t n) {
    return upload_matrix(shard_rows(tensor(name, shape), begin, n), type, keep);
  };
  auto columns = [&](const std::string& name, const std::vector<int64_t>& shape, int64_t begin, int64_t n) {
    const TensorRef& t = tensor(name, shape);
    if (begin == 0 && n == shape[1]) return upload_matrix(t, type, keep);
    std::vector<std::byte> storage(shard_columns_bytes(t, begin, n, sh.size));  // [rows, n] in the stored type
    return upload_matrix(shard_columns(t, begin, n, sh.size, storage.data()), type, keep);
  };
  auto vector_range = [&](const std::string& name, int64_t length, int64_t begin, int64_t n) {
    return upload_f32(shard_rows(tensor(name, {length}), begin, n));
  };
  const int64_t HD = c.num_heads * D_, KVD = c.num_kv_heads * D_, FF = c.intermediate_size;  // the model's widths
  embed_tokens_ = upload_matrix(tensor("model.embed_tokens.weight", {V_, E_}), type, keep);
  layers_.resize(size_t(L_));
  for (int64_t i = 0; i < L_; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& lw = layers_[size_t(i)];
    lw.attn_norm = upload_f32(tensor(p + "input_layernorm.weight", {E_}));
    // (this rank's heads: rows of q/k/v, columns of o_proj; the whole matrices without tensor parallelism)
    lw.wq = rows(p + "self_attn.q_proj.weight", {HD, E_}, sh.head_begin * D_, H_ * D_);
    lw.wk = rows(p + "self_attn.k_proj.weight", {KVD, E_}, sh.kv_head_begin * D_, KVH_ * D_);
    lw.wv = rows(p + "self_attn.v_proj.weight", {KVD, E_}, sh.kv_head_begin * D_, KVH_ * D_);
    if (c.attention_bias) {
      lw.bq = vector_range(p + "self_attn.q_proj.bias", HD, sh.head_begin * D_, H_ * D_);
      lw.bk = vector_range(p + "self_attn.k_proj.bias", KVD, sh.kv_head_begin * D_, KVH_ * D_);
      lw.bv = vector_range(p + "self_attn.v_proj.bias", KVD, sh.kv_head_begin * D_, KVH_ * D_);
    }
    if (c.qk_norm) {
      lw.q_norm = upload_f32(tensor(p + "self_attn.q_norm.weight", {D_}));
      lw.k_norm = upload_f32(tensor(p + "self_attn.k_norm.weight", {D_}));
    }
    lw.wo = columns(p + "self_attn.o_proj.weight", {E_, HD}, sh.head_begin * D_, H_ * D_);
    lw.ffn_norm = upload_f32(tensor(p + "post_attention_layernorm.weight", {E_}));
    lw.w_gate = rows(p + "mlp.gate_proj.weight", {FF, E_}, sh.ffn_begin, F_);
    lw.w_up = rows(p + "mlp.up_proj.weight", {FF, E_}, sh.ffn_begin, F_);
    lw.w_down = columns(p + "mlp.down_proj.weight", {E_, FF}, sh.ffn_begin, F_);
  }
  final_norm_ = upload_f32(tensor("model.norm.weight", {E_}));
  const bool tied = c.tie_word_embeddings && !w.has("lm_head.weight");
  if (tied && Vs_ == V_) {
    lm_head_ = &embed_tokens_;  // tied: logits = h embed_tokens^T
  } else {
    // this rank's vocabulary rows (of the embedding table when tied)
    lm_head_own_ = rows(tied ? "model.embed_tokens.weight" : "lm_head.weight", {V_, E_}, sh.vocab_begin, Vs_);
    lm_head_ = &lm_head_own_;
  }
  // Prefill multiplies a quantized matrix through cuBLAS after dequantizing it into this bf16
  // scratch: sized once for the largest one (2 bytes per weight).
  size_t scratch = 0;
  auto need = [&](const DeviceMatrix& m, int64_t rows, int64_t cols) {
    // (f32 when the backend computes in f32: `cuda:f32`, the mode that must match the CPU)
    if (dtype_is_quantized(m.type)) scratch = std::max(scratch, size_t(rows * cols) * (options_.dtype == DType::F32 ? 4 : 2));
  };
  need(*lm_head_, Vs_, E_);
  for (const LayerWeights& lw : layers_) {
    need(lw.wq, H_ * D_, E_), need(lw.wk, KVH_ * D_, E_), need(lw.wv, KVH_ * D_, E_), need(lw.wo, E_, H_ * D_);
    need(lw.w_gate, F_, E_), need(lw.w_up, F_, E_), need(lw.w_down, E_, F_);
  }
  if (scratch > 0) weight_scratch_.grow(scratch);
  options_.on_load_progress = nullptr;  // it may refer to the caller's stack; loading is over
}

CudaBackendImpl::~CudaBackendImpl() {
  release_graphs();
  if (cublas_) cuda::cublas().destroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

int64_t CudaBackendImpl::weight_bytes_per_token() const {
  int64_t bytes = int64_t(final_norm_.bytes() + lm_head_->data.bytes());
  for (const LayerWeights& lw : layers_)
    for (const DeviceBuffer* b : {&lw.attn_norm, &lw.bq, &lw.bk, &lw.bv, &lw.q_norm, &lw.k_norm, &lw.ffn_norm,
                                  &lw.wq.data, &lw.wk.data, &lw.wv.data, &lw.wo.data, &lw.w_gate.data, &lw.w_up.data,
                                  &lw.w_down.data})
      bytes += int64_t(b->bytes());
  return bytes;
}

std::vector<std::pair<DType, int64_t>> CudaBackendImpl::weight_bytes_by_type() const {
  std::map<DType, int64_t> bytes;
  auto add = [&](const DeviceMatrix& m) { bytes[m.type] += int64_t(m.data.bytes()); };
  add(embed_tokens_);
  if (lm_head_ != &embed_tokens_) add(*lm_head_);
  bytes[DType::F32] += int64_t(final_norm_.bytes());
  for (const LayerWeights& lw : layers_) {
    for (const DeviceMatrix* m : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down}) add(*m);
    for (const DeviceBuffer* b : {&lw.attn_norm, &lw.bq, &lw.bk, &lw.bv, &lw.q_norm, &lw.k_norm, &lw.ffn_norm})
      bytes[DType::F32] += int64_t(b->bytes());
  }
  return {bytes.begin(), bytes.end()};
}

void CudaBackendImpl::release_graphs() {
  for (auto& [key, graph] : graphs_)
    if (graph.exec) cudaGraphExecDestroy(graph.exec);
  graphs_.clear();
}

void CudaBackendImpl::allocate_kv_cache(int64_t num_blocks, int64_t block_size) {
  if (num_blocks <= 0 || block_size <= 0)
    fail("KV cache: num_blocks (", num_blocks, ") and block_size (", block_size, ") must be positive");
  release_graphs();  // they captured the old pool
  ++epoch_;
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

void CudaBackendImpl::size_activations(int64_t N, int64_t R) {
  const int64_t E = E_, F = F_, H = H_, KVH = KVH_, D = D_, V = V_;
  const size_t f = sizeof(float);
  ensure(x_, size_t(N * E) * f);               // [N, E] the residual stream
  ensure(xn_, size_t(N * E) * f);              // [N, E]
  ensure(q_, size_t(N * H * D) * f);           // [N, H, D]
  ensure(k_, size_t(N * KVH * D) * f);         // [N, KVH, D]
  ensure(v_, size_t(N * KVH * D) * f);         // [N, KVH, D]
  ensure(context_, size_t(N * H * D) * f);     // [N, H*D]
  ensure(attn_out_, size_t(N * E) * f);        // [N, E]
  ensure(gate_, size_t(N * F) * f);            // [N, F]
  ensure(up_, size_t(N * F) * f);              // [N, F]
  ensure(act_, size_t(N * F) * f);             // [N, F]
  ensure(ffn_out_, size_t(N * E) * f);         // [N, E]
  ensure(head_in_, size_t(R * E) * f);         // [R, E]
  ensure(logits_, size_t(R * V) * f);          // [R, V]
  if (collectives_) {
    ensure(logits_slice_, size_t(R * Vs_) * f);                              // [R, Vs]
    ensure(gather_staging_, size_t(communicator_->size() * R * Vs_) * f);    // [size, R, Vs]
  }
  // activations narrowed to bf16/f16 for cuBLAS: the widest matrix input is [N, max(E, F, H*D)]
  ensure(scratch_, size_t(std::max(N, R) * std::max({E, F, H * D})) * 2);
}

void CudaBackendImpl::upload_step(const StepLayout& layout) {
  ensure(step_inputs_, layout.bytes);
  CUDA_CHECK(cudaMemcpyAsync(step_inputs_.get(), host_inputs_.at<void>(0), layout.bytes, cudaMemcpyHostToDevice,
                             stream_));
}

cuda::LinearContext CudaBackendImpl::linear_context(bool early) const {
  cuda::LinearContext context;
  context.stream = stream_;
  context.cublas = cublas_;
  context.scratch = scratch_.get();
  context.scratch_bytes = scratch_.bytes();
  context.gemv = cuda::GemvVersion(options_.gemv_version);
  context.early_launch = early && early_launch_ && context.gemv == cuda::GemvVersion::v4_prefetch_unrolled;
  context.weight_scratch = weight_scratch_.get();
  context.weight_scratch_bytes = weight_scratch_.bytes();
  context.dequantize_to = options_.dtype == DType::F32 ? DType::F32 : DType::BF16;
  return context;
}

TraceTensor CudaBackendImpl::host_copy(const float* device, std::vector<int64_t> shape) {
  const int64_t n = shape_numel(shape);
  trace_host_.resize(size_t(n));  // [shape...]
  CUDA_CHECK(cudaMemcpyAsync(trace_host_.data(), device, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return TraceTensor{std::span<const float>(trace_host_.data(), trace_host_.size()), std::move(shape)};
}

bool CudaBackendImpl::is_decode_step(const ForwardBatch& batch, TraceSink* sink) const {
  if (sink != nullptr || !options_.fast_decode || !decode_kernels_fit_) return false;
  for (const SequenceInput& s : batch.sequences)
    if (s.tokens.size() != 1) return false;
  return true;
}

std::vector<int64_t> CudaBackendImpl::forward_plain(const ForwardBatch& batch, TraceSink* sink) {
  ++stats_.plain_steps;
  const ModelConfig& c = config_;
  const float eps = float(c.rms_norm_eps);
  const bool single = batch.sequences.size() == 1;  // per-sequence stages are traced only then
  const int64_t E = E_, F = F_, H = H_, KVH = KVH_, D = D_, V = V_;
  cudaStream_t s = stream_;

  // The step's tokens, sequences concatenated: sequence i owns rows [first_row[i], first_row[i + 1]).
  std::vector<int64_t> first_row{0};     // [S + 1]
  std::vector<int64_t> table_offset;     // [S] where each sequence's table starts among the tables
  int64_t table_entries = 0;
  for (const SequenceInput& seq : batch.sequences) {
    first_row.push_back(first_row.back() + int64_t(seq.tokens.size()));
    table_offset.push_back(table_entries);
    table_entries += int64_t(seq.block_table.size());
  }
  const int64_t N = first_row.back();
  // Logit rows: the last of each sequence unless all_logits.
  std::vector<int64_t> row_begin{0};
  int64_t R = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    R += batch.sequences[i].all_logits ? first_row[i + 1] - first_row[i] : 1;
    row_begin.push_back(R);
  }

  // All inputs in one pinned block, one copy to the device.
  const StepLayout layout = step_layout(N, table_entries, R, 0);
  host_inputs_.grow(layout.bytes);
  int32_t* tokens = host_inputs_.at<int32_t>(layout.tokens);         // [N]
  int64_t* positions = host_inputs_.at<int64_t>(layout.positions);   // [N]
  int32_t* tables = host_inputs_.at<int32_t>(layout.tables);         // [table_entries]
  int32_t* logit_rows = host_inputs_.at<int32_t>(layout.logit_rows); // [R]
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceInput& seq = batch.sequences[i];
    for (size_t t = 0; t < seq.tokens.size(); ++t) {
      tokens[first_row[i] + int64_t(t)] = seq.tokens[t];
      positions[first_row[i] + int64_t(t)] = seq.start_position + int64_t(t);
    }
    std::copy(seq.block_table.begin(), seq.block_table.end(), tables + table_offset[i]);
    const int64_t begin = seq.all_logits ? first_row[i] : first_row[i + 1] - 1;
    for (int64_t r = begin; r < first_row[i + 1]; ++r) logit_rows[row_begin[i] + r - begin] = int32_t(r);
  }
  if (sink && sink->wants(Stage::token_ids, -1)) sink->record_ints(Stage::token_ids, -1, {tokens, size_t(N)}, {N});
  if (single && sink && sink->wants(Stage::kv_blocks, -1)) {
    const auto& table = batch.sequences[0].block_table;
    sink->record_ints(Stage::kv_blocks, -1, table, {int64_t(table.size())});
  }
  size_activations(N, R);
  upload_step(layout);
  const int32_t* d_tokens = device_input<int32_t>(layout.tokens);
  const int64_t* d_positions = device_input<int64_t>(layout.positions);
  const cuda::LinearContext lc = linear_context(false);

  float *x = x_.f(), *xn = xn_.f(), *q = q_.f(), *k = k_.f(), *v = v_.f(), *context = context_.f();
  float *attn_out = attn_out_.f(), *gate = gate_.f(), *up = up_.f(), *act = act_.f(), *ffn_out = ffn_out_.f();

  // embedding: one row of the table per token
  cuda::embedding_gather(x, embed_tokens_.view(), d_tokens, N, E, s);
  JOURNEY_TRACE(sink, Stage::embeddings, -1, host_copy(x, {N, E}));

  // Fusion: residual add + the RMSNorm after it run as one kernel unless a trace wants either.
  auto wants = [&](Stage stage, int layer) { return sink != nullptr && sink->wants(stage, layer); };
  auto fused = [&](Stage add_stage, int add_layer, Stage norm_stage, int norm_layer) {
    return options_.fuse && !wants(add_stage, add_layer) && !wants(norm_stage, norm_layer);
  };
  bool attn_norm_done = false;  // layer l's attn_norm already computed by the previous layer's fused kernel

  for (int64_t l = 0; l < L_; ++l) {
    const LayerWeights& lw = layers_[size_t(l)];
    const int il = int(l);

    // attention sublayer: RMSNorm
    if (!attn_norm_done) cuda::rms_norm(xn, x, lw.attn_norm.f(), N, E, eps, s);
    JOURNEY_TRACE(sink, Stage::attn_norm, il, host_copy(xn, {N, E}));

    // q, k, v projections (Qwen2 adds biases), one launch for the three at T == 1
    const cuda::LinearTarget qkv[] = {{q, lw.wq.view(), or_null(lw.bq), H * D},
                                      {k, lw.wk.view(), or_null(lw.bk), KVH * D},
                                      {v, lw.wv.view(), or_null(lw.bv), KVH * D}};
    cuda::linear_shared_input(xn, N, E, qkv, lc);
    JOURNEY_TRACE(sink, Stage::q, il, host_copy(q, {N, H, D}));
    JOURNEY_TRACE(sink, Stage::k, il, host_copy(k, {N, KVH, D}));
    JOURNEY_TRACE(sink, Stage::v, il, host_copy(v, {N, KVH, D}));

    // Qwen3: RMSNorm over head_dim of every head of q and k, before RoPE
    if (c.qk_norm) {
      cuda::rms_norm(q, q, lw.q_norm.f(), N * H, D, eps, s);
      cuda::rms_norm(k, k, lw.k_norm.f(), N * KVH, D, eps, s);
      JOURNEY_TRACE(sink, Stage::q_norm, il, host_copy(q, {N, H, D}));
      JOURNEY_TRACE(sink, Stage::k_norm, il, host_copy(k, {N, KVH, D}));
    }

    // rotary position embedding of q and k
    cuda::rope(q, d_positions, N, H, D, c.rope_theta, c.rope_layout, s);
    cuda::rope(k, d_positions, N, KVH, D, c.rope_theta, c.rope_layout, s);
    JOURNEY_TRACE(sink, Stage::q_rope, il, host_copy(q, {N, H, D}));
    JOURNEY_TRACE(sink, Stage::k_rope, il, host_copy(k, {N, KVH, D}));

    // per sequence: store k, v in the pool, then attend over positions [0, start + T)
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const SequenceInput& seq = batch.sequences[i];
      const int64_t r0 = first_row[i], T = first_row[i + 1] - r0, start = seq.start_position, P = start + T;
      const int32_t* d_table = device_input<int32_t>(layout.tables) + table_offset[i];
      cuda::kv_cache_write(k_pool_[l].f(), v_pool_[l].f(), k + r0 * KVH * D, v + r0 * KVH * D, d_table, T, start,
                           block_size_, KVH, D, s);
      const bool trace_scores = single && wants(Stage::attn_scores, il);
      const bool trace_weights = single && wants(Stage::attn_weights, il);
      // (trace buffers grow between steps only: a traced step is never captured)
      if (trace_scores) ensure(scores_, size_t(H * T * P) * sizeof(float));
      if (trace_weights) ensure(weights_, size_t(H * T * P) * sizeof(float));
      cuda::paged_attention(context + r0 * H * D, q + r0 * H * D, k_pool_[l].f(), v_pool_[l].f(), d_table, T, start,
                            block_size_, H, KVH, D, trace_scores ? scores_.f() : nullptr,
                            trace_weights ? weights_.f() : nullptr, s);
      if (trace_scores) JOURNEY_TRACE(sink, Stage::attn_scores, il, host_copy(scores_.f(), {H, T, P}));
      if (trace_weights) JOURNEY_TRACE(sink, Stage::attn_weights, il, host_copy(weights_.f(), {H, T, P}));
    }
    JOURNEY_TRACE(sink, Stage::attn_context, il, host_copy(context, {N, H * D}));

    // output projection, then the residual connection (fused with the FFN's RMSNorm)
    cuda::linear(attn_out, context, lw.wo.view(), nullptr, N, H * D, E, lc);
    // tensor parallelism: each rank's product covers its heads only; the sum over ranks is the whole
    all_reduce(attn_out, N);
    JOURNEY_TRACE(sink, Stage::attn_out, il, host_copy(attn_out, {N, E}));
    if (fused(Stage::resid_attn, il, Stage::ffn_norm, il)) {
      cuda::residual_add_rms_norm(x, xn, attn_out, lw.ffn_norm.f(), N, E, eps, s);
    } else {
      cuda::residual_add(x, x, attn_out, N * E, s);
      JOURNEY_TRACE(sink, Stage::resid_attn, il, host_copy(x, {N, E}));
      cuda::rms_norm(xn, x, lw.ffn_norm.f(), N, E, eps, s);
      JOURNEY_TRACE(sink, Stage::ffn_norm, il, host_copy(xn, {N, E}));
    }

    // gate and up projections (one launch at T == 1), SwiGLU, down projection
    const cuda::LinearTarget gate_up[] = {{gate, lw.w_gate.view(), nullptr, F}, {up, lw.w_up.view(), nullptr, F}};
    cuda::linear_shared_input(xn, N, E, gate_up, lc);
    JOURNEY_TRACE(sink, Stage::gate, il, host_copy(gate, {N, F}));
    JOURNEY_TRACE(sink, Stage::up, il, host_copy(up, {N, F}));
    cuda::swiglu(act, gate, up, N * F, s);
    JOURNEY_TRACE(sink, Stage::act, il, host_copy(act, {N, F}));
    cuda::linear(ffn_out, act, lw.w_down.view(), nullptr, N, F, E, lc);
    // tensor parallelism: each rank's product covers its FFN columns only; the sum over ranks is the whole
    all_reduce(ffn_out, N);
    JOURNEY_TRACE(sink, Stage::ffn_out, il, host_copy(ffn_out, {N, E}));

    // residual connection, fused with the next RMSNorm (the next layer's attn_norm, or the final norm)
    const bool last_layer = l + 1 == L_;
    const Stage next_stage = last_layer ? Stage::final_norm : Stage::attn_norm;
    const int next_layer = last_layer ? -1 : il + 1;
    const float* next_norm = last_layer ? final_norm_.f() : layers_[size_t(l + 1)].attn_norm.f();
    if (fused(Stage::layer_out, il, next_stage, next_layer)) {
      cuda::residual_add_rms_norm(x, xn, ffn_out, next_norm, N, E, eps, s);
      attn_norm_done = true;
    } else {
      cuda::residual_add(x, x, ffn_out, N * E, s);
      JOURNEY_TRACE(sink, Stage::layer_out, il, host_copy(x, {N, E}));
      attn_norm_done = false;
    }
  }

  // final RMSNorm
  if (!attn_norm_done) cuda::rms_norm(xn, x, final_norm_.f(), N, E, eps, s);
  JOURNEY_TRACE(sink, Stage::final_norm, -1, host_copy(xn, {N, E}));

  // LM head over the rows that get logits (gathered as embedding rows of the f32 table xn)
  cuda::embedding_gather(head_in_.f(), {xn, DType::F32}, device_input<int32_t>(layout.logit_rows), R, E, s);
  // (tensor parallelism: this rank's vocabulary slice, gathered side by side into [R, V] on rank 0;
  // the other ranks trace their slice [R, Vs])
  cuda::linear(head_output(), head_in_.f(), lm_head_->view(), nullptr, R, E, Vs_, lc);
  gather_logits(R);
  const bool whole = returned_vocab() == V;
  JOURNEY_TRACE(sink, Stage::logits, -1, host_copy(whole ? logits_.f() : logits_slice_.f(), {R, returned_vocab()}));
  return row_begin;
}

// One decode step of S sequences, kernels only (no host work, no allocation, no synchronization),
// so that a graph capture of it replays exactly what an eager run does.
void CudaBackendImpl::enqueue_decode(int64_t S, const StepLayout& layout, int64_t table_stride, bool samples) {
  const ModelConfig& c = config_;
  const float eps = float(c.rms_norm_eps);
  const int64_t E = E_, F = F_, H = H_, KVH = KVH_, D = D_, V = V_;
  cudaStream_t s = stream_;
  const cuda::DecodeBatch batch{device_input<int64_t>(layout.positions), device_input<int32_t>(layout.tables),
                                table_stride, S};
  // One sequence: the fused GEMVs (the normalized vector, the projections' outputs and gate/up
  // never go to memory). Several: cuBLAS products of S rows and the fused residual + norm kernel.
  // Under tensor parallelism a product's partial sum must be all-reduced before the residual add,
  // so the fused "GEMV + residual add" becomes GEMV, all-reduce, add.
  const bool fused = options_.fuse && S == 1 && options_.gemv_version == 4;
  const bool parallel = collectives_ != nullptr;
  const cuda::LinearContext lc = linear_context(/*early=*/S == 1);
  float *x = x_.f(), *xn = xn_.f(), *q = q_.f(), *k = k_.f(), *v = v_.f(), *context = context_.f();
  float *attn_out = attn_out_.f(), *gate = gate_.f(), *up = up_.f(), *act = act_.f(), *ffn_out = ffn_out_.f();

  cuda::embedding_gather(x, embed_tokens_.view(), device_input<int32_t>(layout.tokens), S, E, s);
  bool norm_done = false;  // xn already holds this sublayer's RMSNorm (fused into the previous residual add)
  for (int64_t l = 0; l < L_; ++l) {
    const LayerWeights& lw = layers_[size_t(l)];
    const cuda::LinearTarget qkv[] = {{q, lw.wq.view(), or_null(lw.bq), H * D},
                                      {k, lw.wk.view(), or_null(lw.bk), KVH * D},
                                      {v, lw.wv.view(), or_null(lw.bv), KVH * D}};
    if (fused) {
      cuda::rms_norm_linear_shared_input(x, lw.attn_norm.f(), eps, E, qkv, lc);
    } else {
      if (!norm_done) cuda::rms_norm(xn, x, lw.attn_norm.f(), S, E, eps, s);
      cuda::linear_shared_input(xn, S, E, qkv, lc);
    }
    cuda::rope_kv_cache_write_decode(q, k, v, k_pool_[l].f(), v_pool_[l].f(), or_null(lw.q_norm), or_null(lw.k_norm),
                                     eps, batch, block_size_, H, KVH, D, c.rope_theta, c.rope_layout, s);
    cuda::paged_attention_decode(context, q, k_pool_[l].f(), v_pool_[l].f(), batch, block_size_, H, KVH, D, s);

    const bool last_layer = l + 1 == L_;
    const float* next_norm = last_layer ? final_norm_.f() : layers_[size_t(l + 1)].attn_norm.f();
    if (fused) {
      if (parallel) {
        cuda::linear(attn_out, context, lw.wo.view(), nullptr, 1, H * D, E, lc);
        all_reduce(attn_out, 1);
        cuda::residual_add(x, x, attn_out, E, s);
      } else {
        cuda::linear_residual_add(x, context, lw.wo.view(), H * D, E, lc);
      }
      if (lw.w_gate.type == lw.w_up.type) {
        cuda::rms_norm_swiglu(act, x, lw.ffn_norm.f(), eps, lw.w_gate.view(), lw.w_up.view(), E, F, lc);
      } else {  // one launch reads gate and up together only when they share a type
        cuda::rms_norm(xn, x, lw.ffn_norm.f(), 1, E, eps, s);
        const cuda::LinearTarget gate_up[] = {{gate, lw.w_gate.view(), nullptr, F}, {up, lw.w_up.view(), nullptr, F}};
        cuda::linear_shared_input(xn, 1, E, gate_up, lc);
        cuda::swiglu(act, gate, up, F, s);
      }
      if (parallel) {
        cuda::linear(ffn_out, act, lw.w_down.view(), nullptr, 1, F, E, lc);
        all_reduce(ffn_out, 1);
        cuda::residual_add(x, x, ffn_out, E, s);
      } else {
        cuda::linear_residual_add(x, act, lw.w_down.view(), F, E, lc);
      }
      continue;
    }
    cuda::linear(attn_out, context, lw.wo.view(), nullptr, S, H * D, E, lc);
    all_reduce(attn_out, S);  // tensor parallelism: the sum of the ranks' heads
    if (options_.fuse) {
      cuda::residual_add_rms_norm(x, xn, attn_out, lw.ffn_norm.f(), S, E, eps, s);
    } else {
      cuda::residual_add(x, x, attn_out, S * E, s);
      cuda::rms_norm(xn, x, lw.ffn_norm.f(), S, E, eps, s);
    }
    const cuda::LinearTarget gate_up[] = {{gate, lw.w_gate.view(), nullptr, F}, {up, lw.w_up.view(), nullptr, F}};
    cuda::linear_shared_input(xn, S, E, gate_up, lc);
    cuda::swiglu(act, gate, up, S * F, s);
    cuda::linear(ffn_out, act, lw.w_down.view(), nullptr, S, F, E, lc);
    all_reduce(ffn_out, S);  // tensor parallelism: the sum of the ranks' FFN columns
    if (options_.fuse) {
      cuda::residual_add_rms_norm(x, xn, ffn_out, next_norm, S, E, eps, s);
      norm_done = true;
    } else {
      cuda::residual_add(x, x, ffn_out, S * E, s);
      norm_done = false;
    }
  }
  // final RMSNorm and the LM head (every row of a decode step gets logits)
  // (tensor parallelism: this rank's vocabulary slice, gathered into [S, V] on rank 0)
  const cuda::LinearTarget head[] = {{head_output(), lm_head_->view(), nullptr, Vs_}};
  if (fused) {
    cuda::rms_norm_linear_shared_input(x, final_norm_.f(), eps, E, head, lc);
  } else {
    if (!norm_done) cuda::rms_norm(xn, x, final_norm_.f(), S, E, eps, s);
    cuda::linear(head_output(), xn, lm_head_->view(), nullptr, S, E, Vs_, lc);
  }
  gather_logits(S);
  if (samples)
    cuda::sample_rows(sampled_.get<int32_t>(), logits_.f(), device_input<DeviceSampling>(layout.params), probs_.f(), S,
                      V, s);
}

void CudaBackendImpl::run_captured(const GraphKey& key, const StepLayout& layout) {
  const auto [S, table_stride, samples] = key;
  auto found = graphs_.find(key);
  if (found != graphs_.end() && found->second.epoch != epoch_) {  // a buffer it captured has moved
    cudaGraphExecDestroy(found->second.exec);
    graphs_.erase(found);
    found = graphs_.end();
  }
  if (found != graphs_.end()) {
    CUDA_CHECK(cudaGraphLaunch(found->second.exec, stream_));
    ++stats_.graph_replays;
    return;
  }
  if (seen_.insert(key).second || !stats_.graph_error.empty()) {
    // first sight of this shape: an eager run (it also makes every lazy setup happen outside a capture)
    enqueue_decode(S, layout, table_stride, samples);
    ++stats_.decode_steps;
    return;
  }
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  try {
    enqueue_decode(S, layout, table_stride, samples);
  } catch (const std::exception& e) {
    cudaStreamEndCapture(stream_, &graph);  // leave capture mode whatever happened
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    stats_.graph_error = cat("capture of the decode step failed: ", e.what());
    enqueue_decode(S, layout, table_stride, samples);  // the step still runs, eagerly; graphs stay off
    ++stats_.decode_steps;
    return;
  }
  cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  const char* failed = "cudaStreamEndCapture";
  if (status == cudaSuccess) {
    failed = "cudaGraphInstantiate";
    status = cudaGraphInstantiate(&exec, graph, 0);
  }
  if (graph) cudaGraphDestroy(graph);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    stats_.graph_error = cat(failed, " of the decode step failed: ", cudaGetErrorString(status));
    enqueue_decode(S, layout, table_stride, samples);
    ++stats_.decode_steps;
    return;
  }
  graphs_[key] = DecodeGraph{exec, epoch_};
  ++stats_.graph_captures;
  CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  ++stats_.graph_replays;
}

void CudaBackendImpl::forward_decode(const ForwardBatch& batch, std::span<const DeviceSampling> params) {
  const int64_t S = int64_t(batch.sequences.size());
  // The block tables are padded to a power of two, so a graph serves all lengths up to it.
  size_t widest = 1;
  for (const SequenceInput& seq : batch.sequences) widest = std::max(widest, seq.block_table.size());
  int64_t table_stride = 1;
  while (table_stride < int64_t(widest)) table_stride *= 2;
  const bool samples = !params.empty();

  const StepLayout layout = step_layout(S, S * table_stride, 0, samples ? S : 0);
  host_inputs_.grow(layout.bytes);
  int32_t* tokens = host_inputs_.at<int32_t>(layout.tokens);        // [S]
  int64_t* positions = host_inputs_.at<int64_t>(layout.positions);  // [S]
  int32_t* tables = host_inputs_.at<int32_t>(layout.tables);        // [S, table_stride]
  for (int64_t i = 0; i < S; ++i) {
    const SequenceInput& seq = batch.sequences[size_t(i)];
    tokens[i] = seq.tokens[0];
    positions[i] = seq.start_position;
    int32_t* row = tables + i * table_stride;
    std::fill(std::copy(seq.block_table.begin(), seq.block_table.end(), row), row + table_stride, 0);
  }
  if (samples) std::copy(params.begin(), params.end(), host_inputs_.at<DeviceSampling>(layout.params));

  size_activations(S, S);
  if (samples) {
    ensure(probs_, size_t(S * V_) * sizeof(float));
    ensure(sampled_, size_t(S) * sizeof(int32_t));
  }
  upload_step(layout);  // may move step_inputs_: before the graph lookup
  const GraphKey key{S, table_stride, samples};
  if (options_.graphs) {
    run_captured(key, layout);
  } else {
    enqueue_decode(S, layout, table_stride, samples);
    ++stats_.decode_steps;
  }
}

ForwardOutput CudaBackendImpl::forward(const ForwardBatch& batch, TraceSink* sink) {
  validate_forward_batch(batch, config_, num_blocks_, block_size_);
  ForwardOutput out;
  // rank 0 (and a single process): [R, V]; under tensor parallelism the other ranks return their
  // vocabulary slice [R, Vs], as the CPU backend's do
  const int64_t width = returned_vocab();
  out.vocab_size = width;
  if (is_decode_step(batch, sink)) {
    forward_decode(batch, {});
    for (int64_t i = 0; i <= int64_t(batch.sequences.size()); ++i) out.row_begin.push_back(i);
  } else {
    out.row_begin = forward_plain(batch, sink);
  }
  const int64_t R = out.row_begin.back();
  if (collectives_) {
    int64_t N = 0;
    for (const SequenceInput& seq : batch.sequences) N += int64_t(seq.tokens.size());
    collectives_->count_step(2 * L_, N * E_, R, Vs_);  // two all-reduces of [N, E] per layer, one gather
  }
  const size_t bytes = size_t(R * width) * sizeof(float);
  host_outputs_.grow(bytes);
  const void* result = width == V_ ? logits_.get() : logits_slice_.get();
  CUDA_CHECK(cudaMemcpyAsync(host_outputs_.at<void>(0), result, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the one wait of the step
  out.logits.resize(size_t(R * width));  // [R, width]
  std::memcpy(out.logits.data(), host_outputs_.at<void>(0), bytes);
  return out;
}

std::vector<int32_t> CudaBackendImpl::forward_sample(const ForwardBatch& batch,
                                                     std::span<const DeviceSampling> params, TraceSink* sink) {
  if (collectives_)
    fail("forward_sample: under tensor parallelism each rank holds a slice of the vocabulary; sample from forward()'s ",
         "gathered logits on rank 0 (samples_on_device() is false)");
  if (params.size() != batch.sequences.size())
    fail("forward_sample: ", params.size(), " sampling parameter sets for ", batch.sequences.size(), " sequences");
  for (const DeviceSampling& p : params)
    if (p.temperature < 0 || p.top_k < 0 || !(p.top_p > 0 && p.top_p <= 1) || !(p.u >= 0 && p.u < 1))
      fail("forward_sample: need temperature >= 0, top_k >= 0, top_p in (0, 1], u in [0, 1); found temperature ",
           p.temperature, ", top_k ", p.top_k, ", top_p ", p.top_p, ", u ", p.u);
  validate_forward_batch(batch, config_, num_blocks_, block_size_);
  const int64_t S = int64_t(batch.sequences.size());
  if (is_decode_step(batch, sink)) {
    forward_decode(batch, params);  // the sampling is part of the step (and of its graph)
  } else {
    const std::vector<int64_t> row_begin = forward_plain(batch, sink);
    // Each sequence's last logits row (a gather, when some sequence asked for all its rows).
    const float* last_rows = logits_.f();
    // (a pinned block of its own: the step's input copy from host_inputs_ may still be in flight)
    const StepLayout layout = step_layout(0, 0, S, S);  // rows and parameters, one copy
    host_sample_inputs_.grow(layout.bytes);
    for (int64_t i = 0; i < S; ++i) host_sample_inputs_.at<int32_t>(layout.logit_rows)[i] = int32_t(row_begin[i + 1] - 1);
    std::copy(params.begin(), params.end(), host_sample_inputs_.at<DeviceSampling>(layout.params));
    ensure(plain_params_, layout.bytes);
    CUDA_CHECK(cudaMemcpyAsync(plain_params_.get(), host_sample_inputs_.at<void>(0), layout.bytes,
                               cudaMemcpyHostToDevice, stream_));
    if (row_begin.back() != S) {
      ensure(last_rows_, size_t(S * V_) * sizeof(float));
      cuda::embedding_gather(last_rows_.f(), {logits_.f(), DType::F32},
                             reinterpret_cast<const int32_t*>(plain_params_.get<char>() + layout.logit_rows), S, V_,
                             stream_);
      last_rows = last_rows_.f();
    }
    ensure(sampled_, size_t(S) * sizeof(int32_t));
    ensure(probs_, size_t(S * V_) * sizeof(float));
    cuda::sample_rows(sampled_.get<int32_t>(), last_rows,
                      reinterpret_cast<const DeviceSampling*>(plain_params_.get<char>() + layout.params), probs_.f(),
                      S, V_, stream_);
  }
  host_outputs_.grow(size_t(S) * sizeof(int32_t));
  CUDA_CHECK(cudaMemcpyAsync(host_outputs_.at<void>(0), sampled_.get(), size_t(S) * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the one wait of the step
  const int32_t* ids = host_outputs_.at<int32_t>(0);
  return std::vector<int32_t>(ids, ids + S);
}

std::unique_ptr<CudaBackend> make_cuda_backend(const LoadedModel& model, const CudaOptions& options) {
  return std::make_unique<CudaBackendImpl>(model, options);
}

}  // namespace journey
