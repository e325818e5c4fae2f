#include "compiler/DynamicLibrary.h"

#include <dlfcn.h>

namespace ssmjit {

DynamicLibrary::DynamicLibrary(const std::vector<std::string>& candidates) {
  for (const auto& name : candidates) {
    if ((handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      name_ = name;
      return;
    }
    const char* e = dlerror();
    lastError_ = e ? e : "unknown dlopen error";
    tried_ += "\n  " + name + ": " + lastError_;
  }
}

void* DynamicLibrary::find(std::initializer_list<const char*> symbols) {
  if (handle_) {  // dlsym with a null handle would search the whole process
    for (const char* s : symbols)
      if (void* p = dlsym(handle_, s)) return p;
  }
  if (!missing_.empty()) missing_ += ", ";
  missing_ += *symbols.begin();
  return nullptr;
}

std::string DynamicLibrary::whyUnusable(const std::string& what, const std::string& howToFind,
                                        const std::string& needs) const {
  if (!handle_) return what + " not found (" + howToFind + "); tried:" + tried_;
  if (!missing_.empty()) return name_ + " lacks the entry points " + missing_ + needs;
  return "";
}

}  // namespace ssmjit
