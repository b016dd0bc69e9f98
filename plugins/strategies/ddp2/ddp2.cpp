// The ddp2 strategy plugin (Lightning's DDP2, before its removal): dp within each node (one process
// per node drives all the node's devices as replicas), then the root's gradients averaged across
// the nodes' processes as ddp does.  plrt_dp_core (../dp) holds the strategy.
#include "dp_api.hpp"

PLRT_DEFINE_STRATEGY_PLUGIN(plrt::dp::Family, plrt::dp::kAcrossProcesses, "ddp2",
                            "DDP2: one process per node drives the node's devices as dp replicas; the summed gradients "
                            "are then averaged across nodes (Lightning's DDP2Strategy)")
