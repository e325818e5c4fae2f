// One selective-state-update problem as the tool runs it: the shape and flags of a call, its
// tensors (contiguous, in the op's documented layouts), the specialisation the op compiles for
// it, the bytes one call moves, and host-side random data with comparisons against the float64
// reference. Shared by `demo`, `bench` and `inspect` so that all three describe the same call.
#pragma once
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"
#include "ssmjit/tensor.h"

namespace ssmjit::tool {

enum TensorId : int {
  kState, kX, kDt, kA, kB, kC, kD, kZ, kDtBias, kOut, kStateIdx, kDstIdx, kNumTensors
};

// A Mamba-2 call (state (S, H, P, N)); the tool always drives the Mamba-2 form.
struct SsuShape {
  bool tokens = false;  // the multi-token op (x etc. carry a token axis of size L)
  int64_t H = 80, P = 64, N = 128, G = 1;
  int64_t batch = 4;
  int64_t L = 1;        // must be 1 unless tokens
  DType stateT = DType::F32;
  DType inT = DType::F32;   // x, dt, B, C, z
  DType outT = DType::F32;
  bool hasD = true, hasZ = true, hasDtBias = true, softplus = true;
  bool stateIdx = true;     // pass state_batch_indices (a random permutation of slots)
  int64_t pads = 0;         // rows marked -1 (skipped); needs stateIdx
  int64_t spareSlots = 0;   // slots no row reads (must stay untouched); needs stateIdx
  StateWrite write = StateWrite::Final;

  // Slots of the state: batch + spare, plus batch * L destination slots for PerToken writes.
  int64_t slots() const;
  std::string label() const;  // "ssu-tokens L=4 b=4 state bf16 in bf16"
};

struct TensorDesc {
  const char* name = "";
  bool present = false;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numel() const;
  size_t bytes() const;
};

// The tensors of a call, indexed by TensorId (absent ones have present == false).
std::array<TensorDesc, kNumTensors> ssuTensors(const SsuShape& s);

// Contiguous views over `ptrs` (one per TensorId; ignored for absent tensors).
SelectiveStateUpdateArgs ssuArgs(const SsuShape& s, const std::array<void*, kNumTensors>& ptrs,
                                 DeviceKind device);

// Views with distinct 1 MiB-aligned fake device addresses: enough to check the call and build its
// specialisation with no GPU. cuMemAlloc returns 256-byte-aligned memory, so these have the same
// (16-byte) alignment classes as real buffers.
SelectiveStateUpdateArgs ssuArgsWithoutMemory(const SsuShape& s);

// Checks the shape with the op's own argument check (so messages match the op's); throws
// ssmjit::Error(InvalidArgument) naming the argument, the expected and the actual value.
void checkSsuShape(const SsuShape& s);

// The specialisation the op builds for `args` on `arch`, completed (meta values chosen).
// This mirrors the binding step of runtime/ops/SelectiveStateUpdate.cpp line by line (same
// names, same order, same classes), because the op does not expose it; if the two drift apart,
// `ssmjit demo` reports it (the op's kernel is then not found in the cache under this key).
Specialization ssuSpecialization(const SelectiveStateUpdateArgs& args, bool tokens,
                                 const std::string& arch);

// Bytes one call moves, counted once per call: the state read for every non-pad row, the state
// written (Final: once per row; PerToken: per token; None: nothing), every input read once (A, D,
// dt_bias: once per head; B, C: once per group; index arrays), every output written once.
struct Traffic {
  int64_t stateRead = 0, stateWritten = 0, inputs = 0, outputs = 0;
  int64_t total() const { return stateRead + stateWritten + inputs + outputs; }
};
Traffic ssuTraffic(const SsuShape& s);

// ---- host data

// Fresh random inputs in their storage dtypes, outputs poisoned with 0xFF (NaN in every float
// dtype), slots a random permutation with `pads` rows set to -1.
struct HostProblem {
  SsuShape shape;
  std::array<TensorDesc, kNumTensors> desc;
  std::array<std::vector<uint8_t>, kNumTensors> data;
  std::vector<int64_t> readSlot;  // per row; -1: pad

  std::array<void*, kNumTensors> ptrs();
  SelectiveStateUpdateArgs args() { return ssuArgs(shape, ptrs(), DeviceKind::CPU); }
  // Which rows (first index) of state and out the call writes.
  std::vector<char> stateSlotsWritten() const;
  std::vector<char> outRowsWritten() const;
};
HostProblem makeHostProblem(const SsuShape& s, std::mt19937_64& rng);

inline constexpr uint8_t kPoisonByte = 0xFF;

// Value of element i of a contiguous buffer of `dtype`, and the reverse (round to nearest even).
double loadElement(DType dtype, const void* base, int64_t i);
void storeElement(DType dtype, void* base, int64_t i, double v);
// Fills `count` elements with U(lo, hi) stored in `dtype`.
void fillUniform(DType dtype, void* base, int64_t count, double lo, double hi, std::mt19937_64& rng);
// The value range the tool draws each tensor from (bounded decays, dt' > 0 after softplus).
void valueRange(TensorId id, bool softplus, double* lo, double* hi);

// `got` against `ref` for a tensor whose first index selects a row of `rowElems` elements:
// rows marked written are compared by value; every other byte must equal `before` exactly.
struct Comparison {
  int64_t compared = 0;
  double maxAbsErr = 0;
  double relL2 = 0;  // ||got - ref|| / ||ref|| over compared elements
  int64_t nonFinite = 0;
  int64_t strayBytes = 0;  // bytes outside the written rows that changed
  std::string firstProblem;
};
Comparison compareRows(DType dtype, const std::vector<uint8_t>& got, const std::vector<uint8_t>& ref,
                       const std::vector<uint8_t>& before, int64_t rowElems,
                       const std::vector<char>& rowWritten);

// relL2 a correct kernel stays under, per output dtype: fp32 math on the GPU against float64,
// plus at most one rounding step of the stored dtype.
double tolerance(DType dtype);

}  // namespace ssmjit::tool
