// libtorch datasets as pl::Datasets: the batch's copy into host pl::Tensors (plrt/torch/data.hpp).
#include <cstring>
#include <plrt/sdk/error.hpp>
#include <plrt/torch/data.hpp>
#include <string>

#include "state.hpp"

namespace pl::torch::detail {

pl::Batch to_host_batch(const std::vector<::torch::Tensor>& fields) {
  pl::Batch out;
  for (size_t f = 0; f < fields.size(); ++f) {
    const ::torch::Tensor& t = fields[f];
    const std::string where = "the dataset's batch field " + std::to_string(f) + (f == 0 ? " (data)" : " (target)");
    if (!t.defined()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, where + " is undefined");
    if (t.dim() == 0) throw pl::Error(PL_ERR_INVALID_ARGUMENT, where + " is 0-d; a batch field is stacked along dim 0");
    const ::torch::Tensor host = t.to(::torch::kCPU).contiguous();
    TensorView view(host);  // its dtype in plrt's terms (an unsupported one throws, naming it)
    pl::Tensor p = pl::Tensor::empty(pl::Shape(host.sizes().begin(), host.sizes().end()), view.get().dtype);
    if (host.nbytes() > 0) std::memcpy(p.data(), host.data_ptr(), host.nbytes());
    out.push_back(std::move(p));
  }
  return out;
}

int64_t require_size(const c10::optional<size_t>& size) {
  if (!size)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "pl::torch::Dataset: the libtorch dataset has no size (a streaming dataset); the Trainer's "
                    "DistributedSampler needs one: give the dataset a size()");
  return static_cast<int64_t>(*size);
}

}  // namespace pl::torch::detail
