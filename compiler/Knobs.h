// Every environment variable ssmjit reads, declared in one place: what it does and whether it
// changes generated code. Code-changing knobs are part of every disk-cache key (Triton's lesson:
// a knob missing from the key serves stale binaries); neutral ones are declared so, explicitly.
#pragma once
#include <string>
#include <vector>

namespace ssmjit {

struct Knob {
  const char* name;
  bool changesCode;  // true: its value goes into the disk-cache key
  const char* help;  // one line, for `ssmjit --help` and the README
};

// All knobs, in the order `ssmjit --help` lists them.
const std::vector<Knob>& knobs();

// The value of a declared knob, "" when unset. Throws Error(Internal) for a name knobs() does not
// declare, so that no code reads an undeclared variable.
std::string knobValue(const char* name);

// "NAME=value\n" for every code-changing knob, in declaration order (unset ones as "NAME=\n"):
// the environment's part of a disk-cache key.
std::string codeChangingKnobs();

}  // namespace ssmjit
