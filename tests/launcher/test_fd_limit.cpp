// plrun's raise of the soft RLIMIT_NOFILE to the hard limit (launcher/fd_limit.hpp), in this test
// process: the limit is lowered first and put back after.  plrun itself: test_plrun.cpp.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "fd_limit.hpp"

namespace {

using plrt::launcher::raise_fd_limit;

class FdLimit : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &original_), 0); }
  void TearDown() override { ::setrlimit(RLIMIT_NOFILE, &original_); }
  rlimit original_{};
};

TEST_F(FdLimit, ALowSoftLimitIsRaisedToTheHardOne) {
  if (original_.rlim_max <= 64) GTEST_SKIP() << "the hard limit is already " << original_.rlim_max;
  rlimit low{64, original_.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  auto r = raise_fd_limit();
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.before, 64u);
  EXPECT_EQ(r.hard, original_.rlim_max);
  EXPECT_EQ(r.soft, original_.rlim_max);
  rlimit now{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, original_.rlim_max);
  EXPECT_EQ(now.rlim_max, original_.rlim_max);
}

TEST_F(FdLimit, AlreadyAtTheHardLimitNothingChanges) {
  rlimit full{original_.rlim_max, original_.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &full), 0);
  auto r = raise_fd_limit();
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.before, original_.rlim_max);
  EXPECT_EQ(r.soft, original_.rlim_max);
}

}  // namespace
