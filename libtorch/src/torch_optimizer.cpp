// A torch::optim optimizer as a pl::Optimizer (torch_optimizer.hpp).
#include "torch_optimizer.hpp"

#include <sstream>

#include "state.hpp"

namespace pl::torch::detail {

namespace {

std::string name_of(const ::torch::optim::Optimizer& o) {
  if (dynamic_cast<const ::torch::optim::SGD*>(&o)) return "SGD";
  if (dynamic_cast<const ::torch::optim::AdamW*>(&o)) return "AdamW";
  if (dynamic_cast<const ::torch::optim::Adam*>(&o)) return "Adam";
  if (dynamic_cast<const ::torch::optim::RMSprop*>(&o)) return "RMSprop";
  if (dynamic_cast<const ::torch::optim::Adagrad*>(&o)) return "Adagrad";
  return "torch::optim";
}

double group_lr(const ::torch::optim::Optimizer& o) {
  if (o.param_groups().empty())
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "configure_optimizers returned an optimizer without parameters");
  return o.param_groups()[0].options().get_lr();
}

}  // namespace

TorchOptimizer::TorchOptimizer(std::unique_ptr<::torch::optim::Optimizer> opt, std::vector<pl::Parameter*> params,
                               std::vector<::torch::Tensor> torch_params, std::vector<::torch::Tensor> grads)
    : pl::Optimizer(std::move(params), group_lr(*opt)),
      opt_(std::move(opt)),
      torch_params_(std::move(torch_params)),
      grads_(std::move(grads)),
      name_(name_of(*opt_)) {
  if (dynamic_cast<const ::torch::optim::LBFGS*>(opt_.get()))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "configure_optimizers returned torch::optim::LBFGS, which needs a closure that re-runs the "
                    "step; the Trainer steps the optimizer once per accumulation window: use SGD, Adam, AdamW, "
                    "RMSprop or Adagrad");
}

std::vector<std::pair<std::string, std::string>> TorchOptimizer::hyperparameters() const {
  std::ostringstream lr;
  lr.precision(17);
  lr << this->lr();
  return {{"lr", lr.str()}};
}

double TorchOptimizer::lr() const { return group_lr(*opt_); }

void TorchOptimizer::set_lr(double lr) {
  const double first = this->lr();
  pl::Optimizer::set_lr(lr);  // its checks
  if (lr == first) return;    // a libtorch scheduler's step already set every group (TorchLRScheduler)
  // group 0's lr is the optimizer's; the other groups keep their ratio to it (horovod's lr x W
  // scales each, as Lightning's does), or take it when group 0's was 0
  for (auto& g : opt_->param_groups()) g.options().set_lr(first == 0 ? lr : g.options().get_lr() * (lr / first));
}

void TorchOptimizer::update(size_t i, int64_t begin, int64_t end) {
  if (!whole(i, begin, end))
    throw pl::Error(PL_ERR_UNSUPPORTED,
                    "the strategy steps elements [" + std::to_string(begin) + ", " + std::to_string(end) +
                        ") of a parameter (a sharded optimizer, ddp_sharded); a torch::optim optimizer steps whole "
                        "parameters: use ddp, bagua or horovod with a libtorch module");
  chosen_.push_back(i);
}

void TorchOptimizer::finish_updates() {
  std::vector<char> on(torch_params_.size(), 0);
  for (size_t i : chosen_) on[i] = 1;
  chosen_.clear();
  for (size_t i = 0; i < torch_params_.size(); ++i)
    torch_params_[i].mutable_grad() = on[i] ? grads_[i] : ::torch::Tensor();
  struct Restore {  // every .grad() is the Trainer's gradient memory again, also after an error
    TorchOptimizer& t;
    ~Restore() {
      for (size_t i = 0; i < t.torch_params_.size(); ++i) t.torch_params_[i].mutable_grad() = t.grads_[i];
    }
  } restore{*this};
  opt_->step();
}

std::vector<std::pair<std::string, pl::Tensor>> TorchOptimizer::state_tensors() const {
  ::torch::serialize::OutputArchive archive;
  opt_->save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string s = bytes.str();
  pl::Tensor t = pl::Tensor::empty({static_cast<int64_t>(s.size())}, PL_U8);
  if (!s.empty()) std::memcpy(t.data(), s.data(), s.size());
  return {{kArchiveKey, t}};
}

std::map<std::string, double> TorchOptimizer::state_scalars() const {
  return {{"lr", lr()}, {"step", static_cast<double>(steps())}};
}

void TorchOptimizer::load_state(const std::map<std::string, pl::Tensor>& tensors,
                                const std::map<std::string, double>& scalars) {
  for (const auto& [key, t] : tensors)
    if (key != kArchiveKey)
      throw pl::Error(PL_ERR_INVALID_ARGUMENT, "the optimizer state of " + name_ + " (a torch::optim optimizer) has '" +
                                                   key + "'; it holds only '" + kArchiveKey + "'");
  auto it = tensors.find(kArchiveKey);
  if (it == tensors.end())
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, "the optimizer state has no '" + std::string(kArchiveKey) +
                                                 "': it was not saved from " + name_ + " (a torch::optim optimizer)");
  const Scalars s = read_scalars(scalars);
  const pl::Tensor host = it->second.to_host();
  std::istringstream bytes(std::string(static_cast<const char*>(host.data()), host.nbytes()));
  ::torch::serialize::InputArchive archive;
  archive.load_from(bytes);
  opt_->load(archive);
  set_lr(s.lr);
  steps_ = s.steps;
}

}  // namespace pl::torch::detail
