// pl::Tensor <-> torch::Tensor over the same memory, for the Trainer's view of a libtorch module
// and its optimizer (no copies: each side keeps the other's owner alive).
#pragma once

#include <torch/torch.h>

#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/tensor.hpp>

namespace pl::torch::detail {

// A pl::Tensor over a torch tensor's memory (it keeps the tensor alive).
pl::Tensor borrow(const ::torch::Tensor& t, const pl::Accelerator& acc);

// A torch tensor over a pl::Tensor's memory (it keeps the pl::Tensor alive).
::torch::Tensor to_torch(const pl::Tensor& t);

}  // namespace pl::torch::detail
