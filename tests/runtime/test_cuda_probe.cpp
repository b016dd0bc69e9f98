// The cuda accelerator's device probe as a process (device_probe.hpp), with bodies that behave on
// cue where no GPU would: the body runs in a child, what it said before it hung or died is kept,
// the devices it did not reach are named with the reason, the deadline holds, and no child is left
// behind (killed and reaped).  The real body (probe_child.cpp) runs in test_usable_devices.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "device_probe.hpp"
#include "plugin_support.hpp"

using namespace plrt::cuda;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kShort{700};

bool has_children() {  // any child of this process, running or a zombie
  return ::waitpid(-1, nullptr, WNOHANG) != -1 || errno != ECHILD;
}

DeviceRecord named(int32_t i, const std::string& name) {
  DeviceRecord d;
  d.index = i;
  d.name = name;
  d.compute_mode = ComputeMode::kDefault;
  return d;
}

template <class Fn>
plrt::plugin::Failure failure_of(Fn&& fn) {
  try {
    fn();
  } catch (const plrt::plugin::Failure& f) {
    return f;
  }
  ADD_FAILURE() << "expected an error";
  return plrt::plugin::Failure(PL_ERR_OK, "");
}

}  // namespace

TEST(CudaProbe, TheBodyRunsInAChildAndEveryDeviceComesBack) {
  const long parent = static_cast<long>(::getpid());
  DeviceTable t = run_probe(
      [](ProbeSink& sink) {
        sink.header(3, "", {"a note from pid " + std::to_string(::getpid())});
        sink.device(named(0, "A"));
        sink.note("between devices");
        auto b = named(1, "B");
        b.processes = {{4242, uint64_t(1) << 30}};
        b.utilization_percent = 50;
        sink.device(b);
        auto c = named(2, "C");
        c.context_ok = false;
        c.context_error = "cudaErrorDevicesUnavailable";
        sink.device(c);
      },
      kShort);
  ASSERT_EQ(t.devices.size(), 3u);
  EXPECT_EQ(t.devices[0].name, "A");
  EXPECT_EQ(t.devices[1].processes[0].pid, 4242);
  EXPECT_EQ(t.devices[1].utilization_percent, 50.0);
  EXPECT_FALSE(t.devices[2].context_ok);
  EXPECT_EQ(t.devices[2].context_error, "cudaErrorDevicesUnavailable");
  ASSERT_EQ(t.notes.size(), 2u);
  EXPECT_THAT(t.notes[0], HasSubstr("a note from pid "));
  EXPECT_NE(t.notes[0], "a note from pid " + std::to_string(parent)) << "the body ran in the calling process";
  EXPECT_EQ(t.notes[1], "between devices");
  EXPECT_FALSE(has_children()) << "the probe child was not reaped";
}

TEST(CudaProbe, NoDeviceKeepsTheReason) {
  DeviceTable t =
      run_probe([](ProbeSink& sink) { sink.header(0, "cudaErrorNoDevice: no CUDA-capable device", {}); }, kShort);
  EXPECT_TRUE(t.devices.empty());
  EXPECT_EQ(t.reason, "cudaErrorNoDevice: no CUDA-capable device");
}

TEST(CudaProbe, AHungDeviceIsStoppedAtTheDeadlineAndNamed) {
  const auto start = Clock::now();
  DeviceTable t = run_probe(
      [](ProbeSink& sink) {
        sink.header(3, "", {});
        sink.device(named(0, "A"));
        ::sleep(120);  // device 1 hangs
      },
      kShort);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  ASSERT_EQ(t.devices.size(), 3u);
  EXPECT_TRUE(t.devices[0].context_ok);
  for (int i : {1, 2}) {
    EXPECT_FALSE(t.devices[i].context_ok);
    EXPECT_EQ(t.devices[i].context_error, "no answer within 700 ms (the probe was stopped)");
  }
  EXPECT_FALSE(has_children()) << "the hung probe was not killed and reaped";
}

TEST(CudaProbe, ACrashingDeviceIsNamed) {
  DeviceTable t = run_probe(
      [](ProbeSink& sink) {
        sink.header(2, "", {});
        sink.device(named(0, "A"));
        std::abort();  // device 1 takes the driver down
      },
      kShort);
  ASSERT_EQ(t.devices.size(), 2u);
  EXPECT_TRUE(t.devices[0].context_ok);
  EXPECT_EQ(t.devices[1].context_error, "the probe died with signal 6 (SIGABRT)");
  EXPECT_FALSE(has_children());
}

TEST(CudaProbe, AnEarlyExitNamesTheDevicesNotReached) {
  DeviceTable t = run_probe([](ProbeSink& sink) { sink.header(2, "", {}); }, kShort);
  ASSERT_EQ(t.devices.size(), 2u);
  EXPECT_EQ(t.devices[0].context_error, "the probe ended before reaching this device");
  t = run_probe(
      [](ProbeSink& sink) {
        sink.header(1, "", {});
        ::_exit(5);
      },
      kShort);
  EXPECT_EQ(t.devices.at(0).context_error, "the probe exited with code 5");
}

TEST(CudaProbe, NoHeaderIsAnError) {
  auto f = failure_of([] { run_probe([](ProbeSink&) { throw std::runtime_error("nvml exploded"); }, kShort); });
  EXPECT_EQ(f.code, PL_ERR_RUNTIME);
  EXPECT_THAT(f.message, HasSubstr("the CUDA device probe failed: nvml exploded"));

  f = failure_of([] { run_probe([](ProbeSink&) { ::sleep(120); }, kShort); });
  EXPECT_EQ(f.code, PL_ERR_TIMEOUT);
  EXPECT_THAT(f.message, HasSubstr("did not say how many devices there are: no answer within 700 ms"));

  f = failure_of([] { run_probe([](ProbeSink&) { std::abort(); }, kShort); });
  EXPECT_EQ(f.code, PL_ERR_RUNTIME);
  EXPECT_THAT(f.message, HasSubstr("did not say how many devices there are: the probe died with signal 6 (SIGABRT)"));

  f = failure_of([] { run_probe([](ProbeSink&) {}, kShort); });
  EXPECT_THAT(f.message, HasSubstr("did not say how many devices there are: it sent nothing"));
  EXPECT_FALSE(has_children());
}
