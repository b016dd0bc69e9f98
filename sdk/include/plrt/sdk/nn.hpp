// pl::nn: dense layers with explicit backward, running on the module's accelerator (its gemm,
// add_bias, relu and cross_entropy kernels), so the same model code runs on cpu or cuda.
//
// Backward is explicit (there is no autograd): forward keeps what backward needs; backward writes
// the parameters' gradients (scaled by Module::grad_scale, added to the existing gradient unless
// it was zeroed) and calls Module::grad_ready for each, so that ddp overlaps its allreduce with the
// rest of backward.
//
// Activations are reused between steps when the shape stays the same: the tensor a forward or
// backward returns is the layer's own buffer, overwritten by its next call with that shape.  Copy
// it (clone()) to keep it longer.
#pragma once

#include <cstdint>
#include <plrt/sdk/module.hpp>
#include <plrt/sdk/random.hpp>
#include <plrt/sdk/scalar.hpp>
#include <plrt/sdk/tensor.hpp>

namespace pl::nn {

// y = x W^T + b, with weight [out, in] and bias [out] as torch.nn.Linear lays them out and
// initialises them (uniform in +-1/sqrt(in), weight then bias, drawn from `gen`, default the
// global generator).  in and out must be >= 1; dtype float32 or float64.  The layer computes
// through its module tree's accelerator: call Module::to(accelerator, device) first (the trainer
// does it), else forward and backward throw.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr,
         PL_DType dtype = PL_F32);
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }  // nullptr without bias

  // x [N, in] on the module's device, of the weight's dtype -> [N, out].  Keeps x (shared) for
  // backward.  Under autocast (pl::amp, a float32 layer) x may also be of the compute dtype; the
  // layer then multiplies low-precision copies of x and its weight and returns the compute dtype.
  Tensor forward(const Tensor& x);
  // dy [N, out] -> dx [N, in] (an undefined tensor when need_input_grad is false).  Writes the
  // gradients of bias then weight (those that require grad), calling grad_ready after each, then
  // dx = dy W (not scaled).  After an autocast forward dy and dx are of the compute dtype, and the
  // float32 gradients are written from the low-precision ones (torch's cast backward).
  Tensor backward(const Tensor& dy, bool need_input_grad = true);

 private:
  const Accelerator& need_accelerator(const char* what) const;
  void write_grad(Parameter& p, const char* name, const Tensor& low, Tensor& wide);
  int64_t in_, out_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Tensor x_, y_, dx_;
  PL_DType low_ = PL_DTYPE_INVALID;  // the last forward's autocast dtype (INVALID: full precision)
  Tensor xl_, wl_, bl_, gwl_, gbl_;  // low-precision input, weight, bias and gradient buffers
  Tensor gw32_, gb32_;               // their float32 widenings, for accumulation
};

// Not a Module (no parameters): it computes through the accelerator that owns its input, as the
// outputs of Linear are.  A tensor without one (a plain host tensor) throws.
class ReLU {
 public:
  Tensor forward(const Tensor& x);    // the layer's output buffer, kept for backward
  Tensor backward(const Tensor& dy);  // dy where the output was > 0, else 0

 private:
  Tensor y_, dx_;
};

// loss and correct are deferred (scalar.hpp): computed on the logits' device and copied to the
// host only when read, so a step that logs them does not wait for the device.
struct CrossEntropy {
  Scalar loss;        // mean over the batch
  Tensor grad;        // d(mean loss)/d(logits), on the logits' device (undefined if not asked)
  Scalar correct;     // rows whose argmax equals the label (deferred on an asynchronous accelerator,
                      // which reads the labels then: do not overwrite them before)
  int64_t count = 0;  // rows
  Scalar accuracy() const { return correct / static_cast<double>(count); }
};

// Softmax cross-entropy of logits [N, C] (N >= 1; computed by the accelerator that owns them)
// against labels (i64 [N], on any device: copied to the logits' device when needed), averaged
// over the batch, as torch.nn.functional.cross_entropy.  A label outside [0, C) throws, naming it.
// float16/bfloat16 logits (autocast) are widened: the loss runs in float32 and grad comes back in
// the logits' dtype.  grad is multiplied by amp::loss_scale() (1 unless a 16-mixed step runs).
CrossEntropy cross_entropy(const Tensor& logits, const Tensor& labels, bool with_grad = true);

// cross_entropy that keeps its working memory between calls, as Linear keeps its activations: the
// gradient (and, under autocast, the widened logits) reuse the previous call's buffers once
// nobody else holds them (the previous result's grad released).  On cuda a step then frees no
// device memory (cudaFree waits for the whole device); on a synchronous accelerator (cpu) it
// allocates as cross_entropy does, which measured faster there.  One per module; not shared by
// threads.
class CrossEntropyLoss {
 public:
  CrossEntropy operator()(const Tensor& logits, const Tensor& labels, bool with_grad = true);

  struct Buffers {
    Tensor wide, grad, low_grad;
  };

 private:
  Buffers buffers_;
};

}  // namespace pl::nn
