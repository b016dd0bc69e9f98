// fill, scale, axpy, cast: the element-wise kernels of the CPU accelerator (see kernels.hpp).
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels.hpp"
#include "kernels_detail.hpp"

namespace plrt::cpu {
namespace {

using namespace detail;

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

// Tag: kernel_args::IntTag (storage type, and the unsigned type the arithmetic wraps in).
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
  if (const auto v = kernel_args::fill(kTarget, x, value)) {
    kernel_args::dispatch_int(x->dtype, "dispatch_int", [&](auto tag) {
      using T = typename decltype(tag)::Storage;
      T* p = static_cast<T*>(x->data);
      const T tv = static_cast<T>(*v);
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
  if (const auto a = kernel_args::scale(kTarget, x, alpha)) {
    kernel_args::dispatch_int(x->dtype, "dispatch_int", [&](auto tag) {
      using Tag = decltype(tag);
      scale_int<Tag>(static_cast<typename Tag::Storage*>(x->data), x->numel, *a);
    });
    return;
  }
  dispatch_float(x->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    scale_float<Tr>(data_of<Tr>(x), x->numel, alpha);
  });
}

void axpy(const PL_Tensor* y, double alpha, const PL_Tensor* x) {
  if (const auto a = kernel_args::axpy(kTarget, y, alpha, x)) {
    kernel_args::dispatch_int(y->dtype, "dispatch_int", [&](auto tag) {
      using Tag = decltype(tag);
      using T = typename Tag::Storage;
      axpy_int<Tag>(static_cast<T*>(y->data), static_cast<const T*>(x->data), y->numel, *a);
    });
    return;
  }
  dispatch_float(y->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    axpy_float<Tr>(data_of<Tr>(y), data_of<Tr>(x), y->numel, alpha);
  });
}

void cast(const PL_Tensor* dst, const PL_Tensor* src) {
  kernel_args::cast(kTarget, dst, src);
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
