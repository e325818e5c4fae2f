// The shared step counter of sample_draw, advanced once per call: a launch of its own after the
// draw, whose programs all read step[0] first. See Sample.h.
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/sample/Sample.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization&) {
  Value step = k.arg("step"), at = k.constInt(0);
  k.store(step, at, k.load(step, at) + 1);
}

void chooseMeta(Specialization& s) {
  setDefault(s, "meta:num_warps", 1);
  s.set("meta:index_bits", 64);
}

}  // namespace

const KernelRegistration kAdvance(__FILE__, {kSampleAdvanceStep.kernel, build, chooseMeta, &kSampleAdvanceStep});

}  // namespace ssmjit::kernels
