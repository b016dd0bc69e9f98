// torch.distributed's collectives on torch::Tensors, over the job's "plrt.torch" process group:
// the tensors are handed over as DLPack views (no copy, CUDA tensors stay on the GPU).
#include "state.hpp"

namespace pl::torch {

namespace {

using detail::TensorView;

// A tensor the group can take as it is: contiguous, on the job's device.
void check_tensor(const char* fn, const ::torch::Tensor& t, const std::string& which = "the tensor") {
  const Job& j = job();
  if (!t.defined())
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string("pl::torch::") + fn + ": " + which + " is undefined");
  if (t.device() != j.device)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string("pl::torch::") + fn + ": " + which + " is on " +
                                                 t.device().str() + " but the job's process group carries " +
                                                 j.device.str() + " tensors; move it with .to(job.device)");
  if (!t.is_contiguous())
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string("pl::torch::") + fn + ": " + which + " (shape " +
                                                 detail::shape_text(t) + ") is not contiguous; pass t.contiguous()");
}

void check_like(const char* fn, const ::torch::Tensor& t, const ::torch::Tensor& ref, const std::string& which) {
  check_tensor(fn, t, which);
  if (t.numel() != ref.numel() || t.scalar_type() != ref.scalar_type())
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, std::string("pl::torch::") + fn + ": " + which + " has " +
                                                 std::to_string(t.numel()) + " elements of " +
                                                 std::string(c10::toString(t.scalar_type())) + " but the tensor has " +
                                                 std::to_string(ref.numel()) + " of " +
                                                 std::string(c10::toString(ref.scalar_type())) + "; they must match");
}

PL_ReduceOp pl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return PL_REDUCE_SUM;
    case ReduceOp::AVG:
      return PL_REDUCE_AVG;
    case ReduceOp::MIN:
      return PL_REDUCE_MIN;
    case ReduceOp::MAX:
      return PL_REDUCE_MAX;
    case ReduceOp::PRODUCT:
      return PL_REDUCE_PRODUCT;
  }
  throw pl::Error(PL_ERR_INVALID_ARGUMENT, "pl::torch: ReduceOp " + std::to_string(static_cast<int>(op)) +
                                               " is not valid (SUM, AVG, MIN, MAX, PRODUCT)");
}

}  // namespace

void all_reduce(::torch::Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor);
  const PL_ReduceOp o = pl_op(op);
  auto g = detail::group();
  if (!g) return;
  TensorView v(tensor);
  g->allreduce(v.get(), o);
}

void broadcast(::torch::Tensor& tensor, int src) {
  check_tensor("broadcast", tensor);
  const int world = job().world_size;
  if (src < 0 || src >= world)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "pl::torch::broadcast: src " + std::to_string(src) +
                                                 " is not a rank of this job (valid: 0 to " +
                                                 std::to_string(world - 1) + ")");
  auto g = detail::group();
  if (!g) return;
  TensorView v(tensor);
  g->broadcast(v.get(), src);
}

void all_gather(std::vector<::torch::Tensor>& tensor_list, const ::torch::Tensor& tensor) {
  check_tensor("all_gather", tensor);
  const int world = job().world_size;
  if (tensor_list.size() != static_cast<size_t>(world))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "pl::torch::all_gather: tensor_list has " +
                                                 std::to_string(tensor_list.size()) + " tensors for a world of " +
                                                 std::to_string(world) + "; give one per rank");
  for (size_t r = 0; r < tensor_list.size(); ++r)
    check_like("all_gather", tensor_list[r], tensor, "tensor_list[" + std::to_string(r) + "]");
  auto g = detail::group();
  if (!g) {
    ::torch::NoGradGuard no_grad;
    tensor_list[0].copy_(tensor);
    return;
  }
  TensorView in(tensor);
  std::vector<TensorView> outs;
  std::vector<PL_Tensor> out_views;
  for (auto& t : tensor_list) outs.emplace_back(t);
  for (auto& v : outs) out_views.push_back(v.get());
  g->allgather(in.get(), out_views);
}

::torch::Tensor all_gather(const ::torch::Tensor& tensor) {
  check_tensor("all_gather", tensor);
  std::vector<int64_t> shape{job().world_size};
  for (int64_t d : tensor.sizes()) shape.push_back(d);
  ::torch::Tensor out = ::torch::empty(shape, tensor.options().requires_grad(false));
  std::vector<::torch::Tensor> parts;
  for (int r = 0; r < job().world_size; ++r) parts.push_back(out[r]);
  all_gather(parts, tensor);
  return out;
}

void reduce_scatter(::torch::Tensor& output, const std::vector<::torch::Tensor>& input_list, ReduceOp op) {
  check_tensor("reduce_scatter", output, "the output");
  const PL_ReduceOp o = pl_op(op);
  const int world = job().world_size;
  if (input_list.size() != static_cast<size_t>(world))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "pl::torch::reduce_scatter: input_list has " +
                                                 std::to_string(input_list.size()) + " tensors for a world of " +
                                                 std::to_string(world) + "; give one per rank");
  for (size_t r = 0; r < input_list.size(); ++r)
    check_like("reduce_scatter", input_list[r], output, "input_list[" + std::to_string(r) + "]");
  auto g = detail::group();
  if (!g) {
    ::torch::NoGradGuard no_grad;
    output.copy_(input_list[0]);
    return;
  }
  std::vector<TensorView> ins;
  std::vector<PL_Tensor> in_views;
  for (const auto& t : input_list) ins.emplace_back(t);
  for (auto& v : ins) in_views.push_back(v.get());
  TensorView out(output);
  g->reduce_scatter(in_views, out.get(), o);
}

void barrier() {
  auto g = detail::group();
  if (g) g->barrier();
}

}  // namespace pl::torch
