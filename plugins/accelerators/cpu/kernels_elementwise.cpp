// fill, scale, axpy, cast: the element-wise kernels of the CPU accelerator (see kernels.hpp).
#include "kernels.hpp"
#include "kernels_detail.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

namespace plrt::cpu {
namespace {

using namespace detail;

// ---- integer dtypes: storage type T, unsigned arithmetic type U (wraps, no UB) ----

template <class T, class U>
struct IntTag {
  using Storage = T;
  using Unsigned = U;
};
using I32 = IntTag<int32_t, uint32_t>;
using I64 = IntTag<int64_t, uint64_t>;
using U8 = IntTag<uint8_t, uint32_t>;  // products wrap mod 2^32, then truncate mod 2^8

template <class F>
void dispatch_int(PL_DType dtype, F&& f) {
  switch (dtype) {
    case PL_I32: f(I32{}); return;
    case PL_I64: f(I64{}); return;
    case PL_U8: f(U8{}); return;
    default: fail(PL_ERR_INTERNAL, std::string("dispatch_int: ") + pl_dtype_name(dtype));
  }
}

bool is_int_dtype(PL_DType d) { return d == PL_I32 || d == PL_I64 || d == PL_U8; }

// A scalar for an integer tensor: a whole number, and (for arithmetic) within int64.
int64_t integral_scalar(double v, const char* op, const char* what, PL_DType dtype) {
  const std::string head = std::string(op) + ": " + what + " " + num(v) + " ";
  const std::string tail = std::string("; ") + pl_dtype_name(dtype) +
                           " tensors take integral scalars only (whole numbers in [-2^63, 2^63))";
  if (!std::isfinite(v) || v != std::trunc(v)) fail(PL_ERR_INVALID_ARGUMENT, head + "is not a whole number" + tail);
  if (!(v >= -0x1p63 && v < 0x1p63)) fail(PL_ERR_INVALID_ARGUMENT, head + "is out of range" + tail);
  return static_cast<int64_t>(v);
}

// The value for fill: a whole number representable in `dtype`.
int64_t fill_value(double v, PL_DType dtype) {
  double lo = 0, hi = 0;
  const char* range = "";
  switch (dtype) {
    case PL_I32: lo = -2147483648.0; hi = 2147483647.0; range = "[-2147483648, 2147483647]"; break;
    case PL_I64: lo = -0x1p63; hi = 0x1p63; range = "[-9223372036854775808, 9223372036854775807]"; break;
    default: lo = 0; hi = 255; range = "[0, 255]"; break;
  }
  const std::string valid = std::string("; valid for ") + pl_dtype_name(dtype) + ": whole numbers in " + range;
  if (!std::isfinite(v) || v != std::trunc(v))
    fail(PL_ERR_INVALID_ARGUMENT, "fill: value " + num(v) + " is not a whole number" + valid);
  const bool in_range = dtype == PL_I64 ? (v >= lo && v < hi) : (v >= lo && v <= hi);
  if (!in_range) fail(PL_ERR_INVALID_ARGUMENT, "fill: value " + num(v) + " is out of range" + valid);
  return static_cast<int64_t>(v);
}

// ---- loops ----

template <class Tr>
void fill_float(typename Tr::Storage* x, int64_t n, double value) {
  const typename Tr::Storage v = Tr::from_double(value);
  for (int64_t i = 0; i < n; ++i) x[i] = v;
}

template <class Tr>
void scale_float(typename Tr::Storage* x, int64_t n, double alpha) {
  using C = typename Tr::C;
  const C a = static_cast<C>(alpha);
  for (int64_t i = 0; i < n; ++i) x[i] = Tr::store(Tr::load(x[i]) * a);
}

template <class Tr>
void axpy_float(typename Tr::Storage* y, const typename Tr::Storage* x, int64_t n, double alpha) {
  using C = typename Tr::C;
  const C a = static_cast<C>(alpha);
  for (int64_t i = 0; i < n; ++i) y[i] = Tr::store(Tr::load(y[i]) + a * Tr::load(x[i]));
}

template <class Tag>
void scale_int(typename Tag::Storage* x, int64_t n, int64_t alpha) {
  using T = typename Tag::Storage;
  using U = typename Tag::Unsigned;
  const U a = static_cast<U>(static_cast<uint64_t>(alpha));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<U>(static_cast<U>(x[i]) * a));
}

template <class Tag>
void axpy_int(typename Tag::Storage* y, const typename Tag::Storage* x, int64_t n, int64_t alpha) {
  using T = typename Tag::Storage;
  using U = typename Tag::Unsigned;
  const U a = static_cast<U>(static_cast<uint64_t>(alpha));
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<T>(static_cast<U>(static_cast<U>(y[i]) + static_cast<U>(static_cast<U>(x[i]) * a)));
}

template <class S, class D>
void cast_loop(typename D::Storage* dst, const typename S::Storage* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<S, F64>) {
      dst[i] = D::from_double(src[i]);  // one rounding, straight from the double
    } else {
      // S is f32/f16/bf16: widened to float exactly, then rounded once (f64: exact).
      dst[i] = D::store(static_cast<typename D::C>(S::load(src[i])));
    }
  }
}

}  // namespace

void fill(const PL_Tensor* x, double value) {
  check_cpu_tensor(x, "fill", "x");
  if (is_int_dtype(x->dtype)) {
    const int64_t v = fill_value(value, x->dtype);  // checked even when numel is 0
    dispatch_int(x->dtype, [&](auto tag) {
      using T = typename decltype(tag)::Storage;
      T* p = static_cast<T*>(x->data);
      const T tv = static_cast<T>(v);
      for (int64_t i = 0; i < x->numel; ++i) p[i] = tv;
    });
    return;
  }
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    fill_float<Tr>(data_of<Tr>(x), x->numel, value);
  });
}

void scale(const PL_Tensor* x, double alpha) {
  check_cpu_tensor(x, "scale", "x");
  if (is_int_dtype(x->dtype)) {
    const int64_t a = integral_scalar(alpha, "scale", "alpha", x->dtype);
    dispatch_int(x->dtype, [&](auto tag) {
      using Tag = decltype(tag);
      scale_int<Tag>(static_cast<typename Tag::Storage*>(x->data), x->numel, a);
    });
    return;
  }
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    scale_float<Tr>(data_of<Tr>(x), x->numel, alpha);
  });
}

void axpy(const PL_Tensor* y, double alpha, const PL_Tensor* x) {
  check_cpu_tensor(y, "axpy", "y");
  check_cpu_tensor(x, "axpy", "x");
  check_same_dtype(y, "y", x, "x", "axpy");
  check_same_numel(y, "y", x, "x", "axpy");
  if (is_int_dtype(y->dtype)) {
    const int64_t a = integral_scalar(alpha, "axpy", "alpha", y->dtype);
    dispatch_int(y->dtype, [&](auto tag) {
      using Tag = decltype(tag);
      using T = typename Tag::Storage;
      axpy_int<Tag>(static_cast<T*>(y->data), static_cast<const T*>(x->data), y->numel, a);
    });
    return;
  }
  dispatch_float(y->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    axpy_float<Tr>(data_of<Tr>(y), data_of<Tr>(x), y->numel, alpha);
  });
}

void cast(const PL_Tensor* dst, const PL_Tensor* src) {
  check_cpu_tensor(dst, "cast", "dst");
  check_cpu_tensor(src, "cast", "src");
  if (!is_float_dtype(dst->dtype) || !is_float_dtype(src->dtype))
    fail(PL_ERR_UNSUPPORTED, std::string("cast: ") + pl_dtype_name(src->dtype) + " -> " +
                                 pl_dtype_name(dst->dtype) +
                                 " is not supported; cast converts between float64, float32, float16 "
                                 "and bfloat16 only");
  check_same_numel(dst, "dst", src, "src", "cast");
  if (dst->numel == 0) return;
  if (dst->dtype == src->dtype) {
    if (dst->data != src->data)
      std::memmove(dst->data, src->data, static_cast<size_t>(dst->numel) * pl_dtype_size(dst->dtype));
    return;
  }
  dispatch_float(src->dtype, [&](auto s) {
    dispatch_float(dst->dtype, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      cast_loop<S, D>(data_of<D>(dst), data_of<S>(src), dst->numel);
    });
  });
}

}  // namespace plrt::cpu
