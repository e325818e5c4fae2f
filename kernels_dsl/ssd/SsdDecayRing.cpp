#include "kernels_dsl/ssd/SsdDecayRing.h"

#include <utility>

namespace ssmjit::kernels {
using namespace dsl;

SsdDecayRing::SsdDecayRing(KernelBuilder& k, const Specialization& s, const SsdInputValues& a, Value wsRow, int stages,
                           int64_t tokens)
    : k_(k),
      a_(a),
      wsRow_(wsRow),
      stages_(stages),
      tokens_(tokens),
      vec_(ssdTileCopy(s) ? ssdTileVector(s, "ws", "", {"o_dt", "o_cum"}) : 0),
      Q_(s.get("meta:chunk")) {
  if (staged()) smem_ = k.sharedBuffer(stages * 2 * tokens, DType::F32);
}

void SsdDecayRing::copy(Value step, Value first) const {
  if (!staged()) return;
  if (!first.valid()) first = step * tokens_;
  for (auto [o, plane] : {std::pair{a_.oDt, 0}, {a_.oCum, 1}})
    k_.copyTileAsync(smem_, (step % stages_) * (2 * tokens_) + plane * tokens_, tokens_, a_.ws, o + wsRow_ + first,
                     k_.constInt(Q_), 1, tokens_, k_.constInt(1), k_.constInt(tokens_), vec_);
}

Value SsdDecayRing::at(Value step, int64_t plane) const {
  Value off = (step % stages_) * (2 * tokens_) + k_.expandDims(k_.range(tokens_), 0);
  return k_.load(smem_, plane ? off + tokens_ : off);
}

}  // namespace ssmjit::kernels
