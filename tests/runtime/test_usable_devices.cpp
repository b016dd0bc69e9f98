// The usable-device check through the runtime: pl_find_usable_devices, pl::find_usable_cuda_devices
// and devices="usable:N" in job resolution.  The real cuda plugin's device_status on simulated
// machines (PL_CUDA_DEVICE_TABLE) and on this one (without a GPU: zero devices and the reason,
// quickly, no child left, no CUDA in this process); scripted accelerators (scripted_cuda.c) for
// the runtime's side: the options it passes, odd answers, and an accelerator without
// device_status, whose every device is usable.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <plrt/sdk/usable_devices.hpp>
#include <sstream>

#include "test_support.hpp"
#include "unit_support.hpp"

using plrt_test::error_of;
using plrt_test::isolated;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

using plrt_test::ScopedEnv;

namespace {

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char path[] = "/tmp/plrt-usable-XXXXXX";
    int fd = ::mkstemp(path);
    ::close(fd);
    path_ = path;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Five H100s: 0 and 4 free, 1 busy with 3.2 GiB of another process, 2 held in exclusive mode,
// 3 at 87% utilization.
const char* kFiveGpus = R"({"devices": [
  {"name": "NVIDIA H100 80GB HBM3", "compute_mode": "default", "utilization_percent": 0},
  {"name": "NVIDIA H100 80GB HBM3", "processes": [{"pid": 4242, "used_bytes": 3435973837}], "utilization_percent": 3},
  {"name": "NVIDIA H100 80GB HBM3", "compute_mode": "exclusive_process", "processes": [{"pid": 77}],
   "context_ok": false, "context_error": "cudaErrorDevicesUnavailable: busy or unavailable"},
  {"name": "NVIDIA H100 80GB HBM3", "utilization_percent": 87},
  {"name": "NVIDIA H100 80GB HBM3"}
]})";

pl::Runtime make_runtime(std::vector<std::string> dirs = {PLRT_TEST_PLUGIN_DIR, PLRT_BUILD_PLUGIN_DIR}) {
  return pl::Runtime(isolated(std::move(dirs)));
}

// The C API, returning the ids or throwing pl::Error.
std::vector<int32_t> find(const pl::Runtime& rt, int32_t n, const PL_UsableDeviceOptions* o = nullptr,
                          const char* accelerator = "cuda") {
  std::vector<int32_t> ids(512);
  size_t count = 99;
  pl::check(pl_find_usable_devices(rt.get(), accelerator, n, o, ids.data(), ids.size(), &count));
  ids.resize(count);
  return ids;
}

// The scripted accelerators' call log (PLRT_SCRIPTED_CUDA_LOG): one "<pid> <capacity>" per call.
std::vector<std::pair<long, size_t>> calls_in(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::pair<long, size_t>> calls;
  long pid = 0;
  size_t capacity = 0;
  while (f >> pid >> capacity) calls.emplace_back(pid, capacity);
  return calls;
}

bool has_children() {  // any child of this process, running or a zombie
  return ::waitpid(-1, nullptr, WNOHANG) != -1 || errno != ECHILD;
}

std::string maps() {
  std::ifstream f("/proc/self/maps");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

// ---- the runtime's side, on scripted accelerators (no GPU, no nvcc needed) ----

TEST(UsableDevices, TheAcceleratorJudgesAndTheRuntimeSelects) {
  ScopedEnv script("PLRT_SCRIPTED_CUDA", "ok,busy,ok,quiet");
  TempFile log("");
  ScopedEnv log_env("PLRT_SCRIPTED_CUDA_LOG", log.path().c_str());
  auto rt = make_runtime({PLRT_SCRIPTED_CUDA_DIR});
  EXPECT_THAT(find(rt, 2), ElementsAre(0, 2));
  EXPECT_THAT(find(rt, -1), ElementsAre(0, 2));
  EXPECT_THAT(find(rt, 1, nullptr, nullptr), ElementsAre(0));  // NULL = PL_USABLE_DEFAULT_ACCELERATOR
  auto msg = error_of([&] { find(rt, 3); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("find_usable_devices(3): you requested 3 usable devices but only 2 of the 4 visible CUDA "
                             "devices are usable ([0, 2]); occupied: 1 'Scripted GPU 1' (scripted busy); "
                             "3 'Scripted GPU 3' (occupied (cuda gave no reason))"));
  EXPECT_THAT(error_of([&] { find(rt, 5); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("you requested 5 devices but this machine has only 4 visible CUDA devices"));
  // One device_status call per check, in this process (the plugin decides where it probes), with
  // room for any machine; none for 0 devices or a bad count.
  EXPECT_THAT(find(rt, 0), IsEmpty());
  EXPECT_THAT(error_of([&] { find(rt, -2); }, PL_ERR_INVALID_ARGUMENT), HasSubstr("-2 is not a number of devices"));
  const auto calls = calls_in(log.path());
  ASSERT_EQ(calls.size(), 5u);
  for (const auto& [pid, capacity] : calls) {
    EXPECT_EQ(pid, static_cast<long>(::getpid()));
    EXPECT_EQ(capacity, 256u);
  }
}

TEST(UsableDevices, TheOptionsReachTheAccelerator) {
  ScopedEnv script("PLRT_SCRIPTED_CUDA", "busy");
  auto rt = make_runtime({PLRT_SCRIPTED_CUDA_DIR});
  PL_UsableDeviceOptions o{};
  o.struct_size = sizeof o;
  EXPECT_THAT(error_of([&] { find(rt, 1, &o); }, PL_ERR_INVALID_ARGUMENT), HasSubstr("(scripted busy)"));  // none set
  o.has_max_utilization = 1;
  o.max_utilization_percent = 90;
  o.has_max_foreign_memory = 1;
  o.max_foreign_memory_mb = 0;
  o.probe_timeout_ms = 700;
  EXPECT_THAT(error_of([&] { find(rt, 1, &o); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("(scripted busy [max_utilization=90] [max_foreign_memory_mb=0] [probe_timeout_ms=700])"));
  // Bad fields are the runtime's to refuse, before the accelerator is asked.
  TempFile log("");
  ScopedEnv log_env("PLRT_SCRIPTED_CUDA_LOG", log.path().c_str());
  o.max_utilization_percent = 101;
  EXPECT_THAT(error_of([&] { find(rt, 1, &o); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("PL_UsableDeviceOptions.max_utilization_percent is 101; valid: a percentage from 0 to 100"));
  o.max_utilization_percent = 5;
  o.struct_size = 8;
  EXPECT_THAT(error_of([&] { find(rt, 1, &o); }, PL_ERR_VERSION), HasSubstr("PL_UsableDeviceOptions.struct_size 8"));
  EXPECT_THAT(calls_in(log.path()), IsEmpty());
}

TEST(UsableDevices, OddAnswersAreNamed) {
  auto rt = make_runtime({PLRT_SCRIPTED_CUDA_DIR});
  {
    ScopedEnv script("PLRT_SCRIPTED_CUDA", "fail,ok");
    EXPECT_THAT(error_of([&] { find(rt, 1); }, PL_ERR_RUNTIME),
                HasSubstr("find_usable_devices(1): scripted: device_status failed on cue"));
  }
  {
    ScopedEnv script("PLRT_SCRIPTED_CUDA", "misorder,ok");
    EXPECT_THAT(error_of([&] { find(rt, 1); }, PL_ERR_INTERNAL),
                HasSubstr("accelerator 'cuda' reported device 1 in place 0 (device_status lists them in index order)"));
  }
  {
    ScopedEnv script("PLRT_SCRIPTED_CUDA", "grow");
    EXPECT_THAT(error_of([&] { find(rt, 1); }, PL_ERR_INTERNAL),
                HasSubstr("accelerator 'cuda' reported 258 devices with room for 257, twice"));
  }
  {
    ScopedEnv script("PLRT_SCRIPTED_CUDA", nullptr);  // device_status counts 0 and says nothing more
    EXPECT_THAT(error_of([&] { find(rt, -1); }, PL_ERR_INVALID_ARGUMENT),
                HasSubstr("find_usable_devices(-1): no CUDA device is visible"));
  }
  {
    // More devices than the first buffer holds: asked again with room for all of them.
    ScopedEnv script("PLRT_SCRIPTED_CUDA", "many:300");
    TempFile log("");
    ScopedEnv log_env("PLRT_SCRIPTED_CUDA_LOG", log.path().c_str());
    const auto ids = find(rt, -1);
    ASSERT_EQ(ids.size(), 300u);
    EXPECT_EQ(ids.back(), 299);
    const auto calls = calls_in(log.path());
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[0].second, 256u);
    EXPECT_EQ(calls[1].second, 300u);
  }
}

TEST(UsableDevices, WithoutDeviceStatusEveryCountedDeviceIsUsable) {
  ScopedEnv script("PLRT_SCRIPTED_CUDA", "ok,busy,quiet");
  TempFile log("");
  ScopedEnv log_env("PLRT_SCRIPTED_CUDA_LOG", log.path().c_str());
  auto rt = make_runtime({PLRT_SCRIPTED_CUDA_DIR, PLRT_BUILD_PLUGIN_DIR});
  // "plain" has a device_status pointer past its table's struct_size: it must not be called.
  EXPECT_THAT(find(rt, -1, nullptr, "plain"), ElementsAre(0, 1, 2));
  EXPECT_THAT(find(rt, 2, nullptr, "plain"), ElementsAre(0, 1));
  EXPECT_THAT(calls_in(log.path()), IsEmpty());
  EXPECT_THAT(error_of([&] { find(rt, 4, nullptr, "plain"); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("you requested 4 devices but this machine has only 3 visible PLAIN devices"));
  // The cpu accelerator has no device_status: its one device (the host) is usable.
  EXPECT_THAT(find(rt, 1, nullptr, "cpu"), ElementsAre(0));
  EXPECT_THAT(find(rt, -1, nullptr, "cpu"), ElementsAre(0));
  EXPECT_THAT(
      error_of([&] { find(rt, 2, nullptr, "cpu"); }, PL_ERR_INVALID_ARGUMENT),
      HasSubstr("find_usable_devices(2): you requested 2 devices but this machine has only 1 visible CPU device"));
  ScopedEnv none("PLRT_SCRIPTED_CUDA", nullptr);
  EXPECT_THAT(error_of([&] { find(rt, 1, nullptr, "plain"); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("find_usable_devices(1): no PLAIN device is visible (scripted: no device)"));
}

TEST(UsableDevices, CApiArguments) {
  auto rt = make_runtime();
  EXPECT_THAT(error_of([&] { find(rt, 1, nullptr, "tpu"); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("find_usable_devices(1): no TPU device is visible (no tpu accelerator plugin: "));
  EXPECT_THAT(error_of([&] { find(rt, 1, nullptr, ""); }, PL_ERR_INVALID_ARGUMENT), HasSubstr("accelerator is empty"));
  size_t count = 0;
  EXPECT_THAT(error_of([&] { pl::check(pl_find_usable_devices(rt.get(), "cpu", 1, nullptr, nullptr, 0, nullptr)); },
                       PL_ERR_INVALID_ARGUMENT),
              HasSubstr("out_count is NULL"));
  // Count only, then a buffer too small: the count is still reported.
  pl::check(pl_find_usable_devices(rt.get(), "cpu", -1, nullptr, nullptr, 0, &count));
  EXPECT_EQ(count, 1u);
  ScopedEnv script("PLRT_SCRIPTED_CUDA", "ok,ok");
  auto scripted = make_runtime({PLRT_SCRIPTED_CUDA_DIR});
  int32_t one[1];
  count = 0;
  EXPECT_THAT(error_of([&] { pl::check(pl_find_usable_devices(scripted.get(), "cuda", -1, nullptr, one, 1, &count)); },
                       PL_ERR_INVALID_ARGUMENT),
              HasSubstr("capacity 1 is less than the 2 devices found"));
  EXPECT_EQ(count, 2u);
  EXPECT_THAT(error_of([&] { pl::check(pl_find_usable_devices(rt.get(), "cpu", 1, nullptr, nullptr, 4, &count)); },
                       PL_ERR_INVALID_ARGUMENT),
              HasSubstr("out_ids is NULL with capacity 4"));
}

TEST(UsableDevices, ResolvingAJobOnAnyAccelerator) {
  ScopedEnv script("PLRT_SCRIPTED_CUDA", "ok,busy,ok");
  auto rt = make_runtime({PLRT_SCRIPTED_CUDA_DIR, PLRT_TEST_PLUGIN_DIR, PLRT_BUILD_PLUGIN_DIR});
  pl::JobRequest r;
  r.accelerator = "cuda";
  r.devices = "usable:2";
  r.strategy = "independent_c";
  auto c = rt.resolve(r);
  EXPECT_EQ(c.accelerator, "cuda");
  EXPECT_THAT(c.devices, ElementsAre(0, 2));
  EXPECT_EQ(c.world_size, 2);
  r.accelerator = "auto";  // usable asks the default accelerator
  r.devices = pl::Devices::from_text("usable");
  EXPECT_THAT(rt.resolve(r).devices, ElementsAre(0, 2));
  r.devices = pl::Devices::from_text("usable:3");
  EXPECT_THAT(error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("devices='usable:3': you requested 3 usable devices but only 2 of the 3 visible CUDA devices "
                        "are usable ([0, 2]); occupied: 1 'Scripted GPU 1' (scripted busy)"));
  // An accelerator without device_status: every device it counts (cpu: the host).
  r.accelerator = "cpu";
  r.devices = pl::Devices::from_text("usable:1");
  c = rt.resolve(r);
  EXPECT_EQ(c.accelerator, "cpu");
  EXPECT_THAT(c.devices, ElementsAre(0));
  r.devices = pl::Devices::from_text("usable:2");
  EXPECT_THAT(error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("devices='usable:2': you requested 2 devices but this machine has only 1 visible CPU device"));
  r.devices = pl::Devices::from_text("usable:2");
  r.assume_device_count = 4;
  EXPECT_THAT(error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("devices='usable:2': usable needs the real devices"));
}

TEST(UsableDevices, ParseDevicesAloneRefusesTheUsableForm) {
  PL_DeviceSpec s{};
  s.struct_size = sizeof s;
  s.kind = PL_DEVICES_STRING;
  s.string = "usable:2";
  size_t n = 0;
  EXPECT_THAT(error_of([&] { pl::check(pl_parse_devices(&s, "cuda", 4, 0, nullptr, 0, &n)); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("devices='usable:2' picks the devices that are free now"));
}

TEST(UsableProbe, WithoutTheCudaPluginTheReasonSaysSo) {
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", nullptr);
  auto rt = make_runtime({PLRT_TEST_PLUGIN_DIR});
  EXPECT_THAT(error_of([&] { find(rt, 1); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("no CUDA device is visible (no cuda accelerator plugin: "));
}

#ifdef PLRT_HAVE_CUDA
// ---- the cuda plugin's device_status on a simulated machine (built here, with or without a GPU) ----

TEST(CudaUsableDevices, CApiOnASimulatedMachine) {
  TempFile table(kFiveGpus);
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  EXPECT_THAT(find(rt, 2), ElementsAre(0, 4));
  EXPECT_THAT(find(rt, 1), ElementsAre(0));
  EXPECT_THAT(find(rt, -1), ElementsAre(0, 4));
  EXPECT_THAT(find(rt, 0), IsEmpty());
  EXPECT_THAT(find(rt, 2, nullptr, "gpu"), ElementsAre(0, 4));
  EXPECT_THAT(find(rt, 2, nullptr, nullptr), ElementsAre(0, 4));  // NULL = cuda

  auto msg = error_of([&] { find(rt, 3); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("find_usable_devices(3): you requested 3 usable devices but only 2 of the 5 visible"));
  EXPECT_THAT(msg, HasSubstr("1 'NVIDIA H100 80GB HBM3' (busy: 3.2 GiB used by other processes (pid 4242: 3.2 GiB), "
                             "more than 1024 MiB (PL_USABLE_MAX_FOREIGN_MEMORY_MB))"));
  EXPECT_THAT(msg, HasSubstr("2 'NVIDIA H100 80GB HBM3' (exclusive mode, held by another process (pid 77))"));
  EXPECT_THAT(
      msg, HasSubstr("3 'NVIDIA H100 80GB HBM3' (busy: 87% utilization, more than 10% (PL_USABLE_MAX_UTILIZATION))"));
  EXPECT_THAT(error_of([&] { find(rt, 6); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("you requested 6 devices but this machine has only 5 visible CUDA devices"));
}

TEST(CudaUsableDevices, ThresholdsFromOptionsAndEnvironment) {
  TempFile table(kFiveGpus);
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  PL_UsableDeviceOptions o{};
  o.struct_size = sizeof o;
  o.has_max_utilization = 1;
  o.max_utilization_percent = 90;  // device 3 (87%) becomes usable
  EXPECT_THAT(find(rt, -1, &o), ElementsAre(0, 3, 4));
  {
    ScopedEnv mem("PL_USABLE_MAX_FOREIGN_MEMORY_MB", "4096");  // device 1 (3.2 GiB) too
    EXPECT_THAT(find(rt, -1, &o), ElementsAre(0, 1, 3, 4));
    ScopedEnv util("PL_USABLE_MAX_UTILIZATION", "2");  // the option still wins over the environment
    EXPECT_THAT(find(rt, -1, &o), ElementsAre(0, 1, 3, 4));
    EXPECT_THAT(find(rt, -1), ElementsAre(0, 4));  // without it: 1 is at 3% > 2%
  }
  ScopedEnv bad("PL_USABLE_MAX_UTILIZATION", "lots");
  EXPECT_THAT(error_of([&] { find(rt, 1); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("PL_USABLE_MAX_UTILIZATION='lots' is not a number"));
  EXPECT_THAT(find(rt, 0), IsEmpty());  // 0 asks for nothing, so the device_status is not asked either
  // An option the runtime passes on is checked by the plugin, and named.
  o = {};
  o.struct_size = sizeof o;
  o.probe_timeout_ms = int64_t(1) << 40;
  EXPECT_THAT(error_of([&] { find(rt, 1, &o); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("find_usable_devices(1): cuda: device_status option probe_timeout_ms='1099511627776' is "
                        "1099511627776; valid: a whole number of milliseconds"));
}

TEST(CudaUsableDevices, MalformedSimulatedTableIsNamed) {
  TempFile table(R"({"devices": [{"name": "A"}, {"compute_mode": "shared"}]})");
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  auto msg = error_of([&] { find(rt, 1); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("PL_CUDA_DEVICE_TABLE=" + table.path() + ": devices[1].compute_mode is \"shared\""));
  ScopedEnv missing("PL_CUDA_DEVICE_TABLE", "/nonexistent/table.json");
  EXPECT_THAT(error_of([&] { find(rt, 1); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("PL_CUDA_DEVICE_TABLE=/nonexistent/table.json: cannot read the file"));
  TempFile empty(R"({"devices": [], "reason": "a login node"})");
  ScopedEnv none("PL_CUDA_DEVICE_TABLE", empty.path().c_str());
  EXPECT_THAT(error_of([&] { find(rt, -1); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("find_usable_devices(-1): no CUDA device is visible (a login node); --accelerator cpu runs "
                        "on the CPU instead"));
}

TEST(CudaUsableDevices, Sdk) {
  TempFile table(kFiveGpus);
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  EXPECT_THAT(pl::find_usable_cuda_devices(rt, 2), ElementsAre(0, 4));
  EXPECT_THAT(pl::find_usable_cuda_devices(rt), ElementsAre(0, 4));
  pl::UsableDeviceOptions o;
  o.max_foreign_memory_mb = 8192;
  o.max_utilization_percent = 100;
  EXPECT_THAT(pl::find_usable_cuda_devices(rt, -1, o), ElementsAre(0, 1, 3, 4));
  EXPECT_THAT(error_of([&] { pl::find_usable_cuda_devices(rt, 3); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("exclusive mode, held by another process"));
  EXPECT_TRUE(pl::is_usable_devices_text(" usable:2"));
  EXPECT_TRUE(pl::is_usable_devices_text("usable"));
  EXPECT_FALSE(pl::is_usable_devices_text("[1, 3]"));
  EXPECT_FALSE(pl::is_usable_devices_text("usablex"));
}

TEST(CudaUsableDevices, ResolvingAJob) {
  TempFile table(kFiveGpus);
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  pl::JobRequest r;
  r.accelerator = "cuda";
  r.devices = "usable:2";
  r.strategy = "independent_c";
  auto c = rt.resolve(r);
  EXPECT_EQ(c.accelerator, "cuda");
  EXPECT_THAT(c.devices, ElementsAre(0, 4));
  EXPECT_EQ(c.world_size, 2);
  r.accelerator = "auto";  // usable means cuda
  r.devices = pl::Devices::from_text("usable");
  EXPECT_THAT(rt.resolve(r).devices, ElementsAre(0, 4));
  r.accelerator = "gpu";  // the alias
  r.devices = pl::Devices::from_text("usable:1");
  r.strategy = "auto";
  EXPECT_THAT(rt.resolve(r).devices, ElementsAre(0));

  r.devices = pl::Devices::from_text("usable:3");
  r.strategy = "independent_c";
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("devices='usable:3': you requested 3 usable devices but only 2"));
  EXPECT_THAT(msg, HasSubstr("1 'NVIDIA H100 80GB HBM3' (busy: 3.2 GiB"));
  r.devices = pl::Devices::from_text("usable:0");
  EXPECT_THAT(error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT), HasSubstr("selects no device"));
}

TEST(CudaUsableDevices, ResolvingWhenEveryDeviceIsTaken) {
  TempFile table(
      R"({"devices": [{"name": "A", "compute_mode": "prohibited"}, {"name": "B", "utilization_percent": 50}]})");
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  pl::JobRequest r;
  r.devices = pl::Devices::from_text("usable");
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("devices='usable': none of the 2 visible CUDA devices is usable now"));
  EXPECT_THAT(msg, HasSubstr("0 'A' (compute mode prohibited"));
  EXPECT_THAT(msg, HasSubstr("1 'B' (busy: 50% utilization, more than 10%"));
}

// ---- the cuda plugin's real probe, on this machine ----

TEST(CudaUsableProbe, WithoutAGpuZeroDevicesAndTheReason) {
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", nullptr);
  auto rt = make_runtime();
  const auto start = plrt_test::Clock::now();
  size_t count = 0;
  PL_Error* e = pl_find_usable_devices(rt.get(), "cuda", 1, nullptr, nullptr, 0, &count);
  const auto took = plrt_test::Clock::now() - start;
  if (!e) GTEST_SKIP() << "this machine has a usable GPU";
  const std::string msg = pl_error_message(e);
  pl_error_destroy(e);
  EXPECT_THAT(msg, HasSubstr("find_usable_devices(1): no CUDA device is visible ("));
  EXPECT_LT(took, std::chrono::seconds(5)) << "the probe took too long without a GPU";
  EXPECT_FALSE(has_children()) << "the probe child was not reaped";
  // The probe's CUDA work happened in the child: this process has not loaded the driver.
  EXPECT_THAT(maps(), Not(HasSubstr("libcuda.so")));
  EXPECT_THAT(maps(), Not(HasSubstr("libnvidia-ml.so")));
}

TEST(CudaUsableProbe, WithAGpuTheContextsAreMadeInAChild) {
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", nullptr);
  auto rt = make_runtime();
  size_t count = 0;
  PL_Error* e = pl_find_usable_devices(rt.get(), "cuda", -1, nullptr, nullptr, 0, &count);
  if (e) {
    const std::string msg = pl_error_message(e);
    pl_error_destroy(e);
    GTEST_SKIP() << "no usable GPU here: " << msg;
  }
  EXPECT_FALSE(has_children()) << "the probe child was not reaped";
  EXPECT_THAT(maps(), Not(HasSubstr("libcuda.so"))) << "the probe made a context in the calling process";
  // The devices it found free can be used by this process afterwards.
  std::vector<int32_t> ids(count);
  pl::check(pl_find_usable_devices(rt.get(), "cuda", -1, nullptr, ids.data(), ids.size(), &count));
  EXPECT_EQ(count, ids.size());
}
#endif
