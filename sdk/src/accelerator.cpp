// pl::Accelerator: one shared plugin instance; every call turns a PL_Error into pl::Error.
#include <cstddef>
#include <plrt/sdk/accelerator.hpp>
#include <string>

#include "host_kernels.hpp"

namespace pl {

struct Accelerator::Impl {
  const PL_Host* host = nullptr;
  const PL_AcceleratorApi* api = nullptr;
  PL_Accelerator* acc = nullptr;
  std::string name;
  std::shared_ptr<const void> owner;  // destroyed after the body: the plugin outlives `destroy`
  ~Impl() {
    if (acc) api->destroy(acc);
  }
};

namespace {

const Accelerator::Impl& need(const std::shared_ptr<Accelerator::Impl>& impl) {
  if (!impl) throw Error(PL_ERR_INVALID_ARGUMENT, "pl::Accelerator: used before it was created (an empty handle)");
  return *impl;
}

// Calls an optional kernel entry, naming it when the plugin lacks it.
template <class Fn, class... Args>
void call(const Accelerator::Impl& a, Fn fn, const char* what, Args&&... args) {
  if (fn == nullptr)
    throw Error(PL_ERR_UNSUPPORTED,
                "accelerator '" + a.name + "' does not provide '" + what + "' (its plugin leaves the entry empty)");
  check(a.host, fn(a.acc, std::forward<Args>(args)...));
}

// True when the plugin's table reaches `offset + size` (entries appended by later minors).
bool has_entry(const PL_AcceleratorApi* api, size_t end) { return api->struct_size >= end; }

#define PL_ACC_ENTRY(a, field) \
  (has_entry((a).api, offsetof(PL_AcceleratorApi, field) + sizeof((a).api->field)) ? (a).api->field : nullptr)

}  // namespace

Accelerator::Accelerator(const Runtime& runtime, const std::string& name,
                         const std::vector<std::pair<std::string, std::string>>& options) {
  PluginRef ref = runtime.find(PL_PLUGIN_ACCELERATOR, name);
  auto impl = std::make_shared<Impl>();
  impl->host = runtime.host();
  impl->api = ref.api<PL_AcceleratorApi>();
  impl->name = ref.name();
  std::vector<PL_Option> items;
  for (const auto& kv : ref.presets) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
  for (const auto& kv : options) items.push_back({sizeof(PL_Option), kv.first.c_str(), kv.second.c_str()});
  PL_OptionList list{sizeof(PL_OptionList), items.data(), items.size()};
  check(impl->host, impl->api->create(impl->host, &list, &impl->acc));
  impl_ = std::move(impl);
}

const std::string& Accelerator::name() const { return need(impl_).name; }
PL_DeviceType Accelerator::device_type() const { return need(impl_).api->device_type; }
bool Accelerator::synchronous() const { return (need(impl_).api->flags & PL_ACCEL_SYNCHRONOUS) != 0; }
const PL_AcceleratorApi* Accelerator::api() const { return need(impl_).api; }
PL_Accelerator* Accelerator::get() const { return need(impl_).acc; }
const PL_Host* Accelerator::host() const { return need(impl_).host; }

int Accelerator::device_count() const {
  const auto& a = need(impl_);
  PL_DeviceAvailability av{};
  av.struct_size = sizeof av;
  check(a.host, a.api->availability(a.acc, &av));
  return av.device_count;
}

std::string Accelerator::unavailable_reason() const {
  const auto& a = need(impl_);
  PL_DeviceAvailability av{};
  av.struct_size = sizeof av;
  check(a.host, a.api->availability(a.acc, &av));
  return av.device_count > 0 ? std::string() : std::string(av.reason);
}

PL_DeviceInfo Accelerator::device_info(int index) const {
  const auto& a = need(impl_);
  PL_DeviceInfo info{};
  info.struct_size = sizeof info;
  check(a.host, a.api->device_info(a.acc, index, &info));
  return info;
}

void Accelerator::set_device(int index) const {
  const auto& a = need(impl_);
  check(a.host, a.api->set_device(a.acc, index));
}

void* Accelerator::alloc(PL_Device device, size_t bytes) const {
  const auto& a = need(impl_);
  void* p = nullptr;
  call(a, PL_ACC_ENTRY(a, alloc), "alloc", device, bytes, &p);
  return p;
}

void Accelerator::free(PL_Device device, void* ptr) const noexcept {
  if (!impl_ || ptr == nullptr) return;
  const auto& a = *impl_;
  if (a.api->free_memory == nullptr) return;
  if (PL_Error* e = a.api->free_memory(a.acc, device, ptr)) {
    std::string msg = std::string("pl::Accelerator: free_memory failed: ") + a.host->error_message(e);
    a.host->error_destroy(e);
    a.host->log(a.host->ctx, PL_LOG_WARN, "sdk", msg.c_str());
  }
}

void Accelerator::copy(void* dst, PL_Device dst_device, const void* src, PL_Device src_device, size_t bytes) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, copy), "copy", dst, dst_device, src, src_device, bytes, static_cast<PL_Stream*>(nullptr));
}

void Accelerator::synchronize() const {
  const auto& a = need(impl_);
  if (a.api->flags & PL_ACCEL_SYNCHRONOUS) return;
  call(a, PL_ACC_ENTRY(a, stream_synchronize), "stream_synchronize", static_cast<PL_Stream*>(nullptr));
}

// ---- staging: page-locked host memory, streams, events ----

namespace {

// For the noexcept releases: a failure is logged as a warning, never thrown.
void warn_on_error(const Accelerator::Impl& a, PL_Error* e, const char* what) noexcept {
  if (e == nullptr) return;
  std::string msg = std::string("pl::Accelerator: ") + what + " failed: " + a.host->error_message(e);
  a.host->error_destroy(e);
  a.host->log(a.host->ctx, PL_LOG_WARN, "sdk", msg.c_str());
}

}  // namespace

void* Accelerator::alloc_host(size_t bytes) const {
  const auto& a = need(impl_);
  void* p = nullptr;
  call(a, PL_ACC_ENTRY(a, alloc_host), "alloc_host", bytes, &p);
  return p;
}

void Accelerator::free_host(void* ptr) const noexcept {
  if (!impl_ || ptr == nullptr || impl_->api->free_host == nullptr) return;
  warn_on_error(*impl_, impl_->api->free_host(impl_->acc, ptr), "free_host");
}

void Accelerator::copy_async(void* dst, PL_Device dst_device, const void* src, PL_Device src_device, size_t bytes,
                             PL_Stream* stream) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, copy), "copy", dst, dst_device, src, src_device, bytes, stream);
}

PL_Stream* Accelerator::stream_create(PL_Device device) const {
  const auto& a = need(impl_);
  PL_Stream* s = nullptr;
  call(a, PL_ACC_ENTRY(a, stream_create), "stream_create", device, &s);
  return s;
}

void Accelerator::stream_destroy(PL_Stream* stream) const noexcept {
  if (!impl_ || stream == nullptr || impl_->api->stream_destroy == nullptr) return;
  warn_on_error(*impl_, impl_->api->stream_destroy(impl_->acc, stream), "stream_destroy");
}

void Accelerator::stream_synchronize(PL_Stream* stream) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, stream_synchronize), "stream_synchronize", stream);
}

PL_Event* Accelerator::event_create(PL_Device device) const {
  const auto& a = need(impl_);
  PL_Event* e = nullptr;
  call(a, PL_ACC_ENTRY(a, event_create), "event_create", device, &e);
  return e;
}

void Accelerator::event_destroy(PL_Event* event) const noexcept {
  if (!impl_ || event == nullptr || impl_->api->event_destroy == nullptr) return;
  warn_on_error(*impl_, impl_->api->event_destroy(impl_->acc, event), "event_destroy");
}

void Accelerator::event_record(PL_Event* event, PL_Stream* stream) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, event_record), "event_record", event, stream);
}

void Accelerator::event_synchronize(PL_Event* event) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, event_synchronize), "event_synchronize", event);
}

void Accelerator::stream_wait_event(PL_Stream* stream, PL_Event* event) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, stream_wait_event), "stream_wait_event", stream, event);
}

void Accelerator::fill(PL_Tensor& x, double value) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, fill), "fill", &x, value, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::scale(PL_Tensor& x, double alpha) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, scale), "scale", &x, alpha, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::axpy(PL_Tensor& y, double alpha, const PL_Tensor& x) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, axpy), "axpy", &y, alpha, &x, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::cast(PL_Tensor& dst, const PL_Tensor& src) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, cast), "cast", &dst, &src, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::sgd_step(PL_Tensor& param, const PL_Tensor& grad, PL_Tensor* momentum_buf,
                           const PL_SgdParams& p) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, sgd_step), "sgd_step", &param, &grad, momentum_buf, &p, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::adam_step(PL_Tensor& param, const PL_Tensor& grad, PL_Tensor& exp_avg, PL_Tensor& exp_avg_sq,
                            const PL_AdamParams& p) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, adam_step), "adam_step", &param, &grad, &exp_avg, &exp_avg_sq, &p,
       static_cast<PL_Stream*>(nullptr));
}
void Accelerator::gemm(bool trans_a, bool trans_b, double alpha, const PL_Tensor& x, const PL_Tensor& y, double beta,
                       PL_Tensor& c) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, gemm), "gemm", trans_a ? 1 : 0, trans_b ? 1 : 0, alpha, &x, &y, beta, &c,
       static_cast<PL_Stream*>(nullptr));
}
void Accelerator::add_bias(PL_Tensor& y, const PL_Tensor& bias) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, add_bias), "add_bias", &y, &bias, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::sum_rows(double alpha, const PL_Tensor& x, double beta, PL_Tensor& out) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, sum_rows), "sum_rows", alpha, &x, beta, &out, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::relu(const PL_Tensor& x, PL_Tensor& y) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, relu), "relu", &x, &y, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::relu_backward(const PL_Tensor& y, const PL_Tensor& dy, PL_Tensor& dx) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, relu_backward), "relu_backward", &y, &dy, &dx, static_cast<PL_Stream*>(nullptr));
}
void Accelerator::cross_entropy(const PL_Tensor& logits, const PL_Tensor& labels, PL_Tensor& loss, PL_Tensor* grad,
                                double grad_scale) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, cross_entropy), "cross_entropy", &logits, &labels, &loss, grad, grad_scale,
       static_cast<PL_Stream*>(nullptr));
}
void Accelerator::argmax_rows(const PL_Tensor& x, PL_Tensor& out) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, argmax_rows), "argmax_rows", &x, &out, static_cast<PL_Stream*>(nullptr));
}

void Accelerator::unscale_check(PL_Tensor& x, double inv_scale, PL_Tensor& found_inf) const {
  const auto& a = need(impl_);
  call(a, PL_ACC_ENTRY(a, unscale_check), "unscale_check", &x, inv_scale, &found_inf, static_cast<PL_Stream*>(nullptr));
}

// ABI 1.5: the plugin's entries, else the host's loops (host_kernels.hpp).
bool Accelerator::has_sum_squares() const {
  const auto& a = need(impl_);
  return PL_ACC_ENTRY(a, sum_squares) != nullptr;
}
bool Accelerator::has_clamp() const {
  const auto& a = need(impl_);
  return PL_ACC_ENTRY(a, clamp) != nullptr;
}
void Accelerator::sum_squares(const PL_Tensor& x, PL_Tensor& out) const {
  const auto& a = need(impl_);
  if (auto fn = PL_ACC_ENTRY(a, sum_squares))
    check(a.host, fn(a.acc, &x, &out, nullptr));
  else
    plrt::sdk::host_sum_squares(*this, x, out);
}
void Accelerator::clamp(PL_Tensor& x, double lo, double hi) const {
  const auto& a = need(impl_);
  if (auto fn = PL_ACC_ENTRY(a, clamp))
    check(a.host, fn(a.acc, &x, lo, hi, nullptr));
  else
    plrt::sdk::host_clamp(*this, x, lo, hi);
}

void Accelerator::keep_alive(std::shared_ptr<const void> owner) {
  if (!impl_) throw Error(PL_ERR_INVALID_ARGUMENT, "pl::Accelerator::keep_alive: an empty handle");
  impl_->owner = std::move(owner);
}

}  // namespace pl
