#include "cache/KernelCache.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <thread>
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

using Kernel = std::shared_ptr<const CompiledKernel>;
using Entry = std::shared_future<Kernel>;

// Every specialisation this process has compiled or loaded, or is compiling or loading now.
struct Entries {
  std::mutex mu;
  std::unordered_map<Specialization, Entry, SpecializationHash> map;
};
Entries& entries() {
  static Entries e;
  return e;
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
  Entries& e = entries();
  std::promise<Kernel> promise;
  Entry entry;
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    auto it = e.map.find(spec);
    if (it != e.map.end()) {
      entry = it->second;
    } else {
      entry = promise.get_future().share();
      e.map.emplace(spec, entry);
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
      std::lock_guard<std::mutex> lock(e.mu);
      e.map.erase(spec);  // a failed compile is not cached: the next call tries again
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

bool kernelKnown(const Specialization& spec) {
  Entries& e = entries();
  std::lock_guard<std::mutex> lock(e.mu);
  return e.map.count(spec) != 0;
}

int compileThreads() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<KernelLookup> lookupOrCompileKernels(const std::vector<Specialization>& specs, int threads,
                                                 size_t required) {
  std::vector<KernelLookup> out(specs.size());
  // The first copy of each specialisation is a job; later copies take its kernel.
  std::vector<size_t> jobs, firstOf(specs.size());
  {
    std::unordered_map<Specialization, size_t, SpecializationHash> first;
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto [it, isNew] = first.emplace(specs[i], i);
      firstOf[i] = it->second;
      if (isNew) jobs.push_back(i);
    }
  }
  std::vector<std::exception_ptr> errors(specs.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  // Jobs are taken in order, so when job j fails every job before j has been taken and finishes.
  auto worker = [&] {
    for (size_t t = next++; t < jobs.size() && !failed; t = next++) {
      const size_t i = jobs[t];
      try {
        out[i] = lookupOrCompileKernel(specs[i]);
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  };
  const size_t n = std::min(jobs.size(), static_cast<size_t>(threads > 0 ? threads : compileThreads()));
  std::vector<std::thread> pool;
  for (size_t i = 1; i < n; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < std::min(required, specs.size()); ++i)
    if (errors[i]) std::rethrow_exception(errors[i]);
  for (size_t i = 0; i < specs.size(); ++i)
    if (firstOf[i] != i) out[i] = {out[firstOf[i]].kernel, KernelSource::Memory};
  return out;
}

}  // namespace ssmjit
