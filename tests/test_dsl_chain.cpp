// The DSL's chains of programs (ticket, waitFlag, setFlag) on a small kernel of their own
// (ChainKernel.h): the calls the generated CUDA makes, in the order the chain needs, what the
// builder refuses, and NVRTC compiling it. (test_dsl_chain_gpu.cpp runs it.)
#include <gtest/gtest.h>

#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "ssmjit/error.h"
#include "tests/support/ChainKernel.h"
#include "tests/support/OwnKernel.h"

namespace ssmjit::testing {
namespace {

TEST(DslChain, TicketThenWaitThenStoreThenSet) {
  SSMJIT_REQUIRE_NVRTC();
  const std::string cuda = ownKernelCuda(programChainDef(), {"a", "out", "flags"});
  EXPECT_EQ(occurrences(cuda, "ssm_ticket("), 1) << cuda;
  EXPECT_EQ(occurrences(cuda, "ssm_wait_flag("), 1);
  EXPECT_EQ(occurrences(cuda, "ssm_set_flag("), 1);
  const size_t ticket = cuda.find("ssm_ticket("), wait = cuda.find("ssm_wait_flag("),
               store = cuda.find("p_out + "), set = cuda.find("ssm_set_flag(");
  EXPECT_LT(ticket, wait);
  EXPECT_LT(wait, cuda.find("p_out + ", wait)) << "the predecessor's value is read after its flag";
  EXPECT_LT(cuda.rfind("p_out + "), set) << "the value is stored before the flag is set";
  EXPECT_NE(store, std::string::npos);
}

TEST(DslChain, RefusesTileOffsets) {
  for (int which : {0, 1, 2}) {
    dsl::KernelDef def;
    def.name = "chain_bad";
    def.build = [which](KernelBuilder& k, const Specialization&) {
      Value flags = k.ptrArg("flags", dsl::PtrClass::Float), off = k.range(4);
      if (which == 0) k.ticket(flags, off);
      if (which == 1) k.waitFlag(flags, off);
      if (which == 2) k.setFlag(flags, off);
    };
    std::string msg;
    try {
      ownKernelCuda(def, {"flags"});
    } catch (const Error& e) {
      msg = e.what();
    }
    const char* name[] = {"ticket", "waitFlag", "setFlag"};
    EXPECT_NE(msg.find(std::string(name[which]) + " takes a scalar offset, got a tile"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace ssmjit::testing
