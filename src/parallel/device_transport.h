// How the ranks of a tensor-parallel group on GPUs move their collectives (the all-reduces and
// the logits gather of parallel/communicator.h), chosen once at start-up, the same way on every
// rank:
//
//   nccl          ncclAllReduce / ncclAllGather on the backend's stream, device memory to device
//                 memory; can be captured in a CUDA graph. Needs one GPU per rank: NCCL refuses
//                 two ranks on one device ("Duplicate GPU detected", ncclInvalidUsage since 2.5).
//   host-staged   copy the [N, E] partial sums to pinned host memory, all_reduce_sum over the
//                 process group's Communicator (MPI), copy back; works when ranks share a GPU
//                 (the one-GPU machine this project is checked on), cannot be captured in a graph.
//
// The choice logic is plain C++ (no CUDA), so it is unit-tested on any machine (tests/parallel).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace journey {

class Communicator;

enum class DeviceTransport { nccl, host_staged };

// "nccl" or "host-staged": the names the flag takes and the manifests print.
const char* device_transport_name(DeviceTransport t);

// A device's identity: the 16 bytes of its CUDA UUID (cudaDeviceProp::uuid), unique across
// machines, unlike a PCI bus id.
using DeviceId = std::array<uint8_t, 16>;
// "GPU-6b3d...": as nvidia-smi -L prints it.
std::string device_id_string(const DeviceId& id);

struct DeviceTransportChoice {
  DeviceTransport transport = DeviceTransport::host_staged;
  std::string why;  // "every rank has its own GPU", "ranks 0 and 1 share GPU-..." ...
};

// The transport for a group whose rank r runs on device_ids[r]. `requested`: "auto" (NCCL when
// every rank has a GPU of its own and this build has NCCL, host-staged otherwise), "nccl" or
// "host-staged" (forced). Throws journey::Error for an unknown name, and for "nccl" where NCCL
// cannot run (not built in, or two ranks on one GPU), naming the ranks and the device.
DeviceTransportChoice choose_device_transport(std::span<const DeviceId> device_ids, bool nccl_compiled_in,
                                              const std::string& requested);

// Every rank's device id, in rank order, on every rank: each rank writes its 16 bytes into its
// own slot of a zeroed [size, 16] array and one all_reduce_sum adds the slots up (a byte is exact
// in f32), so the exchange needs nothing beyond the collectives the forward pass already uses.
std::vector<DeviceId> exchange_device_ids(Communicator& communicator, const DeviceId& mine);

}  // namespace journey
