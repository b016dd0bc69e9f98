// pack and unpack: a bucket's tensors gathered into one flat buffer and scattered back (ABI 1.4;
// see kernels.hpp).  Plain memcpy per part: on the host a bucket copy is bound by memory bandwidth,
// and one call per bucket (instead of one accelerator call per tensor) is what the batching buys.
#include <cstring>

#include "kernels.hpp"
#include "kernels_detail.hpp"

namespace plrt::cpu {

void pack(const PL_Tensor* parts, size_t num_parts, const int64_t* offsets, const PL_Tensor* flat) {
  kernel_args::pack(detail::kTarget, parts, num_parts, offsets, flat, false);
  const size_t elem = pl_dtype_size(flat->dtype);
  auto* base = static_cast<unsigned char*>(flat->data);
  for (size_t i = 0; i < num_parts; ++i)
    if (parts[i].numel > 0)
      std::memcpy(base + static_cast<size_t>(offsets[i]) * elem, parts[i].data,
                  static_cast<size_t>(parts[i].numel) * elem);
}

void unpack(const PL_Tensor* flat, const int64_t* offsets, const PL_Tensor* parts, size_t num_parts) {
  kernel_args::pack(detail::kTarget, parts, num_parts, offsets, flat, true);
  const size_t elem = pl_dtype_size(flat->dtype);
  const auto* base = static_cast<const unsigned char*>(flat->data);
  for (size_t i = 0; i < num_parts; ++i)
    if (parts[i].numel > 0)
      std::memcpy(parts[i].data, base + static_cast<size_t>(offsets[i]) * elem,
                  static_cast<size_t>(parts[i].numel) * elem);
}

}  // namespace plrt::cpu
