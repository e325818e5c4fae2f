#include "tools/DeviceFill.h"

#include <algorithm>

#include "tools/problems/HostTensor.h"

namespace ssmjit::tool {

void fillDeviceUniform(DeviceBuffer& buf, size_t offset, DType dtype, int64_t count, double lo, double hi,
                       std::mt19937_64& rng) {
  const int64_t block = std::min<int64_t>(count, int64_t(1) << 20);
  const size_t eb = static_cast<size_t>(dtypeBytes(dtype));
  testing::HostTensor host = testing::makeTensor(dtype, {block}, testing::Layout{}, rng);
  testing::fillUniform(host, rng, lo, hi);
  for (int64_t done = 0; done < count; done += block) {
    const int64_t n = std::min(block, count - done);
    buf.uploadBytes(host.bytes.data(), static_cast<size_t>(n) * eb, offset + static_cast<size_t>(done) * eb);
  }
}

DeviceTensor::DeviceTensor(DType t, std::initializer_list<int64_t> shape, double lo, double hi, std::mt19937_64& rng)
    : view(TensorView::contiguous(nullptr, t, shape)) {
  fill(lo, hi, rng);
}

DeviceTensor::DeviceTensor(const TensorView& like, double lo, double hi, std::mt19937_64& rng) : view(like) {
  int64_t stride = 1;
  for (int d = view.ndim - 1; d >= 0; --d) view.strides[d] = stride, stride *= view.shape[d];
  fill(lo, hi, rng);
}

void DeviceTensor::fill(double lo, double hi, std::mt19937_64& rng) {
  const int64_t n = view.numel();
  buf = DeviceBuffer(static_cast<size_t>(n * dtypeBytes(view.dtype)));
  if (lo == 0 && hi == 0)
    buf.fill(0);
  else
    fillDeviceUniform(buf, 0, view.dtype, n, lo, hi, rng);
  view.data = buf.data();
}

}  // namespace ssmjit::tool
