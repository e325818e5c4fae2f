#include "tools/ScanCall.h"

#include <algorithm>
#include <numeric>

#include "runtime/ops/SelectiveScanSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

bool packed(const ScanCall& c) { return !c.packedLengths.empty(); }
int64_t rows(const ScanCall& c) { return packed(c) ? 1 : c.batch; }
int64_t rowLength(const ScanCall& c) {
  return packed(c) ? std::accumulate(c.packedLengths.begin(), c.packedLengths.end(), int64_t{0}) : c.seqlen;
}

SelectiveScanArgs forwardArgs(const ScanCall& c) {
  const int64_t Bt = rows(c), L = rowLength(c);
  SelectiveScanArgs a;
  a.u = fakeDeviceView(1, c.x, {Bt, c.D, L});
  a.delta = fakeDeviceView(2, c.x, {Bt, c.D, L});
  a.out = fakeDeviceView(3, c.x, {Bt, c.D, L});
  a.A = fakeDeviceView(4, DType::F32, {c.D, c.N});
  a.B = c.bcVarying ? fakeDeviceView(5, c.x, {Bt, c.G, c.N, L}) : fakeDeviceView(5, DType::F32, {c.D, c.N});
  a.C = c.bcVarying ? fakeDeviceView(6, c.x, {Bt, c.G, c.N, L}) : fakeDeviceView(6, DType::F32, {c.D, c.N});
  if (c.hasD) a.D = fakeDeviceView(7, DType::F32, {c.D});
  if (c.hasZ) a.z = fakeDeviceView(8, c.x, {Bt, c.D, L});
  if (c.hasDeltaBias) a.delta_bias = fakeDeviceView(9, DType::F32, {c.D});
  a.delta_softplus = c.softplus;
  if (packed(c)) {
    a.cu_seqlens = fakeDeviceView(10, DType::I32, {static_cast<int64_t>(c.packedLengths.size()) + 1});
    a.max_seqlen = *std::max_element(c.packedLengths.begin(), c.packedLengths.end());
  }
  return a;
}

SelectiveScanBackwardArgs backwardArgs(const ScanCall& c) {
  const int64_t Bt = rows(c), L = rowLength(c);
  SelectiveScanBackwardArgs b;
  b.forward = forwardArgs(c);
  b.forward.out = {};
  b.dout = fakeDeviceView(20, c.x, {Bt, c.D, L});
  b.du = fakeDeviceView(21, c.x, {Bt, c.D, L});
  b.ddelta = fakeDeviceView(22, c.x, {Bt, c.D, L});
  b.dA = fakeDeviceView(23, DType::F32, {c.D, c.N});
  b.dB = c.bcVarying ? fakeDeviceView(24, c.x, {Bt, c.G, c.N, L}) : fakeDeviceView(24, DType::F32, {c.D, c.N});
  b.dC = c.bcVarying ? fakeDeviceView(25, c.x, {Bt, c.G, c.N, L}) : fakeDeviceView(25, DType::F32, {c.D, c.N});
  if (c.hasD) b.dD = fakeDeviceView(26, DType::F32, {c.D});
  if (c.hasZ) b.dz = fakeDeviceView(27, c.x, {Bt, c.D, L});
  if (c.hasDeltaBias) b.ddelta_bias = fakeDeviceView(28, DType::F32, {c.D});
  return b;
}

}  // namespace

std::string scanCallLabel(const ScanCall& c) {
  std::string l = strf("%s D%lld N%lld G%lld ", c.backward ? "scan-backward" : "scan", static_cast<long long>(c.D),
                       static_cast<long long>(c.N), static_cast<long long>(c.G));
  l += packed(c) ? strf("packed %zu seqs (%lld tokens)", c.packedLengths.size(), static_cast<long long>(rowLength(c)))
                 : strf("b=%lld L=%lld", static_cast<long long>(c.batch), static_cast<long long>(c.seqlen));
  l += std::string(" ") + dtypeName(c.x) + (c.bcVarying ? " varying B/C" : " constant B/C");
  if (!c.hasD) l += " no-D";
  if (!c.hasZ) l += " no-z";
  if (!c.hasDeltaBias) l += " no-dt-bias";
  if (!c.softplus) l += " no-softplus";
  return l;
}

std::vector<Specialization> scanCallSpecializations(const ScanCall& c) {
  try {
    return c.backward ? detail::scanBackwardSpecializations(backwardArgs(c), c.arch)
                      : detail::scanSpecializations(forwardArgs(c), c.arch);
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::InvalidArgument) throw;
    throw UsageError(std::string("the scan options give an invalid call: ") + e.what());
  }
}

}  // namespace ssmjit::tool
