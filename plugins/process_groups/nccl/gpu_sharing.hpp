// One GPU per rank: NCCL cannot run two ranks of a communicator on one GPU, and says so only as an
// obscure failure inside ncclCommInitRank.  Before the communicator is made, every rank publishes
// which GPU it drives through the store and reads everyone's; if two ranks share one, every rank
// fails alike with a message that names them and what to do instead.
//
// A GPU is identified as NCCL identifies it: the host (its name and boot id, or $NCCL_HOSTID as
// NCCL reads it; containers on one machine share the boot id, and so one physical GPU) and the
// GPU's PCI bus id.  The device index is only for the message (CUDA_VISIBLE_DEVICES may number one
// GPU differently in two processes).  Plain C++ and the store: no CUDA here (the caller finds the
// PCI bus id), so the check is testable without a GPU.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "store_client.hpp"

namespace plrt::nccl {

struct GpuIdentity {
  std::string hostname;  // for messages
  std::string host_id;   // what tells hosts apart: hostname + boot id, or $NCCL_HOSTID
  std::string pci;       // "0000:1b:00.0" (lower case)
  int device = 0;        // the CUDA device index in that rank's process

  bool same_gpu(const GpuIdentity& o) const { return host_id == o.host_id && pci == o.pci; }
};

// This host's name and id (see above).
GpuIdentity this_host();

// The store value of an identity, and back.  decode throws plugin::Failure (PL_ERR_RUNTIME) naming
// `key` when the value is not one (another program's key, or another plrt version).
std::string encode(const GpuIdentity& g);
GpuIdentity decode(const std::string& value, const std::string& key);

// "" when every rank has its own GPU; otherwise the message that names every shared GPU.
std::string shared_gpu_message(const std::vector<GpuIdentity>& by_rank);

// Publishes `mine` under `key_prefix` + rank, waits (until `deadline`) for every rank's, and throws
// plugin::Failure: PL_ERR_INVALID_ARGUMENT when a GPU is shared, the store's code (a timeout)
// naming the ranks that never published theirs.
void check_one_gpu_per_rank(const pg::StoreClient& store, const std::string& key_prefix, int rank, int world,
                            const GpuIdentity& mine, std::chrono::steady_clock::time_point deadline);

}  // namespace plrt::nccl
