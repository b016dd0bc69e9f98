// The trainer drives the ABI 1.4 strategy entries, each through strategies that implement them
// (single_device, the third-party independent_c) and through the host's fallbacks (the ABI 1.3
// build independent_c13, whose 1.4 slots abort if called; ddp as it is): optimizer_step with whole
// and partial ranges, frozen parameters (PL_Parameter.kind), agree_skip, reduce / all_gather, and
// per-rank strategy state in checkpoints (round trip, damaged and missing files, another world
// size).  Also the SDK lifetimes: a module that outlives its trainer, a trainer that outlives its
// module.  Multi-process cases run entries_worker under plrun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/safetensors.hpp>

#include "entries_model.hpp"
#include "training_support.hpp"

namespace {

using ::testing::HasSubstr;
using namespace plrt_training;
using entries_test::Model;
using entries_test::ModelConfig;

pl::RuntimeOptions test_plugins() {
  pl::RuntimeOptions ro;
  ro.plugin_dirs = {PLRT_TEST_PLUGIN_DIR, PLRT_TEST_ABI13_DIR};
  ro.use_env_dirs = false;
  ro.log_level = "warn";
  return ro;
}

pl::TrainerOptions options(const TempDir& dir, const std::string& strategy, int64_t epochs = 2) {
  pl::TrainerOptions o;
  o.strategy = strategy;
  o.accelerator = "cpu";
  o.devices = 1;
  o.max_epochs = epochs;
  o.seed = 5;
  o.default_root_dir = dir.path.string();
  o.enable_progress_bar = false;
  o.enable_checkpointing = false;
  o.read_env = false;
  return o;
}

std::map<std::string, std::vector<float>> values(Model& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, p] : m.named_parameters()) out[name] = p->value.to_vector<float>();
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pl::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Trains a fresh model with `strategy` (options appended) and returns its initial and final values.
struct Trained {
  std::map<std::string, std::vector<float>> init, final;
  int64_t steps = 0;
  std::function<double(const std::string&)> stat;
};
Trained train(const std::string& strategy, std::vector<std::pair<std::string, std::string>> opts = {},
              ModelConfig c = {}, const std::string& precision = "32-true") {
  TempDir dir;
  auto o = options(dir, strategy);
  o.strategy_options = std::move(opts);
  o.precision = precision;
  auto trainer = std::make_shared<pl::Trainer>(o, test_plugins());
  auto model = std::make_shared<Model>(c);
  Trained r;
  r.init = values(*model);
  auto data = entries_test::loader(36, 6);
  trainer->fit(*model, data);
  r.final = values(*model);
  r.steps = trainer->global_step();
  r.stat = [trainer, model](const std::string& name) { return trainer->strategy_stat(name); };
  return r;
}

// ---- optimizer_step and PL_Parameter.kind ----

// ABI 1.7 from a C plugin: bind_optimizer's lr_scale multiplies the host's learning rate when the
// run starts.  For momentum SGD, lr x 2 is the gradient x 2 (grad_scale=2), exactly.
TEST(StrategyEntries, ACStrategysLrScaleMultipliesTheHostsLearningRate) {
  Trained scaled = train("independent_c", {{"lr_scale", "2"}});
  Trained doubled = train("independent_c", {{"grad_scale", "2"}});
  Trained plain = train("independent_c");
  EXPECT_EQ(scaled.final, doubled.final);
  EXPECT_NE(scaled.final, plain.final);
  EXPECT_THAT(error_of([] { train("independent_c", {{"lr_scale", "0"}}); }), HasSubstr("lr_scale='0' is not valid"));
}

TEST(StrategyEntries, WholeStepsAreBitIdenticalThroughEveryPathAndFrozenParametersStay) {
  ModelConfig frozen;
  frozen.freeze_l1_bias = true;
  Trained sd = train("single_device", {}, frozen);     // its optimizer_step: every trainable parameter
  Trained ic = train("independent_c", {}, frozen);     // the same, from a third-party plugin
  Trained old = train("independent_c13", {}, frozen);  // ABI 1.3: the host's own optimizer->step()
  EXPECT_EQ(sd.steps, 12);
  EXPECT_EQ(sd.final, old.final);
  EXPECT_EQ(ic.final, old.final);
  EXPECT_EQ(sd.final.at("l1.bias"), sd.init.at("l1.bias")) << "a frozen parameter was stepped";
  EXPECT_NE(sd.final.at("l1.weight"), sd.init.at("l1.weight"));
  EXPECT_EQ(ic.stat("optimizer_steps"), 12);
  EXPECT_EQ(ic.stat("ranges_stepped"), 12 * 3) << "three trainable parameters (l1.bias is frozen)";
}

TEST(StrategyEntries, PartialRangesStepOnlyTheFirstHalfOfEachParameter) {
  Trained r = train("independent_c", {{"step", "first_half"}});
  for (const auto& [name, init] : r.init) {
    const auto& got = r.final.at(name);
    const size_t half = init.size() / 2;
    EXPECT_EQ(std::vector<float>(got.begin() + static_cast<long>(half), got.end()),
              std::vector<float>(init.begin() + static_cast<long>(half), init.end()))
        << name << ": its second half was stepped";
    if (half > 0) {
      EXPECT_NE(got[0], init[0]) << name << ": its first half was not stepped";
    }
  }
  EXPECT_EQ(r.stat("ranges_stepped"), 12 * 4);
}

TEST(StrategyEntries, ARangeOfAFrozenParameterOrABufferIsTheStrategysError) {
  ModelConfig frozen;
  frozen.freeze_l1_bias = true;
  std::string msg = error_of([&] { train("independent_c", {{"step", "frozen"}}, frozen); });
  EXPECT_THAT(msg, HasSubstr("'l1.bias', a frozen parameter"));
  EXPECT_THAT(msg, HasSubstr("independent_c"));
  msg = error_of([&] { train("independent_c", {{"step", "frozen"}}); });
  EXPECT_THAT(msg, HasSubstr("'seen', a buffer"));
}

TEST(StrategyEntries, FrozenParametersAreSavedInCheckpoints) {
  TempDir dir;
  auto o = options(dir, "single_device", 1);
  o.enable_checkpointing = true;
  pl::Trainer trainer(o, test_plugins());
  Model model(ModelConfig{true});
  auto data = entries_test::loader(12, 6);
  trainer.fit(model, data);
  auto saved = pl::safetensors::load(trainer.log_dir() + "/checkpoints/last/model.safetensors");
  ASSERT_EQ(saved.tensors.count("l1.bias"), 1u);
  EXPECT_EQ(saved.tensors.at("l1.bias").to_vector<float>(), model.l1().bias()->value.to_vector<float>());
  auto opt = pl::safetensors::load(trainer.log_dir() + "/checkpoints/last/optimizer.safetensors");
  EXPECT_EQ(opt.tensors.count("state.1.momentum_buffer"), 0u) << "the frozen l1.bias has optimizer state";
  EXPECT_EQ(opt.tensors.count("state.0.momentum_buffer"), 1u);
}

// ---- agree_skip ----

TEST(StrategyEntries, AgreeSkipDecidesEverySkip) {
  Trained r = train("independent_c", {{"skip", "always"}}, {}, "16-mixed");
  EXPECT_EQ(r.final, r.init) << "a step the strategy skipped changed the weights";
  EXPECT_EQ(r.stat("agree_skip_calls"), 12);
  EXPECT_EQ(r.stat("skips"), 12);
  EXPECT_EQ(r.stat("optimizer_steps"), 0) << "optimizer_step is not called on a skipped step";
}

TEST(StrategyEntries, AnInfGradientSkipsThroughEveryPath) {
  ModelConfig inf;
  inf.inf_rank = 0, inf.inf_batch = 1;  // one step of the 12 (batch 1 of each of 2 epochs: 2 steps)
  Trained sd = train("single_device", {}, inf, "16-mixed");
  Trained ic = train("independent_c", {}, inf, "16-mixed");
  Trained old = train("independent_c13", {}, inf, "16-mixed");  // the fallback: alone, its own verdict
  EXPECT_EQ(ic.stat("skips"), 2);
  EXPECT_EQ(sd.final, old.final);
  EXPECT_EQ(ic.final, old.final);
  EXPECT_NE(sd.final, sd.init);
}

// ---- strategy state in checkpoints ----

// Two epochs of independent_c (or `strategy`) with checkpoints; the checkpoint folder.
std::string fit_with_checkpoints(const TempDir& dir, const std::string& strategy, int64_t epochs,
                                 const std::string& resume = "", double* restored = nullptr,
                                 double* run_steps = nullptr) {
  auto o = options(dir, strategy, epochs);
  o.enable_checkpointing = true;
  pl::Trainer trainer(o, test_plugins());
  Model model;
  auto data = entries_test::loader(36, 6);
  trainer.fit(model, data, nullptr, resume);
  if (restored) *restored = trainer.strategy_stat("restored");
  if (run_steps) *run_steps = trainer.strategy_stat("run_steps");
  return trainer.log_dir() + "/checkpoints/last";
}

TEST(StrategyEntries, StrategyStateRoundTripsThroughACheckpoint) {
  TempDir dir;
  double restored = -1, run_steps = -1;
  const std::string ckpt = fit_with_checkpoints(dir, "independent_c", 2, "", &restored, &run_steps);
  EXPECT_EQ(restored, 0);
  EXPECT_EQ(run_steps, 12);
  std::ifstream state(ckpt + "/strategy.independent_c.rank0.txt");
  ASSERT_TRUE(state.good()) << "no strategy file in " << ckpt;
  auto j = nlohmann::json::parse(std::ifstream(ckpt + "/trainer.json"));
  EXPECT_EQ(j.at("strategy_state").at("has_state"), true);
  EXPECT_EQ(j.at("strategy_state").at("any_world_size"), false);
  EXPECT_EQ(j.at("world_size"), 1);
  // resumed to 3 epochs: the counter continues from the saved 12
  fit_with_checkpoints(dir, "independent_c", 3, ckpt, &restored, &run_steps);
  EXPECT_EQ(restored, 1);
  EXPECT_EQ(run_steps, 18);
}

TEST(StrategyEntries, PartialRangeOptimizerStateResumesIdentically) {
  // 3 epochs straight vs 2 + 1 from the checkpoint, stepping first halves (range state)
  TempDir a, b;
  auto run = [](const TempDir& dir, int64_t epochs, const std::string& resume) {
    auto o = options(dir, "independent_c", epochs);
    o.enable_checkpointing = true;
    o.strategy_options = {{"step", "first_half"}};
    pl::Trainer trainer(o, test_plugins());
    Model model;
    auto data = entries_test::loader(36, 6);
    trainer.fit(model, data, nullptr, resume);
    return std::make_pair(values(model), trainer.log_dir() + "/checkpoints/last");
  };
  auto straight = run(a, 3, "").first;
  auto first = run(b, 2, "");
  auto opt = pl::safetensors::load(first.second + "/optimizer.safetensors");
  EXPECT_EQ(opt.tensors.count("state.0.0-15.momentum_buffer"), 1u) << "l1.weight (30 elements): first half";
  EXPECT_EQ(opt.tensors.count("state.0.momentum_buffer"), 0u);
  auto resumed = run(b, 3, first.second).first;
  EXPECT_EQ(resumed, straight);
}

TEST(StrategyEntries, DamagedOrMissingStrategyStateIsNamedBeforeAnythingChanges) {
  TempDir dir;
  const std::string ckpt = fit_with_checkpoints(dir, "independent_c", 1);
  const std::string file = ckpt + "/strategy.independent_c.rank0.txt";
  auto fit_from = [&](int64_t* step, bool* unchanged) {
    auto o = options(dir, "independent_c", 2);
    pl::Trainer trainer(o, test_plugins());
    Model model;
    auto before = values(model);
    auto data = entries_test::loader(36, 6);
    std::string msg = error_of([&] { trainer.fit(model, data, nullptr, ckpt); });
    *step = trainer.global_step();
    *unchanged = values(model) == before;
    return msg;
  };
  std::string text = pl::read_file(file);
  ASSERT_THAT(text, HasSubstr("run_steps 6"));
  std::string damaged = text;
  damaged.replace(damaged.find("run_steps 6"), 11, "run_steps 7");
  { std::ofstream(file) << damaged; }
  int64_t step = -1;
  bool unchanged = false;
  std::string msg = fit_from(&step, &unchanged);
  EXPECT_THAT(msg, HasSubstr(file));
  EXPECT_THAT(msg, HasSubstr("damaged"));
  EXPECT_EQ(step, 0);
  EXPECT_TRUE(unchanged) << "the model was loaded before the strategy's error";
  std::remove(file.c_str());
  msg = fit_from(&step, &unchanged);
  EXPECT_THAT(msg, HasSubstr("lacks this rank's state file " + file));
  EXPECT_TRUE(unchanged);
}

// ---- ABI 1.3 ----

TEST(StrategyEntries, AnAbi13PluginTrainsAndResumesUnchanged) {
  TempDir dir;
  auto o = options(dir, "independent_c13", 2);
  o.enable_checkpointing = true;
  std::string ckpt;
  {
    pl::Trainer trainer(o, test_plugins());
    Model model;
    auto data = entries_test::loader(36, 6);
    trainer.fit(model, data);
    EXPECT_EQ(trainer.global_step(), 12);
    ckpt = trainer.log_dir() + "/checkpoints/last";
  }
  auto j = nlohmann::json::parse(std::ifstream(ckpt + "/trainer.json"));
  EXPECT_EQ(j.at("strategy_state").at("has_state"), false);
  for (const auto& e : fs::directory_iterator(ckpt))
    EXPECT_EQ(e.path().filename().string().rfind("strategy.", 0), std::string::npos) << e.path();
  o.max_epochs = 3;
  pl::Trainer trainer(o, test_plugins());
  Model model;
  auto data = entries_test::loader(36, 6);
  trainer.fit(model, data, nullptr, ckpt);
  EXPECT_EQ(trainer.global_step(), 18);
}

// ---- lifetimes ----

TEST(SdkLifetimes, AModuleThatOutlivesItsTrainerGetsAClearError) {
  TempDir dir;
  Model model;
  auto data = entries_test::loader(12, 6);
  {
    pl::Trainer trainer(options(dir, "single_device", 1), test_plugins());
    trainer.fit(model, data);
  }
  EXPECT_EQ(model.trainer(), nullptr);
  EXPECT_THAT(error_of([&] { model.log("x", 1.0); }), HasSubstr("needs a trainer"));
  pl::Batch batch = data.batch(0);
  EXPECT_NO_THROW(model.training_step(batch, 0)) << "backward reached the destroyed trainer";
}

TEST(SdkLifetimes, AModuleLeftHookedToADestroyedTrainerGetsAClearError) {
  TempDir dir;
  Model model;
  auto data = entries_test::loader(12, 6);
  auto first = std::make_unique<pl::Trainer>(options(dir, "single_device", 1), test_plugins());
  first->fit(model, data);
  // a second trainer takes the module but fails before hooking it (an unknown strategy option that
  // independent_c, which does not check options in launch_info, refuses only at create, in fit)
  auto o = options(dir, "independent_c", 1);
  o.strategy_options = {{"bogus", "1"}};
  pl::Trainer second(o, test_plugins());
  EXPECT_THAT(error_of([&] { second.fit(model, data); }), HasSubstr("bogus"));
  first.reset();  // the module's grad-ready hook is still the first trainer's
  pl::Batch batch = data.batch(0);
  EXPECT_THAT(error_of([&] { model.training_step(batch, 0); }), HasSubstr("trainer that was destroyed"));
}

TEST(SdkLifetimes, ATrainerThatOutlivesItsModuleTearsTheStrategyDownSafely) {
  // independent_c reads every borrowed value in teardown: under AddressSanitizer a freed module
  // tensor or c_params array fails this test.
  TempDir dir;
  pl::Trainer trainer(options(dir, "independent_c", 1), test_plugins());
  {
    Model model;
    auto data = entries_test::loader(12, 6);
    trainer.fit(model, data);
  }
  EXPECT_EQ(trainer.global_step(), 2);
}

// ---- across processes (plrun) ----

std::vector<std::string> worker(const std::string& strategy, int ranks, const std::string& mode, const TempDir& dir,
                                const std::string& resume = "") {
  std::vector<std::string> a{
      PLRUN_PATH,      "--accelerator",      "cpu", "--strategy",        strategy, "--devices", std::to_string(ranks),
      "--plugin-path", PLRT_TEST_PLUGIN_DIR, "--",  ENTRIES_WORKER_PATH, mode,     dir / "out", dir.path.string(),
      strategy};
  if (!resume.empty()) a.push_back(resume);
  return a;
}

nlohmann::json rank_report(const TempDir& dir, int rank) {
  std::ifstream in(dir / ("out.rank" + std::to_string(rank)));
  if (!in) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

TEST(StrategyEntriesMultiprocess, ReduceAndAllGatherGoThroughTheStrategyOrTheProcessGroup) {
  for (const std::string strategy : {"independent_c", "ddp"}) {
    TempDir dir;
    auto r = run(worker(strategy, 2, "gather", dir));
    ASSERT_TRUE(r.ok()) << strategy << ": " << r.status() << "\n" << r.output;
    for (int rank = 0; rank < 2; ++rank) {
      auto j = rank_report(dir, rank);
      EXPECT_EQ(j.at("gathered"), nlohmann::json::array({1.0, 2.0})) << strategy << " rank " << rank;
      EXPECT_EQ(j.at("callback_metrics").at("rank_plus_one").get<double>(), 3.0) << strategy << " rank " << rank;
      if (strategy == "independent_c") {
        EXPECT_GT(j.at("stats").at("reduce_calls").get<double>(), 0);
        EXPECT_GT(j.at("stats").at("all_gather_calls").get<double>(), 0);
      }
    }
  }
}

TEST(StrategyEntriesMultiprocess, EveryRankSkipsWhenOneRankOverflows) {
  // independent_c does not synchronise gradients: rank 1's inf stays on rank 1, and its
  // agree_skip must still make rank 0 skip.  ddp has no agree_skip: the fallback (the maximum
  // over its process group) runs; its averaged gradients already agree (rank 1's inf input
  // reaches every rank), so this checks the outcome, not that the fallback was needed.
  for (const std::string strategy : {"independent_c", "ddp"}) {
    TempDir dir;
    auto r = run(worker(strategy, 2, "skip", dir));
    ASSERT_TRUE(r.ok()) << strategy << ": " << r.status() << "\n" << r.output;
    auto r0 = rank_report(dir, 0), r1 = rank_report(dir, 1);
    EXPECT_EQ(r0.at("skipped_steps"), 1) << strategy;
    EXPECT_EQ(r1.at("skipped_steps"), 1) << strategy;
    EXPECT_EQ(r0.at("loss_scale"), r1.at("loss_scale")) << strategy;
    if (strategy == "ddp") {
      EXPECT_EQ(r0.at("l2_weight"), r1.at("l2_weight"));
    }
  }
}

TEST(StrategyEntriesMultiprocess, ARankThatCannotSaveLeavesThePreviousCheckpointWhole) {
  TempDir dir;
  auto r = run(worker("independent_c", 2, "failsave", dir));
  EXPECT_FALSE(r.ok()) << r.output;
  // (plrun stops the other rank once one fails, so the output, not the reports, holds the error)
  EXPECT_THAT(r.output, HasSubstr("rank 1 could not save strategy 'independent_c''s state"));
  EXPECT_THAT(r.output, HasSubstr("the previous checkpoint is kept"));
  const std::string ckpt = dir / "lightning_logs/version_0/checkpoints/last";
  auto j = nlohmann::json::parse(std::ifstream(ckpt + "/trainer.json"));
  EXPECT_EQ(j.at("global_step"), 4) << "the first epoch's checkpoint was replaced";
  EXPECT_THAT(pl::read_file(ckpt + "/strategy.independent_c.rank1.txt"), HasSubstr("run_steps 4"));
  for (const auto& e : fs::directory_iterator(fs::path(ckpt).parent_path()))
    EXPECT_EQ(e.path().filename().string(), "last") << "a staging folder was left behind";
}

TEST(StrategyEntriesMultiprocess, EveryRankSavesItsStrategyStateAndAnotherWorldSizeIsRefused) {
  TempDir dir;
  auto r = run(worker("independent_c", 2, "fit", dir));
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  const std::string ckpt = rank_report(dir, 0).at("log_dir").get<std::string>() + "/checkpoints/last";
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_TRUE(fs::exists(ckpt + "/strategy.independent_c.rank" + std::to_string(rank) + ".txt")) << ckpt;
  // the same world size resumes (each rank its own counter)
  TempDir again;
  auto resumed = run(worker("independent_c", 2, "fit", again, ckpt));
  ASSERT_TRUE(resumed.ok()) << resumed.status() << "\n" << resumed.output;
  EXPECT_EQ(rank_report(again, 1).at("stats").at("restored"), 1);
  // one process cannot load the state of two
  auto o = options(dir, "independent_c", 3);
  pl::Trainer trainer(o, test_plugins());
  Model model;
  auto data = entries_test::loader(36, 6);
  std::string msg = error_of([&] { trainer.fit(model, data, nullptr, ckpt); });
  EXPECT_THAT(msg, HasSubstr("saved by 2 processes and this run has 1"));
}

}  // namespace
