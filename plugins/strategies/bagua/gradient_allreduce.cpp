// gradient_allreduce (docs/bagua.md §1): each bucket's gradients allreduced, overlapped with
// backward as ddp's: the mean over the ranks, or with average=false the sum.
#include "algorithm.hpp"
#include "reducer.hpp"

namespace plrt::bagua {

namespace {

class GradientAllreduce final : public Algorithm {
 public:
  GradientAllreduce(bool average, const Scope& scope) : average_(average), scope_(scope) {}
  std::unique_ptr<reducer::BucketComm> bucket_comm() override {
    return std::make_unique<reducer::Allreduce>(average_ ? PL_REDUCE_AVG : PL_REDUCE_SUM, scope_.group);
  }

 private:
  bool average_;
  Scope scope_;
};

}  // namespace

std::unique_ptr<Algorithm> make_gradient_allreduce(const BaguaOptions& opts, const PL_StrategyConfig& config,
                                                   const Scope& scope) {
  (void)config;
  return std::make_unique<GradientAllreduce>(opts.average, scope);
}

}  // namespace plrt::bagua
