#include "compiler/ToolkitLibrary.h"

#include <dlfcn.h>

#include <vector>

#include "compiler/Knobs.h"

namespace ssmjit {

void* openToolkitLibrary(std::initializer_list<const char*> names, std::string* opened, std::string* tried) {
  std::vector<std::string> candidates(names.begin(), names.end());
  std::vector<std::string> roots;
  for (const char* knob : {"CUDA_HOME", "CUDA_PATH"})
    if (std::string root = knobValue(knob); !root.empty()) roots.push_back(root);
  roots.push_back("/usr/local/cuda");
  for (const auto& r : roots)
    for (const char* sub : {"/lib64/", "/lib/"})
      for (const char* lib : names) candidates.push_back(r + sub + lib);
  for (const auto& name : candidates) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *opened = name;
      return h;
    }
    const char* e = dlerror();
    *tried += "\n  " + name + ": " + (e ? e : "unknown dlopen error");
  }
  return nullptr;
}

}  // namespace ssmjit
