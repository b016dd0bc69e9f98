// samples/strategy_plugin_c end to end: local_sgd.c is built as its README says (the C compiler
// CMake found, -std=c99 -shared -fPIC, plus -Wall -Wextra -pedantic -Werror and --no-undefined:
// no warning, no plrt symbol), found through PL_PLUGIN_PATH, and trains plrt-mlp under plrun at 2
// and 3 ranks.  The references:
//  - sync_every=1 with plain SGD is ddp (averaging the weights after each step averages the steps,
//    and an SGD step is linear in the gradient): ddp's weights to float rounding;
//  - sync_every=K > 1: single_device runs of each rank's data, averaged here every K steps.  The
//    data has one row per rank and the batch size is 1, so whichever row the sampler hands a rank,
//    the ranks' rows are all the rows: the average does not depend on the sampler's order.
// Also: a resumed run equals the uninterrupted one; bad options exit 2 naming the value; pg.<name>
// options reach the process group; and the trainer's warning for a strategy that asks for a process
// group and answers none (tests/plugins/forgets_group.c), which local_sgd never triggers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <plrt/sdk/safetensors.hpp>
#include <plrt/sdk/tensor.hpp>

#include "training_support.hpp"

namespace {

using namespace plrt_training;
using ::testing::HasSubstr;
using ::testing::Not;

const char* const kWarning = "asks for a process group";

// Compiles the sample into `dir` and returns the folder to put on PL_PLUGIN_PATH.
std::string build_sample(const TempDir& dir) {
  const std::string out = dir / "libplrt_strategy_local_sgd.so";
  auto r = run({C_COMPILER, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-shared", "-fPIC",
                "-I" PLUGIN_API_INCLUDE, LOCAL_SGD_SOURCE, "-o", out, "-Wl,--no-undefined"});
  EXPECT_RAN(r);
  EXPECT_EQ(r.output, "") << "the sample must build without a warning";
  EXPECT_TRUE(fs::exists(out));
  return dir.path.string();
}

plrt_test::EnvVars plugin_path(const std::string& dir) { return {{"PL_PLUGIN_PATH", dir}}; }

std::vector<std::string> with_options(std::vector<std::string> argv, const std::vector<std::string>& options) {
  std::vector<std::string> out{argv[0]};  // plrun, then its --strategy-option pairs, then the rest
  for (const auto& o : options) {
    out.push_back("--strategy-option");
    out.push_back(o);
  }
  out.insert(out.end(), argv.begin() + 1, argv.end());
  return out;
}

// One epoch (66 steps a rank) and its validation: the weights, and the metrics logged with
// sync_dist (train_acc, val_loss, val_acc: the trainer reduces them over the group that
// process_group() answers; without it rank 0 would report its own half).
TEST(LocalSgd, SyncEveryStepWithPlainSgdIsDdp) {
  TempDir dir;
  const std::string plugins = build_sample(dir);
  auto args = [&](const std::string& name) {
    return mlp_args({"--momentum", "0", "--batch-size", "16", "--epochs", "1", "--no-checkpoint", "--root-dir",
                     dir / name, "--save", dir / (name + ".safetensors"), "--report", dir / (name + ".json")});
  };
  auto local = run(with_options(plrun("local_sgd", 2, args("local")), {"sync_every=1"}), plugin_path(plugins));
  EXPECT_RAN(local);
  EXPECT_THAT(local.output, Not(HasSubstr(kWarning))) << "local_sgd answers process_group()";
  auto ddp = run(plrun("ddp", 2, args("ddp")));
  EXPECT_RAN(ddp);
  const double rel = relative_difference(dir / "local.safetensors", dir / "ddp.safetensors");
  EXPECT_LE(rel, 1e-6) << "local_sgd sync_every=1 drifted from ddp";
  const auto local_metrics = report(dir / "local.json")["metrics"], ddp_metrics = report(dir / "ddp.json")["metrics"];
  for (const char* m : {"train_acc", "val_loss", "val_acc"}) {
    ASSERT_TRUE(local_metrics.contains(m) && ddp_metrics.contains(m)) << m << ": " << local_metrics.dump();
    EXPECT_NEAR(local_metrics[m].get<double>(), ddp_metrics[m].get<double>(), 1e-5) << m;
  }
  // Averaging less often gives other weights (validation's sync_weights averages the last 2 steps):
  // the comparison above can fail.
  auto rare = run(with_options(plrun("local_sgd", 2, args("rare")), {"sync_every=16"}), plugin_path(plugins));
  EXPECT_RAN(rare);
  const double rare_rel = relative_difference(dir / "rare.safetensors", dir / "ddp.safetensors");
  EXPECT_GT(rare_rel, 100 * std::max(rel, 1e-7));
  std::printf("relative difference to ddp: sync_every=1 %.3g, sync_every=16 %.3g\n", rel, rare_rel);
}

// One row per rank (features 6, label 2 of 3 classes: a single-row file must declare the same 3
// classes, so every row has the largest label).
void write_rows(const std::string& path, int first, int count) {
  const int features = 6;
  std::vector<float> x;
  for (int r = first; r < first + count; ++r)
    for (int f = 0; f < features; ++f)
      x.push_back(std::sin(1.7f * static_cast<float>(r + 1) + 0.9f * static_cast<float>(f)));
  std::vector<int64_t> y(static_cast<size_t>(count), 2);
  pl::safetensors::save(
      path, {{"x", pl::Tensor::from_vector(x, {count, features})}, {"y", pl::Tensor::from_vector(y, {count})}});
}

std::vector<std::string> tiny_args(const std::string& data, int epochs, const std::string& init,
                                   const std::string& save, const std::string& root) {
  std::vector<std::string> a{MLP_PATH,
                             "--data",
                             data,
                             "--heldout",
                             "0",
                             "--hidden",
                             "5",
                             "--batch-size",
                             "1",
                             "--no-shuffle",
                             "--momentum",
                             "0",
                             "--lr",
                             "0.5",
                             "--epochs",
                             std::to_string(epochs),
                             "--no-checkpoint",
                             "--root-dir",
                             root,
                             "--save",
                             save};
  if (!init.empty()) a.insert(a.end(), {"--init", init});
  return a;
}

void average_into(const std::vector<std::string>& paths, const std::string& out) {
  std::map<std::string, std::vector<double>> sum;
  std::map<std::string, pl::Shape> shapes;
  for (const auto& p : paths)
    for (auto& [name, t] : pl::safetensors::load(p).tensors) {
      auto v = t.to_vector<float>();
      auto& s = sum[name];
      s.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) s[i] += v[i];
      shapes[name] = t.shape();
    }
  std::vector<std::pair<std::string, pl::Tensor>> tensors;
  for (auto& [name, s] : sum) {
    std::vector<float> mean;
    for (double v : s) mean.push_back(static_cast<float>(v / static_cast<double>(paths.size())));
    tensors.emplace_back(name, pl::Tensor::from_vector(mean, shapes[name]));
  }
  pl::safetensors::save(out, tensors, {{"format", "pt"}});
}

// local_sgd at `world` ranks, averaging every `k` steps, for `steps` steps (one step per epoch),
// against the single_device runs averaged here; the last round may be short: fit's end averages it
// (sync_weights).
void matches_averaged_single_runs(int world, int k, int steps) {
  TempDir dir;
  const std::string plugins = build_sample(dir);
  const std::string root = dir.path.string();
  write_rows(dir / "all.safetensors", 0, world);
  for (int r = 0; r < world; ++r) write_rows(dir / ("row" + std::to_string(r) + ".safetensors"), r, 1);
  auto init = run(tiny_args(dir / "all.safetensors", 0, "", dir / "init.safetensors", root));
  ASSERT_TRUE(init.ok()) << init.output;

  auto local = run(with_options(plrun("local_sgd", world,
                                      tiny_args(dir / "all.safetensors", steps, dir / "init.safetensors",
                                                dir / "local.safetensors", root)),
                                {"sync_every=" + std::to_string(k)}),
                   plugin_path(plugins));
  EXPECT_RAN(local);
  EXPECT_THAT(local.output, Not(HasSubstr(kWarning)));

  std::string start = dir / "init.safetensors";
  for (int done = 0, round = 0; done < steps; done += k, ++round) {
    const int n = std::min(k, steps - done);
    std::vector<std::string> outs;
    for (int r = 0; r < world; ++r) {
      outs.push_back(dir / ("ref" + std::to_string(round) + "_" + std::to_string(r) + ".safetensors"));
      auto single = run(tiny_args(dir / ("row" + std::to_string(r) + ".safetensors"), n, start, outs.back(), root));
      ASSERT_TRUE(single.ok()) << single.output;
    }
    start = dir / ("avg" + std::to_string(round) + ".safetensors");
    average_into(outs, start);
  }
  const double rel = relative_difference(dir / "local.safetensors", start);
  EXPECT_LE(rel, 1e-6) << "local_sgd (" << world << " ranks, sync_every=" << k << ") against the averaged runs";

  // The reference is not the every-step average: the comparison can fail.
  auto every = run(with_options(plrun("local_sgd", world,
                                      tiny_args(dir / "all.safetensors", steps, dir / "init.safetensors",
                                                dir / "every.safetensors", root)),
                                {"sync_every=1"}),
                   plugin_path(plugins));
  EXPECT_RAN(every);
  const double every_rel = relative_difference(dir / "every.safetensors", start);
  EXPECT_GT(every_rel, 100 * std::max(rel, 1e-7));
  std::printf("relative difference to the averaged single runs: sync_every=%d %.3g, sync_every=1 %.3g\n", k, rel,
              every_rel);
}

TEST(LocalSgd, TwoRanksEveryTwoStepsMatchAveragedSingleRuns) { matches_averaged_single_runs(2, 2, 5); }
TEST(LocalSgd, ThreeRanksEveryThreeStepsMatchAveragedSingleRuns) { matches_averaged_single_runs(3, 3, 7); }

// A checkpoint is taken right after sync_weights (the count restarts there) and keeps each rank's
// own momentum (local_optimizer_state): one epoch, then a resumed second, is the two-epoch run.
TEST(LocalSgd, ResumedRunEqualsUninterruptedRun) {
  TempDir dir;
  const std::string plugins = build_sample(dir);
  auto args = [&](const std::string& epochs, const std::string& root, std::vector<std::string> more) {
    auto a = mlp_args({"--momentum", "0.9", "--batch-size", "16", "--epochs", epochs, "--root-dir", dir / root});
    a.insert(a.end(), more.begin(), more.end());
    return with_options(plrun("local_sgd", 2, a), {"sync_every=4"});  // 66 steps an epoch: not a multiple
  };
  EXPECT_RAN(run(args("2", "full", {"--save", dir / "full.safetensors"}), plugin_path(plugins)));
  EXPECT_RAN(run(args("1", "part", {}), plugin_path(plugins)));
  auto resumed =
      run(args("2", "part", {"--resume", "last", "--save", dir / "resumed.safetensors"}), plugin_path(plugins));
  EXPECT_RAN(resumed);
  EXPECT_LE(relative_difference(dir / "resumed.safetensors", dir / "full.safetensors"), 1e-7);
}

TEST(LocalSgd, BadOptionsExit2NamingTheValue) {
  TempDir dir;
  const std::string plugins = build_sample(dir);
  const auto program = mlp_args({"--max-steps", "1", "--root-dir", dir.path.string()});
  for (const std::string v : {"0", "-3", "two", "1.5", "", "99999999999999999999999"}) {
    auto r = run(with_options(plrun("local_sgd", 2, program), {"sync_every=" + v}), plugin_path(plugins));
    EXPECT_TRUE(r.exited && r.exit_code == 2) << v << ": " << r.status() << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("sync_every='" + v + "' is not valid: it must be an integer >= 1")) << r.output;
  }
  auto unknown = run(with_options(plrun("local_sgd", 2, program), {"sync_evry=2"}), plugin_path(plugins));
  EXPECT_TRUE(unknown.exited && unknown.exit_code == 2) << unknown.status();
  EXPECT_THAT(unknown.output, HasSubstr("unknown option 'sync_evry' (valid: sync_every, pg.<name>"));
  auto empty_pg = run(with_options(plrun("local_sgd", 2, program), {"pg.=1"}), plugin_path(plugins));
  EXPECT_TRUE(empty_pg.exited && empty_pg.exit_code == 2) << empty_pg.status();
  EXPECT_THAT(empty_pg.output, HasSubstr("option 'pg.' names no process-group option"));
}

// pg.<name> reaches the process group as <name>: gloo refuses a bad probe_ms by name, takes a good one.
TEST(LocalSgd, ProcessGroupOptionsAreForwarded) {
  TempDir dir;
  const std::string plugins = build_sample(dir);
  const auto program = mlp_args({"--max-steps", "2", "--no-checkpoint", "--root-dir", dir.path.string()});
  auto bad = run(with_options(plrun("local_sgd", 2, program), {"pg.probe_ms=soon"}), plugin_path(plugins));
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.output, HasSubstr("probe_ms='soon' is not valid")) << bad.output;
  auto good =
      run(with_options(plrun("local_sgd", 2, program), {"pg.probe_ms=500", "sync_every=1"}), plugin_path(plugins));
  EXPECT_RAN(good);
}

// The trainer's warning for the mistake local_sgd avoids: a strategy that asks for a process group
// and answers none; at one rank there is nothing to warn about.
TEST(MissingProcessGroup, TrainerWarnsNamingThePluginFile) {
  TempDir dir;
  const auto program = mlp_args({"--max-steps", "2", "--no-checkpoint", "--root-dir", dir.path.string()});
  auto r = run(plrun("forgets_group", 2, program), plugin_path(PLRT_TEST_FORGETS_GROUP_DIR));
  EXPECT_RAN(r);
  EXPECT_THAT(r.output, HasSubstr("strategy 'forgets_group' (" PLRT_TEST_FORGETS_GROUP_DIR
                                  "/libplrt_strategy_forgets_group.so) asks for a process group "
                                  "(launch_info: needs_process_group) but its process_group() entry is NULL"));
  EXPECT_THAT(r.output, HasSubstr("log(sync_dist=True) and the epoch metrics stay this rank's own values"));
  EXPECT_THAT(r.output, HasSubstr("checkpoints keep rank 0's RNG state only"));
  EXPECT_THAT(r.output, HasSubstr("Fix: answer the group the strategy made in its process_group() entry"));
  auto alone = run(plrun("forgets_group", 1, program), plugin_path(PLRT_TEST_FORGETS_GROUP_DIR));
  EXPECT_RAN(alone);
  EXPECT_THAT(alone.output, Not(HasSubstr(kWarning)));
}

}  // namespace
