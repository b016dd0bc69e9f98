#include "reduce.hpp"

#include <type_traits>

#include "half.hpp"  // plugins/common: bit-exact f16/bf16 <-> f32/f64, round to nearest even

namespace plrt::pg {
namespace {

// ---- element types: storage type S, computed in C ---------------------------------------------

template <class T>
struct Plain {  // float, double, and the integers
  using S = T;
  using C = T;
  static C load(S v) { return v; }
  static S store(C v) { return v; }
};
struct F16 {
  using S = uint16_t;
  using C = float;
  static C load(S v) { return cpu::f16_to_f32(v); }
  static S store(C v) { return cpu::f32_to_f16(v); }
};
struct BF16 {  // half.hpp's conversions, written as selects so that the loops vectorise
  using S = uint16_t;
  using C = float;
  static C load(S v) { return cpu::f32_from_bits(static_cast<uint32_t>(v) << 16); }
  static S store(C v) {
    const uint32_t u = cpu::f32_to_bits(v);
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // to nearest even
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;                   // NaN stays NaN
    return static_cast<S>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
  }
};

// ---- operations on the computed type ----------------------------------------------------------

template <class C>
using Wide = std::make_unsigned_t<C>;  // integers wrap: compute in the unsigned type

struct Sum {
  template <class C>
  static C f(C a, C b) {
    if constexpr (std::is_integral_v<C>)
      return static_cast<C>(static_cast<Wide<C>>(a) + static_cast<Wide<C>>(b));
    else
      return a + b;
  }
};
struct Prod {
  template <class C>
  static C f(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      // uint8 promotes to int (255 * 255 fits); 32/64-bit unsigned products wrap.
      using W = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, Wide<C>>;
      return static_cast<C>(static_cast<W>(static_cast<Wide<C>>(a)) * static_cast<W>(static_cast<Wide<C>>(b)));
    } else {
      return a * b;
    }
  }
};
struct Min {
  template <class C>
  static C f(C a, C b) {
    if constexpr (std::is_integral_v<C>)
      return b < a ? b : a;
    else
      return (a <= b || a != a) ? a : b;  // NaN in either operand gives NaN
  }
};
struct Max {
  template <class C>
  static C f(C a, C b) {
    if constexpr (std::is_integral_v<C>)
      return b > a ? b : a;
    else
      return (a >= b || a != a) ? a : b;
  }
};

// ---- kernels ------------------------------------------------------------------------------------

template <class E, class Op>
void binary(typename E::S* __restrict out, const typename E::S* __restrict a, const typename E::S* __restrict b,
            size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = E::store(Op::f(E::load(a[i]), E::load(b[i])));
}
template <class E, class Op>
void into_left(typename E::S* __restrict io, const typename E::S* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) io[i] = E::store(Op::f(E::load(io[i]), E::load(b[i])));
}
template <class E, class Op>
void into_right(typename E::S* __restrict io, const typename E::S* __restrict a, size_t n) {
  for (size_t i = 0; i < n; ++i) io[i] = E::store(Op::f(E::load(a[i]), E::load(io[i])));
}

template <class E, class Op>
void entry(void* out, const void* a, const void* b, size_t n) {
  using S = typename E::S;
  auto* o = static_cast<S*>(out);
  if (out == a)
    into_left<E, Op>(o, static_cast<const S*>(b), n);
  else if (out == b)
    into_right<E, Op>(o, static_cast<const S*>(a), n);
  else
    binary<E, Op>(o, static_cast<const S*>(a), static_cast<const S*>(b), n);
}

template <class E>
ReduceFn for_op(PL_ReduceOp op) {
  switch (op) {
    case PL_REDUCE_SUM:
    case PL_REDUCE_AVG:
      return &entry<E, Sum>;
    case PL_REDUCE_PRODUCT:
      return &entry<E, Prod>;
    case PL_REDUCE_MIN:
      return &entry<E, Min>;
    case PL_REDUCE_MAX:
      return &entry<E, Max>;
    default:
      return nullptr;
  }
}

template <class T>
void widen(const T* __restrict src, int64_t* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<int64_t>(src[i]);
}
template <class T>
void narrow_div(const int64_t* __restrict src, int64_t d, T* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i] / d);
}
template <class T>
void div_plain(T* __restrict x, T d, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] / d);
}

}  // namespace

ReduceFn reduce_fn(PL_ReduceOp op, PL_DType dtype) {
  switch (dtype) {
    case PL_F32:
      return for_op<Plain<float>>(op);
    case PL_F64:
      return for_op<Plain<double>>(op);
    case PL_F16:
      return for_op<F16>(op);
    case PL_BF16:
      return for_op<BF16>(op);
    case PL_I32:
      return for_op<Plain<int32_t>>(op);
    case PL_I64:
      return for_op<Plain<int64_t>>(op);
    case PL_U8:
      return for_op<Plain<uint8_t>>(op);
    default:
      return nullptr;
  }
}

void widen_to_i64(const void* src, PL_DType dtype, int64_t* dst, size_t n) {
  if (dtype == PL_U8)
    widen(static_cast<const uint8_t*>(src), dst, n);
  else if (dtype == PL_I32)
    widen(static_cast<const int32_t*>(src), dst, n);
}

void narrow_avg_from_i64(const int64_t* src, int64_t divisor, PL_DType dtype, void* dst, size_t n) {
  if (dtype == PL_U8)
    narrow_div(src, divisor, static_cast<uint8_t*>(dst), n);
  else if (dtype == PL_I32)
    narrow_div(src, divisor, static_cast<int32_t*>(dst), n);
}

void divide_inplace(void* data, PL_DType dtype, size_t n, int64_t divisor) {
  switch (dtype) {
    case PL_F32:
      div_plain(static_cast<float*>(data), static_cast<float>(divisor), n);
      break;
    case PL_F64:
      div_plain(static_cast<double*>(data), static_cast<double>(divisor), n);
      break;
    case PL_I64:
      div_plain(static_cast<int64_t*>(data), divisor, n);
      break;
    case PL_I32:
      div_plain(static_cast<int32_t*>(data), static_cast<int32_t>(divisor), n);
      break;
    case PL_U8: {
      auto* x = static_cast<uint8_t*>(data);
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<uint8_t>(x[i] / divisor);
      break;
    }
    case PL_F16: {
      auto* x = static_cast<uint16_t*>(data);
      const double d = static_cast<double>(divisor);
      for (size_t i = 0; i < n; ++i) x[i] = cpu::f64_to_f16(cpu::f16_to_f64(x[i]) / d);
      break;
    }
    case PL_BF16: {
      auto* x = static_cast<uint16_t*>(data);
      const double d = static_cast<double>(divisor);
      for (size_t i = 0; i < n; ++i) x[i] = cpu::f64_to_bf16(cpu::bf16_to_f64(x[i]) / d);
      break;
    }
    default:
      break;
  }
}

}  // namespace plrt::pg
