#include "cuda/device_collectives.h"

#include <algorithm>
#include <vector>

#if defined(JOURNEY_HAVE_NCCL)
#include <nccl.h>
#endif

#include "core/error.h"
#include "cuda/kernels.h"
#include "parallel/communicator.h"

namespace journey {

namespace {

// Page-locked host memory that grows (the staging of the host-staged transport).
class PinnedFloats {
 public:
  ~PinnedFloats() { release(); }
  // `stream` may still be copying out of the old block (the previous call's host -> device copy):
  // it is waited for before the block is freed.
  float* grow(int64_t n, cudaStream_t stream) {
    const size_t bytes = std::max<size_t>(size_t(n) * sizeof(float), 4096);
    if (bytes > bytes_) {
      JOURNEY_CUDA_CHECK(cudaStreamSynchronize(stream));
      release();
      void* p = nullptr;
      JOURNEY_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
      data_ = static_cast<float*>(p), bytes_ = bytes;
    }
    return data_;
  }

 private:
  void release() {
    if (data_) cudaFreeHost(data_);
    data_ = nullptr, bytes_ = 0;
  }
  float* data_ = nullptr;
  size_t bytes_ = 0;
};

// Device -> pinned host, the group's Communicator (MPI) does the collective, host -> device. The
// Communicator counts what it sends, so count_step has nothing to add.
class HostStagedCollectives final : public DeviceCollectives {
 public:
  HostStagedCollectives(Communicator& communicator, std::string why)
      : communicator_(communicator), why_(std::move(why)) {}
  DeviceTransport transport() const override { return DeviceTransport::host_staged; }
  std::string describe() const override {
    return cat("host-staged over ", communicator_.transport(), " (", why_, ")");
  }
  bool capturable() const override { return false; }

  void all_reduce_sum(float* data, int64_t n, cudaStream_t stream) override {
    float* host = sums_.grow(n, stream);  // [n]
    JOURNEY_CUDA_CHECK(cudaMemcpyAsync(host, data, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream));
    JOURNEY_CUDA_CHECK(cudaStreamSynchronize(stream));
    communicator_.all_reduce_sum(host, n);
    // (the next use of `host` comes after a synchronize of the same stream, so this copy is done by then)
    JOURNEY_CUDA_CHECK(cudaMemcpyAsync(data, host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice, stream));
  }

  void gather_columns(float* out, const float* mine, int64_t rows, int64_t cols, float*, cudaStream_t stream) override {
    float* host_mine = slice_.grow(rows * cols, stream);  // [rows, cols]
    JOURNEY_CUDA_CHECK(
        cudaMemcpyAsync(host_mine, mine, size_t(rows * cols) * sizeof(float), cudaMemcpyDeviceToHost, stream));
    JOURNEY_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (communicator_.rank() != 0) {
      communicator_.gather_columns(nullptr, host_mine, rows, cols);
      return;
    }
    const int64_t total = rows * cols * communicator_.size();
    float* host_out = gathered_.grow(total, stream);  // [rows, size * cols]
    communicator_.gather_columns(host_out, host_mine, rows, cols);
    JOURNEY_CUDA_CHECK(cudaMemcpyAsync(out, host_out, size_t(total) * sizeof(float), cudaMemcpyHostToDevice, stream));
  }

  void count_step(int64_t, int64_t, int64_t, int64_t) override {}

 private:
  Communicator& communicator_;
  std::string why_;
  PinnedFloats sums_, slice_, gathered_;
};

#if defined(JOURNEY_HAVE_NCCL)

void check_nccl(ncclResult_t status, const char* call) {
  if (status != ncclSuccess) fail("NCCL: ", call, " failed: ", ncclGetErrorString(status));
}

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(Communicator& communicator, std::string why) : communicator_(communicator), why_(std::move(why)) {
    ncclUniqueId id{};
    if (communicator.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    communicator.broadcast(&id, int64_t(sizeof id));  // rank 0's id to every rank, over MPI
    check_nccl(ncclCommInitRank(&comm_, communicator.size(), id, communicator.rank()), "ncclCommInitRank");
    int version = 0;
    ncclGetVersion(&version);  // major * 10000 + minor * 100 + patch (NCCL 2.9 and later)
    version_ = cat(version / 10000, ".", version / 100 % 100, ".", version % 100);
  }
  ~NcclCollectives() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  DeviceTransport transport() const override { return DeviceTransport::nccl; }
  std::string describe() const override { return cat("NCCL ", version_, " (", why_, ")"); }
  bool capturable() const override { return true; }

  void all_reduce_sum(float* data, int64_t n, cudaStream_t stream) override {
    check_nccl(ncclAllReduce(data, data, size_t(n), ncclFloat, ncclSum, comm_, stream), "ncclAllReduce");
  }

  // NCCL has no gather: an all-gather into staging [size, rows, cols], then rank 0 lays the blocks
  // side by side with one strided copy each (all of it on the stream, so a graph captures it).
  void gather_columns(float* out, const float* mine, int64_t rows, int64_t cols, float* staging,
                      cudaStream_t stream) override {
    check_nccl(ncclAllGather(mine, staging, size_t(rows * cols), ncclFloat, comm_, stream), "ncclAllGather");
    if (communicator_.rank() != 0) return;
    const size_t width = size_t(cols) * sizeof(float);
    for (int r = 0; r < communicator_.size(); ++r)
      JOURNEY_CUDA_CHECK(cudaMemcpy2DAsync(out + r * cols, width * size_t(communicator_.size()),
                                           staging + r * rows * cols, width, width, size_t(rows),
                                           cudaMemcpyDeviceToDevice, stream));
  }

  void count_step(int64_t all_reduces, int64_t floats_each, int64_t gather_rows, int64_t gather_cols) override {
    for (int64_t i = 0; i < all_reduces; ++i) communicator_.count_all_reduce(floats_each * int64_t(sizeof(float)));
    // (as the MPI communicator counts a gather: what rank 0 received, its own slice excluded)
    communicator_.count_gather(gather_rows * gather_cols * (communicator_.size() - 1) * int64_t(sizeof(float)));
  }

 private:
  Communicator& communicator_;
  std::string why_;
  std::string version_;
  ncclComm_t comm_ = nullptr;
};

#endif

}  // namespace

bool nccl_compiled_in() {
#if defined(JOURNEY_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

std::unique_ptr<DeviceCollectives> make_device_collectives(Communicator& communicator, int device,
                                                           const std::string& requested) {
  cudaDeviceProp props{};
  JOURNEY_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  DeviceId mine{};
  std::copy(props.uuid.bytes, props.uuid.bytes + mine.size(), reinterpret_cast<char*>(mine.data()));
  const std::vector<DeviceId> ids = exchange_device_ids(communicator, mine);
  // every rank has the same ids and flags, so every rank makes the same choice (or the same error)
  const DeviceTransportChoice choice = choose_device_transport(ids, nccl_compiled_in(), requested);
#if defined(JOURNEY_HAVE_NCCL)
  if (choice.transport == DeviceTransport::nccl) return std::make_unique<NcclCollectives>(communicator, choice.why);
#endif
  return std::make_unique<HostStagedCollectives>(communicator, choice.why);
}

}  // namespace journey
