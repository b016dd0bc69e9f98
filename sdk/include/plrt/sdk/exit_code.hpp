// The exit codes of plrt's programs (plrun, plrt-mlp) and of programs written with the SDK: the
// one place that says which error ends a program with which code, so that a script (or plrun,
// which passes a worker's code on) reads the same answer from each.
//
//   0  success (and --help)
//   2  bad input: a command-line flag or value (unknown, missing, not a number, extra), an
//      environment variable, a name or file that matches nothing, or a plugin named by the user
//      that cannot be used with this runtime (built for another ABI, refusing the host); the error
//      on stderr names the bad value and what would be valid; nothing has run
//   1  any other failure: a collective, a peer, the network, a file, a bug
//
// Under plrun a worker's code is plrun's (128 + N for a worker killed by signal N).
#pragma once

#include <plrt/sdk/error.hpp>

namespace pl {

constexpr int kExitSuccess = 0;
constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;

// True for the codes the user's input causes: PL_ERR_INVALID_ARGUMENT (a bad value),
// PL_ERR_NOT_FOUND (a name or file that matches nothing), PL_ERR_VERSION (a plugin, or a struct,
// of another ABI version: the plugin loader's verdict on an incompatible file).
constexpr bool is_bad_input(PL_ErrorCode code) noexcept {
  return code == PL_ERR_INVALID_ARGUMENT || code == PL_ERR_NOT_FOUND || code == PL_ERR_VERSION;
}

constexpr int exit_code_for(PL_ErrorCode code) noexcept { return is_bad_input(code) ? kExitBadInput : kExitFailure; }

inline int exit_code_for(const Error& e) noexcept { return exit_code_for(e.code()); }

}  // namespace pl
