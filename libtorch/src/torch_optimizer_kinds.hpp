// What TorchOptimizer knows of each optimizer libtorch ships (SGD, Adam, AdamW, RMSprop, Adagrad):
// its name, an empty optimizer of its class for the shard ranges, and its per-parameter state as
// named tensors and a step count (PyTorch's field names), both ways.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "torch_optimizer.hpp"

namespace pl::torch::detail {

using Kind = TorchOptimizer::Kind;

Kind kind_of(const ::torch::optim::Optimizer& o);
std::string kind_name(Kind kind);  // "Adam", ...; "torch::optim" for another class

// The optimizer's state key of a parameter tensor (libtorch's own: its TensorImpl's address).
std::string state_key(const ::torch::Tensor& t);

// An optimizer of `kind` (not kOther) without parameters, with `defaults`.
std::unique_ptr<::torch::optim::Optimizer> empty_like(Kind kind, const ::torch::optim::OptimizerOptions& defaults);

// The state a parameter added to `o` needs before its first step: Adagrad's accumulator (its
// constructor makes it for the parameters it is given, not for an added group); nothing otherwise.
void init_state(Kind kind, const ::torch::optim::OptimizerOptions& options, const ::torch::Tensor& param,
                ::torch::optim::Optimizer& o);

// The state's tensor fields that may be saved, and whether it has a step count.
const std::vector<std::string>& field_names(Kind kind);
bool has_step(Kind kind);

struct ParamStateFields {
  std::vector<std::pair<std::string, ::torch::Tensor>> tensors;  // the defined ones
  int64_t step = 0;
};
ParamStateFields fields_of(Kind kind, const ::torch::optim::OptimizerParamState& state);

// A state from saved fields; a required field missing throws pl::Error naming `who` and the field.
std::unique_ptr<::torch::optim::OptimizerParamState> make_state(Kind kind,
                                                                const std::map<std::string, ::torch::Tensor>& tensors,
                                                                int64_t step, const std::string& who);

}  // namespace pl::torch::detail
