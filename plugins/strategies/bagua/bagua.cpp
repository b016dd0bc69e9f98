// The bagua strategy plugin (Lightning's BaguaStrategy; docs/bagua.md): one process per device,
// started by the launcher, with Bagua's communication algorithms chosen by the option `algorithm`.
// Its aliases are presets of that option, as Lightning's registry names strategies with presets.
// plrt_bagua_core has it all.
#include "bagua_api.hpp"

namespace {

const PL_Option kGradientAllreduce[] = {{sizeof(PL_Option), "algorithm", "gradient_allreduce"}};
const PL_Option kByteGrad[] = {{sizeof(PL_Option), "algorithm", "bytegrad"}};
const PL_Option kQAdam[] = {{sizeof(PL_Option), "algorithm", "qadam"}};
const PL_Option kDecentralized[] = {{sizeof(PL_Option), "algorithm", "decentralized"}};
const PL_Option kLowPrecisionDecentralized[] = {{sizeof(PL_Option), "algorithm", "low_precision_decentralized"}};
const PL_Option kAsync[] = {{sizeof(PL_Option), "algorithm", "async"}};
const PL_Alias kAliases[] = {
    {sizeof(PL_Alias),
     "bagua_gradient_allreduce",
     "bagua with algorithm=gradient_allreduce",
     {sizeof(PL_OptionList), kGradientAllreduce, 1}},
    {sizeof(PL_Alias),
     "bagua_bytegrad",
     "bagua with algorithm=bytegrad (gradients averaged in uint8: a compressed reduce-scatter and allgather)",
     {sizeof(PL_OptionList), kByteGrad, 1}},
    {sizeof(PL_Alias),
     "bagua_qadam",
     "bagua with algorithm=qadam (QAdam's first moment averaged in uint8 after its warmup; needs pl::QAdam)",
     {sizeof(PL_OptionList), kQAdam, 1}},
    {sizeof(PL_Alias),
     "bagua_decentralized",
     "bagua with algorithm=decentralized (weights averaged with every rank or one peer; gradients stay local)",
     {sizeof(PL_OptionList), kDecentralized, 1}},
    {sizeof(PL_Alias),
     "bagua_low_precision_decentralized",
     "bagua with algorithm=low_precision_decentralized (a ring exchanging uint8-compressed weight differences)",
     {sizeof(PL_OptionList), kLowPrecisionDecentralized, 1}},
    {sizeof(PL_Alias),
     "bagua_async",
     "bagua with algorithm=async (weights averaged by a background thread every sync_interval_ms)",
     {sizeof(PL_OptionList), kAsync, 1}},
};

}  // namespace

PLRT_DEFINE_STRATEGY_PLUGIN_WITH_ALIASES(
    plrt::bagua::Family, PL_LAUNCH_PROCESS_PER_DEVICE, "bagua",
    "Bagua's communication algorithms as one strategy (option algorithm; default gradient_allreduce: gradients "
    "averaged in buckets overlapped with backward)",
    kAliases, sizeof kAliases / sizeof kAliases[0])
