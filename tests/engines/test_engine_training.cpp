// plrt-mlp trained under the real launchers: Open MPI's mpirun (MASTER_PORT given, or derived from
// the job id), mpirun with horovodrun's variables in place of Open MPI's, and torchrun (with and
// without PL_JOB_TOKEN exported: issue 14's port clash).  Each run's saved weights must equal
// plrun's run of the same strategy and flags.  Every launcher runs every strategy of kStrategies:
// a strategy is one more entry there.
#include <tuple>

#include "engines_support.hpp"

namespace {

using namespace plrt_engines;
using plrt_training::relative_difference;
using plrt_training::run;

// The strategies every launcher is tested with (horovod joins when its plugin lands).
const std::vector<std::string> kStrategies = {"ddp", "horovod"};

// How one launcher starts `program` on two processes; `dir` holds its logs.
struct Engine {
  std::string name;
  std::string program;  // what must be installed
  std::function<std::vector<std::string>(const TempDir& dir, const std::vector<std::string>& program)> argv;
  plrt_test::EnvVars env;  // set for the launcher itself
};

const std::vector<Engine>& engines() {
  static const std::string token = plrt_test::random_token();
  auto port = [] { return std::to_string(plrt_test::free_tcp_ports(1)); };
  static const std::vector<Engine> all = {
      {"mpirun",
       "mpirun",
       [=](const TempDir&, const std::vector<std::string>& p) {
         return mpirun(2, {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port(), "PL_JOB_TOKEN=" + token}, p);
       },
       {}},
      // No MASTER_PORT: every rank derives the same one from mpirun's job id.
      {"mpirun_jobid_port",
       "mpirun",
       [=](const TempDir&, const std::vector<std::string>& p) { return mpirun(2, {"PL_JOB_TOKEN=" + token}, p); },
       {}},
      {"mpirun_horovod_env",
       "mpirun",
       [=](const TempDir&, const std::vector<std::string>& p) {
         return mpirun(2, {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port()}, through_shell(kAsHorovodrun, p));
       },
       {}},
      {"torchrun",
       "torchrun",
       [=](const TempDir& dir, const std::vector<std::string>& p) {
         return torchrun(dir / "torchrun-logs", plrt_test::free_tcp_ports(2), p);
       },
       {}},
      // Issue 14: the token exported must not make the job look like plrun's (whose store would
      // then clash with torchrun's agent store on MASTER_PORT).
      {"torchrun_job_token",
       "torchrun",
       [=](const TempDir& dir, const std::vector<std::string>& p) {
         return torchrun(dir / "torchrun-logs", plrt_test::free_tcp_ports(2), p);
       },
       {{"PL_JOB_TOKEN", token}}},
  };
  return all;
}

std::vector<std::string> engine_names() {
  std::vector<std::string> names;
  for (const auto& e : engines()) names.push_back(e.name);
  return names;
}

const Engine& engine_named(const std::string& name) {
  for (const auto& e : engines())
    if (e.name == name) return e;
  throw std::invalid_argument("no engine " + name);
}

class EngineTraining : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(EngineTraining, WeightsEqualPlruns) {
  const auto& [engine_name, strategy] = GetParam();
  const Engine& engine = engine_named(engine_name);
  if (auto why = absent(engine.program); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  auto ref = run(plrt_training::plrun(strategy, 2, train_args(dir, "plrun", strategy)));
  ASSERT_TRUE(ref.ok()) << "plrun: " << ref.status() << "\n" << ref.output;

  auto r = run(engine.argv(dir, train_args(dir, "engine", strategy)), engine.env);
  ASSERT_TRUE(r.ok()) << engine_name << ": " << r.status() << "\n" << r.output;
  // Both ranks ran as one job of two (rank 0 wrote the report and the weights).
  auto report = plrt_training::report(dir / "engine.json");
  EXPECT_EQ(report.value("world_size", 0), 2) << report.dump();
  EXPECT_EQ(report.value("steps", 0), 20) << report.dump();
  EXPECT_EQ(report.value("strategy", ""), strategy);
  EXPECT_LE(relative_difference(dir / "engine.safetensors", dir / "plrun.safetensors"), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Launchers, EngineTraining,
                         ::testing::Combine(::testing::ValuesIn(engine_names()), ::testing::ValuesIn(kStrategies)),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
