// unroll-loops: fully unrolls scf.for loops whose trip count is a constant, while the unrolled
// body stays within an operation budget. Unrolling removes loop overhead and lets the scheduler
// interleave iterations, but NVRTC's time grows with the code: past the budget a loop stays rolled
// (kernels overlap iterations themselves by carrying the next iteration's loads), which keeps a
// variant's first compile bounded whatever the trip count.
#include "compiler/passes/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"

namespace ssmjit::passes {
using namespace mlir;

namespace {
struct UnrollLoopsPass : PassWrapper<UnrollLoopsPass, OperationPass<ModuleOp>> {
  int64_t maxOps;
  explicit UnrollLoopsPass(int64_t m) : maxOps(m) {}
  StringRef getArgument() const override { return "unroll-loops"; }
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

std::unique_ptr<Pass> createUnrollLoopsPass(int64_t maxUnrolledOps) {
  return std::make_unique<UnrollLoopsPass>(maxUnrolledOps);
}

}  // namespace ssmjit::passes
