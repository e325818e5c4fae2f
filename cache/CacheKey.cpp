#include "cache/CacheKey.h"

#include "compiler/BuildInfo.h"
#include "compiler/Hash.h"
#include "compiler/Knobs.h"
#include "compiler/Nvrtc.h"
#include "compiler/Pipeline.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::cache {

CacheKey cacheKeyFor(const Specialization& spec) {
  // Process-wide parts first (computed once: NVRTC's identity loads the library).
  static const std::string fixed = [] {
    return std::string("ssmjit-kernel-cache-key 1\n") + "build=" + buildId() + "\n" + "nvrtc=" + nvrtcIdentity() +
           "\n" + "device-lib=" + deviceLibHash() + "\n";
  }();
  const dsl::KernelDef& def = dsl::findKernel(spec.kernel);
  std::string options;
  for (const std::string& o : nvrtcOptions(spec.arch)) options += (options.empty() ? "" : " ") + o;
  CacheKey key;
  key.text = fixed + "kernel=" + spec.kernel + "\n" + "kernel-definition=" + def.definitionHash + "\n" +
             "arch=" + spec.arch + "\n" + "options=" + options + "\n" + codeChangingKnobs() +
             "spec=" + spec.canonical() + "\n";
  key.fileStem = hash::hex(key.text, 128);
  return key;
}

}  // namespace ssmjit::cache
