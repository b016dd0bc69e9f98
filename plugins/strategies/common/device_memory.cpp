#include "device_memory.hpp"

#include <utility>

namespace plrt::strategy {

using plugin::fail;

void adopt(const PL_Host* host, PL_Error* e, const std::string& context) {
  const PL_ErrorCode code = host->error_code(e);
  const char* m = host->error_message(e);
  std::string message = context + ": " + (m ? m : "(no message)");
  host->error_destroy(e);
  fail(code == PL_ERR_OK ? PL_ERR_INTERNAL : code, std::move(message));
}

void log_and_drop(const PL_Host* host, const char* source, PL_Error* e, const std::string& context) {
  if (e == nullptr) return;
  const char* m = host->error_message(e);
  plugin::logf(host, PL_LOG_WARN, source, "%s: %s", context.c_str(), m ? m : "(no message)");
  host->error_destroy(e);
}

void DeviceContext::copy(void* dst, PL_Device dst_device, const void* src, PL_Device src_device, size_t bytes,
                         const std::string& what) const {
  if (bytes == 0) return;
  check(host, api->copy(acc, dst, dst_device, src, src_device, bytes, nullptr), what);
}

DeviceMemory::DeviceMemory(const DeviceContext& ctx, size_t bytes, const std::string& what)
    : ctx_(&ctx), bytes_(bytes) {
  if (bytes == 0) return;  // nothing to hold; get() is NULL
  void* p = nullptr;
  check(ctx.host, ctx.api->alloc(ctx.acc, ctx.device, bytes, &p), what);
  if (p == nullptr)
    fail(PL_ERR_RESOURCE, what + ": the accelerator returned NULL for " + std::to_string(bytes) + " bytes");
  ptr_ = p;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    reset();
    ctx_ = std::exchange(o.ctx_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceMemory::reset() noexcept {
  if (ptr_ != nullptr && ctx_ != nullptr) {
    PL_Error* e = ctx_->api->free_memory(ctx_->acc, ctx_->device, ptr_);
    try {
      log_and_drop(ctx_->host, ctx_->source, e, "freeing a buffer of " + std::to_string(bytes_) + " bytes");
    } catch (...) {  // the message could not be built: still free the error
      if (e != nullptr) ctx_->host->error_destroy(e);
    }
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace plrt::strategy
