// The error a call throws, for the strategy tests' expectations on its code and message.
#pragma once

#include <gtest/gtest.h>

#include <plrt/sdk/error.hpp>

namespace strattest {

// The pl::Error that `fn` throws (fails the test when there is none).
template <class Fn>
pl::Error error_of(Fn&& fn) {
  try {
    fn();
  } catch (const pl::Error& e) {
    return e;
  }
  ADD_FAILURE() << "the call succeeded";
  return pl::Error(PL_ERR_OK, "");
}

}  // namespace strattest
