// Shared by the runtime tests: runtimes that see exactly the folders a test names.
#pragma once

#include <plrt/sdk/runtime.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace plrt_test {

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
