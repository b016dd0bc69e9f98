// quantize_u8 / dequantize_u8: ByteGrad per-chunk min-max uint8 quantisation (see kernels.hpp).
#include "kernels.hpp"
#include "kernels_detail.hpp"

#include <cmath>
#include <limits>
#include <string>

namespace plrt::cpu {
namespace {

using namespace detail;

// Round half to even for 0 <= t <= 2^22: adding 2^23 leaves no fraction bits, so the addition
// itself rounds (to nearest, ties to even, the default FP mode); subtracting 2^23 is exact.
// Plain adds the compiler can vectorise (no libm call); CUDA mirrors this with rintf / __float2int_rn.
inline float round_half_even_small(float t) { return (t + 0x1.0p23f) - 0x1.0p23f; }

// ceil(n / chunk_size) without overflow; chunk_size >= 1 checked by the caller.
int64_t chunk_count(int64_t n, int64_t chunk_size) { return n / chunk_size + (n % chunk_size != 0 ? 1 : 0); }

void check_chunk_size(int64_t chunk_size, const char* op) {
  if (chunk_size < 1)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": chunk_size " + std::to_string(chunk_size) +
                                      " is invalid; valid: chunk_size >= 1");
}

void check_minmax(const PL_Tensor* minmax, int64_t n, int64_t chunk_size, const char* op) {
  if (minmax->dtype != PL_F32)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": minmax is " + pl_dtype_name(minmax->dtype) +
                                      "; it must be float32");
  const int64_t chunks = chunk_count(n, chunk_size);
  if (minmax->numel != 2 * chunks)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": minmax has " + std::to_string(minmax->numel) +
                                      " elements but " + std::to_string(n) + " elements in chunks of " +
                                      std::to_string(chunk_size) + " make " + std::to_string(chunks) +
                                      " chunks, which need " + std::to_string(2 * chunks) + " (min, max per chunk)");
}

void require_quant_dtype(const PL_Tensor* t, const char* what, const char* op) {
  if (t->dtype != PL_F32 && t->dtype != PL_F16 && t->dtype != PL_BF16)
    fail(PL_ERR_UNSUPPORTED, std::string(op) + ": " + what + " has dtype " + pl_dtype_name(t->dtype) +
                                 "; supported: float32, float16, bfloat16");
}

// (hi - lo) / 255 in float; a chunk whose range overflows float is an error.
float chunk_scale(float lo, float hi, int64_t chunk, const char* op) {
  const float scale = (hi - lo) / 255.0f;
  if (!std::isfinite(scale))
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": chunk " + std::to_string(chunk) + " has min " + num(lo) +
                                      " and max " + num(hi) + ", a range beyond float32; valid: max - min <= " +
                                      num(std::numeric_limits<float>::max()));
  return scale;
}

template <class Tr>
void quantize_loop(const typename Tr::Storage* src, uint8_t* q, float* minmax, int64_t n,
                   int64_t chunk_size) {
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
          fail(PL_ERR_INVALID_ARGUMENT, "quantize_u8: src[" + std::to_string(begin + i) + "] is " + num(v) +
                                            "; quantisation needs finite values");
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
void dequantize_loop(const uint8_t* q, const float* minmax, typename Tr::Storage* dst, int64_t n,
                     int64_t chunk_size) {
  const int64_t chunks = chunk_count(n, chunk_size);
  for (int64_t c = 0; c < chunks; ++c) {
    const float lo = minmax[2 * c];
    const float hi = minmax[2 * c + 1];
    if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo <= hi))
      fail(PL_ERR_INVALID_ARGUMENT, "dequantize_u8: chunk " + std::to_string(c) + " has min " + num(lo) +
                                        " and max " + num(hi) + "; valid: finite with min <= max");
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
  switch (dtype) {
    case PL_F32: f(F32{}); return;
    case PL_F16: f(F16{}); return;
    case PL_BF16: f(BF16{}); return;
    default: fail(PL_ERR_INTERNAL, std::string("dispatch_quant: ") + pl_dtype_name(dtype));
  }
}

}  // namespace

void quantize_u8(const PL_Tensor* src, const PL_Tensor* q, const PL_Tensor* minmax, int64_t chunk_size) {
  constexpr const char* op = "quantize_u8";
  check_cpu_tensor(src, op, "src");
  check_cpu_tensor(q, op, "q");
  check_cpu_tensor(minmax, op, "minmax");
  require_quant_dtype(src, "src", op);
  if (q->dtype != PL_U8)
    fail(PL_ERR_INVALID_ARGUMENT, std::string("quantize_u8: q is ") + pl_dtype_name(q->dtype) + "; it must be uint8");
  check_same_numel(src, "src", q, "q", op);
  check_chunk_size(chunk_size, op);
  check_minmax(minmax, src->numel, chunk_size, op);
  if (src->numel == 0) return;
  dispatch_quant(src->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    quantize_loop<Tr>(data_of<Tr>(src), static_cast<uint8_t*>(q->data), static_cast<float*>(minmax->data),
                      src->numel, chunk_size);
  });
}

void dequantize_u8(const PL_Tensor* q, const PL_Tensor* minmax, const PL_Tensor* dst, int64_t chunk_size) {
  constexpr const char* op = "dequantize_u8";
  check_cpu_tensor(q, op, "q");
  check_cpu_tensor(minmax, op, "minmax");
  check_cpu_tensor(dst, op, "dst");
  if (q->dtype != PL_U8)
    fail(PL_ERR_INVALID_ARGUMENT, std::string("dequantize_u8: q is ") + pl_dtype_name(q->dtype) + "; it must be uint8");
  require_quant_dtype(dst, "dst", op);
  check_same_numel(dst, "dst", q, "q", op);
  check_chunk_size(chunk_size, op);
  check_minmax(minmax, q->numel, chunk_size, op);
  if (q->numel == 0) return;
  dispatch_quant(dst->dtype, [&](auto tr) {
    using Tr = decltype(tr);
    dequantize_loop<Tr>(static_cast<const uint8_t*>(q->data), static_cast<const float*>(minmax->data),
                        data_of<Tr>(dst), q->numel, chunk_size);
  });
}

}  // namespace plrt::cpu
