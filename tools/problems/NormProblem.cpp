#include "tools/problems/NormProblem.h"

#include <random>

namespace ssmjit::testing {

std::string NormCase::name() const {
  std::string s = std::string(gated ? "gated_" : "rms_") + dtypeName(xType) + "_w" + dtypeName(weightType);
  s += "_T" + std::to_string(T) + "_D" + std::to_string(D);
  if (gated) s += "_g" + std::to_string(groups);
  if (residual) s += std::string("_res") + dtypeName(residualType);
  if (residualOut) s += residualInPlace ? "_resout_inplace" : "_resout";
  if (gate != NormGate::None) s += gate == NormGate::GateFirst ? "_gatefirst" : "_normfirst";
  if (outInPlace) s += "_out_inplace";
  if (rows.padded) s += "_padded";
  if (rows.offset) s += "_offset";
  return s;
}

NormProblem::NormProblem(const NormCase& cs) : c(cs) {
  std::mt19937_64 rng(c.seed);
  auto rowsOf = [&](DType t) { return makeTensor(t, {c.T, c.D}, c.rows, rng); };
  x = rowsOf(c.xType);
  fillUniform(x, rng, -2, 2);
  if (c.residual) {
    residual = rowsOf(c.residualType);
    fillUniform(residual, rng, -2, 2);
  }
  if (c.residualOut && !c.residualInPlace) residualOut = rowsOf(c.residualType);
  if (c.gate != NormGate::None) {
    z = rowsOf(c.xType);
    fillUniform(z, rng, -4, 4);
  }
  weight = makeTensor(c.weightType, {c.D}, Layout{}, rng);
  fillUniform(weight, rng, -1.5, 1.5);
  if (!c.outInPlace) out = rowsOf(c.xType);
}

RmsNormArgs NormProblem::rmsArgs(const Viewer& view) const {
  RmsNormArgs a;
  a.x = view(x);
  a.residual = view(residual);
  a.residual_out = c.residualOut ? view(c.residualInPlace ? residual : residualOut) : TensorView{};
  a.weight = view(weight);
  a.out = view(c.outInPlace ? x : out);
  return a;
}

GatedRmsNormArgs NormProblem::gatedArgs(const Viewer& view) const {
  GatedRmsNormArgs a;
  a.x = view(x);
  a.z = view(z);
  a.weight = view(weight);
  a.out = view(c.outInPlace ? x : out);
  a.group_size = c.D / c.groups;
  a.norm_before_gate = c.gate == NormGate::NormFirst;
  return a;
}

std::vector<HostTensor*> NormProblem::all() { return {&x, &residual, &residualOut, &z, &weight, &out}; }

}  // namespace ssmjit::testing
