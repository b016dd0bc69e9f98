// The argument rules of the dense layers' kernels: gemm, add_bias, sum_rows, relu, relu_backward,
// cross_entropy, argmax_rows (see kernel_args.hpp).  They name shapes in their errors, which the
// element-wise kernels (counts only) never need.
#include <string>

#include "kernel_args.hpp"

namespace plrt::kernel_args {
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

// An element-wise operand: a tensor on the target with a sane ndim and a float dtype.
void check_elementwise(Target target, const PL_Tensor* t, const char* op, const char* what) {
  check_tensor_on(target, t, op, what);
  if (t->ndim < 0 || t->ndim > PL_MAX_DIMS)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " has ndim " + std::to_string(t->ndim) +
                                      "; valid: 0.." + std::to_string(PL_MAX_DIMS));
  require_float_dtype(t, op, what);
}

// A matrix m [rows, cols] and a vector v [cols] of its dtype, one of them written: add_bias
// (y += bias, the matrix written) and sum_rows (out = column sums of x, the vector written).
void matrix_and_column_vector(Target target, const char* op, const PL_Tensor* m, const char* m_name, const PL_Tensor* v,
                              const char* v_name, bool vector_written) {
  check_shaped(target, m, 2, op, m_name);
  check_shaped(target, v, 1, op, v_name);
  require_float_dtype(m, op, m_name);
  check_same_dtype(m, m_name, v, v_name, op);
  check_len(v, v_name, m->shape[1], m, m_name, op, "the column count");
  if (vector_written)
    check_no_overlap(v, v_name, m, m_name, op, false);
  else
    check_no_overlap(m, m_name, v, v_name, op, false);
  check_same_device(target, m, m_name, v, v_name, op);
}

void check_trans(int32_t t, const char* name) {
  if (t != 0 && t != 1)
    fail(PL_ERR_INVALID_ARGUMENT, std::string("gemm: ") + name + " " + std::to_string(t) +
                                      " is invalid; use 0 (the matrix as is) or 1 (its transpose)");
}

}  // namespace

GemmDims gemm(Target target, int32_t trans_a, int32_t trans_b, const PL_Tensor* a, const PL_Tensor* b,
              const PL_Tensor* c) {
  check_trans(trans_a, "trans_a");
  check_trans(trans_b, "trans_b");
  check_shaped(target, a, 2, "gemm", "a");
  check_shaped(target, b, 2, "gemm", "b");
  check_shaped(target, c, 2, "gemm", "c");
  require_float_dtype(a, "gemm", "a");
  check_same_dtype(a, "a", b, "b", "gemm");
  check_same_dtype(a, "a", c, "c", "gemm");

  const int64_t m = trans_a ? a->shape[1] : a->shape[0];
  const int64_t k = trans_a ? a->shape[0] : a->shape[1];
  const int64_t kb = trans_b ? b->shape[1] : b->shape[0];
  const int64_t n = trans_b ? b->shape[0] : b->shape[1];
  const std::string ops = " (trans_a " + std::to_string(trans_a) + ", trans_b " + std::to_string(trans_b) + ")";
  if (k != kb)
    fail(PL_ERR_INVALID_ARGUMENT, "gemm: " + both_shapes(a, "a", b, "b") + ops + ": op(a) is [" + std::to_string(m) +
                                      ", " + std::to_string(k) + "] and op(b) is [" + std::to_string(kb) + ", " +
                                      std::to_string(n) + "]; their inner sizes must match");
  if (c->shape[0] != m || c->shape[1] != n)
    fail(PL_ERR_INVALID_ARGUMENT, "gemm: c has shape " + shape_str(c) + " but op(a) @ op(b) is [" + std::to_string(m) +
                                      ", " + std::to_string(n) + "] (a " + shape_str(a) + ", b " + shape_str(b) + ops +
                                      ")");
  check_no_overlap(c, "c", a, "a", "gemm", false);
  check_no_overlap(c, "c", b, "b", "gemm", false);
  check_same_device(target, a, "a", b, "b", "gemm");
  check_same_device(target, a, "a", c, "c", "gemm");
  return {m, n, k};
}

int64_t blas_index(int64_t v, int64_t max, const char* op, const char* what, const char* library) {
  if (v > max)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what + " " + std::to_string(v) + " exceeds " + library +
                                      "'s index range (at most " + std::to_string(max) + ")");
  return v;
}

void add_bias(Target target, const PL_Tensor* y, const PL_Tensor* bias) {
  matrix_and_column_vector(target, "add_bias", y, "y", bias, "bias", false);
}

void sum_rows(Target target, const PL_Tensor* x, const PL_Tensor* out) {
  matrix_and_column_vector(target, "sum_rows", x, "x", out, "out", true);
}

void relu(Target target, const PL_Tensor* x, const PL_Tensor* y) {
  const char* op = "relu";
  check_elementwise(target, x, op, "x");
  check_elementwise(target, y, op, "y");
  check_same_dtype(x, "x", y, "y", op);
  check_same_shape(x, "x", y, "y", op);
  check_no_overlap(y, "y", x, "x", op, true);
  check_same_device(target, x, "x", y, "y", op);
}

void relu_backward(Target target, const PL_Tensor* y, const PL_Tensor* dy, const PL_Tensor* dx) {
  const char* op = "relu_backward";
  check_elementwise(target, y, op, "y");
  check_elementwise(target, dy, op, "dy");
  check_elementwise(target, dx, op, "dx");
  check_same_dtype(y, "y", dy, "dy", op);
  check_same_dtype(y, "y", dx, "dx", op);
  check_same_shape(y, "y", dy, "dy", op);
  check_same_shape(y, "y", dx, "dx", op);
  check_no_overlap(dx, "dx", y, "y", op, false);
  check_no_overlap(dx, "dx", dy, "dy", op, true);
  check_same_device(target, y, "y", dy, "dy", op);
  check_same_device(target, y, "y", dx, "dx", op);
}

void cross_entropy(Target target, const PL_Tensor* logits, const PL_Tensor* labels, const PL_Tensor* loss,
                   const PL_Tensor* grad) {
  const char* op = "cross_entropy";
  check_shaped(target, logits, 2, op, "logits");
  check_shaped(target, labels, 1, op, "labels");
  check_shaped(target, loss, 1, op, "loss");
  require_f32_f64(logits, op, "logits");
  require_i64(labels, op, "labels");
  check_same_dtype(logits, "logits", loss, "loss", op);
  const int64_t n = logits->shape[0], c = logits->shape[1];
  check_len(labels, "labels", n, logits, "logits", op, "the row count");
  check_len(loss, "loss", n, logits, "logits", op, "the row count");
  check_no_overlap(loss, "loss", logits, "logits", op, false);
  check_no_overlap(loss, "loss", labels, "labels", op, false);
  check_same_device(target, logits, "logits", labels, "labels", op);
  check_same_device(target, logits, "logits", loss, "loss", op);
  if (grad == nullptr) return;
  check_shaped(target, grad, 2, op, "grad");
  check_same_dtype(logits, "logits", grad, "grad", op);
  if (grad->shape[0] != n || grad->shape[1] != c)
    fail(PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": " + both_shapes(logits, "logits", grad, "grad") + "; they must match");
  check_no_overlap(grad, "grad", logits, "logits", op, true);
  check_no_overlap(grad, "grad", labels, "labels", op, false);
  check_no_overlap(grad, "grad", loss, "loss", op, false);
  check_same_device(target, logits, "logits", grad, "grad", op);
}

std::string label_message(int64_t label, int64_t row, int64_t classes) {
  return "label " + std::to_string(label) + " at row " + std::to_string(row) + " is outside [0, " +
         std::to_string(classes) + "): logits have " + std::to_string(classes) + " classes";
}

void argmax_rows(Target target, const PL_Tensor* x, const PL_Tensor* out) {
  const char* op = "argmax_rows";
  check_shaped(target, x, 2, op, "x");
  check_shaped(target, out, 1, op, "out");
  require_f32_f64(x, op, "x");
  require_i64(out, op, "out");
  check_len(out, "out", x->shape[0], x, "x", op, "the row count");
  check_no_overlap(out, "out", x, "x", op, false);
  if (x->shape[0] > 0 && x->shape[1] == 0)
    fail(PL_ERR_INVALID_ARGUMENT, "argmax_rows: x has shape " + shape_str(x) + "; an empty row has no argmax");
  check_same_device(target, x, "x", out, "out", op);
}

}  // namespace plrt::kernel_args
