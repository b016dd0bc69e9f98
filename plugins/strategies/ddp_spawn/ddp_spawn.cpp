// The ddp_spawn strategy plugin (Lightning's DDPStrategy with start_method "spawn"): the trainer
// itself starts one worker process per device; each worker then creates this strategy, which
// behaves exactly as ddp does (plrt_ddp_core).
#include "ddp_api.hpp"

PLRT_DEFINE_STRATEGY_PLUGIN(plrt::ddp::Family, PL_LAUNCH_SPAWN, "ddp_spawn",
                            "DistributedDataParallel whose worker processes the trainer spawns itself, one per device; "
                            "each worker runs ddp (Lightning's ddp_spawn)")
