#include "parallel/device_transport.h"

#include <cstdio>

#include "core/error.h"
#include "parallel/communicator.h"

namespace journey {

const char* device_transport_name(DeviceTransport t) {
  return t == DeviceTransport::nccl ? "nccl" : "host-staged";
}

std::string device_id_string(const DeviceId& id) {
  // 8-4-4-4-12 hex digits, as nvidia-smi prints a GPU's UUID
  std::string text = "GPU-";
  char hex[3];
  for (size_t i = 0; i < id.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    std::snprintf(hex, sizeof hex, "%02x", unsigned(id[i]));
    text += hex;
  }
  return text;
}

DeviceTransportChoice choose_device_transport(std::span<const DeviceId> device_ids, bool nccl_compiled_in,
                                              const std::string& requested) {
  if (requested != "auto" && requested != "nccl" && requested != "host-staged")
    fail("--tp-transport: expected auto, nccl or host-staged, found \"", requested, "\"");
  // the first pair of ranks on one device, if any
  int first = -1, second = -1;
  for (size_t a = 0; a < device_ids.size() && first < 0; ++a)
    for (size_t b = a + 1; b < device_ids.size(); ++b)
      if (device_ids[a] == device_ids[b]) {
        first = int(a), second = int(b);
        break;
      }
  const std::string shared =
      first < 0 ? std::string() : cat("ranks ", first, " and ", second, " share ", device_id_string(device_ids[size_t(first)]));
  if (requested == "host-staged") return {DeviceTransport::host_staged, "asked for (--tp-transport host-staged)"};
  if (requested == "nccl") {
    if (!nccl_compiled_in)
      fail("--tp-transport nccl: this journey was built without NCCL (JOURNEY_NCCL=OFF, or nccl.h / libnccl not found ",
           "when it was configured); use --tp-transport host-staged or auto");
    if (first >= 0)
      fail("--tp-transport nccl: ", shared, ", and NCCL refuses two ranks on one GPU (\"Duplicate GPU detected\"); ",
           "give each rank its own GPU, or use --tp-transport host-staged or auto");
    return {DeviceTransport::nccl, "asked for (--tp-transport nccl); every rank has its own GPU"};
  }
  if (first >= 0) return {DeviceTransport::host_staged, cat(shared, " (NCCL needs one GPU per rank)")};
  if (!nccl_compiled_in) return {DeviceTransport::host_staged, "this build has no NCCL"};
  return {DeviceTransport::nccl, "every rank has its own GPU"};
}

std::vector<DeviceId> exchange_device_ids(Communicator& communicator, const DeviceId& mine) {
  const int size = communicator.size(), rank = communicator.rank();
  const int64_t width = int64_t(DeviceId().size());
  std::vector<float> slots(size_t(size * width), 0.0f);  // [size, 16] byte values, rank r's in row r
  for (int64_t i = 0; i < width; ++i) slots[size_t(rank * width + i)] = float(mine[size_t(i)]);
  communicator.all_reduce_sum(slots.data(), int64_t(slots.size()));
  std::vector<DeviceId> ids(static_cast<size_t>(size));  // [size]
  for (int r = 0; r < size; ++r)
    for (int64_t i = 0; i < width; ++i) {
      const float value = slots[size_t(r * width + i)];
      if (!(value >= 0 && value <= 255 && value == float(int(value))))
        fail("tensor parallel: rank ", r, "'s device id arrived as ", value, " in byte ", i,
             " (expected a whole number 0..255): the ranks' exchange at start-up went wrong");
      ids[size_t(r)][size_t(i)] = uint8_t(value);
    }
  return ids;
}

}  // namespace journey
