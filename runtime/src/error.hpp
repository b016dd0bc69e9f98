// The runtime's error object (the PL_Error behind the C ABI) and the C++ exception used inside
// the runtime, converted to a PL_Error at every exported function.
#pragma once

#include <plrt/pl_abi.h>

#include <exception>
#include <string>
#include <utility>

struct PL_Error {
  PL_ErrorCode code;
  std::string message;
};

namespace plrt::rt {

struct Error : std::exception {
  Error(PL_ErrorCode c, std::string m) : code(c), message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
  PL_ErrorCode code;
  std::string message;
};

[[noreturn]] inline void fail(PL_ErrorCode code, std::string message) { throw Error(code, std::move(message)); }

// Returned when even an error cannot be allocated; pl_error_destroy never frees it.
PL_Error* oom_error() noexcept;

inline PL_Error* make_error(PL_ErrorCode code, std::string message) noexcept {
  try {
    return new PL_Error{code, std::move(message)};
  } catch (...) {
    return oom_error();
  }
}

}  // namespace plrt::rt
