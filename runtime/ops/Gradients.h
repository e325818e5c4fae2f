// The gradients of the scan and SSD backward calls, each paired with the forward tensor whose
// shape, dtype and strides it takes (dout with forward.out), in the argument struct's order: the
// one list of which gradient mirrors which input, for whatever builds backward calls from forward
// ones (the compile-ahead stand-ins, the tool's and the tests' fake calls). Internal to the runtime.
#pragma once
#include <array>
#include <utility>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

using GradientInputs = std::array<std::pair<TensorView*, const TensorView*>, 9>;

inline GradientInputs gradientInputs(SelectiveScanBackwardArgs& b) {
  const SelectiveScanArgs& f = b.forward;
  return {{{&b.dout, &f.out},
           {&b.du, &f.u},
           {&b.ddelta, &f.delta},
           {&b.dA, &f.A},
           {&b.dB, &f.B},
           {&b.dC, &f.C},
           {&b.dD, &f.D},
           {&b.dz, &f.z},
           {&b.ddelta_bias, &f.delta_bias}}};
}

inline GradientInputs gradientInputs(SsdBackwardArgs& b) {
  const SsdArgs& f = b.forward;
  return {{{&b.dout, &f.out},
           {&b.dx, &f.x},
           {&b.ddt, &f.dt},
           {&b.dA, &f.A},
           {&b.dB, &f.B},
           {&b.dC, &f.C},
           {&b.dD, &f.D},
           {&b.dz, &f.z},
           {&b.ddt_bias, &f.dt_bias}}};
}

// Sets gradient number k (counting from `first` in the order above) to its input's view at
// address(input, k); the gradient of an absent input stays absent.
template <class BackwardArgs, class Address>
void setGradientsLikeInputs(BackwardArgs& b, int first, Address address) {
  int k = first;
  for (auto [gradient, input] : gradientInputs(b)) {
    if (input->defined()) {
      *gradient = *input;
      gradient->data = address(*input, k);
    }
    ++k;
  }
}

}  // namespace ssmjit::detail
