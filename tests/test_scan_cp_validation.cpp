// selective_scan_cp and selective_scan_cp_backward (scan_parallel.h) on the CPU: the workspace
// they ask for and the errors for calls a part of a context-parallel row cannot make, each naming
// the argument. The parts' checks shared with ssd_cp (CpExchange.h) are pinned in
// test_ssd_cp_validation.cpp; here, that the scan's ops run them on their own arguments.
#include <gtest/gtest.h>

#include "runtime/parallel/ScanContextParallel.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"

using namespace ssmjit;
using namespace ssmjit::testing;
using detail::checkScanCp;
using detail::checkScanCpBackward;
using detail::scanCpBackwardWorkspaceFloats;
using detail::scanCpWorkspaceFloats;

namespace {

// A part of 3 sequences over 192 tokens, 32 channels, 16 states, time-varying B and C in one
// group, fp32.
constexpr int64_t kD = 32, kN = 16, kL = 192;

TensorView onCuda(TensorView t) {
  t.device = DeviceKind::CUDA;
  return t;
}
TensorView fake(int k, DType t, std::initializer_list<int64_t> shape) { return onCuda(fakeView(k, t, shape)); }

SelectiveScanArgs forward() {
  SelectiveScanArgs a;
  a.u = fake(1, DType::F32, {1, kD, kL});
  a.delta = fake(2, DType::F32, {1, kD, kL});
  a.A = fake(3, DType::F32, {kD, kN});
  a.B = fake(4, DType::F32, {1, 1, kN, kL});
  a.C = fake(5, DType::F32, {1, 1, kN, kL});
  a.out = fake(6, DType::F32, {1, kD, kL});
  a.cu_seqlens = fake(9, DType::I32, {4});
  return a;
}

ScanCpCarry carry() { return {fake(7, DType::F32, {kD, kN}), fake(8, DType::F32, {kD, kN})}; }

SelectiveScanBackwardArgs backward() {
  SelectiveScanBackwardArgs b;
  b.forward = forward();
  b.forward.out = {};
  b.dout = fake(20, DType::F32, {1, kD, kL});
  b.du = fake(21, DType::F32, {1, kD, kL});
  b.ddelta = fake(22, DType::F32, {1, kD, kL});
  b.dA = fake(23, DType::F32, {kD, kN});
  b.dB = fake(24, DType::F32, {1, 1, kN, kL});
  b.dC = fake(25, DType::F32, {1, 1, kN, kL});
  return b;
}

TensorView workspace(int64_t floats) { return fake(30, DType::F32, {floats}); }

TEST(ScanCpValidation, WorkspaceHoldsTheExtrasAndTheScansOwn) {
  const SelectiveScanArgs a = forward();
  for (ContextPart p : {ContextPart{false, false}, ContextPart{true, true}}) {
    const int64_t extras = detail::scanCpExtrasBytes(3, kD * kN, 4, false) / 4;
    EXPECT_GE(scanCpWorkspaceFloats(a, p, 1, 4), extras + selective_scan_workspace_size(a));
    EXPECT_GE(extras, 4 * 2 * kD * kN) << "the gathered rows of 4 ranks, a decay a state";
  }
  const SelectiveScanBackwardArgs b = backward();
  const int64_t extras = detail::scanCpExtrasBytes(3, kD * kN, 2, true) / 4;
  EXPECT_GE(extras, 2 * 2 * 2 * kD * kN + kD * kN) << "gathered and reversed rows, G";
  EXPECT_GE(scanCpBackwardWorkspaceFloats(b, ContextPart{true, false}, 1, 2),
            extras + selective_scan_backward_workspace_size(b));
}

TEST(ScanCpValidation, OneRankIsThePlainOpsCall) {
  SelectiveScanArgs a = forward();
  a.workspace = workspace(scanCpWorkspaceFloats(a, {}, 0, 1));
  EXPECT_NO_THROW(checkScanCp(a, {}, carry(), 0, 1));
  SelectiveScanBackwardArgs b = backward();
  b.workspace = workspace(scanCpBackwardWorkspaceFloats(b, {}, 0, 1));
  EXPECT_NO_THROW(checkScanCpBackward(b, {}, carry(), 0, 1));
}

TEST(ScanCpValidation, PartsAndArgumentsOutsideContextParallelismAreNamed) {
  SelectiveScanArgs a = forward();
  EXPECT_MENTIONS(invalidArgMessage([&] {
                    scanCpWorkspaceFloats(a, {true, false}, 0, 2);
                  }),
                  "selective_scan_cp: part.from_previous is true on rank 0, expected false");
  EXPECT_MENTIONS(invalidArgMessage([&] {
                    scanCpBackwardWorkspaceFloats(backward(), {false, true}, 2, 3);
                  }),
                  "selective_scan_cp_backward: part.to_next is true on the last rank (2)");
  EXPECT_MENTIONS(invalidArgMessage([&] { scanCpWorkspaceFloats(a, {}, 2, 2); }),
                  "selective_scan_cp: rank is 2 with 2 ranks, expected 0 <= rank < 2");
  a.u = fake(1, DType::F32, {2, kD, kL});
  a.delta = fake(2, DType::F32, {2, kD, kL});
  a.B = fake(4, DType::F32, {2, 1, kN, kL});
  a.C = fake(5, DType::F32, {2, 1, kN, kL});
  a.out = fake(6, DType::F32, {2, kD, kL});
  a.cu_seqlens = {};
  EXPECT_MENTIONS(invalidArgMessage([&] { scanCpWorkspaceFloats(a, {}, 0, 2); }), "u has batch 2, expected 1");
  a = forward();
  a.initial_states = fake(13, DType::F32, {3, kD, kN});
  EXPECT_NO_THROW(scanCpWorkspaceFloats(a, {false, true}, 0, 2)) << "the caller's initial states on rank 0";
  EXPECT_MENTIONS(invalidArgMessage([&] {
                    scanCpWorkspaceFloats(a, {true, false}, 1, 2);
                  }),
                  "initial_states is given with part.from_previous, expected none");
  // The plain op's own check runs first, under the CP op's name.
  a = forward();
  a.A = fake(3, DType::F32, {kD + 1, kN});
  EXPECT_MENTIONS(invalidArgMessage([&] { scanCpWorkspaceFloats(a, {}, 0, 2); }), "selective_scan_cp", "A");
}

TEST(ScanCpValidation, CarryAndWorkspaceAreNamed) {
  SelectiveScanArgs a = forward();
  const ContextPart p{true, true};
  const int64_t need = scanCpWorkspaceFloats(a, p, 1, 3);
  a.workspace = workspace(need);
  EXPECT_NO_THROW(checkScanCp(a, p, carry(), 1, 3));
  ScanCpCarry c = carry();
  c.incoming = fake(7, DType::F32, {kD, kN + 1});
  EXPECT_MENTIONS(invalidArgMessage([&] { checkScanCp(a, p, c, 1, 3); }), "carry.incoming", "17");
  c = carry();
  c.decay = fake(8, DType::F32, {kD});
  EXPECT_MENTIONS(invalidArgMessage([&] { checkScanCp(a, p, c, 1, 3); }), "carry.decay");
  c = carry();
  c.decay.strides[0] = 1, c.decay.strides[1] = kD;
  EXPECT_MENTIONS(invalidArgMessage([&] { checkScanCp(a, p, c, 1, 3); }), "carry.decay has strides",
                  "expected contiguous");
  a.workspace = workspace(need - 1);
  EXPECT_MENTIONS(invalidArgMessage([&] { checkScanCp(a, p, carry(), 1, 3); }), "selective_scan_cp_workspace_size");
}

TEST(ScanCpValidation, BackwardArgumentsOutsideContextParallelismAreNamed) {
  SelectiveScanBackwardArgs b = backward();
  b.dfinal_states = fake(26, DType::F32, {3, kD, kN});
  EXPECT_NO_THROW(scanCpBackwardWorkspaceFloats(b, {true, false}, 1, 2)) << "the last rank's final states";
  EXPECT_MENTIONS(invalidArgMessage([&] {
                    scanCpBackwardWorkspaceFloats(b, {false, true}, 0, 2);
                  }),
                  "dfinal_states is given with part.to_next, expected none");
  b = backward();
  const ContextPart p{true, false};
  b.workspace = workspace(scanCpBackwardWorkspaceFloats(b, p, 1, 2) - 1);
  EXPECT_MENTIONS(invalidArgMessage([&] { checkScanCpBackward(b, p, carry(), 1, 2); }),
                  "selective_scan_cp_backward_workspace_size");
}

}  // namespace
