// Two steps of JobSession's set-up (job_session.hpp): the cpu
// accelerator's thread count (the host's cores shared by the processes, or threads, that use them)
// and the connection to the job's rendezvous store (an error that says where the address came from).
#pragma once

#include <memory>
#include <plrt/sdk/cluster_env.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <utility>
#include <vector>

namespace plrt::sdk {

// `options` with num_threads = cores / sharers added for the cpu accelerator, unless given.
std::vector<std::pair<std::string, std::string>> with_cpu_threads(
    std::vector<std::pair<std::string, std::string>> options, const std::string& accelerator, int sharers);

// The store for `so`; a failure names where the launcher's address came from (env.rendezvous_from)
// when `annotate`.
std::unique_ptr<pl::Store> open_job_store(const pl::Runtime& rt, const pl::ClusterEnv& env, const pl::StoreOptions& so,
                                          bool annotate);

}  // namespace plrt::sdk
