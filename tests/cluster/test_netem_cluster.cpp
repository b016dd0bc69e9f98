// scripts/netem-cluster itself, the emulated two-node network every multi-node test runs on:
//  - the link is really shaped: a bulk TCP transfer between the namespaces at 100 Mbit/s gets
//    40 %..130 % of it (loopback does GB/s) and went through the sender's tbf
//  - run executes in the node's namespace; concurrent clusters get their own names and subnets
//  - down is idempotent and leaves nothing; a job whose node fails exits with that node's code, one
//    past its time bound exits 124, an interrupted one exits 128+signal, each cleaned up
//  - bad arguments exit 2 naming the bad value and what is valid
// Where the machine refuses namespaces or tc (not root) the tests that need them skip, saying why.
#include <csignal>
#include <thread>

#include "netem_cluster.hpp"

namespace {

using namespace plrt_cluster;
using namespace std::chrono_literals;

// node 1 (the sender) side's tbf byte counter.
long long tbf_bytes(const nlohmann::json& info, int node) { return info["nodes"][node]["tbf_bytes"].get<long long>(); }

TEST(Netem, ShapesTheLinkToTheRate) {
  NETEM_CLUSTER(c, "100mbit");
  const auto& up = c.up_info();
  for (int node : {0, 1}) {
    EXPECT_TRUE(up["nodes"][node]["rate_bit_per_s"] == 100e6) << up.dump();
    EXPECT_EQ(up["nodes"][node]["namespace"], c.prefix() + "-" + std::to_string(node));
  }
  // The delay needs the kernel's netem qdisc: without it the script must say so.
  if (!up["nodes"][0]["delay_applied"].get<bool>()) {
    EXPECT_NE(c.reason().find("delay 0.1ms was NOT applied"), std::string::npos) << c.reason();
    std::printf("note: %s", c.reason().c_str());
  }
  const long long before = tbf_bytes(c.info(), 1);
  const long long bytes = 5'000'000;
  auto r = script({"measure", "--prefix", c.prefix(), "--bytes", std::to_string(bytes), "--timeout", "30"});
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
  const auto m = last_json(r.output);
  EXPECT_EQ(m["bytes"].get<long long>(), bytes);
  const double mbit = m["mbit_per_s"].get<double>();
  std::printf("100mbit link: %lld bytes in %.3f s, %.1f Mbit/s\n", bytes, m["seconds"].get<double>(), mbit);
  EXPECT_GE(mbit, 40.0) << "far below the configured 100 Mbit/s";
  EXPECT_LE(mbit, 130.0) << "above the configured 100 Mbit/s: the link is not shaped";
  // The payload (plus headers) went through node 1's tbf.
  EXPECT_GE(tbf_bytes(c.info(), 1) - before, bytes);
}

TEST(Netem, RunExecutesInTheNodesNamespace) {
  NETEM_CLUSTER(c, "1gbit");
  for (int node : {0, 1}) {
    auto r = script({"run", "--prefix", c.prefix(), std::to_string(node), "--", "ip", "-4", "-o", "addr", "show"});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << r.output;
    const std::string mine = c.up_info()["nodes"][node]["address"], other = c.up_info()["nodes"][1 - node]["address"];
    EXPECT_NE(r.output.find(mine + "/24"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(other + "/24"), std::string::npos) << r.output;
  }
}

TEST(Netem, ConcurrentClustersGetTheirOwnNamesAndSubnets) {
  NETEM_CLUSTER(a, "1gbit");
  NETEM_CLUSTER(b, "1gbit");
  EXPECT_NE(a.prefix(), b.prefix());
  const std::string sa = a.up_info()["master_addr"], sb = b.up_info()["master_addr"];
  EXPECT_NE(sa.substr(0, sa.rfind('.')), sb.substr(0, sb.rfind('.'))) << sa << " " << sb;
}

TEST(Netem, DownIsIdempotentAndRemovesEverything) {
  const std::string p = unique_prefix("d");
  auto up = script({"up", "--rate", "1gbit", "--prefix", p});
  if (up.exited && up.exit_code == kRefused) GTEST_SKIP() << up.output;
  ASSERT_TRUE(up.ok()) << up.status() << "\n" << up.output;
  EXPECT_EQ(namespaces_with(p).size(), 2u);
  auto again = script({"up", "--rate", "1gbit", "--prefix", p});
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("exists already"), std::string::npos) << again.output;
  for (int i = 0; i < 2; ++i) {
    auto down = script({"down", "--prefix", p});
    EXPECT_TRUE(down.ok()) << "down #" << i << ": " << down.status() << "\n" << down.output;
  }
  EXPECT_TRUE(namespaces_with(p).empty());
  auto run = script({"run", "--prefix", p, "0", "--", "true"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("no cluster with prefix '" + p + "'"), std::string::npos) << run.output;
}

// A job on a prefix that does not exist yet brings its cluster up and takes it down.
plrt_test::ProcessResult own_job(const std::string& prefix, int timeout_s, const std::vector<std::string>& program) {
  std::vector<std::string> a{
      "job", "--prefix",  prefix, "--timeout", std::to_string(timeout_s), "--", "--accelerator", "cpu", "--strategy",
      "ddp", "--devices", "1",    "--"};
  a.insert(a.end(), program.begin(), program.end());
  return script(a, std::chrono::seconds(timeout_s + 30));
}

TEST(Netem, JobExitsWithTheFailingNodesCodeAndCleansUp) {
  const std::string p = unique_prefix("f");
  auto r = own_job(p, 30, {"/bin/sh", "-c", "exit $((NODE_RANK * 3))"});
  if (r.exited && r.exit_code == kRefused) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;
  // Node 1's worker fails: the round ends on every node, and both plruns exit with its code.
  EXPECT_NE(r.output.find("node 0 exit 3, node 1 exit 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("plrun: rank 1 (pid "), std::string::npos) << r.output;
  EXPECT_TRUE(namespaces_with(p).empty());
}

TEST(Netem, JobPastItsTimeBoundExits124AndCleansUp) {
  const std::string p = unique_prefix("t");
  auto r = own_job(p, 2, {"sleep", "60"});
  if (r.exited && r.exit_code == kRefused) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_LT(r.elapsed, 20s) << r.output;
  EXPECT_NE(r.output.find("stopped at the 2 s time bound"), std::string::npos) << r.output;
  EXPECT_TRUE(namespaces_with(p).empty());
}

TEST(Netem, InterruptedJobCleansUp) {
  auto check = script({"check"});
  if (check.exited && check.exit_code == kRefused) GTEST_SKIP() << check.output;
  const std::string p = unique_prefix("i");
  plrt_test::ProcessSpec spec;
  spec.argv = {NETEM_CLUSTER_PATH, "job", "--prefix",  p,   "--timeout", "60",    "--", "--accelerator", "cpu",
               "--strategy",       "ddp", "--devices", "1", "--",        "sleep", "60"};
  spec.env = {{"PLRUN", PLRUN_PATH}};
  plrt_test::Job job({spec});
  // Until both namespaces exist (or the script ended: refused).
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (namespaces_with(p).size() < 2 && std::chrono::steady_clock::now() < until && kill(job.pid(0), 0) == 0)
    std::this_thread::sleep_for(100ms);
  std::this_thread::sleep_for(500ms);  // plrun started in both
  job.signal(SIGTERM);
  auto r = job.wait({30s}).processes.at(0);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.status() << "\n" << r.output;
  EXPECT_LT(r.elapsed, 25s);
  EXPECT_TRUE(namespaces_with(p).empty()) << r.output;
}

TEST(Netem, BadArgumentsExitTwoNamingTheValue) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases{
      {{"up", "--rate", "fast"}, "bad --rate 'fast': valid is a positive number with one of the units"},
      {{"up", "--rate", "0mbit"}, "bad --rate '0mbit'"},
      {{"up", "--delay", "10"}, "bad --delay '10': valid is 0 or a number with one of the units us, ms, s"},
      {{"up", "--prefix", "a/b"}, "bad --prefix 'a/b': valid is 1 to 24 letters, digits, '-' or '_'"},
      {{"run", "--prefix", "x", "2", "--", "true"}, "bad node '2': valid are 0, 1"},
      {{"run", "--prefix", "x", "0"}, "run needs: NODE -- cmd args..."},
      {{"job", "--prefix", "x", "--", "--devices", "1"}, "job needs: -- [plrun job flags] -- program args..."},
      {{"job", "--port", "70000", "--", "--", "true"}, "bad --port 70000: valid is 1..65535"},
      {{"job", "--timeout", "0", "--", "--", "true"}, "bad --timeout 0: valid is a positive number of seconds"},
      {{"measure", "--bytes", "0"}, "bad --bytes 0: valid is a positive number"},
      {{"up", "--rat", "1gbit"}, "bad arguments for up: --rat 1gbit"},
      {{"frobnicate"}, "unknown command 'frobnicate': valid are up, run, info, down, job, measure, gc, check"},
      {{"info", "--prefix", "plt-none-such"}, "no cluster with prefix 'plt-none-such'"},
  };
  for (const auto& c : cases) {
    auto r = script(c.args, 20s);
    std::string line;
    for (const auto& a : c.args) line += a + " ";
    EXPECT_EQ(r.exit_code, 2) << line << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << line << "\n" << r.output;
  }
}

}  // namespace
