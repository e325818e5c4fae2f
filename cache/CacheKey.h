// The disk-cache key of a specialisation: everything that decides the bytes NVRTC produces.
#pragma once
#include <string>

#include "compiler/Specialization.h"

namespace ssmjit::cache {

struct CacheKey {
  // One "name=value" line per ingredient: key format, kernel and its definition hash, ssmjit build
  // id, NVRTC version and build, exact arch, NVRTC options, device-library hash, every
  // code-changing environment knob (compiler/Knobs.h), and the specialisation's canonical text.
  // Stored in the blob and compared on read.
  std::string text;
  std::string fileStem;  // 32 hex digits: the 128-bit content hash of `text`, the blob's file name
};

// Needs NVRTC loadable (its version is part of the key); throws Error(Unavailable) otherwise.
CacheKey cacheKeyFor(const Specialization& spec);

}  // namespace ssmjit::cache
