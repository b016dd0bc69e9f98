// Shared by pg_worker's scenarios: the options, the rank's context (runtime, store, group) and a
// buffer that lives on the group's device (cudaMalloc for --device cuda) with a host mirror.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <plrt/sdk/process_group.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <vector>

namespace pgtest {

struct Options {
  std::string scenario;
  std::map<std::string, std::string> flags;  // --name value (a flag given without a value: "1")

  std::string get(const std::string& name, const std::string& fallback = "") const {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : it->second;
  }
  long long get_int(const std::string& name, long long fallback) const;
  bool has(const std::string& name) const { return flags.count(name) != 0; }
};

struct Ctx {
  Options opt;
  pl::DistEnv env;
  std::string backend;  // --backend, default gloo
  PL_Device device{PL_DEVICE_CPU, 0};
  std::string group;  // --group: the prefix of this job's store keys
  std::unique_ptr<pl::Runtime> rt;
  std::unique_ptr<pl::Store> store;
  std::unique_ptr<pl::ProcessGroup> pg;

  int rank() const { return env.rank; }
  int world() const { return env.world_size; }
  // "[rank 1/3] " for every line this worker prints.
  std::string tag() const;
  // Creates the group with `timeout` (0: the default) on this rank's device.
  void make_group(std::chrono::milliseconds timeout);
};

// A device buffer with a host mirror; on the CPU both are the same memory.
class Buffer {
 public:
  Buffer(PL_Device device, size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint8_t* host() { return host_.data(); }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(host_.data());
  }
  size_t bytes() const { return bytes_; }
  // A tensor over the device memory: `numel` elements from element `offset`.
  PL_Tensor tensor(PL_DType dtype, int64_t numel, int64_t offset = 0);
  void upload();    // host -> device (no-op on the CPU)
  void download();  // device -> host

 private:
  PL_Device device_;
  size_t bytes_;
  std::vector<uint8_t> host_;
  void* dev_ = nullptr;
};

// Number of CUDA devices this process sees (0 when built without CUDA).
int cuda_device_count();

// Scenarios (each returns the process exit code).
int run_matrix(Ctx& ctx);

}  // namespace pgtest
