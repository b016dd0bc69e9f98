// Small helpers the unit suites share (header-only: the target plrt_test_unit_support).  GoogleTest and,
// for invalid_message, the SDK's pl::Error must be available to the includer.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <plrt/sdk/error.hpp>
#include <string>

namespace plrt_test {

// Sets an environment variable for the scope (a NULL value or std::nullopt unsets it), then puts
// the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ScopedEnv(const char* name, std::nullopt_t) : ScopedEnv(name, static_cast<const char*>(nullptr)) {}
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// f() must throw pl::Error with PL_ERR_INVALID_ARGUMENT: returns its message (a test failure, and
// "", when f throws nothing).
template <class F>
std::string invalid_message(F&& f) {
  try {
    f();
  } catch (const pl::Error& e) {
    EXPECT_EQ(e.code(), PL_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace plrt_test
