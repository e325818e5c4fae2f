// The token-sampling kernels' contract with their op (sample_tokens, ssmjit/ops.h). One program
// per row of logits (B, V), looping over V in tiles of meta:BLOCK_V; logits[b, v] is read at
// b * s_logits_b + v (unit stride on v). Three kernels:
//   sample_argmax        greedy: ids[b] = the lowest v among the row's maxima (NaN never wins; a
//                        row of all NaN gives 0). One pass over the row. Grid (B).
//   sample_draw          ids[b] = a draw from softmax(logits * inv_temp) restricted to the top_k
//                        largest, then to the top-p nucleus; the uniform from Philox keyed by
//                        (seed, row key, step). Grid (B).
//   sample_advance_step  step[0] += 1: the shared (1,) counter, after every program of
//                        sample_draw has read it. Grid (1).
// idx[b] (has_idx) is the row's key for the RNG; -1 marks a pad row (ids[b] and its step left as
// they are). Without idx the key is b.
//
// sample_draw works in base-2 logits y = x * inv_temp (the op folds log2(e) into inv_temp), so a
// probability is exp2(y - max). Passes over the row (each reads every tile once):
//   1 stats    max, the lowest drawable y, the mass Z = sum exp2(y - max);
//   top-k      kSearchPasses passes: the k-th largest y by a threshold search (counts);
//              then 1 pass for the mass kept (the draw's total, top-p's whole);
//   top-p      kSearchPasses passes: the nucleus threshold by a threshold search (masses);
//   1 draw     the first v, in index order, where the running kept mass exceeds u * kept mass.
// A threshold search narrows [lo, hi) each pass by evaluating kSearchProbes + 1 thresholds (lo
// and kSearchProbes points inside) at once, one register accumulator each; after kSearchPasses
// passes it has cut the bracket by (kSearchProbes + 1)^kSearchPasses = 2^24. The kept set is
// {y >= lo}: the exact set plus any values within that resolution below its threshold (ties at
// the threshold are all kept).
#pragma once
#include <cstdint>

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace sample {
using namespace dsl::decl;
inline constexpr TensorArg logits{"logits", F, {"b", "v"}}, ids{"ids", I, {"b"}, nullptr, M},
    idx{"idx", I, {"b"}, nullptr, M}, step{"step", I, {"b"}, nullptr, M};

inline constexpr TensorArg kArgmaxTensors[] = {logits, ids, idx};
inline constexpr SizeArg kArgmaxSizes[] = {{"V", Div}};
inline constexpr const char* kArgmaxFlags[] = {"has_idx"};

// seed_lo / seed_hi: the seed's 32-bit halves. top_k: 0 < top_k < V when has_topk.
inline constexpr TensorArg kDrawTensors[] = {logits, ids, idx, step};
inline constexpr SizeArg kDrawSizes[] = {{"V", Div}, {"top_k", Count}, {"seed_lo", Count}, {"seed_hi", Count}};
inline constexpr const char* kDrawScalars[] = {"inv_temp", "top_p"};
// advance: each program advances its own step[b] (a (B,) counter).
inline constexpr const char* kDrawFlags[] = {"has_idx", "has_topk", "has_topp", "advance"};

inline constexpr TensorArg kAdvanceTensors[] = {{"step", I, {}, nullptr, M}};
}  // namespace sample

inline constexpr dsl::Signature kSampleArgmax{
    "sample_argmax", sample::kArgmaxTensors, sample::kArgmaxSizes, {}, sample::kArgmaxFlags};
inline constexpr dsl::Signature kSampleDraw{
    "sample_draw", sample::kDrawTensors, sample::kDrawSizes, sample::kDrawScalars, sample::kDrawFlags};
inline constexpr dsl::Signature kSampleAdvanceStep{"sample_advance_step", sample::kAdvanceTensors};

// The threshold searches' shape (see above): 3 probes a pass, 12 passes, a 2^-24 bracket.
inline constexpr int kSearchProbes = 3;
inline constexpr int kSearchPasses = 12;

}  // namespace ssmjit::kernels
