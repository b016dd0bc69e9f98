// pack, unpack (ABI 1.4): the shared argument rules (kernel_args.hpp), then one launch per bucket
// on the caller's stream (kernels_pack.cu).
#include "device_scope.hpp"
#include "entries.hpp"
#include "instance.hpp"
#include "kernels.hpp"

namespace plrt::cuda {

PL_Error* cuda_pack(PL_Accelerator* acc, const PL_Tensor* parts, size_t num_parts, const int64_t* offsets,
                    PL_Tensor* flat, PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::pack(kTarget, parts, num_parts, offsets, flat, false);
    DeviceScope scope("pack", *flat, "flat", stream);
    launch_pack(scope.launch(), parts, num_parts, offsets, *flat, false);
  });
}

PL_Error* cuda_unpack(PL_Accelerator* acc, const PL_Tensor* flat, const int64_t* offsets, PL_Tensor* parts,
                      size_t num_parts, PL_Stream* stream) {
  return run(acc, [&] {
    kernel_args::pack(kTarget, parts, num_parts, offsets, flat, true);
    DeviceScope scope("unpack", *flat, "flat", stream);
    launch_pack(scope.launch(), parts, num_parts, offsets, *flat, true);
  });
}

}  // namespace plrt::cuda
