// Internal helpers of the CPU kernels: argument checks, number formatting and per-dtype traits.
// Not part of the kernels' interface (kernels.hpp).
#pragma once

#include "half.hpp"
#include "kernels.hpp"
#include "plugin_support.hpp"

#include <charconv>
#include <cstdint>
#include <string>

namespace plrt::cpu::detail {

using plrt::plugin::fail;

// A number in its shortest form that reads back exactly ("0.1", "10", "1e+30", "nan").  The float
// overload prints a float's own shortest form ("3e+38", not the digits of its double widening).
inline std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
inline std::string num(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

inline std::string device_name(PL_Device d) {
  const char* type = d.type == PL_DEVICE_CPU ? "cpu" : d.type == PL_DEVICE_CUDA ? "cuda" : nullptr;
  std::string t = type ? type : "device type " + std::to_string(d.type);
  return t + ":" + std::to_string(d.index);
}

// check_tensor, then the device.  `op` and `what` name the kernel and the argument.
inline void check_cpu_tensor(const PL_Tensor* t, const char* op, const char* what) {
  plrt::plugin::check_tensor(t, (std::string(op) + ": " + what).c_str());
  if (t->device.type != PL_DEVICE_CPU)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " is on " + device_name(t->device) +
                                      "; the cpu accelerator takes host (cpu) tensors only");
}

inline void check_same_numel(const PL_Tensor* a, const char* a_name, const PL_Tensor* b,
                             const char* b_name, const char* op) {
  if (a->numel != b->numel)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + a_name + " has " + std::to_string(a->numel) +
                                      " elements but " + b_name + " has " + std::to_string(b->numel) +
                                      "; they must match");
}

inline void check_same_dtype(const PL_Tensor* a, const char* a_name, const PL_Tensor* b,
                             const char* b_name, const char* op) {
  if (a->dtype != b->dtype)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + a_name + " is " + pl_dtype_name(a->dtype) +
                                      " but " + b_name + " is " + pl_dtype_name(b->dtype) +
                                      "; they must have the same dtype");
}

inline bool is_float_dtype(PL_DType d) { return d == PL_F32 || d == PL_F64 || d == PL_F16 || d == PL_BF16; }

inline void require_float_dtype(const PL_Tensor* t, const char* what, const char* op) {
  if (!is_float_dtype(t->dtype))
    fail(PL_ERR_UNSUPPORTED, std::string(op) + ": " + what + " has dtype " + pl_dtype_name(t->dtype) +
                                 "; supported: float32, float64, float16, bfloat16");
}

// ---- float dtype traits: storage type, compute type C, load (exact) and store (round once) ----

struct F32 {
  using Storage = float;
  using C = float;
  static float load(float x) { return x; }
  static float store(float v) { return v; }
  static float from_double(double v) { return static_cast<float>(v); }
};
struct F64 {
  using Storage = double;
  using C = double;
  static double load(double x) { return x; }
  static double store(double v) { return v; }
  static double from_double(double v) { return v; }
};
struct F16 {
  using Storage = uint16_t;
  using C = float;
  static float load(uint16_t x) { return f16_to_f32(x); }
  static uint16_t store(float v) { return f32_to_f16(v); }
  static uint16_t from_double(double v) { return f64_to_f16(v); }
};
struct BF16 {
  using Storage = uint16_t;
  using C = float;
  static float load(uint16_t x) { return bf16_to_f32(x); }
  static uint16_t store(float v) { return f32_to_bf16(v); }
  static uint16_t from_double(double v) { return f64_to_bf16(v); }
};

// Calls f(Traits{}) for a float dtype; the caller has checked that `dtype` is one.
template <class F>
void dispatch_float(PL_DType dtype, F&& f) {
  switch (dtype) {
    case PL_F32: f(F32{}); return;
    case PL_F64: f(F64{}); return;
    case PL_F16: f(F16{}); return;
    case PL_BF16: f(BF16{}); return;
    default: fail(PL_ERR_INTERNAL, std::string("dispatch_float: ") + pl_dtype_name(dtype));
  }
}

template <class Tr>
typename Tr::Storage* data_of(const PL_Tensor* t) {
  return static_cast<typename Tr::Storage*>(t->data);
}

}  // namespace plrt::cpu::detail
