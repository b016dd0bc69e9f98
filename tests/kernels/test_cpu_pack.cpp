// The cpu reference's pack and unpack (ABI 1.4): every dtype, parts at arbitrary offsets (gaps
// left untouched), zero-element parts, and every argument error the rules name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "plugin_support.hpp"

namespace {

using ::testing::HasSubstr;

PL_Tensor view(void* data, PL_DType dt, int64_t n) {
  PL_Tensor t{};
  t.struct_size = sizeof t;
  t.data = data;
  t.dtype = dt;
  t.device = {PL_DEVICE_CPU, 0};
  t.numel = n;
  t.ndim = 1;
  t.shape[0] = n;
  return t;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const plrt::plugin::Failure& f) {
    return f.message;
  }
  return "(no error)";
}

TEST(CpuPack, GathersAndScattersEveryDtypeByteForByte) {
  for (PL_DType dt : {PL_F32, PL_F64, PL_F16, PL_BF16, PL_I32, PL_I64, PL_U8}) {
    SCOPED_TRACE(pl_dtype_name(dt));
    const size_t es = pl_dtype_size(dt);
    const std::vector<int64_t> sizes{5, 0, 1, 300, 17};
    const std::vector<int64_t> offsets{3, 9, 8, 20, 330};  // gaps at 0..2, 9..19, 320..329 stay as they were
    std::vector<std::vector<uint8_t>> src(sizes.size());
    std::vector<PL_Tensor> parts;
    for (size_t i = 0; i < sizes.size(); ++i) {
      src[i].resize(static_cast<size_t>(sizes[i]) * es + 1);
      for (size_t b = 0; b < src[i].size(); ++b) src[i][b] = static_cast<uint8_t>(31 * i + 7 * b + 1);
      parts.push_back(view(src[i].data(), dt, sizes[i]));
    }
    std::vector<uint8_t> flat(350 * es, 0xEE);
    PL_Tensor f = view(flat.data(), dt, 350);
    plrt::cpu::pack(parts.data(), parts.size(), offsets.data(), &f);
    for (size_t i = 0; i < sizes.size(); ++i)
      EXPECT_EQ(std::memcmp(flat.data() + offsets[i] * es, src[i].data(), static_cast<size_t>(sizes[i]) * es), 0)
          << "part " << i;
    for (size_t b : {size_t(0), 2 * es, 9 * es, 19 * es, 325 * es, 347 * es}) EXPECT_EQ(flat[b], 0xEE) << "byte " << b;

    std::vector<std::vector<uint8_t>> back(sizes.size());
    std::vector<PL_Tensor> outs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      back[i].assign(src[i].size(), 0);
      outs.push_back(view(back[i].data(), dt, sizes[i]));
    }
    plrt::cpu::unpack(&f, offsets.data(), outs.data(), outs.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(std::memcmp(back[i].data(), src[i].data(), static_cast<size_t>(sizes[i]) * es), 0) << "part " << i;
      EXPECT_EQ(back[i].back(), 0) << "unpack wrote past part " << i;
    }
  }
}

TEST(CpuPack, NamesEveryBadArgument) {
  std::vector<float> a(4), b(4), flat(8);
  PL_Tensor f = view(flat.data(), PL_F32, 8);
  std::vector<PL_Tensor> parts{view(a.data(), PL_F32, 4), view(b.data(), PL_F32, 4)};
  std::vector<int64_t> off{0, 4};
  EXPECT_THAT(error_of([&] { plrt::cpu::pack(nullptr, 2, off.data(), &f); }),
              HasSubstr("pack: parts is NULL for 2 parts"));
  EXPECT_THAT(error_of([&] { plrt::cpu::pack(parts.data(), 2, nullptr, &f); }), HasSubstr("pack: offsets is NULL"));
  EXPECT_THAT(error_of([&] { plrt::cpu::pack(parts.data(), 2, off.data(), nullptr); }), HasSubstr("pack: flat"));
  std::vector<int64_t> past{0, 5};
  EXPECT_EQ(error_of([&] { plrt::cpu::pack(parts.data(), 2, past.data(), &f); }),
            "pack: parts[1] (4 elements at offset 5) runs past the end of flat (8 elements)");
  std::vector<int64_t> neg{-1, 4};
  EXPECT_EQ(error_of([&] { plrt::cpu::unpack(&f, neg.data(), parts.data(), 2); }),
            "unpack: offsets[0] is -1; offsets count elements of flat from 0");
  std::vector<PL_Tensor> mixed{parts[0], view(b.data(), PL_F64, 2)};
  EXPECT_EQ(error_of([&] { plrt::cpu::pack(mixed.data(), 2, off.data(), &f); }),
            "pack: parts[1] is float64 but flat is float32; every part has flat's dtype");
  std::vector<PL_Tensor> inside{view(flat.data() + 2, PL_F32, 2)};
  EXPECT_THAT(error_of([&] { plrt::cpu::pack(inside.data(), 1, off.data(), &f); }), HasSubstr("pack: parts[0]"));
  std::vector<PL_Tensor> twice{view(a.data(), PL_F32, 4), view(a.data() + 2, PL_F32, 2)};
  EXPECT_THAT(error_of([&] { plrt::cpu::unpack(&f, off.data(), twice.data(), 2); }),
              HasSubstr("unpack: two parts share memory"));
  plrt::cpu::pack(twice.data(), 2, off.data(), &f);  // reading one part twice is fine for pack
  plrt::cpu::pack(nullptr, 0, nullptr, &f);          // no parts: nothing to do
}

}  // namespace
