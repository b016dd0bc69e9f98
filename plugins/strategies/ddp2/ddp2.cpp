// The ddp2 strategy plugin (Lightning's DDP2, before its removal): dp within each node (one process
// per node drives all the node's devices as replicas), then the root's gradients averaged across
// the nodes' processes as ddp does.  plrt_dp_core (../dp) holds the strategy.
#include "dp_api.hpp"

namespace {

constexpr char kName[] = "ddp2";

const PL_StrategyApi kApi = plrt::dp::make_api<true, kName>();

const PL_Plugin kPlugin = plrt::dp::make_plugin(
    kName,
    "DDP2: one process per node drives the node's devices as dp replicas; the summed gradients are then "
    "averaged across nodes (Lightning's DDP2Strategy)",
    &kApi);

}  // namespace

PL_DEFINE_PLUGIN(kPlugin)
