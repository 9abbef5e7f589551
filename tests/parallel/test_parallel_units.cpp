// What tensor parallelism decides without MPI or a GPU, so it is checked on every machine:
//   - the device transport of a CUDA group (parallel/device_transport.h): NCCL only where every
//     rank has a GPU of its own and the build has NCCL, host-staged otherwise, the forced choices
//     and their errors; the device-id exchange through all_reduce_sum (single process here; the
//     MPI group runs it in tests/parallel/tp_cuda_exactness on a GPU machine);
//   - the weight slices every backend's shard loads (parallel/shard.h: shard_rows, shard_columns),
//     against element-by-element index arithmetic on the whole tensor, f32 and Q8_0.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "assets/test_util.h"
#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/device_transport.h"
#include "parallel/shard.h"
#include "quant/blocks.h"
#include "quant/quantize.h"

using namespace journey;
using journey::test::error_of;

namespace {

DeviceId device(uint8_t last) {
  DeviceId id{};
  id[0] = 0x6b, id[15] = last;
  return id;
}

}  // namespace

TEST_CASE("device transport: NCCL only when every rank has its own GPU and the build has NCCL") {
  const std::vector<DeviceId> own = {device(1), device(2), device(3)};
  const std::vector<DeviceId> shared = {device(1), device(2), device(1)};  // ranks 0 and 2 on one GPU

  CHECK(choose_device_transport(own, true, "auto").transport == DeviceTransport::nccl);
  const DeviceTransportChoice no_nccl = choose_device_transport(own, false, "auto");
  CHECK(no_nccl.transport == DeviceTransport::host_staged);
  CHECK(no_nccl.why.find("no NCCL") != std::string::npos);
  const DeviceTransportChoice one_gpu = choose_device_transport(shared, true, "auto");
  CHECK(one_gpu.transport == DeviceTransport::host_staged);
  CHECK(one_gpu.why.find("ranks 0 and 2 share " + device_id_string(device(1))) != std::string::npos);

  // forced
  CHECK(choose_device_transport(own, true, "host-staged").transport == DeviceTransport::host_staged);
  CHECK(choose_device_transport(own, true, "nccl").transport == DeviceTransport::nccl);
  CHECK(error_of([&] { choose_device_transport(shared, true, "nccl"); }).find("Duplicate GPU") != std::string::npos);
  CHECK(error_of([&] { choose_device_transport(own, false, "nccl"); }).find("built without NCCL") != std::string::npos);
  CHECK(error_of([&] { choose_device_transport(own, true, "mpi"); }).find("\"mpi\"") != std::string::npos);
  // a group of one rank shares nothing
  CHECK(choose_device_transport(std::vector<DeviceId>{device(7)}, true, "auto").transport == DeviceTransport::nccl);
}

TEST_CASE("device ids print as nvidia-smi prints a GPU's UUID") {
  DeviceId id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = uint8_t(i * 17);
  CHECK(device_id_string(id) == "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

TEST_CASE("device ids go round through all_reduce_sum, every byte value intact") {
  auto single = make_single_process_communicator();
  DeviceId mine{};
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = uint8_t(255 - i * 13);  // 255 down to 60: no byte lost to f32
  const std::vector<DeviceId> ids = exchange_device_ids(*single, mine);
  REQUIRE(ids.size() == 1);
  CHECK(ids[0] == mine);
  CHECK(single->counters().all_reduces == 1);  // one collective, as the forward pass's
}

TEST_CASE("shard_rows and shard_columns cut the same values as index arithmetic on the whole tensor") {
  const int64_t rows = 6, in = 64;
  std::vector<float> values(size_t(rows * in));  // [rows, in]
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.25f - 3.0f;
  TensorRef whole;
  whole.name = "w", whole.source = "test", whole.dtype = DType::F32, whole.shape = {rows, in};
  whole.data = reinterpret_cast<const std::byte*>(values.data()), whole.nbytes = values.size() * sizeof(float);

  const TensorRef middle = shard_rows(whole, 2, 3);  // rows 2..4
  CHECK(middle.shape == std::vector<int64_t>{3, in});
  const std::vector<float> got_rows = middle.to_f32();  // [3, in]
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < in; ++c) CHECK(got_rows[size_t(r * in + c)] == values[size_t((r + 2) * in + c)]);

  std::vector<std::byte> storage(shard_columns_bytes(whole, 32, 32, 2));
  const TensorRef right = shard_columns(whole, 32, 32, 2, storage.data());  // columns 32..63
  CHECK(right.shape == std::vector<int64_t>{rows, 32});
  const std::vector<float> got_columns = right.to_f32();  // [rows, 32]
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 32; ++c) CHECK(got_columns[size_t(r * 32 + c)] == values[size_t(r * in + 32 + c)]);

  // a vector's rows are its elements (a bias's slice)
  TensorRef bias = whole;
  bias.shape = {rows * in};
  const std::vector<float> got_bias = shard_rows(bias, 100, 5).to_f32();  // [5]
  for (int64_t i = 0; i < 5; ++i) CHECK(got_bias[size_t(i)] == values[size_t(100 + i)]);

  CHECK(error_of([&] { shard_rows(whole, 4, 3); }).find("outside its 6 rows") != std::string::npos);
}

TEST_CASE("shard_columns of a quantized matrix: whole blocks only, the same values as the whole matrix") {
  const int64_t rows = 3, in = 128;  // 4 Q8_0 blocks per row
  std::vector<float> values(size_t(rows * in));  // [rows, in]
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(int(i * 7 % 23) - 11) / 8.0f;
  std::vector<quant::block_q8_0> blocks(size_t(rows * in / 32));  // [rows, in / 32]
  for (int64_t r = 0; r < rows; ++r) quant::quantize_row_q8_0(values.data() + r * in, blocks.data() + r * in / 32, in);
  TensorRef whole;
  whole.name = "model.layers.0.mlp.down_proj.weight", whole.source = "test", whole.dtype = DType::Q8_0;
  whole.shape = {rows, in};
  whole.data = reinterpret_cast<const std::byte*>(blocks.data()), whole.nbytes = blocks.size() * sizeof(blocks[0]);
  const std::vector<float> dequantized = whole.to_f32();  // [rows, in]

  std::vector<std::byte> storage(shard_columns_bytes(whole, 64, 64, 2));
  const std::vector<float> half = shard_columns(whole, 64, 64, 2, storage.data()).to_f32();  // [rows, 64]
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 64; ++c) CHECK(half[size_t(r * 64 + c)] == dequantized[size_t(r * in + 64 + c)]);

  // 128 columns over 8 ranks: 16 per rank, half a block
  const std::string message = error_of([&] { shard_columns_bytes(whole, 16, 16, 8); });
  CHECK(message.find("down_proj") != std::string::npos);
  CHECK(message.find("block size 32") != std::string::npos);
}
