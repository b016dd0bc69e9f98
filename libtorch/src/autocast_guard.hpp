// libtorch's autocast for one step of a pl::torch::LightningModule: what Python's
// `with torch.autocast(device_type, dtype):` does on entry and exit, in C++ (libtorch has no guard
// of its own).  Entry: autocast on for the device's type with the compute dtype (bfloat16 for
// bf16-mixed, float16 for 16-mixed), one nesting level more.  Exit: the nesting level back, the
// cast cache cleared when it reaches 0 (as Python's), the previous enabled flag and dtype back.
// Autocast's state is thread-local, as the step is.  Backward runs outside it (PyTorch's advice).
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace pl::torch::detail {

class AutocastGuard {
 public:
  // dtype: the compute dtype, or at::ScalarType::Undefined for none (32-true: the guard does nothing).
  AutocastGuard(bool cuda, at::ScalarType dtype) : cuda_(cuda), on_(dtype != at::ScalarType::Undefined) {
    if (!on_) return;
    prev_enabled_ = enabled();
    prev_dtype_ = get_dtype();
    set_enabled(true);
    set_dtype(dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_enabled(prev_enabled_);
    set_dtype(prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  // torch 2.4 replaced the per-device functions by ones taking the device type (the old ones are
  // deprecated there); 1.13 (Debian's) has only the old ones.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::DeviceType type() const { return cuda_ ? at::kCUDA : at::kCPU; }
  bool enabled() const { return at::autocast::is_autocast_enabled(type()); }
  void set_enabled(bool on) const { at::autocast::set_autocast_enabled(type(), on); }
  at::ScalarType get_dtype() const { return at::autocast::get_autocast_dtype(type()); }
  void set_dtype(at::ScalarType d) const { at::autocast::set_autocast_dtype(type(), d); }
#else
  bool enabled() const { return cuda_ ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
  void set_enabled(bool on) const { cuda_ ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on); }
  at::ScalarType get_dtype() const {
    return cuda_ ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
  }
  void set_dtype(at::ScalarType d) const {
    cuda_ ? at::autocast::set_autocast_gpu_dtype(d) : at::autocast::set_autocast_cpu_dtype(d);
  }
#endif
  bool cuda_, on_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::ScalarType::Undefined;
};

}  // namespace pl::torch::detail
