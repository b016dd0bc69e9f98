// Validation and test under dp/ddp2 (several replicas in one process, CPU "devices"), in process:
//  - each batch is split over the replicas as training splits it (torch's scatter: ceil(B/n) rows,
//    an uneven last part, a replica with no rows left out), every replica on its own module
//  - validation_step_end / test_step_end get every replica's output on the root, once per batch;
//    a metric over the whole batch computed there (softmax across the replicas' logits, argmax
//    accuracy) equals an independent reference computed here in double precision
//  - values the replicas log are merged as training's are (reduce_fx; the mean weighted by rows),
//    in training_step too (its epoch loss over an uneven split = the mean over every row)
//  - the replicas evaluate the root's current weights, also weights changed between two validates
//  - single_device: *_step_end once per batch with the whole batch ("regardless of the backend")
#include <gmock/gmock.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <plrt/sdk/lightning_module.hpp>
#include <plrt/sdk/nn.hpp>
#include <plrt/sdk/random.hpp>
#include <plrt/sdk/trainer.hpp>
#include <set>

namespace {

constexpr int64_t kRows = 14, kIn = 4, kClasses = 3, kBatch = 10;  // batches of 10 and 4 rows

// What the modules saw, shared by the root and its replicas (their threads run at once).
struct Record {
  std::mutex m;
  std::vector<const void*> step_modules;        // which module ran each validation_step / test_step
  std::vector<std::vector<int64_t>> end_sizes;  // per *_step_end call: outputs' batch_size
  std::vector<std::vector<int>> end_replicas;   // per *_step_end call: outputs' replica
  std::vector<std::vector<float>> end_ids;      // per *_step_end call: the ids of every output's slice, in order
  std::vector<bool> end_has_output;
  std::vector<bool> training_in_step;
  int test_ends = 0, val_ends = 0;
};

struct Classifier : pl::LightningModule {
  pl::nn::Linear fc;
  std::shared_ptr<Record> rec;
  bool two_phase = false;
  bool undefined_output = false;  // forward_step returns nothing (the error's test)
  Classifier(pl::Generator* g, std::shared_ptr<Record> r, bool split)
      : fc(kIn, kClasses, true, g), rec(std::move(r)), two_phase(split) {
    register_module("fc", fc);
  }
  std::unique_ptr<pl::LightningModule> replicate() const override {
    auto c = std::make_unique<Classifier>(nullptr, rec, two_phase);
    c->undefined_output = undefined_output;
    return c;
  }
  pl::Scalar training_step(const pl::Batch& b, int64_t) override {
    auto ce = pl::nn::cross_entropy(fc.forward(b.at(0)), b.at(1));
    fc.backward(ce.grad, false);
    pl::LogOptions epoch;
    epoch.on_step = false;
    epoch.on_epoch = true;
    log("train_loss", ce.loss, epoch);
    return ce.loss;
  }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    pl::SgdOptions o;
    o.lr = 0;  // the weights stay as made: the reference's
    return std::make_unique<pl::SGD>(parameters(), o);
  }
  bool split_eval_step() const override { return two_phase; }
  pl::Tensor forward_step(const pl::Batch& b, int64_t) override {
    if (undefined_output) return {};
    return fc.forward(b.at(0));
  }
  // One-phase: each replica logs its slice's mean loss, its rows (summed) and its largest id.
  void eval_part(const pl::Batch& b, const std::string& prefix) {
    {
      std::lock_guard<std::mutex> lock(rec->m);
      rec->step_modules.push_back(this);
      rec->training_in_step.push_back(training());
    }
    auto ce = pl::nn::cross_entropy(fc.forward(b.at(0)), b.at(1), false);
    log(prefix + "_loss", ce.loss);
    pl::LogOptions sum;
    sum.reduce_fx = pl::Reduce::Sum;
    log(prefix + "_rows", static_cast<double>(b.at(0).size(0)), sum);
    pl::LogOptions mx;
    mx.reduce_fx = pl::Reduce::Max;
    const auto ids = b.at(2).to_vector<float>();
    log(prefix + "_max_id", *std::max_element(ids.begin(), ids.end()), mx);
  }
  void validation_step(const pl::Batch& b, int64_t) override { eval_part(b, "val"); }
  void test_step(const pl::Batch& b, int64_t) override { eval_part(b, "test"); }
  // Both: record the outputs; two-phase: softmax over the concatenated logits, whole-batch metrics.
  void step_end(std::vector<pl::ReplicaOutput>& outs, const std::string& prefix) {
    std::vector<int64_t> sizes;
    std::vector<int> reps;
    std::vector<float> ids;
    for (auto& o : outs) {
      sizes.push_back(o.batch_size);
      reps.push_back(o.replica);
      for (float v : o.batch.at(2).to_vector<float>()) ids.push_back(v);
    }
    {
      std::lock_guard<std::mutex> lock(rec->m);
      rec->end_sizes.push_back(sizes);
      rec->end_replicas.push_back(reps);
      rec->end_ids.push_back(ids);
      rec->end_has_output.push_back(!outs.empty() && outs[0].output.defined());
      (prefix == "test" ? rec->test_ends : rec->val_ends)++;
    }
    if (!two_phase) return;
    std::vector<float> logits;
    std::vector<int64_t> labels;
    for (auto& o : outs) {
      EXPECT_EQ(o.output.device().type, PL_DEVICE_CPU);  // (cpu "devices" share host memory: no index to check)
      EXPECT_EQ(o.output.size(0), o.batch_size);
      for (float v : o.output.to_vector<float>()) logits.push_back(v);
      for (int64_t v : o.batch.at(1).to_vector<int64_t>()) labels.push_back(v);
    }
    const size_t n = labels.size();
    double correct = 0, best_p = 0;
    for (size_t i = 0; i < n; ++i) {
      const float* z = &logits[i * kClasses];
      const double mx = *std::max_element(z, z + kClasses);
      double den = 0;
      for (int c = 0; c < kClasses; ++c) den += std::exp(z[c] - mx);
      best_p = std::max(best_p, std::exp(z[labels[i]] - mx) / den);
      correct += std::max_element(z, z + kClasses) - z == labels[i] ? 1 : 0;
    }
    log(prefix + "_acc", correct / static_cast<double>(n));
    pl::LogOptions mx;
    mx.reduce_fx = pl::Reduce::Max;
    log(prefix + "_best_p", best_p, mx);
  }
  void validation_step_end(std::vector<pl::ReplicaOutput>& outs) override { step_end(outs, "val"); }
  void test_step_end(std::vector<pl::ReplicaOutput>& outs) override { step_end(outs, "test"); }
};

// The data: row i has features cos(i*k + ...), label i % 3 (so some rows are right, some wrong),
// and its id i as a float column, to see which rows each replica got.
std::shared_ptr<pl::TensorDataset> dataset() {
  std::vector<float> xs(kRows * kIn), ids(kRows);
  std::vector<int64_t> ys(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t k = 0; k < kIn; ++k) xs[static_cast<size_t>(i * kIn + k)] = std::cos(0.7f * i + 1.3f * k);
    ys[static_cast<size_t>(i)] = i % kClasses;
    ids[static_cast<size_t>(i)] = static_cast<float>(i);
  }
  return std::make_shared<pl::TensorDataset>(std::vector<pl::Tensor>{pl::Tensor::from_vector(xs, {kRows, kIn}),
                                                                     pl::Tensor::from_vector(ys, {kRows}),
                                                                     pl::Tensor::from_vector(ids, {kRows})});
}

// The reference, in double on the host from the module's weights: mean cross entropy over all
// rows, accuracy over all rows, the largest softmax probability of a true class.
struct Reference {
  double loss = 0, acc = 0, best_p = 0;
};
Reference reference(Classifier& m) {
  const auto w = m.fc.weight().value.to_vector<float>();  // [classes, in]
  const auto bias = m.fc.bias()->value.to_vector<float>();
  auto ds = dataset();
  const auto xs = ds->fields()[0].to_vector<float>();
  const auto ys = ds->fields()[1].to_vector<int64_t>();
  Reference r;
  for (int64_t i = 0; i < kRows; ++i) {
    double z[kClasses];
    for (int c = 0; c < kClasses; ++c) {
      z[c] = bias[static_cast<size_t>(c)];
      for (int64_t k = 0; k < kIn; ++k)
        z[c] += static_cast<double>(w[static_cast<size_t>(c * kIn + k)]) * xs[static_cast<size_t>(i * kIn + k)];
    }
    const double mx = *std::max_element(z, z + kClasses);
    double den = 0;
    for (double v : z) den += std::exp(v - mx);
    const int64_t y = ys[static_cast<size_t>(i)];
    r.loss += -(z[y] - mx - std::log(den)) / kRows;
    r.best_p = std::max(r.best_p, std::exp(z[y] - mx) / den);
    r.acc += (std::max_element(z, z + kClasses) - z == y ? 1.0 : 0.0) / kRows;
  }
  return r;
}

struct EvalRun {
  std::shared_ptr<Record> rec = std::make_shared<Record>();
  std::filesystem::path dir;
  pl::Generator gen{5};
  std::unique_ptr<pl::Trainer> trainer;
  std::unique_ptr<Classifier> model;
  std::unique_ptr<pl::DataLoader> loader;

  EvalRun(const std::string& strategy, int devices, bool two_phase) {
    dir = std::filesystem::temp_directory_path() /
          ("plrt-eval-replicas-" + std::to_string(::getpid()) + "-" + strategy + std::to_string(devices));
    pl::TrainerOptions o;
    o.accelerator = "cpu";
    o.devices = devices;
    o.strategy = strategy;
    o.max_epochs = 1;
    o.enable_checkpointing = false;
    o.enable_progress_bar = false;
    o.read_env = false;
    o.default_root_dir = dir.string();
    pl::RuntimeOptions ro;
    ro.plugin_dirs = {PLRT_TEST_PLUGIN_DIR};
    ro.use_env_dirs = false;
    ro.log_level = "warn";
    trainer = std::make_unique<pl::Trainer>(o, ro);
    model = std::make_unique<Classifier>(&gen, rec, two_phase);
    pl::DataLoaderOptions lo;
    lo.batch_size = kBatch;
    loader = std::make_unique<pl::DataLoader>(dataset(), lo);
  }
  ~EvalRun() {
    trainer.reset();
    std::filesystem::remove_all(dir);
  }
};

using Sizes = std::vector<std::vector<int64_t>>;
using Reps = std::vector<std::vector<int>>;

std::vector<float> ids(int64_t begin, int64_t end) {
  std::vector<float> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(static_cast<float>(i));
  return v;
}

TEST(EvalReplicas, DpValidationSplitsEveryBatchAndMergesTheReplicasLogs) {
  EvalRun run("dp", 3, false);
  const auto values = run.trainer->validate(*run.model, *run.loader);
  ASSERT_EQ(run.trainer->num_replicas(), 3);
  Record& rec = *run.rec;
  // 10 rows over 3 replicas: 4, 4, 2; the last batch of 4: 2, 2 and none for replica 2
  EXPECT_EQ(rec.end_sizes, (Sizes{{4, 4, 2}, {2, 2}}));
  EXPECT_EQ(rec.end_replicas, (Reps{{0, 1, 2}, {0, 1}}));
  // the slices, in replica order, are the batch's rows in order: a partition of the batch
  EXPECT_EQ(rec.end_ids, (std::vector<std::vector<float>>{ids(0, 10), ids(10, 14)}));
  EXPECT_EQ(rec.val_ends, 2);
  EXPECT_EQ(rec.test_ends, 0);
  EXPECT_EQ(rec.end_has_output, (std::vector<bool>{false, false})) << "one-phase outputs carry no tensor";
  // 5 steps, on 3 distinct modules (the root and two replicas), all in eval mode
  EXPECT_EQ(rec.step_modules.size(), 5u);
  EXPECT_EQ(std::set<const void*>(rec.step_modules.begin(), rec.step_modules.end()).size(), 3u);
  EXPECT_EQ(std::count(rec.step_modules.begin(), rec.step_modules.end(), run.model.get()), 2);
  for (bool t : rec.training_in_step) EXPECT_FALSE(t);
  EXPECT_TRUE(run.model->training()) << "the root's mode comes back after validation";
  // merged as training merges: mean weighted by rows (= the mean over every row), sum, max
  const Reference ref = reference(*run.model);
  EXPECT_NEAR(values.at("val_loss"), ref.loss, 1e-5);
  EXPECT_DOUBLE_EQ(values.at("val_rows"), static_cast<double>(kRows));
  EXPECT_DOUBLE_EQ(values.at("val_max_id"), static_cast<double>(kRows - 1));
}

TEST(EvalReplicas, DpWholeBatchMetricInValidationStepEndEqualsTheReference) {
  EvalRun run("dp", 3, true);
  const auto values = run.trainer->validate(*run.model, *run.loader);
  Record& rec = *run.rec;
  EXPECT_EQ(rec.end_sizes, (Sizes{{4, 4, 2}, {2, 2}}));
  EXPECT_EQ(rec.end_has_output, (std::vector<bool>{true, true}));
  EXPECT_TRUE(rec.step_modules.empty()) << "two-phase evaluation runs forward_step instead of validation_step";
  const Reference ref = reference(*run.model);
  // accuracy over each whole batch, then the epoch mean weighted by batch rows = over all rows
  EXPECT_NEAR(values.at("val_acc"), ref.acc, 1e-9);
  EXPECT_NEAR(values.at("val_best_p"), ref.best_p, 1e-6);
  EXPECT_GT(ref.acc, 0.0);  // not vacuous: some rows right, some wrong
  EXPECT_LT(ref.acc, 1.0);
  // the same module on one device gives the same numbers
  EvalRun one("single_device", 1, true);
  const auto single = one.trainer->validate(*one.model, *one.loader);
  EXPECT_NEAR(single.at("val_acc"), values.at("val_acc"), 1e-9);
  EXPECT_NEAR(single.at("val_best_p"), values.at("val_best_p"), 1e-6);
}

TEST(EvalReplicas, DpTestStepEndLikewise) {
  for (bool two_phase : {false, true}) {
    EvalRun run("dp", 3, two_phase);
    const auto values = run.trainer->test(*run.model, *run.loader);
    Record& rec = *run.rec;
    EXPECT_EQ(rec.test_ends, 2);
    EXPECT_EQ(rec.val_ends, 0);
    EXPECT_EQ(rec.end_sizes, (Sizes{{4, 4, 2}, {2, 2}}));
    EXPECT_EQ(rec.end_ids, (std::vector<std::vector<float>>{ids(0, 10), ids(10, 14)}));
    const Reference ref = reference(*run.model);
    if (two_phase) {
      EXPECT_NEAR(values.at("test_acc"), ref.acc, 1e-9);
      EXPECT_NEAR(values.at("test_best_p"), ref.best_p, 1e-6);
    } else {
      EXPECT_EQ(rec.step_modules.size(), 5u);
      EXPECT_NEAR(values.at("test_loss"), ref.loss, 1e-5);
      EXPECT_DOUBLE_EQ(values.at("test_rows"), static_cast<double>(kRows));
    }
  }
}

TEST(EvalReplicas, Ddp2OnOneNodeSplitsLikeDp) {
  EvalRun run("ddp2", 2, true);
  const auto values = run.trainer->validate(*run.model, *run.loader);
  EXPECT_EQ(run.rec->end_sizes, (Sizes{{5, 5}, {2, 2}}));
  const Reference ref = reference(*run.model);
  EXPECT_NEAR(values.at("val_acc"), ref.acc, 1e-9);
  EXPECT_NEAR(values.at("val_best_p"), ref.best_p, 1e-6);
}

TEST(EvalReplicas, StepEndOncePerBatchUnderSingleDevice) {
  for (bool two_phase : {false, true}) {
    EvalRun run("single_device", 1, two_phase);
    const auto values = run.trainer->validate(*run.model, *run.loader);
    Record& rec = *run.rec;
    EXPECT_EQ(rec.end_sizes, (Sizes{{10}, {4}}));
    EXPECT_EQ(rec.end_replicas, (Reps{{0}, {0}}));
    EXPECT_EQ(rec.end_ids, (std::vector<std::vector<float>>{ids(0, 10), ids(10, 14)}));
    EXPECT_EQ(rec.end_has_output, (std::vector<bool>{two_phase, two_phase}));
    EXPECT_EQ(rec.step_modules.size(), two_phase ? 0u : 2u);
    const Reference ref = reference(*run.model);
    if (two_phase)
      EXPECT_NEAR(values.at("val_acc"), ref.acc, 1e-9);
    else
      EXPECT_NEAR(values.at("val_loss"), ref.loss, 1e-5);
  }
}

TEST(EvalReplicas, ReplicasEvaluateTheRootsCurrentWeights) {
  // Weights changed between two validates (as a program loading other weights does): the
  // replicas must not keep the values of the first validate's copy.
  EvalRun run("dp", 3, false);
  run.trainer->validate(*run.model, *run.loader);
  auto w = run.model->fc.weight().value.to_vector<float>();
  for (auto& v : w) v = -2.0f * v + 0.25f;
  run.model->fc.weight().value.copy_from(pl::Tensor::from_vector(w, run.model->fc.weight().value.shape()));
  const auto values = run.trainer->validate(*run.model, *run.loader);
  EXPECT_NEAR(values.at("val_loss"), reference(*run.model).loss, 1e-5);
}

TEST(EvalReplicas, DpTrainingLogsAreWeightedByTheReplicasRows) {
  // The merge evaluation shares with training: 4, 4, 2 rows weigh 4, 4, 2 (training_step's epoch
  // loss is then the mean over every row, as on one device), also in fit's validation.
  EvalRun run("dp", 3, false);
  run.trainer = nullptr;
  pl::TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = 3;
  o.strategy = "dp";
  o.max_epochs = 1;
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  o.read_env = false;
  o.default_root_dir = run.dir.string();
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_TEST_PLUGIN_DIR};
  ro.use_env_dirs = false;
  ro.log_level = "warn";
  run.trainer = std::make_unique<pl::Trainer>(o, ro);
  pl::DataLoaderOptions lo;
  lo.batch_size = kBatch;
  pl::DataLoader val(dataset(), lo);
  run.trainer->fit(*run.model, *run.loader, &val);
  const Reference ref = reference(*run.model);
  const auto& m = run.trainer->callback_metrics();
  EXPECT_NEAR(m.at("train_loss"), ref.loss, 1e-5);
  EXPECT_NEAR(m.at("val_loss"), ref.loss, 1e-5);
  EXPECT_EQ(run.rec->val_ends, 4);  // the 2 batches, after the sanity check's 2 (num_sanity_val_steps)
}

TEST(EvalReplicas, TrainingAfterValidateUsesTheRootsCurrentWeights) {
  // validate's run_step takes the copy dp owed; weights changed before fit must still reach the
  // replicas at fit's first step (lr 0: every step's loss is the new weights').
  EvalRun run("dp", 3, false);
  run.trainer->validate(*run.model, *run.loader);
  auto w = run.model->fc.weight().value.to_vector<float>();
  for (auto& v : w) v = 1.5f * v - 0.5f;
  run.model->fc.weight().value.copy_from(pl::Tensor::from_vector(w, run.model->fc.weight().value.shape()));
  run.trainer->fit(*run.model, *run.loader);
  EXPECT_NEAR(run.trainer->callback_metrics().at("train_loss"), reference(*run.model).loss, 1e-5);
}

TEST(EvalReplicas, AnUndefinedForwardOutputIsAnErrorNamingTheReplica) {
  EvalRun run("dp", 3, true);
  run.model->undefined_output = true;
  try {
    run.trainer->validate(*run.model, *run.loader);
    FAIL() << "expected an error";
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("forward_step of replica 0 returned an undefined tensor in validation"));
  }
  EXPECT_TRUE(run.model->training()) << "the mode comes back after an error too";
}

TEST(EvalReplicas, SplitEvalStepWithoutForwardStepSaysWhatToOverride) {
  struct NoForward : Classifier {
    using Classifier::Classifier;
    pl::Tensor forward_step(const pl::Batch& b, int64_t i) override { return pl::LightningModule::forward_step(b, i); }
    std::unique_ptr<pl::LightningModule> replicate() const override {
      return std::make_unique<NoForward>(nullptr, rec, two_phase);
    }
  };
  EvalRun run("dp", 2, true);
  NoForward m(nullptr, run.rec, true);
  try {
    run.trainer->validate(m, *run.loader);
    FAIL() << "expected an error";
  } catch (const pl::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("split_eval_step() is true but forward_step is not overridden"));
  }
}

}  // namespace
