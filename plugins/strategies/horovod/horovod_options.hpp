// The options of the horovod strategy (PL_StrategyConfig.options: the alias presets, then the
// user's; a later entry overrides an earlier one), with Horovod's names and defaults:
//   fusion_threshold_mb        the fusion buffer in MiB, default 128 (HOROVOD_FUSION_THRESHOLD, in
//                              bytes, when the option is not given); 0 turns fusion off (every
//                              gradient is allreduced alone, as HOROVOD_FUSION_THRESHOLD=0 does)
//   cycle_time_ms              how long a fusion buffer waits for more gradients after its first,
//                              default 1 (HOROVOD_CYCLE_TIME, in ms, when the option is not given)
//   op                         average (default) or sum: what the gradients become
//   gradient_predivide_factor  f > 0, default 1: with op=average, divide by f before the sum and
//                              multiply by f/n after (Horovod's pre/post-scaling, for fp16 range)
//   scale_lr                   true (default) | false: multiply the optimizer's learning rate by the
//                              world size, as Lightning's HorovodStrategy did (said in one log line)
//   broadcast_buffers          true (default) | false: buffers from rank 0 before every step (ddp's)
//   pg.<name>                  passed to the process group as <name>
// A bad value throws plugin::Failure naming the option (or the environment variable), the value
// and what is valid.
#pragma once

#include <plrt/pl_abi.h>

#include <cstddef>
#include <string>

#include "ddp_options.hpp"

namespace plrt::horovod {

struct HorovodOptions {
  double fusion_threshold_mb = 128.0;
  double cycle_time_ms = 1.0;
  bool average = true;  // op=average; false: op=sum
  double predivide = 1.0;
  bool scale_lr = true;
  ddp::DdpOptions ddp;  // broadcast_buffers and pg.* (the bucket caps are not used)
  std::string threshold_from = "default", cycle_from = "default";  // "option", "HOROVOD_...", for the log

  // MiB as Horovod counts them (its threshold is bytes: 128 * 1024 * 1024).
  size_t fusion_threshold_bytes() const;
};

// `env` looks a variable up (std::getenv; tests pass their own), NULL or "" meaning unset.
using EnvLookup = const char* (*)(const char*);
HorovodOptions parse_options(const std::string& who, const PL_OptionList& list, EnvLookup env);

}  // namespace plrt::horovod
