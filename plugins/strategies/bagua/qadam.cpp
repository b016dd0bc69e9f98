// qadam (docs/bagua.md §6): QAdam's gradients averaged in f32 through its warmup (one allreduce per
// bucket, as gradient_allreduce), then its first moment averaged with bytegrad's compression.  The
// host's QAdam does the math (pl::QAdam): bind_optimizer (ABI 1.6) checks that the optimizer is
// QAdam, learns its warmup_steps and the steps it has taken, and asks it for the first moment in
// the gradients; the host then writes m_i into each gradient before reporting it, and its step
// takes the average as m, with v frozen.  The strategy counts the optimizer's steps to switch at
// the same step as the optimizer does.
#include <cstdlib>

#include "algorithm.hpp"
#include "bagua_strategy.hpp"
#include "reducer.hpp"

namespace plrt::bagua {

using plugin::fail;

namespace {

// One bucket: an allreduce while `*compress` is false when the bucket starts, else bytegrad's
// stages.  The mode each bucket started in is kept until it finishes.
class WarmupThenCompress final : public reducer::BucketComm {
 public:
  WarmupThenCompress(const Scope& scope, const bool* compress)
      : BucketComm(scope.group),
        compressed_(make_bytegrad_comm(scope, true)),
        plain_(PL_REDUCE_AVG, scope.group),
        compress_(compress) {}
  std::string name() const override { return *compress_ ? compressed_->name() : plain_.name(); }
  int64_t padded_numel(int64_t numel) const override { return compressed_->padded_numel(numel); }
  void prepare(reducer::Reducer& r, reducer::Bucket& b) override {
    compressed_->prepare(r, b);
    if (mode_.size() <= b.index) mode_.resize(b.index + 1, 0);
  }
  PL_Work* start(reducer::Reducer& r, reducer::Bucket& b) override {
    mode_[b.index] = *compress_ ? 1 : 0;
    if (mode_[b.index] != 0) return compressed_->start(r, b);
    // The padding stays zero in f32 mode (bytegrad's start zeroes it again before quantizing).
    return plain_.start(r, b);
  }
  PL_Work* next(reducer::Reducer& r, reducer::Bucket& b) override {
    return mode_[b.index] != 0 ? compressed_->next(r, b) : nullptr;
  }
  void finish(reducer::Reducer& r, reducer::Bucket& b) override {
    if (mode_[b.index] != 0)
      compressed_->finish(r, b);
    else
      r.unpack(b);
  }

 private:
  std::unique_ptr<reducer::BucketComm> compressed_;
  reducer::Allreduce plain_;
  const bool* compress_;
  std::vector<char> mode_;  // per bucket: 1 when it started compressed
};

class QAdamAlgorithm final : public Algorithm {
 public:
  explicit QAdamAlgorithm(const Scope& scope) : scope_(scope) {}
  std::unique_ptr<reducer::BucketComm> bucket_comm() override {
    return std::make_unique<WarmupThenCompress>(scope_, &compress_);
  }
  std::vector<std::string> needs() const override { return {"all_to_all", "allgather"}; }

  void bind_optimizer(BaguaStrategy& s, PL_OptimizerInfo& info) override {
    const std::string name = info.name != nullptr ? info.name : "";
    if (name != "QAdam")
      fail(PL_ERR_INVALID_ARGUMENT, s.who +
                                        ": algorithm qadam needs the QAdam optimizer (pl::QAdam), and the "
                                        "module's optimizer is '" +
                                        name +
                                        "'; return a pl::QAdam from configure_optimizers, or pick another algorithm");
    const char* warmup = nullptr;
    for (size_t i = 0; i < info.hyperparameters.count; ++i) {
      const PL_Option& o = info.hyperparameters.items[i];
      if (o.key != nullptr && std::string(o.key) == "warmup_steps") warmup = o.value;
    }
    char* end = nullptr;
    const long long w = warmup != nullptr ? std::strtoll(warmup, &end, 10) : -1;
    if (warmup == nullptr || *end != '\0' || w < 0)
      fail(PL_ERR_INVALID_ARGUMENT, s.who +
                                        ": algorithm qadam: the QAdam optimizer named no valid warmup_steps "
                                        "hyperparameter (got '" +
                                        (warmup != nullptr ? warmup : "nothing") + "'); it must be an integer >= 0");
    warmup_ = w;
    steps_ = info.steps;
    bound_ = true;
    info.first_moment_in_grads = 1;
  }

  void run_step(BaguaStrategy& s, const PL_ReplicaStepFn* fn) override {
    if (!bound_)
      fail(PL_ERR_INVALID_ARGUMENT, s.who +
                                        ": algorithm qadam needs the host to name its optimizer first "
                                        "(bind_optimizer, ABI 1.6: plrt's Trainer does); this host did not");
    compress_ = steps_ >= warmup_;  // the optimizer's next step is past its warmup: m travels
    Algorithm::run_step(s, fn);
  }

  void optimizer_step(BaguaStrategy& s, const PL_OptimizerFn* fn) override {
    Algorithm::optimizer_step(s, fn);
    ++steps_;  // a skipped step (inf/NaN) never gets here, nor into the optimizer
  }

  double bytes_per_step(const BaguaStrategy& s) const override {
    if (!s.core->group) return 0.0;
    return compress_ ? bytegrad_encoded_bytes(s, scope_.world) : static_cast<double>(s.core->grads->bucket_bytes());
  }

  void add_stats(const BaguaStrategy& s, StatList& out) const override {
    (void)s;
    out.emplace_back("qadam_warmup_steps", static_cast<double>(warmup_));
    out.emplace_back("qadam_compressed", compress_ ? 1.0 : 0.0);
  }

 private:
  Scope scope_;
  bool compress_ = false, bound_ = false;
  int64_t warmup_ = 0, steps_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_qadam(const BaguaOptions& opts, const PL_StrategyConfig& config, const Scope& scope) {
  (void)opts;
  (void)config;
  return std::make_unique<QAdamAlgorithm>(scope);
}

}  // namespace plrt::bagua
