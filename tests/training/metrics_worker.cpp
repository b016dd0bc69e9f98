// A rank of a job whose ranks see different amounts of validation data (their own shards, no
// DistributedSampler): rank r has 3 + 4r rows, batches of 4, so both the batch counts and the last
// batch sizes differ.  validation_step logs each row-mean of known values with every reduce_fx;
// validation_step also updates a pl::MeanMetric and a pl::Accuracy (class ids from the values),
// which on_validation_epoch_end logs with log(name, Metric&) (combined across ranks, then reset),
// and another pl::Accuracy that validation_step itself logs (computed when the epoch ends);
// rank 0 writes callback_metrics as JSON to argv[1] so the test can compare them with the exact
// answers.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <plrt/sdk/torchmetrics.hpp>
#include <plrt/sdk/trainer.hpp>

namespace {

// value of row i on rank r: distinct, exactly representable
double row_value(int rank, int64_t i) { return rank * 100.0 + static_cast<double>(i); }

class Probe : public pl::LightningModule {
 public:
  Probe() { register_parameter("w", pl::Tensor::zeros({1})); }
  pl::Scalar training_step(const pl::Batch&, int64_t) override { return 0; }
  void validation_step(const pl::Batch& batch, int64_t) override {
    auto v = batch.at(0).to_vector<double>();
    double mean = 0, mn = 1e300, mx = -1e300;
    for (double x : v) mean += x, mn = std::min(mn, x), mx = std::max(mx, x);
    mean /= static_cast<double>(v.size());
    pl::LogOptions o;
    o.sync_dist = true;
    log("mean", mean, o);  // weighted by batch size: the true mean of every row
    o.reduce_fx = pl::Reduce::Sum;
    log("sum_of_batch_means", mean, o);
    o.reduce_fx = pl::Reduce::Min;
    log("min", mn, o);
    o.reduce_fx = pl::Reduce::Max;
    log("max", mx, o);
    pl::LogOptions local;
    log("unsynced_mean", mean, local);
    mean_metric_.update(batch.at(0));
    // target: value mod 3, prediction: value mod 2 (ids of 3 classes)
    std::vector<int64_t> target, pred;
    for (double x : v) target.push_back(static_cast<int64_t>(x) % 3), pred.push_back(static_cast<int64_t>(x) % 2);
    const int64_t k = static_cast<int64_t>(v.size());
    accuracy_.update(pl::Tensor::from_vector(pred, {k}), pl::Tensor::from_vector(target, {k}));
    // the same metric logged from the step (computed at the epoch's end); rank 1 never logs it, so
    // it takes part in the computation with nothing
    if (global_rank() != 1) {
      step_accuracy_.update(pl::Tensor::from_vector(pred, {k}), pl::Tensor::from_vector(target, {k}));
      log("step_accuracy", step_accuracy_);
    }
  }
  void on_validation_epoch_end() override {
    log("metric_mean", mean_metric_);
    log("metric_accuracy", accuracy_);
    if (mean_metric_.update_count() != 0 || accuracy_.update_count() != 0)
      throw std::runtime_error("log(name, Metric&) did not reset the metric");
    if (global_rank() != 1 && step_accuracy_.update_count() == 0)
      throw std::runtime_error("the metric logged from validation_step was reset before the epoch's end");
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    return std::make_unique<pl::SGD>(parameters(), pl::SgdOptions{});
  }

 private:
  pl::MeanMetric mean_metric_;
  pl::Accuracy accuracy_{3};
  pl::Accuracy step_accuracy_{3};
};

}  // namespace

int main(int argc, char** argv) {
  try {
    pl::TrainerOptions o;
    o.strategy = "ddp";
    o.accelerator = "cpu";
    o.use_distributed_sampler = false;
    o.enable_checkpointing = false;
    o.default_root_dir = argc > 2 ? argv[2] : ".";
    pl::Trainer trainer(o);
    int r = trainer.global_rank();
    int64_t n = 3 + 4 * r;
    std::vector<double> rows;
    for (int64_t i = 0; i < n; ++i) rows.push_back(row_value(r, i));
    auto ds = std::make_shared<pl::TensorDataset>(std::vector<pl::Tensor>{pl::Tensor::from_vector(rows, {n})});
    pl::DataLoaderOptions lo;
    lo.batch_size = 4;
    pl::DataLoader loader(ds, lo);
    Probe probe;
    auto m = trainer.validate(probe, loader);
    if (r == 0 && argc > 1) std::ofstream(argv[1]) << nlohmann::json(m).dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "metrics_worker: " << e.what() << "\n";
    return 1;
  }
}
