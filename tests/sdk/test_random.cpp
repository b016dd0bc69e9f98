// pl::Generator (reproducible draws, state round trips, bad input) and the process-wide seed
// (seed_everything, the rank generator, PL_GLOBAL_SEED read lazily in a fresh process).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/random.hpp>
#include <set>
#include <string>

#include "sdk_test_support.hpp"

using ::testing::HasSubstr;

using sdk_test::error_of;

TEST(Random, GeneratorDrawsAreReproducibleAndInRange) {
  pl::Generator a(9), b(9);
  for (int i = 0; i < 1000; ++i) {
    const double u = a.uniform(-2, 3);
    EXPECT_EQ(u, b.uniform(-2, 3));
    EXPECT_GE(u, -2);
    EXPECT_LT(u, 3);
    const int64_t r = a.randint(-3, 4);
    EXPECT_EQ(r, b.randint(-3, 4));
    EXPECT_GE(r, -3);
    EXPECT_LT(r, 4);
  }
  std::set<int64_t> seen;
  double sum = 0, sq = 0;
  for (int i = 0; i < 20000; ++i) {
    seen.insert(a.randint(0, 5));
    const double z = a.normal(1, 2);
    sum += z;
    sq += (z - 1) * (z - 1);
  }
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_NEAR(sum / 20000, 1, 0.06);
  EXPECT_NEAR(sq / 20000, 4, 0.2);
  EXPECT_EQ(a.uniform(1.5, 1.5), 1.5);
  EXPECT_EQ(pl::Generator(1).randint(INT64_MIN, INT64_MAX) < INT64_MAX, true);
  EXPECT_THAT(error_of([&] { a.uniform(2, 1); }), HasSubstr("[2, 1)"));
  EXPECT_THAT(error_of([&] { a.randint(3, 3); }), HasSubstr("[3, 3) is empty"));
  EXPECT_THAT(error_of([&] { a.normal(0, -1); }), HasSubstr("stddev -1"));
}

TEST(Random, StateRoundTripsAndBadTextIsRefused) {
  pl::Generator g(123);
  g.next_u64();
  const std::string saved = g.state();
  const uint64_t next = g.next_u64();
  pl::Generator other(0);
  other.set_state(saved);
  EXPECT_EQ(other.next_u64(), next);
  EXPECT_EQ(other.state(), g.state());

  const std::string before = other.state();
  EXPECT_THAT(error_of([&] { other.set_state("not a state"); }), HasSubstr("'not a state' is not a generator state"));
  EXPECT_THAT(error_of([&] { other.set_state(saved + " trailing"); }), HasSubstr("not a generator state"));
  EXPECT_THAT(error_of([&] { other.set_state(""); }), HasSubstr("not a generator state"));
  EXPECT_EQ(other.state(), before);  // unchanged by the failures
}

TEST(Random, SeedEverythingSeedsBothGeneratorsAndExportsTheSeed) {
  EXPECT_EQ(pl::seed_everything(77), 77u);
  EXPECT_TRUE(pl::has_seed());
  EXPECT_EQ(pl::current_seed(), 77u);
  EXPECT_STREQ(std::getenv("PL_GLOBAL_SEED"), "77");
  pl::Generator global(77), rank0(pl::derive_seed(77, 1)), rank3(pl::derive_seed(77, 4));
  EXPECT_EQ(pl::global_generator().next_u64(), global.next_u64());
  EXPECT_EQ(pl::rank_generator().next_u64(), rank0.next_u64());
  pl::set_seed_rank(3);
  EXPECT_EQ(pl::rank_generator().next_u64(), rank3.next_u64());
  pl::seed_everything(77);  // keeps the rank
  EXPECT_EQ(pl::rank_generator().state(), pl::Generator(pl::derive_seed(77, 4)).state());
  EXPECT_THAT(error_of([] { pl::set_seed_rank(-1); }), HasSubstr("rank -1"));
  pl::set_seed_rank(0);

  EXPECT_NE(pl::derive_seed(77, 1), pl::derive_seed(77, 2));
  EXPECT_NE(pl::derive_seed(77, 1), pl::derive_seed(78, 1));
  EXPECT_EQ(pl::derive_seed(77, 1), pl::derive_seed(77, 1));
}

// A fresh process (a death test re-runs this test alone) that finds PL_GLOBAL_SEED in its
// environment adopts it on first use.
TEST(RandomDeathTest, EnvironmentSeedIsAdoptedLazily) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("PL_GLOBAL_SEED", "4242", 1);
        const bool ok = pl::has_seed() && pl::current_seed() == 4242 &&
                        pl::global_generator().next_u64() == pl::Generator(4242).next_u64();
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        ::setenv("PL_GLOBAL_SEED", "12abc", 1);
        try {
          pl::has_seed();
        } catch (const pl::Error& e) {
          std::exit(std::string(e.what()).find("PL_GLOBAL_SEED '12abc'") != std::string::npos ? 0 : 2);
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0), "");
}
