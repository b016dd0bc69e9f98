// Launchers that hand plrt-mlp a bad environment, for real: each rank must stop at once (or, for a
// store nobody serves, within its timeout) with an error that names the launcher detected and the
// variables, never hang.  Open MPI: MASTER_ADDR missing on a two-node layout (exit 2), RANK from
// `mpirun -x` against mpirun's own rank (exit 2), a store that nobody serves (exit 1 after the
// store timeout, naming host:port).
#include "engines_support.hpp"

namespace {

using namespace plrt_engines;
using plrt_training::run;

// Each rank believes it is alone on its node (OMPI_COMM_WORLD_LOCAL_SIZE=1): two nodes, as mpirun
// across two hosts would say.
const char* kTwoNodes = "export OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0; exec \"$0\" \"$@\"";

TEST(OpenMpiErrors, NoMasterAddrOnTwoNodesExits2) {
  if (auto why = absent("mpirun"); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  auto r = run(mpirun(2, {"MASTER_PORT=29999"}, through_shell(kTwoNodes, train_args(dir, "x", "ddp"))));
  EXPECT_TRUE(r.exited && r.exit_code == 2) << r.status() << "\n" << r.output;
  EXPECT_NE(r.output.find("Open MPI (detected from OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE): MASTER_ADDR is "
                          "not set: an Open MPI job on 2 nodes needs the host name of rank 0's node"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.safetensors"));
}

TEST(OpenMpiErrors, RankFromTheCommandLineAgainstMpirunsExits2) {
  if (auto why = absent("mpirun"); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  auto r = run(mpirun(2, {"RANK=1", "WORLD_SIZE=2", "MASTER_PORT=29999"}, train_args(dir, "x", "ddp")));
  EXPECT_TRUE(r.exited && r.exit_code == 2) << r.status() << "\n" << r.output;
  EXPECT_NE(r.output.find("RANK=1 and OMPI_COMM_WORLD_RANK=0 disagree"), std::string::npos) << r.output;
}

TEST(OpenMpiErrors, UnservedStoreFailsWithinItsTimeoutNamingTheAddress) {
  if (auto why = absent("mpirun"); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const int port = plrt_test::free_tcp_port();
  // Rank 0, which would serve the store, never starts the trainer.
  const char* no_rank0 = "[ \"$OMPI_COMM_WORLD_RANK\" = 0 ] && exit 0; exec \"$0\" \"$@\"";
  auto r = run(mpirun(2, {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)},
                      through_shell(no_rank0, train_args(dir, "x", "ddp", {"--timeout", "2"}))));
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.status() << "\n" << r.output;
  EXPECT_NE(r.output.find("could not connect to the store at 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("MASTER_PORT=" + std::to_string(port) + " (from the environment) (launcher: openmpi)"),
            std::string::npos)
      << r.output;
  EXPECT_LT(r.elapsed.count(), 20000) << "the store timeout was 2 s";
}

}  // namespace
