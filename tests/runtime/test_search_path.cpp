// The plugin search path: explicit folders, then the folder beside the runtime library, then
// PL_PLUGIN_PATH; no folder compiled into the runtime (a copy of it in a temporary tree finds its
// plugins beside itself and never looks into the build tree); bad explicit folders refused, bad
// PL_PLUGIN_PATH entries warned.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "test_support.hpp"

namespace fs = std::filesystem;
using plrt_test::error_of;
using plrt_test::isolated;
using plrt_test::LogCapture;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

struct Output {
  int code = -1;
  std::string out, err;
};

// Runs `cmd` through the shell; stdout and stderr apart.
Output run(const std::string& cmd) {
  const fs::path err_file = fs::temp_directory_path() / ("plrt-probe-err-" + std::to_string(::getpid()));
  Output r;
  FILE* p = ::popen((cmd + " 2>" + err_file.string()).c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  fs::remove(err_file);
  return r;
}

// A runtime installed somewhere else: <root>/lib/libplrt_runtime.so.0 and its cpu and
// independent_c plugins in <root>/lib/plrt/plugins, plus two more folders holding independent_c,
// one for an explicit folder and one for PL_PLUGIN_PATH.
struct CopiedInstall {
  fs::path root = fs::temp_directory_path() / ("plrt-copied-runtime-" + std::to_string(::getpid()));
  fs::path lib = root / "lib" / "libplrt_runtime.so.0";
  fs::path beside = root / "lib" / "plrt" / "plugins";
  fs::path explicit_dir = root / "explicit";
  fs::path env_dir = root / "env";
  const std::string strategy = "libplrt_strategy_independent_c.so";

  CopiedInstall() {
    fs::remove_all(root);
    for (const auto& d : {beside, explicit_dir, env_dir}) fs::create_directories(d);
    fs::copy_file(PLRT_RUNTIME_LIBRARY, lib);
    fs::copy_file(PLRT_CPU_PLUGIN, beside / "libplrt_accelerator_cpu.so");
    for (const auto& d : {beside, explicit_dir, env_dir})
      fs::copy_file(fs::path(PLRT_TEST_PLUGIN_DIR) / strategy, d / strategy);
  }
  ~CopiedInstall() { fs::remove_all(root); }

  // The probe loads the copy; PL_PLUGIN_PATH is env_dir then a folder that does not exist.
  Output probe(const std::string& args = "") const {
    return run("env PL_PLUGIN_PATH=" + env_dir.string() + ":" + root.string() + "/missing " +
               PLRT_COPIED_RUNTIME_PROBE + " " + lib.string() + " " + args);
  }
};

// The "plugin search path" lines the runtime logs at debug level, in order.
std::vector<std::string> search_path_lines(const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    auto at = line.find("plugin search path: ");
    if (at != std::string::npos) lines.push_back(line.substr(at + 20));
  }
  return lines;
}

}  // namespace

TEST(SearchPath, ACopiedRuntimeSearchesExplicitThenBesideItselfThenTheEnvironment) {
  CopiedInstall install;
  auto r = install.probe(install.explicit_dir.string());
  ASSERT_EQ(r.code, 0) << r.err;
  // No folder is compiled in: the copy never looks into the build tree (nor the configured install prefix).
  EXPECT_THAT(r.err, Not(HasSubstr(PLRT_BUILD_PLUGIN_DIR)));
  EXPECT_THAT(r.err, Not(HasSubstr(PLRT_CONFIGURED_INSTALL_PLUGIN_DIR)));
  auto dirs = search_path_lines(r.err);
  ASSERT_EQ(dirs.size(), 4u) << r.err;
  EXPECT_EQ(dirs[0], install.explicit_dir.string() + " (plugin_dirs)");
  EXPECT_EQ(dirs[1], install.beside.string() + " (beside libplrt_runtime.so)");
  EXPECT_EQ(dirs[2], install.env_dir.string() + " (PL_PLUGIN_PATH)");
  EXPECT_EQ(dirs[3], install.root.string() + "/missing (PL_PLUGIN_PATH)");
  EXPECT_THAT(r.err, HasSubstr("PL_PLUGIN_PATH entry '" + install.root.string() + "/missing' does not exist"));
  // cpu only beside the copy; independent_c from the explicit folder, which comes first.
  EXPECT_THAT(r.out, HasSubstr("1 cpu " + (install.beside / "libplrt_accelerator_cpu.so").string() + "\n"));
  EXPECT_THAT(r.out, HasSubstr("3 independent_c " + (install.explicit_dir / install.strategy).string() + "\n"));
  EXPECT_THAT(r.out, Not(HasSubstr(PLRT_BUILD_PLUGIN_DIR)));
}

TEST(SearchPath, TheFolderBesideTheRuntimeComesBeforePlPluginPath) {
  CopiedInstall install;
  auto r = install.probe();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3 independent_c " + (install.beside / install.strategy).string() + "\n"));
  // Without it there, PL_PLUGIN_PATH's copy is found.
  fs::remove(install.beside / install.strategy);
  r = install.probe();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3 independent_c " + (install.env_dir / install.strategy).string() + "\n"));
}

TEST(SearchPath, TheBuildTreeRuntimeFindsItsPluginsBesideItself) {
  LogCapture log;
  pl::RuntimeOptions o;
  o.use_env_dirs = false;
  o.log_level = "debug";
  o.log_callback = LogCapture::callback;
  o.log_user = &log;
  pl::Runtime rt(o);
  EXPECT_THAT(rt.find(PL_PLUGIN_ACCELERATOR, "cpu").path, HasSubstr(PLRT_BUILD_PLUGIN_DIR));
  EXPECT_EQ(log.count("plugin search path: "), 1u) << log.all();
  EXPECT_TRUE(log.contains(std::string(PLRT_BUILD_PLUGIN_DIR) + " (beside libplrt_runtime.so)")) << log.all();
}

TEST(SearchPath, AnExplicitFolderThatDoesNotExistIsRefused) {
  auto msg = error_of(
      [] {
        pl::Runtime rt(isolated({PLRT_TEST_PLUGIN_DIR, "/nonexistent-plrt-dir"}));
      },
      PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("plugin folder '/nonexistent-plrt-dir' (plugin_dirs[1], plrun --plugin-path) does "
                             "not exist; give an existing folder"));
}

TEST(SearchPath, AnExplicitFileIsNotAFolder) {
  const std::string file = std::string(PLRT_TEST_PLUGIN_DIR) + "/libplrt_strategy_independent_c.so";
  auto msg = error_of([&] { pl::Runtime rt(isolated({file})); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("plugin folder '" + file + "' (plugin_dirs[0], plrun --plugin-path) is not a folder"));
}

TEST(SearchPath, AnEmptyOrNullExplicitFolderIsRefused) {
  auto msg = error_of([] { pl::Runtime rt(isolated({""})); }, PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(msg, HasSubstr("plugin_dirs[0] (plrun --plugin-path) is empty"));
  // Through the C API: a NULL entry, and a NULL array with a count.
  const char* dirs[] = {PLRT_TEST_PLUGIN_DIR, nullptr};
  PL_RuntimeOptions o{};
  o.struct_size = sizeof o;
  o.plugin_dirs = dirs;
  o.num_plugin_dirs = 2;
  o.log_level = "warn";
  PL_Runtime* rt = nullptr;
  PL_Error* err = pl_runtime_create(&o, &rt);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(pl_error_code(err), PL_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(pl_error_message(err), HasSubstr("PL_RuntimeOptions.plugin_dirs[1] is NULL"));
  pl_error_destroy(err);
  o.plugin_dirs = nullptr;
  err = pl_runtime_create(&o, &rt);
  ASSERT_NE(err, nullptr);
  EXPECT_THAT(pl_error_message(err), HasSubstr("plugin_dirs is NULL but num_plugin_dirs is 2"));
  pl_error_destroy(err);
  EXPECT_EQ(rt, nullptr);
}

TEST(SearchPath, APlPluginPathEntryThatIsNoFolderIsAWarning) {
  ::setenv("PL_PLUGIN_PATH", "/nonexistent-plrt-env:" PLRT_TEST_PLUGIN_DIR "/libplrt_strategy_independent_c.so", 1);
  LogCapture log;
  pl::RuntimeOptions o = isolated({PLRT_TEST_PLUGIN_DIR});
  o.use_env_dirs = true;
  o.log_callback = LogCapture::callback;
  o.log_user = &log;
  pl::Runtime rt(o);
  ::unsetenv("PL_PLUGIN_PATH");
  EXPECT_TRUE(log.contains("PL_PLUGIN_PATH entry '/nonexistent-plrt-env' does not exist; no plugin is found there"))
      << log.all();
  EXPECT_TRUE(log.contains("libplrt_strategy_independent_c.so' is not a folder")) << log.all();
  EXPECT_EQ(rt.find(PL_PLUGIN_STRATEGY, "independent_c").name(), "independent_c");
  // The "not found" error names every folder, where it came from, and which are missing.
  auto msg = error_of([&] { rt.find(PL_PLUGIN_STRATEGY, "nothing_here"); }, PL_ERR_NOT_FOUND);
  EXPECT_THAT(msg, HasSubstr(std::string(PLRT_TEST_PLUGIN_DIR) + " (plugin_dirs)"));
  EXPECT_THAT(msg, HasSubstr("/nonexistent-plrt-env (PL_PLUGIN_PATH, missing)"));
  EXPECT_THAT(msg, HasSubstr("plrun --plugin-path"));
}
