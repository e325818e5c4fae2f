#include "tools/problems/ScanBackwardProblem.h"

#include <random>

namespace ssmjit::testing {

namespace {

ScanCase forwardCase(const ScanBackwardCase& c) {
  ScanCase f = c.fwd;
  if (c.dfinalStates) f.finalStates = true;
  if (c.dinitialStates) f.initialStates = true;
  return f;
}
}  // namespace

std::string ScanBackwardCase::name() const {
  std::string s =
      fwd.name() + "_dout" + dtypeName(doutType) + "_du" + dtypeName(duType) + "_ddt" + dtypeName(ddeltaType);
  if (fwd.hasZ) s += "_dz" + std::string(dtypeName(dzType));
  if (fwd.bVarying) s += "_dB" + std::string(dtypeName(dBType));
  if (fwd.cVarying) s += "_dC" + std::string(dtypeName(dCType));
  if (dfinalStates || dinitialStates)
    s += std::string(dfinalStates ? "_dfinal" : "") + (dinitialStates ? "_dinit" : "") + "_" + dtypeName(dStateType);
  return s;
}

ScanBackwardProblem::ScanBackwardProblem(const ScanBackwardCase& cc) : c(cc), f(forwardCase(cc)) {
  c.fwd = f.c;
  std::mt19937_64 rng(c.fwd.seed * 0x9E3779B97F4A7C15ull + 7);  // a stream apart from the forward's
  const ScanCase& fc = f.c;
  // The forward's layouts: the token axis keeps stride 1; (D, N) tensors and states transposed.
  const Layout lay{fc.strided, false, fc.strided}, layT{fc.strided, fc.strided, fc.strided};
  const int64_t Bt = f.u.meta.shape[0], L = f.u.meta.shape[2];
  const std::vector<int64_t> xs = {Bt, fc.D, L}, bcs = {Bt, fc.G, fc.N, L}, dn = {fc.D, fc.N};

  dout = makeTensor(c.doutType, xs, lay, rng);
  fillUniform(dout, rng, -1, 1);
  if (c.dfinalStates) {
    dfinal = makeTensor(c.dStateType, {f.finalHolder().meta.shape[0], fc.D, fc.N}, layT, rng);
    fillUniform(dfinal, rng, -1, 1);
  }
  // The gradients, poisoned.
  du = makeTensor(c.duType, xs, lay, rng);
  ddelta = makeTensor(c.ddeltaType, xs, lay, rng);
  dA = makeTensor(DType::F32, dn, layT, rng);
  dB = fc.bVarying ? makeTensor(c.dBType, bcs, lay, rng) : makeTensor(DType::F32, dn, layT, rng);
  dC = fc.cVarying ? makeTensor(c.dCType, bcs, lay, rng) : makeTensor(DType::F32, dn, layT, rng);
  if (fc.hasD) dD = makeTensor(DType::F32, {fc.D}, lay, rng);
  if (fc.hasZ) dz = makeTensor(c.dzType, xs, lay, rng);
  if (fc.hasDeltaBias) ddeltaBias = makeTensor(DType::F32, {fc.D}, lay, rng);
  if (c.dinitialStates) dinit = makeTensor(c.dStateType, {f.initStates.meta.shape[0], fc.D, fc.N}, layT, rng);
}

SelectiveScanBackwardArgs ScanBackwardProblem::args(const Viewer& view) const {
  SelectiveScanBackwardArgs a;
  a.forward = f.args(view);
  a.dout = view(dout);
  a.dfinal_states = view(dfinal);
  a.du = view(du);
  a.ddelta = view(ddelta);
  a.dA = view(dA);
  a.dB = view(dB);
  a.dC = view(dC);
  a.dD = view(dD);
  a.dz = view(dz);
  a.ddelta_bias = view(ddeltaBias);
  a.dinitial_states = view(dinit);
  return a;
}

std::vector<char> ScanBackwardProblem::slotsWritten() const {
  std::vector<char> w(static_cast<size_t>(f.S), 0);
  for (int64_t s : f.initSlot)
    if (s >= 0) w[static_cast<size_t>(s)] = 1;
  return w;
}

std::vector<char> ScanBackwardProblem::written(int k) {
  if (k == kDinit) return slotsWritten();
  return std::vector<char>(static_cast<size_t>(all()[static_cast<size_t>(k)]->meta.shape[0]), 1);
}

std::vector<HostTensor*> ScanBackwardProblem::all() {
  std::vector<HostTensor*> v = f.all();
  for (HostTensor* t : {&dout, &dfinal, &du, &ddelta, &dA, &dB, &dC, &dD, &dz, &ddeltaBias, &dinit}) v.push_back(t);
  return v;
}

}  // namespace ssmjit::testing
