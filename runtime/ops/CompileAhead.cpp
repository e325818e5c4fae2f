#include "runtime/ops/CompileAhead.h"

#include <utility>

#include "cache/KernelCache.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {
namespace {
thread_local CompileAhead* tCurrent = nullptr;
}  // namespace

CompileAhead::CompileAhead(Specs own, Specs later) : own_(std::move(own)), later_(std::move(later)), outer_(tCurrent) {
  tCurrent = this;
}

CompileAhead::~CompileAhead() { tCurrent = outer_; }

void CompileAhead::beforeLoad(const Specialization& spec, const std::string& arch) {
  // The outermost one not yet run: an op calling another op (ssd_backward's recomputation) names
  // the inner call's kernels with its own, so they all compile in one batch.
  CompileAhead* first = nullptr;
  for (CompileAhead* a = tCurrent; a; a = a->outer_)
    if (!a->ran_) first = a;
  if (first && !kernelKnown(spec)) first->run(arch);
}

void CompileAhead::run(const std::string& arch) {
  ran_ = true;
  std::vector<Specialization> specs = own_(arch);
  const size_t required = specs.size();
  if (later_) {
    try {
      std::vector<Specialization> more = later_(arch);
      specs.insert(specs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    } catch (const Error&) {
      // The later call's arguments were a guess the op rejects: that call compiles its own.
    }
  }
  lookupOrCompileKernels(specs, 0, required);
}

}  // namespace ssmjit::detail
