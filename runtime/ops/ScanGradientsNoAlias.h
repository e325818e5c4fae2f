// The selective scan's and SSD's backwards write every gradient while still reading the forward's
// inputs (and what else the op reads), dout and dfinal_states: no gradient may share memory with
// any of them or another gradient. The two per-token inputs and the dt bias are named per op (u,
// delta, delta_bias / x, dt, dt_bias) and come with their gradients; A, B, C, D, z and the states
// are named alike.
#pragma once
#include "runtime/ops/NoAlias.h"

namespace ssmjit::detail {

// `grads` and `inputs`: the two per-token inputs' and the bias's, in that order; `opInputs`: what
// else the op reads (the SSD's kept y).
template <class Forward, class Backward>
void checkSeparateScanGradients(const Checker& c, const Forward& f, const Backward& b, const NamedView (&grads)[3],
                                const NamedView (&inputs)[3], std::initializer_list<NamedView> opInputs = {}) {
  const std::initializer_list<NamedView> all = {grads[0],      grads[1],      {"dA", &b.dA},
                                                {"dB", &b.dB}, {"dC", &b.dC}, {"dD", &b.dD},
                                                {"dz", &b.dz}, grads[2],      {"dinitial_states", &b.dinitial_states}};
  checkSeparateOutputs(c, all,
                       {inputs[0],
                        inputs[1],
                        {"A", &f.A},
                        {"B", &f.B},
                        {"C", &f.C},
                        {"D", &f.D},
                        {"z", &f.z},
                        inputs[2],
                        {"initial_states", &f.initial_states},
                        {"dout", &b.dout},
                        {"dfinal_states", &b.dfinal_states}});
  for (const NamedView& g : all)
    for (const auto& [name, in] : opInputs) noAlias(c, g.first, *g.second, name, *in);
}

}  // namespace ssmjit::detail
