// The progress bar on a real terminal (a pseudo-terminal, forkpty): progress_worker and plrt-mlp
// alone and under plrun --devices 2.  Checked on the bytes the terminal receives: bar frames are
// drawn, every log line starts at column 0 (after a newline or the bar's erase "\r\x1b[K", never
// glued to bar text), the redraws stay near 10 a second, the finished line of each epoch replaces
// the per-epoch info line; no bar when the output is a pipe or enable_progress_bar is off
// (--no-progress-bar, PL_TRAINER_ENABLE_PROGRESS_BAR=0: nor the per-epoch lines), and a bad
// PL_TRAINER_ENABLE_PROGRESS_BAR is named.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>

#include "training_support.hpp"

namespace {

using plrt_training::TempDir;

struct TtyResult {
  std::string bytes;
  int exit_code = -1;
  double seconds = 0;
};

// Runs argv on a fresh pseudo-terminal `columns` wide (stdin, stdout and stderr), with `env` added;
// killed after 60 s.
TtyResult run_tty(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
                  int columns = 100) {
  winsize ws{};
  ws.ws_row = 40;
  ws.ws_col = static_cast<unsigned short>(columns);
  int master = -1;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  if (pid == 0) {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PL_JOB_TOKEN",
                          "PL_USE_AGENT_STORE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "COLUMNS",
                          "PL_PROGRESS_BAR_TTY", "PL_TRAINER_ENABLE_PROGRESS_BAR", "PL_LOG_LEVEL"})
      ::unsetenv(v);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  TtyResult r;
  EXPECT_GT(pid, 0);
  if (pid <= 0) return r;
  const auto deadline = t0 + std::chrono::seconds(60);
  char buf[65536];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ADD_FAILURE() << "still running after 60 s; killed. Output so far:\n" << r.bytes;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno == EINTR) continue;
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) {
      r.bytes.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EIO: every process holding the terminal is gone
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// Every log line ("[HH:MM:SS.mmm] [level] ...") starts at column 0: the output's start, a newline,
// or the bar's erase right before it.  Returns the count of log lines.
size_t expect_log_lines_at_column_0(const std::string& out) {
  static const std::regex header(R"(\[\d\d:\d\d:\d\d\.\d\d\d\] \[)");
  size_t lines = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), header); it != std::sregex_iterator(); ++it) {
    size_t at = static_cast<size_t>(it->position());
    // under plrun a "[rank N] " tag may come first
    if (at >= 9 && out.compare(at - 9, 6, "[rank ") == 0) at -= 9;
    const bool ok = at == 0 || out[at - 1] == '\n' || (at >= 4 && out.compare(at - 4, 4, "\r\x1b[K") == 0);
    EXPECT_TRUE(ok) << "a log line glued to other text at byte " << at << ": ..."
                    << out.substr(at >= 80 ? at - 80 : 0, std::min<size_t>(at, 80)) << "|" << out.substr(at, 60);
    ++lines;
  }
  return lines;
}

// Frames drawn: each ends with "\x1b[K" (a frame or a redraw after a log line) except the erases.
size_t frames(const std::string& out) { return count(out, "\x1b[K") - count(out, "\r\x1b[K"); }

std::vector<std::string> worker(int epochs, int batches, int sleep_ms, int log_every) {
  return {PROGRESS_WORKER_PATH, std::to_string(epochs), std::to_string(batches), std::to_string(sleep_ms),
          std::to_string(log_every)};
}

}  // namespace

TEST(ProgressTty, BarOnATerminalNeverInterleavesWithLogLines) {
  TempDir dir;
  // 3 epochs of 60 batches of 4 ms (about 0.25 s each) and a log line every 7 batches
  auto r = run_tty(worker(3, 60, 4, 7), {{"PROGRESS_WORKER_DIR", dir.path.string()}, {"PL_LOG_LEVEL", "info"}}, 90);
  ASSERT_EQ(r.exit_code, 0) << r.bytes;
  const std::string& out = r.bytes;
  // frames of each epoch, and each epoch's finished line (then a newline: the terminal's "\r\n")
  for (int e = 0; e < 3; ++e) {
    const std::string head = "\repoch " + std::to_string(e) + "/2  ";
    EXPECT_GE(count(out, head), 2u) << e << "\n" << out;
    const std::regex finished(
        "\\repoch " + std::to_string(e) +
        R"(/2  60/60 \[=+\] 100%  [0-9.]+ it/s  0:0\d  loss=[0-9.e-]+ val_acc=0\.\d+\x1b\[K\r\n)");
    EXPECT_TRUE(std::regex_search(out, finished)) << "no finished line for epoch " << e << "\n" << out;
  }
  EXPECT_NE(out.find("\rvalidate  "), std::string::npos) << out;  // the validation's transient frames
  // the per-epoch info line is not printed a second time; the effective batch line still is
  EXPECT_EQ(out.find("] epoch 0"), std::string::npos) << out;
  EXPECT_NE(out.find("effective batch size 1"), std::string::npos) << out;
  // every worker line at column 0, and the bar erased before each one that came while it was shown
  const size_t logs = expect_log_lines_at_column_0(out);
  EXPECT_GE(count(out, "worker line at batch"), 27u);
  EXPECT_GE(count(out, "\r\x1b[K["), 20u) << out;
  // redraws: about 10 a second, plus a start and an end frame per stage and one per log line
  const size_t drawn = frames(out);
  EXPECT_GE(drawn, 9u);
  EXPECT_LE(drawn, static_cast<size_t>(10 * r.seconds) + 4 * 6 + logs + 5) << r.seconds << " s\n" << out;
  // no line is wider than the terminal (89 columns of text)
  static const std::regex wide(R"(\r[^\r\n\x1b]{90,})");
  EXPECT_FALSE(std::regex_search(out, wide)) << out;
}

TEST(ProgressTty, NoBarWhenOffOrNotATerminal) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> env{{"PROGRESS_WORKER_DIR", dir.path.string()},
                                                             {"PL_LOG_LEVEL", "info"}};
  auto no_bar = [](const std::string& out, bool epoch_lines) {
    EXPECT_EQ(out.find("\x1b[K"), std::string::npos) << out;
    EXPECT_EQ(out.find("\x1b_plrt"), std::string::npos) << out;
    // today's per-epoch lines, unless the progress output is off altogether
    EXPECT_EQ(out.find("] epoch 0/1  val_acc=") != std::string::npos, epoch_lines) << out;
    EXPECT_EQ(out.find("] epoch 1/1  ") != std::string::npos, epoch_lines) << out;
  };
  // a terminal, the bar (and the per-epoch lines) turned off by the environment
  auto off_env = env;
  off_env.emplace_back("PL_TRAINER_ENABLE_PROGRESS_BAR", "0");
  auto r = run_tty(worker(2, 5, 0, 0), off_env);
  ASSERT_EQ(r.exit_code, 0) << r.bytes;
  no_bar(r.bytes, false);
  // a pipe (CI, files)
  plrt_test::EnvVars pipe_env(env.begin(), env.end());
  auto p = plrt_training::run(worker(2, 5, 0, 0), pipe_env);
  ASSERT_TRUE(p.exited && p.exit_code == 0) << p.output;
  no_bar(p.output, true);
  // PL_TRAINER_ENABLE_PROGRESS_BAR=1 on a pipe: still none
  pipe_env.emplace_back("PL_TRAINER_ENABLE_PROGRESS_BAR", "1");
  p = plrt_training::run(worker(2, 5, 0, 0), pipe_env);
  ASSERT_TRUE(p.exited && p.exit_code == 0) << p.output;
  no_bar(p.output, true);
}

TEST(ProgressTty, MlpOnATerminalAndItsNoProgressBarFlag) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> env{{"PL_LOG_LEVEL", "info"}};
  auto args = plrt_training::mlp_args({"--epochs", "2", "--root-dir", dir.path.string()});
  auto r = run_tty(args, env, 200);
  ASSERT_EQ(r.exit_code, 0) << r.bytes;
  EXPECT_NE(r.bytes.find("\repoch 1/1  "), std::string::npos) << r.bytes;
  EXPECT_NE(r.bytes.find("train_loss_step="), std::string::npos) << r.bytes;
  EXPECT_NE(r.bytes.find("val_acc="), std::string::npos) << r.bytes;
  expect_log_lines_at_column_0(r.bytes);
  args.push_back("--no-progress-bar");  // no bar, nor the per-epoch lines
  r = run_tty(args, env, 200);
  ASSERT_EQ(r.exit_code, 0) << r.bytes;
  EXPECT_EQ(r.bytes.find("\x1b[K"), std::string::npos) << r.bytes;
  EXPECT_EQ(r.bytes.find("epoch 1/1"), std::string::npos) << r.bytes;
  EXPECT_NE(r.bytes.find("held-out accuracy"), std::string::npos) << r.bytes;
}

TEST(ProgressTty, BadEnableProgressBarValueIsNamed) {
  for (const char* bad : {"yes", "2", "true"}) {
    TempDir dir;
    auto r = run_tty(worker(1, 2, 0, 0),
                     {{"PROGRESS_WORKER_DIR", dir.path.string()}, {"PL_TRAINER_ENABLE_PROGRESS_BAR", bad}});
    EXPECT_EQ(r.exit_code, 2) << r.bytes;
    EXPECT_NE(r.bytes.find(std::string("PL_TRAINER_ENABLE_PROGRESS_BAR='") + bad + "' is not valid: use 0 or 1"),
              std::string::npos)
        << r.bytes;
  }
}

TEST(ProgressTty, UnderPlrunRank0sBarStaysTheLastLine) {
  TempDir dir;
  // two ranks over gloo, both logging a line every 5 batches
  auto argv = plrt_training::plrun("ddp", 2, worker(2, 40, 5, 5));
  auto r = run_tty(argv, {{"PROGRESS_WORKER_DIR", dir.path.string()}, {"PL_LOG_LEVEL", "info"}}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.bytes;
  const std::string& out = r.bytes;
  EXPECT_EQ(out.find("\x1b_plrt"), std::string::npos) << "a marker reached the terminal\n" << out;
  EXPECT_GE(count(out, "\repoch 0/1  "), 2u) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\repoch 1/1  40/40 \[=+\] 100%.*loss=.*\x1b\[K\r\n)"))) << out;
  expect_log_lines_at_column_0(out);
  // rank 1's lines came while the bar was shown, each after an erase or another line, never glued
  EXPECT_GE(count(out, "[rank 1] worker line at batch"), 16u) << out;
  EXPECT_GE(count(out, "\r\x1b[K["), 5u) << out;
  // redraws bounded as alone (plrun redraws once per read after other lines)
  EXPECT_LE(frames(out), static_cast<size_t>(10 * r.seconds) + 4 * 4 + count(out, "[rank ") + 5) << out;
}
