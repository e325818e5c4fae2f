// What a kernel's PTX says about its global memory accesses: how many load and store instructions
// move how many bytes each. `ssmjit inspect --stage resources` prints it, so that a shape whose
// rows fall off 16-byte accesses (an odd row length, a misaligned pointer) shows before it runs.
#pragma once
#include <map>
#include <string>

namespace ssmjit::tool {

struct GlobalAccesses {
  std::map<int, int> loads, stores;  // bytes an instruction moves -> instructions (static count)
};

GlobalAccesses globalAccesses(const std::string& ptx);
// "loads 10 x 16 B, 40 x 2 B; stores 16 x 2 B", widest first.
std::string describe(const GlobalAccesses& a);

}  // namespace ssmjit::tool
