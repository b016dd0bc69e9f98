// quantize_u8 / dequantize_u8 against a reference written here (std::nearbyint for the rounding),
// round-trip error bounds, and the error cases.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "reference.hpp"

using ref::Buf;
using ref::expect_failure;

namespace {

const int64_t kSizes[] = {0, 1, 7, 1000, 4099};
const int64_t kChunks[] = {1, 7, 64, 4096, 10000};
const PL_DType kSrcDtypes[] = {PL_F32, PL_F16, PL_BF16};

int64_t nchunks(int64_t n, int64_t c) { return (n + c - 1) / c; }

struct RefQuant {
  std::vector<float> minmax;
  std::vector<uint8_t> q;
};

RefQuant reference_quantize(Buf& src, int64_t chunk) {
  const int64_t n = src.n();
  RefQuant r;
  r.q.resize(static_cast<size_t>(n));
  for (int64_t c = 0; c < nchunks(n, chunk); ++c) {
    const int64_t b = c * chunk, e = std::min(n, b + chunk);
    float lo = static_cast<float>(src.at(b)), hi = lo;
    for (int64_t i = b; i < e; ++i) {
      lo = std::min(lo, static_cast<float>(src.at(i)));
      hi = std::max(hi, static_cast<float>(src.at(i)));
    }
    r.minmax.push_back(lo);
    r.minmax.push_back(hi);
    const float scale = (hi - lo) / 255.0f;
    for (int64_t i = b; i < e; ++i) {
      if (scale == 0.0f) {
        r.q[i] = 0;
        continue;
      }
      const float t = (static_cast<float>(src.at(i)) - lo) / scale;
      const float rounded = std::nearbyint(std::min(255.0f, std::max(0.0f, t)));  // FE_TONEAREST: ties to even
      r.q[i] = static_cast<uint8_t>(rounded);
    }
  }
  return r;
}

std::string label(PL_DType d, int64_t n, int64_t chunk) {
  return std::string(pl_dtype_name(d)) + "[" + std::to_string(n) + "] chunk " + std::to_string(chunk);
}

}  // namespace

TEST(CpuQuant, MatchesReferenceAndRoundTripBound) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  for (PL_DType d : kSrcDtypes)
    for (int64_t n : kSizes)
      for (int64_t chunk : kChunks) {
        std::mt19937_64 rng(static_cast<uint64_t>(n * 31 + chunk));
        std::uniform_real_distribution<double> u(-3.0, 5.0);
        Buf src(d, n), q(PL_U8, n), mm(PL_F32, 2 * nchunks(n, chunk));
        for (int64_t i = 0; i < n; ++i) src.set(i, u(rng) * (i % 97 == 0 ? 40.0 : 1.0));
        // One constant chunk when there is room for it.
        if (n >= 2 * chunk)
          for (int64_t i = chunk; i < 2 * chunk; ++i) src.set(i, 2.5);
        plrt::cpu::quantize_u8(src.get(), q.get(), mm.get(), chunk);
        const RefQuant r = reference_quantize(src, chunk);
        const std::string what = label(d, n, chunk);
        for (int64_t i = 0; i < mm.n(); ++i) ASSERT_EQ(mm.as<float>()[i], r.minmax[i]) << what << " minmax " << i;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(q.as<uint8_t>()[i], r.q[i]) << what << " q " << i;

        // Dequantise into every float dtype: exact against the documented formula.
        for (PL_DType dd : kSrcDtypes) {
          Buf out(dd, n);
          plrt::cpu::dequantize_u8(q.get(), mm.get(), out.get(), chunk);
          for (int64_t i = 0; i < n; ++i) {
            const int64_t c = i / chunk;
            const float lo = r.minmax[2 * c], hi = r.minmax[2 * c + 1];
            const float x = lo + static_cast<float>(r.q[i]) * ((hi - lo) / 255.0f);
            ASSERT_TRUE(ref::same_value(out.at(i), ref::round_store(x, dd)))
                << what << " -> " << pl_dtype_name(dd) << " " << i;
            if (dd != PL_F32) continue;
            // Round trip within half a step, plus float slack.
            const double slack = 4 * std::ldexp(1.0, std::ilogb(std::max({std::fabs(lo), std::fabs(hi), 1e-30f})) - 23);
            ASSERT_LE(std::fabs(out.at(i) - src.at(i)), (static_cast<double>(hi) - lo) / 510.0 + slack)
                << what << " " << i;
          }
        }
        // The constant chunk: q 0, dequantised exactly.
        if (n >= 2 * chunk) {
          EXPECT_EQ(mm.as<float>()[2], 2.5f);
          EXPECT_EQ(mm.as<float>()[3], 2.5f);
          EXPECT_EQ(q.as<uint8_t>()[chunk], 0);
        }
      }
}

TEST(CpuQuant, LastShortChunkAndExtremes) {
  const int64_t n = 1000, chunk = 64;  // 15 full chunks and one of 40
  Buf src(PL_F32, n), q(PL_U8, n), mm(PL_F32, 32), back(PL_F32, n);
  for (int64_t i = 0; i < n; ++i) src.set(i, std::sin(static_cast<double>(i)) * (i >= 960 ? 100.0 : 1.0));
  plrt::cpu::quantize_u8(src.get(), q.get(), mm.get(), chunk);
  float lo = 1e30f, hi = -1e30f;
  for (int64_t i = 960; i < n; ++i) {
    lo = std::min(lo, static_cast<float>(src.at(i)));
    hi = std::max(hi, static_cast<float>(src.at(i)));
  }
  EXPECT_EQ(mm.as<float>()[30], lo);
  EXPECT_EQ(mm.as<float>()[31], hi);
  EXPECT_GT(hi - lo, 150.0f);  // the last chunk really has its own range
  for (int64_t i = 960; i < n; ++i) {
    if (src.at(i) == lo) {
      EXPECT_EQ(q.as<uint8_t>()[i], 0);
    }
    if (src.at(i) == hi) {
      EXPECT_EQ(q.as<uint8_t>()[i], 255);
    }
  }
  plrt::cpu::dequantize_u8(q.get(), mm.get(), back.get(), chunk);
  for (int64_t i = 960; i < n; ++i) EXPECT_NEAR(back.at(i), src.at(i), (hi - lo) / 510.0 * 1.0001) << i;
}

TEST(CpuQuant, TiesRoundToEven) {
  // min 0, max 255: scale is exactly 1, so (x - min) / scale is x itself.
  const float xs[] = {0.0f, 255.0f, 0.5f, 1.5f, 2.5f, 3.5f, 254.5f, 100.49f, 100.51f};
  const uint8_t want[] = {0, 255, 0, 2, 2, 4, 254, 100, 101};
  Buf src(PL_F32, 9), q(PL_U8, 9), mm(PL_F32, 2);
  for (int i = 0; i < 9; ++i) src.set(i, xs[i]);
  plrt::cpu::quantize_u8(src.get(), q.get(), mm.get(), 9);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(q.as<uint8_t>()[i], want[i]) << xs[i];
}

TEST(CpuQuant, EmptyIsANoOp) {
  Buf src(PL_BF16, 0), q(PL_U8, 0), mm(PL_F32, 0), out(PL_F16, 0);
  plrt::cpu::quantize_u8(src.get(), q.get(), mm.get(), 16);
  plrt::cpu::dequantize_u8(q.get(), mm.get(), out.get(), 16);
}

TEST(CpuQuantErrors, All) {
  Buf src(PL_F32, 10), q(PL_U8, 10), mm(PL_F32, 6), dst(PL_F32, 10);
  for (int i = 0; i < 10; ++i) src.set(i, i);
  const auto quant = [&](int64_t chunk) { plrt::cpu::quantize_u8(src.get(), q.get(), mm.get(), chunk); };
  expect_failure([&] { quant(0); }, PL_ERR_INVALID_ARGUMENT, {"chunk_size 0", ">= 1"});
  expect_failure([&] { quant(-3); }, PL_ERR_INVALID_ARGUMENT, {"chunk_size -3"});
  expect_failure([&] { quant(5); }, PL_ERR_INVALID_ARGUMENT, {"minmax has 6", "need 4"});
  expect_failure([&] { plrt::cpu::dequantize_u8(q.get(), mm.get(), dst.get(), 2); }, PL_ERR_INVALID_ARGUMENT,
                 {"minmax has 6", "need 10"});
  quant(4);  // 10 elements in chunks of 4: 3 chunks, 6 minmax values

  Buf mm64(PL_F64, 6), q32(PL_I32, 10), src64(PL_F64, 10), q9(PL_U8, 9), dst8(PL_U8, 10);
  expect_failure([&] { plrt::cpu::quantize_u8(src.get(), q.get(), mm64.get(), 4); }, PL_ERR_INVALID_ARGUMENT,
                 {"minmax", "float64", "float32"});
  expect_failure([&] { plrt::cpu::quantize_u8(src.get(), q32.get(), mm.get(), 4); }, PL_ERR_INVALID_ARGUMENT,
                 {"q", "int32", "uint8"});
  expect_failure([&] { plrt::cpu::quantize_u8(src64.get(), q.get(), mm.get(), 4); }, PL_ERR_UNSUPPORTED,
                 {"src", "float64"});
  expect_failure([&] { plrt::cpu::quantize_u8(src.get(), q9.get(), mm.get(), 4); }, PL_ERR_INVALID_ARGUMENT,
                 {"10", "9"});
  expect_failure([&] { plrt::cpu::dequantize_u8(q.get(), mm.get(), dst8.get(), 4); }, PL_ERR_UNSUPPORTED,
                 {"dst", "uint8"});

  src.set(5, std::nan(""));
  expect_failure([&] { quant(4); }, PL_ERR_INVALID_ARGUMENT, {"src[5]", "nan", "finite"});
  src.set(5, 5);
  src.set(9, -INFINITY);
  expect_failure([&] { quant(4); }, PL_ERR_INVALID_ARGUMENT, {"src[9]", "-inf"});
  Buf h(PL_F16, 3000), qh(PL_U8, 3000), mmh(PL_F32, 6);
  h.set(1500, INFINITY);
  expect_failure([&] { plrt::cpu::quantize_u8(h.get(), qh.get(), mmh.get(), 1000); }, PL_ERR_INVALID_ARGUMENT,
                 {"src[1500]", "inf"});

  // A chunk whose range overflows float.
  Buf big(PL_F32, 2), qb(PL_U8, 2), mmb(PL_F32, 2);
  big.set(0, -3e38);
  big.set(1, 3e38);
  expect_failure([&] { plrt::cpu::quantize_u8(big.get(), qb.get(), mmb.get(), 2); }, PL_ERR_INVALID_ARGUMENT,
                 {"chunk 0", "-3e+38", "3e+38"});

  // dequantize: bad minmax values.
  src.set(9, 9);
  quant(4);
  mm.as<float>()[2] = 10.0f;  // chunk 1: min 10 > max 7
  expect_failure([&] { plrt::cpu::dequantize_u8(q.get(), mm.get(), dst.get(), 4); }, PL_ERR_INVALID_ARGUMENT,
                 {"chunk 1", "min 10", "max 7"});
  mm.as<float>()[2] = std::nanf("");
  expect_failure([&] { plrt::cpu::dequantize_u8(q.get(), mm.get(), dst.get(), 4); }, PL_ERR_INVALID_ARGUMENT,
                 {"chunk 1", "nan"});

  Buf nod(PL_U8, 10);
  nod.t.data = nullptr;
  expect_failure([&] { plrt::cpu::dequantize_u8(&nod.t, mm.get(), dst.get(), 4); }, PL_ERR_INVALID_ARGUMENT,
                 {"q", "NULL"});
  dst.t.device = PL_Device{PL_DEVICE_CUDA, 2};
  expect_failure([&] { plrt::cpu::dequantize_u8(q.get(), mm.get(), &dst.t, 4); }, PL_ERR_INVALID_ARGUMENT,
                 {"dst", "cuda:2"});
}
