// The argument check of embedding (see EmbeddingCheck.h and the contract in ssmjit/ops.h).
#include "runtime/ops/EmbeddingCheck.h"

#include <climits>
#include <string>

#include "runtime/ops/ArgCheck.h"

namespace ssmjit::detail {

EmbeddingDims checkEmbeddingArgs(const EmbeddingArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  EmbeddingDims d;
  Dim eIds[1] = {{-1, "tokens"}};
  c.lead("ids", a.ids, eIds, 1);
  d.T = eIds[0].size = a.ids.shape[0];
  c.tensor("ids", a.ids, eIds, 1, kIndexTypes, false);
  if (d.T > INT32_MAX)  // one program a token on the grid's x axis
    c.fail("ids has " + std::to_string(d.T) + " tokens, expected at most " + std::to_string(INT32_MAX));

  c.required("table", a.table);
  Dim eTable[2] = {{-1, "vocab"}, {-1, "dim"}};
  c.rank("table", a.table, eTable, 2);
  d.V = eTable[0].size = a.table.shape[0];
  d.D = eTable[1].size = a.table.shape[1];
  c.tensor("table", a.table, eTable, 2, kFloat16Or32, false);

  c.required("out", a.out);
  const Dim eOut[2] = {{d.T, "tokens"}, {d.D, "dim"}};
  c.tensor("out", a.out, eOut, 2, kF32Only | dtypeBit(a.table.dtype), false);
  return d;
}

}  // namespace ssmjit::detail
