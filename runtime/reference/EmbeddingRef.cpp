// The float64 reference of embedding (see ssmjit/reference.h).
#include <string>
#include <vector>

#include "runtime/ops/EmbeddingCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {

void embedding(const EmbeddingArgs& a) {
  const detail::EmbeddingDims d = detail::checkEmbeddingArgs(a, DeviceKind::CPU, "reference::embedding");
  std::vector<int64_t> rows(static_cast<size_t>(d.T));
  for (int64_t t = 0; t < d.T; ++t) {
    const int64_t id = loadIndex(a.ids, t * a.ids.strides[0]);
    if (id < 0 || id >= d.V)
      throw Error(Error::Kind::InvalidArgument, "reference::embedding: ids[" + std::to_string(t) + "] = " +
                                                    std::to_string(id) + ", expected a row of table in [0, " +
                                                    std::to_string(d.V) + ")");
    rows[static_cast<size_t>(t)] = id;
  }
  const TensorView &tb = a.table, &out = a.out;
  for (int64_t t = 0; t < d.T; ++t)
    for (int64_t j = 0; j < d.D; ++j)
      storeElement(out, t * out.strides[0] + j * out.strides[1],
                   loadElement(tb, rows[static_cast<size_t>(t)] * tb.strides[0] + j * tb.strides[1]));
}

}  // namespace ssmjit::reference
