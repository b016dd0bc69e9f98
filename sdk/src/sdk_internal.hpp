// The SDK's internal namespace and small helpers shared by its own sources (not installed, not
// part of the API).  Public names live in pl::, every internal part of plrt in plrt:: (the SDK's in
// plrt::sdk, which sees pl's names).
#pragma once

#include <cxxabi.h>

#include <charconv>
#include <cstdlib>
#include <memory>
#include <plrt/sdk/tensor.hpp>
#include <sstream>
#include <string>
#include <typeinfo>

namespace pl {}
namespace plrt::sdk {
using namespace ::pl;  // the SDK's internals are written in terms of its public types
}  // namespace plrt::sdk

namespace plrt::sdk {

// A C++ type's name as written ("pl::nn::Linear"), else the compiler's mangled one.
inline std::string demangled(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(t.name());
}

// A tensor in error messages: "float32 [4, 3]".
inline std::string describe(const pl::Tensor& t) {
  return std::string(pl_dtype_name(t.dtype())) + " " + pl::shape_text(t.shape());
}

// `v` with 17 significant digits (enough to round-trip a double), for error messages.
inline std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// The shortest text that reads back exactly as `v` ("0.1", "-1", "1e-05", "nan").
inline std::string shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// The flat (ndim 1) view of elements [begin, end) of t's data: a parameter's range (ParamRange),
// as kernels take it.  The caller has checked 0 <= begin <= end <= t.numel().
inline PL_Tensor flat_range(const Tensor& t, int64_t begin, int64_t end) {
  PL_Tensor v = t.view();
  v.data = static_cast<char*>(v.data) + static_cast<size_t>(begin) * pl_dtype_size(v.dtype);
  v.numel = end - begin;
  v.ndim = 1;
  v.shape[0] = end - begin;
  return v;
}

}  // namespace plrt::sdk
