#include "tools/SsdCall.h"

#include "runtime/OpSpecializations.h"
#include "runtime/ops/Gradients.h"
#include "ssmjit/enum_name.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "tools/CallRows.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

const char* name(const SsdCall& c) { return c.backward ? "ssd-backward" : "ssd"; }

SsdArgs args(const SsdCall& c) {
  const int64_t R = rows(c), L = rowLength(c), nseq = sequences(c);
  SsdArgs a;
  a.x = fakeDeviceView(1, c.x, {R, L, c.H, c.P});
  a.dt = fakeDeviceView(2, c.x, {R, L, c.H});
  a.A = fakeDeviceView(3, DType::F32, {c.H});
  a.B = fakeDeviceView(4, c.x, {R, L, c.G, c.N});
  a.C = fakeDeviceView(5, c.x, {R, L, c.G, c.N});
  if (c.hasD) a.D = fakeDeviceView(6, DType::F32, {c.H});
  if (c.hasZ) a.z = fakeDeviceView(7, c.x, {R, L, c.H, c.P});
  if (c.dtBias) a.dt_bias = fakeDeviceView(8, DType::F32, {c.H});
  a.dt_softplus = c.softplus;
  a.chunk_size = static_cast<int>(c.chunk);
  a.compile_backward = c.train;
  a.out = fakeDeviceView(9, c.x, {R, L, c.H, c.P});
  if (c.savedY) a.y = fakeDeviceView(14, DType::F32, {R, L, c.H, c.P});
  if (packed(c)) a.cu_seqlens = fakeDeviceView(10, DType::I32, {nseq + 1});
  if (c.states != SsdStates::None) a.final_states = fakeDeviceView(11, c.state, {nseq, c.H, c.P, c.N});
  if (c.states == SsdStates::Slots) {
    a.initial_states = a.final_states;
    a.initial_state_indices = fakeDeviceView(12, DType::I32, {nseq});
    a.final_state_indices = fakeDeviceView(13, DType::I32, {nseq});
  }
  return a;
}

// The gradients of the forward call: states' gradients wherever the forward has states.
SsdBackwardArgs backwardArgs(const SsdCall& c) {
  const int64_t nseq = sequences(c);
  SsdBackwardArgs b;
  b.forward = args(c);
  detail::setGradientsLikeInputs(b, 20, [](const TensorView&, int k) { return fakeDeviceAddress(k); });
  b.forward.out = {};
  if (c.states != SsdStates::None) b.dfinal_states = fakeDeviceView(29, c.state, {nseq, c.H, c.P, c.N});
  if (c.states == SsdStates::Slots) b.dinitial_states = fakeDeviceView(30, c.state, {nseq, c.H, c.P, c.N});
  return b;
}

}  // namespace

const std::vector<std::string>& ssdStatesNames() {
  static const std::vector<std::string> names = {"none", "final", "slots"};
  return names;
}

const char* ssdStatesName(SsdStates s) { return ssdStatesNames().at(static_cast<size_t>(s)).c_str(); }

SsdStates parseSsdStates(const std::string& name, const char* option) {
  for (SsdStates s : {SsdStates::None, SsdStates::Final, SsdStates::Slots})
    if (name == ssdStatesName(s)) return s;
  throw UsageError(std::string(option) + " is '" + name + "', expected none, final or slots");
}

std::string ssdCallLabel(const SsdCall& c) {
  std::string l =
      strf("%s H%lld P%lld N%lld G%lld chunk %lld ", name(c), static_cast<long long>(c.H), static_cast<long long>(c.P),
           static_cast<long long>(c.N), static_cast<long long>(c.G), static_cast<long long>(c.chunk));
  l += packed(c) ? strf("packed %zu seqs (%lld tokens)", c.packedLengths.size(), static_cast<long long>(rowLength(c)))
                 : strf("b=%lld L=%lld", static_cast<long long>(c.batch), static_cast<long long>(c.seqlen));
  l += std::string(" ") + dtypeName(c.x);
  if (c.states != SsdStates::None) l += std::string(" states ") + ssdStatesName(c.states) + " " + dtypeName(c.state);
  if (c.train) l += " train";
  if (c.savedY) l += " saved-y";
  return l + absentInputsLabel(c.hasD, c.hasZ, c.dtBias, c.softplus);
}

std::vector<Specialization> ssdCallSpecializations(const SsdCall& c) {
  return invalidCallIsUsageError(name(c), [&] {
    return c.backward ? opspec::ssdBackward(backwardArgs(c), c.arch) : opspec::ssd(args(c), c.arch);
  });
}

}  // namespace ssmjit::tool
