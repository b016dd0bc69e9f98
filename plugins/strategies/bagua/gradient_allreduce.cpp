// gradient_allreduce (docs/bagua.md §1): each bucket's gradients allreduced, overlapped with
// backward as ddp's: the mean over the ranks, or with average=false the sum.
#include "algorithm.hpp"
#include "reducer.hpp"

namespace plrt::bagua {

namespace {

class GradientAllreduce final : public Algorithm {
 public:
  explicit GradientAllreduce(bool average) : average_(average) {}
  std::unique_ptr<reducer::BucketComm> bucket_comm() override {
    return std::make_unique<reducer::Allreduce>(average_ ? PL_REDUCE_AVG : PL_REDUCE_SUM);
  }

 private:
  bool average_;
};

}  // namespace

std::unique_ptr<Algorithm> make_gradient_allreduce(const BaguaOptions& opts, const PL_StrategyConfig& config) {
  (void)config;
  return std::make_unique<GradientAllreduce>(opts.average);
}

}  // namespace plrt::bagua
