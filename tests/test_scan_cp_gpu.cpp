// The Mamba-1 scan's context parallelism (scan_parallel.h) on the GPU:
//   - the part's decay carries a state as the scan does: a part of one sequence scanned from a
//     random state S0 ends at a S0 + b, b its end state from zero (one GPU);
//   - the correction of a part scanned from zero by the incoming state equals the scan from that
//     state, and stops where the state's share has decayed to 0; that state's gradient alone
//     equals the backward's (one GPU);
//   - over SSMJIT_TEST_GPUS ranks, one process each (RankProcesses.h): selective_scan_cp and
//     selective_scan_cp_backward on each rank's part of a packed row whose middle sequence crosses
//     every rank boundary, against selective_scan and selective_scan_backward of the whole row on
//     one GPU: out, the final states of the sequences that end on the rank, and every gradient;
//     with final states asked for and without (a part continuing from the previous rank corrects
//     its outputs and that final state by the incoming state's share; one continuing both ways,
//     from 3 ranks, scans again when final states are asked for); the same rank code with the
//     ranks as threads on one GPU (RankThreads.h), at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "GpuTest.h"
#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/parallel/ScanCpCorrect.h"
#include "runtime/parallel/ScanCpDecay.h"
#include "runtime/parallel/ScanCpStateGrad.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/scan_parallel.h"
#include "support/RandomMamba2Layer.h"
#include "support/RankChecks.h"
#include "support/RankProcesses.h"
#include "support/RankThreads.h"

namespace ssmjit {
namespace {

using testing::kRankBound;
using testing::onDevice;
using testing::range;
using testing::worstError;

// A row of T tokens, D channels, N states, fp32: u, delta, z and dout (D, T), time-varying B and C
// in one group (N, T), A (D, N), D and delta_bias (D,), delta softplus'd. |dt' A| is about 0.01 a
// token, so a part's decay over ~100 tokens is near 0.4: the state passed on carries real weight.
struct ScanRow {
  int64_t T = 0, D = 32, N = 16;
  std::vector<float> u, delta, A, B, C, Dv, z, dbias, dout;
};

ScanRow randomScanRow(int64_t T) {
  ScanRow r;
  r.T = T;
  std::mt19937_64 rng(815);
  auto rnd = [&](std::vector<int64_t> shape, double lo, double hi) {
    return testing::randomTensor(rng, std::move(shape), lo, hi).v;
  };
  r.u = rnd({r.D, T}, -1, 1);
  r.delta = rnd({r.D, T}, -1, 1);
  r.A = rnd({r.D, r.N}, -0.5, -0.1);
  r.B = rnd({r.N, T}, -1, 1);
  r.C = rnd({r.N, T}, -1, 1);
  r.Dv = rnd({r.D}, 0.5, 1.5);
  r.z = rnd({r.D, T}, -1, 1);
  r.dbias = rnd({r.D}, -4, -3);
  r.dout = rnd({r.D, T}, -1, 1);
  return r;
}

// Columns [p0, p0 + L) of a (rows, T) array.
std::vector<float> columns(const std::vector<float>& v, int64_t rows, int64_t T, int64_t p0, int64_t L) {
  std::vector<float> out(static_cast<size_t>(rows * L));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < L; ++t) out[i * L + t] = v[i * T + p0 + t];
  return out;
}

DeviceBuffer poisoned(int64_t floats) {
  DeviceBuffer b(static_cast<size_t>(floats * 4));
  b.fill(0xFF);
  return b;
}

// out, the final states (a slot a sequence) and every gradient, as downloaded; per-token arrays
// (D, L) or (N, L).
struct ScanStep {
  std::vector<float> out, finals, du, ddelta, dA, dB, dC, dD, dz, ddbias;
};

// Forward and backward over tokens [p0, p0 + L) of the row, its sequences `cu` (from p0): the
// plain ops without `comm`, else the context-parallel ones with the sums over tokens all-reduced;
// with `finals`, every sequence's final state written (a slot each).
ScanStep scanStep(const ScanRow& r, int64_t p0, int64_t L, const std::vector<int32_t>& cu, Communicator* comm,
                  const ContextPart& part, bool finals = true) {
  OwnedStream stream;
  const int64_t D = r.D, N = r.N, nseq = int64_t(cu.size()) - 1;
  auto cols = [&](const std::vector<float>& v, int64_t rows) {
    return DeviceBuffer::fromHost(columns(v, rows, r.T, p0, L));
  };
  const DeviceBuffer u = cols(r.u, D), delta = cols(r.delta, D), B = cols(r.B, N), C = cols(r.C, N), z = cols(r.z, D),
                     dout = cols(r.dout, D), A = DeviceBuffer::fromHost(r.A), Dv = DeviceBuffer::fromHost(r.Dv),
                     dbias = DeviceBuffer::fromHost(r.dbias), cub = DeviceBuffer::fromHost(cu);
  DeviceBuffer out = poisoned(D * L), finalStates = poisoned(nseq * D * N), du = poisoned(D * L),
               ddelta = poisoned(D * L), dA = poisoned(D * N), dB = poisoned(N * L), dC = poisoned(N * L),
               dD = poisoned(D), dz = poisoned(D * L), ddbias = poisoned(D), incoming = poisoned(D * N),
               decay = poisoned(D * N);
  SelectiveScanArgs a;
  a.u = onDevice(u, DType::F32, {1, D, L});
  a.delta = onDevice(delta, DType::F32, {1, D, L});
  a.A = onDevice(A, DType::F32, {D, N});
  a.B = onDevice(B, DType::F32, {1, 1, N, L});
  a.C = onDevice(C, DType::F32, {1, 1, N, L});
  a.D = onDevice(Dv, DType::F32, {D});
  a.z = onDevice(z, DType::F32, {1, D, L});
  a.delta_bias = onDevice(dbias, DType::F32, {D});
  a.delta_softplus = true;
  a.out = onDevice(out, DType::F32, {1, D, L});
  a.cu_seqlens = onDevice(cub, DType::I32, {nseq + 1});
  if (finals) a.final_states = onDevice(finalStates, DType::F32, {nseq, D, N});
  const ScanCpCarry carry{onDevice(incoming, DType::F32, {D, N}), onDevice(decay, DType::F32, {D, N})};
  const int64_t need = comm ? selective_scan_cp_workspace_size(a, part, *comm) : selective_scan_workspace_size(a);
  DeviceBuffer ws(static_cast<size_t>(need * 4));
  a.workspace = onDevice(ws, DType::F32, {need});
  if (comm)
    selective_scan_cp(a, part, carry, *comm, stream.get());
  else
    selective_scan(a, stream.get());

  SelectiveScanBackwardArgs b;
  b.forward = a;
  b.dout = onDevice(dout, DType::F32, {1, D, L});
  b.du = onDevice(du, DType::F32, {1, D, L});
  b.ddelta = onDevice(ddelta, DType::F32, {1, D, L});
  b.dA = onDevice(dA, DType::F32, {D, N});
  b.dB = onDevice(dB, DType::F32, {1, 1, N, L});
  b.dC = onDevice(dC, DType::F32, {1, 1, N, L});
  b.dD = onDevice(dD, DType::F32, {D});
  b.dz = onDevice(dz, DType::F32, {1, D, L});
  b.ddelta_bias = onDevice(ddbias, DType::F32, {D});
  const int64_t needB =
      comm ? selective_scan_cp_backward_workspace_size(b, part, *comm) : selective_scan_backward_workspace_size(b);
  DeviceBuffer wsB(static_cast<size_t>(needB * 4));
  b.workspace = onDevice(wsB, DType::F32, {needB});
  if (comm) {
    selective_scan_cp_backward(b, part, carry, *comm, stream.get());
    for (const TensorView& sum : {b.dA, b.dD, b.ddelta_bias}) comm->allReduceSum(sum, stream.get());
    comm->synchronize(stream.get(), "the context-parallel scan");
  } else {
    selective_scan_backward(b, stream.get());
    stream.synchronize();
  }
  checkDeviceErrors(stream.get());
  return {out.download<float>(), finalStates.download<float>(), du.download<float>(), ddelta.download<float>(),
          dA.download<float>(),  dB.download<float>(),          dC.download<float>(), dD.download<float>(),
          dz.download<float>(),  ddbias.download<float>()};
}

// (rows, L) part arrays as (L, rows), so that worstError's rows are tokens.
std::vector<float> tokensMajor(const std::vector<float>& v, int64_t rows, int64_t L) {
  std::vector<float> out(v.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < L; ++t) out[t * rows + i] = v[i * L + t];
  return out;
}

// A row's tensors on the device and the plain call over them: fp32, softplus, delta_bias and
// time-varying B and C; D and z where asked; no out, states or workspace yet.
struct DeviceRow {
  int64_t D, N, L;
  DeviceBuffer u, delta, A, B, C, Dv, z, dbias, dout;
  explicit DeviceRow(const ScanRow& r)
      : D(r.D),
        N(r.N),
        L(r.T),
        u(DeviceBuffer::fromHost(r.u)),
        delta(DeviceBuffer::fromHost(r.delta)),
        A(DeviceBuffer::fromHost(r.A)),
        B(DeviceBuffer::fromHost(r.B)),
        C(DeviceBuffer::fromHost(r.C)),
        Dv(DeviceBuffer::fromHost(r.Dv)),
        z(DeviceBuffer::fromHost(r.z)),
        dbias(DeviceBuffer::fromHost(r.dbias)),
        dout(DeviceBuffer::fromHost(r.dout)) {}
  SelectiveScanArgs args(bool withD, bool gated) const {
    SelectiveScanArgs a;
    a.u = onDevice(u, DType::F32, {1, D, L});
    a.delta = onDevice(delta, DType::F32, {1, D, L});
    a.A = onDevice(A, DType::F32, {D, N});
    a.B = onDevice(B, DType::F32, {1, 1, N, L});
    a.C = onDevice(C, DType::F32, {1, 1, N, L});
    if (withD) a.D = onDevice(Dv, DType::F32, {D});
    if (gated) a.z = onDevice(z, DType::F32, {1, D, L});
    a.delta_bias = onDevice(dbias, DType::F32, {D});
    a.delta_softplus = true;
    return a;
  }
};

// A workspace for each of `calls` (the most any needs), set on every one.
DeviceBuffer sharedWorkspace(std::initializer_list<SelectiveScanArgs*> calls) {
  int64_t need = 1;
  for (const SelectiveScanArgs* a : calls)
    need = std::max({need, selective_scan_workspace_size(*a), detail::scanCpCorrectWorkspaceFloats(*a)});
  DeviceBuffer ws(static_cast<size_t>(need * 4));
  for (SelectiveScanArgs* a : calls) a->workspace = onDevice(ws, DType::F32, {need});
  return ws;
}

TEST(ScanCpDecay, CarriesAStateAsTheScanDoes) {
  SSMJIT_REQUIRE_GPU();
  const int64_t L = 300;
  const ScanRow r = randomScanRow(L);
  const int64_t D = r.D, N = r.N;
  std::mt19937_64 rng(5);
  const std::vector<float> s0 = testing::randomTensor(rng, {D, N}, -1, 1).v;
  const DeviceRow row(r);
  const DeviceBuffer init = DeviceBuffer::fromHost(s0);
  DeviceBuffer out = poisoned(D * L), full = poisoned(D * N), fromZero = poisoned(D * N), decay = poisoned(D * N);
  SelectiveScanArgs a = row.args(false, false);
  a.out = onDevice(out, DType::F32, {1, D, L});
  SelectiveScanArgs withState = a;
  withState.initial_states = onDevice(init, DType::F32, {1, D, N});
  withState.final_states = onDevice(full, DType::F32, {1, D, N});
  const DeviceBuffer ws = sharedWorkspace({&a, &withState});
  selective_scan(withState);
  a.final_states = onDevice(fromZero, DType::F32, {1, D, N});
  selective_scan(a);
  detail::scanCpDecay(a, onDevice(decay, DType::F32, {D, N}), nullptr);
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
  checkDeviceErrors();
  const std::vector<float> got = full.download<float>(), b = fromZero.download<float>(), dec = decay.download<float>();
  std::vector<float> want(got.size());
  double lo = 1, hi = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = dec[i] * s0[i] + b[i];
    lo = std::min<double>(lo, dec[i]), hi = std::max<double>(hi, dec[i]);
  }
  const double err = worstError(want, got, N, range(0, D));
  std::fprintf(stderr, "[ measured ] scan decay over %lld tokens in [%.3f, %.3f]; a S0 + b: worst %.2e\n",
               static_cast<long long>(L), lo, hi, err);
  // |A| sum dt' runs from about 0.7 to 10 over the channels and states: some pass most of the
  // state on, some almost none.
  EXPECT_GT(hi, 0.3) << "the decays leave the state a share to check";
  EXPECT_GE(lo, 0.0);
  EXPECT_LE(err, 1e-5);
}

// The correction of a part that scanned its first sequence from zero: out and that sequence's
// final state + the incoming state's share equal the scan from that state, on a packed row of two
// sequences (the second left as it was), with z gating and time-varying C, and with constant C;
// the first sequence spans three of the correction's chunks (1024 tokens each).
TEST(ScanCpCorrect, AddsTheIncomingStatesShare) {
  SSMJIT_REQUIRE_GPU();
  const int64_t L = 2600, first = 2300;  // the first sequence over three of the correction's chunks
  const ScanRow r = randomScanRow(L);
  const int64_t D = r.D, N = r.N;
  std::mt19937_64 rng(6);
  const std::vector<float> s0 = testing::randomTensor(rng, {D, N}, -1, 1).v,
                           cConst = testing::randomTensor(rng, {D, N}, -1, 1).v;
  const std::vector<int32_t> cu = {0, int32_t(first), int32_t(L)}, slots = {0, -1};
  const DeviceRow row(r);
  const DeviceBuffer Cc = DeviceBuffer::fromHost(cConst), init = DeviceBuffer::fromHost(s0),
                     cub = DeviceBuffer::fromHost(cu), idx = DeviceBuffer::fromHost(slots);
  for (bool constantC : {false, true}) {
    SCOPED_TRACE(constantC ? "constant C" : "time-varying C");
    DeviceBuffer corrected = poisoned(D * L), want = poisoned(D * L), finals = poisoned(2 * D * N),
                 wantFinals = poisoned(2 * D * N);
    SelectiveScanArgs a = row.args(true, true);
    if (constantC) a.C = onDevice(Cc, DType::F32, {D, N});
    a.cu_seqlens = onDevice(cub, DType::I32, {3});
    SelectiveScanArgs withState = a;
    a.out = onDevice(corrected, DType::F32, {1, D, L});
    a.final_states = onDevice(finals, DType::F32, {2, D, N});
    withState.out = onDevice(want, DType::F32, {1, D, L});
    withState.final_states = onDevice(wantFinals, DType::F32, {2, D, N});
    withState.initial_states = onDevice(init, DType::F32, {1, D, N});
    withState.initial_state_indices = onDevice(idx, DType::I32, {2});
    const DeviceBuffer ws = sharedWorkspace({&a, &withState});
    selective_scan(withState);
    selective_scan(a);
    const std::vector<float> fromZero = corrected.download<float>(), finalsFromZero = finals.download<float>();
    detail::scanCpCorrect(a, onDevice(init, DType::F32, {D, N}), nullptr);
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
    checkDeviceErrors();
    const std::vector<float> got = tokensMajor(corrected.download<float>(), D, L),
                             ref = tokensMajor(want.download<float>(), D, L), zeroStart = tokensMajor(fromZero, D, L);
    const std::vector<float> gotFinals = finals.download<float>(), refFinals = wantFinals.download<float>();
    const double err = worstError(got, ref, D, range(0, L)), moved = worstError(zeroStart, ref, D, range(0, first));
    const double finalErr = worstError(gotFinals, refFinals, N, range(0, D));
    std::fprintf(stderr,
                 "[ measured ] scan correction: worst %.2e against the scan from the state (%.2e before); "
                 "first final state %.2e\n",
                 err, moved, finalErr);
    EXPECT_LE(err, 1e-5);
    EXPECT_LE(finalErr, 1e-5);
    EXPECT_EQ(std::vector<float>(gotFinals.begin() + D * N, gotFinals.end()),
              std::vector<float>(finalsFromZero.begin() + D * N, finalsFromZero.end()))
        << "the second sequence's final state is left as it was";
    EXPECT_GT(moved, 1e-2) << "the incoming state changes the first sequence's outputs";
    EXPECT_EQ(std::vector<float>(got.begin() + first * D, got.end()),
              std::vector<float>(zeroStart.begin() + first * D, zeroStart.end()))
        << "the second sequence is left as it was";
  }
}

// Where the incoming state's share has decayed to 0 in fp32 the correction stops: with dt' >= 0.31
// and every A <= -1, sum_s A dt' is below -150 by token 512, so C is NaN from there on in the
// correction's call (not in the scans') and the tokens from 512 must be left as they were, while
// the earlier ones equal the scan from the state.
TEST(ScanCpCorrect, StopsWhereTheSharesHaveDecayed) {
  SSMJIT_REQUIRE_GPU();
  const int64_t L = 900, stop = 512;
  ScanRow r = randomScanRow(L);
  const int64_t D = r.D, N = r.N;
  std::mt19937_64 rng(7);
  r.A = testing::randomTensor(rng, {D, N}, -2, -1).v;
  r.dbias = testing::randomTensor(rng, {D}, 0, 1).v;  // dt' = softplus(delta + bias) in [0.31, 2.13]
  std::vector<float> nanC = r.C;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = stop; t < L; ++t) nanC[n * L + t] = NAN;
  const std::vector<float> s0 = testing::randomTensor(rng, {D, N}, -1, 1).v;
  const DeviceRow row(r);
  const DeviceBuffer Cnan = DeviceBuffer::fromHost(nanC), init = DeviceBuffer::fromHost(s0);
  DeviceBuffer corrected = poisoned(D * L), want = poisoned(D * L);
  SelectiveScanArgs a = row.args(false, true);
  SelectiveScanArgs withState = a;
  withState.out = onDevice(want, DType::F32, {1, D, L});
  withState.initial_states = onDevice(init, DType::F32, {1, D, N});
  a.out = onDevice(corrected, DType::F32, {1, D, L});
  const DeviceBuffer ws = sharedWorkspace({&a, &withState});
  selective_scan(withState);
  selective_scan(a);
  const std::vector<float> fromZero = corrected.download<float>();
  a.C = onDevice(Cnan, DType::F32, {1, 1, N, L});
  detail::scanCpCorrect(a, onDevice(init, DType::F32, {D, N}), nullptr);
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
  checkDeviceErrors();
  const std::vector<float> got = tokensMajor(corrected.download<float>(), D, L),
                           ref = tokensMajor(want.download<float>(), D, L), zeroStart = tokensMajor(fromZero, D, L);
  const double err = worstError(got, ref, D, range(0, L)), moved = worstError(zeroStart, ref, D, range(0, 8));
  std::fprintf(stderr, "[ measured ] decayed correction: worst %.2e against the scan from the state (%.2e before)\n",
               err, moved);
  EXPECT_LE(err, 1e-5);
  EXPECT_GT(moved, 1e-2) << "the incoming state changes the first tokens";
  EXPECT_EQ(std::vector<float>(got.begin() + stop * D, got.end()),
            std::vector<float>(zeroStart.begin() + stop * D, zeroStart.end()))
      << "the tokens past the shares' underflow are left as they were";
}

// The incoming state's gradient alone equals selective_scan_backward's dinitial_states for the
// first sequence: one sequence with z, time-varying C and no final-state gradient; a packed row
// of two whose first sequence's final state (slot 1 of 2) has a gradient, with constant C; the
// same with the shares decaying to 0 before the first sequence ends. The first sequence spans
// three chunks, whose partial gradients are summed.
TEST(ScanCpStateGrad, EqualsTheBackwardsInitialStateGradient) {
  SSMJIT_REQUIRE_GPU();
  const int64_t L = 2600, first = 2300;  // the first sequence over three chunks of 1024 tokens
  for (int v = 0; v < 3; ++v) {
    SCOPED_TRACE(v == 0 ? "one sequence" : v == 1 ? "packed, final-state gradient" : "packed, decayed");
    ScanRow r = randomScanRow(L);
    const int64_t D = r.D, N = r.N;
    std::mt19937_64 rng(8 + v);
    if (v == 2) {  // dt' >= 0.31 and A <= -1: the shares underflow within ~350 tokens
      r.A = testing::randomTensor(rng, {D, N}, -2, -1).v;
      r.dbias = testing::randomTensor(rng, {D}, 0, 1).v;
    }
    const std::vector<float> s0 = testing::randomTensor(rng, {D, N}, -1, 1).v,
                             dfin = testing::randomTensor(rng, {2, D, N}, -1, 1).v,
                             cConst = testing::randomTensor(rng, {D, N}, -1, 1).v;
    const std::vector<int32_t> cu = {0, int32_t(first), int32_t(L)}, initSlots = {0, -1}, finSlots = {1, 0};
    const DeviceRow row(r);
    const DeviceBuffer Cc = DeviceBuffer::fromHost(cConst), init = DeviceBuffer::fromHost(s0),
                       dfinal = DeviceBuffer::fromHost(dfin), cub = DeviceBuffer::fromHost(cu),
                       iidx = DeviceBuffer::fromHost(initSlots), fidx = DeviceBuffer::fromHost(finSlots);
    DeviceBuffer out = poisoned(D * L), du = poisoned(D * L), ddelta = poisoned(D * L), dA = poisoned(D * N),
                 dB = poisoned(N * L), dC = poisoned(v ? D * N : N * L), dD = poisoned(D), dz = poisoned(D * L),
                 ddbias = poisoned(D), dinit = poisoned(D * N), alone = poisoned(D * N);
    SelectiveScanBackwardArgs b;
    SelectiveScanArgs& a = b.forward;
    a = row.args(true, v == 0);
    if (v) a.C = onDevice(Cc, DType::F32, {D, N});
    a.out = onDevice(out, DType::F32, {1, D, L});
    a.initial_states = onDevice(init, DType::F32, {1, D, N});
    if (v) {
      a.cu_seqlens = onDevice(cub, DType::I32, {3});
      a.initial_state_indices = onDevice(iidx, DType::I32, {2});
      a.final_state_indices = onDevice(fidx, DType::I32, {2});
      b.dfinal_states = onDevice(dfinal, DType::F32, {2, D, N});
    }
    b.dout = onDevice(row.dout, DType::F32, {1, D, L});
    b.du = onDevice(du, DType::F32, {1, D, L});
    b.ddelta = onDevice(ddelta, DType::F32, {1, D, L});
    b.dA = onDevice(dA, DType::F32, {D, N});
    b.dB = onDevice(dB, DType::F32, {1, 1, N, L});
    b.dC = v ? onDevice(dC, DType::F32, {D, N}) : onDevice(dC, DType::F32, {1, 1, N, L});
    b.dD = onDevice(dD, DType::F32, {D});
    if (v == 0) b.dz = onDevice(dz, DType::F32, {1, D, L});
    b.ddelta_bias = onDevice(ddbias, DType::F32, {D});
    b.dinitial_states = onDevice(dinit, DType::F32, {1, D, N});
    const int64_t need = std::max(selective_scan_backward_workspace_size(b), detail::scanCpStateGradWorkspaceFloats(b));
    DeviceBuffer ws(static_cast<size_t>(need * 4));
    b.workspace = onDevice(ws, DType::F32, {need});
    selective_scan_backward(b);
    detail::scanCpStateGrad(b, onDevice(alone, DType::F32, {D, N}), b.workspace, nullptr);
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
    checkDeviceErrors();
    const std::vector<float> got = alone.download<float>(), want = dinit.download<float>();
    const double err = worstError(got, want, N, range(0, D));
    double scale = 0;
    for (float w : want) scale = std::max<double>(scale, std::abs(w));
    std::fprintf(stderr, "[ measured ] incoming state's gradient alone: worst %.2e against the backward's (max %.2e)\n",
                 err, scale);
    EXPECT_LE(err, 1e-5);
    EXPECT_GT(scale, 1e-2) << "the gradient has something to check";
  }
}

// Rank `rank` of comm's: its part of a row whose middle sequence crosses every rank boundary,
// through selective_scan_cp and its backward, against the whole row on one GPU.
void checkScanCpRank(int rank, Communicator& comm) {
  const int64_t Tr = 96, T = Tr * comm.size(), p0 = rank * Tr, p1 = p0 + Tr;
  const std::vector<int64_t> cu = {0, 40, T - 20, T};
  const ScanRow r = randomScanRow(T);
  const ScanStep ref = scanStep(r, 0, T, std::vector<int32_t>(cu.begin(), cu.end()), nullptr, {});

  // This rank's pieces of the sequences (from global sequence `first`) and how they continue.
  std::vector<int32_t> cuLocal{0};
  ContextPart part;
  int64_t first = -1;
  for (size_t i = 0; i + 1 < cu.size(); ++i) {
    const int64_t s = std::max(cu[i], p0), e = std::min(cu[i + 1], p1);
    if (s >= e) continue;
    if (cuLocal.size() == 1) part.from_previous = cu[i] < p0, first = int64_t(i);
    part.to_next = cu[i + 1] > p1;
    cuLocal.push_back(static_cast<int32_t>(e - p0));
  }
  const int64_t D = r.D, N = r.N;
  auto tok = [&](const std::vector<float>& v, int64_t rows, int64_t L) { return tokensMajor(v, rows, L); };
  // A part continuing from the previous rank adds the incoming state's share to its outputs and
  // its first sequence's final state (scan_cp_correct), but scans again from the incoming state
  // when it also continues into the next rank and final states are asked for.
  for (bool finals : {true, false}) {
    const ScanStep got = scanStep(r, p0, Tr, cuLocal, &comm, part, finals);
    const struct {
      const char* name;
      std::vector<float> g, want;
      int64_t cols;
      std::vector<int64_t> rows;
    } checks[] = {{"out", tok(got.out, D, Tr), tok(ref.out, D, T), D, range(p0, Tr)},
                  {"du", tok(got.du, D, Tr), tok(ref.du, D, T), D, range(p0, Tr)},
                  {"ddelta", tok(got.ddelta, D, Tr), tok(ref.ddelta, D, T), D, range(p0, Tr)},
                  {"dB", tok(got.dB, N, Tr), tok(ref.dB, N, T), N, range(p0, Tr)},
                  {"dC", tok(got.dC, N, Tr), tok(ref.dC, N, T), N, range(p0, Tr)},
                  {"dz", tok(got.dz, D, Tr), tok(ref.dz, D, T), D, range(p0, Tr)},
                  {"dA", got.dA, ref.dA, D * N, range(0, 1)},
                  {"dD", got.dD, ref.dD, D, range(0, 1)},
                  {"ddelta_bias", got.ddbias, ref.ddbias, D, range(0, 1)}};
    for (const auto& c : checks) {
      const double err = worstError(c.g, c.want, c.cols, c.rows);
      std::fprintf(stderr,
                   "[ measured ] CP scan rank %d (from_previous %d, to_next %d, final states %d) %s: worst %.2e "
                   "(bound %.0e)\n",
                   rank, int(part.from_previous), int(part.to_next), int(finals), c.name, err, kRankBound);
      EXPECT_LE(err, kRankBound) << c.name << (finals ? " with" : " without") << " final states";
    }
    if (!finals) continue;
    // The final states of the sequences that end on this rank: local slot i is global sequence
    // first + i (the crossing-out sequence's slot holds its state at the part's end instead).
    const int64_t ending = int64_t(cuLocal.size()) - 1 - (part.to_next ? 1 : 0);
    for (int64_t i = 0; i < ending; ++i) {
      const std::vector<float> g(got.finals.begin() + i * D * N, got.finals.begin() + (i + 1) * D * N);
      const double err = worstError(g, ref.finals, N, range((first + i) * D, D));
      std::fprintf(stderr, "[ measured ] CP scan rank %d final state of sequence %lld: worst %.2e\n", rank,
                   static_cast<long long>(first + i), err);
      EXPECT_LE(err, kRankBound);
    }
  }
}

TEST(ParallelWorker, DISABLED_ContextParallelScanTraining) {
  testing::WorkerRank wr;
  if (!testing::workerRank(&wr)) GTEST_SKIP() << "runs inside ParallelScan.ContextParallelScanTraining";
  checkScanCpRank(wr.rank, *testing::join(wr, {{"test", "cp-scan"}}, 300));
}

TEST(ParallelScan, ContextParallelScanTraining) { testing::expectRanksPass("ContextParallelScanTraining", 300); }

// The same ranks as threads of this process on one GPU (RankThreads.h), 2 and 4 of them.
TEST(ParallelScan, ContextParallelScanTrainingAsThreads) {
  SSMJIT_REQUIRE_GPU();
  for (int n : {2, 4}) testing::runRankThreads(n, checkScanCpRank, 300);
}

}  // namespace
}  // namespace ssmjit
