// The ddp strategy plugin (Lightning's DDPStrategy, PyTorch's DistributedDataParallel): a launcher
// (plrun, torchrun, SLURM) starts one process per device; each keeps a full replica, and gradients
// are averaged across processes in buckets that overlap with backward.  plrt_ddp_core has it all.
#include "ddp_api.hpp"

PLRT_DEFINE_STRATEGY_PLUGIN(plrt::ddp::Family, PL_LAUNCH_PROCESS_PER_DEVICE, "ddp",
                            "DistributedDataParallel: one process per device (started by the launcher), gradients "
                            "averaged in buckets overlapped with backward (Lightning's DDPStrategy)")
