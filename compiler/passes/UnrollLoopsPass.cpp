// sj-unroll-loops (Passes.td): fully unrolls constant-trip loops within an operation budget.
#include "compiler/passes/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"

namespace ssmjit::passes {
#define GEN_PASS_DEF_UNROLLLOOPSPASS
#include "compiler/passes/Passes.h.inc"

using namespace mlir;

namespace {
struct UnrollLoopsPass : impl::UnrollLoopsPassBase<UnrollLoopsPass> {
  using UnrollLoopsPassBase::UnrollLoopsPassBase;
  void runOnOperation() override {
    std::vector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp f) { loops.push_back(f); });  // innermost first
    for (auto f : loops) {
      auto trip = f.getStaticTripCount();
      if (!trip) continue;
      int64_t bodyOps = 0;
      f.getBody()->walk([&](Operation*) { ++bodyOps; });
      if (trip->getSExtValue() > 1 && trip->getSExtValue() * bodyOps > maxOps) continue;
      if (failed(loopUnrollFull(f))) {
        f.emitError("unroll-loops: could not unroll a loop with a constant trip count");
        return signalPassFailure();
      }
    }
  }
};
}  // namespace

}  // namespace ssmjit::passes
