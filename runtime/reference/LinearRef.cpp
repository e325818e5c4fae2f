// Float64 references of linear and embedding (see ssmjit/reference.h).
#include <string>
#include <vector>

#include "runtime/ops/LinearCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {

void linear(const LinearArgs& a) {
  const detail::LinearDims d = detail::checkLinearArgs(a, DeviceKind::CPU, "reference::linear");
  const TensorView &x = a.x, &w = a.weight, &y = a.y;
  for (int64_t m = 0; m < d.M; ++m)
    for (int64_t n = 0; n < d.N; ++n) {
      double acc = a.bias.defined() ? loadElement(a.bias, n * a.bias.strides[0]) : 0.0;
      for (int64_t k = 0; k < d.K; ++k)
        acc += loadElement(x, m * x.strides[0] + k * x.strides[1]) * loadElement(w, n * w.strides[0] + k * w.strides[1]);
      storeElement(y, m * y.strides[0] + n * y.strides[1], acc);
    }
}

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
