#include "runtime/OpSpecializations.h"

#include <algorithm>

#include "runtime/ops/BackwardStandIn.h"
#include "runtime/ops/CausalConv1dSpec.h"
#include "runtime/ops/EmbeddingSpec.h"
#include "runtime/ops/Mamba2DecodeStepSpec.h"
#include "runtime/ops/SelectiveScanSpec.h"
#include "runtime/ops/SelectiveStateUpdateCheck.h"
#include "runtime/ops/SelectiveStateUpdateSpec.h"
#include "runtime/ops/SsdBackwardSpec.h"
#include "runtime/ops/SsdSpec.h"

namespace ssmjit::opspec {
namespace {
// `more` after `specs`, without the ones already there.
std::vector<Specialization> with(std::vector<Specialization> specs, const std::vector<Specialization>& more) {
  for (const Specialization& s : more)
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  return specs;
}
}  // namespace

SsuSizes checkSsu(const SelectiveStateUpdateArgs& args, bool tokens) {
  const detail::SsuDims d = detail::checkSsuArgs(args, tokens, args.state.device,
                                                 tokens ? "selective_state_update_tokens" : "selective_state_update");
  return {d.mamba2, d.batch, d.L, d.S, d.H, d.P, d.N, d.G};
}

Specialization ssu(const SelectiveStateUpdateArgs& args, bool tokens, const std::string& arch) {
  return detail::ssuSpecialization(args, tokens, arch);
}

Grid ssuGrid(const SsuSizes& s, int64_t blockP) {
  detail::SsuDims d;
  d.batch = s.batch, d.H = s.H, d.P = s.P;
  const detail::SsuGrid g = detail::ssuGrid(d, blockP);
  return {g.x, g.y, g.z};
}

std::vector<Specialization> conv(const CausalConv1dArgs& args, const std::string& arch) {
  return with(detail::convSpecializations(args, arch), detail::backwardAlongside(args, arch));
}

std::vector<Specialization> convBackward(const CausalConv1dBackwardArgs& args, const std::string& arch) {
  return detail::convBackwardSpecializations(args, arch);
}

Specialization convUpdate(const CausalConv1dUpdateArgs& args, const std::string& arch) {
  return detail::convUpdateSpecialization(args, arch);
}

std::vector<Specialization> scan(const SelectiveScanArgs& args, const std::string& arch) {
  return with(detail::scanSpecializations(args, arch), detail::backwardAlongside(args, arch));
}

std::vector<Specialization> scanBackward(const SelectiveScanBackwardArgs& args, const std::string& arch) {
  return detail::scanBackwardSpecializations(args, arch);
}

std::vector<Specialization> ssd(const SsdArgs& args, const std::string& arch) {
  return with(detail::ssdSpecializations(args, arch), detail::backwardAlongside(args, arch));
}

std::vector<Specialization> ssdBackward(const SsdBackwardArgs& args, const std::string& arch) {
  return detail::ssdBackwardSpecializations(args, arch);
}

Specialization embedding(const EmbeddingArgs& args, const std::string& arch) {
  return detail::embeddingSpecialization(args, arch);
}

Specialization decodeStep(const Mamba2DecodeState& state, const Mamba2MixerWeights& weights,
                          const Mamba2DecodeStepArgs& args, const std::string& arch) {
  return detail::decodeStepSpecialization(state, weights, args, arch);
}

}  // namespace ssmjit::opspec
