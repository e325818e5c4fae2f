// A call's kernels compiled together. An op that launches several kernels names them ahead (the
// specialisations its launches bind, as ssmjit inspect shows them) and holds a CompileAhead over
// its launches: the first launch whose kernel this process does not know yet compiles every
// missing kernel of the call at once (lookupOrCompileKernels) instead of one launch after another.
// Warm calls never get there (their kernels are known), so they pay only for constructing it.
// Kernels a later call will want (the backward's, when the caller trains) may join the same
// batch; their errors are left for that call to report. Internal to the runtime.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "compiler/Specialization.h"

namespace ssmjit::detail {

class CompileAhead {
 public:
  using Specs = std::function<std::vector<Specialization>(const std::string& arch)>;
  // `own`: the call's kernels (an error naming them or compiling them is the call's); `later`:
  // kernels compiled alongside for another call (errors ignored), or empty.
  explicit CompileAhead(Specs own, Specs later = {});
  ~CompileAhead();
  CompileAhead(const CompileAhead&) = delete;
  CompileAhead& operator=(const CompileAhead&) = delete;

  // KernelCall's hook before it loads `spec` for `arch`: when the process does not know `spec`,
  // runs the outermost CompileAhead of this thread that has not run yet (if any).
  static void beforeLoad(const Specialization& spec, const std::string& arch);

 private:
  void run(const std::string& arch);
  Specs own_, later_;
  bool ran_ = false;
  CompileAhead* outer_;
};

}  // namespace ssmjit::detail
