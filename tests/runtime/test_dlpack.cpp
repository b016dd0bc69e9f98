// PL_Tensor <-> DLPack views: every dtype, shapes, strides, devices, and the refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <plrt/sdk/dlpack.hpp>

using ::testing::HasSubstr;

TEST(DLPack, RoundTripEveryDtype) {
  float buf[6] = {};
  for (PL_DType dt : {PL_F32, PL_F64, PL_F16, PL_BF16, PL_I32, PL_I64, PL_U8}) {
    PL_Tensor t{sizeof(PL_Tensor), buf, dt, {PL_DEVICE_CPU, 0}, 6, 2, {2, 3}};
    int64_t shape[PL_MAX_DIMS];
    DLTensor d = pl::to_dlpack(t, shape);
    EXPECT_EQ(d.dtype.bits, pl_dtype_size(dt) * 8);
    EXPECT_EQ(d.ndim, 2);
    EXPECT_EQ(d.shape[1], 3);
    PL_Tensor back = pl::from_dlpack(d);
    EXPECT_EQ(back.dtype, dt);
    EXPECT_EQ(back.numel, 6);
    EXPECT_EQ(back.shape[0], 2);
    EXPECT_EQ(back.data, buf);
  }
  EXPECT_EQ(pl::to_dlpack_dtype(PL_BF16).code, kDLBfloat);
}

TEST(DLPack, FlatDescriptorBecomesOneDimensional) {
  float buf[5];
  PL_Tensor t{sizeof(PL_Tensor), buf, PL_F32, {PL_DEVICE_CUDA, 1}, 5, 0, {}};
  int64_t shape[PL_MAX_DIMS];
  DLTensor d = pl::to_dlpack(t, shape);
  EXPECT_EQ(d.ndim, 1);
  EXPECT_EQ(d.shape[0], 5);
  EXPECT_EQ(d.device.device_type, kDLCUDA);
  EXPECT_EQ(d.device.device_id, 1);
}

TEST(DLPack, ByteOffsetAndRowMajorStrides) {
  float buf[12];
  int64_t shape[2] = {3, 4}, strides[2] = {4, 1};
  DLTensor d{buf, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, strides, 8};
  PL_Tensor t = pl::from_dlpack(d);
  EXPECT_EQ(t.numel, 12);
  EXPECT_EQ(t.data, reinterpret_cast<char*>(buf) + 8);
}

TEST(DLPack, Refusals) {
  float buf[12];
  int64_t shape[2] = {3, 4}, transposed[2] = {1, 3};
  DLTensor strided{buf, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, transposed, 0};
  try {
    pl::from_dlpack(strided);
    FAIL();
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_UNSUPPORTED);
    EXPECT_THAT(e.what(), HasSubstr("not compact row-major"));
  }
  DLTensor complex{buf, {kDLCPU, 0}, 2, {kDLComplex, 64, 1}, shape, nullptr, 0};
  EXPECT_THROW(pl::from_dlpack(complex), pl::Error);
  DLTensor vulkan{buf, {kDLVulkan, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
  try {
    pl::from_dlpack(vulkan);
    FAIL();
  } catch (const pl::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("DLPack device type 7"));
  }
  PL_Tensor bad{sizeof(PL_Tensor), buf, 42, {PL_DEVICE_CPU, 0}, 1, 0, {}};
  int64_t s[PL_MAX_DIMS];
  EXPECT_THROW(pl::to_dlpack(bad, s), pl::Error);
}
