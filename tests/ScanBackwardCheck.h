// The check every scan-backward GPU test makes: each gradient the call wrote against the float64
// reference's (already run on the host problem), within its dtype's bound for the backward's fp32
// arithmetic (tools/problems/Tolerance.h).
#pragma once
#include <cstdint>
#include <vector>

#include "GpuTest.h"
#include "tools/problems/ScanBackwardProblem.h"

namespace ssmjit::testing {

// got(k): the bytes the device left in tensor k of p.all(); dinitBefore: dinit's bytes before the
// call (its unread slots must keep them).
template <class Got>
void expectGradients(ScanBackwardProblem& p, Got&& got, const std::vector<uint8_t>& dinitBefore) {
  const Fp32Error e = fp32RecurrenceGradient(p.f.longest());
  for (int k = kFirstScanGradient; k <= kDinit; ++k) {
    const HostTensor& ref = *p.all()[static_cast<size_t>(k)];
    if (!ref.defined) continue;
    const std::vector<uint8_t> bytes = got(k);
    expectWithin(
        k == kDinit ? compareTensor(ref, bytes, dinitBefore, p.written(k)) : compareTensor(ref, bytes, p.written(k)),
        bound(ref.meta.dtype, e), kScanGradients[k - kFirstScanGradient]);
  }
}

}  // namespace ssmjit::testing
