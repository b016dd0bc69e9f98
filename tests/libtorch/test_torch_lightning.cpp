// pl::torch::LightningModule under pl::Trainer against libtorch itself: the same network, batches
// and optimizer trained by a plain libtorch loop written here (backward on loss / accumulate, clip
// the gradient norm, Adam step, zero_grad, libtorch's StepLR) end with the same weights; a fit
// resumed from its checkpoint (the Adam moments in the torch::save archive, the StepLR's count)
// equals the uninterrupted one; under
// plrun at 2 ranks with ddp (the worker, torch_lightning_worker.cpp) it equals the plain loop over
// the global batches.  And the kind's errors: a loss that does not require grad, an optimizer over
// a tensor that is not the module's, LBFGS, a schedule without its scheduler, dp's replicas, 16-mixed on the CPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "spawn.hpp"
#include "torch_lightning_net.hpp"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace {

struct Dir {
  fs::path path = fs::temp_directory_path() / ("plrt_torch_lightning_" + std::to_string(::getpid()) + "_" +
                                               std::to_string(reinterpret_cast<uintptr_t>(this)));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
};

pl::TrainerOptions options(const Dir& d) {
  pl::TrainerOptions o;
  o.accelerator = "cpu";
  o.devices = 1;
  o.strategy = "single_device";
  o.max_epochs = 2;
  o.accumulate_grad_batches = 2;
  o.gradient_clip_val = 0.05;
  o.read_env = false;
  o.enable_progress_bar = false;
  o.num_sanity_val_steps = 0;
  o.default_root_dir = d.path.string();
  return o;
}

pl::RuntimeOptions runtime() {
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
  ro.use_env_dirs = false;
  ro.log_level = "warn";
  return ro;
}

void fit(torch_lightning::Net& net, const pl::TrainerOptions& o, const std::string& ckpt = "",
         bool torch_dataset = false, bool stack = false) {
  pl::DataLoader train = torch_lightning::loader(24, 4, torch_dataset, stack),
                 val = torch_lightning::loader(8, 4, torch_dataset, stack);
  pl::Trainer trainer(o, runtime());
  trainer.fit(net, train, &val, ckpt);
  EXPECT_EQ(trainer.callback_metrics().count("train_loss"), 1u);
  EXPECT_EQ(trainer.callback_metrics().count("val_loss"), 1u);
}

void expect_same(torch_lightning::Net& a, torch_lightning::Net& b, double tol) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_LE((pa[i].value() - pb[i].value()).abs().max().item<double>(), tol) << pa[i].key();
}

TEST(TorchLightning, SingleDeviceEqualsAPlainLibtorchLoop) {
  Dir d;
  torch_lightning::Net net, ref;
  ref.copy_from(net);
  net.step_lr = true;  // libtorch's StepLR: its second step halves the lr for the third epoch
  pl::TrainerOptions o = options(d);
  o.max_epochs = 3;
  fit(net, o);
  torch_lightning::plain_loop(ref, 24, 4, 3, 2, 0.05, true);
  expect_same(net, ref, 1e-6);
  // the weights moved (the comparison is not of two untouched nets)
  torch_lightning::Net fresh;
  EXPECT_GT((net.fc1->weight - fresh.fc1->weight).abs().max().item<double>(), 1e-3);
}

// The rows from a libtorch dataset (Rows through a libtorch transform, then also its Stack) train
// as the same rows from plrt's TensorDataset.
TEST(TorchLightning, ALibtorchDatasetTrainsAsTheSameRows) {
  for (bool stack : {false, true}) {
    SCOPED_TRACE(stack ? "Stack" : "Examples");
    Dir d;
    torch_lightning::Net net, ref;
    ref.copy_from(net);
    fit(net, options(d), "", true, stack);
    torch_lightning::plain_loop(ref, 24, 4, 2, 2, 0.05);
    expect_same(net, ref, 1e-6);
  }
}

// plrt's StepLR over a torch optimizer of two param groups (lr 0.1 and 0.2): each epoch halves
// both, keeping their ratio (the optimizer's lr is group 0's).
TEST(TorchLightning, PlrtSchedulersKeepTheParamGroupsRatios) {
  Dir d;
  torch_lightning::Net net;
  net.two_groups = true;
  pl::TrainerOptions o = options(d);
  o.max_epochs = 3;
  pl::DataLoader train = torch_lightning::loader(24, 4);
  pl::Trainer trainer(o, runtime());
  trainer.fit(net, train);
  ASSERT_NE(net.torch_optimizer, nullptr);
  const auto& groups = net.torch_optimizer->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_DOUBLE_EQ(groups[0].options().get_lr(), 0.1 * 0.125);  // three epoch-end steps
  EXPECT_DOUBLE_EQ(groups[1].options().get_lr(), 0.2 * 0.125);
  EXPECT_DOUBLE_EQ(trainer.optimizer()->lr(), 0.1 * 0.125);
}

struct Unsized : torch::data::datasets::Dataset<Unsized> {
  torch::data::Example<> get(size_t) override { return {torch::zeros({4}), torch::zeros({}, torch::kInt64)}; }
  c10::optional<size_t> size() const override { return c10::nullopt; }
};

TEST(TorchLightning, ALibtorchDatasetWithoutASizeIsRefused) {
  try {
    pl::torch::data_loader(Unsized());
    ADD_FAILURE() << "no error";
  } catch (const pl::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("has no size"));
  }
}

// 3 epochs in one fit, and 1 + 2 epochs resumed from "last" with a new module (the checkpoint's
// weights are loaded), each module set up by `setup`: the two end with the same weights.
void expect_resume_equals_whole(const std::function<void(torch_lightning::Net&)>& setup) {
  Dir d1, d2;
  torch_lightning::Net whole, part, resumed;
  part.copy_from(whole);
  for (torch_lightning::Net* n : {&whole, &part, &resumed}) setup(*n);
  pl::TrainerOptions o = options(d1);
  o.max_epochs = 3;
  fit(whole, o);
  pl::TrainerOptions first = options(d2);
  first.max_epochs = 1;
  fit(part, first);
  pl::TrainerOptions rest = options(d2);
  rest.max_epochs = 3;
  fit(resumed, rest, "last");
  expect_same(resumed, whole, 1e-6);
}

TEST(TorchLightning, AResumedFitEqualsTheUninterruptedOne) {
  // Adam's moments, and libtorch's StepLR, which must know it stepped once
  expect_resume_equals_whole([](torch_lightning::Net& n) { n.step_lr = true; });
}

// Each of libtorch's optimizers keeps its state by name in the checkpoint (momentum buffers,
// Adam's moments and amsgrad maximum, RMSprop's averages, Adagrad's sums, the step counts): a
// resumed fit equals the uninterrupted one.
TEST(TorchLightning, EveryLibtorchOptimizerResumesWhereItStopped) {
  for (const std::string kind : {"sgd", "adamw", "rmsprop", "adagrad"}) {
    SCOPED_TRACE(kind);
    expect_resume_equals_whole([&](torch_lightning::Net& n) { n.optimizer = kind; });
  }
}

TEST(TorchLightning, TheKindsErrorsNameTheirCause) {
  Dir d;
  pl::DataLoaderOptions lo;
  lo.batch_size = 4;
  pl::DataLoader train(torch_lightning::dataset(8), lo);
  auto error_of = [&](torch_lightning::Net& net, pl::TrainerOptions o) -> std::string {
    try {
      pl::Trainer trainer(o, runtime());
      trainer.fit(net, train);
    } catch (const pl::Error& e) {
      return e.what();
    }
    return "no error";
  };
  {
    torch_lightning::Net net;
    net.detach_loss = true;
    EXPECT_THAT(error_of(net, options(d)), HasSubstr("does not require grad"));
  }
  {
    torch_lightning::Net net;
    net.foreign_optimizer = true;
    EXPECT_THAT(error_of(net, options(d)), HasSubstr("not one of this module's parameters"));
  }
  {
    torch_lightning::Net net;
    net.lbfgs = true;
    EXPECT_THAT(error_of(net, options(d)), HasSubstr("LBFGS"));
  }
  {
    torch_lightning::Net net;
    net.empty_schedule = true;
    EXPECT_THAT(error_of(net, options(d)), HasSubstr("entry without a scheduler"));
  }
  {
    torch_lightning::Net net;
    pl::TrainerOptions o = options(d);
    o.precision = "16-mixed";
    EXPECT_THAT(error_of(net, o), HasSubstr("use precision 'bf16-mixed'"));
  }
  {
    torch_lightning::Net net;
    pl::TrainerOptions o = options(d);
    o.strategy = "dp";
    o.devices = 2;
    EXPECT_THAT(error_of(net, o), HasSubstr("use strategy ddp"));
  }
}

TEST(TorchLightning, DdpAtTwoRanksEqualsThePlainLoopOverTheGlobalBatches) {
  Dir d;
  const std::string out = (d.path / "weights.safetensors").string();
  plrt_test::ProcessSpec spec;
  // the rows through a libtorch dataset: the Trainer injects its DistributedSampler as for its own
  spec.argv = {PLRUN_PATH, "--devices", "2", "--strategy",    "ddp",
               "--",       WORKER_PATH, out, d.path.string(), "--torch-dataset"};
  spec.env = {{"PL_LOG_LEVEL", "warn"}};
  spec.unset_env = {
      "RANK",         "WORLD_SIZE",   "LOCAL_RANK",           "MASTER_ADDR",         "MASTER_PORT",
      "PL_JOB_TOKEN", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PL_TRAINER_STRATEGY", "PL_TRAINER_DEVICES"};
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(240);
  const auto p = plrt_test::run_job({spec}, w).processes.at(0);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  torch_lightning::Net got, ref;
  ref.copy_from(got);  // the worker's initial weights are these (same seed); rank 0's are broadcast
  torch_lightning::load(got, out);
  torch_lightning::plain_loop(ref, 24, 8, 2, 2, 0.05);  // 2 ranks x 4 rows = the global batch of 8
  expect_same(got, ref, 1e-5);
  // the module's all_gather of {rank, 10 rank}: stacked in rank order
  std::ifstream gathered(out + ".gathered");
  std::stringstream rows;
  rows << gathered.rdbuf();
  EXPECT_EQ(rows.str(), "0 0\n1 10\n");
}

}  // namespace
