// The README's first minutes, as a newcomer has them:
//  - MainJob: scripts/run.sh in a clean copy of the tree (the files git knows, nothing built): it
//    installs `setup.sh --main`'s packages (already there on a test machine), builds preset "main"
//    and trains; then every header and library that build used must come from those packages or
//    their dependencies (main_job_packages.py), and the build must hold the main job's targets
//    only (no tests, benchmarks, CUDA or libtorch parts).
//  - QuickStart: README.md's "Quick start" block, cut out of the README and run line by line as
//    written, in a folder where build/main and build/release are this build and scripts/ the
//    tree's.  A line starting with "! " must exit 2 (bad input) naming the bad value.  The two-node
//    line skips where the machine refuses network namespaces (netem-cluster's exit 77); the
//    libtorch line where this build has no plrt-libtorch.
#include <gmock/gmock.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "install_support.hpp"

namespace plrt_install_test {
namespace {

using ::testing::HasSubstr;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(MainJob, RunShInACleanCopyBuildsAndTrainsWithItsPackagesAlone) {
  TempDir tmp;
  const fs::path copy = tmp.path() / "plrt";
  fs::create_directories(copy);
  // The tree as a clone has it (tracked files and new ones git would add), without any build.
  auto copied = sh("git -C '" PLRT_SOURCE_DIR
                   "' ls-files -z --cached --others --exclude-standard | "
                   "(cd '" PLRT_SOURCE_DIR "' && tar --null --no-recursion -T - -cf -) | tar -xf - -C '" +
                   copy.string() + "'");
  ASSERT_TRUE(copied.ok()) << describe(copied);
  ASSERT_TRUE(fs::exists(copy / "scripts/run.sh"));
  auto r = run({"bash", "scripts/run.sh", "--epochs", "1"}, {}, copy, std::chrono::seconds(900));
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_THAT(r.output, HasSubstr("[rank 0] epoch 0/0")) << r.output;
  EXPECT_THAT(r.output, HasSubstr("held-out accuracy")) << r.output;
  EXPECT_TRUE(fs::exists(copy / "runs/mlp.safetensors"));
  // Only the main job's targets: no test, benchmark, CUDA or libtorch part was built.
  const fs::path build = copy / "build/main";
  for (const char* absent :
       {"bin/test_sdk", "bin/test_training", "bin/plrt-libtorch", "bin/allreduce_bench",
        "lib/plrt/plugins/libplrt_accelerator_cuda.so", "lib/plrt/plugins/libplrt_process_group_nccl.so"})
    EXPECT_FALSE(fs::exists(build / absent)) << absent << " was built by run.sh";
  auto packages =
      run({PLRT_SYSTEM_PYTHON3, PLRT_SOURCE_DIR "/tests/install/main_job_packages.py", copy.string(), build.string()});
  EXPECT_TRUE(packages.ok()) << describe(packages);
  EXPECT_THAT(packages.output, HasSubstr("system headers and")) << packages.output;
}

// The "Quick start" block's commands, continuation lines joined, comments dropped.
std::vector<std::string> quick_start_commands() {
  const std::string readme = read_file(PLRT_SOURCE_DIR "/README.md");
  const size_t section = readme.find("## Quick start");
  if (section == std::string::npos) return {};
  const size_t begin = readme.find("```sh\n", section);
  const size_t end = begin == std::string::npos ? begin : readme.find("```", begin + 6);
  if (end == std::string::npos) return {};
  std::istringstream lines(readme.substr(begin + 6, end - begin - 6));
  std::vector<std::string> out;
  std::string line, command;
  while (std::getline(lines, line)) {
    if (command.empty() && (line.empty() || line[0] == '#')) continue;
    const bool more = !line.empty() && line.back() == '\\';
    command += more ? line.substr(0, line.size() - 1) : line;
    if (!more) {
      out.push_back(command);
      command.clear();
    }
  }
  return out;
}

TEST(QuickStart, ReadmeCommandsRunAsWritten) {
  const auto commands = quick_start_commands();
  ASSERT_GE(commands.size(), 4u) << "README.md has no Quick start block of commands";
  TempDir tmp;
  fs::create_directories(tmp.path() / "build");
  fs::create_symlink(PLRT_BUILD_DIR, tmp.path() / "build/main");
  fs::create_symlink(PLRT_BUILD_DIR, tmp.path() / "build/release");
  fs::create_symlink(PLRT_SOURCE_DIR "/scripts", tmp.path() / "scripts");
  int ran = 0;
  for (const auto& command : commands) {
    SCOPED_TRACE(command);
    if (command.find("plrt-libtorch") != std::string::npos && !fs::exists(PLRT_BUILD_DIR "/bin/plrt-libtorch")) {
      std::cout << "[ skipped  ] no plrt-libtorch in this build (libtorch not found): " << command << std::endl;
      continue;
    }
    const bool bad_input = command.rfind("! ", 0) == 0;
    auto r = run({"bash", "-c", bad_input ? command.substr(2) : command}, {{"PL_LOG_LEVEL", "warn"}}, tmp.path(),
                 std::chrono::seconds(300));
    if (command.find("netem-cluster") != std::string::npos && r.exit_code == 77) {
      std::cout << "[ skipped  ] this machine refuses network namespaces: " << r.output << std::endl;
      continue;
    }
    ++ran;
    if (bad_input) {
      EXPECT_EQ(r.exit_code, 2) << describe(r);
      EXPECT_THAT(r.output, HasSubstr("'dpp'")) << r.output;
      continue;
    }
    ASSERT_TRUE(r.ok()) << describe(r);
    std::smatch m;
    if (std::regex_search(r.output, m, std::regex("held-out accuracy ([0-9.]+)")) &&
        command.find("digits") != std::string::npos && command.find("--epochs 20") != std::string::npos) {
      EXPECT_GE(std::stod(m[1]), 0.95) << r.output;
    }
  }
  EXPECT_GE(ran, 3);
  EXPECT_TRUE(fs::exists(tmp.path() / "digits.safetensors")) << "the digits run saves its weights";
}

}  // namespace
}  // namespace plrt_install_test
