// RMSNorm problems for the tests: host tensors with random inputs and poisoned outputs for one
// rms_norm or gated_rms_norm call (rows in any layout with a unit channel stride, optional residual
// and residual_out, the gate on either side, groups, outputs in place), and the call's arguments.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ssmjit/ops.h"
#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

// z, and where silu(z) multiplies: before the norm (norm_before_gate off) or after it (on).
enum class NormGate { None, GateFirst, NormFirst };

struct NormCase {
  bool gated = false;  // gated_rms_norm (else rms_norm)
  DType xType = DType::BF16, weightType = DType::F32;
  DType residualType = DType::F32;  // residual and residual_out
  int64_t T = 7, D = 64;
  int64_t groups = 1;  // gated: D / group_size
  bool residual = false, residualOut = false;
  bool residualInPlace = false;  // residual_out is residual itself
  bool outInPlace = false;       // out is x itself
  NormGate gate = NormGate::None;
  Layout rows;  // x, z, out, residual, residual_out (padded rows, offset data)
  uint64_t seed = 1;
  std::string name() const;
};
// gtest prints a parameterised case by its name (else its bytes would go into CTest's test names).
inline std::ostream& operator<<(std::ostream& os, const NormCase& c) { return os << c.name(); }

// all() lists the tensors in this order (the GPU tests download by index):
//   0 x, 1 residual, 2 residual_out, 3 z, 4 weight, 5 out.
// Tensors a case does not use (an output in place among them) are undefined.
struct NormProblem {
  NormCase c;
  HostTensor x, residual, residualOut, z, weight, out;
  explicit NormProblem(const NormCase& c);
  RmsNormArgs rmsArgs(const Viewer& view = hostView) const;
  GatedRmsNormArgs gatedArgs(const Viewer& view = hostView) const;
  std::vector<HostTensor*> all();
};

}  // namespace ssmjit::testing
