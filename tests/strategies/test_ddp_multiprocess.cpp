// ddp across real processes: the test serves the rendezvous store (a fresh one per job, port 0, a
// random token) and starts W copies of ddp_worker, one per rank (PL_USE_AGENT_STORE=1), each under
// a deadline; a job past it is killed and the report names the ranks still running.  The workers
// check the numbers themselves (ddp_worker.cpp); this file picks the configurations and reads
// their exit codes.  DDP_TEST_VERBOSE=1 prints every rank's output, passing or not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <plrt/sdk/store.hpp>

#include "ddp_harness.hpp"
#include "spawn.hpp"

using ::testing::HasSubstr;
using namespace std::chrono_literals;

namespace {

class DdpMultiProcess : public ::testing::Test {
 protected:
  // Runs `ddp_worker <args>` as a W-rank job and returns the result.
  plrt_test::JobResult run(int W, std::vector<std::string> args, std::chrono::milliseconds deadline = 60s) {
    pl::Runtime rt(ddptest::runtime_options());
    const std::string token = plrt_test::random_token();
    pl::StoreOptions so;
    so.host = "127.0.0.1";
    so.port = 0;
    so.is_server = true;
    so.token = token;
    so.timeout = 60s;
    pl::Store store(rt, so);
    plrt_test::DistJobOptions o;
    o.argv = {DDP_WORKER_PATH};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.world_size = W;
    o.master_port = store.port();
    o.token = token;
    o.agent_store = true;
    plrt_test::WaitOptions w;
    w.deadline = deadline;
    return plrt_test::run_job(plrt_test::dist_job(o), w);
  }

  // Every rank exited 0 and printed `ok_line`.
  static void expect_all(const plrt_test::JobResult& r, const std::string& ok_line) {
    ASSERT_TRUE(r.all_ok()) << r.report();
    if (std::getenv("DDP_TEST_VERBOSE")) std::cout << r.report();
    for (const auto& p : r.processes) EXPECT_THAT(p.output, HasSubstr(ok_line)) << p.label << "\n" << r.report();
  }
};

const std::vector<std::string> kSmallCaps = {"--bucket-cap-mb",       "0.001",
                                             "--first-bucket-cap-mb", "0.001",
                                             "--expect-buckets",      std::to_string(ddptest::kSmallCapBuckets)};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(DdpMultiProcess, W2DefaultCaps) {
  expect_all(run(2, {"train", "--steps", "3", "--expect-buckets", std::to_string(ddptest::kDefaultCapBuckets)}),
             "train: OK");
}

// Ranks produce gradients in different orders, yet issue the buckets' allreduces alike; no_sync
// steps accumulate locally and the synced one averages the sums.
TEST_F(DdpMultiProcess, W2SmallBucketsShuffledWithAccumulation) {
  expect_all(run(2, with({"train", "--order", "shuffle", "--accumulate", "2", "--steps", "4"}, kSmallCaps)),
             "train: OK");
}

// layer0.weight (alone in the last bucket) never reports ready: after_backward takes its grad as
// final and launches that bucket late; the other four launch during backward.
TEST_F(DdpMultiProcess, W3SmallBucketsShuffledAccumulatedWithAnUnreportedGradient) {
  expect_all(run(3, with({"train", "--order", "shuffle", "--accumulate", "3", "--steps", "6", "--skip-ready",
                          "layer0.weight", "--expect-early-per-step", "4"},
                         kSmallCaps)),
             "train: OK");
}

TEST_F(DdpMultiProcess, W3DdpSpawnWithoutBufferBroadcast) {
  expect_all(run(3, {"train", "--strategy", "ddp_spawn", "--broadcast-buffers", "false", "--bucket-cap-mb", "0.001",
                     "--steps", "2", "--expect-buckets", std::to_string(ddptest::kDefaultCapBuckets)}),
             "train: OK");
}

// A rank that leaves after setup: the others' step fails, naming it, instead of hanging.
void expect_peer_failure(const plrt_test::JobResult& r) {
  if (std::getenv("DDP_TEST_VERBOSE")) std::cout << r.report();
  const size_t W = r.processes.size();
  ASSERT_FALSE(r.timed_out) << r.report();
  for (size_t q = 0; q + 1 < W; ++q) {
    EXPECT_TRUE(r.processes[q].ok()) << r.report();
    EXPECT_THAT(r.processes[q].output, HasSubstr("peer-fails: OK")) << r.report();
  }
  EXPECT_TRUE(r.processes[W - 1].ok()) << r.report();
}

TEST_F(DdpMultiProcess, W2PeerExitsDuringTheStep) {
  expect_peer_failure(run(2, {"peer-fails", "--mode", "exit", "--timeout-ms", "5000"}));
}

TEST_F(DdpMultiProcess, W3PeerStallsAndTheAllreduceTimesOut) {
  expect_peer_failure(run(3, {"peer-fails", "--mode", "stall", "--timeout-ms", "1500", "--tag", "stall"}));
}

}  // namespace
