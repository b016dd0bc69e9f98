// The ddp_spawn strategy plugin (Lightning's DDPStrategy with start_method "spawn"): the trainer
// itself starts one worker process per device; each worker then creates this strategy, which
// behaves exactly as ddp does (plrt_ddp_core).
#include "ddp_api.hpp"

namespace {

constexpr char kName[] = "ddp_spawn";

const PL_StrategyApi kApi = plrt::ddp::make_api<PL_LAUNCH_SPAWN, kName>();

const PL_Plugin kPlugin = plrt::ddp::make_plugin(
    kName,
    "DistributedDataParallel whose worker processes the trainer spawns itself, one per device; each "
    "worker runs ddp (Lightning's ddp_spawn)",
    &kApi);

}  // namespace

PL_DEFINE_PLUGIN(kPlugin)
