// The problems `ssmjit demo` runs, one or more per op family, on small shapes of the Mamba models:
// the tests' problems (tools/problems: random inputs, poisoned outputs), the op's call on device
// copies or its float64 reference on the host tensors, and the outputs to compare with the bound a
// correct kernel stays under.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/Tolerance.h"

namespace ssmjit::tool {

// One output of a call: tensor `index` of DemoCase::tensors(). Elements whose first index is
// marked in `written` (rows, slots) are compared by value, within the GPU tests' bound for the
// tensor's dtype and the fp32 arithmetic that produced it (tools/problems/Tolerance.h); every other
// byte must keep the value it had before the call.
struct DemoOutput {
  std::string name;
  size_t index = 0;
  std::vector<char> written;
  testing::Fp32Error fp32;
  double twiceRounded = 0;  // Bound::twiceRounded
};

// A call bound to one set of tensors: the kernels the op compiles for it on an arch, running it,
// and the bytes tensor k holds afterwards.
struct DemoCall {
  std::function<std::vector<Specialization>(const std::string& arch)> kernels;
  std::function<void(Stream)> run;
  std::function<std::vector<uint8_t>(size_t k)> bytes;
};

class DemoCase {
 public:
  DemoCase(std::string family, std::string shape) : family(std::move(family)), shape(std::move(shape)) {}
  virtual ~DemoCase() = default;
  const std::string family;  // the op, in `ssmjit inspect --op` words where it has them
  const std::string shape;   // "H80 P64 N128 b=4 state bf16 in bf16 pads 1"

  // Every tensor of the problem, in its problem's all() order: inputs as drawn, outputs poisoned
  // (until hostCall().run writes them).
  virtual std::vector<testing::HostTensor*> tensors() = 0;
  virtual std::vector<DemoOutput> outputs() = 0;
  // The float64 reference on tensors() (kernels: those of the same call on host views, which stand
  // in for device buffers).
  virtual DemoCall hostCall() = 0;
  // The op on fresh device copies of tensors() (needs a GPU).
  virtual DemoCall deviceCall() = 0;
};

// The demo's cases; case k draws its inputs from seed + k. Each maker builds a fresh problem,
// the same one on every call.
std::vector<std::function<std::unique_ptr<DemoCase>()>> demoCases(uint64_t seed);

}  // namespace ssmjit::tool
