// unroll-loops: fully unrolls scf.for loops whose trip count is a constant up to a bound (after
// specialisation, the token loop over L). Unrolled, the loads of token t+1 can be issued while
// token t computes, and register arrays are indexed by constants only.
#include "compiler/passes/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"

namespace ssmjit::passes {
using namespace mlir;

namespace {
struct UnrollLoopsPass : PassWrapper<UnrollLoopsPass, OperationPass<ModuleOp>> {
  int64_t maxTrip;
  explicit UnrollLoopsPass(int64_t m) : maxTrip(m) {}
  StringRef getArgument() const override { return "unroll-loops"; }
  void runOnOperation() override {
    std::vector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp f) { loops.push_back(f); });  // innermost first
    for (auto f : loops) {
      auto trip = f.getStaticTripCount();
      if (!trip || trip->getSExtValue() > maxTrip) continue;
      if (failed(loopUnrollFull(f))) {
        f.emitError("unroll-loops: could not unroll a loop with a constant trip count");
        return signalPassFailure();
      }
    }
  }
};
}  // namespace

std::unique_ptr<Pass> createUnrollLoopsPass(int64_t maxTripCount) {
  return std::make_unique<UnrollLoopsPass>(maxTripCount);
}

}  // namespace ssmjit::passes
