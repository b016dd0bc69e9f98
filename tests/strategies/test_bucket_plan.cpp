// plrt_ddp_core's pure parts, called directly: the bucket assignment (reverse order, caps, dtype
// groups) and the option parser.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bucket_plan.hpp"
#include "ddp_options.hpp"
#include "plugin_support.hpp"

using plrt::reducer::plan_buckets;
using plrt::reducer::PlanInput;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

constexpr PL_Device kCpu{PL_DEVICE_CPU, 0};

// f32 gradients of `bytes`, indices counting down as the reverse order hands them over.
std::vector<PlanInput> reversed_f32(const std::vector<size_t>& bytes) {
  std::vector<PlanInput> in;
  for (size_t k = 0; k < bytes.size(); ++k) in.push_back({bytes.size() - 1 - k, bytes[k], PL_F32, kCpu});
  return in;
}

TEST(BucketPlan, FirstBucketHasItsOwnCap) {
  const auto b = plan_buckets(reversed_f32({400, 400, 400, 400}), 500, 1000);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_THAT(b[0].members, ElementsAre(3));
  EXPECT_THAT(b[1].members, ElementsAre(2, 1));
  EXPECT_THAT(b[1].offsets, ElementsAre(0, 400));
  EXPECT_EQ(b[1].bytes, 800u);
  EXPECT_THAT(b[2].members, ElementsAre(0));
}

TEST(BucketPlan, ABucketClosesOnlyWhenTheNextGradientWouldExceedTheCap) {
  EXPECT_EQ(plan_buckets(reversed_f32({500, 500}), 1000, 1000).size(), 1u);  // exactly the cap: fits
  EXPECT_EQ(plan_buckets(reversed_f32({500, 501}), 1000, 1000).size(), 2u);
}

TEST(BucketPlan, AGradientLargerThanTheCapGetsItsOwnBucket) {
  const auto b = plan_buckets(reversed_f32({100, 5000, 100}), 1000, 1000);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_THAT(b[1].members, ElementsAre(1));
  EXPECT_EQ(b[1].bytes, 5000u);
}

TEST(BucketPlan, DtypesAndDevicesFillSeparateBucketsOrderedByFirstGradient) {
  const PL_Device other{PL_DEVICE_CPU, 1};
  const std::vector<PlanInput> in = {
      {5, 8, PL_F64, kCpu}, {4, 4, PL_F32, kCpu}, {3, 8, PL_F64, kCpu}, {2, 4, PL_F32, other}, {1, 4, PL_F32, kCpu}};
  const auto b = plan_buckets(in, 1 << 20, 1 << 20);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_THAT(b[0].members, ElementsAre(5, 3));
  EXPECT_EQ(b[0].dtype, PL_F64);
  EXPECT_THAT(b[1].members, ElementsAre(4, 1));
  EXPECT_THAT(b[1].offsets, ElementsAre(0, 4));
  EXPECT_THAT(b[2].members, ElementsAre(2));
  EXPECT_EQ(b[2].device.index, 1);
}

TEST(BucketPlan, EachDtypeGetsItsOwnFirstBucket) {
  // Per dtype, the second 600 bytes would make 1200 > the first cap 1000: two buckets each.
  const std::vector<PlanInput> in = {
      {3, 600, PL_F64, kCpu}, {2, 600, PL_F32, kCpu}, {1, 600, PL_F64, kCpu}, {0, 600, PL_F32, kCpu}};
  const auto b = plan_buckets(in, 1000, 5000);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_THAT(b[0].members, ElementsAre(3));
  EXPECT_THAT(b[1].members, ElementsAre(2));
  EXPECT_THAT(b[2].members, ElementsAre(1));
  EXPECT_THAT(b[3].members, ElementsAre(0));
  EXPECT_TRUE(plan_buckets({}, 1, 1).empty());
}

PL_OptionList list_of(const std::vector<PL_Option>& v) { return {sizeof(PL_OptionList), v.data(), v.size()}; }

TEST(DdpOptions, DefaultsAndMiB) {
  const std::vector<PL_Option> none;
  const auto o = plrt::ddp::parse_options("ddp", list_of(none));
  EXPECT_EQ(o.bucket_cap_bytes(), 25u << 20);
  EXPECT_EQ(o.first_bucket_cap_bytes(), 1u << 20);
  EXPECT_TRUE(o.broadcast_buffers);
  EXPECT_EQ(plrt::ddp::DdpOptions::mib_to_bytes(0.001), 1048u);
}

TEST(DdpOptions, LaterEntriesWinAndPgOptionsLoseTheirPrefix) {
  const std::vector<PL_Option> v = {{sizeof(PL_Option), "bucket_cap_mb", "10"},
                                    {sizeof(PL_Option), "pg.probe_ms", "0"},
                                    {sizeof(PL_Option), "bucket_cap_mb", "0.5"},
                                    {sizeof(PL_Option), "broadcast_buffers", "off"}};
  const auto o = plrt::ddp::parse_options("ddp", list_of(v));
  EXPECT_EQ(o.bucket_cap_bytes(), 512u * 1024u);
  EXPECT_FALSE(o.broadcast_buffers);
  ASSERT_EQ(o.pg_options.size(), 1u);
  EXPECT_EQ(o.pg_options[0].first, "probe_ms");
  EXPECT_EQ(o.pg_options[0].second, "0");
}

TEST(DdpOptions, NullKeyIsAnError) {
  const std::vector<PL_Option> v = {{sizeof(PL_Option), nullptr, "1"}};
  try {
    plrt::ddp::parse_options("ddp_spawn", list_of(v));
    ADD_FAILURE() << "accepted a NULL key";
  } catch (const plrt::plugin::Failure& f) {
    EXPECT_EQ(f.code, PL_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(f.message, HasSubstr("ddp_spawn: options.items[0]"));
  }
}

}  // namespace
