// The lowering orchestrator: one straight line of passes, the IR printable after each.
#include "compiler/Pipeline.h"

#include <chrono>
#include <fstream>

#include "compiler/BuildInfo.h"
#include "compiler/Hash.h"
#include "compiler/Knobs.h"
#include "compiler/Nvrtc.h"
#include "compiler/dialect/SJDialect.h"
#include "compiler/emit/CudaEmitter.h"
#include "compiler/passes/Passes.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "ssmjit/error.h"

namespace ssmjit {
extern const char* const kDeviceLibSource;

namespace {

struct Step {
  const char* name;
  std::function<std::unique_ptr<mlir::Pass>(const Specialization&)> make;
};

std::unique_ptr<mlir::Pass> specializePass(const Specialization& sp) {
  passes::SpecializePassOptions o;
  for (const auto& [name, value] : sp.values) o.bindings.push_back(name + "=" + std::to_string(value));
  return passes::createSpecializePass(o);
}

const std::vector<Step>& steps() {
  static const std::vector<Step> s = {
      {"specialize", specializePass},
      {"canonicalize", [](const Specialization&) { return mlir::createCanonicalizerPass(); }},
      {"unroll-loops",
       [](const Specialization& sp) { return passes::createUnrollLoopsPass({sp.get("meta:unroll_ops", 256)}); }},
      {"canonicalize-unrolled", [](const Specialization&) { return mlir::createCanonicalizerPass(); }},
      {"cse", [](const Specialization&) { return mlir::createCSEPass(); }},
      {"form-fma", [](const Specialization&) { return passes::createFormFmaPass(); }},
      {"assign-layouts", [](const Specialization&) { return passes::createAssignLayoutsPass(); }},
      {"vectorize-accesses", [](const Specialization&) { return passes::createVectorizeAccessesPass(); }},
  };
  return s;
}

// SSMJIT_DUMP_DIR: the generated source, one file a specialisation (a failed write is ignored:
// dumping is a debugging aid and must not fail a compile).
void dumpSource(const Specialization& spec, const std::string& source) {
  const std::string dir = knobValue("SSMJIT_DUMP_DIR");
  if (dir.empty()) return;
  std::ofstream(dir + "/" + spec.kernel + "-" + hash::hex(spec.canonical(), 64) + ".cu") << source;
}

std::string print(mlir::ModuleOp m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os);
  return s;
}

}  // namespace

std::vector<std::string> pipelinePassNames() {
  std::vector<std::string> out;
  for (auto& s : steps()) out.push_back(s.name);
  return out;
}

const std::string& deviceLibHash() {
  static const std::string h = hash::hex(kDeviceLibSource, 64);
  return h;
}

CompiledKernel runPipeline(mlir::ModuleOp module, const Specialization& spec, const PipelineOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  // MLIR reports failures as diagnostics; collect them into the error we throw.
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(module.getContext(), [&](mlir::Diagnostic& d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  if (options.onStage) options.onStage("generic", print(module));
  for (auto& step : steps()) {
    mlir::PassManager pm(module.getContext());
    pm.addPass(step.make(spec));
    if (mlir::failed(pm.run(module)))
      throw Error(Error::Kind::Compile, std::string("pipeline: pass '") + step.name + "' failed for " +
                                            spec.canonical() + ":\n" + diagnostics);
    if (options.onStage) options.onStage(step.name, print(module));
  }
  mlir::func::FuncOp kernel;
  module.walk([&](mlir::func::FuncOp f) {
    if (f->hasAttr("sj.kernel")) kernel = f;
  });
  if (!kernel) throw Error(Error::Kind::Internal, "pipeline: no kernel function in the module");

  EmittedKernel e = emitCuda(kernel);
  // Header comment: what this source was specialised for (visible in `ssmjit inspect`).
  std::string source = "// ssmjit " + std::string(buildId()) + ": " + spec.canonical() + "\n" + e.source;
  if (options.onStage) options.onStage("cuda", source);
  dumpSource(spec, source);

  CompiledKernel out;
  out.entry = e.entry;
  out.params = std::move(e.params);
  out.numThreads = e.numThreads;
  out.dynamicSharedBytes = e.dynamicSharedBytes;
  out.cudaSource = source;
  out.arch = spec.arch;
  if (options.runNvrtc) {
    NvrtcResult r = nvrtcCompile(source, spec.kernel + ".cu", spec.arch, {{"ssmjit_device.cuh", kDeviceLibSource}});
    out.ptx = std::move(r.ptx);
    out.cubin = std::move(r.cubin);
    out.compileLog = std::move(r.log);
    out.resources = r.resources;
  }
  out.compileMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace ssmjit
