// One selective-state-update call as the tool describes and drives it. The call itself is a
// testing::SsuCase (tools/problems/SsuProblem.h: the tests and the tool build and check calls with
// the same code); this adds what only the tool needs: a label for tables, views over device
// buffers or fake addresses, the option check and the bytes one call moves.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "runtime/OpSpecializations.h"
#include "ssmjit/ops.h"
#include "ssmjit/tensor.h"
#include "tools/problems/SsuProblem.h"

namespace ssmjit::tool {

using testing::SsuCase;

std::string caseLabel(const SsuCase& s);  // "ssu-tokens L=4 b=4 state bf16 in bf16"

// Contiguous views over `ptrs` (one per SsuTensor; ignored for absent tensors).
SelectiveStateUpdateArgs contiguousArgs(const SsuCase& s, const std::array<void*, testing::kNumTensors>& ptrs,
                                        DeviceKind device);

// Views with distinct 1 MiB-aligned fake device addresses: enough to check the call and build its
// specialisation with no GPU. cuMemAlloc returns 256-byte-aligned memory, so these have the same
// (16-byte) alignment classes as real buffers.
SelectiveStateUpdateArgs argsWithoutMemory(const SsuCase& s);

// Checks a call built from command-line options with the op's own argument check (so messages
// match the op's) and returns its sizes; throws UsageError("the shape options give an invalid
// call: ...") naming the argument, the expected and the actual value.
opspec::SsuSizes checkShapeOptions(const SsuCase& s);

// Bytes one call moves, counted once per call: the state read for every non-pad row, the state
// written (Final: once per row; PerToken: per token; None: nothing), every input read once (A, D,
// dt_bias: once per head; B, C: once per group; index arrays), every output written once.
struct Traffic {
  int64_t stateRead = 0, stateWritten = 0, inputs = 0, outputs = 0;
  int64_t total() const { return stateRead + stateWritten + inputs + outputs; }
};
Traffic ssuTraffic(const SsuCase& s);

}  // namespace ssmjit::tool
