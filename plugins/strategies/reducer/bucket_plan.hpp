// Which gradients share a bucket: PyTorch's compute_bucket_assignment_by_size, with the closing
// rule stated exactly.  Gradients are taken in REVERSE registration order (the order backward
// usually produces them, so the first bucket fills first) and grouped by dtype and device (one
// flat buffer holds one dtype).  Each (dtype, device) group fills its own open bucket: the first
// bucket of a group is capped at first_cap bytes, later ones at cap.  A bucket closes when adding
// the next gradient would exceed its cap; so a gradient larger than the cap gets a bucket of its
// own.  Buckets are numbered by their first gradient's position in that reverse order, which is
// the order every rank launches them in.
//
// Pure: no ABI calls, no allocation of device memory; the unit tests call it directly.
#pragma once

#include <plrt/pl_tensor.h>

#include <cstddef>
#include <vector>

namespace plrt::reducer {

struct PlanInput {
  size_t index;  // the parameter's index in the setup() array
  size_t bytes;  // its gradient's size
  PL_DType dtype;
  PL_Device device;
};

struct PlannedBucket {
  std::vector<size_t> members;  // parameter indices, in reverse registration order
  std::vector<size_t> offsets;  // byte offset of each member in the bucket's flat buffer
  size_t bytes = 0;
  PL_DType dtype = PL_DTYPE_INVALID;
  PL_Device device{PL_DEVICE_CPU, 0};
};

// `in_order`: the gradients to bucket, already in reverse registration order.  first_cap and cap
// are in bytes (>= 1).
std::vector<PlannedBucket> plan_buckets(const std::vector<PlanInput>& in_order, size_t first_cap, size_t cap);

// A 1-D descriptor of b.bytes of b.dtype at `data` on `device`: a bucket's flat buffer.
PL_Tensor flat_view(void* data, const PlannedBucket& b, PL_Device device);

}  // namespace plrt::reducer
