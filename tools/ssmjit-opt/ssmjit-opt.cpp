// ssmjit-opt: runs the sj passes (and upstream canonicalize and cse) on textual IR, as mlir-opt
// does for upstream dialects: `ssmjit-opt kernel.mlir --sj-assign-layouts`. The FileCheck tests
// in tests/lit drive it; `ssmjit inspect --stage after:<pass>` prints real kernels' IR to start from.
#include "compiler/dialect/SJDialect.h"
#include "compiler/passes/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char** argv) {
  mlir::DialectRegistry registry;
  registry.insert<ssmjit::sj::SJDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::scf::SCFDialect>();
  ssmjit::passes::registerSJPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "ssmjit pass driver\n", registry));
}
