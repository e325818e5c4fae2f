// Pre-warm manifests: lists of kernels to compile ahead of serving. Two kinds of entries:
//   a specialisation, exactly as the runtime used it (what SSMJIT_RECORD appends):
//     {"kernel": "selective_state_update", "arch": "sm_90a", "bindings": [["H", 80], ["P", 64], ...]}
//   an op call, in the vocabulary of `ssmjit inspect`'s options, expanded by the tool into the
//   specialisations the op builds (list values multiply out):
//     {"op": "ssu-tokens", "archs": ["sm_90a", "sm_80"], "heads": 80, "tokens": [2, 4, 8],
//      "state-dtype": ["fp32", "bf16"], "no-z": true}
// A file is either one JSON document {"ssmjit_manifest": 1, "entries": [...]} or JSON Lines (one
// entry object per line; blank lines ignored). Parse errors name the line and what was expected.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/Specialization.h"

namespace ssmjit::cache {

inline constexpr int kManifestVersion = 1;

struct OpCall {
  std::string op;                  // "ssu", "ssu-tokens", ...: checked by the tool, not here
  std::vector<std::string> archs;  // at least one
  // Option name (without "--") -> its values, in file order. Numbers and strings come as their
  // text; a boolean true as {"true"}, false as {"false"}; a list as several values.
  std::vector<std::pair<std::string, std::vector<std::string>>> options;
};

struct ManifestEntry {
  enum class Kind { Specialization, OpCall } kind = Kind::Specialization;
  Specialization spec;  // Kind::Specialization
  OpCall call;          // Kind::OpCall
  int line = 0;         // 1-based line of the entry in its file (for messages)
};

struct Manifest {
  std::vector<ManifestEntry> entries;
};

// Throws Error(InvalidArgument) "<source>:<line>: ..." naming what was expected and what came.
Manifest parseManifest(const std::string& text, const std::string& source);

// One JSON Lines line (with the trailing '\n') for a specialisation entry.
std::string specializationLine(const Specialization& spec);

// A whole manifest document (what `parseManifest` reads back equal).
std::string manifestDocument(const Manifest& m);

}  // namespace ssmjit::cache
