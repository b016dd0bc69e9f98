// plrun as a user runs it: --help, --list-plugins [--json], --dry-run, and exit code 2 with the
// error on stderr for every invalid input (CLI11's parse errors and plugins of another ABI
// included; launching jobs: test_launch_*.cpp beside this file; a worker's own bad input:
// tests/training/test_exit_codes.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <plrt/pl_abi.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using ::testing::HasSubstr;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

// Runs plrun with `args` (a shell-quoted string), PL_PLUGIN_PATH, PL_LOG_LEVEL and PL_JOB_TOKEN unset
// unless `env` says otherwise.
Result plrun(const std::string& args, const std::string& env = "") {
  char err_path[] = "/tmp/plrun-test-XXXXXX";
  int fd = ::mkstemp(err_path);
  ::close(fd);
  std::string cmd =
      "env -u PL_PLUGIN_PATH -u PL_LOG_LEVEL -u PL_JOB_TOKEN " + env + " " + PLRUN_PATH + " " + args + " 2>" + err_path;
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err_path);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  std::remove(err_path);
  return r;
}

nlohmann::json dry_run(const std::string& args) {
  auto r = plrun("--dry-run " + args);
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

void expect_invalid(const std::string& args, const std::string& message) {
  auto r = plrun(args);
  EXPECT_EQ(r.code, 2) << args << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_THAT(r.err, HasSubstr(message)) << args;
  EXPECT_TRUE(r.out.empty()) << args << ": nothing on stdout when the input is invalid";
}

const std::string kTestPlugins = std::string("--plugin-path ") + PLRT_TEST_PLUGIN_DIR;

}  // namespace

TEST(Plrun, Help) {
  auto r = plrun("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--list-plugins"));
  EXPECT_THAT(r.out, HasSubstr("--dry-run"));
  EXPECT_THAT(r.out, HasSubstr("--assume-device-count"));
  // Launching (tests/launcher runs jobs).
  for (const char* flag : {"--node-rank", "--master-addr", "--master-port", "--grace-period", "--exit-barrier-timeout"})
    EXPECT_THAT(r.out, HasSubstr(flag));
  EXPECT_THAT(r.out, HasSubstr("PL_JOB_TOKEN"));
}

TEST(Plrun, ListPluginsTable) {
  auto r = plrun("--list-plugins");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("KIND"));
  EXPECT_THAT(r.out, HasSubstr("accelerator"));
  EXPECT_THAT(r.out, HasSubstr("cpu"));
  EXPECT_THAT(r.out, HasSubstr("libplrt_accelerator_cpu.so"));
  EXPECT_THAT(r.out, HasSubstr("single_device"));
}

TEST(Plrun, ListPluginsJson) {
  auto r = plrun("--list-plugins --json " + kTestPlugins);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  bool cpu = false, alias = false;
  for (const auto& p : j["plugins"]) {
    if (p["kind"] == "accelerator" && p["name"] == "cpu") {
      cpu = true;
      EXPECT_EQ(p["version"], "0.1.0");
      EXPECT_TRUE(p["alias_of"].is_null());
    }
    if (p["name"] == "independent_c_half") {
      alias = true;
      EXPECT_EQ(p["alias_of"], "independent_c");
    }
  }
  EXPECT_TRUE(cpu);
  EXPECT_TRUE(alias);
  EXPECT_TRUE(j["problems"].empty());
}

TEST(Plrun, DryRunDefaults) {
  auto j = dry_run("");
  EXPECT_EQ(j["accelerator"], "cpu");
  EXPECT_EQ(j["devices"], nlohmann::json::array({0}));
  EXPECT_EQ(j["strategy"], "single_device");
  EXPECT_EQ(j["num_nodes"], 1);
  EXPECT_EQ(j["world_size"], 1);
  EXPECT_EQ(j["process_group_backend"], "gloo");
  EXPECT_EQ(j["precision"], "32-true");
}

TEST(Plrun, DryRunCpuProcessesAndNodes) {
  auto j =
      dry_run(kTestPlugins + " --accelerator cpu --devices 4 --num-nodes 2 --strategy independent_c --precision bf16");
  EXPECT_EQ(j["devices"], nlohmann::json::array({0, 1, 2, 3}));
  EXPECT_EQ(j["world_size"], 8);
  EXPECT_EQ(j["processes_per_node"], 4);
  EXPECT_EQ(j["precision"], "bf16-mixed");
  EXPECT_EQ(j["launch"], "process_per_device");
}

TEST(Plrun, DryRunKeepsTheCommand) {
  auto j = dry_run("-- ./train --epochs 3");
  EXPECT_EQ(j["command"], nlohmann::json::array({"./train", "--epochs", "3"}));
}

TEST(Plrun, InvalidInputsExitTwoWithTheError) {
  expect_invalid("--dry-run --devices 0", "devices=0");
  expect_invalid("--dry-run --devices 1.5", "devices=1.5 is a float");
  expect_invalid("--dry-run --devices true", "is a bool");
  expect_invalid("--dry-run --devices abc", "devices='abc'");
  expect_invalid("--dry-run --devices '[1, 3]'", "not a list of indices");
  expect_invalid("--dry-run --devices -1", "-1");
  expect_invalid("--dry-run --accelerator tpu", "no accelerator plugin named 'tpu'");
  expect_invalid("--dry-run --strategy ddq", "no strategy plugin named 'ddq'");
  expect_invalid("--dry-run --precision 8", "precision='8'");
  expect_invalid("--dry-run --num-nodes 0", "--num-nodes '0': MIN is 0");
  expect_invalid("--dry-run --num-nodes 3:2", "--num-nodes '3:2': MIN 3 is greater than MAX 2");
  expect_invalid("--dry-run --num-nodes two", "--num-nodes");
  expect_invalid("--dry-run --process-group-backend nccl", "needs CUDA devices");
  expect_invalid("--dry-run --assume-device-count -5", "--assume-device-count -5");
  expect_invalid("--dry-run --timeout 0", "--timeout 0 is not valid: give seconds > 0");
  expect_invalid("--dry-run --timeout -2", "--timeout -2 is not valid");
  expect_invalid("--dry-run --timeout inf", "--timeout inf is not valid");
  expect_invalid("--no-such-flag", "--no-such-flag");
  expect_invalid("", "nothing to do");
  expect_invalid("--node-rank 1 -- true", "--node-rank 1 is out of range");
  expect_invalid("--grace-period 6 -- true", "--grace-period 6");
  expect_invalid("--master-port 65536 -- true", "--master-port 65536");
  expect_invalid("--num-nodes 2 --master-addr h -- true", "PL_JOB_TOKEN");
  expect_invalid("-- no-such-program-plrt-abc", "program 'no-such-program-plrt-abc' not found");
}

// What CLI11 refuses: exit 2 (not CLI11's own codes, 105 to 114) with its message naming the flag.
TEST(Plrun, CommandLineErrorsExitTwo) {
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--dry-run --no-such-flag", "--no-such-flag"},        // unknown flag
           {"--dry-run --master-port abc", "abc"},                // not a number
           {"--dry-run --grace-period soon", "soon"},             // not a number (float)
           {"--dry-run --max-restarts 1.5", "1.5"},               // not an integer
           {"--dry-run --devices", "--devices"},                  // missing value
           {"--dry-run --run-id", "--run-id"},                    // missing value
           {"--dry-run --strategy-option", "--strategy-option"},  // missing value
           {"--list-plugins --json=maybe", "--json = maybe"},     // a flag's value not a bool
       }) {
    auto r = plrun(args);
    EXPECT_EQ(r.code, 2) << args << "\nstderr: " << r.err;
    EXPECT_THAT(r.err, HasSubstr(says)) << args;
    EXPECT_THAT(r.err, HasSubstr("plrun: error: ")) << args;
    EXPECT_THAT(r.err, HasSubstr("(see plrun --help)")) << args;
  }
}

// A plugin named on the command line that this runtime cannot use (built for another ABI, refusing
// the host) is bad input too: exit 2 naming the file and why, as --dry-run and when launching.
TEST(Plrun, PluginOfAnotherAbiExitsTwo) {
  for (const auto& [variant, says] : std::vector<std::pair<std::string, std::string>>{
           {"newer_major", "built for plrt plugin ABI 2.3, newer than this runtime's major 1"},
           {"refuses_host", "the plugin refused the host"},
           {"small_table", "PL_StrategyApi table is 16 bytes"},
       }) {
    const std::string flags = std::string("--plugin-path ") + PLRT_TEST_BROKEN_DIR + "/" + variant +
                              " --accelerator cpu --devices 2 --strategy " + variant;
    expect_invalid("--dry-run " + flags, "libplrt_strategy_" + variant + ".so: " + says);
    expect_invalid(flags + " -- echo started", says);
  }
}

TEST(Plrun, PluginPathMustBeAnExistingFolder) {
  const std::string marker = "/tmp/plrun-plugin-path-marker-" + std::to_string(::getpid());
  std::remove(marker.c_str());
  for (const std::string& mode : std::vector<std::string>{"--list-plugins", "--dry-run", "-- touch " + marker}) {
    expect_invalid("--plugin-path /nonexistent-plrt-plugins " + mode,
                   "--plugin-path '/nonexistent-plrt-plugins' does not exist; give an existing folder");
    expect_invalid(kTestPlugins + " --plugin-path /etc/hostname " + mode,
                   "--plugin-path '/etc/hostname' is not a folder");
    expect_invalid("--plugin-path '' " + mode, "--plugin-path '' is empty");
  }
  EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "the program ran despite the bad --plugin-path";
  // An existing folder is fine; a PL_PLUGIN_PATH entry that does not exist is only a warning.
  auto r = plrun(kTestPlugins + " --list-plugins", "PL_PLUGIN_PATH=/nonexistent-plrt-env");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("independent_c"));
  EXPECT_THAT(r.err, HasSubstr("PL_PLUGIN_PATH entry '/nonexistent-plrt-env' does not exist"));
}

TEST(Plrun, Version) {
  auto r = plrun("--version");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("plrun ") + PLRT_EXPECTED_VERSION + "\nruntime " + PLRT_EXPECTED_VERSION +
                       " (libplrt_runtime), plugin ABI " + std::to_string(PL_ABI_MAJOR) + "." +
                       std::to_string(PL_ABI_MINOR) + "\n");
  EXPECT_THAT(plrun("--help").out, HasSubstr("--version"));
}

TEST(Plrun, DryRunShowsTheStrategyOptions) {
  auto ddp = dry_run(
      "--accelerator cpu --devices 2 --strategy ddp --strategy-option bucket_cap_mb=10 "
      "--strategy-option pg.probe_ms=500 --strategy-option bucket_cap_mb=5");  // the later one wins
  EXPECT_EQ(ddp["strategy_options"], nlohmann::json({{"bucket_cap_mb", "5"}, {"pg.probe_ms", "500"}}));
  // After an alias's presets, overriding them; a value keeps its '=' and spaces.
  auto alias = dry_run(kTestPlugins +
                       " --accelerator cpu --devices 1 --strategy independent_c_half --strategy-option grad_scale=0.25 "
                       "--strategy-option 'note=a=b c'");
  EXPECT_EQ(alias["strategy_options"], nlohmann::json({{"grad_scale", "0.25"}, {"note", "a=b c"}}));
  EXPECT_EQ(dry_run("--accelerator cpu --devices 2 --strategy ddp")["strategy_options"], nlohmann::json::object());
  EXPECT_THAT(plrun("--help").out, HasSubstr("--strategy-option"));
}

TEST(Plrun, BadStrategyOptionsExitTwoBeforeAnythingStarts) {
  const std::string ddp = "--dry-run --accelerator cpu --devices 2 --strategy ddp ";
  expect_invalid(ddp + "--strategy-option bogus=1", "ddp: unknown option 'bogus'");
  expect_invalid(ddp + "--strategy-option bogus=1",
                 "valid options: bucket_cap_mb, first_bucket_cap_mb, broadcast_buffers, pg.<name>");
  expect_invalid(ddp + "--strategy-option bucket_cap_mb=abc", "option bucket_cap_mb='abc' is not valid");
  expect_invalid(ddp + "--strategy-option broadcast_buffers=maybe", "broadcast_buffers='maybe' is not valid");
  expect_invalid(ddp + "--strategy-option stage", "--strategy-option 'stage' is not valid: it has no '='");
  expect_invalid(ddp + "--strategy-option stage", "write KEY=VALUE");
  expect_invalid(ddp + "--strategy-option =1", "--strategy-option '=1' is not valid: the key is empty");
  expect_invalid("--dry-run --accelerator cpu --devices 2 --strategy dp --strategy-option bucket_cap_mb=1",
                 "dp: unknown option 'bucket_cap_mb'; strategy 'dp' takes no options");
  expect_invalid("--dry-run --accelerator cpu --devices 2 --strategy ddp2 --strategy-option bucket_cap_mb=0",
                 "ddp2: option bucket_cap_mb='0' is not valid");
  expect_invalid("--dry-run --accelerator cpu --devices 1 --strategy single_device --strategy-option x=1",
                 "single_device: unknown option 'x'");
  // Launching: refused before any worker starts (expect_invalid: nothing on stdout, so no "started").
  expect_invalid("--accelerator cpu --devices 2 --strategy ddp --strategy-option bucket_cap_mb=abc -- echo started",
                 "bucket_cap_mb='abc'");
  expect_invalid("--accelerator cpu --devices 2 --strategy ddp_spawn --strategy-option bogus=1 -- echo started",
                 "ddp_spawn: unknown option 'bogus'");
}

TEST(Plrun, LogLevelFromEnvironmentIsChecked) {
  auto r = plrun("--dry-run", "PL_LOG_LEVEL=chatty");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("PL_LOG_LEVEL='chatty'"));
}

#ifdef PLRT_HAVE_CUDA
// The cuda plugin is built here (nvcc found); these hold with or without a GPU.
TEST(Plrun, GpuJobValidatedWithAssumedDevices) {
  auto j =
      dry_run(kTestPlugins + " --accelerator gpu --assume-device-count 8 --devices '1, 3' --strategy independent_c");
  EXPECT_EQ(j["accelerator"], "cuda");  // "gpu" is the cuda plugin's alias
  EXPECT_EQ(j["devices"], nlohmann::json::array({1, 3}));
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["process_group_backend"], "nccl");  // Lightning's default on cuda
  auto all =
      dry_run(kTestPlugins + " --accelerator cuda --assume-device-count 4 --devices -1 --strategy independent_c");
  EXPECT_EQ(all["devices"], nlohmann::json::array({0, 1, 2, 3}));
  auto gloo = dry_run("--accelerator cuda --assume-device-count 3 --devices 2, --process-group-backend gloo");
  EXPECT_EQ(gloo["devices"], nlohmann::json::array({2}));  // "2," is index 2, not the first two
  EXPECT_EQ(gloo["process_group_backend"], "gloo");
}

TEST(Plrun, GpuErrorsWithAssumedDevices) {
  expect_invalid("--dry-run --accelerator cuda --assume-device-count 2 --devices '[0, 3]'", "valid indices 0..1");
  expect_invalid("--dry-run --accelerator cuda --assume-device-count 2 --devices 3", "you requested 3 devices");
  expect_invalid("--dry-run --accelerator cuda --assume-device-count 4 --devices '[1, 1]'", "appears twice");
  expect_invalid("--dry-run --accelerator cuda --assume-device-count 4 --devices -2", "-2");
  expect_invalid("--dry-run --accelerator cuda --assume-device-count 0 --devices 1", "no cuda device is available");
}

// --devices usable:N on a simulated machine (PL_CUDA_DEVICE_TABLE): 0 and 3 are free, 1 is busy with
// another process's memory, 2 is held in exclusive mode.
class PlrunUsable : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/plrun-usable-XXXXXX";
    ::close(::mkstemp(path));
    table_ = path;
    std::ofstream(table_) << R"({"devices": [
      {"name": "GPU A"},
      {"name": "GPU B", "processes": [{"pid": 4242, "used_bytes": 4294967296}]},
      {"name": "GPU C", "compute_mode": "exclusive_process", "context_ok": false, "context_error": "busy"},
      {"name": "GPU D"}]})";
  }
  void TearDown() override { std::remove(table_.c_str()); }
  Result run(const std::string& args) { return plrun(args, "PL_CUDA_DEVICE_TABLE=" + table_); }
  std::string table_;
};

TEST_F(PlrunUsable, DryRunShowsTheResolvedIds) {
  for (const char* form : {"usable:2", "usable", "' usable:-1'"}) {
    auto r = run("--dry-run " + kTestPlugins + " --accelerator cuda --strategy independent_c --devices " + form);
    ASSERT_EQ(r.code, 0) << form << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["devices"], nlohmann::json::array({0, 3})) << form;
    EXPECT_EQ(j["world_size"], 2);
  }
  auto one = run("--dry-run --devices usable:1");  // accelerator auto: usable means cuda
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(nlohmann::json::parse(one.out)["accelerator"], "cuda");
  EXPECT_EQ(nlohmann::json::parse(one.out)["devices"], nlohmann::json::array({0}));
}

TEST_F(PlrunUsable, TooFewFreeNamesTheBusyOnes) {
  auto r = run("--dry-run " + kTestPlugins + " --accelerator cuda --strategy independent_c --devices usable:3");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_THAT(r.err, HasSubstr("devices='usable:3': you requested 3 usable devices but only 2 of the 4 visible CUDA "
                               "devices are usable ([0, 3])"));
  EXPECT_THAT(r.err, HasSubstr("1 'GPU B' (busy: 4.0 GiB used by other processes (pid 4242: 4.0 GiB), more than "
                               "1024 MiB (PL_USABLE_MAX_FOREIGN_MEMORY_MB))"));
  EXPECT_THAT(r.err, HasSubstr("2 'GPU C' (exclusive mode, held by another process)"));
  auto five = run("--dry-run --accelerator cuda --devices usable:5");
  EXPECT_EQ(five.code, 2);
  EXPECT_THAT(five.err, HasSubstr("you requested 5 devices but this machine has only 4 visible CUDA devices"));
}

TEST_F(PlrunUsable, InvalidUsesAreNamed) {
  auto check = [&](const std::string& args, const std::string& message) {
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  };
  check("--dry-run --accelerator cuda --devices usable:2 --assume-device-count 4", "usable needs the real devices");
  // cpu judges no device (no device_status): its one device, the host, is usable.
  check("--dry-run --accelerator cpu --devices usable:2",
        "devices='usable:2': you requested 2 devices but this machine has only 1 visible CPU device");
  check("--dry-run --accelerator cuda --devices usable:0", "devices='usable:0' selects no device");
  check("--dry-run --accelerator cuda --devices usable:x", "'x' is not an integer");
  auto bad_env = plrun("--dry-run --accelerator cuda --devices usable:1",
                       "PL_CUDA_DEVICE_TABLE=" + table_ + " PL_USABLE_MAX_UTILIZATION=high");
  EXPECT_EQ(bad_env.code, 2);
  EXPECT_THAT(bad_env.err, HasSubstr("PL_USABLE_MAX_UTILIZATION='high' is not a number"));
  EXPECT_THAT(plrun("--help").out, HasSubstr("usable:N"));
}

// Node 0's plrun serves the store, one descriptor per connection: it raises its soft open-file
// limit to the hard one at start (launcher/fd_limit.hpp), and its workers inherit it.  plrun is
// started with a soft limit of 64 (a shell lowers it, then execs plrun); the worker prints its own.
TEST(Plrun, RaisesTheOpenFileLimitToTheHardLimit) {
  rlimit rl{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_max <= 64) GTEST_SKIP() << "the hard limit is " << rl.rlim_max;
  auto r = plrun(kTestPlugins + " --accelerator cpu --devices 1 -- sh -c 'ulimit -Sn'",
                 "sh -c 'ulimit -Sn 64 && exec \"$0\" \"$@\"'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("] " + std::to_string(rl.rlim_max) + "\n")) << r.out << r.err;
  auto low = plrun(kTestPlugins + " --accelerator cpu --devices 1 -- sh -c 'ulimit -Sn'",
                   "sh -c 'ulimit -Sn 64 && exec sh -c \"ulimit -Sn\"'");  // the same shell without plrun: 64
  EXPECT_EQ(low.out, "64\n") << low.err;
}

TEST(Plrun, GpuRequestWithoutAGpuIsAClearError) {
  auto probe = plrun("--dry-run --accelerator cuda --devices 1");
  if (probe.code == 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(probe.code, 2);
  EXPECT_THAT(probe.err, HasSubstr("no cuda device is available"));
  EXPECT_THAT(probe.err, HasSubstr("--assume-device-count"));
  // accelerator=auto falls back to the CPU, as Lightning does.
  EXPECT_EQ(dry_run("")["accelerator"], "cpu");
}
#endif
