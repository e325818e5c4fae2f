#include "cache/KernelCache.h"

#include <future>
#include <mutex>
#include <unordered_map>

#include "kernels_dsl/CompileKernel.h"

namespace ssmjit {

std::shared_ptr<const CompiledKernel> getOrCompileKernel(const Specialization& spec) {
  using Entry = std::shared_future<std::shared_ptr<const CompiledKernel>>;
  static std::mutex mu;
  static std::unordered_map<Specialization, Entry, SpecializationHash> entries;
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  Entry entry;
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = entries.find(spec);
    if (it != entries.end()) {
      entry = it->second;
    } else {
      entry = promise.get_future().share();
      entries.emplace(spec, entry);
      mine = true;
    }
  }
  if (!mine) return entry.get();  // compiled, or being compiled by another thread
  // This thread compiles; others asking for the same key wait on the future.
  try {
    promise.set_value(std::make_shared<const CompiledKernel>(compileKernel(spec)));
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu);
      entries.erase(spec);  // a failed compile is not cached: the next call tries again
    }
    promise.set_exception(std::current_exception());
  }
  return entry.get();
}

}  // namespace ssmjit
