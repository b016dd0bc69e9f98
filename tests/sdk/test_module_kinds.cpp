// The Trainer's seam (trainer_model.hpp): a kind of module that is not a pl::LightningModule, a
// least-squares model with hand-written gradients behind its own TrainerModel, is trained, validated
// and checkpointed by the same Trainer.  Its weights after fit equal a replay of SGD written here
// (so the loop's StepScales reach the kind: accumulate_grad_batches 2 halves each gradient), the
// callbacks and the model summary see it through LightningBase and Trainer::model(), and
// log() from its evaluation step reaches callback_metrics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <plrt/sdk/model_summary.hpp>
#include <plrt/sdk/safetensors.hpp>
#include <plrt/sdk/trainer_model.hpp>

#include "callback_test_support.hpp"

namespace {

using ::testing::HasSubstr;

struct LeastSquares : pl::LightningBase {
  pl::Parameter w;  // [4]: prediction x · w, target the label as a number
  std::vector<std::string> hooks;
  LeastSquares() { w.value = pl::Tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.0f}, {4}); }
  std::unique_ptr<pl::TrainerModel> trainer_model() override;
  void on_fit_start() override { hooks.push_back("on_fit_start"); }
  void on_validation_epoch_end() override { hooks.push_back("on_validation_epoch_end"); }
};

// Mean squared error of one batch and, when `grad` is given, its gradient times `factor`.
double mse(const pl::Batch& b, const std::vector<float>& w, std::vector<double>* grad, double factor) {
  const pl::Tensor x = b.at(0).to_host(), t = b.at(1).to_host();
  const int64_t rows = x.size(0);
  const float* xs = x.data_ptr<float>();
  const int64_t* ts = t.data_ptr<int64_t>();
  double loss = 0;
  if (grad) grad->assign(4, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double p = 0;
    for (int j = 0; j < 4; ++j) p += static_cast<double>(xs[i * 4 + j]) * w[static_cast<size_t>(j)];
    const double e = p - static_cast<double>(ts[i]);
    loss += e * e / static_cast<double>(rows);
    if (grad)
      for (int j = 0; j < 4; ++j)
        (*grad)[static_cast<size_t>(j)] += factor * 2.0 * e * xs[i * 4 + j] / static_cast<double>(rows);
  }
  return loss;
}

class LeastSquaresModel : public pl::TrainerModel {
 public:
  explicit LeastSquaresModel(LeastSquares& k) : k_(k) {}
  std::string type_name() const override { return "LeastSquares"; }
  void place(const pl::Accelerator& acc, PL_Device device) override {
    k_.w.value = k_.w.value.to(acc, device);
    k_.w.grad = pl::Tensor::zeros(acc, device, {4});
  }
  std::vector<std::pair<std::string, pl::Parameter*>> parameters() override { return {{"w", &k_.w}}; }
  std::vector<std::pair<std::string, pl::Tensor*>> buffers() override { return {}; }
  void set_grad_ready_hook(std::function<void(size_t)> hook) override { hook_ = std::move(hook); }
  void train(bool on) override { training_ = on; }
  bool training() const override { return training_; }
  void zero_grad() override { k_.w.grad_is_zero = true; }
  void fill_unwritten_grads() override {
    if (!k_.w.grad_is_zero) return;
    std::fill_n(k_.w.grad.data_ptr<float>(), 4, 0.0f);
    k_.w.grad_is_zero = false;
  }
  std::vector<std::pair<std::string, pl::Tensor>> state_dict() override { return {{"w", k_.w.value}}; }
  void load_state_dict(const std::map<std::string, pl::Tensor>& state, bool) override {
    k_.w.value.copy_from(state.at("w"));
  }
  std::vector<Submodule> submodules(int) override { return {{"head", "LeastSquares", 4}}; }
  std::unique_ptr<pl::TrainerModel> replicate(pl::Trainer*) const override {
    throw pl::Error(PL_ERR_UNSUPPORTED, "LeastSquares has no replicas");
  }
  pl::Scalar training_step(const pl::Batch& b, int64_t, const pl::StepScales& s) override {
    std::vector<double> g;
    const double loss = mse(b, k_.w.value.to_vector<float>(), &g, s.grad * s.loss);
    float* out = k_.w.grad.data_ptr<float>();
    for (size_t j = 0; j < 4; ++j) out[j] = static_cast<float>(k_.w.grad_is_zero ? g[j] : out[j] + g[j]);
    k_.w.grad_is_zero = false;
    hook_(0);
    return loss;
  }
  pl::Scalar training_step_end(std::vector<pl::ReplicaOutput>& outputs, const pl::StepScales&) override {
    return outputs.at(0).loss;
  }
  void eval_step(pl::ReplicaOutput& out, int64_t, bool, PL_DType) override {
    k_.log("val_mse", mse(out.batch, k_.w.value.to_vector<float>(), nullptr, 0));
  }
  void eval_step_end(std::vector<pl::ReplicaOutput>&, bool, PL_DType) override {}
  pl::Tensor predict_step(const pl::Batch&, int64_t, PL_DType) override { return {}; }
  std::unique_ptr<pl::Optimizer> configure_optimizers() override {
    pl::SgdOptions o;
    o.lr = 0.05;
    return std::make_unique<pl::SGD>(std::vector<pl::Parameter*>{&k_.w}, o);
  }
  std::vector<pl::LRSchedulerConfig> configure_lr_schedulers(pl::Optimizer&) override { return {}; }

 private:
  LeastSquares& k_;
  std::function<void(size_t)> hook_;
  bool training_ = true;
};

std::unique_ptr<pl::TrainerModel> LeastSquares::trainer_model() { return std::make_unique<LeastSquaresModel>(*this); }

struct SeesTheModule : pl::Callback {
  const pl::LightningBase* seen = nullptr;
  std::string summary;
  void on_fit_start(pl::Trainer& t, pl::LightningBase& m) override {
    seen = &m;
    summary = pl::ModelSummary::table(*t.model());
  }
};

TEST(ModuleKinds, ALeastSquaresKindIsTrainedValidatedAndSavedByTheSameTrainer) {
  callback_test::FitRun run;
  run.o.max_epochs = 2;
  run.o.accumulate_grad_batches = 2;
  run.o.num_sanity_val_steps = 0;
  auto seer = std::make_shared<SeesTheModule>();
  run.o.callbacks = {seer};
  LeastSquares k;
  const std::vector<float> w0 = k.w.value.to_vector<float>();
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  lo.shuffle = false;
  pl::DataLoader train(callback_test::dataset(12), lo), val(callback_test::dataset(4), lo);
  pl::Trainer trainer(run.o, callback_test::FitRun::runtime());
  trainer.fit(k, train, &val);

  // the replay: 3 batches an epoch, windows of 2 (the epoch's last batch steps alone), each
  // gradient halved; plain SGD
  std::vector<double> w(w0.begin(), w0.end());
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<double> acc(4, 0.0);
    for (int64_t b = 0; b < 3; ++b) {
      std::vector<float> wf(w.begin(), w.end());
      std::vector<double> g;
      mse(train.batch(b), wf, &g, 0.5);
      for (size_t j = 0; j < 4; ++j) acc[j] += static_cast<double>(static_cast<float>(g[j]));
      if (b == 1 || b == 2) {
        for (size_t j = 0; j < 4; ++j) w[j] -= 0.05 * acc[j];
        acc.assign(4, 0.0);
      }
    }
  }
  const std::vector<float> got = k.w.value.to_vector<float>();
  for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(got[j], w[j], 1e-5) << "w[" << j << "]";
  EXPECT_EQ(trainer.global_step(), 4);

  EXPECT_EQ(seer->seen, &k) << "callbacks get the module as its LightningBase";
  EXPECT_THAT(seer->summary, HasSubstr("0 | head | LeastSquares | 4"));
  EXPECT_THAT(seer->summary, HasSubstr("4         Trainable params"));
  EXPECT_THAT(k.hooks, ::testing::ElementsAre("on_fit_start", "on_validation_epoch_end", "on_validation_epoch_end"));
  ASSERT_EQ(trainer.callback_metrics().count("val_mse"), 1u);
  std::vector<float> wv(got.begin(), got.end());
  EXPECT_NEAR(trainer.callback_metrics().at("val_mse"), mse(val.batch(0), wv, nullptr, 0), 1e-6);

  const std::string ckpt = (run.dir / "by_hand").string();
  trainer.save_checkpoint(ckpt);
  const auto saved = pl::safetensors::load(ckpt + "/model.safetensors");
  ASSERT_EQ(saved.tensors.count("w"), 1u);
  EXPECT_EQ(saved.tensors.at("w").to_vector<float>(), got);
}

}  // namespace
