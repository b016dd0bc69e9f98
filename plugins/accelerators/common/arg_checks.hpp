// The building blocks of the kernels' argument rules (kernel_args.hpp): descriptor, device, dtype,
// count, shape and overlap checks, and the number and device formatting their messages use.
// Every check throws plrt::plugin::Failure (fail()) with a message that starts "<op>: " and names
// the argument, the bad value and what would be valid.  Pure host code: no data is read.
#pragma once

#include <plrt/pl_accelerator.h>

#include <cstdint>
#include <string>

#include "plugin_support.hpp"

namespace plrt::kernel_args {

using plrt::plugin::fail;

// Which tensors a plugin's kernels take; the only way the cpu and cuda rules differ.
//  cpu:  device.type PL_DEVICE_CPU; the index is not checked (all host memory is one device).
//  cuda: device.type PL_DEVICE_CUDA, and the tensors of one call on the same index (whether that
//        index names a visible device is the plugin's own check, made when it selects the device).
enum class Target {
  cpu,
  cuda
};

// A number in its shortest form that reads back exactly ("0.1", "10", "1e+30", "nan").  The float
// overload prints a float's own shortest form ("3e+38", not the digits of its double widening).
std::string num(double v);
std::string num(float v);

// "cpu:0", "cuda:1", "device type 7:0".
std::string device_name(PL_Device d);

inline bool is_float_dtype(PL_DType d) { return d == PL_F32 || d == PL_F64 || d == PL_F16 || d == PL_BF16; }
inline bool is_int_dtype(PL_DType d) { return d == PL_I32 || d == PL_I64 || d == PL_U8; }

// plrt::plugin::check_tensor (NULL, struct_size, dtype, numel, data), then the device type.
void check_tensor_on(Target target, const PL_Tensor* t, const char* op, const char* what);

// cuda: `b` must be on `a`'s device index.  cpu: nothing to check.
void check_same_device(Target target, const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name,
                       const char* op);

void check_same_numel(const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name, const char* op);
void check_same_dtype(const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name, const char* op);

// PL_ERR_UNSUPPORTED unless the dtype is one the kernel implements.
void require_float_dtype(const PL_Tensor* t, const char* op, const char* what);  // f32, f64, f16, bf16
void require_f32_f64(const PL_Tensor* t, const char* op, const char* what);
void require_i64(const PL_Tensor* t, const char* op, const char* what);

// "[3, 4]"
std::string shape_str(const PL_Tensor* t);
// "a has shape [3, 4] but b has shape [4]", for mismatch messages.
std::string both_shapes(const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name);

// check_tensor_on, then ndim == `ndim` (1 or 2) with non-negative sizes whose product is numel: a
// descriptor whose shape and count disagree would make a kernel index past the buffer.
void check_shaped(Target target, const PL_Tensor* t, int32_t ndim, const char* op, const char* what);

// `out` must not share memory with `in`; with exact_alias_ok, the very same buffer (an in-place
// call the entry allows) is fine.  Addresses only: nothing is read.
void check_no_overlap(const PL_Tensor* out, const char* out_name, const PL_Tensor* in, const char* in_name,
                      const char* op, bool exact_alias_ok);

}  // namespace plrt::kernel_args
