// NVRTC, loaded with dlopen so that a binary without the CUDA toolkit still starts.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "CompiledKernel.h"

namespace ssmjit {

struct NvrtcResult {
  std::string ptx;
  std::vector<char> cubin;   // empty if the arch has no SASS target (e.g. "compute_90")
  std::string log;
  ResourceUsage resources;   // parsed from ptxas' verbose output in the log
};

// Is NVRTC loadable here? Returns false with a reason instead of throwing.
bool nvrtcAvailable(std::string* why = nullptr);
// NVRTC's version as "major.minor" (part of every cache key).
std::string nvrtcVersion();

// Compiles `source` (named `name` in messages) for `arch` ("sm_90a", "sm_80", ...). `headers` are
// in-memory include files (name, content). Throws ssmjit::Error with the full log on failure.
NvrtcResult nvrtcCompile(const std::string& source, const std::string& name, const std::string& arch,
                         const std::vector<std::pair<std::string, std::string>>& headers,
                         const std::vector<std::string>& extraOptions = {});

// Parses ptxas' verbose report (-Xptxas=-v, which nvrtcCompile always passes for sm_ targets) into
// ResourceUsage. Only entry functions count; with several, each figure is the maximum over them.
// Figures ptxas did not print stay -1.
ResourceUsage parsePtxasResources(const std::string& log);

}  // namespace ssmjit
