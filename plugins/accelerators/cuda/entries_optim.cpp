// sgd_step and adam_step: the shared argument rules, which also derive the per-call scalars in
// double on the host exactly as the cpu reference uses them (kernel_args.hpp), then one fused
// launch (kernels_optim.cu).
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"

namespace plrt::cuda {

PL_Error* cuda_sgd_step(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* momentum_buf,
                        const PL_SgdParams* params, PL_Stream* stream) {
  return run(acc, [&] {
    const SgdScalars s = kernel_args::sgd_step(kTarget, param, grad, momentum_buf, params);
    DeviceScope scope("sgd_step", *param, "param", stream);
    launch_sgd(scope.launch(), *param, *grad, s.has_momentum ? momentum_buf : nullptr, s);
  });
}

PL_Error* cuda_adam_step(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* exp_avg,
                         PL_Tensor* exp_avg_sq, const PL_AdamParams* params, PL_Stream* stream) {
  return run(acc, [&] {
    const AdamScalars s = kernel_args::adam_step(kTarget, param, grad, exp_avg, exp_avg_sq, params);
    DeviceScope scope("adam_step", *param, "param", stream);
    launch_adam(scope.launch(), *param, *grad, *exp_avg, *exp_avg_sq, s);
  });
}

}  // namespace plrt::cuda
