/* Compiled by the tests with -std=c99 -Wall -Wextra -pedantic -Werror: every public header is C99. */
#include <plrt/pl_abi.h>
#include <plrt/pl_accelerator.h>
#include <plrt/pl_host.h>
#include <plrt/pl_plugin.h>
#include <plrt/pl_process_group.h>
#include <plrt/pl_store.h>
#include <plrt/pl_strategy.h>
#include <plrt/pl_tensor.h>
#include <plrt/runtime.h>
#include <plrt/version.h>

/* Use a few things so that the macros and inline functions are compiled, not just declared. */
static const PL_Plugin kDescriptor = {
    sizeof(PL_Plugin), PL_ABI_MAJOR, PL_ABI_MINOR, PL_PLUGIN_STRATEGY, "c99_check", "0", "header check", NULL, 0, NULL};
PL_DEFINE_PLUGIN(kDescriptor)

size_t c99_check_sizes(void);
size_t c99_check_sizes(void) {
  PL_Tensor t;
  PL_Parameter p;
  float data[6];
  const int64_t shape[2] = {2, 3};
  PL_Device cpu;
  cpu.type = PL_DEVICE_CPU;
  cpu.index = 0;
  if (pl_tensor_init(&t, data, PL_F32, cpu, 2, shape) != PL_ERR_OK || t.numel != 6) return 0;
  t.struct_size = sizeof t;
  p.struct_size = PL_STRUCT_SIZE(PL_Parameter, requires_grad); /* a 1.3 host's entry: no kind */
  p.requires_grad = 0;
  return pl_dtype_size(PL_BF16) + PL_STRUCT_SIZE(PL_AcceleratorApi, dequantize_u8) +
         (size_t)PL_HAS_FIELD(PL_Tensor, &t, shape) + PL_ACCELERATOR_API_MIN_SIZE + PL_STRATEGY_API_MIN_SIZE +
         PL_PROCESS_GROUP_API_MIN_SIZE + (pl_dtype_name(PL_F16)[0] == 'f') +
         (size_t)(pl_parameter_kind(&p) == PL_PARAM_BUFFER) + PL_STRUCT_SIZE(PL_StrategyApi, load_state) +
         PL_STRUCT_SIZE(PL_ProcessGroupApi, all_to_all) + sizeof(PL_DeviceStatus) + sizeof(PLRT_VERSION) +
         (size_t)PLRT_VERSION_NUMBER;
}
