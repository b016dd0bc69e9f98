// pl_tensor_init (plrt/pl_tensor.h): every field of a contiguous descriptor, and each bad input.
#include <plrt/pl_tensor.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "test_support.hpp"

namespace {

PL_Tensor garbage() {
  PL_Tensor t;
  std::memset(&t, 0xAB, sizeof t);
  return t;
}

void expect_empty(const PL_Tensor& t, PL_Device device) {
  EXPECT_EQ(t.struct_size, sizeof(PL_Tensor));
  EXPECT_EQ(t.data, nullptr);
  EXPECT_EQ(t.dtype, PL_DTYPE_INVALID);
  EXPECT_EQ(t.numel, 0);
  EXPECT_EQ(t.ndim, 0);
  EXPECT_EQ(t.device.type, device.type);
  for (int64_t s : t.shape) EXPECT_EQ(s, 0);
}

}  // namespace

TEST(TensorInit, DescribesAContiguousTensor) {
  float data[2 * 3 * 4];
  const int64_t shape[] = {2, 3, 4};
  PL_Tensor t = garbage();
  ASSERT_EQ(pl_tensor_init(&t, data, PL_F32, PL_Device{PL_DEVICE_CUDA, 1}, 3, shape), PL_ERR_OK);
  EXPECT_EQ(t.struct_size, sizeof(PL_Tensor));
  EXPECT_EQ(t.data, data);
  EXPECT_EQ(t.dtype, PL_F32);
  EXPECT_EQ(t.device.type, PL_DEVICE_CUDA);
  EXPECT_EQ(t.device.index, 1);
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.numel, 24);
  EXPECT_EQ(t.shape[0], 2);
  EXPECT_EQ(t.shape[1], 3);
  EXPECT_EQ(t.shape[2], 4);
  for (int i = 3; i < PL_MAX_DIMS; ++i) EXPECT_EQ(t.shape[i], 0) << i;
}

TEST(TensorInit, ScalarsEmptyTensorsAndEveryRank) {
  double x = 0;
  PL_Tensor t = garbage();
  ASSERT_EQ(pl_tensor_init(&t, &x, PL_F64, PL_Device{PL_DEVICE_CPU, 0}, 0, nullptr), PL_ERR_OK);
  EXPECT_EQ(t.numel, 1);  // ndim 0: a scalar
  EXPECT_EQ(t.ndim, 0);
  const int64_t empty[] = {5, 0, 7};
  ASSERT_EQ(pl_tensor_init(&t, nullptr, PL_U8, PL_Device{PL_DEVICE_CPU, 0}, 3, empty), PL_ERR_OK);
  EXPECT_EQ(t.numel, 0);
  // numel is the product at every rank, against an independent loop.
  int64_t shape[PL_MAX_DIMS];
  for (int ndim = 1; ndim <= PL_MAX_DIMS; ++ndim) {
    int64_t expected = 1;
    for (int i = 0; i < ndim; ++i) expected *= (shape[i] = i + 2);
    ASSERT_EQ(pl_tensor_init(&t, nullptr, PL_BF16, PL_Device{PL_DEVICE_CPU, 0}, ndim, shape), PL_ERR_OK);
    EXPECT_EQ(t.numel, expected) << ndim;
    EXPECT_EQ(t.ndim, ndim);
  }
}

TEST(TensorInit, BadInputLeavesAnEmptyDescriptor) {
  float data[4];
  const PL_Device cpu{PL_DEVICE_CPU, 0};
  EXPECT_EQ(pl_tensor_init(nullptr, data, PL_F32, cpu, 1, nullptr), PL_ERR_INVALID_ARGUMENT);
  const int64_t ok[PL_MAX_DIMS + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  const int64_t negative[] = {2, -1};
  const int64_t max = std::numeric_limits<int64_t>::max();
  const int64_t overflow[] = {max / 2 + 1, 2};
  const int64_t fits[] = {max / 2, 2};
  struct Case {
    int32_t ndim;
    const int64_t* shape;
  } cases[] = {{-1, ok}, {PL_MAX_DIMS + 1, ok}, {1, nullptr}, {2, negative}, {2, overflow}};
  for (const auto& c : cases) {
    PL_Tensor t = garbage();
    EXPECT_EQ(pl_tensor_init(&t, data, PL_F32, cpu, c.ndim, c.shape), PL_ERR_INVALID_ARGUMENT) << c.ndim;
    expect_empty(t, cpu);
  }
  PL_Tensor t = garbage();
  EXPECT_EQ(pl_tensor_init(&t, data, PL_U8, cpu, 2, fits), PL_ERR_OK);
  EXPECT_EQ(t.numel, max - 1);
}
