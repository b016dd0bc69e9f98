// From a run-time dtype to a compile-time type: each kernel family lists the dtypes it implements
// and the type its loop (cpu) or launcher (cuda) is instantiated with for each, e.g.
//
//   dispatch<Case<PL_F32, F32>, Case<PL_F64, F64>>(dtype, "dispatch_f32_f64", [&](auto tr) { ... });
//
// Host code with no CUDA in it, so the .cu files' launchers use it too (their device traits stay
// in cuda/device_common.cuh).  The argument checks (kernel_args.hpp) have refused every other dtype
// before a dispatch, so a miss is an internal error.
#pragma once

#include <plrt/pl_tensor.h>

#include <cstdint>
#include <string>

#include "plugin_support.hpp"

namespace plrt::kernel_args {

template <PL_DType D, class T>
struct Case {
  static constexpr PL_DType dtype = D;
  using type = T;
};

// Calls f(T{}) for the Case whose dtype is `dtype`; `who` names the dispatch in the internal error.
template <class... Cases, class F>
void dispatch(PL_DType dtype, const char* who, F&& f) {
  const bool found = ((dtype == Cases::dtype ? (f(typename Cases::type{}), true) : false) || ...);
  if (!found) plrt::plugin::fail(PL_ERR_INTERNAL, std::string(who) + ": " + pl_dtype_name(dtype));
}

// The integer dtypes as both plugins compute with them: the storage type, and the unsigned type
// the arithmetic runs in (it wraps modulo 2^bits, as PyTorch's integer tensors do, with no UB).
template <class T, class U>
struct IntTag {
  using Storage = T;
  using Unsigned = U;
};
using I32 = IntTag<int32_t, uint32_t>;
using I64 = IntTag<int64_t, uint64_t>;
using U8 = IntTag<uint8_t, uint32_t>;  // products wrap mod 2^32, then truncate mod 2^8

// Calls f(Tag{}) for an integer dtype; the caller has checked that `dtype` is one.
template <class F>
void dispatch_int(PL_DType dtype, const char* who, F&& f) {
  dispatch<Case<PL_I32, I32>, Case<PL_I64, I64>, Case<PL_U8, U8>>(dtype, who, f);
}

}  // namespace plrt::kernel_args
