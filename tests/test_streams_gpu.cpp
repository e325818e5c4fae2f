// The ops on streams other than the default one: the two one-token decode ops
// (selective_state_update, causal_conv1d_update) captured in a CUDA graph and replayed, equal to
// eager launches bit for bit; two threads each running ops on its own stream at once, each
// checking its results and checkDeviceErrors(stream); a tensor that says it lives on another
// device rejected before launch.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "GpuTest.h"
#include "SsuTestUtil.h"
#include "runtime/CudaGraph.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/ConvProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;
using ssutest::expectMatches;

namespace {

SsuCase oneTokenCase(uint64_t seed) {
  SsuCase c = mamba2_2p7bHeads();
  c.tokens = false;
  c.batch = 4;
  c.stateT = c.inT = c.outT = DType::BF16;
  c.stateIdx = true;
  c.pads = 1;
  c.seed = seed;
  return c;
}

TEST(DecodeOpsInGraphs, OneTokenStateUpdate) {
  SSMJIT_REQUIRE_GPU();
  const SsuProblem p = makeProblem(oneTokenCase(9101));
  DeviceProblem dp(p);
  OwnedStream stream;
  selective_state_update(dp.args, stream);  // compiles and loads: not allowed inside a capture
  checkDeviceErrors(stream);                // and allocates the device status record
  const auto directOut = dp.download(kOut), directState = dp.download(kState);
  dp.upload(p);
  CudaGraph g = CudaGraph::capture(stream, [&](CUstream s) { selective_state_update(dp.args, s); });
  ASSERT_TRUE(g.valid());
  stream.synchronize();
  EXPECT_EQ(dp.download(kOut), p.out.bytes) << "capturing must not run the op";
  g.launch(stream);
  checkDeviceErrors(stream);
  EXPECT_EQ(dp.download(kOut), directOut) << "replay == direct launch, bit for bit";
  EXPECT_EQ(dp.download(kState), directState);
  // A replay reads what the buffers hold now.
  SsuProblem q = p;
  std::mt19937_64 rng(77);
  fillUniform(q.x, rng, -1, 1);
  fillUniform(q.C, rng, -1, 1);
  dp.upload(q);
  g.launch(stream);
  checkDeviceErrors(stream);
  SsuProblem ref = q;
  runReference(ref);
  expectMatches(q, ref, dp.download(kOut), dp.download(kState), rowsWritten(q), q.slotMayBeWritten);
}

TEST(DecodeOpsInGraphs, ConvUpdate) {
  SSMJIT_REQUIRE_GPU();
  ConvUpdateCase c;
  c.xType = c.stateType = DType::BF16;
  c.D = 200, c.batch = 5, c.slots = 7, c.L = 1;
  ConvUpdateProblem p(c);
  DeviceTensors eager(p.all()), graphed(p.all());
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (after uploading inputs)");
  OwnedStream stream;
  causal_conv1d_update(deviceArgs(p, eager), stream);  // compiles and loads before the capture
  checkDeviceErrors(stream);
  const CausalConv1dUpdateArgs ga = deviceArgs(p, graphed);
  CudaGraph g = CudaGraph::capture(stream, [&](CUstream s) { causal_conv1d_update(ga, s); });
  ASSERT_TRUE(g.valid());
  // Three committed steps each: the state advances the same way on both copies.
  g.launch(stream);
  for (int step = 1; step < 3; ++step) {
    causal_conv1d_update(deviceArgs(p, eager), stream);
    g.launch(stream);
  }
  checkDeviceErrors(stream);
  EXPECT_EQ(eager.download(4), graphed.download(4)) << "out";
  EXPECT_EQ(eager.download(0), graphed.download(0)) << "state";
}

// Two threads, each with its own stream and problem (distinct kernels: a multi-token fp32 call
// and a one-token bf16 one), running their op several times at once; each checks its own stream
// and results against the reference.
TEST(Concurrency, TwoThreadsTwoStreams) {
  SSMJIT_REQUIRE_GPU();
  SsuCase tok = ssutest::oddSizes();
  tok.L = 5, tok.batch = 9, tok.stateIdx = true, tok.pads = 1, tok.seed = 9201;
  const SsuCase cases[2] = {tok, oneTokenCase(9202)};
  std::vector<std::thread> threads;
  for (const SsuCase& c : cases)
    threads.emplace_back([c] {
      driver::ensureContext();  // the context is current per thread
      const SsuProblem p = makeProblem(c);
      SsuProblem ref = p;
      runReference(ref);
      DeviceProblem dp(p);
      OwnedStream stream;
      for (int i = 0; i < 6; ++i) {
        dp.upload(p);
        runOp(c.tokens, dp.args, stream);
        EXPECT_NO_THROW(checkDeviceErrors(stream)) << c.name();
        SCOPED_TRACE(c.name() + " run " + std::to_string(i));
        expectMatches(p, ref, dp.download(kOut), dp.download(kState), rowsWritten(p), p.slotMayBeWritten);
      }
    });
  for (std::thread& t : threads) t.join();
}

// Every tensor of a call must be on one device: one that says another is rejected before launch,
// naming it and the device.
TEST(OpChecksGpu, TensorOnAnotherDeviceIsRejected) {
  SSMJIT_REQUIRE_GPU();
  const SsuProblem p = makeProblem(oneTokenCase(9301));
  DeviceProblem dp(p);
  SelectiveStateUpdateArgs a = dp.args;
  a.x.deviceId = 1;
  const auto stateBefore = dp.download(kState);
  try {
    selective_state_update(a);
    ADD_FAILURE() << "x on device 1 was accepted with the state on device 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("x is on CUDA device 1, expected device 0"), std::string::npos) << e.what();
  }
  checkDeviceErrors();
  EXPECT_EQ(dp.download(kState), stateBefore) << "the rejected call wrote the state";
}

}  // namespace
