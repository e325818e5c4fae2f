// The tensor-parallel shard of a Mamba-2 layer (Mamba2Sharding.h).
#include "runtime/model/Mamba2Sharding.h"

#include <string>

#include "runtime/reference/ElementAccess.h"
#include "ssmjit/error.h"

namespace ssmjit::model {

int64_t TensorSlice::size() const {
  int64_t n = 0;
  for (const RowRange& r : ranges) n += r.count;
  return n;
}

Mamba2LayerShard planMamba2Shard(const Mamba2Dims& d, int rank, int ranks) {
  const std::string who = "tensor parallelism over " + std::to_string(ranks) + " ranks (t)";
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw Error(Error::Kind::InvalidArgument,
                who + ": rank " + std::to_string(rank) + ", expected [0, " + std::to_string(ranks) + ")");
  if (d.groups % ranks != 0 || d.heads % ranks != 0)
    throw Error(Error::Kind::InvalidArgument,
                who + " needs groups G and heads H divisible by t, got G " + std::to_string(d.groups) + ", H " +
                    std::to_string(d.heads) + ", t " + std::to_string(ranks) +
                    " (a B/C group and its gated-norm group stay on one rank)");
  Mamba2LayerShard s;
  s.rank = rank;
  s.ranks = ranks;
  s.local = d;
  s.local.heads = d.heads / ranks;
  s.local.groups = d.groups / ranks;
  const int64_t Di = d.dInner(), GN = d.groups * d.state;
  const int64_t di = s.local.dInner(), gn = s.local.groups * d.state, h = s.local.heads;
  const int64_t r = rank;
  s.inProj = {0, {{r * di, di}, {Di + r * di, di}, {2 * Di + r * gn, gn}, {2 * Di + GN + r * gn, gn},
                  {2 * Di + 2 * GN + r * h, h}}};
  s.conv = {0, {{r * di, di}, {Di + r * gn, gn}, {Di + GN + r * gn, gn}}};
  s.heads = {0, {{r * h, h}}};
  s.channels = {0, {{r * di, di}}};
  s.outProj = {1, {{r * di, di}}};
  s.outProjBias = rank == 0;
  return s;
}

std::vector<int64_t> sliceTensor(const TensorView& src, const TensorSlice& slice, DType dtype, std::vector<char>& out,
                                 double (*map)(double)) {
  if (slice.axis < 0 || slice.axis >= src.ndim)
    throw Error(Error::Kind::Internal, "sliceTensor: axis " + std::to_string(slice.axis) + " of a " +
                                           std::to_string(src.ndim) + "-d tensor");
  std::vector<int64_t> axisIndex;  // the source index of each output position along the axis
  for (const RowRange& r : slice.ranges) {
    if (r.start < 0 || r.start + r.count > src.shape[slice.axis])
      throw Error(Error::Kind::Internal, "sliceTensor: rows [" + std::to_string(r.start) + ", " +
                                             std::to_string(r.start + r.count) + ") past " + src.shapeString());
    for (int64_t i = 0; i < r.count; ++i) axisIndex.push_back(r.start + i);
  }
  std::vector<int64_t> shape(src.shape, src.shape + src.ndim);
  shape[slice.axis] = static_cast<int64_t>(axisIndex.size());
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  out.resize(static_cast<size_t>(n * dtypeBytes(dtype)));
  const TensorView dst = TensorView::contiguous(out.data(), dtype, {n}, DeviceKind::CPU);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); ++k)
      off += (static_cast<int>(k) == slice.axis ? axisIndex[idx[k]] : idx[k]) * src.strides[k];
    const double v = reference::loadElement(src, off);
    reference::storeElement(dst, i, map ? map(v) : v);
    for (int k = static_cast<int>(idx.size()) - 1; k >= 0 && ++idx[k] == shape[k]; --k) idx[k] = 0;
  }
  return shape;
}

}  // namespace ssmjit::model
