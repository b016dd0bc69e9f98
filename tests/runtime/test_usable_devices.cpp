// The usable-device check through the runtime: pl_find_usable_devices and pl::find_usable_cuda_devices
// on simulated machines (PL_CUDA_DEVICE_TABLE), devices="usable:N" in job resolution, and the real
// probe: without a GPU (zero devices and the reason, quickly, no child left), and with a scripted
// cuda plugin that hangs, crashes or refuses on cue (the deadline, the kill, the reaping).
#include "test_support.hpp"

#include <plrt/sdk/usable_devices.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using plrt_test::error_of;
using plrt_test::isolated;

namespace {

// Sets (or unsets, with nullptr) an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

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
  int32_t ids[16];
  size_t count = 99;
  pl::check(pl_find_usable_devices(rt.get(), accelerator, n, o, ids, 16, &count));
  return {ids, ids + count};
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

// ---- a simulated machine ----

TEST(UsableDevices, CApiOnASimulatedMachine) {
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
  EXPECT_THAT(msg, HasSubstr("1 'NVIDIA H100 80GB HBM3' (busy: 3.2 GiB used by other processes"));
  EXPECT_THAT(msg, HasSubstr("2 'NVIDIA H100 80GB HBM3' (exclusive mode, held by another process (pid 77))"));
  EXPECT_THAT(msg, HasSubstr("3 'NVIDIA H100 80GB HBM3' (busy: 87% utilization)"));
  EXPECT_THAT(error_of([&] { find(rt, 6); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("you requested 6 devices but this machine has only 5 visible CUDA devices"));
}

TEST(UsableDevices, CApiArguments) {
  TempFile table(kFiveGpus);
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  EXPECT_THAT(error_of([&] { find(rt, 1, nullptr, "tpu"); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("accelerator='tpu' has no usable-device check; valid: cuda, gpu"));
  EXPECT_THAT(error_of([&] { find(rt, 1, nullptr, "cpu"); }, PL_ERR_INVALID_ARGUMENT), HasSubstr("valid: cuda, gpu"));
  size_t count = 0;
  EXPECT_THAT(error_of([&] { pl::check(pl_find_usable_devices(rt.get(), "cuda", 1, nullptr, nullptr, 0, nullptr)); },
                       PL_ERR_INVALID_ARGUMENT),
              HasSubstr("out_count is NULL"));
  // Count only, then a buffer too small: the count is still reported.
  pl::check(pl_find_usable_devices(rt.get(), "cuda", -1, nullptr, nullptr, 0, &count));
  EXPECT_EQ(count, 2u);
  int32_t one[1];
  count = 0;
  EXPECT_THAT(error_of([&] { pl::check(pl_find_usable_devices(rt.get(), "cuda", -1, nullptr, one, 1, &count)); },
                       PL_ERR_INVALID_ARGUMENT),
              HasSubstr("capacity 1 is less than the 2 devices found"));
  EXPECT_EQ(count, 2u);
  EXPECT_THAT(error_of([&] { pl::check(pl_find_usable_devices(rt.get(), "cuda", 1, nullptr, nullptr, 4, &count)); },
                       PL_ERR_INVALID_ARGUMENT),
              HasSubstr("out_ids is NULL with capacity 4"));
}

TEST(UsableDevices, ThresholdsFromOptionsAndEnvironment) {
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
  EXPECT_THAT(error_of([&] { find(rt, 0); }, PL_ERR_INVALID_ARGUMENT), HasSubstr("PL_USABLE_MAX_UTILIZATION"));
}

TEST(UsableDevices, MalformedSimulatedTableIsNamed) {
  TempFile table(R"({"devices": [{"name": "A"}, {"compute_mode": "shared"}]})");
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  auto msg = error_of([&] { find(rt, 1); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("PL_CUDA_DEVICE_TABLE=" + table.path() + ": devices[1].compute_mode is \"shared\""));
  ScopedEnv missing("PL_CUDA_DEVICE_TABLE", "/nonexistent/table.json");
  EXPECT_THAT(error_of([&] { find(rt, 1); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("PL_CUDA_DEVICE_TABLE=/nonexistent/table.json: cannot read the file"));
}

TEST(UsableDevices, Sdk) {
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

TEST(UsableDevices, ParseDevicesAloneRefusesTheUsableForm) {
  PL_DeviceSpec s{};
  s.struct_size = sizeof s;
  s.kind = PL_DEVICES_STRING;
  s.string = "usable:2";
  size_t n = 0;
  EXPECT_THAT(error_of([&] { pl::check(pl_parse_devices(&s, "cuda", 4, 0, nullptr, 0, &n)); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("devices='usable:2' picks free CUDA devices"));
}

#ifdef PLRT_HAVE_CUDA
// devices="usable:N" in job resolution needs the cuda plugin (built here, with or without a GPU).
TEST(UsableDevices, ResolvingAJob) {
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
  r.devices = pl::Devices::from_text("usable:2");
  r.assume_device_count = 4;
  EXPECT_THAT(error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("devices='usable:2': usable needs the real devices"));
  r.assume_device_count = -1;
  r.accelerator = "cpu";
  EXPECT_THAT(error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("finds free CUDA devices, but the accelerator is 'cpu'"));
}

TEST(UsableDevices, ResolvingWhenEveryDeviceIsTaken) {
  TempFile table(R"({"devices": [{"name": "A", "compute_mode": "prohibited"}, {"name": "B", "utilization_percent": 50}]})");
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", table.path().c_str());
  auto rt = make_runtime();
  pl::JobRequest r;
  r.devices = pl::Devices::from_text("usable");
  auto msg = error_of([&] { rt.resolve(r); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("devices='usable': none of the 2 visible CUDA devices is usable now"));
  EXPECT_THAT(msg, HasSubstr("0 'A' (compute mode prohibited"));
  EXPECT_THAT(msg, HasSubstr("1 'B' (busy: 50% utilization)"));
}
#endif

// ---- the real probe ----

TEST(UsableProbe, WithoutAGpuZeroDevicesAndTheReason) {
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

TEST(UsableProbe, WithoutTheCudaPluginTheReasonSaysSo) {
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", nullptr);
  auto rt = make_runtime({PLRT_TEST_PLUGIN_DIR});
  EXPECT_THAT(error_of([&] { find(rt, 1); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("no CUDA device is visible (no cuda accelerator plugin: "));
}

TEST(UsableProbe, ContextsAreMadeInAChildProcess) {
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", nullptr);
  ScopedEnv script("PLRT_SCRIPTED_CUDA", "ok,refuse,allocfail,ok");
  TempFile log("");
  ScopedEnv log_env("PLRT_SCRIPTED_CUDA_LOG", log.path().c_str());
  auto rt = make_runtime({PLRT_SCRIPTED_CUDA_DIR});
  EXPECT_THAT(find(rt, 2), ElementsAre(0, 3));
  auto msg = error_of([&] { find(rt, 3); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("1 (cannot create a context: cuda: cudaSetDevice failed: cudaErrorDevicesUnavailable"));
  EXPECT_THAT(msg, HasSubstr("2 'Scripted GPU 2' (cannot create a context: cuda: cudaMalloc(1 bytes) failed"));
  EXPECT_FALSE(has_children());
  std::ifstream f(log.path());
  long pid = 0;
  int index = 0, calls = 0;
  while (f >> pid >> index) {
    ++calls;
    EXPECT_NE(pid, static_cast<long>(::getpid())) << "device " << index << " was touched in the calling process";
  }
  EXPECT_EQ(calls, 8);  // 4 devices, 2 probes
}

TEST(UsableProbe, AHungDeviceIsStoppedAtTheDeadlineAndNamed) {
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", nullptr);
  ScopedEnv script("PLRT_SCRIPTED_CUDA", "ok,hang,ok");
  auto rt = make_runtime({PLRT_SCRIPTED_CUDA_DIR});
  PL_UsableDeviceOptions o{};
  o.struct_size = sizeof o;
  o.probe_timeout_ms = 700;
  const auto start = plrt_test::Clock::now();
  EXPECT_THAT(find(rt, 1, &o), ElementsAre(0));
  auto msg = error_of([&] { find(rt, 2, &o); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_LT(plrt_test::Clock::now() - start, std::chrono::seconds(5));
  EXPECT_THAT(msg, HasSubstr("1 (cannot create a context: no answer within 700 ms (the probe was stopped))"));
  EXPECT_THAT(msg, HasSubstr("2 (cannot create a context: no answer within 700 ms"));
  EXPECT_FALSE(has_children()) << "the hung probe was not killed and reaped";
}

TEST(UsableProbe, ACrashingDeviceIsNamed) {
  ScopedEnv sim("PL_CUDA_DEVICE_TABLE", nullptr);
  ScopedEnv script("PLRT_SCRIPTED_CUDA", "ok,crash");
  auto rt = make_runtime({PLRT_SCRIPTED_CUDA_DIR});
  EXPECT_THAT(find(rt, -1), ElementsAre(0));
  EXPECT_THAT(error_of([&] { find(rt, 2); }, PL_ERR_INVALID_ARGUMENT),
              HasSubstr("1 (cannot create a context: the probe died with signal 6 (SIGABRT))"));
  EXPECT_FALSE(has_children());
}
