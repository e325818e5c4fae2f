// The kernels the default tiny model (TinyMamba2{}, random from seed 1) runs with some options,
// listed for sm_90a without a GPU (what `ssmjit prewarm --model` compiles).
#pragma once
#include <vector>

#include "runtime/model/Mamba2Kernels.h"
#include "tests/support/ScratchDir.h"
#include "tests/support/TinyMamba2.h"

namespace ssmjit::testing {

inline std::vector<Specialization> tinyMamba2Specializations(const Mamba2ModelOptions& options) {
  ScratchDir dir;
  TinyMamba2 m;
  writeTinyMamba2(dir.path(), m, tinyMamba2Tensors(m, 1));
  return detail::mamba2ModelSpecializations(dir.path(), options, "sm_90a");
}

}  // namespace ssmjit::testing
