// Shared by the runtime tests: runtimes that see exactly the folders a test names.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <plrt/sdk/runtime.hpp>
#include <string>
#include <thread>
#include <vector>

namespace plrt_test {

using Clock = std::chrono::steady_clock;

// Every line the runtime logs.
struct LogCapture {
  std::mutex mu;
  std::vector<std::string> lines;

  static void callback(void* user, PL_LogLevel, const char* line) {
    auto* self = static_cast<LogCapture*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    self->lines.emplace_back(line);
  }
  bool contains(const std::string& needle) { return count(needle) > 0; }
  size_t count(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
  // Waits (at most `limit`) for a line containing every needle; returns it, or "" if none came.
  std::string wait_for(const std::vector<std::string>& needles,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(3000)) {
    auto end = Clock::now() + limit;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& l : lines) {
          bool all = true;
          for (const auto& n : needles) all = all && l.find(n) != std::string::npos;
          if (all) return l;
        }
      }
      if (Clock::now() > end) return {};
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

// A runtime that searches `dirs` only (no PL_PLUGIN_PATH, no build tree), logging quietly.
inline pl::RuntimeOptions isolated(std::vector<std::string> dirs) {
  pl::RuntimeOptions o;
  o.plugin_dirs = std::move(dirs);
  o.use_env_dirs = false;
  o.use_default_dirs = false;
  o.log_level = "warn";
  return o;
}

// Runs `fn`, expects a pl::Error with `code`, and returns its message.
template <class Fn>
std::string error_of(Fn&& fn, PL_ErrorCode code) {
  try {
    fn();
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a pl::Error with code " << code;
  return {};
}

}  // namespace plrt_test
