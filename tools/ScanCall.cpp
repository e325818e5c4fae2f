#include "tools/ScanCall.h"

#include <algorithm>
#include <numeric>

#include "runtime/ops/SelectiveScanSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

// Distinct 16-byte-aligned addresses, as the tests' fake views: only alignment classes are read.
TensorView fake(int k, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x10000000), t, shape);
}

bool packed(const ScanCall& c) { return !c.packedLengths.empty(); }
int64_t rows(const ScanCall& c) { return packed(c) ? 1 : c.batch; }
int64_t rowLength(const ScanCall& c) {
  return packed(c) ? std::accumulate(c.packedLengths.begin(), c.packedLengths.end(), int64_t{0}) : c.seqlen;
}

SelectiveScanArgs forwardArgs(const ScanCall& c) {
  const int64_t Bt = rows(c), L = rowLength(c);
  SelectiveScanArgs a;
  a.u = fake(1, c.x, {Bt, c.D, L});
  a.delta = fake(2, c.x, {Bt, c.D, L});
  a.out = fake(3, c.x, {Bt, c.D, L});
  a.A = fake(4, DType::F32, {c.D, c.N});
  a.B = c.bcVarying ? fake(5, c.x, {Bt, c.G, c.N, L}) : fake(5, DType::F32, {c.D, c.N});
  a.C = c.bcVarying ? fake(6, c.x, {Bt, c.G, c.N, L}) : fake(6, DType::F32, {c.D, c.N});
  if (c.hasD) a.D = fake(7, DType::F32, {c.D});
  if (c.hasZ) a.z = fake(8, c.x, {Bt, c.D, L});
  if (c.hasDeltaBias) a.delta_bias = fake(9, DType::F32, {c.D});
  a.delta_softplus = c.softplus;
  if (packed(c)) {
    a.cu_seqlens = fake(10, DType::I32, {static_cast<int64_t>(c.packedLengths.size()) + 1});
    a.max_seqlen = *std::max_element(c.packedLengths.begin(), c.packedLengths.end());
  }
  return a;
}

SelectiveScanBackwardArgs backwardArgs(const ScanCall& c) {
  const int64_t Bt = rows(c), L = rowLength(c);
  SelectiveScanBackwardArgs b;
  b.forward = forwardArgs(c);
  b.forward.out = {};
  b.dout = fake(20, c.x, {Bt, c.D, L});
  b.du = fake(21, c.x, {Bt, c.D, L});
  b.ddelta = fake(22, c.x, {Bt, c.D, L});
  b.dA = fake(23, DType::F32, {c.D, c.N});
  b.dB = c.bcVarying ? fake(24, c.x, {Bt, c.G, c.N, L}) : fake(24, DType::F32, {c.D, c.N});
  b.dC = c.bcVarying ? fake(25, c.x, {Bt, c.G, c.N, L}) : fake(25, DType::F32, {c.D, c.N});
  if (c.hasD) b.dD = fake(26, DType::F32, {c.D});
  if (c.hasZ) b.dz = fake(27, c.x, {Bt, c.D, L});
  if (c.hasDeltaBias) b.ddelta_bias = fake(28, DType::F32, {c.D});
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
