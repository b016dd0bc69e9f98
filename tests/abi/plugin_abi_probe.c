/*
 * The plugin ABI as a shared library, for abidw: the headers under plugin_api/plrt/ declare types
 * only, so this exports one function per public struct, function table, scalar typedef and
 * function-pointer typedef; abidw then records each type's full layout (built with -g).  Its
 * baseline is abi/plugin_abi.xml (scripts/abi-check, scripts/abi-bless).  scripts/abi-check fails
 * when a header declares a type that is not probed here.
 */
#include <plrt/pl_plugin.h>

#define PROBE(T)                               \
  PL_EXPORT void plrt_abi_probe_##T(T* value); \
  PL_EXPORT void plrt_abi_probe_##T(T* value) { (void)value; }

/* pl_abi.h */
PROBE(PL_ErrorCode)
PROBE(PL_Option)
PROBE(PL_OptionList)
PROBE(PL_PluginKind)
PROBE(PL_LogLevel)
/* pl_tensor.h */
PROBE(PL_DType)
PROBE(PL_DeviceType)
PROBE(PL_Device)
PROBE(PL_Tensor)
/* pl_store.h */
PROBE(PL_Bytes)
PROBE(PL_StoreApi)
/* pl_host.h */
PROBE(PL_ResolvedPlugin)
PROBE(PL_Host)
/* pl_accelerator.h */
PROBE(PL_AcceleratorFlags)
PROBE(PL_DeviceAvailability)
PROBE(PL_DeviceInfo)
PROBE(PL_DeviceStatus)
PROBE(PL_SgdParams)
PROBE(PL_AdamParams)
PROBE(PL_AcceleratorApi)
/* pl_process_group.h */
PROBE(PL_ReduceOp)
PROBE(PL_ProcessGroupConfig)
PROBE(PL_ProcessGroupApi)
/* pl_strategy.h */
PROBE(PL_LaunchMode)
PROBE(PL_ParamKind)
PROBE(PL_LaunchInfo)
PROBE(PL_Parameter)
PROBE(PL_StrategyConfig)
PROBE(PL_ReplicaStepFn)
PROBE(PL_ParamRange)
PROBE(PL_OptimizerFn)
PROBE(PL_StrategyStateInfo)
PROBE(PL_OptimizerInfo)
PROBE(PL_StrategyApi)
/* pl_plugin.h */
PROBE(PL_Alias)
PROBE(PL_Plugin)
PROBE(PL_PluginEntryFn)
PROBE(PL_PluginAbiVersionFn)
