// fill, scale, axpy, cast: one grid-stride pass, each element read and written once, 16-byte
// packs when every operand is 16-byte aligned (device_common.cuh).  Arithmetic as the cpu
// reference: float dtypes in the compute type C, rounded once on store; integer dtypes in
// unsigned arithmetic, wrapping modulo 2^bits.
#include <type_traits>

#include "device_common.cuh"
#include "kernels.hpp"

namespace plrt::cuda {
namespace {

using namespace dev;

// ---- functors: run<W>(i) handles elements [i, i + W) ----

template <class S>
struct FillBits {  // a value already in the storage type (integers)
  S* x;
  S v;
  template <int W>
  __device__ void run(int64_t i) const {
    Pack<S, W> p;
#pragma unroll
    for (int k = 0; k < W; ++k) p.v[k] = v;
    store_pack<W>(x + i, p);
  }
};

template <class Tr>
struct FillFloat {  // the double rounded once to the dtype, on the device (as cast does)
  typename Tr::S* x;
  double value;
  template <int W>
  __device__ void run(int64_t i) const {
    const typename Tr::S v = Tr::from_double(value);
    Pack<typename Tr::S, W> p;
#pragma unroll
    for (int k = 0; k < W; ++k) p.v[k] = v;
    store_pack<W>(x + i, p);
  }
};

template <class Tr>
struct ScaleFloat {
  typename Tr::S* x;
  typename Tr::C a;
  template <int W>
  __device__ void run(int64_t i) const {
    Pack<typename Tr::S, W> p = load_pack<W>(x + i);
#pragma unroll
    for (int k = 0; k < W; ++k) p.v[k] = Tr::store(Tr::load(p.v[k]) * a);
    store_pack<W>(x + i, p);
  }
};

template <class Tr>
struct AxpyFloat {
  typename Tr::S* y;
  const typename Tr::S* x;
  typename Tr::C a;
  template <int W>
  __device__ void run(int64_t i) const {
    Pack<typename Tr::S, W> py = load_pack<W>(y + i);
    const Pack<typename Tr::S, W> px = load_pack<W>(x + i);
#pragma unroll
    for (int k = 0; k < W; ++k) py.v[k] = Tr::store(Tr::load(py.v[k]) + a * Tr::load(px.v[k]));
    store_pack<W>(y + i, py);
  }
};

// Tag: kernel_args::IntTag (storage type, and the unsigned type the arithmetic wraps in, as the cpu).
template <class Tag>
struct ScaleInt {
  using T = typename Tag::Storage;
  using U = typename Tag::Unsigned;
  T* x;
  U a;
  template <int W>
  __device__ void run(int64_t i) const {
    Pack<T, W> p = load_pack<W>(x + i);
#pragma unroll
    for (int k = 0; k < W; ++k) p.v[k] = static_cast<T>(static_cast<U>(static_cast<U>(p.v[k]) * a));
    store_pack<W>(x + i, p);
  }
};

template <class Tag>
struct AxpyInt {
  using T = typename Tag::Storage;
  using U = typename Tag::Unsigned;
  T* y;
  const T* x;
  U a;
  template <int W>
  __device__ void run(int64_t i) const {
    Pack<T, W> py = load_pack<W>(y + i);
    const Pack<T, W> px = load_pack<W>(x + i);
#pragma unroll
    for (int k = 0; k < W; ++k)
      py.v[k] = static_cast<T>(static_cast<U>(static_cast<U>(py.v[k]) + static_cast<U>(static_cast<U>(px.v[k]) * a)));
    store_pack<W>(y + i, py);
  }
};

template <class Src, class Dst>
struct CastOp {
  typename Dst::S* dst;
  const typename Src::S* src;
  __device__ static typename Dst::S convert(typename Src::S x) {
    if constexpr (std::is_same_v<Src, F64>) {
      return Dst::from_double(x);  // one rounding, straight from the double
    } else {
      // f32/f16/bf16 widened to float exactly, then rounded once (to f64: exact).
      return Dst::store(static_cast<typename Dst::C>(Src::load(x)));
    }
  }
  template <int W>
  __device__ void run(int64_t i) const {
    const Pack<typename Src::S, W> in = load_pack<W>(src + i);
    Pack<typename Dst::S, W> out;
#pragma unroll
    for (int k = 0; k < W; ++k) out.v[k] = convert(in.v[k]);
    store_pack<W>(dst + i, out);
  }
};

}  // namespace

void launch_fill_float(const Launch& L, const PL_Tensor& x, double value) {
  dispatch_float(x.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    launch_apply<pack_width(sizeof(S))>(L, x.numel, aligned(x.data, 16), FillFloat<Tr>{static_cast<S*>(x.data), value},
                                        "fill");
  });
}

void launch_fill_int(const Launch& L, const PL_Tensor& x, int64_t value) {
  kernel_args::dispatch_int(x.dtype, "cuda dispatch_int", [&](auto tag) {
    using T = typename decltype(tag)::Storage;
    launch_apply<pack_width(sizeof(T))>(L, x.numel, aligned(x.data, 16),
                                        FillBits<T>{static_cast<T*>(x.data), static_cast<T>(value)}, "fill");
  });
}

void launch_scale_float(const Launch& L, const PL_Tensor& x, double alpha) {
  dispatch_float(x.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const ScaleFloat<Tr> op{static_cast<S*>(x.data), static_cast<typename Tr::C>(alpha)};
    launch_apply<pack_width(sizeof(S))>(L, x.numel, aligned(x.data, 16), op, "scale");
  });
}

void launch_scale_int(const Launch& L, const PL_Tensor& x, int64_t alpha) {
  kernel_args::dispatch_int(x.dtype, "cuda dispatch_int", [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::Storage;
    using U = typename Tag::Unsigned;
    const ScaleInt<Tag> op{static_cast<T*>(x.data), static_cast<U>(static_cast<uint64_t>(alpha))};
    launch_apply<pack_width(sizeof(T))>(L, x.numel, aligned(x.data, 16), op, "scale");
  });
}

void launch_axpy_float(const Launch& L, const PL_Tensor& y, double alpha, const PL_Tensor& x) {
  dispatch_float(y.dtype, [&](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::S;
    const AxpyFloat<Tr> op{static_cast<S*>(y.data), static_cast<const S*>(x.data), static_cast<typename Tr::C>(alpha)};
    launch_apply<pack_width(sizeof(S))>(L, y.numel, aligned(y.data, 16) && aligned(x.data, 16), op, "axpy");
  });
}

void launch_axpy_int(const Launch& L, const PL_Tensor& y, int64_t alpha, const PL_Tensor& x) {
  kernel_args::dispatch_int(y.dtype, "cuda dispatch_int", [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::Storage;
    using U = typename Tag::Unsigned;
    const AxpyInt<Tag> op{static_cast<T*>(y.data), static_cast<const T*>(x.data),
                          static_cast<U>(static_cast<uint64_t>(alpha))};
    launch_apply<pack_width(sizeof(T))>(L, y.numel, aligned(y.data, 16) && aligned(x.data, 16), op, "axpy");
  });
}

void launch_cast(const Launch& L, const PL_Tensor& dst, const PL_Tensor& src) {
  dispatch_float(src.dtype, [&](auto s) {
    dispatch_float(dst.dtype, [&](auto d) {
      using Src = decltype(s);
      using Dst = decltype(d);
      constexpr size_t kMin =
          sizeof(typename Src::S) < sizeof(typename Dst::S) ? sizeof(typename Src::S) : sizeof(typename Dst::S);
      const CastOp<Src, Dst> op{static_cast<typename Dst::S*>(dst.data), static_cast<const typename Src::S*>(src.data)};
      launch_apply<pack_width(kMin)>(L, dst.numel, aligned(dst.data, 16) && aligned(src.data, 16), op, "cast");
    });
  });
}

}  // namespace plrt::cuda
