// The environments pl::ClusterEnv's unit tests start from (a plrun worker, an srun task, an
// mpirun process, a horovodrun worker) and their checks: the error a bad one gives, a variable
// changed, where a process stands.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/error.hpp>
#include <string>

#include "unit_support.hpp"

namespace cluster_env_test {

using pl::ClusterEnv;
using Env = std::map<std::string, std::string>;

inline std::string error_of(const Env& env) {
  return plrt_test::invalid_message([&] { ClusterEnv::detect(env); });
}

// `e` with `name` set to `value` ("" removes it).
inline Env changed(Env e, const std::string& name, const std::string& value) {
  if (value.empty())
    e.erase(name);
  else
    e[name] = value;
  return e;
}

// c's source and where it stands: rank of world, local rank of local world, node of nodes.
inline void expect_layout(const ClusterEnv& c, const std::string& source, std::array<int, 6> layout) {
  EXPECT_EQ(c.source, source);
  std::array<int, 6> got = {c.rank, c.world_size, c.local_rank, c.local_world_size, c.node_rank, c.num_nodes};
  EXPECT_EQ(got, layout) << "rank, world_size, local_rank, local_world_size, node_rank, num_nodes";
}

inline Env plrun_worker() {
  return {{"RANK", "3"},         {"WORLD_SIZE", "4"},        {"LOCAL_RANK", "1"},      {"LOCAL_WORLD_SIZE", "2"},
          {"NODE_RANK", "1"},    {"GROUP_RANK", "1"},        {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
          {"PL_JOB_TOKEN", "t"}, {"PL_USE_AGENT_STORE", "1"}};
}

inline Env slurm_task() {
  return {{"SLURM_PROCID", "5"},
          {"SLURM_NTASKS", "7"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "2"},
          {"SLURM_NNODES", "4"},
          {"SLURM_TASKS_PER_NODE", "2(x3),1"},
          {"SLURM_NODELIST", "gpu[007-010]"},
          {"SLURM_JOB_ID", "1234567"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_NAME", "train"}};
}

// What horovodrun (gloo mode) gives rank 5 of 8 on the second of two nodes.
inline Env horovod_process() {
  return {{"HOROVOD_RANK", "5"},       {"HOROVOD_SIZE", "8"},       {"HOROVOD_LOCAL_RANK", "1"},
          {"HOROVOD_LOCAL_SIZE", "4"}, {"HOROVOD_CROSS_RANK", "1"}, {"HOROVOD_CROSS_SIZE", "2"},
          {"MASTER_ADDR", "head"},     {"MASTER_PORT", "29600"},    {"HOROVOD_CONTROLLER", "gloo"}};
}

inline Env ompi_process() {
  return {{"OMPI_COMM_WORLD_RANK", "5"},       {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"MASTER_ADDR", "head"},       {"OMPI_MCA_ess_base_jobid", "4242"}};
}

}  // namespace cluster_env_test
