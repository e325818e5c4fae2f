#include "tools/ScanCall.h"

#include <algorithm>

#include "runtime/OpSpecializations.h"
#include "runtime/ops/Gradients.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "tools/CallRows.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

// The call's tensors by kind, each at fake address k: a (rows, D, L) sequence tensor, A's (D, N),
// B's or C's (time-varying or constant) and a per-channel (D) vector.
TensorView sequenceView(const ScanCall& c, int k) { return fakeDeviceView(k, c.x, {rows(c), c.D, rowLength(c)}); }
TensorView stateMatrixView(const ScanCall& c, int k) { return fakeDeviceView(k, DType::F32, {c.D, c.N}); }
TensorView bcView(const ScanCall& c, int k) {
  return c.bcVarying ? fakeDeviceView(k, c.x, {rows(c), c.G, c.N, rowLength(c)}) : stateMatrixView(c, k);
}
TensorView channelView(const ScanCall& c, int k) { return fakeDeviceView(k, DType::F32, {c.D}); }

SelectiveScanArgs forwardArgs(const ScanCall& c) {
  SelectiveScanArgs a;
  a.u = sequenceView(c, 1);
  a.delta = sequenceView(c, 2);
  a.out = sequenceView(c, 3);
  a.A = stateMatrixView(c, 4);
  a.B = bcView(c, 5);
  a.C = bcView(c, 6);
  if (c.hasD) a.D = channelView(c, 7);
  if (c.hasZ) a.z = sequenceView(c, 8);
  if (c.hasDeltaBias) a.delta_bias = channelView(c, 9);
  a.delta_softplus = c.softplus;
  a.serial_seqlen = c.serialSeqlen;
  a.compile_backward = c.train;
  if (packed(c)) {
    a.cu_seqlens = fakeDeviceView(10, DType::I32, {static_cast<int64_t>(c.packedLengths.size()) + 1});
    a.max_seqlen = *std::max_element(c.packedLengths.begin(), c.packedLengths.end());
  }
  return a;
}

SelectiveScanBackwardArgs backwardArgs(const ScanCall& c) {
  SelectiveScanBackwardArgs b;
  b.forward = forwardArgs(c);
  detail::setGradientsLikeInputs(b, 20, [](const TensorView&, int k) { return fakeDeviceAddress(k); });
  b.forward.out = {};
  return b;
}

}  // namespace

std::string scanCallLabel(const ScanCall& c) {
  std::string l = strf("%s D%lld N%lld G%lld ", c.backward ? "scan-backward" : "scan", static_cast<long long>(c.D),
                       static_cast<long long>(c.N), static_cast<long long>(c.G));
  l += packed(c) ? strf("packed %zu seqs (%lld tokens)", c.packedLengths.size(), static_cast<long long>(rowLength(c)))
                 : strf("b=%lld L=%lld", static_cast<long long>(c.batch), static_cast<long long>(c.seqlen));
  if (c.serialSeqlen > 0) l += strf(" serial<=%lld", static_cast<long long>(c.serialSeqlen));
  if (c.train) l += " train";
  l += std::string(" ") + dtypeName(c.x) + (c.bcVarying ? " varying B/C" : " constant B/C");
  return l + absentInputsLabel(c.hasD, c.hasZ, c.hasDeltaBias, c.softplus);
}

std::vector<Specialization> scanCallSpecializations(const ScanCall& c) {
  return invalidCallIsUsageError("scan", [&] {
    return c.backward ? opspec::scanBackward(backwardArgs(c), c.arch) : opspec::scan(forwardArgs(c), c.arch);
  });
}

}  // namespace ssmjit::tool
