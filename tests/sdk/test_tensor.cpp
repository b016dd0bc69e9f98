// pl::Tensor and pl::Accelerator over the cpu plugin: allocation, views, copies, errors.
#include <gtest/gtest.h>

#include <plrt/sdk/tensor.hpp>

#include "sdk_test_support.hpp"

namespace {

using sdk_test::runtime;

TEST(Tensor, HostTensorHasShapeAndZeros) {
  auto t = pl::Tensor::zeros({3, 4});
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.nbytes(), 48u);
  for (float v : t.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(t.size(2), pl::Error);
  EXPECT_THROW(t.data_ptr<double>(), pl::Error);
}

TEST(Tensor, NarrowAndReshapeShareStorage) {
  auto t = pl::Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  auto rows = t.narrow(1, 2);
  EXPECT_EQ(rows.shape(), (pl::Shape{2, 2}));
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  rows.data_ptr<float>()[0] = 42;
  EXPECT_EQ(t.to_vector<float>()[2], 42);
  EXPECT_EQ(t.reshape({6}).shape(), (pl::Shape{6}));
  try {
    t.reshape({4});
    FAIL();
  } catch (const pl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.narrow(2, 2), pl::Error);
}

TEST(Tensor, AcceleratorTensorsCopyAndClone) {
  pl::Accelerator acc(runtime(), "cpu");
  auto d = pl::Tensor::zeros(acc, {PL_DEVICE_CPU, 0}, {5}, PL_F64);
  EXPECT_TRUE(d.accelerator() == acc);
  auto h = pl::Tensor::from_vector<double>({1, 2, 3, 4, 5}, {5});
  d.copy_from(h);
  auto c = d.clone();
  d.data_ptr<double>()[0] = -1;
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_THROW(d.copy_from(pl::Tensor::zeros({4}, PL_F64)), pl::Error);
}

TEST(Accelerator, EmptyHandleAndMissingPluginAreNamed) {
  pl::Accelerator none;
  EXPECT_FALSE(none.defined());
  try {
    (void)none.name();
    FAIL();
  } catch (const pl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty handle"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pl::Accelerator(runtime(), "no_such_accelerator"), pl::Error);
}

// Tensor::borrow: the memory stays the owner's (written through, never freed here), the owner
// lives while any Tensor shares the storage, and a descriptor that does not hold together is named.
TEST(Tensor, BorrowedMemoryIsTheOwnersAndOutlivesNoTensor) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  PL_Tensor v{};
  v.struct_size = sizeof v;
  v.data = owner->data();
  v.dtype = PL_F32;
  v.device = PL_Device{PL_DEVICE_CPU, 0};
  v.numel = 6;
  v.ndim = 2;
  v.shape[0] = 2;
  v.shape[1] = 3;
  std::weak_ptr<std::vector<float>> watch = owner;
  {
    pl::Tensor t = pl::Tensor::borrow(v, pl::Accelerator(), owner);
    owner.reset();
    EXPECT_FALSE(watch.expired()) << "the tensor keeps its owner";
    EXPECT_EQ(t.shape(), (pl::Shape{2, 3}));
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
    t.data_ptr<float>()[4] = 50;
    EXPECT_EQ((*watch.lock())[4], 50) << "writes reach the owner's memory";
    pl::Tensor row = t.narrow(1, 1);
    t = pl::Tensor();
    EXPECT_FALSE(watch.expired()) << "a view keeps the owner too";
  }
  EXPECT_TRUE(watch.expired());
  v.numel = 5;
  auto keep = std::make_shared<int>(0);
  try {
    (void)pl::Tensor::borrow(v, pl::Accelerator(), keep);
    FAIL();
  } catch (const pl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("numel 5 does not match the shape [2, 3]"), std::string::npos) << e.what();
  }
  v.numel = 6;
  EXPECT_THROW((void)pl::Tensor::borrow(v, pl::Accelerator(), nullptr), pl::Error);
  v.device = PL_Device{PL_DEVICE_CUDA, 0};
  EXPECT_THROW((void)pl::Tensor::borrow(v, pl::Accelerator(), keep), pl::Error);
}

}  // namespace
