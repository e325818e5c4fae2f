#include "kernels_dsl/CompileKernel.h"

#include "compiler/dialect/SJDialect.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

namespace ssmjit {

namespace {

CompiledKernel buildAndCompile(const dsl::KernelDef& def, const Specialization& spec, const PipelineOptions& options) {
  // One context per compile: compiles run in parallel threads and share nothing.
  mlir::MLIRContext ctx(mlir::MLIRContext::Threading::DISABLED);
  sj::registerDialects(ctx);
  dsl::KernelBuilder kb(&ctx, spec.kernel, (int)spec.get("meta:index_bits", 32), (int)spec.get("meta:num_warps", 4));
  if (def.signature) kb.declare(*def.signature);
  def.build(kb, spec);
  if (const int64_t mb = spec.get("meta:min_blocks", 0); mb > 0) kb.setMinBlocksPerSM(static_cast<int>(mb));
  if (const int64_t ul = spec.get("meta:unroll_lines", 0); ul > 0) kb.setUnrollLines(static_cast<int>(ul));
  auto module = mlir::cast<mlir::ModuleOp>(static_cast<mlir::Operation*>(kb.finish()));
  mlir::OwningOpRef<mlir::ModuleOp> owner(module);
  return runPipeline(module, spec, options);
}

}  // namespace

CompiledKernel compileKernel(const Specialization& spec, const PipelineOptions& options) {
  return compileKernel(dsl::findKernel(spec.kernel), spec, options);
}

CompiledKernel compileKernel(const dsl::KernelDef& def, const Specialization& spec, const PipelineOptions& options) {
  try {
    return buildAndCompile(def, spec, options);
  } catch (const Error& e) {
    // The kernels build with the meta values their choosers give; one that fails under
    // SSMJIT_META's names them, as the user's input.
    const std::string given = dsl::metaOverridesText(spec.kernel);
    const bool buildError = e.kind() == Error::Kind::Internal || e.kind() == Error::Kind::Compile;
    if (given.empty() || !buildError) throw;
    throw Error(Error::Kind::InvalidArgument,
                spec.kernel + ": SSMJIT_META " + given + " gives a kernel that does not build (" + e.what() + ")");
  }
}

}  // namespace ssmjit
