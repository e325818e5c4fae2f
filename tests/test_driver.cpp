// The dlopen'ed driver on any machine: without a driver it reports why instead of crashing.
#include <gtest/gtest.h>

#include <string>

#include "runtime/Driver.h"
#include "ssmjit/error.h"

TEST(Driver, AvailabilityIsConsistentWithApi) {
  std::string why;
  bool ok = ssmjit::driver::available(&why);
  if (ok) {
    EXPECT_NO_THROW(ssmjit::driver::api());
  } else {
    EXPECT_FALSE(why.empty());
    try {
      ssmjit::driver::api();
      FAIL() << "api() must throw when the driver is unavailable";
    } catch (const ssmjit::Error& e) {
      EXPECT_EQ(e.kind(), ssmjit::Error::Kind::Unavailable);
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}
