// A store server in a process of its own, with a small RLIMIT_NOFILE, for test_store_flood.cpp: the
// real case of a flood is the serving process (node 0's plrun) running out of descriptors, which a
// test cannot do to its own process without hurting the test.  Its log goes to stderr, one line
// each.
//
//   store_flood_server NOFILE FREE DIR TOKEN
//     NOFILE: soft and hard RLIMIT_NOFILE; FREE: -1, or fill the descriptor table with /dev/null
//     until only FREE are left; DIR: it writes DIR/port once serving, closes the filler when
//     DIR/release appears (then writes DIR/released) and exits 0 when DIR/stop does (or after 50 s, exit 3).
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <plrt/sdk/runtime.hpp>
#include <plrt/sdk/store.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

void log_to_stderr(void*, PL_LogLevel, const char* line) {
  std::string s = std::string(line) + "\n";
  (void)!::write(2, s.data(), s.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: store_flood_server NOFILE FREE DIR TOKEN\n");
    return 2;
  }
  rlim_t nofile = std::strtoull(argv[1], nullptr, 10);
  int free_fds = std::atoi(argv[2]);
  std::filesystem::path dir = argv[3];
  rlimit rl{nofile, nofile};
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    std::perror("setrlimit");
    return 2;
  }
  pl::RuntimeOptions ro;
  ro.use_env_dirs = false;
  ro.use_default_dirs = false;
  ro.log_level = "info";
  ro.log_callback = &log_to_stderr;
  pl::Runtime rt(ro);
  pl::StoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.token = argv[4];
  pl::Store store(rt, so);

  // The port file is written before the descriptor table is filled and renamed after (a rename
  // needs no descriptor), so that the test starts once the table is full.  (A sanitizer's runtime
  // needs descriptors of its own: with none left, UBSan's vptr check reports a false error.)
  std::ofstream(dir / "port.tmp") << store.port() << "\n";
  std::vector<int> filler;
  if (free_fds >= 0) {
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
    for (int i = 0; i < free_fds && !filler.empty(); ++i) {
      ::close(filler.back());
      filler.pop_back();
    }
    std::fprintf(stderr, "filled %zu descriptors, %d left free\n", filler.size(), free_fds);
  }
  std::filesystem::rename(dir / "port.tmp", dir / "port");  // the test never reads half a file
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(50);
  while (std::chrono::steady_clock::now() < end) {
    std::error_code ec;
    if (!filler.empty() && std::filesystem::exists(dir / "release", ec)) {
      for (int fd : filler) ::close(fd);
      filler.clear();
      std::fprintf(stderr, "released the filler descriptors\n");
      std::ofstream(dir / "released") << "\n";
    }
    if (std::filesystem::exists(dir / "stop", ec)) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 3;
}
