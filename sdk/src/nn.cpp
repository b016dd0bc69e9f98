// pl::nn: Linear, ReLU and cross_entropy over the accelerator's layer kernels (ABI 1.2).
#include <cmath>
#include <plrt/sdk/amp.hpp>
#include <plrt/sdk/nn.hpp>
#include <string>
#include <vector>

#include "sdk_internal.hpp"

namespace pl::nn {

namespace {

bool same_place(PL_Device a, PL_Device b) {
  return a.type == b.type && (a.type == PL_DEVICE_CPU || a.index == b.index);
}

std::string device_text(PL_Device d) {
  return (d.type == PL_DEVICE_CPU    ? std::string("cpu")
          : d.type == PL_DEVICE_CUDA ? std::string("cuda")
                                     : "type " + std::to_string(d.type)) +
         ":" + std::to_string(d.index);
}

using plrt::sdk::describe;

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* a0 = static_cast<const char*>(a.data());
  const auto* b0 = static_cast<const char*>(b.data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// `buf` when it already has this shape, dtype and place (and is not `avoid`'s memory), else a new
// tensor: the activation buffers are allocated once while the batch shape repeats.
Tensor& reuse(Tensor& buf, const Accelerator& acc, PL_Device device, const Shape& shape, PL_DType dtype,
              const Tensor& avoid) {
  const bool fits = buf.defined() && buf.shape() == shape && buf.dtype() == dtype && same_place(buf.device(), device) &&
                    buf.accelerator() == acc && !overlaps(buf, avoid);
  if (!fits) buf = Tensor::empty(acc, device, shape, dtype);
  return buf;
}

void check_matrix(const Tensor& t, const char* op, const char* what, int64_t cols, PL_DType dtype, PL_Device device) {
  const std::string head = std::string(op) + ": " + what;
  if (!t.defined()) throw Error(PL_ERR_INVALID_ARGUMENT, head + " is an undefined tensor");
  if (t.dim() != 2 || t.size(1) != cols)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                head + " has shape " + shape_text(t.shape()) + "; expected [N, " + std::to_string(cols) + "]");
  if (t.dtype() != dtype)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                head + " is " + pl_dtype_name(t.dtype()) + " but the layer computes in " + pl_dtype_name(dtype));
  if (!same_place(t.device(), device))
    throw Error(PL_ERR_INVALID_ARGUMENT, head + " is on " + device_text(t.device()) + " but the module is on " +
                                             device_text(device) + "; move the batch there first");
}

// The accelerator owning a tensor the layer reads, for layers that are not modules.
const Accelerator& owner(const Tensor& t, const char* op, const char* what) {
  if (!t.accelerator().defined())
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + what +
                                             " is a plain host tensor with no accelerator to compute on; pass the "
                                             "output of a layer placed with module.to(accelerator, device), or a "
                                             "tensor made with Tensor::empty(accelerator, device, ...)");
  return t.accelerator();
}

}  // namespace

// ---- Linear ----

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator* gen, PL_DType dtype)
    : in_(in_features), out_(out_features) {
  if (in_features < 1 || out_features < 1)
    throw Error(PL_ERR_INVALID_ARGUMENT, "nn::Linear(" + std::to_string(in_features) + ", " +
                                             std::to_string(out_features) + "): both sizes must be >= 1");
  if (dtype != PL_F32 && dtype != PL_F64)
    throw Error(PL_ERR_INVALID_ARGUMENT,
                std::string("nn::Linear: dtype ") + pl_dtype_name(dtype) + " is not supported; use float32 or float64");
  Generator& g = gen != nullptr ? *gen : global_generator();
  // torch.nn.Linear: kaiming_uniform(a = sqrt(5)) on the weight and the bias's fan-in bound both
  // come to U(-1/sqrt(in), 1/sqrt(in)).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  auto draw = [&](Shape shape) {
    Tensor t = Tensor::empty(std::move(shape), dtype);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = g.uniform(-bound, bound);
      if (dtype == PL_F32)
        t.data_ptr<float>()[i] = static_cast<float>(v);
      else
        t.data_ptr<double>()[i] = v;
    }
    return t;
  };
  weight_ = &register_parameter("weight", draw({out_features, in_features}));
  if (bias) bias_ = &register_parameter("bias", draw({out_features}));
}

const Accelerator& Linear::need_accelerator(const char* what) const {
  const Accelerator& acc = accelerator();
  if (!acc.defined())
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string("nn::Linear::") + what +
                                             ": the module has no accelerator yet; call module.to(accelerator, device) "
                                             "on it (or its root module) first, or let the Trainer place it");
  return acc;
}

Tensor Linear::forward(const Tensor& x) {
  const Accelerator& acc = need_accelerator("forward");
  const PL_DType dtype = weight_->value.dtype();
  const PL_DType low = dtype == PL_F32 ? amp::compute_dtype() : PL_DTYPE_INVALID;
  low_ = low;
  if (low == PL_DTYPE_INVALID) {
    check_matrix(x, "nn::Linear::forward", "x", in_, dtype, device());
    Tensor& y = reuse(y_, acc, device(), {x.size(0), out_}, dtype, x);
    PL_Tensor xv = x.view(), wv = weight_->value.view(), yv = y.view();
    acc.gemm(false, true, 1.0, xv, wv, 0.0, yv);
    if (bias_ != nullptr) acc.add_bias(yv, bias_->value.view());
    x_ = x;
    return y;
  }
  // autocast: low-precision copies of the input (unless it already is), the weight and the bias
  check_matrix(x, "nn::Linear::forward", "x", in_, x.dtype() == low ? low : dtype, device());
  Tensor xl = x;
  if (x.dtype() != low) {
    xl = reuse(xl_, acc, device(), x.shape(), low, x);
    PL_Tensor dst = xl.view();
    acc.cast(dst, x.view());
  }
  Tensor& wl = reuse(wl_, acc, device(), weight_->value.shape(), low, Tensor());
  PL_Tensor wlv = wl.view();
  acc.cast(wlv, weight_->value.view());
  Tensor& y = reuse(y_, acc, device(), {x.size(0), out_}, low, xl);
  PL_Tensor xv = xl.view(), yv = y.view();
  acc.gemm(false, true, 1.0, xv, wlv, 0.0, yv);
  if (bias_ != nullptr) {
    Tensor& bl = reuse(bl_, acc, device(), bias_->value.shape(), low, Tensor());
    PL_Tensor blv = bl.view();
    acc.cast(blv, bias_->value.view());
    acc.add_bias(yv, blv);
  }
  x_ = xl;
  return y;
}

// Writes p's gradient (the layer's dtype) from `low` (the compute dtype): widened into `wide`,
// then scaled into the gradient or added to it.
void Linear::write_grad(Parameter& p, const char* name, const Tensor& low, Tensor& wide) {
  const Accelerator& acc = accelerator();
  if (!p.grad.defined() || p.grad.shape() != p.value.shape())
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string("nn::Linear::backward: ") + name +
                                             " has no gradient tensor; call module.to(accelerator, device) after "
                                             "changing requires_grad");
  const double scale = grad_scale();
  PL_Tensor gv = p.grad.view();
  if (p.grad_is_zero) {
    acc.cast(gv, low.view());
    if (scale != 1.0) acc.scale(gv, scale);
  } else {
    Tensor& w = reuse(wide, acc, device(), p.value.shape(), p.value.dtype(), Tensor());
    PL_Tensor wv = w.view();
    acc.cast(wv, low.view());
    acc.axpy(gv, scale, wv);
  }
  p.grad_is_zero = false;
  grad_ready(p);
}

Tensor Linear::backward(const Tensor& dy, bool need_input_grad) {
  const Accelerator& acc = need_accelerator("backward");
  if (!x_.defined())
    throw Error(PL_ERR_INVALID_ARGUMENT, "nn::Linear::backward: no forward to differentiate; call forward first");
  const PL_DType dtype = low_ == PL_DTYPE_INVALID ? weight_->value.dtype() : low_;
  check_matrix(dy, "nn::Linear::backward", "dy", out_, dtype, device());
  if (dy.size(0) != x_.size(0))
    throw Error(PL_ERR_INVALID_ARGUMENT, "nn::Linear::backward: dy has shape " + shape_text(dy.shape()) +
                                             " but the forward input had shape " + shape_text(x_.shape()) +
                                             "; their row counts must match");
  PL_Tensor dyv = dy.view(), xv = x_.view();
  if (low_ != PL_DTYPE_INVALID) {  // autocast: gradients in the compute dtype, widened on write
    if (bias_ != nullptr && bias_->requires_grad) {
      Tensor& gb = reuse(gbl_, acc, device(), bias_->value.shape(), low_, Tensor());
      PL_Tensor gbv = gb.view();
      acc.sum_rows(1.0, dyv, 0.0, gbv);
      write_grad(*bias_, "bias", gb, gb32_);
    }
    if (weight_->requires_grad) {
      Tensor& gw = reuse(gwl_, acc, device(), weight_->value.shape(), low_, Tensor());
      PL_Tensor gwv = gw.view();
      acc.gemm(true, false, 1.0, dyv, xv, 0.0, gwv);
      write_grad(*weight_, "weight", gw, gw32_);
    }
    if (!need_input_grad) return Tensor();
    Tensor& dx = reuse(dx_, acc, device(), x_.shape(), low_, dy);
    PL_Tensor wlv = wl_.view(), dxv = dx.view();
    acc.gemm(false, false, 1.0, dyv, wlv, 0.0, dxv);
    return dx;
  }
  const double scale = grad_scale();
  auto write = [&](Parameter& p, const char* name, auto&& kernel) {
    if (!p.requires_grad) return;
    if (!p.grad.defined() || p.grad.shape() != p.value.shape())
      throw Error(PL_ERR_INVALID_ARGUMENT, std::string("nn::Linear::backward: ") + name +
                                               " has no gradient tensor; call module.to(accelerator, device) after "
                                               "changing requires_grad");
    PL_Tensor gv = p.grad.view();
    kernel(gv, p.grad_is_zero ? 0.0 : 1.0);  // beta 0 overwrites a zeroed (stale) gradient
    p.grad_is_zero = false;
    grad_ready(p);
  };
  if (bias_ != nullptr) write(*bias_, "bias", [&](PL_Tensor& g, double beta) { acc.sum_rows(scale, dyv, beta, g); });
  write(*weight_, "weight", [&](PL_Tensor& g, double beta) { acc.gemm(true, false, scale, dyv, xv, beta, g); });
  if (!need_input_grad) return Tensor();
  Tensor& dx = reuse(dx_, acc, device(), x_.shape(), dtype, dy);
  PL_Tensor wv = weight_->value.view(), dxv = dx.view();
  acc.gemm(false, false, 1.0, dyv, wv, 0.0, dxv);
  return dx;
}

// ---- ReLU ----

Tensor ReLU::forward(const Tensor& x) {
  if (!x.defined()) throw Error(PL_ERR_INVALID_ARGUMENT, "nn::ReLU::forward: x is an undefined tensor");
  const Accelerator& acc = owner(x, "nn::ReLU::forward", "x");
  Tensor& y = reuse(y_, acc, x.device(), x.shape(), x.dtype(), x);
  PL_Tensor xv = x.view(), yv = y.view();
  acc.relu(xv, yv);
  return y;
}

Tensor ReLU::backward(const Tensor& dy) {
  if (!y_.defined())
    throw Error(PL_ERR_INVALID_ARGUMENT, "nn::ReLU::backward: no forward to differentiate; call forward first");
  if (!dy.defined() || dy.shape() != y_.shape() || dy.dtype() != y_.dtype())
    throw Error(PL_ERR_INVALID_ARGUMENT, "nn::ReLU::backward: dy is " + (dy.defined() ? describe(dy) : "undefined") +
                                             " but the forward output was " + describe(y_));
  const Accelerator& acc = y_.accelerator();
  Tensor& dx = reuse(dx_, acc, y_.device(), y_.shape(), y_.dtype(), dy);
  PL_Tensor yv = y_.view(), dyv = dy.view(), dxv = dx.view();
  acc.relu_backward(yv, dyv, dxv);
  return dx;
}

// ---- cross_entropy ----

namespace {

// `buf` when only the cache holds it and it has this shape, dtype and place, else a new tensor.
Tensor& unshared(Tensor& buf, const Accelerator& acc, PL_Device device, const Shape& shape, PL_DType dtype) {
  const bool fits = buf.defined() && buf.use_count() == 1 && buf.shape() == shape && buf.dtype() == dtype &&
                    same_place(buf.device(), device) && buf.accelerator() == acc;
  if (!fits) buf = Tensor::empty(acc, device, shape, dtype);
  return buf;
}

CrossEntropy compute(const Tensor& logits, const Tensor& labels, bool with_grad, CrossEntropyLoss::Buffers* keep) {
  const char* op = "nn::cross_entropy";
  if (!logits.defined() || logits.dim() != 2)
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": logits must be [N, C], got " +
                                             (logits.defined() ? shape_text(logits.shape()) : "an undefined tensor"));
  const int64_t n = logits.size(0), c = logits.size(1);
  if (n == 0)
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": logits " + shape_text(logits.shape()) +
                                             " hold no rows; an empty batch has no mean loss");
  if (!labels.defined() || labels.dtype() != PL_I64 || labels.shape() != Shape{n})
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": labels must be int64 [" + std::to_string(n) +
                                             "] for logits " + shape_text(logits.shape()) + ", got " +
                                             (labels.defined() ? describe(labels) : "an undefined tensor"));
  const Accelerator& acc = owner(logits, op, "logits");
  const PL_Device dev = logits.device();
  const Tensor lab = same_place(labels.device(), dev) ? labels : labels.to(acc, dev);
  // autocast runs losses in float32: low-precision logits are widened, the gradient narrowed back
  const bool low = logits.dtype() == PL_F16 || logits.dtype() == PL_BF16;
  // Kept only where freeing costs a wait (an asynchronous accelerator: cudaFree waits for the
  // device).  On the cpu a fresh buffer each call measured faster (bench/mlp_steps.py: reusing
  // it ran 0.8x at 1 rank).
  CrossEntropyLoss::Buffers scratch;
  CrossEntropyLoss::Buffers& b = keep != nullptr && !acc.synchronous() ? *keep : scratch;
  Tensor wide = logits;
  if (low) {
    wide = unshared(b.wide, acc, dev, logits.shape(), PL_F32);
    PL_Tensor wv = wide.view();
    acc.cast(wv, logits.view());
  }

  CrossEntropy out;
  out.count = n;
  Tensor loss = Tensor::empty(acc, dev, {n}, wide.dtype());  // kept by out.loss until it is read
  if (with_grad) out.grad = unshared(b.grad, acc, dev, {n, c}, wide.dtype());
  PL_Tensor lv = wide.view(), labv = lab.view(), lossv = loss.view(),
            gv = out.grad.defined() ? out.grad.view() : PL_Tensor{};
  acc.cross_entropy(lv, labv, lossv, with_grad ? &gv : nullptr, amp::loss_scale() / static_cast<double>(n));
  if (low && with_grad) {
    Tensor g = unshared(b.low_grad, acc, dev, {n, c}, logits.dtype());
    PL_Tensor dst = g.view();
    acc.cast(dst, out.grad.view());
    out.grad = g;
  }

  Tensor pred = Tensor::empty(acc, dev, {n}, PL_I64);
  PL_Tensor pv = pred.view();
  acc.argmax_rows(lv, pv);

  // Read on the host only when somebody asks (scalar.hpp): the rows' losses summed in double, and
  // the rows whose argmax is the label, exactly as a read right here would give them.
  out.loss = Scalar::deferred([loss, n] {
    double sum = 0;
    if (loss.dtype() == PL_F32)
      for (float v : loss.to_vector<float>()) sum += v;
    else
      for (double v : loss.to_vector<double>()) sum += v;
    return sum / static_cast<double>(n);
  });
  // The labels are the caller's memory: a synchronous accelerator (cpu) counts now, at no wait, so
  // a program that refills one label buffer every step counts right; an asynchronous one keeps a
  // reference (the Trainer's staged batches get fresh buffers while one is held) and counts on
  // the first read.
  auto count_correct = [lab, pred, n] {
    const std::vector<int64_t> want = lab.to_vector<int64_t>(), got = pred.to_vector<int64_t>();
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i) correct += got[static_cast<size_t>(i)] == want[static_cast<size_t>(i)];
    return static_cast<double>(correct);
  };
  out.correct = acc.synchronous() ? Scalar(count_correct()) : Scalar::deferred(count_correct);
  return out;
}

}  // namespace

CrossEntropy cross_entropy(const Tensor& logits, const Tensor& labels, bool with_grad) {
  return compute(logits, labels, with_grad, nullptr);
}

CrossEntropy CrossEntropyLoss::operator()(const Tensor& logits, const Tensor& labels, bool with_grad) {
  return compute(logits, labels, with_grad, &buffers_);
}

}  // namespace pl::nn
