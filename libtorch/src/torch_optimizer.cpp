// A torch::optim optimizer as a pl::Optimizer: stepping and the learning rate (torch_optimizer.hpp;
// the state is in torch_optimizer_state.cpp).
#include "torch_optimizer.hpp"

#include <set>
#include <sstream>

#include "torch_optimizer_kinds.hpp"

namespace pl::torch::detail {

namespace {

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
      kind_(kind_of(*opt_)),
      name_(kind_name(kind_)) {
  if (dynamic_cast<const ::torch::optim::LBFGS*>(opt_.get()))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "configure_optimizers returned torch::optim::LBFGS, which needs a closure that re-runs the "
                    "step; the Trainer steps the optimizer once per accumulation window: use SGD, Adam, AdamW, "
                    "RMSprop or Adagrad");
  group_of_.assign(torch_params_.size(), 0);
  const auto& groups = opt_->param_groups();
  for (size_t i = 0; i < torch_params_.size(); ++i)
    for (size_t g = 0; g < groups.size(); ++g)
      for (const auto& t : groups[g].params())
        if (t.is_same(torch_params_[i])) group_of_[i] = g;
}

TorchOptimizer::~TorchOptimizer() = default;

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
  if (whole(i, begin, end)) {
    chosen_.push_back(i);
    return;
  }
  if (kind_ == Kind::kOther)
    throw pl::Error(PL_ERR_UNSUPPORTED,
                    "the strategy steps elements [" + std::to_string(begin) + ", " + std::to_string(end) +
                        ") of a parameter (a sharded optimizer, ddp_sharded); a torch::optim optimizer other than "
                        "SGD, Adam, AdamW, RMSprop and Adagrad steps whole parameters only: use one of those, or ddp, "
                        "bagua or horovod");
  chosen_ranges_.push_back({i, begin, end});
}

void TorchOptimizer::finish_updates() {
  if (!chosen_.empty()) step_whole();
  if (!chosen_ranges_.empty()) step_ranges();
  chosen_.clear();
  chosen_ranges_.clear();
}

void TorchOptimizer::step_whole() {
  std::vector<char> on(torch_params_.size(), 0);
  for (size_t i : chosen_) on[i] = 1;
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

TorchOptimizer::Range& TorchOptimizer::range(const RangeKey& k) {
  auto it = ranges_.find(k);
  if (it != ranges_.end()) return it->second;
  if (!shard_) shard_ = empty_like(kind_, opt_->defaults());
  const auto [i, begin, end] = k;
  Range r;
  r.value = torch_params_[i].detach().view({-1}).narrow(0, begin, end - begin);
  r.grad = grads_[i].view({-1}).narrow(0, begin, end - begin);
  const auto& options = opt_->param_groups()[group_of_[i]].options();
  shard_->add_param_group(::torch::optim::OptimizerParamGroup({r.value}, options.clone()));
  r.group = shard_->param_groups().size() - 1;
  init_state(kind_, options, r.value, *shard_);  // Adagrad's, which its constructor makes for its own
  return ranges_.emplace(k, std::move(r)).first->second;
}

void TorchOptimizer::step_ranges() {
  const std::set<RangeKey> on(chosen_ranges_.begin(), chosen_ranges_.end());
  for (const RangeKey& k : chosen_ranges_) range(k);
  auto& groups = shard_->param_groups();
  for (auto& [k, r] : ranges_) {
    r.value.mutable_grad() = on.count(k) ? r.grad : ::torch::Tensor();
    groups[r.group].set_options(opt_->param_groups()[group_of_[std::get<0>(k)]].options().clone());
  }
  shard_->step();
}

}  // namespace pl::torch::detail
