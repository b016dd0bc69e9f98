// job_setup.hpp: two steps of JobSession's set-up (job_session.hpp).
#include "job_setup.hpp"

#include <algorithm>
#include <plrt/sdk/error.hpp>
#include <thread>

namespace plrt::sdk {

std::vector<std::pair<std::string, std::string>> with_cpu_threads(
    std::vector<std::pair<std::string, std::string>> options, const std::string& accelerator, int sharers) {
  const bool given =
      std::any_of(options.begin(), options.end(), [](const auto& kv) { return kv.first == "num_threads"; });
  if (accelerator == "cpu" && !given) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    options.emplace_back("num_threads", std::to_string(std::max(1u, hw / static_cast<unsigned>(std::max(1, sharers)))));
  }
  return options;
}

std::unique_ptr<pl::Store> open_job_store(const pl::Runtime& rt, const pl::ClusterEnv& env, const pl::StoreOptions& so,
                                          bool annotate) {
  try {
    return std::make_unique<pl::Store>(rt, so);
  } catch (const pl::Error& e) {  // a rank that cannot reach (or serve) the store says where the address came from
    if (!annotate || env.rendezvous_from.empty()) throw;
    throw pl::Error(e.code(), std::string(e.what()) + " [" + env.rendezvous_from + "]");
  }
}

}  // namespace plrt::sdk
