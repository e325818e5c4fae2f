// One Mamba-1 selective-scan call (forward or backward) as the tool describes it from options:
// dense rows (batch x seqlen) or one packed row (sequence lengths), with views at fake device
// addresses, so that `ssmjit inspect` and `prewarm` name its kernels without a GPU. The lengths
// matter to the kernels (divisibility classes of the row strides, spans, grid), so they are part
// of the call, as the batch is of a selective-state-update call.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/tensor.h"

namespace ssmjit::tool {

struct ScanCall {
  bool backward = false;
  int64_t D = 5120, N = 16, G = 1, batch = 8, seqlen = 2048;
  std::vector<int64_t> packedLengths;  // when given: one packed row of these sequences
  int64_t serialSeqlen = 0;            // the forward's serial_seqlen
  bool train = false;                  // the forward's compile_backward
  DType x = DType::F32;                // u, delta, z, out (and B, C when varying)
  bool bcVarying = true, hasD = true, hasZ = true, hasDeltaBias = true, softplus = true;
  std::string arch = "sm_90a";
};

// "scan-backward D5120 N16 G1 packed 19 seqs (16384 tokens) bf16 varying B/C no-z".
std::string scanCallLabel(const ScanCall& c);

// The specialisations the op compiles for the call, in launch order (the forward: the states pass
// when a sequence spans several, then the main pass; the backward: its checkpoint pass, the
// backward and its sums), from the op's own check and binding. Throws UsageError("the scan
// options give an invalid call: ...") with the op's message for a call it rejects.
std::vector<Specialization> scanCallSpecializations(const ScanCall& c);

}  // namespace ssmjit::tool
