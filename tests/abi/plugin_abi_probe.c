/*
 * The plugin ABI as a shared library, for abidw: the headers under plugin_api/plrt/ declare types
 * only, so this exports one function per public struct, function table, scalar typedef and
 * function-pointer typedef, and each constant's value; abidw then records each type's full layout
 * (built with -g).  Its
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

/* Constants: the values of the enumerators and of the fixed macros, each as the length of an array
 * type (a pointer to it, so that nothing is stored), which abidw records: a changed value is a
 * changed type.  PL_ABI_MINOR and PL_DTYPE_COUNT grow by design and are left out. */
#define PROBE_CONST(c) PL_EXPORT char(*const plrt_abi_const_##c)[(c) + 1] = 0;

PROBE_CONST(PL_ABI_MAJOR)
PROBE_CONST(PL_MAX_DIMS)
PROBE_CONST(PL_DEFAULT_TIMEOUT_MS)
PROBE_CONST(PL_ERR_OK)
PROBE_CONST(PL_ERR_INVALID_ARGUMENT)
PROBE_CONST(PL_ERR_NOT_FOUND)
PROBE_CONST(PL_ERR_UNSUPPORTED)
PROBE_CONST(PL_ERR_VERSION)
PROBE_CONST(PL_ERR_TIMEOUT)
PROBE_CONST(PL_ERR_RUNTIME)
PROBE_CONST(PL_ERR_RESOURCE)
PROBE_CONST(PL_ERR_INTERNAL)
PROBE_CONST(PL_PLUGIN_ACCELERATOR)
PROBE_CONST(PL_PLUGIN_PROCESS_GROUP)
PROBE_CONST(PL_PLUGIN_STRATEGY)
PROBE_CONST(PL_LOG_TRACE)
PROBE_CONST(PL_LOG_DEBUG)
PROBE_CONST(PL_LOG_INFO)
PROBE_CONST(PL_LOG_WARN)
PROBE_CONST(PL_LOG_ERROR)
PROBE_CONST(PL_LOG_CRITICAL)
PROBE_CONST(PL_LOG_OFF)
PROBE_CONST(PL_ACCEL_DEVICES_ARE_PROCESSES)
PROBE_CONST(PL_ACCEL_SYNCHRONOUS)
PROBE_CONST(PL_REDUCE_SUM)
PROBE_CONST(PL_REDUCE_AVG)
PROBE_CONST(PL_REDUCE_MIN)
PROBE_CONST(PL_REDUCE_MAX)
PROBE_CONST(PL_REDUCE_PRODUCT)
PROBE_CONST(PL_LAUNCH_PROCESS_PER_DEVICE)
PROBE_CONST(PL_LAUNCH_SPAWN)
PROBE_CONST(PL_LAUNCH_SINGLE_PROCESS)
PROBE_CONST(PL_PARAM_TRAINABLE)
PROBE_CONST(PL_PARAM_FROZEN)
PROBE_CONST(PL_PARAM_BUFFER)
PROBE_CONST(PL_DTYPE_INVALID)
PROBE_CONST(PL_F32)
PROBE_CONST(PL_F64)
PROBE_CONST(PL_F16)
PROBE_CONST(PL_BF16)
PROBE_CONST(PL_I32)
PROBE_CONST(PL_I64)
PROBE_CONST(PL_U8)
PROBE_CONST(PL_DEVICE_CPU)
PROBE_CONST(PL_DEVICE_CUDA)
