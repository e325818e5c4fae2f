// ssd_cp and ssd_cp_backward (ssd_parallel.h) on the CPU: the workspace they ask for and the
// errors for calls a part of a context-parallel row cannot make, each naming the argument.
#include <gtest/gtest.h>

#include "runtime/parallel/SsdContextParallel.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeSsdCall.h"

using namespace ssmjit;
using namespace ssmjit::testing;
using detail::checkSsdCp;
using detail::checkSsdCpBackward;
using detail::ssdCpBackwardWorkspaceFloats;
using detail::ssdCpWorkspaceFloats;

namespace {

// A part of 3 sequences over 192 tokens, 4 heads of 16 channels, 16 states, fp32.
constexpr int64_t kH = 4, kP = 16, kN = 16, kL = 192;

FakeSsdShape shape() {
  FakeSsdShape s;
  s.batch = 3, s.L = kL, s.H = kH, s.P = kP, s.G = 1, s.N = kN, s.Q = 64;
  s.x = DType::F32;
  s.packed = true;
  return s;
}

SsdArgs forward() {
  SsdArgs a = fakeSsdInputs(shape());
  a.out = fakeView(6, DType::F32, {1, kL, kH, kP});
  return a;
}

SsdCpCarry carry() {
  SsdCpCarry c;
  c.incoming = fakeView(7, DType::F32, {kH, kP, kN});
  c.decay = fakeView(8, DType::F32, {kH});
  return c;
}

SsdBackwardArgs backward() {
  SsdBackwardArgs b;
  b.forward = fakeSsdInputs(shape());
  b.dout = fakeView(20, DType::F32, {1, kL, kH, kP});
  b.dx = fakeView(21, DType::F32, {1, kL, kH, kP});
  b.ddt = fakeView(22, DType::F32, {1, kL, kH});
  b.dA = fakeView(23, DType::F32, {kH});
  b.dB = fakeView(24, DType::F32, {1, kL, 1, kN});
  b.dC = fakeView(25, DType::F32, {1, kL, 1, kN});
  return b;
}

TensorView workspace(int64_t floats) { return fakeView(30, DType::F32, {floats}); }

TEST(SsdCpValidation, WorkspaceHoldsTheExtrasAndTheSsdsOwn) {
  const SsdArgs a = forward();
  for (ContextPart p : {ContextPart{false, false}, ContextPart{true, true}}) {
    const int64_t extras = detail::ssdCpForwardExtrasBytes(3, kH, kP * kN, 4) / 4;
    EXPECT_GE(ssdCpWorkspaceFloats(a, p, 1, 4), extras + ssd_workspace_size(a));
    EXPECT_GE(extras, 4 * (kH + kH * kP * kN)) << "the gathered rows of 4 ranks";
  }
  const SsdBackwardArgs b = backward();
  const int64_t extras = detail::ssdCpBackwardExtrasBytes(3, kH, kP * kN, 2) / 4;
  EXPECT_GE(extras, 2 * 2 * (kH + kH * kP * kN) + kH * kP * kN) << "gathered and reversed rows, G";
  EXPECT_GE(ssdCpBackwardWorkspaceFloats(b, ContextPart{true, false}, 1, 2), extras + ssd_backward_workspace_size(b));
}

TEST(SsdCpValidation, OneRankIsThePlainOpsCall) {
  SsdArgs a = forward();
  a.workspace = workspace(ssdCpWorkspaceFloats(a, {}, 0, 1));
  EXPECT_NO_THROW(checkSsdCp(a, {}, carry(), 0, 1));
  SsdBackwardArgs b = backward();
  b.workspace = workspace(ssdCpBackwardWorkspaceFloats(b, {}, 0, 1));
  EXPECT_NO_THROW(checkSsdCpBackward(b, {}, carry(), 0, 1));
}

TEST(SsdCpValidation, PartsThatDoNotJoinTheirNeighboursAreNamed) {
  const SsdArgs a = forward();
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpWorkspaceFloats(a, {true, false}, 0, 2); }),
                  "ssd_cp: part.from_previous is true on rank 0, expected false");
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpWorkspaceFloats(a, {false, true}, 1, 2); }),
                  "part.to_next is true on the last rank (1), expected false");
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpBackwardWorkspaceFloats(backward(), {true, false}, 0, 3); }),
                  "ssd_cp_backward: part.from_previous is true on rank 0");
}

TEST(SsdCpValidation, ForwardArgumentsOutsideContextParallelismAreNamed) {
  FakeSsdShape rows = shape();
  rows.packed = false;
  SsdArgs a = fakeSsdInputs(rows);
  a.out = fakeView(6, DType::F32, {3, kL, kH, kP});
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpWorkspaceFloats(a, {}, 0, 2); }), "x has batch 3, expected 1");
  a = forward();
  a.out = {};
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpWorkspaceFloats(a, {}, 0, 2); }), "out is not given");
  a = forward();
  a.sequence_decay = fakeView(9, DType::F32, {3, kH});
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpWorkspaceFloats(a, {}, 0, 2); }), "sequence_decay is given");
  a = forward();
  a.block_state_tokens = 64;
  a.block_states = fakeView(11, DType::F32, {8, kH, kP, kN});
  a.block_state_indices = fakeView(12, DType::I32, {3, 3});
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpWorkspaceFloats(a, {}, 0, 2); }), "block_state_tokens is 64");
  a = forward();
  a.initial_states = fakeView(13, DType::F32, {3, kH, kP, kN});
  EXPECT_NO_THROW(ssdCpWorkspaceFloats(a, {false, true}, 0, 2)) << "the caller's initial states on rank 0";
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpWorkspaceFloats(a, {true, false}, 1, 2); }),
                  "initial_states is given with part.from_previous, expected none");
}

TEST(SsdCpValidation, CarryAndWorkspaceAreNamed) {
  SsdArgs a = forward();
  const ContextPart p{true, true};
  const int64_t need = ssdCpWorkspaceFloats(a, p, 1, 3);
  a.workspace = workspace(need);
  EXPECT_NO_THROW(checkSsdCp(a, p, carry(), 1, 3));
  SsdCpCarry c = carry();
  c.incoming = fakeView(7, DType::F32, {kH, kP, kN + 1});
  EXPECT_MENTIONS(invalidArgMessage([&] { checkSsdCp(a, p, c, 1, 3); }), "carry.incoming", "17");
  c = carry();
  c.incoming = fakeView(7, DType::BF16, {kH, kP, kN});
  EXPECT_MENTIONS(invalidArgMessage([&] { checkSsdCp(a, p, c, 1, 3); }), "carry.incoming", "float32");
  c = carry();
  c.incoming.strides[1] = 1, c.incoming.strides[2] = kP;
  EXPECT_MENTIONS(invalidArgMessage([&] { checkSsdCp(a, p, c, 1, 3); }), "carry.incoming has strides",
                  "expected contiguous");
  c = carry();
  c.decay = {};
  EXPECT_MENTIONS(invalidArgMessage([&] { checkSsdCp(a, p, c, 1, 3); }), "carry.decay");
  a.workspace = workspace(need - 1);
  EXPECT_MENTIONS(invalidArgMessage([&] { checkSsdCp(a, p, carry(), 1, 3); }), "ssd_cp_workspace_size");
}

TEST(SsdCpValidation, BackwardArgumentsOutsideContextParallelismAreNamed) {
  SsdBackwardArgs b = backward();
  b.dfinal_states = fakeView(26, DType::F32, {3, kH, kP, kN});
  EXPECT_NO_THROW(ssdCpBackwardWorkspaceFloats(b, {true, false}, 1, 2)) << "the last rank's final states";
  EXPECT_MENTIONS(invalidArgMessage([&] { ssdCpBackwardWorkspaceFloats(b, {false, true}, 0, 2); }),
                  "dfinal_states is given with part.to_next, expected none");
  b = backward();
  const ContextPart p{true, false};
  b.workspace = workspace(ssdCpBackwardWorkspaceFloats(b, p, 1, 2) - 1);
  EXPECT_MENTIONS(invalidArgMessage([&] { checkSsdCpBackward(b, p, carry(), 1, 2); }),
                  "ssd_cp_backward_workspace_size");
  b.workspace = workspace(b.workspace.numel() + 1);
  SsdCpCarry c = carry();
  c.decay = fakeView(8, DType::F32, {kH + 1});
  EXPECT_MENTIONS(invalidArgMessage([&] { checkSsdCpBackward(b, p, c, 1, 2); }), "ssd_cp_backward", "carry.decay");
}

}  // namespace
