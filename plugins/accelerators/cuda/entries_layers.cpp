// add_bias, sum_rows, relu, relu_backward, cross_entropy, argmax_rows: the shared argument rules
// (shapes, dtypes, overlaps, devices), then the launch (kernels_layers.cu, kernels_loss.cu).
// cross_entropy stays asynchronous: a bad label is reported by the next synchronisation (as
// quantize_u8's data errors), so a training step need not wait for the GPU here (the SDK reads the
// loss only when somebody needs it: sdk/include/plrt/sdk/scalar.hpp).
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"

namespace plrt::cuda {

PL_Error* cuda_add_bias(PL_Accelerator* acc, PL_Tensor* y, const PL_Tensor* bias, PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::add_bias(kTarget, y, bias);
    DeviceScope scope("add_bias", *y, "y", stream);
    launch_add_bias(scope.launch(), *y, *bias);
  });
}

PL_Error* cuda_sum_rows(PL_Accelerator* acc, double alpha, const PL_Tensor* x, double beta, PL_Tensor* out,
                        PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::sum_rows(kTarget, x, out);
    DeviceScope scope("sum_rows", *x, "x", stream);
    launch_sum_rows(scope.launch(), alpha, *x, beta, *out);
  });
}

PL_Error* cuda_relu(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* y, PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::relu(kTarget, x, y);
    DeviceScope scope("relu", *x, "x", stream);
    launch_relu(scope.launch(), *x, *y);
  });
}

PL_Error* cuda_relu_backward(PL_Accelerator* acc, const PL_Tensor* y, const PL_Tensor* dy, PL_Tensor* dx,
                             PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::relu_backward(kTarget, y, dy, dx);
    DeviceScope scope("relu_backward", *y, "y", stream);
    launch_relu_backward(scope.launch(), *y, *dy, *dx);
  });
}

PL_Error* cuda_cross_entropy(PL_Accelerator* acc, const PL_Tensor* logits, const PL_Tensor* labels, PL_Tensor* loss,
                             PL_Tensor* grad, double grad_scale, PL_Stream* stream) {
  return run(acc, [&] {
    const char* op = "cross_entropy";
    kernel_args::cross_entropy(kTarget, logits, labels, loss, grad);
    const int64_t n = logits->shape[0], c = logits->shape[1];
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
    acc->checks.defer(t, scope.stream(), op, [c](const CheckRecord& r) {
      return kernel_args::label_message(static_cast<int64_t>(r.p0), static_cast<int64_t>(r.key), c);
    });
  });
}

PL_Error* cuda_argmax_rows(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::argmax_rows(kTarget, x, out);
    DeviceScope scope("argmax_rows", *x, "x", stream);
    launch_argmax_rows(scope.launch(), *x, *out);
  });
}

}  // namespace plrt::cuda
