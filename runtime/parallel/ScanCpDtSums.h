// The sums of dt' over chunks of a context-parallel scan part's first sequence, on the device
// (kernels_dsl/parallel/ScanCpDtSums.h): what lets the programs of the part's correction and of
// its incoming state's gradient start mid-sequence. Internal to the runtime.
#pragma once
#include <cstdint>
#include <string>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

class KernelCall;

// Tokens a chunk, for a row of L tokens: at least 1024, and at most 64 chunks a row, so that a
// program's sum over the chunks before it stays short.
int64_t scanCpChunk(int64_t L);
// Chunks a row of L tokens: cdiv(L, scanCpChunk(L)).
int64_t scanCpChunks(int64_t L);
// Launches the bound call `c` over (cdiv(D, its meta:BLOCK_D), scanCpChunks(L)) of args' call: a
// program a block of channels and a chunk, the grid of scan_cp_dt_sums and scan_cp_correct.
void launchOverChunks(KernelCall& c, const SelectiveScanArgs& args, Stream stream);
// sums ((chunks, D) fp32, contiguous) = the sums of dt' over each chunk of the first sequence of
// row 0 of args' call (0 past its end). args as checked by selective_scan.
void scanCpDtSums(const SelectiveScanArgs& args, const TensorView& sums, Stream stream);
// The kernel such a call runs on `arch` (no GPU needed).
Specialization scanCpDtSumsSpecialization(const SelectiveScanArgs& args, const TensorView& sums,
                                          const std::string& arch);

}  // namespace ssmjit::detail
