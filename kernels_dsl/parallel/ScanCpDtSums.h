// The sums of dt' over chunks of a context-parallel part's first sequence, its contract with its
// caller (runtime/parallel/ScanCpDtSums.h): what lets the programs of the correction
// (ScanCpCorrect.h) and of the incoming state's gradient (ScanCpStateGrad.h) start mid-sequence.
// For the first sequence of row 0 (length len):
//   scan_cp_dt_sums  sums[k, d] = sum over t in [k chunk, min((k + 1) chunk, len)) of dt'[d, t],
//                    dt' as scan_cp_correct computes it. Grid (cdiv(D, meta:BLOCK_D),
//                    cdiv(L, chunk)); chunk a multiple of meta:BLOCK_T.
// Strides are in elements.
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace cpdtsums {
using namespace dsl::decl;
inline constexpr TensorArg kTensors[] = {
    {"delta", F, {"d", "t"}}, {"dbias", F, {"d"}}, {"cu", I, {""}, nullptr, M}, {"sums", F, {"k", "d"}}};
// D: masks against it keep their vector width; the rest are loop bounds.
inline constexpr SizeArg kSizes[] = {{"D", Div}, {"L", Count}, {"chunk", Count}};
inline constexpr const char* kFlags[] = {"has_dbias", "softplus", "has_cu"};
}  // namespace cpdtsums

inline constexpr dsl::Signature kScanCpDtSums{
    "scan_cp_dt_sums", cpdtsums::kTensors, cpdtsums::kSizes, {}, cpdtsums::kFlags};

}  // namespace ssmjit::kernels
