// One Mamba-2 SSD chunked-scan call (ssd, or its gradients: ssd-backward) as the tool describes it from options: dense
// rows (batch x seqlen) or one packed row (sequence lengths), with views at fake device addresses, so that `ssmjit
// inspect` and `prewarm` name its kernels without a GPU. The lengths are part of the call: the row length and the
// strides it gives bind as divisibility classes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/tensor.h"

namespace ssmjit::tool {

// Which states the call reads and writes.
enum class SsdStates {
  None,   // neither (a training forward)
  Final,  // final states, sequence i to slot i
  Slots,  // initial and final states in one tensor through slot indices (a serving prefill)
};

struct SsdCall {
  int64_t H = 80, P = 64, N = 128, G = 1, chunk = 256, batch = 8, seqlen = 2048;
  std::vector<int64_t> packedLengths;  // when given: one packed row of these sequences
  DType x = DType::BF16;               // x, dt, B, C, z, out
  DType state = DType::F32;            // the states, with states other than None
  SsdStates states = SsdStates::None;
  bool hasD = true, hasZ = true, dtBias = true, softplus = true;
  bool backward = false;  // ssd_backward of this forward: every gradient, the states' where it has them
  bool train = false;     // the forward's compile_backward
  bool savedY = false;    // the forward keeps y (SsdArgs::y), which the backward reads
  std::string arch = "sm_90a";
};

// "none", "final", "slots" (in SsdStates' order); parseSsdStates throws UsageError naming
// `option` otherwise.
const std::vector<std::string>& ssdStatesNames();
const char* ssdStatesName(SsdStates s);
SsdStates parseSsdStates(const std::string& name, const char* option);

// "ssd H80 P64 N128 G1 chunk 256 packed 3 seqs (4096 tokens) bfloat16 states slots float32 no-z".
std::string ssdCallLabel(const SsdCall& c);

// The specialisations the op compiles for the call, in launch order (the forward's chunk_cumsum,
// bmm, chunk_state, state_passing, chunk_scan; the backward's recomputation and gradient kernels),
// from the op's own check and binding. Throws
// UsageError("the ssd options give an invalid call: ...") with the op's message for a call it
// rejects.
std::vector<Specialization> ssdCallSpecializations(const SsdCall& c);

}  // namespace ssmjit::tool
