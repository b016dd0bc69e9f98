// Shared by the C++ plugins: turning C++ failures into PL_Error at the boundary, and checking
// tensor descriptors.  Header-only, and it depends on the C ABI alone, so a plugin that uses it
// still links to no runtime symbol.
#pragma once

#include <plrt/pl_plugin.h>

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <utility>

namespace plrt::plugin {

// An error with a code, thrown inside a plugin and returned as a PL_Error at its boundary.
struct Failure : std::exception {
  Failure(PL_ErrorCode c, std::string m) : code(c), message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
  PL_ErrorCode code;
  std::string message;
};

[[noreturn]] inline void fail(PL_ErrorCode code, std::string message) { throw Failure(code, std::move(message)); }

// A host's error constructor (PL_Host.error_new).
using ErrorNewFn = PL_Error* (*)(PL_ErrorCode code, const char* message);

// Runs `body` and turns any exception into a PL_Error made by `error_new`.
template <class Body>
PL_Error* guard_with(ErrorNewFn error_new, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Failure& f) {
    return error_new(f.code, f.message.c_str());
  } catch (const std::bad_alloc&) {
    return error_new(PL_ERR_RESOURCE, "out of memory");
  } catch (const std::exception& e) {
    return error_new(PL_ERR_INTERNAL, e.what());
  } catch (...) {
    return error_new(PL_ERR_INTERNAL, "unknown exception inside a plugin");
  }
}

// Runs `body` and turns any exception into a PL_Error made by `host`.  Every exported C++
// function of a plugin wraps its body in this: no exception ever crosses the C ABI.
template <class Body>
PL_Error* guard(const PL_Host* host, Body&& body) noexcept {
  return guard_with(host->error_new, std::forward<Body>(body));
}

// printf-style logging through the host table.
inline void logf(const PL_Host* host, PL_LogLevel level, const char* source, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
inline void logf(const PL_Host* host, PL_LogLevel level, const char* source, const char* fmt, ...) {
  if (!host->log_enabled(host->ctx, level)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  host->log(host->ctx, level, source, buf);
}

inline std::string describe(const PL_Tensor& t) {
  return std::string(pl_dtype_name(t.dtype)) + "[" + std::to_string(t.numel) + "]";
}

// Checks a descriptor handed in by the caller: size, dtype, count, data.  `what` names the
// argument in the error ("y", "grad", ...).
inline void check_tensor(const PL_Tensor* t, const char* what) {
  if (t == nullptr) fail(PL_ERR_INVALID_ARGUMENT, std::string(what) + ": tensor is NULL");
  if (t->struct_size < PL_STRUCT_SIZE(PL_Tensor, shape))
    fail(PL_ERR_VERSION, std::string(what) + ": PL_Tensor.struct_size " + std::to_string(t->struct_size) +
                             " is smaller than the v1 size " + std::to_string(PL_STRUCT_SIZE(PL_Tensor, shape)));
  if (pl_dtype_size(t->dtype) == 0)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(what) + ": unknown dtype " + std::to_string(t->dtype) +
                                      " (valid: float32, float64, float16, bfloat16, int32, int64, uint8)");
  if (t->numel < 0)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(what) + ": negative element count " + std::to_string(t->numel));
  if (t->numel > 0 && t->data == nullptr)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(what) + ": data is NULL for " + std::to_string(t->numel) + " elements");
}

}  // namespace plrt::plugin
