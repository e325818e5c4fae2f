#include "cache/KernelCache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <unordered_map>

#include "cache/CacheKey.h"
#include "cache/Manifest.h"
#include "compiler/Knobs.h"
#include "kernels_dsl/CompileKernel.h"
#include "ssmjit/enum_name.h"

namespace ssmjit {
namespace {

// SSMJIT_RECORD: one JSON line per specialisation, appended with a single O_APPEND write so that
// lines from several threads or processes never interleave.
void record(const Specialization& spec) {
  const std::string file = knobValue("SSMJIT_RECORD");
  if (file.empty()) return;
  const std::string line = cache::specializationLine(spec);
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  int err = errno;
  if (ok) {
    ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    err = errno;
    ::close(fd);
  }
  static std::once_flag warned;
  if (!ok)
    std::call_once(warned, [&] {
      std::fprintf(stderr, "ssmjit: warning: SSMJIT_RECORD=%s: cannot append (%s); specialisations are not recorded\n",
                   file.c_str(), std::strerror(err));
    });
}

}  // namespace

const char* kernelSourceName(KernelSource s) {
  return enumName<KernelSource::Compiled>(s, {"memory", "disk", "compiled"});
}

cache::DiskCache& processDiskCache() {
  static cache::DiskCache disk(cache::DiskCacheConfig::fromEnvironment());
  return disk;
}

KernelLookup lookupOrCompileKernel(const Specialization& spec) {
  using Kernel = std::shared_ptr<const CompiledKernel>;
  using Entry = std::shared_future<Kernel>;
  static std::mutex mu;
  static std::unordered_map<Specialization, Entry, SpecializationHash> entries;
  std::promise<Kernel> promise;
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
  // Compiled or loaded, or being so by another thread of this process.
  if (!mine) return {entry.get(), KernelSource::Memory};

  try {
    record(spec);
    KernelLookup out;
    const bool useDisk = knobValue("SSMJIT_ALWAYS_COMPILE") != "1";
    cache::CacheKey key;
    if (useDisk) {
      key = cache::cacheKeyFor(spec);
      out.kernel = processDiskCache().load(key);
      out.source = KernelSource::Disk;
    }
    if (!out.kernel) {
      out.kernel = std::make_shared<const CompiledKernel>(compileKernel(spec));
      out.source = KernelSource::Compiled;
      if (useDisk) processDiskCache().store(key, *out.kernel);
    }
    promise.set_value(out.kernel);
    return out;
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu);
      entries.erase(spec);  // a failed compile is not cached: the next call tries again
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

}  // namespace ssmjit
