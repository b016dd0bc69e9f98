// The dp strategy plugin (Lightning's DataParallelStrategy, PyTorch's DataParallel): one process
// drives all its devices, one replica of the module per device; each step copies the root's
// values into the replicas (when they changed), runs every replica's forward and backward at once
// on its own thread, and sums the replicas' gradients into the root's.  plrt_dp_core has it all.
#include "dp_api.hpp"

PLRT_DEFINE_STRATEGY_PLUGIN(plrt::dp::Family, plrt::dp::kOneProcess, "dp",
                            "DataParallel: one process drives all its devices, a replica per device run concurrently, "
                            "gradients summed into the root replica (Lightning's DataParallelStrategy)")
