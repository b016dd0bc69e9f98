// add_bias, sum_rows, relu, relu_backward, cross_entropy, argmax_rows: the layer kernels of the CPU
// accelerator besides gemm (see kernels.hpp).  Plain loops over contiguous rows, which the
// compiler vectorises (no fused multiply-add: the library builds with -ffp-contract=off).  The
// first four take every float dtype (ABI 1.3); the loss and argmax stay float32/float64.
#include <cmath>
#include <vector>

#include "kernels.hpp"
#include "kernels_detail.hpp"

namespace plrt::cpu {
namespace {

using namespace detail;

// The loops take a dtype's traits (kernels_detail.hpp): for float32/float64 load and store are the
// identity, so they compile to the plain loops; float16/bfloat16 widen exactly, compute in float
// and round once on store.

template <class Tr>
void add_bias_loop(typename Tr::Storage* y, const typename Tr::Storage* bias, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    typename Tr::Storage* row = y + i * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] = Tr::store(Tr::load(row[j]) + Tr::load(bias[j]));
  }
}

template <class Tr>
void sum_rows_loop(double alpha, const typename Tr::Storage* x, int64_t rows, int64_t cols, double beta,
                   typename Tr::Storage* out) {
  using C = typename Tr::C;
  // Row after row into a column accumulator: contiguous inner loops that vectorise.
  std::vector<C> acc(static_cast<size_t>(cols), C(0));
  C* s = acc.data();
  for (int64_t i = 0; i < rows; ++i) {
    const typename Tr::Storage* row = x + i * cols;
    for (int64_t j = 0; j < cols; ++j) s[j] = s[j] + Tr::load(row[j]);
  }
  const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
  if (beta == 0) {
    for (int64_t j = 0; j < cols; ++j) out[j] = Tr::store(a * s[j]);
  } else {
    for (int64_t j = 0; j < cols; ++j) out[j] = Tr::store(a * s[j] + b * Tr::load(out[j]));
  }
}

// Values pass through as stored (a NaN keeps its bits); only negatives become +0.
template <class Tr>
void relu_loop(const typename Tr::Storage* x, typename Tr::Storage* y, int64_t n) {
  using C = typename Tr::C;
  const typename Tr::Storage zero = Tr::store(C(0));
  for (int64_t i = 0; i < n; ++i) y[i] = Tr::load(x[i]) < C(0) ? zero : x[i];
}

template <class Tr>
void relu_backward_loop(const typename Tr::Storage* y, const typename Tr::Storage* dy, typename Tr::Storage* dx,
                        int64_t n) {
  using C = typename Tr::C;
  const typename Tr::Storage zero = Tr::store(C(0));
  // dy read unconditionally: a load under the condition would keep the loop from vectorising.
  for (int64_t i = 0; i < n; ++i) {
    const typename Tr::Storage g = dy[i];
    dx[i] = Tr::load(y[i]) > C(0) ? g : zero;
  }
}

// One row of cross_entropy.  g may be x (the same row): each x[j] is read before g[j] is written.
template <class T>
T cross_entropy_row(const T* x, int64_t c, int64_t label, T* g, T scale) {
  T mx = x[0];
  for (int64_t j = 1; j < c; ++j) mx = x[j] > mx ? x[j] : mx;
  T s = 0;
  for (int64_t j = 0; j < c; ++j) s += std::exp(x[j] - mx);
  // log(s) - (x[label] - mx) rather than mx + log(s) - x[label]: no cancellation of large logits.
  const T loss = std::log(s) - (x[label] - mx);
  if (g != nullptr) {
    const T inv = T(1) / s;
    for (int64_t j = 0; j < c; ++j) g[j] = scale * (std::exp(x[j] - mx) * inv - (j == label ? T(1) : T(0)));
  }
  return loss;
}

template <class T>
void argmax_loop(const T* x, int64_t rows, int64_t cols, int64_t* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = x + i * cols;
    int64_t best = 0;
    for (int64_t j = 1; j < cols && !std::isnan(row[best]); ++j)
      if (row[j] > row[best] || std::isnan(row[j])) best = j;
    out[i] = best;
  }
}

}  // namespace

void add_bias(const PL_Tensor* y, const PL_Tensor* bias) {
  kernel_args::add_bias(kTarget, y, bias);
  dispatch_float(y->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    add_bias_loop<Tr>(data_of<Tr>(y), data_of<Tr>(bias), y->shape[0], y->shape[1]);
  });
}

void sum_rows(double alpha, const PL_Tensor* x, double beta, const PL_Tensor* out) {
  kernel_args::sum_rows(kTarget, x, out);
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    sum_rows_loop<Tr>(alpha, data_of<Tr>(x), x->shape[0], x->shape[1], beta, data_of<Tr>(out));
  });
}

void relu(const PL_Tensor* x, const PL_Tensor* y) {
  kernel_args::relu(kTarget, x, y);
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    relu_loop<Tr>(data_of<Tr>(x), data_of<Tr>(y), x->numel);
  });
}

void relu_backward(const PL_Tensor* y, const PL_Tensor* dy, const PL_Tensor* dx) {
  kernel_args::relu_backward(kTarget, y, dy, dx);
  dispatch_float(y->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    relu_backward_loop<Tr>(data_of<Tr>(y), data_of<Tr>(dy), data_of<Tr>(dx), y->numel);
  });
}

void cross_entropy(const PL_Tensor* logits, const PL_Tensor* labels, const PL_Tensor* loss, const PL_Tensor* grad,
                   double grad_scale) {
  kernel_args::cross_entropy(kTarget, logits, labels, loss, grad);
  const int64_t n = logits->shape[0], c = logits->shape[1];
  // Every label first, so that a bad one leaves the outputs untouched.
  const int64_t* lab = static_cast<const int64_t*>(labels->data);
  for (int64_t i = 0; i < n; ++i)
    if (lab[i] < 0 || lab[i] >= c)
      fail(PL_ERR_INVALID_ARGUMENT, "cross_entropy: " + kernel_args::label_message(lab[i], i, c));
  dispatch_f32_f64(logits->dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits->data);
    T* l = static_cast<T*>(loss->data);
    T* g = grad != nullptr ? static_cast<T*>(grad->data) : nullptr;
    const T scale = static_cast<T>(grad_scale);
    for (int64_t i = 0; i < n; ++i) l[i] = cross_entropy_row(x + i * c, c, lab[i], g ? g + i * c : nullptr, scale);
  });
}

void argmax_rows(const PL_Tensor* x, const PL_Tensor* out) {
  kernel_args::argmax_rows(kTarget, x, out);
  dispatch_f32_f64(x->dtype, [&](auto tag) {
    using T = decltype(tag);
    argmax_loop(static_cast<const T*>(x->data), x->shape[0], x->shape[1], static_cast<int64_t*>(out->data));
  });
}

}  // namespace plrt::cpu
