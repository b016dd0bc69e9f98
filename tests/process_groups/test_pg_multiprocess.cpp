// Process groups across real processes: the test serves the rendezvous store (port 0, a random job
// token), starts W copies of pg_worker (one per rank, PL_USE_AGENT_STORE=1) and checks their exit
// codes and messages.  Every job has a deadline; a job past it is killed and the test names the
// ranks that were still running.
//
//   {Gloo,Nccl}/PgMatrix.Run/W<w>_<class>   every op x dtype x size class (small, medium, large)
//   Gloo/PgMissing.*                         a rank never calls: an error naming op, #, rank
//   Gloo/PgMismatch.*                        different op / size / dtype at one sequence number
//   MultiProcess.WrongTokenIs...             a process with a wrong PL_JOB_TOKEN is refused
//   MultiProcess.RankZeroServesTheStore      no agent store: rank 0 serves it
// nccl cases skip (with the reason) without the nccl plugin or with fewer GPUs than ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <plrt/sdk/process_group.hpp>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <vector>

#include "spawn.hpp"

using ::testing::HasSubstr;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = PG_WORKER_PATH;

struct LogSink {
  std::mutex mu;
  std::vector<std::string> lines;
  static void callback(void* user, PL_LogLevel, const char* line) {
    auto* self = static_cast<LogSink*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    self->lines.emplace_back(line);
  }
  bool any(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu);
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(part) != std::string::npos; });
  }
};

class MultiProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    pl::RuntimeOptions ro;
    ro.log_level = "warn";
    ro.log_callback = &LogSink::callback;
    ro.log_user = &log_;
    rt_ = std::make_unique<pl::Runtime>(ro);
    token_ = plrt_test::random_token();
    pl::StoreOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.is_server = true;
    so.token = token_;
    so.timeout = 60s;
    store_ = std::make_unique<pl::Store>(*rt_, so);
    ASSERT_GT(store_->port(), 0);
  }

  // The specs of a W-rank job running `pg_worker <args> --group <unique>`.
  std::vector<plrt_test::ProcessSpec> job(int W, std::vector<std::string> args) {
    plrt_test::DistJobOptions o;
    o.argv = {kWorker};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.insert(o.argv.end(), {"--group", "job" + std::to_string(++jobs_)});
    o.world_size = W;
    o.master_port = store_->port();
    o.token = token_;
    o.agent_store = true;
    return plrt_test::dist_job(o);
  }

  static plrt_test::JobResult run(std::vector<plrt_test::ProcessSpec> specs, std::chrono::milliseconds deadline) {
    plrt_test::WaitOptions w;
    w.deadline = deadline;
    return plrt_test::run_job(std::move(specs), w);
  }

  // Skips (returns false) unless the backend can run W ranks here.
  bool backend_available(const std::string& backend, int W) {
    try {
      rt_->find(PL_PLUGIN_PROCESS_GROUP, backend);
    } catch (const pl::Error& e) {
      skip_reason_ = "the " + backend + " process-group plugin is not built here: " + e.what();
      return false;
    }
    if (backend != "nccl") return true;
    auto r = run({plrt_test::ProcessSpec{{kWorker, "gpus"}, {}, {}, {}, "gpus"}}, 30s);
    int gpus = 0;
    if (r.all_ok()) std::sscanf(r.processes[0].output.c_str(), "gpus %d", &gpus);
    if (gpus < W) {
      skip_reason_ = "nccl with " + std::to_string(W) + " ranks needs " + std::to_string(W) + " GPUs, found " +
                     std::to_string(gpus) + " (NCCL refuses two ranks on one GPU)";
      return false;
    }
    return true;
  }

  LogSink log_;
  std::unique_ptr<pl::Runtime> rt_;
  std::unique_ptr<pl::Store> store_;
  std::string token_, skip_reason_;
  int jobs_ = 0;
};

std::string last_line_with(const std::string& text, const std::string& part) {
  auto at = text.rfind(part);
  if (at == std::string::npos) return "";
  auto begin = text.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, text.find('\n', at) - begin) + "\n";
}

std::string param_name(int W, const std::string& what) { return "W" + std::to_string(W) + "_" + what; }

// ---- the matrix -----------------------------------------------------------------------------------

struct MatrixCase {
  const char* backend;
  int W;
  const char* size_class;
};
std::ostream& operator<<(std::ostream& os, const MatrixCase& c) {
  return os << c.backend << " W=" << c.W << " " << c.size_class;
}

// The size classes, each one ctest test per world size:
//   small   0, 1, 7 and 1000 elements: every op, dtype, reduce op and root, async and send/recv;
//   medium  about 1M elements (2^20 for even W, the prime 1000003 for W=3): the same;
//   large   64 MiB of each dtype (W = 2 and 3 only, for time): the operations that move big buffers
//           in training (allreduce sum/avg, broadcast from the first and last rank, allgather,
//           reduce_scatter sum/avg), where allgather's output and reduce_scatter's input are the
//           64 MiB (each rank's part 64 MiB / W: not a whole number of elements' worth for W=3).
std::vector<std::string> matrix_args(const std::string& size_class, int W) {
  if (size_class == "small") return {"matrix", "--sizes", "0,1,7,1000", "--timeout-ms", "30000"};
  if (size_class == "medium") return {"matrix", "--sizes", W % 2 ? "1000003" : "1048576", "--timeout-ms", "60000"};
  return {"matrix",       "--sizes", "64MiB",   "--ops", "allreduce,broadcast,allgather,reduce_scatter",
          "--reduce-ops", "sum,avg", "--roots", "ends",  "--gather-total",
          "--timeout-ms", "120000"};
}

class PgMatrix : public MultiProcess, public ::testing::WithParamInterface<MatrixCase> {};

TEST_P(PgMatrix, Run) {
  const MatrixCase c = GetParam();
  if (!backend_available(c.backend, c.W)) GTEST_SKIP() << skip_reason_;
  auto args = matrix_args(c.size_class, c.W);
  args.insert(args.end(), {"--backend", c.backend, "--device", std::string(c.backend) == "nccl" ? "cuda" : "cpu"});
  const auto deadline = std::string(c.size_class) == "small"    ? 120s
                        : std::string(c.size_class) == "medium" ? 200s
                                                                : 400s;
  auto r = run(job(c.W, args), deadline);
  ASSERT_FALSE(r.timed_out) << r.report();
  for (const auto& p : r.processes) {
    EXPECT_TRUE(p.ok()) << p.label << ": " << p.status() << "\n" << r.report();
    EXPECT_THAT(p.output, HasSubstr(" 0 failed")) << p.label;
  }
  for (const auto& p : r.processes) std::cout << last_line_with(p.output, "matrix:");
}

std::vector<MatrixCase> matrix_cases(const char* backend) {
  std::vector<MatrixCase> out;
  for (int W : {2, 3, 4})
    for (const char* cls : {"small", "medium", "large"})
      if (std::string(cls) != "large" || W < 4) out.push_back({backend, W, cls});
  return out;
}

std::string matrix_name(const ::testing::TestParamInfo<MatrixCase>& info) {
  return param_name(info.param.W, info.param.size_class);
}

INSTANTIATE_TEST_SUITE_P(Gloo, PgMatrix, ::testing::ValuesIn(matrix_cases("gloo")), matrix_name);
INSTANTIATE_TEST_SUITE_P(Nccl, PgMatrix, ::testing::ValuesIn(matrix_cases("nccl")), matrix_name);

// Rank 0 serves the store itself (no PL_USE_AGENT_STORE), as a job started without an agent does.
TEST_F(MultiProcess, RankZeroServesTheStore) {
  const int W = 3;
  if (!backend_available("gloo", W)) GTEST_SKIP() << skip_reason_;
  plrt_test::DistJobOptions o;
  o.argv = {kWorker, "matrix", "--sizes", "0,7,1000", "--group", "rank0-serves"};
  o.world_size = W;
  o.master_port = plrt_test::free_tcp_port();
  o.token = token_;
  o.agent_store = false;
  auto r = run(plrt_test::dist_job(o), 120s);
  ASSERT_FALSE(r.timed_out) << r.report();
  for (const auto& p : r.processes) {
    EXPECT_TRUE(p.ok()) << p.label << ": " << p.status() << "\n" << r.report();
    EXPECT_THAT(p.output, HasSubstr(" 0 failed")) << p.label;
  }
}

// ---- a missing rank -------------------------------------------------------------------------------

struct MissingCase {
  int W;
  const char* mode;  // sleep: alive but never calls (a timeout); exit: gone without a word
};
std::ostream& operator<<(std::ostream& os, const MissingCase& c) { return os << "W=" << c.W << " " << c.mode; }

class PgMissing : public MultiProcess, public ::testing::WithParamInterface<MissingCase> {};

TEST_P(PgMissing, OthersGetAnErrorNamingOpSequenceAndRank) {
  const MissingCase c = GetParam();
  if (!backend_available("gloo", c.W)) GTEST_SKIP() << skip_reason_;
  auto r = run(job(c.W, {"missing", "--mode", c.mode, "--timeout-ms", "2000"}), 60s);
  ASSERT_FALSE(r.timed_out) << r.report();
  for (int q = 0; q < c.W; ++q) {
    const auto& p = r.processes[q];
    EXPECT_TRUE(p.ok()) << p.label << ": " << p.status() << "\n" << r.report();
    if (q < c.W - 1) {
      EXPECT_THAT(p.output, HasSubstr("missing: OK")) << p.output;
    }
  }
  EXPECT_LT(r.elapsed, 30s);
}

INSTANTIATE_TEST_SUITE_P(Gloo, PgMissing,
                         ::testing::Values(MissingCase{2, "sleep"}, MissingCase{3, "sleep"}, MissingCase{4, "sleep"},
                                           MissingCase{3, "exit"}),
                         [](const ::testing::TestParamInfo<MissingCase>& i) {
                           return param_name(i.param.W, i.param.mode);
                         });

// ---- ranks that call different things -----------------------------------------------------------

struct MismatchCase {
  int W;
  const char* variant;  // op (the is_global_zero guard mistake), size, dtype; all_to_all against allreduce,
                        // counts (all_to_all peers that disagree on a count)
};
std::ostream& operator<<(std::ostream& os, const MismatchCase& c) { return os << "W=" << c.W << " " << c.variant; }

class PgMismatch : public MultiProcess, public ::testing::WithParamInterface<MismatchCase> {};

TEST_P(PgMismatch, EveryRankGetsAnErrorNamingWhatEachCalled) {
  const MismatchCase c = GetParam();
  if (!backend_available("gloo", c.W)) GTEST_SKIP() << skip_reason_;
  // A long group timeout: the mismatch must be found by comparing calls, not by timing out.
  auto r = run(job(c.W, {"mismatch", "--variant", c.variant, "--timeout-ms", "60000", "--within-ms", "10000"}), 60s);
  ASSERT_FALSE(r.timed_out) << r.report();
  for (const auto& p : r.processes) {
    EXPECT_TRUE(p.ok()) << p.label << ": " << p.status() << "\n" << r.report();
    EXPECT_THAT(p.output, HasSubstr(std::string("mismatch ") + c.variant + ": OK")) << p.output;
  }
}

std::vector<MismatchCase> mismatch_cases() {
  std::vector<MismatchCase> out;
  for (const char* v : {"op", "size", "dtype", "all_to_all", "counts"})
    for (int W : {2, 3, 4}) out.push_back({W, v});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Gloo, PgMismatch, ::testing::ValuesIn(mismatch_cases()),
                         [](const ::testing::TestParamInfo<MismatchCase>& i) {
                           return param_name(i.param.W, i.param.variant);
                         });

// ---- a process with the wrong job token -----------------------------------------------------------

TEST_F(MultiProcess, WrongTokenIsRefusedAndTheJobStillWorks) {
  const int W = 3;
  if (!backend_available("gloo", W)) GTEST_SKIP() << skip_reason_;
  auto specs = job(W, {"token", "--timeout-ms", "60000"});
  plrt_test::ProcessSpec intruder = specs[0];
  intruder.label = "intruder";
  intruder.argv = {kWorker, "token", "--intruder", "--group", "intruder", "--store-timeout-ms", "5000"};
  intruder.env.emplace_back("PL_JOB_TOKEN", "not-" + token_);
  specs.push_back(intruder);
  auto r = run(std::move(specs), 60s);
  ASSERT_FALSE(r.timed_out) << r.report();
  for (const auto& p : r.processes) EXPECT_TRUE(p.ok()) << p.label << ": " << p.status() << "\n" << r.report();
  for (int q = 0; q < W; ++q) EXPECT_THAT(r.processes[q].output, HasSubstr("token: group works: OK"));
  EXPECT_THAT(r.processes[W].output, HasSubstr("token: intruder refused: OK"));
  EXPECT_TRUE(log_.any("token")) << "the serving store should log the refused client";
  std::cout << r.processes[W].output;
}

}  // namespace
