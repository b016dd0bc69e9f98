// quantize_u8 / dequantize_u8: ByteGrad per-chunk min-max uint8 quantisation (see kernels.hpp).
#include <cmath>
#include <string>

#include "kernels.hpp"
#include "kernels_detail.hpp"

namespace plrt::cpu {
namespace {

using namespace detail;
using kernel_args::chunk_count;

// Round half to even for 0 <= t <= 2^22: adding 2^23 leaves no fraction bits, so the addition
// itself rounds (to nearest, ties to even, the default FP mode); subtracting 2^23 is exact.
// Plain adds the compiler can vectorise (no libm call); CUDA mirrors this with rintf / __float2int_rn.
inline float round_half_even_small(float t) { return (t + 0x1.0p23f) - 0x1.0p23f; }

// (hi - lo) / 255 in float; a chunk whose range overflows float is an error.
float chunk_scale(float lo, float hi, int64_t chunk, const char* op) {
  const float scale = (hi - lo) / 255.0f;
  if (!std::isfinite(scale))
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + kernel_args::chunk_range_message(chunk, lo, hi));
  return scale;
}

template <class Tr>
void quantize_loop(const typename Tr::Storage* src, uint8_t* q, float* minmax, int64_t n, int64_t chunk_size) {
  const int64_t chunks = chunk_count(n, chunk_size);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * chunk_size;
    const int64_t len = n - begin < chunk_size ? n - begin : chunk_size;
    const typename Tr::Storage* x = src + begin;
    float lo = Tr::load(x[0]);
    float hi = lo;
    float poison = 0.0f;  // becomes NaN when any element is inf or NaN (x * 0)
    for (int64_t i = 0; i < len; ++i) {
      const float v = Tr::load(x[i]);
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
      poison += v * 0.0f;
    }
    if (poison != 0.0f) {
      for (int64_t i = 0; i < len; ++i) {
        const float v = Tr::load(x[i]);
        if (!std::isfinite(v))
          fail(PL_ERR_INVALID_ARGUMENT, "quantize_u8: " + kernel_args::nonfinite_src_message(begin + i, v));
      }
    }
    const float scale = chunk_scale(lo, hi, c, "quantize_u8");
    minmax[2 * c] = lo;
    minmax[2 * c + 1] = hi;
    uint8_t* out = q + begin;
    if (scale == 0.0f) {
      for (int64_t i = 0; i < len; ++i) out[i] = 0;
      continue;
    }
    for (int64_t i = 0; i < len; ++i) {
      float t = (Tr::load(x[i]) - lo) / scale;
      t = t < 0.0f ? 0.0f : t;
      t = t > 255.0f ? 255.0f : t;
      out[i] = static_cast<uint8_t>(static_cast<int32_t>(round_half_even_small(t)));
    }
  }
}

template <class Tr>
void dequantize_loop(const uint8_t* q, const float* minmax, typename Tr::Storage* dst, int64_t n, int64_t chunk_size) {
  const int64_t chunks = chunk_count(n, chunk_size);
  for (int64_t c = 0; c < chunks; ++c) {
    const float lo = minmax[2 * c];
    const float hi = minmax[2 * c + 1];
    if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo <= hi))
      fail(PL_ERR_INVALID_ARGUMENT, "dequantize_u8: " + kernel_args::chunk_minmax_message(c, lo, hi));
    const float scale = chunk_scale(lo, hi, c, "dequantize_u8");
    const int64_t begin = c * chunk_size;
    const int64_t len = n - begin < chunk_size ? n - begin : chunk_size;
    const uint8_t* in = q + begin;
    typename Tr::Storage* out = dst + begin;
    for (int64_t i = 0; i < len; ++i) out[i] = Tr::store(lo + static_cast<float>(in[i]) * scale);
  }
}

// Calls f(Traits{}) for float32/float16/bfloat16.
template <class F>
void dispatch_quant(PL_DType dtype, F&& f) {
  kernel_args::dispatch<Case<PL_F32, F32>, Case<PL_F16, F16>, Case<PL_BF16, BF16>>(dtype, "dispatch_quant", f);
}

}  // namespace

void quantize_u8(const PL_Tensor* src, const PL_Tensor* q, const PL_Tensor* minmax, int64_t chunk_size) {
  kernel_args::quantize_u8(kTarget, src, q, minmax, chunk_size);
  if (src->numel == 0) return;
  dispatch_quant(src->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    quantize_loop<Tr>(data_of<Tr>(src), static_cast<uint8_t*>(q->data), static_cast<float*>(minmax->data), src->numel,
                      chunk_size);
  });
}

void dequantize_u8(const PL_Tensor* q, const PL_Tensor* minmax, const PL_Tensor* dst, int64_t chunk_size) {
  kernel_args::dequantize_u8(kTarget, q, minmax, dst, chunk_size);
  if (q->numel == 0) return;
  dispatch_quant(dst->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    dequantize_loop<Tr>(static_cast<const uint8_t*>(q->data), static_cast<const float*>(minmax->data), data_of<Tr>(dst),
                        q->numel, chunk_size);
  });
}

}  // namespace plrt::cpu
