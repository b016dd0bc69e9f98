// Host reductions for the process groups: element-wise kernels with gloo's reduce-function
// signature, and the finishing step of AVG.  Simple loops over __restrict pointers, compiled -O3,
// so the compiler vectorises them (every dtype but float16, whose exact rounding of subnormals
// stays a scalar loop; bfloat16 is rounded with selects, bit for bit as half.hpp does).
//
// Semantics (every dtype: float32, float64, float16, bfloat16, int32, int64, uint8):
//  - SUM, PRODUCT: floats in IEEE arithmetic; integers wrap modulo 2^bits (never undefined).
//  - MIN, MAX: floats propagate NaN (as PyTorch does); integers as expected.
//  - float16 / bfloat16: each element is widened to float32, combined, and rounded back to nearest
//    even, so a reduction of N ranks rounds N-1 times, like PyTorch on the CPU.
//  - AVG: floats: SUM, then each element divided by the world size, rounded once (float16/bfloat16
//    through float64).  uint8 and int32: the exact sum is formed in an int64 temporary (no
//    overflow for any world size below 2^32), divided rounding toward zero, then narrowed (the
//    mean of values of a type fits that type).  int64: the sum wraps like SUM, then is divided
//    toward zero.
#pragma once

#include <plrt/pl_process_group.h>

#include <cstddef>
#include <cstdint>

namespace plrt::pg {

// out[i] = a[i] op b[i] for i < n.  `out` may be `a` or `b` itself; no other overlap.  n counts
// elements.  This is gloo's AllreduceOptions reduce function and the ring reduce-scatter's.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// The kernel for `op` on `dtype` (AVG gives the SUM kernel); nullptr for an unknown op or dtype.
ReduceFn reduce_fn(PL_ReduceOp op, PL_DType dtype);

// AVG on uint8 and int32 reduces in an int64 temporary.
inline bool avg_widens(PL_DType dtype) { return dtype == PL_U8 || dtype == PL_I32; }
// dst[i] = src[i] as int64 (src: uint8 or int32).
void widen_to_i64(const void* src, PL_DType dtype, int64_t* dst, size_t n);
// dst[i] = src[i] / divisor rounded toward zero, narrowed to `dtype` (uint8 or int32).
void narrow_avg_from_i64(const int64_t* src, int64_t divisor, PL_DType dtype, void* dst, size_t n);
// data[i] = data[i] / divisor in place: floats rounded once; int64 toward zero.  (uint8 and int32
// are also accepted, toward zero, for a caller that reduced them without widening.)
void divide_inplace(void* data, PL_DType dtype, size_t n, int64_t divisor);

}  // namespace plrt::pg
