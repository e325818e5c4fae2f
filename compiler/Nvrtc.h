// NVRTC, loaded with dlopen so that a binary without the CUDA toolkit still starts.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "CompiledKernel.h"

namespace ssmjit {

struct NvrtcResult {
  std::string ptx;
  std::vector<char> cubin;  // empty if the arch has no SASS target (e.g. "compute_90")
  std::string log;
  ResourceUsage resources;  // see kernelResources; all -1 for a compute_ target
};

// Is NVRTC loadable here? Returns false with a reason instead of throwing.
bool nvrtcAvailable(std::string* why = nullptr);
// NVRTC's version as "major.minor".
std::string nvrtcVersion();
// Version and build: "13.0 build-id 65be0db3..." (the GNU build id of the loaded library). Part of
// every disk-cache key. Throws Error(Unavailable) when NVRTC cannot be loaded.
std::string nvrtcIdentity();

// The options nvrtcCompile passes for `arch` (before its extraOptions), SSMJIT_NVRTC_OPTIONS
// included. Part of every disk-cache key.
std::vector<std::string> nvrtcOptions(const std::string& arch);

// Compiles `source` (named `name` in messages) for `arch` ("sm_90a", "sm_80", ...). `headers` are
// in-memory include files (name, content). Throws ssmjit::Error with the full log on failure.
NvrtcResult nvrtcCompile(const std::string& source, const std::string& name, const std::string& arch,
                         const std::vector<std::pair<std::string, std::string>>& headers,
                         const std::vector<std::string>& extraOptions = {});

// Parses ptxas' verbose report (-Xptxas=-v, which nvrtcCompile always passes for sm_ targets) into
// ResourceUsage. Only entry functions count; with several, each figure is the maximum over them.
// localBytes is an entry's "cumulative stack size" (callees included) where ptxas prints one, else
// its stack frame. Figures ptxas did not print stay -1.
ResourceUsage parsePtxasResources(const std::string& log);

// The resource figures of a compile, as nvrtcCompile fills NvrtcResult::resources:
//   registers, sharedBytes (the kernel's own static shared memory, as ptxas counts it: without the
//   block sm_90+ reserves) and localBytes (stack per thread, callees' frames included) come from
//   the CUBIN (CubinInfo.h), which is there however NVRTC produced it; from ptxas' report in `log`
//   only where the CUBIN lacks them.
//   spillStoreBytes / spillLoadBytes come from ptxas' report only. NVRTC leaves that report out of
//   the log when the driver's compute cache (~/.nv/ComputeCache) served the compile; then they are
//   0 if no kernel has a stack (spills live in the stack frame; not assumed when `ptx` opts into
//   spilling to shared memory) and -1 (unknown) otherwise.
// With several kernels each figure is the maximum over them.
ResourceUsage kernelResources(const std::vector<char>& cubin, const std::string& log, const std::string& ptx);

}  // namespace ssmjit
