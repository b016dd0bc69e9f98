// Device memory owned through the accelerator's table, and the conversion of another plugin's
// PL_Error (the accelerator's, the process group's) into this plugin's plugin::Failure, keeping
// its code and message behind a context that says what the strategy was doing.
#pragma once

#include <cstddef>
#include <string>

#include "plugin_support.hpp"

namespace plrt::strategy {

// Frees `e` and throws plugin::Failure(code of e, context + ": " + message of e).
[[noreturn]] void adopt(const PL_Host* host, PL_Error* e, const std::string& context);
inline void check(const PL_Host* host, PL_Error* e, const std::string& context) {
  if (e != nullptr) adopt(host, e, context);
}

// Logs (warn, from `source`) and frees an error that cannot be returned (cleanup paths).
void log_and_drop(const PL_Host* host, const char* source, PL_Error* e, const std::string& context);

// The accelerator a strategy instance works with, and the device its buffers live on.
struct DeviceContext {
  const PL_Host* host = nullptr;
  const char* source = "strategy";  // log source (static: the plugin's name)
  const PL_AcceleratorApi* api = nullptr;
  PL_Accelerator* acc = nullptr;
  PL_Device device{PL_DEVICE_CPU, 0};

  // Copies on the default stream (which an asynchronous accelerator synchronises for a NULL
  // stream), so the bytes are in place when it returns.  `what` names the copy in errors.
  void copy(void* dst, PL_Device dst_device, const void* src, PL_Device src_device, size_t bytes,
            const std::string& what) const;
};

// `bytes` on ctx.device, freed by the destructor.  Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceContext& ctx, size_t bytes, const std::string& what);
  ~DeviceMemory() { reset(); }
  DeviceMemory(DeviceMemory&& o) noexcept { *this = std::move(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void reset() noexcept;

 private:
  const DeviceContext* ctx_ = nullptr;  // the strategy's, which outlives its buffers
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace plrt::strategy
