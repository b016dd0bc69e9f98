// ABI 1.3 on the cpu kernels: f16/bf16 layer math (f32 accumulation, rounded once) and
// unscale_check, against reference loops.
#include "kernels.hpp"
