// One rank's part of a context-parallel row (Mamba2CpPart.h).
#include "runtime/model/Mamba2CpPart.h"

#include <algorithm>
#include <string>

#include "ssmjit/error.h"

namespace ssmjit::detail {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, "mamba2_cp_layer_prefill: " + msg);
}

}  // namespace

CpPart cpPartOf(const Mamba2Dims& d, const Mamba2CpPrefillArgs& a, int rank, int ranks) {
  const TensorView& h = a.hidden;
  if (!h.defined() || h.ndim != 2 || h.shape[1] != d.hidden)
    fail("hidden is " + (h.defined() ? h.shapeString() : std::string("undefined")) + ", expected (T/c, " +
         std::to_string(d.hidden) + ")");
  CpPart p;
  p.Tr = h.shape[0];
  p.p0 = p.Tr * rank;
  const int64_t T = p.Tr * ranks, p1 = p.p0 + p.Tr;
  if (p.Tr < d.conv_width - 1)
    fail("each rank holds " + std::to_string(p.Tr) + " tokens, expected at least conv width - 1 = " +
         std::to_string(d.conv_width - 1) + " (the halo comes from the previous rank alone)");
  const std::vector<int64_t>& cu = a.cu_seqlens;
  const auto nseq = static_cast<int64_t>(cu.size()) - 1;
  if (nseq < 1 || cu[0] != 0 || cu.back() != T)
    fail("cu_seqlens must run from 0 to T = " + std::to_string(T) + " (" + std::to_string(ranks) + " ranks x " +
         std::to_string(p.Tr) + " tokens) with at least one sequence");
  if (static_cast<int64_t>(a.slots.size()) != nseq)
    fail("slots has " + std::to_string(a.slots.size()) + " entries, expected one per sequence (" +
         std::to_string(nseq) + ")");
  std::vector<int32_t> cuLocal{0}, finals, first;
  for (int64_t i = 0; i < nseq; ++i) {
    if (cu[i + 1] <= cu[i]) fail("cu_seqlens[" + std::to_string(i + 1) + "] is not above the entry before it");
    const int64_t s = std::max(cu[i], p.p0), e = std::min(cu[i + 1], p1);
    if (s >= e) continue;
    if (cuLocal.size() == 1) p.firstContinues = cu[i] < p.p0;
    p.lastContinues = cu[i + 1] > p1;
    cuLocal.push_back(static_cast<int32_t>(e - p.p0));
    finals.push_back(cu[i + 1] <= p1 ? a.slots[i] : -1);
    first.push_back(cuLocal.size() == 2 && cu[i] < p.p0 ? 0 : -1);
  }
  p.nloc = static_cast<int64_t>(finals.size());
  p.ints = cuLocal;
  for (const auto* v : {&finals, &first}) p.ints.insert(p.ints.end(), v->begin(), v->end());
  return p;
}

}  // namespace ssmjit::detail
