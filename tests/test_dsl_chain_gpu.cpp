// The DSL's chain of programs (ChainKernel.h) on the GPU: 4096 programs, about twice what an
// H100 holds at once, each waiting for its predecessor's flag; the running values must equal the
// serial recurrence bit for bit (a halving is exact, so the order alone decides them), and the
// launch must end (tickets follow the order programs start in, so no program waits on one that
// cannot start). Run twice on the same flags, zeroed in between, as the SSD op zeroes them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "tests/support/ChainKernel.h"
#include "tests/support/LaunchOwnKernel.h"

namespace ssmjit {
namespace {

class DslChainGpu : public testing::GpuTest {};

TEST_F(DslChainGpu, EveryProgramSeesItsPredecessorsValue) {
  constexpr unsigned kPrograms = 4096;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> u(0, 7);
  std::vector<float> a(kPrograms), want(kPrograms);
  for (unsigned t = 0; t < kPrograms; ++t) {
    a[t] = float(u(rng));
    want[t] = (t ? want[t - 1] * 0.5f : 0.f) + a[t];
  }
  Specialization spec;
  for (const char* p : {"a", "out", "flags"})
    spec.set(std::string("dtype:") + p, (int)DType::F32).set(std::string("align:") + p, 16);
  spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
  DeviceBuffer da = DeviceBuffer::fromHost(a);
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer dout = DeviceBuffer::fromHost(std::vector<float>(kPrograms, NAN));
    DeviceBuffer flags = DeviceBuffer::fromHost(std::vector<int32_t>(16 + kPrograms, 0));
    testing::launchOwnKernel(testing::programChainDef(), spec,
                             {{"a", da.ptr()}, {"out", dout.ptr()}, {"flags", flags.ptr()}}, {}, kPrograms);
    const std::vector<float> out = dout.download<float>();
    int bad = 0;
    for (unsigned t = 0; t < kPrograms; ++t)
      if (out[t] != want[t] && bad++ < 5) ADD_FAILURE() << "out[" << t << "] = " << out[t] << ", want " << want[t];
    EXPECT_EQ(bad, 0) << "run " << run;
    const std::vector<int32_t> words = flags.download<int32_t>();
    EXPECT_EQ(words[0], int32_t(kPrograms)) << "every program took one ticket";
  }
}

}  // namespace
}  // namespace ssmjit
