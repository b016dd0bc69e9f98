// pl::Error: a PL_Error turned into a C++ exception on the host side of the C ABI.
#pragma once

#include <plrt/runtime.h>

#include <stdexcept>
#include <string>

namespace pl {

class Error : public std::runtime_error {
 public:
  Error(PL_ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  PL_ErrorCode code() const noexcept { return code_; }

 private:
  PL_ErrorCode code_;
};

// Takes ownership of `e`: frees it and throws its code and message.  No-op for NULL.
inline void check(PL_Error* e) {
  if (!e) return;
  Error err(pl_error_code(e), pl_error_message(e));
  pl_error_destroy(e);
  throw err;
}

// The same, for an error made by a plugin through its host table.
inline void check(const PL_Host* host, PL_Error* e) {
  if (!e) return;
  Error err(host->error_code(e), host->error_message(e));
  host->error_destroy(e);
  throw err;
}

}  // namespace pl
