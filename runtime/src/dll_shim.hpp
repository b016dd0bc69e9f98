// The one place plrt touches Boost.DLL's version differences.
//
// Boost 1.76 renamed boost::dll::import to boost::dll::import_symbol (import is a C++20 keyword
// in modules).  Everything in plrt calls plrt::rt::dll::import_symbol, which forwards to whichever
// this Boost has.  BOOST_DLL_USE_STD_FS is defined for every target by the top-level CMakeLists
// (it changes Boost.DLL's path and error types, so it must be everywhere or nowhere).
#pragma once

#ifndef BOOST_DLL_USE_STD_FS
#error "BOOST_DLL_USE_STD_FS must be defined for every target (see the top-level CMakeLists.txt)"
#endif

#include <boost/dll/import.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <boost/version.hpp>
#include <filesystem>
#include <string>

namespace plrt::rt::dll {

using boost::dll::shared_library;
namespace load_mode = boost::dll::load_mode;

// Imports a function symbol; the result keeps `lib` loaded for as long as it lives.
template <class Signature>
auto import_symbol(const shared_library& lib, const std::string& name) {
#if BOOST_VERSION >= 107600
  return boost::dll::import_symbol<Signature>(lib, name);
#else
  return boost::dll::import <Signature>(lib, name);
#endif
}

// The file holding the runtime library itself (to find plugins installed beside it).
inline std::filesystem::path this_library_location() {
  std::error_code ec;
  auto p = boost::dll::this_line_location(ec);
  return ec ? std::filesystem::path() : std::filesystem::path(p);
}

}  // namespace plrt::rt::dll
