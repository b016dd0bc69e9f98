// The SDK's internal namespace and small helpers shared by its own sources (not installed, not
// part of the API).  Public names live in pl::, every internal part of plrt in plrt:: (the SDK's in
// plrt::sdk, which sees pl's names).
#pragma once

#include <sstream>
#include <string>

namespace pl {}
namespace plrt::sdk {
using namespace ::pl;  // the SDK's internals are written in terms of its public types
}  // namespace plrt::sdk

namespace plrt::sdk {

// `v` with 17 significant digits (enough to round-trip a double), for error messages.
inline std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace plrt::sdk
