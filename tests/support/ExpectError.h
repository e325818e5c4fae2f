// The validation tests' one way to call something that must refuse its input.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "ssmjit/error.h"

namespace ssmjit::testing {

// Runs `f`, expects ssmjit::Error(InvalidArgument) and returns its message.
template <class F>
std::string invalidArgMessage(F f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected ssmjit::Error(InvalidArgument), nothing was thrown";
  return {};
}

}  // namespace ssmjit::testing
