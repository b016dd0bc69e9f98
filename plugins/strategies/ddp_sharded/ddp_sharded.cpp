// The ddp_sharded strategy plugin (Lightning's ddp_sharded: fairscale's ShardedDataParallel + OSS,
// ZeRO stages 1-2): one process per device, started by the launcher; each rank keeps optimizer
// state (and at stage 2 the averaged gradient) for its element shard only.  plrt_ddp_sharded_core
// has it all.
#include "sharded_api.hpp"

PLRT_DEFINE_STRATEGY_PLUGIN(plrt::ddp_sharded::Family, PL_LAUNCH_PROCESS_PER_DEVICE, "ddp_sharded",
                            "ZeRO stage 1-2 data parallel: optimizer state and gradients sharded across ranks by "
                            "element ranges, updated parameters allgathered (Lightning's ddp_sharded; option stage)")
