// The building blocks of the argument rules (see arg_checks.hpp).
#include "arg_checks.hpp"

#include <charconv>

namespace plrt::kernel_args {

std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string num(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string device_name(PL_Device d) {
  const char* type = d.type == PL_DEVICE_CPU ? "cpu" : d.type == PL_DEVICE_CUDA ? "cuda" : nullptr;
  std::string t = type ? type : "device type " + std::to_string(d.type);
  return t + ":" + std::to_string(d.index);
}

void check_tensor_on(Target target, const PL_Tensor* t, const char* op, const char* what) {
  plrt::plugin::check_tensor(t, (std::string(op) + ": " + what).c_str());
  const std::string where = std::string(op) + ": " + what + " is on " + device_name(t->device);
  if (target == Target::cpu && t->device.type != PL_DEVICE_CPU)
    fail(PL_ERR_INVALID_ARGUMENT, where + "; the cpu accelerator takes host (cpu) tensors only");
  if (target == Target::cuda && t->device.type != PL_DEVICE_CUDA)
    fail(PL_ERR_INVALID_ARGUMENT, where +
                                      "; the cuda accelerator's kernels take tensors in CUDA device memory only "
                                      "(copy host data to a cuda device first)");
}

void check_same_device(Target target, const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name,
                       const char* op) {
  if (target == Target::cpu) return;  // one host: the index means nothing
  if (a->device.index != b->device.index)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + a_name + " is on " + device_name(a->device) + " but " +
                                      b_name + " is on " + device_name(b->device) +
                                      "; the tensors of one call must be on the same device");
}

void check_same_numel(const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name, const char* op) {
  if (a->numel != b->numel)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + a_name + " has " + std::to_string(a->numel) +
                                      " elements but " + b_name + " has " + std::to_string(b->numel) +
                                      "; they must match");
}

void check_same_dtype(const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name, const char* op) {
  if (a->dtype != b->dtype)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + a_name + " is " + pl_dtype_name(a->dtype) + " but " +
                                      b_name + " is " + pl_dtype_name(b->dtype) + "; they must have the same dtype");
}

namespace {

[[noreturn]] void unsupported(const PL_Tensor* t, const char* op, const char* what, const char* supported) {
  fail(PL_ERR_UNSUPPORTED,
       std::string(op) + ": " + what + " has dtype " + pl_dtype_name(t->dtype) + "; supported: " + supported);
}

}  // namespace

void require_float_dtype(const PL_Tensor* t, const char* op, const char* what) {
  if (!is_float_dtype(t->dtype)) unsupported(t, op, what, "float32, float64, float16, bfloat16");
}

void require_f32_f64(const PL_Tensor* t, const char* op, const char* what) {
  if (t->dtype != PL_F32 && t->dtype != PL_F64) unsupported(t, op, what, "float32, float64");
}

void require_i64(const PL_Tensor* t, const char* op, const char* what) {
  if (t->dtype != PL_I64) unsupported(t, op, what, "int64");
}

std::string shape_str(const PL_Tensor* t) {
  std::string s = "[";
  for (int32_t d = 0; d < t->ndim && d < PL_MAX_DIMS; ++d) s += (d ? ", " : "") + std::to_string(t->shape[d]);
  return s + "]";
}

std::string both_shapes(const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name) {
  return std::string(a_name) + " has shape " + shape_str(a) + " but " + b_name + " has shape " + shape_str(b);
}

void check_shaped(Target target, const PL_Tensor* t, int32_t ndim, const char* op, const char* what) {
  check_tensor_on(target, t, op, what);
  const char* kind = ndim == 1 ? "a vector (ndim 1)" : "a matrix (ndim 2)";
  if (t->ndim != ndim)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " must be " + kind + " but has ndim " +
                                      std::to_string(t->ndim) +
                                      (t->ndim >= 0 && t->ndim <= PL_MAX_DIMS ? ", shape " + shape_str(t) : ""));
  int64_t n = 1;
  for (int32_t d = 0; d < ndim; ++d) {
    if (t->shape[d] < 0)
      fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " has a negative size in shape " + shape_str(t));
    n *= t->shape[d];
  }
  if (n != t->numel)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " has shape " + shape_str(t) + " (" +
                                      std::to_string(n) + " elements) but numel " + std::to_string(t->numel));
}

void check_no_overlap(const PL_Tensor* out, const char* out_name, const PL_Tensor* in, const char* in_name,
                      const char* op, bool exact_alias_ok) {
  if (out->numel == 0 || in->numel == 0) return;
  const auto o = reinterpret_cast<uintptr_t>(out->data), i = reinterpret_cast<uintptr_t>(in->data);
  const uintptr_t o_end = o + static_cast<uintptr_t>(out->numel) * pl_dtype_size(out->dtype);
  const uintptr_t i_end = i + static_cast<uintptr_t>(in->numel) * pl_dtype_size(in->dtype);
  if (o >= i_end || i >= o_end) return;
  if (exact_alias_ok && o == i && o_end == i_end) return;
  fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + out_name + " overlaps " + in_name +
                                    (exact_alias_ok ? "; it must be the same buffer or a separate one"
                                                    : "; the output must be a separate buffer"));
}

}  // namespace plrt::kernel_args
