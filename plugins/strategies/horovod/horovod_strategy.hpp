// The state of one horovod instance (Lightning's HorovodStrategy; docs/horovod.md): ddp's core for
// what Horovod does as ddp does (rank 0's parameters and buffers broadcast at setup, buffers before
// every step, the metrics group, the optimizer step on whole parameters), and Horovod's own
// gradient path, the fusion engine (fusion.hpp) on the core's group with a control group of its
// own for the negotiation.
//
// Files: horovod_options.* (the options and HOROVOD_* variables), fusion.* (tensor fusion and its
// negotiation), entries.cpp (create and the C table), horovod.cpp (the plugin).
#pragma once

#include <memory>
#include <string>

#include "fusion.hpp"
#include "group.hpp"
#include "horovod_options.hpp"
#include "strategy.hpp"  // ddp's core (../ddp)

namespace plrt::horovod {

struct HorovodStrategy {
  HorovodStrategy() = default;
  ~HorovodStrategy();  // the fusion engine goes first (it borrows the groups and the device)
  HorovodStrategy(const HorovodStrategy&) = delete;
  HorovodStrategy& operator=(const HorovodStrategy&) = delete;

  const PL_Host* host = nullptr;
  std::string who;  // "horovod": begins every message
  HorovodOptions opts;
  std::unique_ptr<ddp::DdpStrategy> core;
  strategy::Group control;  // the negotiation's (gloo, host memory); empty with one rank
  std::unique_ptr<Fusion> fusion;
  std::string lr_reason;  // bind_optimizer's PL_OptimizerInfo.lr_scale_reason (ABI 1.7)
};

}  // namespace plrt::horovod
