#include "tools/SsuCall.h"

#include "ssmjit/error.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {

using testing::kNumTensors;

std::string caseLabel(const SsuCase& s) {
  std::string l = s.tokens ? strf("ssu-tokens L=%lld", static_cast<long long>(s.L)) : "ssu";
  l += strf(" b=%lld state %s in %s", static_cast<long long>(s.batch), shortDTypeName(s.stateT), shortDTypeName(s.inT));
  if (s.outT != s.inT) l += strf(" out %s", shortDTypeName(s.outT));
  if (s.write != StateWrite::Final) l += strf(" write %s", stateWriteName(s.write));
  if (s.pads) l += strf(" pads %lld", static_cast<long long>(s.pads));
  return l;
}

namespace {

TensorView contiguousView(const testing::TensorDesc& d, void* ptr, DeviceKind device) {
  TensorView v;
  if (!d.present) return v;
  v.data = ptr;
  v.dtype = d.dtype;
  v.ndim = static_cast<int>(d.shape.size());
  v.device = device;
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = d.shape[i];
    v.strides[i] = stride;
    stride *= d.shape[i];
  }
  return v;
}

}  // namespace

SelectiveStateUpdateArgs contiguousArgs(const SsuCase& s, const std::array<void*, kNumTensors>& p, DeviceKind device) {
  const auto t = testing::ssuTensors(s);
  std::array<TensorView, kNumTensors> views;
  for (int i = 0; i < kNumTensors; ++i) views[i] = contiguousView(t[i], p[i], device);
  return testing::ssuArgs(s, views);
}

SelectiveStateUpdateArgs argsWithoutMemory(const SsuCase& s) {
  std::array<void*, kNumTensors> p;
  for (int i = 0; i < kNumTensors; ++i) p[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1) << 20);
  return contiguousArgs(s, p, DeviceKind::CUDA);
}

opspec::SsuSizes checkShapeOptions(const SsuCase& s) {
  const char* op = s.tokens ? "selective_state_update_tokens" : "selective_state_update";
  const std::string invalid = "the shape options give an invalid call: ";
  if (!s.tokens && s.L != 1)
    throw UsageError(invalid + strf("%s: L is %lld, expected 1 (the one-token op)", op, static_cast<long long>(s.L)));
  if (s.pads > s.batch || (s.pads > 0 && !s.stateIdx))
    throw UsageError(invalid + strf("%s: %lld pad rows need state_batch_indices and at most batch = %lld rows", op,
                                    static_cast<long long>(s.pads), static_cast<long long>(s.batch)));
  return invalidCallIsUsageError("shape", [&] { return opspec::checkSsu(argsWithoutMemory(s), s.tokens); });
}

Traffic ssuTraffic(const SsuCase& s) {
  const int64_t rows = s.batch - s.pads;
  const int64_t sb = dtypeBytes(s.stateT), ib = dtypeBytes(s.inT), ob = dtypeBytes(s.outT);
  const int64_t stateRow = s.H * s.P * s.N * sb;
  Traffic t;
  t.stateRead = rows * stateRow;
  switch (s.write) {
    case StateWrite::Final:
      t.stateWritten = rows * stateRow;
      break;
    case StateWrite::None:
      t.stateWritten = 0;
      break;
    case StateWrite::PerToken:
      t.stateWritten = rows * s.L * stateRow;
      break;
  }
  const int64_t perToken =
      s.H * s.P * ib /*x*/ + s.H * ib /*dt*/ + 2 * s.G * s.N * ib /*B, C*/ + (s.hasZ ? s.H * s.P * ib : 0);
  t.inputs = rows * s.L * perToken + s.H * 4 /*A*/ + (s.hasD ? s.H * 4 : 0) + (s.hasDtBias ? s.H * 4 : 0) +
             (s.stateIdx ? s.batch * 4 : 0) + (s.write == StateWrite::PerToken ? s.batch * s.L * 4 : 0);
  t.outputs = rows * s.L * s.H * s.P * ob;
  return t;
}

}  // namespace ssmjit::tool
