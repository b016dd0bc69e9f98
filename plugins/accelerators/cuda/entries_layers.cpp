// add_bias, sum_rows, relu, relu_backward, cross_entropy, argmax_rows: the cpu reference's shape,
// dtype and overlap checks, then the launch (kernels_layers.cu, kernels_loss.cu).  cross_entropy
// synchronises its stream before it returns, to report a bad label from this very call.
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"
#include "tensor_checks.hpp"

#include <string>

namespace plrt::cuda {
namespace {

// A vector's length must equal a matrix's column count (add_bias, sum_rows) or row count.
void check_len(const PL_Tensor* v, const char* v_name, int64_t want, const PL_Tensor* m, const char* m_name,
               const char* op, const char* which) {
  if (v->shape[0] != want)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + both_shapes(m, m_name, v, v_name) + "; " + v_name +
                                      " must have " + which + " of " + m_name + " (" + std::to_string(want) + ")");
}

// Same ndim and sizes (relu, relu_backward): any ndim, since they are element-wise.
void check_same_shape(const PL_Tensor* a, const char* a_name, const PL_Tensor* b, const char* b_name, const char* op) {
  bool same = a->ndim == b->ndim && a->numel == b->numel;
  for (int32_t d = 0; same && d < a->ndim && d < PL_MAX_DIMS; ++d) same = a->shape[d] == b->shape[d];
  if (!same)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + both_shapes(a, a_name, b, b_name) + " (numel " +
                                      std::to_string(a->numel) + " and " + std::to_string(b->numel) +
                                      "); they must match");
}

// An element-wise operand: a cuda tensor with a sane ndim and a float dtype.
void check_elementwise(const PL_Tensor* t, const char* op, const char* what) {
  check_cuda_tensor(t, op, what);
  if (t->ndim < 0 || t->ndim > PL_MAX_DIMS)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " has ndim " + std::to_string(t->ndim) +
                                      "; valid: 0.." + std::to_string(PL_MAX_DIMS));
  require_float_dtype(t, what, op);
}

}  // namespace

PL_Error* cuda_add_bias(PL_Accelerator* acc, PL_Tensor* y, const PL_Tensor* bias, PL_Stream* stream) {
  return run(acc, [&] {
    const char* op = "add_bias";
    check_shaped(y, 2, op, "y");
    check_shaped(bias, 1, op, "bias");
    require_float_dtype(y, "y", op);
    check_same_dtype(y, "y", bias, "bias", op);
    check_len(bias, "bias", y->shape[1], y, "y", op, "the column count");
    check_no_overlap(y, "y", bias, "bias", op, false);
    check_same_device(y, "y", bias, "bias", op);
    DeviceScope scope(op, *y, "y", stream);
    launch_add_bias(scope.launch(), *y, *bias);
  });
}

PL_Error* cuda_sum_rows(PL_Accelerator* acc, double alpha, const PL_Tensor* x, double beta, PL_Tensor* out,
                        PL_Stream* stream) {
  return run(acc, [&] {
    const char* op = "sum_rows";
    check_shaped(x, 2, op, "x");
    check_shaped(out, 1, op, "out");
    require_float_dtype(x, "x", op);
    check_same_dtype(x, "x", out, "out", op);
    check_len(out, "out", x->shape[1], x, "x", op, "the column count");
    check_no_overlap(out, "out", x, "x", op, false);
    check_same_device(x, "x", out, "out", op);
    DeviceScope scope(op, *x, "x", stream);
    launch_sum_rows(scope.launch(), alpha, *x, beta, *out);
  });
}

PL_Error* cuda_relu(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* y, PL_Stream* stream) {
  return run(acc, [&] {
    const char* op = "relu";
    check_elementwise(x, op, "x");
    check_elementwise(y, op, "y");
    check_same_dtype(x, "x", y, "y", op);
    check_same_shape(x, "x", y, "y", op);
    check_no_overlap(y, "y", x, "x", op, true);
    check_same_device(x, "x", y, "y", op);
    DeviceScope scope(op, *x, "x", stream);
    launch_relu(scope.launch(), *x, *y);
  });
}

PL_Error* cuda_relu_backward(PL_Accelerator* acc, const PL_Tensor* y, const PL_Tensor* dy, PL_Tensor* dx,
                             PL_Stream* stream) {
  return run(acc, [&] {
    const char* op = "relu_backward";
    check_elementwise(y, op, "y");
    check_elementwise(dy, op, "dy");
    check_elementwise(dx, op, "dx");
    check_same_dtype(y, "y", dy, "dy", op);
    check_same_dtype(y, "y", dx, "dx", op);
    check_same_shape(y, "y", dy, "dy", op);
    check_same_shape(y, "y", dx, "dx", op);
    check_no_overlap(dx, "dx", y, "y", op, false);
    check_no_overlap(dx, "dx", dy, "dy", op, true);
    check_same_device(y, "y", dy, "dy", op);
    check_same_device(y, "y", dx, "dx", op);
    DeviceScope scope(op, *y, "y", stream);
    launch_relu_backward(scope.launch(), *y, *dy, *dx);
  });
}

PL_Error* cuda_cross_entropy(PL_Accelerator* acc, const PL_Tensor* logits, const PL_Tensor* labels, PL_Tensor* loss,
                             PL_Tensor* grad, double grad_scale, PL_Stream* stream) {
  return run(acc, [&] {
    const char* op = "cross_entropy";
    check_shaped(logits, 2, op, "logits");
    check_shaped(labels, 1, op, "labels");
    check_shaped(loss, 1, op, "loss");
    require_f32_f64(logits, op, "logits");
    require_i64(labels, op, "labels");
    check_same_dtype(logits, "logits", loss, "loss", op);
    const int64_t n = logits->shape[0], c = logits->shape[1];
    check_len(labels, "labels", n, logits, "logits", op, "the row count");
    check_len(loss, "loss", n, logits, "logits", op, "the row count");
    check_no_overlap(loss, "loss", logits, "logits", op, false);
    check_no_overlap(loss, "loss", labels, "labels", op, false);
    check_same_device(logits, "logits", labels, "labels", op);
    check_same_device(logits, "logits", loss, "loss", op);
    if (grad != nullptr) {
      check_shaped(grad, 2, op, "grad");
      check_same_dtype(logits, "logits", grad, "grad", op);
      if (grad->shape[0] != n || grad->shape[1] != c)
        fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + both_shapes(logits, "logits", grad, "grad") +
                                          "; they must match");
      check_no_overlap(grad, "grad", logits, "logits", op, true);
      check_no_overlap(grad, "grad", labels, "labels", op, false);
      check_no_overlap(grad, "grad", loss, "loss", op, false);
      check_same_device(logits, "logits", grad, "grad", op);
    }
    DeviceScope scope(op, *logits, "logits", stream);
    if (n == 0) return;
    const KernelChecks::Ticket t = acc->checks.acquire(scope.device(), scope.stream());
    try {
      launch_cross_entropy(scope.launch(), *logits, *labels, *loss, grad, grad_scale, t.ref);
    } catch (...) {
      // The label check may have been launched: let it finish before the slot is reused.
      if (cudaStreamSynchronize(scope.stream()) == cudaSuccess) acc->checks.release(t);
      cudaGetLastError();
      throw;
    }
    acc->checks.wait(t, scope.stream(), op, [c](const CheckRecord& r) {
      return "label " + std::to_string(static_cast<int64_t>(r.p0)) + " at row " + std::to_string(r.key) +
             " is outside [0, " + std::to_string(c) + "): logits have " + std::to_string(c) + " classes";
    });
  });
}

PL_Error* cuda_argmax_rows(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream) {
  return run(acc, [&] {
    const char* op = "argmax_rows";
    check_shaped(x, 2, op, "x");
    check_shaped(out, 1, op, "out");
    require_f32_f64(x, op, "x");
    require_i64(out, op, "out");
    check_len(out, "out", x->shape[0], x, "x", op, "the row count");
    check_no_overlap(out, "out", x, "x", op, false);
    if (x->shape[0] > 0 && x->shape[1] == 0)
      fail(PL_ERR_INVALID_ARGUMENT, "argmax_rows: x has shape " + shape_str(x) + "; an empty row has no argmax");
    check_same_device(x, "x", out, "out", op);
    DeviceScope scope(op, *x, "x", stream);
    launch_argmax_rows(scope.launch(), *x, *out);
  });
}

}  // namespace plrt::cuda
