// The horovod strategy plugin (Lightning's HorovodStrategy; docs/horovod.md): one process per
// device, started by plrun, mpirun, horovodrun, srun or torchrun; gradients averaged by Horovod's
// tensor fusion; the learning rate scaled by the world size (option scale_lr).  plrt_horovod_core
// has it all.
#include "horovod_api.hpp"

PLRT_DEFINE_STRATEGY_PLUGIN(plrt::horovod::Family, PL_LAUNCH_PROCESS_PER_DEVICE, "horovod",
                            "Horovod: gradients averaged by tensor fusion (a fusion buffer allreduced every "
                            "cycle_time_ms or at fusion_threshold_mb), rank 0's state broadcast at start, the "
                            "learning rate scaled by the world size (scale_lr)")
