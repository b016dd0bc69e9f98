// pl::ClusterEnv::detect when launchers nest or contradict each other (issue 14): torchrun with
// PL_JOB_TOKEN exported, plrun's mark against torchelastic's, horovodrun's variables and their
// Open MPI / MPICH fallbacks, RANK without a launcher's mark against other launchers' ranks, and
// errors that name the launcher detected and where the store's address came from.
#include "cluster_env_fixtures.hpp"

using namespace cluster_env_test;
using ::testing::HasSubstr;

// Issue 14: PL_JOB_TOKEN exported under torchrun is the store's token only; the job stays
// torchrun's, so plrt's store moves off the agent's MASTER_PORT.
TEST(ClusterEnv, TorchrunWithAJobTokenIsStillTorchrun) {
  Env e = {{"RANK", "1"},
           {"WORLD_SIZE", "2"},
           {"LOCAL_RANK", "1"},
           {"LOCAL_WORLD_SIZE", "2"},
           {"GROUP_RANK", "0"},
           {"MASTER_ADDR", "127.0.0.1"},
           {"MASTER_PORT", "29500"},
           {"TORCHELASTIC_RUN_ID", "none"},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
           {"PL_JOB_TOKEN", "secret"}};
  auto c = ClusterEnv::detect(e);
  EXPECT_EQ(c.source, "torchrun");
  EXPECT_EQ(c.token, "secret");
  EXPECT_FALSE(c.agent_store);
  EXPECT_EQ(c.master_port, 29501);
  EXPECT_THAT(c.rendezvous_from, HasSubstr("MASTER_PORT=29501 (MASTER_PORT + 1: torchrun's agent store"));
  EXPECT_THAT(c.rendezvous_from, HasSubstr("(launcher: torchrun)"));
  // Without torchelastic's mark, a token beside RANK and WORLD_SIZE is not plrun's either.
  e.erase("TORCHELASTIC_RUN_ID");
  EXPECT_EQ(ClusterEnv::detect(e).source, "torchrun");
  // PL_USE_AGENT_STORE=0 (rank 0 serves the store) is no plrun mark.
  e["TORCHELASTIC_RUN_ID"] = "none";
  e["PL_USE_AGENT_STORE"] = "0";
  EXPECT_EQ(ClusterEnv::detect(e).source, "torchrun");
  EXPECT_EQ(ClusterEnv::detect(e).master_port, 29501);
}

// plrun may export torchelastic's variables to its workers: its own mark still wins, and its store
// stays on MASTER_PORT (plrun serves it there).
TEST(ClusterEnv, PlrunsMarkWinsOverTorchelastic) {
  Env e = plrun_worker();
  e["TORCHELASTIC_RUN_ID"] = "plrun-job";
  e["TORCHELASTIC_RESTART_COUNT"] = "0";
  e["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  auto c = ClusterEnv::detect(e);
  EXPECT_EQ(c.source, "plrun");
  EXPECT_TRUE(c.agent_store);
  EXPECT_EQ(c.master_port, 29500);
  e.erase("PL_USE_AGENT_STORE");
  e["PL_LAUNCH_MODE"] = "spawn";  // a spawned worker keeps the mode
  EXPECT_EQ(ClusterEnv::detect(e).source, "plrun");
}

TEST(ClusterEnv, ErrorsNameTheLauncherDetected) {
  Env torch = {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}, {"TORCHELASTIC_RUN_ID", "abc"}};
  EXPECT_THAT(error_of(torch), HasSubstr("torchrun (detected from TORCHELASTIC_RUN_ID=abc): RANK='2' is not valid: "
                                         "it must be in [0, WORLD_SIZE=2)"));
  Env plrun = plrun_worker();
  plrun["RANK"] = "4";
  EXPECT_THAT(error_of(plrun), HasSubstr("plrun (detected from PL_USE_AGENT_STORE=1): RANK='4'"));
  torch.erase("TORCHELASTIC_RUN_ID");
  EXPECT_THAT(error_of(torch), HasSubstr("an unnamed launcher (detected from RANK and WORLD_SIZE without "));
  EXPECT_THAT(error_of(changed(ompi_process(), "OMPI_COMM_WORLD_RANK", "8")),
              HasSubstr("Open MPI (detected from OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE): "
                        "OMPI_COMM_WORLD_RANK='8' is not valid"));
  EXPECT_THAT(error_of(changed(slurm_task(), "SLURM_PROCID", "7")),
              HasSubstr("SLURM (detected from SLURM_PROCID and SLURM_NTASKS): SLURM_PROCID='7'"));
  EXPECT_THAT(error_of(changed(horovod_process(), "HOROVOD_RANK", "8")),
              HasSubstr("horovodrun (detected from HOROVOD_RANK): HOROVOD_RANK='8' is not valid: "
                        "it must be in [0, HOROVOD_SIZE=8)"));
}

TEST(ClusterEnv, Horovod) {
  auto c = ClusterEnv::detect(horovod_process());
  expect_layout(c, "horovod", {5, 8, 1, 4, 1, 2});
  EXPECT_EQ(c.master_addr, "head");
  EXPECT_EQ(c.master_port, 29600);
  EXPECT_FALSE(c.agent_store);  // no launcher serves the store: rank 0 does
  // horovodrun's MPI mode: mpirun's variables beside horovod's, the same numbers.
  Env mpi = horovod_process();
  for (const auto& kv : ompi_process()) mpi.insert(kv);
  EXPECT_EQ(ClusterEnv::detect(mpi).source, "horovod");
  EXPECT_EQ(ClusterEnv::detect(mpi).rank, 5);
  // Only HOROVOD_SIZE: the rank and the node layout from Open MPI's variables, then MPICH's.
  Env fallback = ompi_process();
  fallback["HOROVOD_SIZE"] = "8";
  auto f = ClusterEnv::detect(fallback);
  expect_layout(f, "horovod", {5, 8, 1, 4, 1, 2});
  EXPECT_GE(f.master_port, 20000);  // derived from the job id, as Open MPI's
  EXPECT_EQ(f.master_port, ClusterEnv::detect(ompi_process()).master_port);
  EXPECT_THAT(f.rendezvous_from, HasSubstr("derived from OMPI_MCA_ess_base_jobid=4242) (launcher: horovod)"));
  auto pmi = ClusterEnv::detect({{"HOROVOD_SIZE", "3"},
                                 {"PMI_RANK", "2"},
                                 {"PMI_SIZE", "3"},
                                 {"MPI_LOCALRANKID", "2"},
                                 {"MPI_LOCALNRANKS", "3"},
                                 {"MASTER_PORT", "4000"}});
  EXPECT_EQ(pmi.rank, 2);
  EXPECT_EQ(pmi.local_rank, 2);
  EXPECT_EQ(pmi.num_nodes, 1);
  EXPECT_EQ(pmi.master_addr, "127.0.0.1");
  // No cross variables: the node from rank / local size.
  Env derived = horovod_process();
  derived.erase("HOROVOD_CROSS_RANK");
  derived.erase("HOROVOD_CROSS_SIZE");
  EXPECT_EQ(ClusterEnv::detect(derived).node_rank, 1);
  EXPECT_EQ(ClusterEnv::detect(derived).num_nodes, 2);
}

TEST(ClusterEnv, HorovodValuesAreChecked) {
  auto with = [](const std::string& k, const std::string& v) { return changed(horovod_process(), k, v); };
  EXPECT_THAT(error_of(with("HOROVOD_LOCAL_RANK", "4")),
              HasSubstr("HOROVOD_LOCAL_RANK='4' is not valid: it must be in [0, HOROVOD_LOCAL_SIZE=4)"));
  EXPECT_THAT(error_of(with("HOROVOD_CROSS_RANK", "2")),
              HasSubstr("HOROVOD_CROSS_RANK='2' is not valid: it must be in [0, nodes=2)"));
  EXPECT_THAT(error_of(with("HOROVOD_SIZE", "many")), HasSubstr("HOROVOD_SIZE='many' is not valid"));
  EXPECT_THAT(error_of(with("HOROVOD_LOCAL_SIZE", "")),
              HasSubstr("HOROVOD_LOCAL_SIZE (or OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS) is not set"));
  EXPECT_THAT(error_of(with("MASTER_ADDR", "")), HasSubstr("MASTER_ADDR is not set: a horovod job on 2 nodes"));
  EXPECT_THAT(error_of(with("MASTER_PORT", "")), HasSubstr("MASTER_PORT is not set"));
  EXPECT_THAT(error_of({{"HOROVOD_SIZE", "2"}}),
              HasSubstr("HOROVOD_RANK (or OMPI_COMM_WORLD_RANK, PMI_RANK) is not set"));
  // Two launchers' variables for the same process that disagree.
  EXPECT_THAT(error_of(changed(horovod_process(), "OMPI_COMM_WORLD_SIZE", "4")),
              HasSubstr("horovodrun (detected from HOROVOD_RANK): HOROVOD_SIZE=8 and "
                        "OMPI_COMM_WORLD_SIZE=4 disagree: both describe this process"));
  Env rank = horovod_process();
  rank["PMI_RANK"] = "0";
  EXPECT_THAT(error_of(rank), HasSubstr("HOROVOD_RANK=5 and PMI_RANK=0 disagree"));
}

// Nested launchers are legitimate (the inner one started this process and wins); RANK and
// WORLD_SIZE without a launcher's mark must agree with every other rank variable that is set.
TEST(ClusterEnv, ContradictoryLaunchers) {
  // torchrun inside an srun allocation: SLURM_PROCID is the torchrun task's.
  Env torch_in_srun = slurm_task();
  for (const auto& kv : Env{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "j"}})
    torch_in_srun[kv.first] = kv.second;
  EXPECT_EQ(ClusterEnv::detect(torch_in_srun).source, "torchrun");
  EXPECT_EQ(ClusterEnv::detect(torch_in_srun).rank, 3);
  // plrun started by mpirun on each node: OMPI_COMM_WORLD_RANK is the node's plrun's.
  Env plrun_in_mpirun = plrun_worker();
  for (const auto& kv : ompi_process()) plrun_in_mpirun.insert(kv);
  EXPECT_EQ(ClusterEnv::detect(plrun_in_mpirun).rank, 3);
  // A wrapper that exports RANK=$OMPI_COMM_WORLD_RANK and WORLD_SIZE=$OMPI_COMM_WORLD_SIZE.
  Env wrapper = ompi_process();
  wrapper["RANK"] = "5";
  wrapper["WORLD_SIZE"] = "8";
  wrapper["MASTER_PORT"] = "29500";
  EXPECT_EQ(ClusterEnv::detect(wrapper).rank, 5);
  // Unmarked RANK against mpirun's: `mpirun -x RANK=1`.
  Env mpi_rank = wrapper;
  mpi_rank["RANK"] = "1";
  EXPECT_THAT(error_of(mpi_rank), HasSubstr("an unnamed launcher (detected from RANK and WORLD_SIZE without "
                                            "TORCHELASTIC_RUN_ID or PL_USE_AGENT_STORE=1): RANK=1 and "
                                            "OMPI_COMM_WORLD_RANK=5 disagree"));
  Env mpi_size = wrapper;
  mpi_size["WORLD_SIZE"] = "6";
  EXPECT_THAT(error_of(mpi_size), HasSubstr("WORLD_SIZE=6 and OMPI_COMM_WORLD_SIZE=8 disagree"));
  Env hvd = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}, {"HOROVOD_RANK", "1"}, {"HOROVOD_SIZE", "2"}};
  EXPECT_THAT(error_of(hvd), HasSubstr("RANK=0 and HOROVOD_RANK=1 disagree"));
  // Against an srun task's; an interactive allocation's SLURM variables are not a task's.
  Env srun = slurm_task();
  srun["RANK"] = "1";
  srun["WORLD_SIZE"] = "7";
  srun["MASTER_PORT"] = "29500";
  EXPECT_THAT(error_of(srun), HasSubstr("RANK=1 and SLURM_PROCID=5 disagree"));
  srun["SLURM_JOB_NAME"] = "interactive";
  EXPECT_EQ(ClusterEnv::detect(srun).rank, 1);
}

TEST(ClusterEnv, RendezvousSaysWhereTheStoreIs) {
  auto mpi = ClusterEnv::detect(ompi_process());
  EXPECT_EQ(mpi.rendezvous_from,
            "MASTER_ADDR=head (from the environment), MASTER_PORT=" + std::to_string(mpi.master_port) +
                " (derived from OMPI_MCA_ess_base_jobid=4242) (launcher: openmpi)");
  EXPECT_THAT(ClusterEnv::detect(slurm_task()).rendezvous_from,
              HasSubstr("MASTER_ADDR=gpu007 (the first host of SLURM_NODELIST), MASTER_PORT=19567 (15000 + the last "
                        "digits of SLURM_JOB_ID=1234567)"));
  EXPECT_THAT(ClusterEnv::detect(plrun_worker()).rendezvous_from,
              HasSubstr("MASTER_ADDR=node0 (from the environment), MASTER_PORT=29500 (from the environment)"));
  EXPECT_EQ(ClusterEnv::detect(Env{}).rendezvous_from, "");
}
