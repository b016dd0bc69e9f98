// The ddp_spawn strategy plugin (Lightning's DDPStrategy with start_method "spawn"): the trainer
// itself starts one worker process per device; each worker then creates this strategy, which
// behaves exactly as ddp does (plrt_ddp_core).
#include "ddp_api.hpp"

namespace {

PL_Error* ddp_spawn_launch_info(const PL_OptionList* options, PL_LaunchInfo* out) {
  return plrt::ddp::launch_info(PL_LAUNCH_SPAWN, options, out);
}

PL_Error* ddp_spawn_create(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
  return plrt::ddp::create("ddp_spawn", host, config, out);
}

const PL_StrategyApi kApi = plrt::ddp::make_api(ddp_spawn_launch_info, ddp_spawn_create);

const PL_Plugin kPlugin = {
    sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_STRATEGY, "ddp_spawn", "0.1.0",
    "DistributedDataParallel whose worker processes the trainer spawns itself, one per device; each "
    "worker runs ddp (Lightning's ddp_spawn)",
    nullptr, 0, &kApi};

}  // namespace

PL_DEFINE_PLUGIN(kPlugin)
