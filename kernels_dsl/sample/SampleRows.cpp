#include "kernels_dsl/sample/SampleRows.h"

namespace ssmjit::kernels {
using namespace dsl;

Value sampleRowKey(KernelBuilder& k, Value b) {
  return k.ifElse(
      k.arg("has_idx"), [&] { return std::vector<Value>{k.load(k.arg("idx"), b * k.arg("s_idx_b"))}; },
      [&] { return std::vector<Value>{b}; })[0];
}

}  // namespace ssmjit::kernels
