// write_file_atomic, AtomicDir and clean_atomic_leftovers, ending with the crash test: a child
// process committing checkpoints is SIGKILLed at varied moments, and every time the folder must
// hold one complete generation.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <plrt/sdk/atomic_file.hpp>
#include <plrt/sdk/error.hpp>
#include <set>
#include <thread>

#include "sdk_test_support.hpp"

namespace fs = std::filesystem;

namespace {

using sdk_test::error_or_none;

// A fresh folder under the test temp dir, removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    path = ::testing::TempDir() + "plrt_atomic_XXXXXX";
    if (!::mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.insert(e.path().filename().string());
    return out;
  }
};

// The pid of a process that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST(AtomicFile, WritesReplacesAndReads) {
  TempDir d;
  const std::string p = d.path + "/f.bin";
  pl::write_file_atomic(p, std::string("first\0x", 7));
  EXPECT_EQ(pl::read_file(p), std::string("first\0x", 7));
  pl::write_file_atomic(p, "");
  EXPECT_EQ(pl::read_file(p), "");
  std::string big(3 << 20, 'z');
  big[12345] = 'q';
  pl::write_file_atomic(p, big);
  EXPECT_EQ(pl::read_file(p), big);
  EXPECT_EQ(d.names(), std::set<std::string>{"f.bin"}) << "temporary files were left behind";
}

TEST(AtomicFile, ErrorsNameThePathAndTheReason) {
  TempDir d;
  std::string e = error_or_none([&] { pl::write_file_atomic(d.path + "/no/such/dir/f", "x"); });
  EXPECT_NE(e.find(d.path + "/no/such/dir/f"), std::string::npos) << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
  e = error_or_none([&] { pl::read_file(d.path + "/missing"); });
  EXPECT_NE(e.find("cannot open '" + d.path + "/missing': No such file or directory"), std::string::npos) << e;
  // Renaming a file over a folder fails: the temporary file must not stay behind.
  fs::create_directory(d.path + "/sub");
  fs::create_directory(d.path + "/sub/x");
  e = error_or_none([&] { pl::write_file_atomic(d.path + "/sub", "x"); });
  EXPECT_NE(e.find("cannot rename"), std::string::npos) << e;
  EXPECT_EQ(d.names(), std::set<std::string>{"sub"});
}

TEST(AtomicDir, CreatesAFolderThatDidNotExist) {
  TempDir d;
  const std::string p = d.path + "/ckpt";
  pl::AtomicDir a(p);
  EXPECT_EQ(a.temp_path(), p + ".tmp-" + std::to_string(::getpid()));
  a.write("x", "1");
  EXPECT_FALSE(fs::exists(p)) << "nothing is visible before commit";
  a.commit();
  EXPECT_EQ(pl::read_file(p + "/x"), "1");
  EXPECT_EQ(d.names(), std::set<std::string>{"ckpt"});
  EXPECT_NE(error_or_none([&] { a.commit(); }).find("commit() called twice"), std::string::npos);
  EXPECT_NE(error_or_none([&] { a.write("y", ""); }).find("after commit()"), std::string::npos);
}

TEST(AtomicDir, ReplacesAnExistingFolderWhole) {
  TempDir d;
  const std::string p = d.path + "/ckpt";
  fs::create_directory(p);
  pl::write_file_atomic(p + "/a", "old a");
  pl::write_file_atomic(p + "/stale", "only in the old one");
  {
    pl::AtomicDir a(p + "/");  // a trailing slash names the same folder
    EXPECT_EQ(a.path(), p);
    a.write("a", "new a");
    a.write("b", "new b");
    EXPECT_EQ(pl::read_file(p + "/a"), "old a");
    a.commit();
  }
  EXPECT_EQ(pl::read_file(p + "/a"), "new a");
  EXPECT_EQ(pl::read_file(p + "/b"), "new b");
  EXPECT_FALSE(fs::exists(p + "/stale"));
  EXPECT_EQ(d.names(), std::set<std::string>{"ckpt"}) << "the old contents were not removed";
}

TEST(AtomicDir, DestructorWithoutCommitRemovesTheTemporaryFolder) {
  TempDir d;
  const std::string p = d.path + "/ckpt";
  fs::create_directory(p);
  pl::write_file_atomic(p + "/a", "kept");
  {
    pl::AtomicDir a(p);
    a.write("a", "discarded");
    EXPECT_TRUE(fs::is_directory(a.temp_path()));
  }
  EXPECT_EQ(d.names(), std::set<std::string>{"ckpt"});
  EXPECT_EQ(pl::read_file(p + "/a"), "kept");
}

TEST(AtomicDir, BadNamesAreRejected) {
  TempDir d;
  pl::AtomicDir a(d.path + "/ckpt");
  for (std::string bad : {"", ".", "..", "x/y"})
    EXPECT_NE(error_or_none([&] { a.write(bad, "1"); }).find("file name '" + bad + "' must be a plain name"),
              std::string::npos);
  EXPECT_NE(error_or_none([] { pl::AtomicDir(""); }).find("is not a file or folder name"), std::string::npos);
  std::string e = error_or_none([&] { pl::AtomicDir(d.path + "/missing/ckpt"); });
  EXPECT_NE(e.find("cannot create folder '" + d.path + "/missing/ckpt.tmp-"), std::string::npos) << e;
}

TEST(AtomicDir, CleanRemovesOnlyTheLeftoversOfDeadProcesses) {
  TempDir d;
  const std::string p = d.path + "/ckpt";
  fs::create_directory(p);
  const std::string dead = std::to_string(dead_pid()), live = std::to_string(::getpid());
  fs::create_directory(p + ".tmp-" + dead);
  pl::write_file_atomic(p + ".tmp-" + dead + "/part", "x");
  pl::write_file_atomic(p + ".tmp-" + dead + "-3", "x");  // a write_file_atomic leftover
  fs::create_directory(p + ".old-" + dead);               // a finished fallback commit's old folder
  fs::create_directory(p + ".tmp-" + live);
  pl::write_file_atomic(p + ".tmp-x", "not ours: no pid");
  pl::write_file_atomic(d.path + "/other.tmp-" + dead, "another path's");
  pl::clean_atomic_leftovers(p);
  EXPECT_EQ(d.names(), (std::set<std::string>{"ckpt", "ckpt.tmp-" + live, "ckpt.tmp-x", "other.tmp-" + dead}));
  fs::remove(p + ".tmp-" + live);

  // The fallback commit killed between its renames: `path` is gone, the old folder is restored.
  fs::rename(p, p + ".old-" + dead);
  fs::create_directory(p + ".tmp-" + dead);
  pl::clean_atomic_leftovers(p);
  EXPECT_TRUE(fs::is_directory(p));
  EXPECT_FALSE(fs::exists(p + ".old-" + dead));
  EXPECT_FALSE(fs::exists(p + ".tmp-" + dead));
  pl::clean_atomic_leftovers(d.path + "/nowhere/ckpt");  // a missing folder: nothing to clean
}

// A run's start: every target's leftovers in a folder whose process is gone, the names told apart.
TEST(AtomicDir, CleanInAFolderTakesEveryTargetsDeadLeftovers) {
  TempDir d;
  const std::string dead = std::to_string(dead_pid()), live = std::to_string(::getpid());
  fs::create_directory(d.path + "/last");
  fs::create_directory(d.path + "/last.tmp-" + dead);
  pl::write_file_atomic(d.path + "/last.tmp-" + dead + "/model.safetensors", "partial");
  fs::create_directory(d.path + "/epoch=3.tmp-" + dead);
  pl::write_file_atomic(d.path + "/metrics.csv.tmp-" + dead + "-7", "x");
  fs::create_directory(d.path + "/last.tmp-" + live);
  fs::create_directory(d.path + "/best.old-" + dead);  // `best` is missing: renamed back
  pl::write_file_atomic(d.path + "/a.tmp-" + dead + "-x", "not a leftover's name");
  pl::write_file_atomic(d.path + "/.tmp-" + dead, "no target");
  EXPECT_EQ(pl::clean_atomic_leftovers_in(d.path), 4);
  EXPECT_EQ(d.names(),
            (std::set<std::string>{"last", "best", "last.tmp-" + live, "a.tmp-" + dead + "-x", ".tmp-" + dead}));
  EXPECT_EQ(pl::clean_atomic_leftovers_in(d.path), 0);
  EXPECT_EQ(pl::clean_atomic_leftovers_in(d.path + "/nowhere"), 0);
  EXPECT_TRUE(pl::is_atomic_leftover_name("last.tmp-12"));
  EXPECT_TRUE(pl::is_atomic_leftover_name("trainer.json.tmp-12-0"));
  EXPECT_TRUE(pl::is_atomic_leftover_name("last.old-12"));
  EXPECT_FALSE(pl::is_atomic_leftover_name("last.old-12-1"));
  EXPECT_FALSE(pl::is_atomic_leftover_name("last"));
  EXPECT_FALSE(pl::is_atomic_leftover_name("last.tmp-"));
  EXPECT_FALSE(pl::is_atomic_leftover_name("last.tmp-12-"));
}

// ---- the crash test ----

constexpr size_t kFileBytes = 8u << 20;

std::string generation_bytes(uint64_t gen) {
  std::string s(kFileBytes, '\0');
  for (size_t i = 0; i < kFileBytes; i += sizeof gen) std::memcpy(&s[i], &gen, sizeof gen);
  return s;
}

// The generation stored in `file`, or a description of why it is not one whole generation.
bool read_generation(const std::string& file, uint64_t* gen, std::string* why) {
  std::string s;
  try {
    s = pl::read_file(file);
  } catch (const pl::Error& e) {
    *why = e.what();
    return false;
  }
  if (s.size() != kFileBytes) {
    *why = file + " holds " + std::to_string(s.size()) + " bytes, not " + std::to_string(kFileBytes);
    return false;
  }
  std::memcpy(gen, s.data(), sizeof *gen);
  for (size_t i = 0; i < kFileBytes; i += sizeof *gen)
    if (std::memcmp(&s[i], gen, sizeof *gen) != 0) {
      *why = file + " mixes generations (offset " + std::to_string(i) + ")";
      return false;
    }
  return true;
}

// Commits generations start, start+1, ... forever; writes one byte to `ready` after the first
// commit, so that the parent's delays are measured within the commit loop, not from fork().
[[noreturn]] void commit_forever(const std::string& path, uint64_t start, int ready) {
  try {
    for (uint64_t g = start;; ++g) {
      std::string bytes = generation_bytes(g);
      pl::AtomicDir dir(path);
      dir.write("a", bytes);
      dir.write("b", bytes);
      dir.commit();
      char c = 'c';
      if (g == start && ::write(ready, &c, 1) != 1) ::_exit(3);
    }
  } catch (...) {
    ::_exit(2);
  }
}

TEST(AtomicDir, SigkillAtAnyMomentLeavesOneCompleteGeneration) {
  TempDir d;
  const std::string p = d.path + "/ckpt";
  {
    pl::AtomicDir first(p);
    first.write("a", generation_bytes(0));
    first.write("b", generation_bytes(0));
    first.commit();
  }
  uint64_t last = 0;
  int advanced = 0, leftovers = 0;  // advanced: commits beyond the first one per child
  const int kKills = 20;
  for (int k = 0; k < kKills; ++k) {
    int pipefd[2];
    ASSERT_EQ(::pipe(pipefd), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(pipefd[0]);
      commit_forever(p, last + 1, pipefd[1]);
    }
    ::close(pipefd[1]);
    char c;
    ssize_t got = ::read(pipefd[0], &c, 1);
    ::close(pipefd[0]);
    if (got != 1) {  // the child died before its first commit
      int status = 0;
      ::waitpid(child, &status, 0);
      FAIL() << "kill " << k << ": the child exited with code " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
             << " before committing";
    }
    // 0..30 ms in a scattered order; a commit of 2 x 8 MB takes 15-50 ms here, so the kills land
    // in writes, fsyncs, the exchange and the removal of the old folder alike.
    std::this_thread::sleep_for(std::chrono::microseconds((k * 7919) % 31 * 1000 + (k * 331) % 1000));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child ended on its own (exit code " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ")";

    ASSERT_TRUE(fs::is_directory(p)) << "kill " << k << ": " << p << " is missing";
    uint64_t ga = 0, gb = 0;
    std::string why;
    ASSERT_TRUE(read_generation(p + "/a", &ga, &why)) << "kill " << k << ": " << why;
    ASSERT_TRUE(read_generation(p + "/b", &gb, &why)) << "kill " << k << ": " << why;
    ASSERT_EQ(ga, gb) << "kill " << k << ": the files hold different generations";
    // The child had committed generation last + 1 at least: it must be visible.
    ASSERT_GT(ga, last) << "kill " << k << ": a committed generation was lost";
    advanced += static_cast<int>(ga - last - 1);
    last = ga;
    for (const auto& e : fs::directory_iterator(d.path))
      if (e.path().filename() != "ckpt") ++leftovers;
  }
  // Leftovers (temporary folders of the killed children) are expected; the cleanup removes them.
  EXPECT_GT(leftovers, 0) << "no kill interrupted a write: the test did not exercise a crash";
  pl::clean_atomic_leftovers(p);
  EXPECT_EQ(d.names(), std::set<std::string>{"ckpt"});
  RecordProperty("generations_committed", static_cast<int>(last));
  RecordProperty("further_commits", advanced);
  std::printf("[ crash test ] %d kills, %d commits beyond each child's first, last generation %llu\n", kKills, advanced,
              static_cast<unsigned long long>(last));
}

}  // namespace
