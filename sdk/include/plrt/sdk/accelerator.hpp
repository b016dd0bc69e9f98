// pl::Accelerator: an instance of an accelerator plugin (cpu, cuda, or a third party's), found by
// name.  A cheap, copyable handle: copies share one instance, which lives while any copy (or any
// Tensor allocated through it) does.  Every call throws pl::Error naming what went wrong.
#pragma once

#include <plrt/pl_accelerator.h>

#include <memory>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/runtime.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pl {

class Accelerator {
 public:
  Accelerator() = default;  // empty: defined() is false
  // `name` is a plugin name ("cpu", "cuda"), an alias ("gpu") or a path.  `options` go to the
  // plugin's create (e.g. cpu's "num_threads").  The Runtime must outlive every copy.
  Accelerator(const Runtime& runtime, const std::string& name,
              const std::vector<std::pair<std::string, std::string>>& options = {});

  bool defined() const { return impl_ != nullptr; }
  // Keeps `owner` (the shared Runtime this instance came from) alive as long as the instance, that
  // is as long as any copy or any tensor allocated through it: a module may then outlive the code
  // that made the Runtime (the trainer does this with its own).  Empty handle: pl::Error.
  void keep_alive(std::shared_ptr<const void> owner);
  const std::string& name() const;
  PL_DeviceType device_type() const;
  bool synchronous() const;  // PL_ACCEL_SYNCHRONOUS: kernels complete before they return
  const PL_AcceleratorApi* api() const;
  PL_Accelerator* get() const;
  const PL_Host* host() const;

  int device_count() const;
  std::string unavailable_reason() const;  // why device_count() is 0 ("" otherwise)
  PL_DeviceInfo device_info(int index) const;
  void set_device(int index) const;

  // ---- memory (the caller frees what it allocates) ----
  void* alloc(PL_Device device, size_t bytes) const;
  void free(PL_Device device, void* ptr) const noexcept;  // logs (never throws) on failure
  void copy(void* dst, PL_Device dst_device, const void* src, PL_Device src_device, size_t bytes) const;
  void synchronize() const;  // waits for the default stream

  // ---- staging (StagingLoader): page-locked host memory, streams, events.  The caller destroys
  // what it creates; a NULL stream is the device's default stream. ----
  void* alloc_host(size_t bytes) const;      // page-locked where the accelerator has it
  void free_host(void* ptr) const noexcept;  // logs (never throws) on failure
  // copy() on `stream`: returns once the copy is queued (asynchronous accelerators).
  void copy_async(void* dst, PL_Device dst_device, const void* src, PL_Device src_device, size_t bytes,
                  PL_Stream* stream) const;
  PL_Stream* stream_create(PL_Device device) const;
  void stream_destroy(PL_Stream* stream) const noexcept;  // logs on failure
  void stream_synchronize(PL_Stream* stream) const;
  PL_Event* event_create(PL_Device device) const;
  void event_destroy(PL_Event* event) const noexcept;  // logs on failure
  void event_record(PL_Event* event, PL_Stream* stream) const;
  void event_synchronize(PL_Event* event) const;
  void stream_wait_event(PL_Stream* stream, PL_Event* event) const;  // later work on `stream` waits

  // ---- kernels on the default stream (see pl_accelerator.h for their exact meaning) ----
  void fill(PL_Tensor& x, double value) const;
  void scale(PL_Tensor& x, double alpha) const;
  void axpy(PL_Tensor& y, double alpha, const PL_Tensor& x) const;
  void cast(PL_Tensor& dst, const PL_Tensor& src) const;
  void sgd_step(PL_Tensor& param, const PL_Tensor& grad, PL_Tensor* momentum_buf, const PL_SgdParams& p) const;
  void adam_step(PL_Tensor& param, const PL_Tensor& grad, PL_Tensor& exp_avg, PL_Tensor& exp_avg_sq,
                 const PL_AdamParams& p) const;
  void gemm(bool trans_a, bool trans_b, double alpha, const PL_Tensor& a, const PL_Tensor& b, double beta,
            PL_Tensor& c) const;
  void add_bias(PL_Tensor& y, const PL_Tensor& bias) const;
  void sum_rows(double alpha, const PL_Tensor& x, double beta, PL_Tensor& out) const;
  void relu(const PL_Tensor& x, PL_Tensor& y) const;
  void relu_backward(const PL_Tensor& y, const PL_Tensor& dy, PL_Tensor& dx) const;
  void cross_entropy(const PL_Tensor& logits, const PL_Tensor& labels, PL_Tensor& loss, PL_Tensor* grad,
                     double grad_scale) const;
  void argmax_rows(const PL_Tensor& x, PL_Tensor& out) const;
  // ABI 1.3 (mixed precision): x *= inv_scale; found_inf[0] = 1 when x held an inf or NaN.
  void unscale_check(PL_Tensor& x, double inv_scale, PL_Tensor& found_inf) const;
  // ABI 1.5 (gradient clipping): out[0] += sum of x[i]^2 in float64 (out: float64 [1] on x's device;
  // read it after synchronize()), and x = min(max(x, lo), hi) with lo <= hi, neither NaN.  A plugin
  // without these entries (built for an older minor) gets the host's own loop: x (and out) are read
  // in host memory, copied from the device and back when they live elsewhere, with the same
  // argument checks and arithmetic as the cpu reference (plugins/accelerators/cpu/kernels.hpp).
  void sum_squares(const PL_Tensor& x, PL_Tensor& out) const;
  void clamp(PL_Tensor& x, double lo, double hi) const;
  // Whether the plugin implements them (false: the host fallback above runs).
  bool has_sum_squares() const;
  bool has_clamp() const;

  bool operator==(const Accelerator& o) const { return impl_ == o.impl_; }
  bool operator!=(const Accelerator& o) const { return impl_ != o.impl_; }

  struct Impl;  // defined in sdk/src/accelerator.cpp

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace pl
