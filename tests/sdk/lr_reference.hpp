// PyTorch's scheduler values for the lr-schedule tests: tests/sdk/lr_scheduler_reference.py run
// once per test process with Debian's python3 (python3-torch).  reference() holds {"error": ...}
// where it could not run, and the tests skip with that reason.
#pragma once

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "spawn.hpp"

namespace plrt_lr_test {

inline const nlohmann::json& reference() {
  static nlohmann::json ref = [] {
    plrt_test::ProcessSpec spec;
    spec.argv = {PLRT_PYTHON3, LR_REFERENCE_SCRIPT};
    plrt_test::Job job({spec});
    plrt_test::WaitOptions w;
    w.deadline = std::chrono::seconds(60);
    auto r = job.wait(w).processes.at(0);
    if (!r.ok()) return nlohmann::json{{"error", r.status() + ": " + r.output}};
    return nlohmann::json::parse(r.output.substr(r.output.find('{')));
  }();
  return ref;
}

// The value printed with Python's repr, read back exactly.
inline double ref_value(const nlohmann::json& v) { return std::strtod(v.get<std::string>().c_str(), nullptr); }

}  // namespace plrt_lr_test
