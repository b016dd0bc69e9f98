// pl::ClusterEnv::detect over environment maps: plrun, torchrun, SLURM, Open MPI, none, their
// precedence, and malformed values (each error names the variable, its value and what is valid).
// Nested and contradicting launchers and horovodrun: test_cluster_env_launchers.cpp.
#include "cluster_env_fixtures.hpp"

using namespace cluster_env_test;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ClusterEnv, NoneIsASingleProcess) {
  auto c = ClusterEnv::detect(Env{{"HOME", "/root"}});
  EXPECT_EQ(c.source, "none");
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.master_port, -1);
  EXPECT_FALSE(c.distributed());
  EXPECT_FALSE(c.agent_store);
  EXPECT_EQ(ClusterEnv::detect(Env{{"PL_JOB_TOKEN", "x"}}).token, "x");
}

TEST(ClusterEnv, PlrunWorker) {
  auto c = ClusterEnv::detect(plrun_worker());
  expect_layout(c, "plrun", {3, 4, 1, 2, 1, 2});
  EXPECT_EQ(c.master_addr, "node0");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_EQ(c.token, "t");
  EXPECT_TRUE(c.agent_store);
  EXPECT_FALSE(c.spawn_parent);
  EXPECT_TRUE(c.distributed());
}

TEST(ClusterEnv, PlrunSpawnParentAndItsWorkers) {
  Env e = {{"PL_LAUNCH_MODE", "spawn"}, {"WORLD_SIZE", "6"},        {"LOCAL_WORLD_SIZE", "3"},
           {"NODE_RANK", "1"},          {"MASTER_ADDR", "h"},       {"MASTER_PORT", "4000"},
           {"PL_JOB_TOKEN", "t"},       {"PL_USE_AGENT_STORE", "1"}};
  auto c = ClusterEnv::detect(e);
  EXPECT_EQ(c.source, "plrun");
  EXPECT_TRUE(c.spawn_parent);
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.local_world_size, 3);
  EXPECT_EQ(c.num_nodes, 2);
  EXPECT_EQ(c.node_rank, 1);
  // A worker the parent spawned sets its rank; the inherited mode does not make it a parent.
  e["RANK"] = "4";
  e["LOCAL_RANK"] = "1";
  auto w = ClusterEnv::detect(e);
  EXPECT_FALSE(w.spawn_parent);
  EXPECT_EQ(w.rank, 4);
  EXPECT_EQ(w.node_rank, 1);
  e.erase("RANK");
  e["LOCAL_WORLD_SIZE"] = "4";
  EXPECT_THAT(error_of(e), HasSubstr("LOCAL_WORLD_SIZE='4' is not valid: WORLD_SIZE=6 must be a multiple of it"));
  e.erase("LOCAL_WORLD_SIZE");
  EXPECT_THAT(error_of(e), HasSubstr("LOCAL_WORLD_SIZE is not set"));
  EXPECT_THAT(error_of({{"PL_LAUNCH_MODE", "fork"}, {"WORLD_SIZE", "2"}}),
              HasSubstr("PL_LAUNCH_MODE='fork' is not valid: plrun sets it to 'spawn' only"));
}

TEST(ClusterEnv, Torchrun) {
  Env e = {{"RANK", "5"},       {"WORLD_SIZE", "8"},  {"LOCAL_RANK", "1"},      {"LOCAL_WORLD_SIZE", "4"},
           {"GROUP_RANK", "1"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RUN_ID", "abc"}};
  auto c = ClusterEnv::detect(e);
  EXPECT_EQ(c.source, "torchrun");
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.num_nodes, 2);
  EXPECT_FALSE(c.agent_store);
  EXPECT_EQ(c.token, "");
  // Minimal: RANK and WORLD_SIZE on one node.
  auto m = ClusterEnv::detect({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_PORT", "1000"}});
  EXPECT_EQ(m.source, "torchrun");
  EXPECT_EQ(m.local_rank, 2);
  EXPECT_EQ(m.local_world_size, 3);
  EXPECT_EQ(m.node_rank, 0);
  EXPECT_EQ(m.master_addr, "127.0.0.1");
  EXPECT_THAT(error_of({{"TORCHELASTIC_RUN_ID", "abc"}}), HasSubstr("WORLD_SIZE is not set"));
  EXPECT_EQ(c.master_port, 29400);
  // torchrun's agent serves PyTorch's TCPStore on MASTER_PORT: plrt's store takes the next port.
  e["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_EQ(ClusterEnv::detect(e).master_port, 29401);
  EXPECT_FALSE(ClusterEnv::detect(e).agent_store);  // rank 0 serves plrt's store
}

TEST(ClusterEnv, LauncherValuesAreChecked) {
  auto with = [](const std::string& k, const std::string& v) { return changed(plrun_worker(), k, v); };
  EXPECT_THAT(error_of(with("RANK", "4")), HasSubstr("RANK='4' is not valid: it must be in [0, WORLD_SIZE=4)"));
  EXPECT_THAT(error_of(with("RANK", "three")), HasSubstr("RANK='three' is not valid: expected an integer"));
  EXPECT_THAT(error_of(with("RANK", "1 ")), HasSubstr("RANK='1 '"));
  EXPECT_THAT(error_of(with("WORLD_SIZE", "0")), HasSubstr("WORLD_SIZE='0' is not valid"));
  EXPECT_THAT(error_of(with("WORLD_SIZE", "99999999999999999999")), HasSubstr("expected an integer"));
  EXPECT_THAT(error_of(with("LOCAL_RANK", "2")),
              HasSubstr("LOCAL_RANK='2' is not valid: it must be in [0, LOCAL_WORLD_SIZE=2)"));
  EXPECT_THAT(error_of(with("LOCAL_WORLD_SIZE", "5")), HasSubstr("LOCAL_WORLD_SIZE='5'"));
  EXPECT_THAT(error_of(with("NODE_RANK", "2")),
              HasSubstr("NODE_RANK='2' is not valid: it must be in [0, num_nodes=2)"));
  EXPECT_THAT(error_of(with("GROUP_RANK", "0")), HasSubstr("GROUP_RANK='0' is not valid: it must equal NODE_RANK=1"));
  EXPECT_THAT(error_of(with("MASTER_PORT", "70000")),
              HasSubstr("MASTER_PORT='70000' is not valid: it must be in [1, 65535]"));
  EXPECT_THAT(error_of(with("MASTER_PORT", "")), HasSubstr("MASTER_PORT is not set"));
  EXPECT_THAT(error_of(with("PL_USE_AGENT_STORE", "yes")), HasSubstr("PL_USE_AGENT_STORE='yes'"));
  EXPECT_THAT(error_of({{"RANK", "0"}}), HasSubstr("WORLD_SIZE is not set"));
  EXPECT_THAT(error_of({{"WORLD_SIZE", "2"}}), HasSubstr("RANK is not set"));
}

TEST(ClusterEnv, Slurm) {
  auto c = ClusterEnv::detect(slurm_task());
  EXPECT_EQ(c.source, "slurm");
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.world_size, 7);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.node_rank, 2);
  EXPECT_EQ(c.num_nodes, 4);
  EXPECT_EQ(c.local_world_size, 2);  // "2(x3),1": node 2 has two tasks
  EXPECT_EQ(c.master_addr, "gpu007");
  EXPECT_EQ(c.master_port, 15000 + 4567);
  // The last node of "2(x3),1" has one task; SLURM_NTASKS_PER_NODE wins when set.
  Env last = slurm_task();
  last["SLURM_NODEID"] = "3";
  last["SLURM_PROCID"] = "6";
  last["SLURM_LOCALID"] = "0";
  EXPECT_EQ(ClusterEnv::detect(last).local_world_size, 1);
  Env per = slurm_task();
  per["SLURM_NTASKS_PER_NODE"] = "3";
  EXPECT_EQ(ClusterEnv::detect(per).local_world_size, 3);
  // MASTER_ADDR and MASTER_PORT from the environment win; no job id: Lightning's 12910.
  Env set = slurm_task();
  set["MASTER_ADDR"] = "custom";
  set["MASTER_PORT"] = "2222";
  EXPECT_EQ(ClusterEnv::detect(set).master_addr, "custom");
  EXPECT_EQ(ClusterEnv::detect(set).master_port, 2222);
  Env no_id = slurm_task();
  no_id.erase("SLURM_JOB_ID");
  EXPECT_EQ(ClusterEnv::detect(no_id).master_port, 12910);
  Env short_id = slurm_task();
  short_id["SLURM_JOB_ID"] = "42";
  EXPECT_EQ(ClusterEnv::detect(short_id).master_port, 15042);
  Env job_nodes = slurm_task();
  job_nodes.erase("SLURM_NNODES");
  job_nodes["SLURM_JOB_NUM_NODES"] = "4";
  EXPECT_EQ(ClusterEnv::detect(job_nodes).num_nodes, 4);
}

TEST(ClusterEnv, SlurmInteractiveAllocationIsIgnored) {
  for (const char* name : {"bash", "interactive"}) {
    Env e = slurm_task();
    e["SLURM_JOB_NAME"] = name;
    EXPECT_EQ(ClusterEnv::detect(e).source, "none") << name;
  }
}

// A batch script's shell has the job's task count but no step: not a task (it would wait as rank 0
// for ranks that never come).  srun's tasks have SLURM_STEP_ID (older SLURM: SLURM_STEPID).
TEST(ClusterEnv, SlurmBatchShellIsNotATask) {
  Env shell = slurm_task();
  shell.erase("SLURM_STEP_ID");
  EXPECT_THAT(error_of(shell), AllOf(HasSubstr("SLURM_NTASKS=7 but this process is not an srun task"),
                                     HasSubstr("start the program with srun")));
  Env old_name = shell;
  old_name["SLURM_STEPID"] = "0";
  EXPECT_EQ(ClusterEnv::detect(old_name).rank, 5);
  Env one = changed(changed(shell, "SLURM_NTASKS", "1"), "SLURM_PROCID", "0");  // one task: nothing to wait for
  one = changed(changed(one, "SLURM_NNODES", "1"), "SLURM_NODEID", "0");
  one = changed(changed(one, "SLURM_TASKS_PER_NODE", "1"), "SLURM_LOCALID", "0");
  EXPECT_EQ(ClusterEnv::detect(one).world_size, 1);
}

TEST(ClusterEnv, SlurmValuesAreChecked) {
  auto with = [](const std::string& k, const std::string& v) { return changed(slurm_task(), k, v); };
  EXPECT_THAT(error_of(with("SLURM_PROCID", "7")),
              HasSubstr("SLURM_PROCID='7' is not valid: it must be in [0, SLURM_NTASKS=7)"));
  EXPECT_THAT(error_of(with("SLURM_NODEID", "4")), HasSubstr("SLURM_NODEID='4'"));
  EXPECT_THAT(error_of(with("SLURM_LOCALID", "2")),
              HasSubstr("SLURM_LOCALID='2' is not valid: it must be in [0, tasks on this node=2)"));
  EXPECT_THAT(error_of(with("SLURM_LOCALID", "")), HasSubstr("SLURM_LOCALID is not set"));
  EXPECT_THAT(error_of(with("SLURM_NNODES", "")), HasSubstr("SLURM_NNODES (or SLURM_JOB_NUM_NODES) is not set"));
  EXPECT_THAT(error_of(with("SLURM_TASKS_PER_NODE", "2(x2")), HasSubstr("SLURM_TASKS_PER_NODE='2(x2' is not valid"));
  EXPECT_THAT(error_of(with("SLURM_TASKS_PER_NODE", "2,x")), HasSubstr("SLURM_TASKS_PER_NODE='2,x'"));
  EXPECT_THAT(error_of(with("SLURM_TASKS_PER_NODE", "2(x2)")), HasSubstr("it lists 2 node(s) but SLURM_NODEID=2"));
  EXPECT_THAT(error_of(with("SLURM_TASKS_PER_NODE", "")), HasSubstr("SLURM_TASKS_PER_NODE is not set"));
  EXPECT_THAT(error_of(with("SLURM_JOB_ID", "12ab")), HasSubstr("SLURM_JOB_ID='12ab'"));
  EXPECT_THAT(error_of(with("SLURM_NODELIST", "gpu[1-")),
              HasSubstr("SLURM_NODELIST: the SLURM node list 'gpu[1-' is malformed"));
}

TEST(ClusterEnv, SlurmFirstHost) {
  EXPECT_EQ(pl::slurm_first_host("node[001-003,7],gpu1"), "node001");
  EXPECT_EQ(pl::slurm_first_host("gpu1,node[1-2]"), "gpu1");
  EXPECT_EQ(pl::slurm_first_host("host"), "host");
  EXPECT_EQ(pl::slurm_first_host("node[7,1-3]"), "node7");
  EXPECT_EQ(pl::slurm_first_host("rack[2-3]-node[04-05]-ib"), "rack2-node04-ib");
  EXPECT_EQ(pl::slurm_first_host("a-b.example.org,c"), "a-b.example.org");
  for (const char* bad : {"", ",node1", "node[1-2", "node]1", "node[[1]]", "node[]", "node[a-b]"}) {
    try {
      pl::slurm_first_host(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const pl::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("'" + std::string(bad) + "' is malformed"));
    }
  }
}

TEST(ClusterEnv, OpenMpi) {
  auto c = ClusterEnv::detect(ompi_process());
  expect_layout(c, "openmpi", {5, 8, 1, 4, 1, 2});
  EXPECT_EQ(c.master_addr, "head");
  EXPECT_GE(c.master_port, 20000);
  EXPECT_LT(c.master_port, 30000);
  // Every process of the job derives the same port; another job most likely another.
  Env other_rank = ompi_process();
  other_rank["OMPI_COMM_WORLD_RANK"] = "0";
  other_rank["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  EXPECT_EQ(ClusterEnv::detect(other_rank).master_port, c.master_port);
  Env other_job = ompi_process();
  other_job["OMPI_MCA_ess_base_jobid"] = "4243";
  EXPECT_NE(ClusterEnv::detect(other_job).master_port, c.master_port);
  Env pmix = ompi_process();
  pmix.erase("OMPI_MCA_ess_base_jobid");
  pmix["PMIX_NAMESPACE"] = "prterun-host-1234@1";
  int port = ClusterEnv::detect(pmix).master_port;
  EXPECT_GE(port, 20000);
  EXPECT_LT(port, 30000);
  // One node: no MASTER_ADDR needed; num_nodes rounds up.
  auto one = ClusterEnv::detect({{"OMPI_COMM_WORLD_RANK", "0"},
                                 {"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                 {"MASTER_PORT", "5000"}});
  EXPECT_EQ(one.master_addr, "127.0.0.1");
  EXPECT_EQ(one.num_nodes, 1);
  auto uneven = ClusterEnv::detect({{"OMPI_COMM_WORLD_RANK", "4"},
                                    {"OMPI_COMM_WORLD_SIZE", "5"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                    {"MASTER_ADDR", "h"},
                                    {"MASTER_PORT", "5000"}});
  EXPECT_EQ(uneven.num_nodes, 3);
  EXPECT_EQ(uneven.node_rank, 2);
}

TEST(ClusterEnv, OpenMpiValuesAreChecked) {
  Env no_addr = ompi_process();
  no_addr.erase("MASTER_ADDR");
  EXPECT_THAT(error_of(no_addr), HasSubstr("MASTER_ADDR is not set: an Open MPI job on 2 nodes"));
  Env no_port = ompi_process();
  no_port.erase("OMPI_MCA_ess_base_jobid");
  EXPECT_THAT(error_of(no_port), HasSubstr("MASTER_PORT is not set"));
  Env bad_local = ompi_process();
  bad_local["OMPI_COMM_WORLD_LOCAL_RANK"] = "4";
  EXPECT_THAT(
      error_of(bad_local),
      HasSubstr("OMPI_COMM_WORLD_LOCAL_RANK='4' is not valid: it must be in [0, OMPI_COMM_WORLD_LOCAL_SIZE=4)"));
  Env no_local = ompi_process();
  no_local.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_THAT(error_of(no_local), HasSubstr("OMPI_COMM_WORLD_LOCAL_SIZE is not set"));
}

TEST(ClusterEnv, Precedence) {
  // plrun's variables win over SLURM's and Open MPI's (plrun started inside an allocation).
  Env all = slurm_task();
  for (const auto& kv : plrun_worker()) all.insert(kv);
  for (const auto& kv : ompi_process()) all.insert(kv);
  EXPECT_EQ(ClusterEnv::detect(all).source, "plrun");
  Env slurm_and_mpi = slurm_task();
  for (const auto& kv : ompi_process()) slurm_and_mpi.insert(kv);
  // mpirun inside an sbatch allocation: mpirun's daemons export OMPI_COMM_WORLD_* (srun never does),
  // so mpirun started this process; SLURM's variables are the daemon's task's.
  EXPECT_EQ(ClusterEnv::detect(slurm_and_mpi).source, "openmpi");
  EXPECT_EQ(ClusterEnv::detect(slurm_and_mpi).world_size, 8);
  // An empty variable counts as unset.
  Env empty = {{"RANK", ""}, {"WORLD_SIZE", ""}};
  EXPECT_EQ(ClusterEnv::detect(empty).source, "none");
}

TEST(ClusterEnv, ReadsTheProcessEnvironment) {
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_PORT", "3456", 1);
  ::setenv("PL_USE_AGENT_STORE", "1", 1);
  auto c = ClusterEnv::detect();
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("MASTER_PORT");
  ::unsetenv("PL_USE_AGENT_STORE");
  EXPECT_EQ(c.source, "plrun");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.master_port, 3456);
}
