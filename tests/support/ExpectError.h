// The validation tests' one way to call something that must refuse its input, and to read what it
// says.
#pragma once
#include <gtest/gtest.h>

#include <initializer_list>
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

// Expects `msg` (evaluated once) to contain every part. Strings, not char pointers: the list's
// elements live through the loop (temporaries inside a braced list of const char* would not).
#define EXPECT_MENTIONS(msg, ...)                                                      \
  for (const std::string& sjMsg_ : {std::string(msg)})                                 \
    for (const std::string& sjPart_ : std::initializer_list<std::string>{__VA_ARGS__}) \
  EXPECT_NE(sjMsg_.find(sjPart_), std::string::npos) << "missing \"" << sjPart_ << "\" in: " << sjMsg_
