// The specialisation selective_state_update(_tokens) builds for a call, and the launch grid of its
// kernel, for drivers that must name the op's kernel without launching it (`ssmjit inspect`, and
// the compile reports of `ssmjit demo` and `ssmjit bench`). ssuSpecialization runs the op's own
// binding step (SelectiveStateUpdate.cpp), so what a driver shows is the kernel the op runs.
// Internal to the runtime; libssmjit.so exports it for the tool.
#pragma once
#include <cstdint>
#include <string>

#include "compiler/Specialization.h"
#include "runtime/ops/SelectiveStateUpdateCheck.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checks `args` as the op does, with every tensor on args.state's device (so that fake or host
// addresses can stand in for device buffers: only their alignment classes are bound), and returns
// the specialisation the op compiles for them on `arch`, completed (meta values chosen). Throws
// ssmjit::Error(InvalidArgument) as the op does.
Specialization ssuSpecialization(const SelectiveStateUpdateArgs& args, bool tokens, const std::string& arch);

// The launch grid of the op's kernel: (cdiv(P, BLOCK_P), H, batch).
struct SsuGrid {
  int64_t x, y, z;
};
inline SsuGrid ssuGrid(const SsuDims& d, int64_t blockP) { return {(d.P + blockP - 1) / blockP, d.H, d.batch}; }

}  // namespace ssmjit::detail
