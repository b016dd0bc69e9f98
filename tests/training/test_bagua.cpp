// bagua end to end through the programs a user runs (plrun launching plrt-mlp), against the rules
// of docs/bagua.md:
//  - gradient_allreduce (the default, and the alias bagua_gradient_allreduce) equals ddp to 1e-6
//    at 2 and 4 ranks, whatever the bucket size;
//  - average=false sums the gradients: with plain SGD it equals ddp at W times the learning rate
//    (an independent reference: the sum is W times the mean exactly for W = 2 and 4);
//  - bad options and algorithms not built exit 2 before any work, naming what is valid;
//  - get_stat: the buckets and the bytes a step puts into the collectives;
//  - async through the trainer: every rank ends fit with the same weights (sync_weights before
//    validation and at the end of fit), plrt-mlp runs it, and a rank killed mid-run (no plrun to
//    stop the others) makes the other ranks fail within 5 s.
#include <algorithm>
#include <csignal>
#include <fstream>
#include <iostream>
#include <plrt/sdk/store.hpp>

#include "training_support.hpp"

namespace {

using namespace plrt_training;

constexpr int kSteps = 30;

// plrt-mlp's arguments with `args`, whose --lr (if any) replaces the tests' default one.
std::vector<std::string> program_with(const std::vector<std::string>& args) {
  std::vector<std::string> program = mlp_args(args);
  const auto lr = std::find(program.begin(), program.end(), "--lr");
  if (std::count(program.begin(), program.end(), "--lr") > 1) program.erase(lr, lr + 2);
  return program;
}

// Trains with `strategy` at `world` ranks and returns the saved weights' path (and the report).
std::string train(const TempDir& dir, const std::string& tag, const std::string& strategy, int world,
                  const std::vector<std::string>& extra, nlohmann::json* report = nullptr) {
  const std::string out = dir / (tag + ".safetensors"), rep = dir / (tag + ".json");
  std::vector<std::string> args{"--batch-size",
                                "8",
                                "--max-steps",
                                std::to_string(kSteps),
                                "--epochs",
                                "100",
                                "--root-dir",
                                dir / tag,
                                "--no-checkpoint",
                                "--save",
                                out,
                                "--report",
                                rep};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run(plrun(strategy, world, program_with(args)));  // plrt-mlp takes --strategy-option too
  EXPECT_RAN(r);
  if (report != nullptr) *report = nlohmann::json::parse(std::ifstream(rep));
  return out;
}

TEST(Bagua, GradientAllreduceEqualsDdp) {
  for (int world : {2, 4}) {
    TempDir dir;
    const std::vector<std::string> sgd{"--optimizer", "sgd", "--momentum", "0.9"};
    const std::string ddp = train(dir, "ddp", "ddp", world, sgd);
    nlohmann::json rep;
    const std::string bagua = train(dir, "bagua", "bagua", world, sgd, &rep);
    EXPECT_LE(relative_difference(bagua, ddp), 1e-6) << "W=" << world;
    const auto& st = rep.at("strategy_stats");
    EXPECT_EQ(st.at("buckets").get<double>(), 1) << st.dump();  // the sample's 700 parameters, one 10 MiB bucket
    EXPECT_EQ(st.at("bytes_per_step").get<double>(), st.at("bucket_bytes").get<double>());
    EXPECT_GT(st.at("grad_comm_ms").get<double>(), 0);
    // the alias, and buckets of one parameter each, change nothing
    const std::string alias = train(dir, "alias", "bagua_gradient_allreduce", world, sgd);
    EXPECT_LE(relative_difference(alias, ddp), 1e-6) << "W=" << world;
    nlohmann::json small_rep;
    const std::string small =
        train(dir, "small", "bagua", world, {"--optimizer", "adam", "--strategy-option", "bucket_size_mb=0.000001"},
              &small_rep);
    const std::string ddp_adam = train(dir, "ddp_adam", "ddp", world, {"--optimizer", "adam"});
    EXPECT_LE(relative_difference(small, ddp_adam), 1e-6) << "W=" << world;
    EXPECT_EQ(small_rep.at("strategy_stats").at("buckets").get<double>(), 6);  // 3 weights, 3 biases
  }
}

TEST(Bagua, AverageFalseSumsTheGradients) {
  for (int world : {2, 4}) {
    TempDir dir;
    const std::string sum =
        train(dir, "sum", "bagua", world, {"--optimizer", "sgd", "--lr", "0.01", "--strategy-option", "average=false"});
    const std::string mean_wlr =
        train(dir, "mean", "ddp", world, {"--optimizer", "sgd", "--lr", std::to_string(0.01 * world)});
    const std::string mean = train(dir, "mean1", "ddp", world, {"--optimizer", "sgd", "--lr", "0.01"});
    EXPECT_LE(relative_difference(sum, mean_wlr), 1e-6) << "W=" << world;
    EXPECT_GT(relative_difference(sum, mean), 1e-3) << "average=false changed nothing at W=" << world;
  }
}

// The sample's held-out accuracy (its default data set, the bundled digits) after 3 epochs at 2
// ranks: the report's val_acc.
double accuracy(const std::string& strategy, const std::vector<std::string>& extra) {
  TempDir dir;
  std::vector<std::string> args{MLP_PATH,    "--epochs",        "3",        "--root-dir",
                                dir / "run", "--no-checkpoint", "--report", dir / "r.json"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run(plrun(strategy, 2, args));
  EXPECT_RAN(r);
  return nlohmann::json::parse(std::ifstream(dir / "r.json")).at("metrics").at("val_acc").get<double>();
}

// Compression costs less than half a point of held-out accuracy against gradient_allreduce with
// the same optimizer (docs/bagua.md; the convergence bar).
TEST(Bagua, CompressedAlgorithmsConvergeLikeGradientAllreduce) {
  const double sgd = accuracy("bagua", {});
  EXPECT_GT(sgd, 0.9);
  EXPECT_NEAR(accuracy("bagua_bytegrad", {}), sgd, 0.005) << "bytegrad";
  const std::vector<std::string> qadam{"--optimizer", "qadam", "--lr", "0.002"};  // warmup: QAdam's 100
  const double warm = accuracy("bagua", qadam);
  EXPECT_GT(warm, 0.9);
  EXPECT_NEAR(accuracy("bagua_qadam", qadam), warm, 0.005) << "qadam";
}

// qadam needs pl::QAdam: another optimizer is refused, exit 2, naming both, before a step.
TEST(Bagua, QAdamRefusesAnotherOptimizer) {
  TempDir dir;
  auto r = run(plrun("bagua_qadam", 2, mlp_args({"--optimizer", "adam", "--max-steps", "3", "--root-dir", dir / "q"})));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("needs the QAdam optimizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'Adam'"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("epoch 0"), std::string::npos) << r.output;
}

// qadam resumed past its warmup equals the uninterrupted run: the strategy learns the optimizer's
// steps from bind_optimizer, so it goes on compressing where the resumed QAdam forms m_i.
TEST(Bagua, QAdamResumedPastItsWarmupEqualsAnUninterruptedRun) {
  TempDir dir;
  auto job = [&](const std::string& tag, int epochs, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"--optimizer",    "qadam",
                                  "--lr",           "0.002",
                                  "--warmup-steps", "40",
                                  "--epochs",       std::to_string(epochs),
                                  "--batch-size",   "32",
                                  "--root-dir",     dir / tag,
                                  "--save",         dir / (tag + ".safetensors")};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run(plrun("bagua_qadam", 2, program_with(args)));
    EXPECT_RAN(r);
  };
  job("straight", 4, {"--no-checkpoint"});
  job("first", 2, {});  // 2 x 30 steps: past the 40-step warmup
  const std::string ckpt = dir / "first/lightning_logs/version_0/checkpoints/last";
  ASSERT_TRUE(fs::exists(ckpt)) << ckpt;
  job("resumed", 4, {"--no-checkpoint", "--resume", ckpt});
  EXPECT_EQ(relative_difference(dir / "resumed.safetensors", dir / "straight.safetensors"), 0.0);
  EXPECT_GT(relative_difference(dir / "first.safetensors", dir / "straight.safetensors"), 1e-3);
}

TEST(Bagua, BadOptionsExitTwoBeforeAnyWork) {
  TempDir dir;
  for (const char* opt :
       {"algorithm=bytegrads", "algorithm=", "average=maybe", "hierarchical=sometimes", "bucket_size_mb=0",
        "bucket_cap_mb=5", "algoritm=gradient_allreduce", "communication_interval=2", "peer_selection_mode=shift_one",
        "sync_interval_ms=0", "warmup_steps=5"}) {
    std::vector<std::string> argv{PLRUN_PATH, "--accelerator",     "cpu", "--strategy", "bagua", "--devices",
                                  "2",        "--strategy-option", opt,   "--"};
    for (const auto& a : mlp_args({"--max-steps", "1", "--root-dir", dir / "bad"})) argv.push_back(a);
    auto r = run(argv);
    EXPECT_EQ(r.exit_code, 2) << opt << "\n" << r.output;
    EXPECT_NE(r.output.find("bagua"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(std::string(opt).substr(0, std::string(opt).find('='))), std::string::npos) << r.output;
    EXPECT_TRUE(r.output.find("valid") != std::string::npos ||
                r.output.find("use true or false") != std::string::npos ||
                r.output.find("applies to") != std::string::npos)
        << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "bad")) << "a refused option must not start training";
}

// async_worker as a W-rank job under plrun; returns each rank's report.
std::vector<nlohmann::json> async_job(const TempDir& dir, const std::string& mode, int world) {
  auto r = run(plrun("bagua_async", world, {ASYNC_WORKER_PATH, mode, dir / "out", dir / "root", "5"}));
  EXPECT_RAN(r);
  std::vector<nlohmann::json> out;
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(dir / ("out.rank" + std::to_string(rank)));
    out.push_back(in ? nlohmann::json::parse(in) : nlohmann::json::object());
  }
  return out;
}

// The trainer calls sync_weights before each validation and at the end of fit: every rank ends
// with the same weights, bit for bit, after rounds that let them differ.  With validation, the
// averages before the two validations are the only ones (the checkpoint's and the end of fit's
// find nothing changed); without it, the end of fit's is.
TEST(Bagua, AsyncRanksEndFitWithTheSameWeights) {
  for (const auto& [mode, syncs] : std::vector<std::pair<std::string, double>>{{"fit", 2}, {"fit-noval", 1}}) {
    TempDir dir;
    const auto reports = async_job(dir, mode, 2);
    for (int rank = 0; rank < 2; ++rank) {
      const auto& j = reports[rank];
      ASSERT_TRUE(j.contains("weights")) << mode << " rank " << rank << ": " << j.dump();
      EXPECT_EQ(j.at("weights"), reports[0].at("weights")) << mode << " rank " << rank;
      EXPECT_GT(j.at("stats").at("async_rounds").get<double>(), 0) << mode;
      EXPECT_EQ(j.at("stats").at("async_syncs").get<double>(), syncs) << mode;
      EXPECT_EQ(j.at("global_step").get<int64_t>(), 24) << mode;  // 96 samples, 2 ranks, batches of 4, 2 epochs
    }
  }
}

// The sample's 30 steps take a few milliseconds: rounds may or may not come (async_worker shows
// them); the syncs and the statistics' meaning are fixed.
TEST(Bagua, AsyncTrainsThePlrtMlpSample) {
  TempDir dir;
  nlohmann::json rep;
  train(dir, "async", "bagua_async", 2, {"--strategy-option", "sync_interval_ms=5"}, &rep);
  const auto& st = rep.at("strategy_stats");
  EXPECT_EQ(st.at("async_syncs").get<double>(), 1) << st.dump();     // fit's end (30 steps: no validation yet)
  EXPECT_EQ(st.at("bytes_per_step").get<double>(), 0) << st.dump();  // after warmup: the rounds communicate
  EXPECT_EQ(st.at("async_round_bytes").get<double>(), st.at("bucket_bytes").get<double>() + 4) << st.dump();
}

// A rank killed in the middle of training (SIGKILL, at its 300th step, after rounds) while nothing
// else would stop the job: the ranks run as a torchrun-style job that the test starts and serves
// the store for, so no launcher tears the others down, and an epoch lasts 10 s, so no metrics
// collective notices either (after warmup a step communicates nothing, buffers included).  The
// survivors' threads find the connection gone; their next step fails, and they exit within 5 s
// of the death, saying why.
TEST(Bagua, AsyncADeadRankStopsTheOthersWithinFiveSeconds) {
  TempDir dir;
  pl::Runtime rt;
  const std::string token = plrt_test::random_token();
  pl::StoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.token = token;
  so.timeout = std::chrono::seconds(60);
  pl::Store store(rt, so);
  plrt_test::DistJobOptions o;
  o.argv = {ASYNC_WORKER_PATH, "die", dir / "out", dir / "root", "500"};  // the default interval
  o.world_size = 3;
  o.master_port = store.port();
  o.token = token;
  o.agent_store = true;
  o.env = {{"PL_LOG_LEVEL", "warn"}};
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(60);
  const plrt_test::JobResult r = plrt_test::run_job(plrt_test::dist_job(o), w);
  ASSERT_FALSE(r.timed_out) << r.report();
  const auto& dead = r.processes.at(2);
  ASSERT_EQ(dead.term_signal, SIGKILL) << r.report();
  for (int rank = 0; rank < 2; ++rank) {
    const auto& p = r.processes.at(static_cast<size_t>(rank));
    EXPECT_EQ(p.exit_code, 1) << r.report();
    const auto after = p.elapsed - dead.elapsed;
    std::cout << "rank " << rank << " stopped " << after.count() << " ms after rank 2 died" << std::endl;
    EXPECT_LT(after.count(), 5000) << "rank " << rank << " ran on " << after.count() << " ms after rank 2 died\n"
                                   << r.report();
    std::ifstream in(dir / ("out.rank" + std::to_string(rank)));
    ASSERT_TRUE(in) << r.report();
    const std::string error = nlohmann::json::parse(in).value("error", "");
    EXPECT_NE(error.find("bagua"), std::string::npos) << error;
    EXPECT_NE(error.find("rank 2"), std::string::npos) << error;
  }
}

}  // namespace
