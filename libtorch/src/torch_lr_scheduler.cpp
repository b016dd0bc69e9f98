// A libtorch learning-rate scheduler as a pl::LRScheduler (torch_lr_scheduler.hpp).
#include "torch_lr_scheduler.hpp"

#include <cmath>
#include <vector>

namespace pl::torch::detail {

namespace {

std::string name_of(const ::torch::optim::LRScheduler* s) {
  if (dynamic_cast<const ::torch::optim::StepLR*>(s)) return "torch::optim::StepLR";
  return "torch::optim::LRScheduler";
}

}  // namespace

TorchLRScheduler::TorchLRScheduler(TorchOptimizer& optimizer, std::unique_ptr<::torch::optim::LRScheduler> scheduler)
    : pl::LRScheduler(optimizer), torch_opt_(optimizer), s_(std::move(scheduler)), name_(name_of(s_.get())) {
  if (!s_)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT,
                    "configure_torch_lr_schedulers returned an entry without a scheduler; make one over the optimizer "
                    "it is given, e.g. std::make_unique<torch::optim::StepLR>(optimizer, 10, 0.1)");
  // libtorch's schedulers do not step when made: no initial_step()
  last_epoch_ = 0;
  last_lr_ = optimizer.lr();
}

// pl::LRScheduler::step() then sets the optimizer's lr to the value returned, group 0's, which
// TorchOptimizer::set_lr takes as unchanged: every group keeps what the scheduler set.
double TorchLRScheduler::next_lr(double current_lr) {
  (void)current_lr;
  s_->step();
  return torch_opt_.lr();
}

void TorchLRScheduler::load_state(const std::map<std::string, double>& state) {
  auto it = state.find("last_epoch");
  if (it == state.end()) throw pl::Error(PL_ERR_INVALID_ARGUMENT, name_ + ": the saved state has no 'last_epoch'");
  const double steps = it->second;
  if (!(steps >= 0 && steps == std::floor(steps) && steps < 1e12))
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, name_ + ": saved last_epoch " + std::to_string(steps) +
                                                 " is not valid; it must be an integer >= 0");
  if (last_epoch_ != 0)
    throw pl::Error(PL_ERR_INVALID_ARGUMENT, name_ +
                                                 ": a saved state loads into a scheduler not stepped yet (it has "
                                                 "stepped " +
                                                 std::to_string(last_epoch_) + " times)");
  // the count back by replay; the learning rates are the checkpoint's optimizer's, not the replay's
  std::vector<double> lrs;
  for (auto& g : torch_opt_.torch().param_groups()) lrs.push_back(g.options().get_lr());
  for (int64_t i = 0; i < static_cast<int64_t>(steps); ++i) s_->step();
  size_t k = 0;
  for (auto& g : torch_opt_.torch().param_groups()) g.options().set_lr(lrs[k++]);
  last_epoch_ = static_cast<int64_t>(steps);
  last_lr_ = torch_opt_.lr();
}

}  // namespace pl::torch::detail
