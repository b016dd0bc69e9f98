// Small helpers shared by the SDK's own sources (not installed, not part of the API).
#pragma once

#include <sstream>
#include <string>

namespace pl::internal {

// `v` with 17 significant digits (enough to round-trip a double), for error messages.
inline std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace pl::internal
