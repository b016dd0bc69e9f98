// The ddp_sharded_spawn strategy plugin: ddp_sharded whose worker processes the trainer spawns
// itself (Lightning's ddp_sharded_spawn); each worker runs ddp_sharded.
#include "sharded_api.hpp"

PLRT_DEFINE_STRATEGY_PLUGIN(plrt::ddp_sharded::Family, PL_LAUNCH_SPAWN, "ddp_sharded_spawn",
                            "ddp_sharded whose worker processes the trainer spawns itself, one per device "
                            "(Lightning's ddp_sharded_spawn)")
