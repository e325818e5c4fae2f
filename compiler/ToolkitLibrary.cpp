#include "compiler/ToolkitLibrary.h"

#include "compiler/Knobs.h"

namespace ssmjit {

std::vector<std::string> toolkitLibraryCandidates(std::initializer_list<const char*> names) {
  std::vector<std::string> candidates(names.begin(), names.end());
  std::vector<std::string> roots;
  for (const char* knob : {"CUDA_HOME", "CUDA_PATH"})
    if (std::string root = knobValue(knob); !root.empty()) roots.push_back(root);
  roots.push_back("/usr/local/cuda");
  for (const auto& r : roots)
    for (const char* sub : {"/lib64/", "/lib/"})
      for (const char* lib : names) candidates.push_back(r + sub + lib);
  return candidates;
}

}  // namespace ssmjit
