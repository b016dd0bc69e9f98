// Internal helpers of the CPU kernels: per-dtype traits and the dispatch onto them.  The argument
// checks are the shared rules (plugins/accelerators/common/kernel_args.hpp) with Target::cpu.  Not
// part of the kernels' interface (kernels.hpp).
#pragma once

#include <cstdint>

#include "dtype_dispatch.hpp"
#include "half.hpp"
#include "kernel_args.hpp"
#include "kernels.hpp"

namespace plrt::cpu::detail {

using kernel_args::Case;
using plrt::plugin::fail;

// What every check here is given: the cpu accelerator takes host tensors.
constexpr kernel_args::Target kTarget = kernel_args::Target::cpu;

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
  kernel_args::dispatch<Case<PL_F32, F32>, Case<PL_F64, F64>, Case<PL_F16, F16>, Case<PL_BF16, BF16>>(
      dtype, "dispatch_float", f);
}

// Calls f(float{}) or f(double{}) (the loss and argmax kernels); the caller has checked the dtype.
template <class F>
void dispatch_f32_f64(PL_DType dtype, F&& f) {
  kernel_args::dispatch<Case<PL_F32, float>, Case<PL_F64, double>>(dtype, "dispatch_f32_f64", f);
}

template <class Tr>
typename Tr::Storage* data_of(const PL_Tensor* t) {
  return static_cast<typename Tr::Storage*>(t->data);
}

}  // namespace plrt::cpu::detail
