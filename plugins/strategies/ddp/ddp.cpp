// The ddp strategy plugin (Lightning's DDPStrategy, PyTorch's DistributedDataParallel): a launcher
// (plrun, torchrun, SLURM) starts one process per device; each keeps a full replica, and gradients
// are averaged across processes in buckets that overlap with backward.  plrt_ddp_core has it all.
#include "ddp_api.hpp"

namespace {

constexpr char kName[] = "ddp";

const PL_StrategyApi kApi = plrt::ddp::make_api<PL_LAUNCH_PROCESS_PER_DEVICE, kName>();

const PL_Plugin kPlugin = plrt::ddp::make_plugin(
    kName,
    "DistributedDataParallel: one process per device (started by the launcher), gradients averaged in "
    "buckets overlapped with backward (Lightning's DDPStrategy)",
    &kApi);

}  // namespace

PL_DEFINE_PLUGIN(kPlugin)
