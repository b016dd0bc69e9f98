// The ddp strategy plugin (Lightning's DDPStrategy, PyTorch's DistributedDataParallel): a launcher
// (plrun, torchrun, SLURM) starts one process per device; each keeps a full replica, and gradients
// are averaged across processes in buckets that overlap with backward.  plrt_ddp_core has it all.
#include "ddp_api.hpp"

namespace {

PL_Error* ddp_launch_info(const PL_OptionList* options, PL_LaunchInfo* out) {
  return plrt::ddp::launch_info(PL_LAUNCH_PROCESS_PER_DEVICE, options, out);
}

PL_Error* ddp_create(const PL_Host* host, const PL_StrategyConfig* config, PL_Strategy** out) {
  return plrt::ddp::create("ddp", host, config, out);
}

const PL_StrategyApi kApi = plrt::ddp::make_api(ddp_launch_info, ddp_create);

const PL_Plugin kPlugin = {
    sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_STRATEGY, "ddp", "0.1.0",
    "DistributedDataParallel: one process per device (started by the launcher), gradients averaged in "
    "buckets overlapped with backward (Lightning's DDPStrategy)",
    nullptr, 0, &kApi};

}  // namespace

PL_DEFINE_PLUGIN(kPlugin)
