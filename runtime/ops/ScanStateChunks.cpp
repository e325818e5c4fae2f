#include "runtime/ops/ScanStateChunks.h"

namespace ssmjit::detail {

SelectiveScanArgs narrowStates(const SelectiveScanArgs& a, bool bVarying, bool cVarying, int64_t n0, int64_t nc) {
  SelectiveScanArgs c = a;
  c.A = a.A.narrow(1, n0, nc);
  c.B = a.B.narrow(bVarying ? 2 : 1, n0, nc);
  c.C = a.C.narrow(cVarying ? 2 : 1, n0, nc);
  c.initial_states = a.initial_states.narrow(2, n0, nc);
  c.final_states = a.final_states.narrow(2, n0, nc);
  return c;
}

}  // namespace ssmjit::detail
