// Helpers shared by the test_sdk sources: one Runtime over the build tree's plugins, the cpu
// device, and two ways of catching the pl::Error a statement throws.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <plrt/sdk/error.hpp>
#include <plrt/sdk/runtime.hpp>
#include <string>

namespace sdk_test {

// A Runtime loading only the plugins built in this tree (no PLRT_* directories from the
// environment), created on first use.
inline pl::Runtime& runtime() {
  static pl::Runtime rt([] {
    pl::RuntimeOptions o;
    o.plugin_dirs = {PLRT_BUILD_PLUGIN_DIR};
    o.use_env_dirs = false;
    o.log_level = "warn";
    return o;
  }());
  return rt;
}

inline constexpr PL_Device kCpu{PL_DEVICE_CPU, 0};

// The message of the pl::Error `fn` throws; a test failure and "" if it throws none.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const pl::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a pl::Error";
  return "";
}

// The message of the pl::Error `f` throws, or "(no error)" (not a failure by itself).
inline std::string error_or_none(const std::function<void()>& f) {
  try {
    f();
  } catch (const pl::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace sdk_test
