// pl::Tensor <-> torch::Tensor over the same memory (tensor_bridge.hpp).
#include "tensor_bridge.hpp"

#include <memory>
#include <plrt/sdk/dlpack.hpp>

#include "state.hpp"

namespace pl::torch::detail {

pl::Tensor borrow(const ::torch::Tensor& t, const pl::Accelerator& acc) {
  auto view = std::make_shared<TensorView>(t);
  return pl::Tensor::borrow(view->get(), acc, view);
}

::torch::Tensor to_torch(const pl::Tensor& t) {
  int64_t shape[PL_MAX_DIMS];
  const PL_Tensor v = t.view();
  const DLTensor d = pl::to_dlpack(v, shape);
  auto* keep = new pl::Tensor(t);
  const auto options = ::torch::TensorOptions().dtype(at::toScalarType(d.dtype)).device(torch_device(t.device()));
  return ::torch::from_blob(
      t.data(), at::IntArrayRef(d.shape, static_cast<size_t>(d.ndim)), [keep](void*) { delete keep; }, options);
}

}  // namespace pl::torch::detail
